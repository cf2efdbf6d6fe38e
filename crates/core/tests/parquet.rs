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

mod common;
use common::{Seen, copy_tree, local, one_pass, reader, refused, with_each_fetch};
use loader_testkit::{DelayProxy, S3Server};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet")
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

fn check(name: &str, dataset: &Dataset, want: &Expected, seen: &[Seen]) {
    assert_eq!(dataset.len(), want.rows.len(), "{name}");
    assert_eq!(seen.len(), want.rows.len(), "{name}: each row once");
    for (seen, row) in seen.iter().zip(&want.rows) {
        let index = seen.index;
        assert_eq!(
            seen.label,
            class_of(&row.label),
            "{name} row {index}: label"
        );
        assert_eq!(
            Some(seen.len),
            row.image_len,
            "{name} row {index}: image length"
        );
        assert_eq!(
            Some(seen.sum),
            row.image_sum,
            "{name} row {index}: other bytes"
        );
    }
}

#[test]
fn files_written_by_pyarrow_and_datasets_read_as_pyarrow_reads_them_back() {
    let expected = expected();
    assert_eq!(expected.len(), 22, "the fixtures of make.py");
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
        with_each_fetch(&store, &dataset, false, 3, |fetch, seen| {
            check(&format!("{name} {fetch}"), &dataset, want, seen)
        });
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
    let err = refused(
        Parquet::new()
            .image_column("picture")
            .load_blocking(&store, &["hf-datasets.parquet".into()]),
        &["hf-datasets.parquet", "\"picture\""],
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
        let mut loader = reader(Arc::clone(&store), dataset.clone(), false)
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
    // A caller's sampler reads a page once for its rows ahead too, not once per row.
    let before = proxy.stats().gets;
    let mut sampled = reader(Arc::clone(&store), dataset.clone(), false)
        .batch_size(8)
        .sampler(loader_core::sampler::RandomSampler::new(rows.len(), 3).unwrap())
        .epochs(1)
        .build()
        .unwrap();
    let all = Expected {
        row_groups: 0,
        offset_index: true,
        rows: rows.clone(),
    };
    check(
        "a caller's sampler",
        &dataset,
        &all,
        &one_pass(&mut sampled),
    );
    assert_eq!(
        proxy.stats().gets - before,
        units,
        "a caller's sampler: GETs"
    );
}

#[test]
fn a_second_open_reads_nothing_from_the_store_until_the_file_changes() {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for f in ["pa-snappy-dict.parquet", "hf-datasets.parquet"] {
        std::fs::copy(fixtures().join(f), data.join(f)).unwrap();
    }
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(5)).unwrap();
    let store = from_url("s3://data", server.options_for(&proxy.url())).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let parquet = Parquet::new().cache_dir(Some(cache.path().into()));
    let keys = vec![
        "pa-snappy-dict.parquet".to_owned(),
        "hf-datasets.parquet".to_owned(),
    ];
    let read_all = |dataset: &Dataset, files: [&str; 2], what: &str| {
        let rows: Vec<Row> = files
            .iter()
            .flat_map(|f| expected[*f].rows.clone())
            .collect();
        let seen = one_pass(
            &mut reader(Arc::clone(&store), dataset.clone(), false)
                .build()
                .unwrap(),
        );
        let want = Expected {
            row_groups: 0,
            offset_index: true,
            rows,
        };
        check(what, dataset, &want, &seen);
    };
    let gets = |open: &dyn Fn() -> Dataset| {
        let before = proxy.stats().gets;
        let dataset = open();
        (dataset, proxy.stats().gets - before)
    };
    let (first, read) = gets(&|| parquet.load_blocking(&store, &keys).unwrap());
    // A footer each (small files: their label columns are in the tail read with it).
    assert!(read >= 2, "footers of two files: {read} GETs");
    read_all(
        &first,
        ["pa-snappy-dict.parquet", "hf-datasets.parquet"],
        "first open",
    );
    let (second, read) = gets(&|| parquet.load_blocking(&store, &keys).unwrap());
    assert_eq!(read, 0, "the second open's GETs");
    assert_eq!(second.len(), first.len());
    assert_eq!(second.classes(), first.classes());
    read_all(
        &second,
        ["pa-snappy-dict.parquet", "hf-datasets.parquet"],
        "second open",
    );
    // The same key rewritten with other rows (another size and ETag): read again, and
    // its new rows are the ones loaded, never the cached footer's.
    std::fs::copy(
        fixtures().join("pa-zstd-plain.parquet"),
        data.join("pa-snappy-dict.parquet"),
    )
    .unwrap();
    let (third, read) = gets(&|| parquet.load_blocking(&store, &keys).unwrap());
    assert!(
        read >= 1,
        "the changed file's footer read again: {read} GETs"
    );
    read_all(
        &third,
        ["pa-zstd-plain.parquet", "hf-datasets.parquet"],
        "after a rewrite",
    );
    // A cache file that is not one of ours (cut short, or a byte of its spans changed) is
    // read past, not trusted.
    for damage in ["cut", "flipped"] {
        for entry in std::fs::read_dir(cache.path().join("parquet-footer")).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            if damage == "cut" {
                bytes.truncate(bytes.len() / 2);
            } else {
                let last = bytes.len() - 100;
                bytes[last] ^= 0x01;
            }
            std::fs::write(&path, &bytes).unwrap();
        }
        let (fourth, read) = gets(&|| parquet.load_blocking(&store, &keys).unwrap());
        assert!(read >= 2, "{damage} cache files: {read} GETs");
        read_all(
            &fourth,
            ["pa-zstd-plain.parquet", "hf-datasets.parquet"],
            damage,
        );
    }
}

#[test]
fn rows_whose_image_is_a_path_beside_the_file_are_read_from_the_store() {
    // datasets' to_parquet of a dataset built from image files keeps only their paths;
    // pyarrow's mixed file holds row groups of embedded images, of paths, and of both.
    let root = fixtures().join("paths");
    let expected: BTreeMap<String, Expected> =
        serde_json::from_slice(&std::fs::read(root.join("expected.json")).unwrap()).unwrap();
    let store = local(&root);
    for (name, want) in &expected {
        let dataset = Parquet::new()
            .cache_dir(None)
            .load_blocking(&store, std::slice::from_ref(name))
            .unwrap();
        let whole = (0..dataset.len())
            .filter(|&i| dataset.get(i).unwrap().range.is_none())
            .count();
        let paths = if name.starts_with("hf-") { 40 } else { 20 };
        assert_eq!(whole, paths, "{name}: rows read as objects of their own");
        for order in [ShardOrder::Local, ShardOrder::Global] {
            for fetch in [
                loader_core::Fetch::Async { max_in_flight: 8 },
                loader_core::Fetch::Threads { threads: 3 },
            ] {
                let mut loader = reader(Arc::clone(&store), dataset.clone(), false)
                    .batch_size(7)
                    .shuffle(true)
                    .shard_order(order)
                    .seed(5)
                    .fetch(fetch)
                    .build()
                    .unwrap();
                check(name, &dataset, want, &one_pass(&mut loader));
            }
        }
    }
    // Over S3 behind the delay proxy, by URL: a GET per image.
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&root, &dir.path().join("data").join("train"));
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let url = "s3://data/train/hf-paths.parquet";
    let store = from_url(
        &loader_core::store_url(url).unwrap(),
        server.options_for(&proxy.url()),
    )
    .unwrap();
    let dataset = Dataset::open_blocking(url, &context(&store, &[])).unwrap();
    assert_eq!(dataset.get(3).unwrap().key.as_ref(), "images/img003.jpg");
    let before = proxy.stats().gets;
    let seen = one_pass(
        &mut reader(Arc::clone(&store), dataset.clone(), false)
            .shuffle(true)
            // One epoch (an endless loader reads the next one ahead), no hedges: every
            // GET counted is a first read.
            .epochs(1)
            .hedge(None)
            .build()
            .unwrap(),
    );
    check("over S3", &dataset, &expected["hf-paths.parquet"], &seen);
    assert_eq!(proxy.stats().gets - before, 40, "a GET per image");
    // Pages split by path rows are read once, for all their rows, in either order.
    let url = "s3://data/train/pa-mixed.parquet";
    let mixed = Dataset::open_blocking(url, &context(&store, &[])).unwrap();
    let pages: std::collections::BTreeSet<_> = mixed
        .iter()
        .filter_map(|item| item.range.clone().map(|r| (r.start, r.end)))
        .collect();
    for order in [ShardOrder::Local, ShardOrder::Global] {
        let before = proxy.stats().gets;
        let seen = one_pass(
            &mut reader(Arc::clone(&store), mixed.clone(), false)
                .shuffle(true)
                .shard_order(order)
                .epochs(1)
                .hedge(None)
                .build()
                .unwrap(),
        );
        check(
            "mixed over S3",
            &mixed,
            &expected["pa-mixed.parquet"],
            &seen,
        );
        let gets = proxy.stats().gets - before;
        assert_eq!(
            gets,
            pages.len() as u64 + 20,
            "{order:?}: a GET per page and per path"
        );
    }
    // The file without its images beside it (datasets wrote paths relative to where it
    // ran): an error at open naming the row, the key and where paths are read from.
    let bare = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("hf-paths.parquet"),
        bare.path().join("hf-paths.parquet"),
    )
    .unwrap();
    let err = Parquet::new()
        .cache_dir(None)
        .load_blocking(&local(bare.path()), &["hf-paths.parquet".into()])
        .unwrap_err()
        .to_string();
    for part in [
        "hf-paths.parquet",
        "row 0",
        "images/img000.jpg",
        "Parquet file's folder",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
    // Absolute paths to images on no store the dataset is opened on: an error naming the
    // file, the row and the path, at open.
    let err = Parquet::new()
        .cache_dir(None)
        .load_blocking(&local(&root), &["pa-absolute.parquet".into()])
        .unwrap_err()
        .to_string();
    for part in [
        "pa-absolute.parquet",
        "row 0",
        "/nonexistent-loader-fixture/images/img000.jpg",
        "not on",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
}

/// A sample as delivered with its members: (index, label, members as text).
type WithMembers = (u64, i64, Vec<(String, String)>);

#[test]
fn member_columns_are_handed_to_the_stage_with_each_row() {
    let store = local(&fixtures());
    let file = vec!["pa-binary-names.parquet".to_owned()];
    let dataset = Parquet::new()
        .cache_dir(None)
        .member_columns(["caption", "id"])
        .load_blocking(&store, &file)
        .unwrap();
    let mut loader = DataLoader::builder(Arc::clone(&store), dataset.clone())
        .map(
            |_bytes: Bytes, info: &SampleInfo| {
                let members: Vec<(String, String)> = info
                    .members
                    .iter()
                    .map(|(n, b)| (n.to_string(), String::from_utf8(b.to_vec()).unwrap()))
                    .collect();
                Ok((info.index, info.label.class().unwrap(), members))
            },
            |raw: RawBatch<WithMembers>| {
                Ok(raw.samples.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
            },
        )
        .batch_size(6)
        .shuffle(true)
        .build()
        .unwrap();
    let seen: Vec<_> = loader.by_ref().flat_map(|b| b.unwrap()).collect();
    assert_eq!(seen.len(), 40);
    for (index, label, members) in seen {
        // make.py: "a picture of a <class>" beside each row's class, and the row's id.
        let caption = format!("a picture of a {}", CLASSES[label as usize]);
        let id = ("id".to_owned(), index.to_string());
        assert_eq!(
            members,
            [("caption".to_owned(), caption), id],
            "row {index}"
        );
    }
    // Numbers as text: the label column of another file, read as a member.
    let numbers = Parquet::new()
        .cache_dir(None)
        .label_column("")
        .member_columns(["label"])
        .load_blocking(&store, &["pa-zstd-dict.parquet".into()])
        .unwrap();
    let mut loader = DataLoader::builder(Arc::clone(&store), numbers)
        .map(
            |_bytes: Bytes, info: &SampleInfo| Ok((info.index, info.members[0].1.clone())),
            |raw: RawBatch<(u64, Bytes)>| {
                Ok(raw.samples.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
            },
        )
        .build()
        .unwrap();
    let numbers: Vec<(u64, Bytes)> = loader.by_ref().flat_map(|b| b.unwrap()).collect();
    assert_eq!(numbers.len(), 40);
    for (index, value) in numbers {
        assert_eq!(value, (index % 3).to_string().as_bytes(), "row {index}");
    }
    // Refused, with the reason: a missing column, the image or label column, members of
    // rows whose image is a path.
    let refused = |parquet: Parquet, store: &DynStorage, file: &str| {
        parquet
            .cache_dir(None)
            .load_blocking(store, &[file.into()])
            .unwrap_err()
            .to_string()
    };
    let err = refused(
        Parquet::new().member_columns(["nope"]),
        &store,
        "pa-binary-names.parquet",
    );
    assert!(
        err.contains("no member column \"nope\"") && err.contains("caption"),
        "{err}"
    );
    let err = refused(
        Parquet::new().member_columns(["cls"]),
        &store,
        "pa-binary-names.parquet",
    );
    assert!(err.contains("is the image or label column"), "{err}");
    let paths = local(&fixtures().join("paths"));
    let err = refused(
        Parquet::new().member_columns(["label"]).label_column(""),
        &paths,
        "hf-paths.parquet",
    );
    assert!(err.contains("rows whose image is a path"), "{err}");
}

#[test]
fn a_prefix_is_parquet_only_when_it_is_one_folder_of_parquet_files_without_images() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let copy = |to: &str| {
        let to = root.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixtures().join("pa-snappy-plain.parquet"), to).unwrap();
    };
    let open = |url: &Path, settings: &[(&str, &str)]| {
        let store = local(url);
        Dataset::open_blocking("", &context(&store, settings))
    };
    let plain: &[(&str, &str)] = &[];
    // One split's folder: its files.
    copy("ds/train/part-0.parquet");
    copy("ds/train/part-1.parquet");
    assert_eq!(open(&root.join("ds/train"), plain).unwrap().len(), 80);
    // A repository's splits side by side: refused, naming them.
    copy("ds/validation/part-0.parquet");
    let err = open(&root.join("ds"), plain).unwrap_err().to_string();
    assert!(
        err.contains("train/") && err.contains("validation/"),
        "{err}"
    );
    // Images beside a metadata.parquet: an ImageFolder, as before.
    loader_testkit::DatasetSpec::tiny(6, 2)
        .write(&root.join("folder"))
        .unwrap();
    copy("folder/metadata.parquet");
    let folder = open(&root.join("folder"), plain).unwrap();
    assert_eq!(folder.len(), 6);
    // Columns name Parquet's parts: for an ImageFolder they are refused, not ignored.
    let named: &[(&str, &str)] = &[("source.image_column", "img")];
    let err = open(&root.join("folder"), named).unwrap_err().to_string();
    assert!(
        err.contains("source.image_column")
            && err.contains("parquet")
            && err.contains("ImageFolder"),
        "{err}"
    );
}

#[test]
fn a_row_without_an_image_is_an_error_naming_file_and_row_or_a_skip() {
    let store = local(&fixtures());
    let dataset = Parquet::new()
        .load_blocking(&store, &["pa-null-image.parquet".into()])
        .unwrap();
    assert_eq!(dataset.len(), 40);
    let mut failing = reader(Arc::clone(&store), dataset.clone(), false)
        .batch_size(40)
        .build()
        .unwrap();
    let err = failing.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("pa-null-image.parquet"), "{err}");
    assert!(err.contains("row 5"), "{err}");
    assert!(err.contains("null"), "{err}");
    let mut skipping = reader(store, dataset, false)
        .batch_size(8)
        .error_policy(ErrorPolicy::Skip { max_failures: 1 })
        .build()
        .unwrap();
    let seen = one_pass(&mut skipping);
    assert_eq!(seen.len(), 39);
    assert!(seen.iter().all(|s| s.index != 5));
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
            .cache_dir(None)
            .load_blocking(&store, &["f.parquet".into()])
            .map_err(|e| e.to_string());
        // An error, never a panic caught on the reading thread.
        if let Err(e) = &dataset {
            assert!(!e.contains("panicked"), "{what}: {e}");
        }
        let dataset = dataset?;
        let n = dataset.len();
        let mut loader = reader(store, dataset, false)
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
        for e in out.iter().filter_map(|o| o.as_ref().err()) {
            assert!(!e.contains("panicked"), "{what}: {e}");
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
    // 0x5a changes a varint's value bits; 0x01 flips a zigzag varint's sign (negative
    // offsets and sizes, which parquet's own `byte_range` panics on).
    for (mask, step) in [(0x5a, 3), (0x01, 4)] {
        for at in (whole.len() - tail..whole.len()).step_by(step) {
            let mut bytes = whole.clone();
            bytes[at] ^= mask;
            if open_and_read(bytes, &format!("byte {at} ^ {mask:#x}")).is_ok() {
                opened += 1;
            }
        }
    }
    assert!(opened > 0, "some damage leaves a readable file");
}

#[test]
fn every_byte_of_a_footer_damaged_every_way_is_an_error_or_rows_never_a_panic() {
    // The whole open and every page's decoding, in memory (what the fuzz target runs),
    // for each byte of the tail with each of four masks: sign bits of zigzag varints
    // (0x01), continuation bits (0x80), value bits (0x5a) and all (0xff).
    let whole = std::fs::read(fixtures().join("pa-zstd-dict.parquet")).unwrap();
    let tail = 1500.min(whole.len());
    for at in whole.len() - tail..whole.len() {
        for mask in [0x01u8, 0x80, 0x5a, 0xff] {
            let mut bytes = whole.clone();
            bytes[at] ^= mask;
            let read = std::panic::catch_unwind(|| {
                Parquet::new()
                    .read_in_memory("f.parquet", bytes)
                    .map(|(d, rows)| {
                        assert_eq!(d.len(), rows.len());
                    })
            });
            assert!(read.is_ok(), "byte {at} ^ {mask:#x}: a panic");
        }
    }
}

/// `store` read as `loader run` reads it, with `settings` (`source.*` keys) set.
fn context(store: &DynStorage, settings: &[(&str, &str)]) -> loader_core::SourceContext {
    let mut options = loader_core::LoaderOptions::default();
    for (key, value) in settings {
        options.set(key, value).unwrap();
    }
    loader_core::SourceContext::new(store.clone(), &options)
}
