#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! Parquet files written by pyarrow and Hugging Face `datasets` (the committed fixtures, see
//! `fixtures/parquet/make.py`), read through a local store and through the in-process S3
//! server behind the delay proxy, compared with what pyarrow read back; and damaged files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_core::parquet::Parquet;
use loader_core::{
    DataLoader, Dataset, DynStorage, ErrorPolicy, RawBatch, SampleInfo, ShardOrder, from_url,
};
use loader_testkit::watchdog::{HANG_LIMIT, within};
use loader_testkit::{DelayProxy, S3Server};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet")
}

fn local(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

#[derive(serde::Deserialize, Debug)]
struct Expected {
    row_groups: usize,
    offset_index: bool,
    rows: Vec<Row>,
}

#[derive(serde::Deserialize, Debug, Clone)]
struct Row {
    label: serde_json::Value,
    image_len: Option<u64>,
    image_sum: Option<u64>,
}

fn expected() -> BTreeMap<String, Expected> {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

const CLASSES: [&str; 3] = ["cat", "dog", "fox"];

/// The class a row's expected label means: an index, or a name's place among the classes.
fn class_of(label: &serde_json::Value) -> i64 {
    match label {
        serde_json::Value::Number(n) => n.as_i64().unwrap(),
        serde_json::Value::String(s) => CLASSES.iter().position(|c| c == s).unwrap() as i64,
        other => panic!("label {other}"),
    }
}

/// A sample as delivered: (index, label, image length, image byte sum).
type Seen = (u64, i64, u64, u64);

fn loader(store: DynStorage, dataset: Dataset) -> loader_core::DataLoaderBuilder<Seen, Vec<Seen>> {
    DataLoader::builder(store, dataset).map(
        |bytes: Bytes, info: &SampleInfo| {
            let sum = bytes.iter().map(|&b| u64::from(b)).sum::<u64>() % (1 << 32);
            Ok((
                info.index,
                info.label.class().unwrap_or(-1),
                bytes.len() as u64,
                sum,
            ))
        },
        |raw: RawBatch<Seen>| Ok(raw.samples.into_iter().map(|(_, s)| s).collect()),
    )
}

fn one_pass(loader: &mut DataLoader<Seen, Vec<Seen>>) -> Vec<Seen> {
    let mut seen: Vec<Seen> = loader.flat_map(|b| b.unwrap()).collect();
    seen.sort();
    seen
}

fn check(name: &str, dataset: &Dataset, want: &Expected, seen: &[Seen]) {
    assert_eq!(dataset.len(), want.rows.len(), "{name}");
    assert_eq!(seen.len(), want.rows.len(), "{name}: each row once");
    for ((index, label, len, sum), row) in seen.iter().zip(&want.rows) {
        assert_eq!(*label, class_of(&row.label), "{name} row {index}: label");
        assert_eq!(
            Some(*len),
            row.image_len,
            "{name} row {index}: image length"
        );
        assert_eq!(Some(*sum), row.image_sum, "{name} row {index}: other bytes");
    }
}

#[test]
fn files_written_by_pyarrow_and_datasets_read_as_pyarrow_reads_them_back() {
    let expected = expected();
    assert_eq!(expected.len(), 20, "the fixtures of make.py");
    let store = local(&fixtures());
    for (name, want) in expected.iter().filter(|(n, _)| !n.contains("null")) {
        let dataset = Parquet::new()
            .load_blocking(&store, std::slice::from_ref(name))
            .unwrap();
        // Class names from datasets' ClassLabel and from string labels; plain integers
        // name no class.
        let named = name.starts_with("hf-") || name.contains("names");
        let classes: &[&str] = if named { &CLASSES } else { &[] };
        assert_eq!(dataset.classes(), classes, "{name}: classes");
        assert_eq!(dataset.shards().len(), 1, "{name}");
        let units = dataset.shards()[0].chunks.len();
        // pyarrow's files have pages of about three images (datasets' one page of 1 MiB holds
        // them all); a dictionary's pages are one unit with it (pyarrow's default, which
        // the binary-column file keeps).
        let dictionary = name.contains("dict") || name.contains("binary");
        if want.offset_index && name.starts_with("pa-") && !dictionary {
            assert!(
                units > want.row_groups,
                "{name}: {units} units, read a page at a time"
            );
        } else {
            assert!(units >= want.row_groups, "{name}: {units} units");
        }
        if name.contains("fallback") {
            // The dictionary with the pages that use it, then each plain page alone.
            let rows: Vec<usize> = dataset.shards()[0].chunks.iter().map(|c| c.len()).collect();
            assert!(rows.len() > 2 && rows[0] > rows[1], "{name}: {rows:?}");
        }
        for fetch in [
            loader_core::Fetch::Async { max_in_flight: 8 },
            loader_core::Fetch::Threads { threads: 3 },
        ] {
            let mut loader = loader(Arc::clone(&store), dataset.clone())
                .batch_size(7)
                .shuffle(true)
                .seed(3)
                .fetch(fetch)
                .build()
                .unwrap();
            check(name, &dataset, want, &one_pass(&mut loader));
        }
    }
}

#[test]
fn datasets_class_label_names_become_the_classes() {
    let store = local(&fixtures());
    let dataset = Parquet::new()
        .load_blocking(&store, &["hf-datasets.parquet".into()])
        .unwrap();
    assert_eq!(dataset.classes(), CLASSES);
    assert!(dataset.has_labels());
    let none = Parquet::new()
        .label_column("")
        .load_blocking(&store, &["hf-datasets.parquet".into()])
        .unwrap();
    assert!(!none.has_labels());
    let err = Parquet::new()
        .image_column("picture")
        .load_blocking(&store, &["hf-datasets.parquet".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hf-datasets.parquet") && err.contains("\"picture\""),
        "{err}"
    );
    assert!(err.contains("image.bytes"), "lists the columns: {err}");
}

#[test]
fn parquet_through_s3_behind_the_delay_proxy_a_get_per_page_in_file_local_order() {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let files = [
        "pa-snappy-plain.parquet",
        "pa-zstd-dict.parquet",
        "hf-datasets.parquet",
    ];
    for f in files {
        std::fs::copy(fixtures().join(f), dir.path().join("data").join(f)).unwrap();
    }
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let store = from_url("s3://data", server.options_for(&proxy.url())).unwrap();
    let keys: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
    let dataset = Parquet::new().load_blocking(&store, &keys).unwrap();
    let rows: Vec<Row> = files
        .iter()
        .flat_map(|f| expected[*f].rows.clone())
        .collect();
    assert_eq!(dataset.len(), rows.len());
    let units: u64 = dataset.shards().iter().map(|s| s.chunks.len() as u64).sum();
    for order in [ShardOrder::Local, ShardOrder::Global] {
        let before = proxy.stats().gets;
        let mut loader = loader(Arc::clone(&store), dataset.clone())
            .batch_size(8)
            .shuffle(true)
            .seed(9)
            .shard_order(order)
            .epochs(2)
            .build()
            .unwrap();
        for epoch in 0..2 {
            let seen = one_pass(&mut loader);
            let all = Expected {
                row_groups: 0,
                offset_index: true,
                rows: rows.clone(),
            };
            check(&format!("{order:?} epoch {epoch}"), &dataset, &all, &seen);
        }
        let gets = proxy.stats().gets - before;
        // Each unit (a page, or a dictionary with its pages) read once an epoch, in either
        // order: a global permutation keeps a page for its rows in the reads ahead, which
        // here span the whole epoch.
        assert_eq!(gets, 2 * units, "{order:?}: GETs");
    }
}

#[test]
fn a_row_without_an_image_is_an_error_naming_file_and_row_or_a_skip() {
    let store = local(&fixtures());
    let dataset = Parquet::new()
        .load_blocking(&store, &["pa-null-image.parquet".into()])
        .unwrap();
    assert_eq!(dataset.len(), 40);
    let mut failing = loader(Arc::clone(&store), dataset.clone())
        .batch_size(40)
        .build()
        .unwrap();
    let err = failing.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("pa-null-image.parquet"), "{err}");
    assert!(err.contains("row 5"), "{err}");
    assert!(err.contains("null"), "{err}");
    let mut skipping = loader(store, dataset)
        .batch_size(8)
        .error_policy(ErrorPolicy::Skip { max_failures: 1 })
        .build()
        .unwrap();
    let seen = one_pass(&mut skipping);
    assert_eq!(seen.len(), 39);
    assert!(seen.iter().all(|s| s.0 != 5));
}

/// Opens `bytes` as a Parquet file and reads every sample once, under the watchdog: the
/// outcome is the open's error, or what each sample became.
fn open_and_read(bytes: Vec<u8>, what: &str) -> Result<Vec<Result<(), String>>, String> {
    let name = what.to_owned();
    within(HANG_LIMIT, what, move || {
        let what = name;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.parquet"), &bytes).unwrap();
        let store = local(dir.path());
        let dataset = Parquet::new()
            .load_blocking(&store, &["f.parquet".into()])
            .map_err(|e| e.to_string())?;
        let n = dataset.len();
        let mut loader = loader(store, dataset)
            .batch_size(4)
            .error_policy(ErrorPolicy::Skip {
                max_failures: usize::MAX,
            })
            .build()
            .unwrap();
        let mut out = Vec::new();
        for batch in loader.by_ref() {
            match batch {
                Ok(b) => out.extend(b.into_iter().map(|_| Ok(()))),
                Err(e) => out.push(Err(e.to_string())),
            }
        }
        for skipped in loader.take_unreported_skips() {
            out.push(Err(skipped.to_string()));
        }
        assert!(out.len() <= n, "{what}: more samples than rows");
        Ok(out)
    })
}

#[test]
fn truncated_files_are_an_error_naming_the_file() {
    let whole = std::fs::read(fixtures().join("pa-snappy-dict.parquet")).unwrap();
    for len in [
        0,
        4,
        7,
        8,
        12,
        100,
        whole.len() / 2,
        whole.len() - 9,
        whole.len() - 1,
    ] {
        let err = open_and_read(whole[..len].to_vec(), &format!("{len} bytes")).unwrap_err();
        assert!(err.contains("f.parquet"), "{len} bytes: {err}");
    }
}

#[test]
fn damaged_footers_and_offset_indexes_are_errors_never_panics_or_hangs() {
    // Every byte of the file's tail (offset index, column index, footer) damaged in turn:
    // each is an error at open, or a file whose rows load or fail one by one.
    let whole = std::fs::read(fixtures().join("pa-zstd-plain.parquet")).unwrap();
    let tail = 1200.min(whole.len());
    let mut opened = 0;
    for at in (whole.len() - tail..whole.len()).step_by(3) {
        let mut bytes = whole.clone();
        bytes[at] ^= 0x5a;
        if open_and_read(bytes, &format!("byte {at} damaged")).is_ok() {
            opened += 1;
        }
    }
    assert!(opened > 0, "some damage leaves a readable file");
}
