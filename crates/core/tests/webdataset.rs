#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! WebDataset shards: written by GNU tar, Python's tarfile and webdataset itself (the
//! committed fixtures, see `fixtures/shards/make.py`), and by the testkit; read through a
//! local store and through the in-process S3 server behind the delay proxy.

mod common;
use common::refused;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_core::webdataset::{SIDECAR_SUFFIX, ShardIndex, WebDataset, write_atomically};
use loader_core::{
    DataLoader, DataLoaderBuilder, Dataset, DynStorage, RawBatch, SampleInfo, ShardOrder, Storage,
    from_url,
};
use loader_testkit::{DatasetSpec, DelayProxy, S3Server};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shards")
}

fn local(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

/// No cache, so each test sees what the shard itself says.
fn wds() -> WebDataset {
    WebDataset::new().cache_dir(None)
}

#[derive(serde::Deserialize, Debug)]
struct Expected {
    key: String,
    label: i64,
    members: Vec<String>,
    image_len: u64,
    image_sum: u64,
}

#[test]
fn shards_written_by_gnu_tar_tarfile_and_webdataset_index_as_written() {
    let dir = fixtures();
    let expected: BTreeMap<String, Vec<Expected>> =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!(
        expected.len(),
        6,
        "gnu, ustar, pax from GNU tar; pax, gnu from tarfile; webdataset"
    );
    let store = local(&dir);
    for (shard, samples) in &expected {
        let dataset = wds()
            .load_blocking(&store, std::slice::from_ref(shard))
            .unwrap();
        assert_eq!(dataset.len(), samples.len(), "{shard}");
        let bytes = std::fs::read(dir.join(shard)).unwrap();
        for (item, want) in dataset.iter().zip(samples) {
            assert_eq!(item.name.as_deref(), Some(want.key.as_str()), "{shard}");
            assert_eq!(item.label, want.label, "{shard} {}", want.key);
            let mut members: Vec<&str> = item.members.iter().map(|m| &*m.name).collect();
            members.sort();
            assert_eq!(members, want.members, "{shard} {}", want.key);
            let range = item.range.clone().unwrap();
            let image = &bytes[range.start as usize..range.end as usize];
            assert_eq!(image.len() as u64, want.image_len, "{shard} {}", want.key);
            let sum = image.iter().map(|&b| u64::from(b)).sum::<u64>() % (1 << 32);
            assert_eq!(sum, want.image_sum, "{shard} {}: other bytes", want.key);
        }
    }
}

#[test]
fn a_truncated_shard_is_an_error_naming_the_shard_and_the_offset() {
    let store = local(&fixtures());
    let err = refused(
        wds().load_blocking(&store, &["truncated.tar".into()]),
        &["\"truncated.tar\""],
    );
    assert!(err.contains("at byte"), "{err}");
    assert!(
        err.contains("truncated") || err.contains("entire block"),
        "{err}"
    );
}

#[test]
fn a_sample_without_an_image_is_reported_with_shard_offset_and_key() {
    let store = local(&fixtures());
    let err = refused(
        wds().load_blocking(&store, &["no-image.tar".into()]),
        &["no-image.tar"],
    );
    assert!(err.contains("sample \"b\" at byte 2560"), "{err}");
    assert!(err.contains("no image member"), "{err}");
}

/// Every delivered sample of a pass: (epoch, index, label), with the bytes checked.
fn labelled(store: DynStorage, dataset: Dataset) -> DataLoaderBuilder<u64, Vec<(u64, i64)>> {
    DataLoader::builder(store, dataset).map(
        |bytes: Bytes, info: &SampleInfo| {
            // A JPEG, cut out exactly: SOI at the start, EOI at the end.
            assert_eq!(&bytes[..2], &[0xFF, 0xD8], "{info}");
            assert_eq!(&bytes[bytes.len() - 2..], &[0xFF, 0xD9], "{info}");
            assert_eq!(
                info.member("cls").map(|b| b.to_vec()),
                info.label.class().map(|c| c.to_string().into_bytes())
            );
            Ok(info.index)
        },
        |raw: RawBatch<u64>| {
            Ok(raw
                .samples
                .iter()
                .map(|(i, _)| (i.index, i.label.class().unwrap_or(-1)))
                .collect())
        },
    )
}

/// The indices one pass delivered, sorted: `0..n` when each sample came exactly once.
fn sorted_indices(loader: &mut DataLoader<u64, Vec<(u64, i64)>>) -> Vec<u64> {
    let mut seen: Vec<u64> = one_pass(loader).iter().map(|(i, _)| *i).collect();
    seen.sort();
    seen
}

/// Every fetch strategy, with small counts.
fn strategies() -> [loader_core::Fetch; 3] {
    [
        loader_core::Fetch::Async { max_in_flight: 16 },
        loader_core::Fetch::Threads { threads: 4 },
        loader_core::Fetch::Sequential { workers: 2 },
    ]
}

fn one_pass(loader: &mut DataLoader<u64, Vec<(u64, i64)>>) -> Vec<(u64, i64)> {
    loader.flat_map(|b| b.unwrap()).collect()
}

#[test]
fn shards_through_s3_behind_the_delay_proxy_in_both_orders() {
    const IMAGES: usize = 240;
    let dir = tempfile::tempdir().unwrap();
    let written = DatasetSpec::tiny(IMAGES, 5)
        .write_shards(&dir.path().join("data"), 4)
        .unwrap();
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let url = "s3://data/shard-{000000..000003}.tar";
    let (store, dataset) = wds()
        .load_url_blocking(url, server.options_for(&proxy.url()))
        .unwrap();
    assert_eq!(dataset.len(), IMAGES);
    let labels: Vec<i64> = written.iter().map(|w| w.label as i64).collect();
    for order in [ShardOrder::Local, ShardOrder::Global] {
        let before = proxy.stats().gets;
        let mut loader = labelled(Arc::clone(&store), dataset.clone())
            .batch_size(16)
            .shuffle(true)
            .seed(5)
            .shard_order(order)
            .epochs(2)
            .build()
            .unwrap();
        for epoch in 0..2 {
            let got = one_pass(&mut loader);
            let mut seen: Vec<u64> = got.iter().map(|(i, _)| *i).collect();
            seen.sort();
            assert_eq!(
                seen,
                (0..IMAGES as u64).collect::<Vec<_>>(),
                "{order:?} epoch {epoch}"
            );
            for (i, label) in got {
                assert_eq!(
                    label, labels[i as usize],
                    "{order:?}: sample {i} mislabelled"
                );
            }
        }
        let gets = proxy.stats().gets - before;
        match order {
            // The tiny shards are one chunk each: one GET per shard and epoch.
            ShardOrder::Local => assert_eq!(gets, 8, "shard-local GETs"),
            // A GET per sample, fewer when the permutation puts two samples of one shard
            // next to each other (a quarter of the time here, with 4 small shards).
            ShardOrder::Global => assert!(
                (2 * IMAGES as u64 / 2..=2 * IMAGES as u64).contains(&gets),
                "{gets}"
            ),
        }
        assert!(loader.next().is_none(), "nothing past the last epoch");
    }
}

#[test]
fn a_member_larger_than_the_chunk_size_is_a_chunk_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(30, 3)
        .write_shards(dir.path(), 2)
        .unwrap();
    let store = local(dir.path());
    let shards = ["shard-000000.tar".to_owned(), "shard-000001.tar".to_owned()];
    let dataset = wds()
        .chunk_bytes(100)
        .load_blocking(&store, &shards)
        .unwrap();
    let chunks: usize = dataset.shards().iter().map(|s| s.chunks.len()).sum();
    assert_eq!(chunks, 30, "every sample is larger than 100 bytes");
    let mut loader = labelled(store, dataset)
        .batch_size(7)
        .shuffle(true)
        .build()
        .unwrap();
    let seen = sorted_indices(&mut loader);
    assert_eq!(seen, (0..30).collect::<Vec<_>>());
}

#[test]
fn a_sidecar_index_is_used_while_fresh_and_rebuilt_when_the_shard_changes() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(10, 2)
        .write_shards(dir.path(), 1)
        .unwrap();
    let store = local(dir.path());
    let shard = "shard-000000.tar".to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let meta = runtime.block_on(store.head(&shard)).unwrap();
    let built = runtime.block_on(wds().index(&store, &meta)).unwrap();
    assert_eq!(built.samples.len(), 10);
    // A sidecar whose keys we changed: if it is used, the dataset shows them.
    let mut marked: ShardIndex = built.clone();
    for s in &mut marked.samples {
        s.key = format!("from-sidecar-{}", s.key);
    }
    let sidecar = dir.path().join(format!("{shard}{SIDECAR_SUFFIX}"));
    write_atomically(&sidecar, &marked.to_json()).unwrap();
    let names = |d: &Dataset| {
        d.iter()
            .map(|i| i.name.as_deref().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    let used = wds()
        .load_blocking(&store, std::slice::from_ref(&shard))
        .unwrap();
    assert!(
        names(&used).iter().all(|n| n.starts_with("from-sidecar-")),
        "{:?}",
        names(&used)
    );
    // The shard is rewritten (another size): the sidecar is stale and not used.
    DatasetSpec::tiny(11, 2)
        .write_shards(dir.path(), 1)
        .unwrap();
    let rebuilt = wds()
        .load_blocking(&store, std::slice::from_ref(&shard))
        .unwrap();
    assert_eq!(rebuilt.len(), 11);
    assert!(
        names(&rebuilt)
            .iter()
            .all(|n| !n.starts_with("from-sidecar-"))
    );
    // And a cache directory makes the second load read no shard header.
    let cache = tempfile::tempdir().unwrap();
    let cached = WebDataset::new().cache_dir(Some(cache.path().into()));
    std::fs::remove_file(&sidecar).unwrap();
    assert_eq!(
        cached
            .load_blocking(&store, std::slice::from_ref(&shard))
            .unwrap()
            .len(),
        11
    );
    let files: Vec<_> = walk(cache.path());
    assert_eq!(files.len(), 1, "one cached index: {files:?}");
    let mut index = ShardIndex::parse(&std::fs::read(&files[0]).unwrap()).unwrap();
    index.samples.truncate(3);
    write_atomically(&files[0], &index.to_json()).unwrap();
    assert_eq!(
        cached.load_blocking(&store, &[shard]).unwrap().len(),
        3,
        "the cache was read"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// HTTP cannot list, and needs not: a brace list names the shards, HEAD gives their sizes,
/// ranged GETs read them (the testkit's HTTP server is tower-http's file server).
#[test]
fn shards_over_plain_http_from_a_brace_list() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(40, 4)
        .write_shards(dir.path(), 2)
        .unwrap();
    let server = loader_testkit::HttpServer::start(dir.path()).unwrap();
    let url = format!("{}/shard-{{000000..000001}}.tar", server.url());
    let (store, dataset) = wds()
        .load_url_blocking(&url, Vec::<(String, String)>::new())
        .unwrap();
    assert_eq!(dataset.len(), 40);
    let mut loader = labelled(store, dataset)
        .batch_size(8)
        .shuffle(true)
        .build()
        .unwrap();
    let seen = sorted_indices(&mut loader);
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
}

/// A byte budget far below one chunk: each fetch waits for the budget, the chunks kept
/// for later samples give way, and the epoch completes, exactly once, in every strategy.
#[test]
fn a_byte_budget_below_one_chunk_never_stalls_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(120, 4)
        .write_shards(dir.path(), 3)
        .unwrap();
    let store = local(dir.path());
    let shards: Vec<String> = (0..3).map(|s| format!("shard-{s:06}.tar")).collect();
    let dataset = wds()
        .chunk_bytes(20_000)
        .load_blocking(&store, &shards)
        .unwrap();
    for fetch in strategies() {
        let (store, dataset) = (Arc::clone(&store), dataset.clone());
        let seen = loader_testkit::watchdog::no_hang(
            &format!("{fetch:?} under a 1 KiB budget"),
            move || {
                let mut loader = labelled(store, dataset)
                    .batch_size(10)
                    .shuffle(true)
                    .fetch(fetch)
                    .max_buffered_bytes(1024)
                    .build()
                    .unwrap();
                sorted_indices(&mut loader)
            },
        );
        assert_eq!(seen, (0..120).collect::<Vec<_>>(), "{fetch:?}");
    }
}

/// A decoded-bytes bound below one image: batches start one at a time as the consumer takes
/// them, and the epoch completes exactly, in every strategy.
#[test]
fn a_decoded_bytes_bound_below_one_image_only_slows_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(90, 3)
        .write_shards(dir.path(), 3)
        .unwrap();
    let store = local(dir.path());
    let shards: Vec<String> = (0..3).map(|s| format!("shard-{s:06}.tar")).collect();
    let dataset = wds().load_blocking(&store, &shards).unwrap();
    for fetch in strategies() {
        let (store, dataset) = (Arc::clone(&store), dataset.clone());
        let seen = loader_testkit::watchdog::no_hang(
            &format!("{fetch:?}, 1-byte decoded bound"),
            move || {
                let loader = DataLoader::builder(store, dataset)
                    .batch_size(8)
                    .shuffle(true)
                    .fetch(fetch)
                    .max_decoded_bytes(1)
                    .build()
                    .unwrap();
                let mut seen: Vec<u64> = loader.flat_map(|b| b.unwrap().info.indices).collect();
                seen.sort();
                seen
            },
        );
        assert_eq!(seen, (0..90).collect::<Vec<_>>(), "{fetch:?}");
    }
}

#[test]
fn fields_choose_the_main_member_and_carry_only_the_others_named() {
    // Shards of webdataset's own writer; samples of any kind: here JSON is the main part.
    let store = local(&fixtures());
    let dataset = wds()
        .fields(["json", "txt;cls"])
        .load_blocking(&store, &["webdataset.tar".into()])
        .unwrap();
    assert_eq!(dataset.len(), 7);
    for item in dataset.iter() {
        let names: Vec<&str> = item.members.iter().map(|m| &*m.name).collect();
        assert_eq!(names, ["cls"], "only the fields, by the suffix found");
    }
    let loader = DataLoader::builder(Arc::clone(&store), dataset)
        .batch_size(7)
        .map(
            |main: Bytes, info: &SampleInfo| {
                let json: serde_json::Value = serde_json::from_slice(&main).unwrap();
                let cls = String::from_utf8(info.member("cls").unwrap().to_vec()).unwrap();
                Ok((json["i"].as_i64().unwrap(), cls))
            },
            |raw: RawBatch<(i64, String)>| Ok(raw.samples.into_iter().map(|(_, s)| s).collect()),
        )
        .build()
        .unwrap();
    let batches: Vec<Vec<(i64, String)>> =
        loader_testkit::watchdog::no_hang("an epoch of JSON-main samples", move || {
            loader.map(Result::unwrap).collect()
        });
    let want: Vec<(i64, String)> = (0..7).map(|i| (i, (i % 3).to_string())).collect();
    assert_eq!(batches, [want]);
}

#[test]
fn a_sample_missing_a_field_is_an_error_naming_it() {
    let store = local(&fixtures());
    let err = refused(
        wds()
            .fields(["cls", "txt"])
            .load_blocking(&store, &["no-image.tar".into()]),
        &["sample \"a\""],
    );
    assert!(err.contains("no .txt member; it has .jpg, .cls"), "{err}");
    refused(
        wds()
            .fields(["jpg;png"])
            .load_blocking(&store, &["no-image.tar".into()]),
        &["sample \"b\"", "no main member (looked for .jpg, .png)"],
    );
}
