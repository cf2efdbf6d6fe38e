#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! LitData datasets written by litdata's own `optimize` (the committed fixtures, see
//! `fixtures/litdata/make.py`): raw chunks, zstd frames of items (litdata's default for
//! zstd), whole-file zstd and per-item zstd; read through a local store and through the
//! in-process S3 server behind the delay proxy, compared with what litdata's own
//! StreamingDataset read back; and damaged indexes and chunks.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use loader_core::litdata::LitData;
use loader_core::{Dataset, LoaderOptions, ShardOrder, SourceContext, from_url};
use loader_testkit::{DelayProxy, S3Server};

use common::{
    Outcome, Seen, copy_tree, cut, flip, local, refused, with_each_fetch, with_each_order,
};

/// The datasets read as samples (the fourth, `arrow`, is refused).
const READ: [&str; 4] = ["raw", "framed", "whole", "sample"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litdata")
}

#[derive(serde::Deserialize, Debug, Clone)]
struct Row {
    label: i64,
    pixel_sum: Option<u64>,
}

fn expected() -> BTreeMap<String, Vec<Row>> {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

/// How `name` is read: `framed`'s samples are tuples, so its label is leaf "1".
fn litdata(name: &str) -> LitData {
    match name {
        "framed" => LitData::new().label_column("1"),
        _ => LitData::new(),
    }
}

fn check(what: &str, want: &[Row], seen: &[Seen]) {
    assert_eq!(seen.len(), want.len(), "{what}: each sample once");
    for (seen, row) in seen.iter().zip(want) {
        let index = seen.index;
        assert_eq!(seen.label, row.label, "{what} sample {index}: label");
        assert_eq!(
            seen.pixels, row.pixel_sum,
            "{what} sample {index}: pixels as litdata decodes them"
        );
        if what.starts_with("raw") || what.starts_with("sample") {
            assert_eq!(
                seen.caption.as_deref(),
                Some(format!("sample {index}").as_str()),
                "{what}: the other leaves are members"
            );
        }
    }
}

#[test]
fn datasets_written_by_litdata_optimize_read_as_litdata_reads_them_back() {
    let expected = expected();
    let store = local(&fixtures());
    for name in READ {
        let want = &expected[name];
        let dataset = litdata(name)
            .load_blocking(&store, &format!("{name}/index.json"))
            .unwrap();
        assert_eq!(dataset.len(), want.len(), "{name}");
        assert!(dataset.shards().len() > 1, "{name}: several chunks");
        with_each_fetch(&store, &dataset, true, 4, |fetch, seen| {
            check(&format!("{name} {fetch}"), want, seen)
        });
    }
}

#[test]
fn litdata_through_s3_behind_the_delay_proxy_in_both_orders() {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixtures(), &dir.path().join("lit"));
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    for name in READ {
        // Opened by its URL, as `loader run` and Python open it: the index says LitData.
        let url = format!("s3://lit/{name}/index.json");
        let store = from_url(
            &loader_core::store_url(&url).unwrap(),
            server.options_for(&proxy.url()),
        )
        .unwrap();
        // The columns `litdata(name)` names, as settings.
        let mut options = LoaderOptions::default();
        if name == "framed" {
            options.set("source.label_column", "1").unwrap();
        }
        let context = SourceContext::new(store.clone(), &options);
        let dataset = Dataset::open_blocking(&url, &context).unwrap();
        let chunks: u64 = dataset.shards().iter().map(|s| s.chunks.len() as u64).sum();
        if name == "framed" {
            // 30 items in chunks of 12, 12 and 6, in frames of 4.
            assert_eq!(chunks, 3 + 3 + 2, "a frame is a fetch unit");
        }
        with_each_order(&store, &dataset, &proxy, true, |order, seen, gets| {
            check(&format!("{name} {order:?}"), &expected[name], seen);
            match (name, order) {
                // An item alone is a ranged GET of its own bytes in a global order
                // (neighbours coalesced): fewer than one per sample.
                ("raw" | "sample", ShardOrder::Global) => {
                    assert!(gets > chunks && gets <= 30, "{name} {order:?}: {gets} GETs")
                }
                // A run of raw items, a zstd frame or a whole compressed chunk, once.
                _ => assert_eq!(gets, chunks, "{name} {order:?}: GETs"),
            }
        });
    }
}

#[test]
fn what_is_not_read_is_refused_with_what_to_do() {
    let store = local(&fixtures());
    // Bytes and ints alone: litdata writes the rows as an Arrow table, not as items.
    refused(
        LitData::new().load_blocking(&store, "arrow/index.json"),
        &["chunk-0-0.bin", "Arrow table"],
    );
    // A tuple's label is not guessed: named, it is read (above); a wrong name is refused.
    refused(
        LitData::new()
            .label_column("label")
            .load_blocking(&store, "framed/index.json"),
        &["no label leaf \"label\"", "\"1\""],
    );
    refused(
        LitData::new()
            .image_column("caption")
            .load_blocking(&store, "raw/index.json"),
        &["\"caption\" is stored as \"str\""],
    );
    refused(
        LitData::new()
            .label_column("caption")
            .load_blocking(&store, "raw/index.json"),
        &["label leaf \"caption\""],
    );
    // WebDataset's fields name shards' members, not leaves: refused, not ignored.
    let url = fixtures()
        .join("raw/index.json")
        .to_string_lossy()
        .into_owned();
    let mut options = LoaderOptions::default();
    options.set("source.fields", "image").unwrap();
    let store = from_url(
        &loader_core::store_url(&url).unwrap(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    refused(
        Dataset::open_blocking(&url, &SourceContext::new(store, &options)),
        &["source.fields", "webdataset", "LitData"],
    );
}

/// Dataset `name` damaged by `change`, read whole (see [`common::damaged`]).
fn damaged(
    name: &'static str,
    change: impl FnOnce(&Path) + Send + 'static,
    what: &str,
) -> Result<Outcome, String> {
    common::damaged(
        &fixtures().join(name),
        change,
        move |store| {
            litdata(name)
                .load_blocking(store, "index.json")
                .map_err(|e| e.to_string())
        },
        what,
    )
}

#[test]
fn damaged_indexes_and_chunks_are_errors_naming_the_file_never_panics_or_hangs() {
    let err = damaged(
        "raw",
        |d| std::fs::write(d.join("index.json"), b"{\"chunks\": 3}").unwrap(),
        "index",
    )
    .unwrap_err();
    assert!(
        err.contains("index.json") && err.contains("not a LitData index"),
        "{err}"
    );
    let err = damaged("raw", flip("chunk-0-1.bin", 0, 1), "count").unwrap_err();
    assert!(
        err.contains("chunk-0-1.bin") && err.contains("the index says"),
        "{err}"
    );
    let err = damaged("framed", flip("chunk-0-1.bin", 0, 1), "magic").unwrap_err();
    assert!(
        err.contains("chunk-0-1.bin") && err.contains("LDFZ01"),
        "{err}"
    );
    // Every byte of a raw chunk's head and of a framed chunk's directory damaged in turn:
    // an error at open, or samples that load or fail one by one; never a panic or a hang.
    for (name, file) in [("raw", "chunk-0-0.bin"), ("framed", "chunk-0-0.bin")] {
        let len = std::fs::read(fixtures().join(name).join(file))
            .unwrap()
            .len();
        for at in (0..160.min(len)).step_by(3) {
            for mask in [0x01, 0x80] {
                let outcome = damaged(name, flip(file, at, mask), &format!("{name} byte {at}"));
                if let Ok((loaded, errors)) = outcome {
                    assert_eq!(loaded + errors.len(), 30, "{name} byte {at}: {errors:?}");
                }
            }
        }
    }
    // A whole compressed chunk damaged: its items fail together, naming the chunk.
    let (loaded, errors) = damaged(
        "whole",
        cut("chunk-0-1.zstd.bin", |len| len / 2),
        "whole truncated",
    )
    .unwrap();
    assert_eq!((loaded, errors.len()), (18, 12), "{errors:?}");
    assert!(errors[0].contains("chunk-0-1.zstd.bin"), "{errors:?}");
    // A raw chunk cut short: its last item fails, naming the chunk; the others load.
    let (loaded, errors) =
        damaged("raw", cut("chunk-0-2.bin", |len| len - 10), "truncated").unwrap();
    assert_eq!(loaded, 29, "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("chunk-0-2.bin"), "{errors:?}");
}
