#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! MDS datasets written by MosaicML Streaming's own MDSWriter (the committed fixtures, see
//! `fixtures/mds/make.py`), raw and zstd-compressed, read through a local store and through
//! the in-process S3 server behind the delay proxy, compared with what Streaming's own
//! StreamingDataset read back; and damaged indexes and shards.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_core::mds::Mds;
use loader_core::{DataLoader, RawBatch, SampleInfo, ShardOrder, from_url};
use loader_testkit::{DelayProxy, S3Server};

use common::{Outcome, Seen, copy_tree, cut, flip, local, with_each_fetch, with_each_order};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mds")
}

#[derive(serde::Deserialize, Debug, Clone)]
struct Row {
    label: i64,
    image_len: Option<u64>,
    image_sum: Option<u64>,
    pixel_sum: Option<u64>,
}

fn expected() -> BTreeMap<String, Vec<Row>> {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

fn check(what: &str, want: &[Row], seen: &[Seen]) {
    assert_eq!(seen.len(), want.len(), "{what}: each sample once");
    for (seen, row) in seen.iter().zip(want) {
        let index = seen.index;
        assert_eq!(seen.label, row.label, "{what} sample {index}: label");
        if let (Some(l), Some(s)) = (row.image_len, row.image_sum) {
            assert_eq!(
                (seen.len, seen.sum),
                (l, s),
                "{what} sample {index}: image bytes"
            );
        }
        if let Some(p) = row.pixel_sum {
            assert_eq!(
                seen.pixels,
                Some(p),
                "{what} sample {index}: pixels as PIL decodes them"
            );
        }
    }
}

#[test]
fn datasets_written_by_mdswriter_read_as_streaming_reads_them_back() {
    let expected = expected();
    let store = local(&fixtures());
    for (name, want) in &expected {
        let dataset = Mds::new()
            .load_blocking(&store, &format!("{name}/index.json"))
            .unwrap();
        assert_eq!(dataset.len(), want.len(), "{name}");
        assert!(dataset.shards().len() > 1, "{name}: several shards");
        with_each_fetch(&store, &dataset, true, 4, |fetch, seen| {
            check(&format!("{name} {fetch}"), want, seen)
        });
    }
}

/// A sample as delivered with its members: (index, members).
type WithMembers = (u64, Vec<(Arc<str>, Bytes)>);

#[test]
fn other_columns_are_handed_to_the_stage_as_members() {
    // make.py's raw dataset: a `caption` str column beside the image and label.
    let store = local(&fixtures());
    let dataset = Mds::new().load_blocking(&store, "raw/index.json").unwrap();
    let mut loader = DataLoader::builder(Arc::clone(&store), dataset)
        .map(
            |_bytes: Bytes, info: &SampleInfo| Ok((info.index, info.members.clone())),
            |raw: RawBatch<WithMembers>| {
                Ok(raw.samples.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
            },
        )
        .batch_size(8)
        .shuffle(true)
        .build()
        .unwrap();
    let seen: Vec<_> = loader.by_ref().flat_map(|b| b.unwrap()).collect();
    assert_eq!(seen.len(), expected()["raw"].len());
    for (index, members) in seen {
        let caption = Bytes::from(format!("sample {index}"));
        assert_eq!(members, [(Arc::from("caption"), caption)], "sample {index}");
    }
}

#[test]
fn mds_through_s3_behind_the_delay_proxy_in_both_orders() {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixtures(), &dir.path().join("mds"));
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let store = from_url("s3://mds", server.options_for(&proxy.url())).unwrap();
    for name in ["raw", "zstd"] {
        let dataset = Mds::new()
            .load_blocking(&store, &format!("{name}/index.json"))
            .unwrap();
        let chunks: u64 = dataset.shards().iter().map(|s| s.chunks.len() as u64).sum();
        with_each_order(&store, &dataset, &proxy, true, |order, seen, gets| {
            check(&format!("{name} {order:?}"), &expected[name], seen);
            match (name, order) {
                // A raw sample alone is a ranged GET of its own bytes in a global order
                // (neighbours coalesced): fewer than one per sample.
                ("raw", ShardOrder::Global) => {
                    assert!(gets > chunks && gets <= 30, "{name} {order:?}: {gets} GETs")
                }
                // A chunk of a raw shard, or a whole compressed shard, once: the reads ahead
                // span the epoch here.
                _ => assert_eq!(gets, chunks, "{name} {order:?}: GETs"),
            }
        });
    }
}

/// The raw dataset damaged by `change`, read whole (see [`common::damaged`]).
fn damaged(change: impl FnOnce(&Path) + Send + 'static, what: &str) -> Result<Outcome, String> {
    common::damaged(
        &fixtures().join("raw"),
        change,
        |store| {
            Mds::new()
                .load_blocking(store, "index.json")
                .map_err(|e| e.to_string())
        },
        what,
    )
}

#[test]
fn damaged_indexes_and_shards_are_errors_naming_the_file_never_panics_or_hangs() {
    let err = damaged(
        |d| std::fs::write(d.join("index.json"), b"{\"shards\": 3}").unwrap(),
        "index",
    )
    .unwrap_err();
    assert!(
        err.contains("index.json") && err.contains("not an MDS index"),
        "{err}"
    );
    // A shard named outside the index's folder: refused naming the index and the name (the
    // store's own refusal of `..` named neither).
    let err = damaged(
        |d| {
            let index = std::fs::read_to_string(d.join("index.json")).unwrap();
            let index = index.replacen("\"shard.00000.mds\"", "\"../shard.00000.mds\"", 1);
            std::fs::write(d.join("index.json"), index).unwrap();
        },
        "escaping",
    )
    .unwrap_err();
    assert!(
        err.contains("index.json") && err.contains("../shard.00000.mds") && err.contains("inside"),
        "{err}"
    );
    let err = damaged(flip("shard.00001.mds", 0, 1), "count").unwrap_err();
    assert!(
        err.contains("shard.00001.mds") && err.contains("the index says"),
        "{err}"
    );
    // Every byte of a shard's head damaged in turn: an error at open, or samples that load
    // or fail one by one.
    let shard = std::fs::read(fixtures().join("raw/shard.00000.mds")).unwrap();
    for at in (0..120.min(shard.len())).step_by(2) {
        let outcome = damaged(flip("shard.00000.mds", at, 0x5a), &format!("byte {at}"));
        // Opened, every sample is delivered or skipped with its error: none lost.
        if let Ok((loaded, errors)) = outcome {
            assert_eq!(loaded + errors.len(), 30, "byte {at}: {errors:?}");
        }
    }
    // A shard cut short: its last sample fails, naming the shard; the others load.
    let (loaded, errors) = damaged(cut("shard.00002.mds", |len| len - 10), "truncated").unwrap();
    assert_eq!(loaded, 29, "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("shard.00002.mds") && errors[0].contains("past the end"),
        "{errors:?}"
    );
}

/// The MDS writer `loader gen --mds` uses writes the very bytes MosaicML Streaming's own
/// MDSWriter wrote: the raw fixture's samples, cut out of its shards and written again with
/// the same columns and size limit, give the same shards and the same shard entries.
#[test]
fn the_writer_writes_what_streaming_wrote() {
    use loader_core::mds::{MdsColumn, MdsWriter};
    let raw = fixtures().join("raw");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(raw.join("index.json")).unwrap()).unwrap();
    let shards = index["shards"].as_array().unwrap();
    let u32_at =
        |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let out = tempfile::tempdir().unwrap();
    let columns = vec![
        // Given out of name order: the writer stores them by name, as Streaming does.
        MdsColumn::fixed("label", "int", 8),
        MdsColumn::variable("caption", "str"),
        MdsColumn::variable("image", "bytes"),
    ];
    let limit = shards[0]["size_limit"].as_u64().unwrap() as usize;
    let mut writer = MdsWriter::create(out.path(), columns)
        .unwrap()
        .size_limit(limit);
    let mut samples = 0;
    for shard in shards {
        let bytes =
            std::fs::read(raw.join(shard["raw_data"]["basename"].as_str().unwrap())).unwrap();
        for i in 0..u32_at(&bytes, 0) {
            let sample = &bytes[u32_at(&bytes, 4 + 4 * i)..u32_at(&bytes, 8 + 4 * i)];
            // Sizes of the variable columns (caption, image), then caption, image, label.
            let (caption_len, image_len) = (u32_at(sample, 0), u32_at(sample, 4));
            let caption = &sample[8..8 + caption_len];
            let image = &sample[8 + caption_len..8 + caption_len + image_len];
            let label = &sample[8 + caption_len + image_len..];
            writer.write(&[label, caption, image]).unwrap();
            samples += 1;
        }
    }
    writer.finish().unwrap();
    assert!(samples > 0);
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("index.json")).unwrap()).unwrap();
    assert_eq!(written["shards"].as_array().unwrap(), shards);
    for shard in shards {
        let name = shard["raw_data"]["basename"].as_str().unwrap();
        assert!(
            std::fs::read(out.path().join(name)).unwrap() == std::fs::read(raw.join(name)).unwrap(),
            "{name}: the same bytes as MDSWriter's"
        );
    }
}
