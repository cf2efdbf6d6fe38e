#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The DataLoader with a cache, over the in-process S3 server: later epochs and later runs
//! make no request, deliver the same bytes, and a cache smaller than the dataset keeps what
//! the coming epochs need.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_core::storage::layer::{CacheConfig, CachePolicy, Latency, StorageMetrics};
use loader_core::webdataset::WebDataset;
use loader_core::{
    DataLoader, DataLoaderBuilder, Dataset, DynStorage, Fetch, RawBatch, SampleInfo, StorageExt,
    from_url,
};
use loader_testkit::watchdog::no_hang;
use loader_testkit::{Bucket, DatasetSpec, S3Server};

type Loader = DataLoader<(u64, u64), Vec<(u64, u64)>>;

/// A fingerprint of a sample's bytes, to compare what two loaders delivered.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn loader(store: DynStorage, dataset: Dataset, cache: Option<CacheConfig>, epochs: u64) -> Loader {
    builder(store, dataset, cache, epochs).build().unwrap()
}

fn builder(
    store: DynStorage,
    dataset: Dataset,
    cache: Option<CacheConfig>,
    epochs: u64,
) -> DataLoaderBuilder<(u64, u64), Vec<(u64, u64)>> {
    let mut builder = DataLoader::builder(store, dataset)
        .map(
            |bytes: Bytes, info: &SampleInfo| Ok((info.index, fingerprint(&bytes))),
            |raw: RawBatch<(u64, u64)>| Ok(raw.samples.into_iter().map(|(_, s)| s).collect()),
        )
        .batch_size(8)
        .shuffle(true)
        .seed(3)
        .epochs(epochs)
        .decode_threads(1);
    if let Some(config) = cache {
        builder = builder.cache(config);
    }
    builder
}

fn epoch(loader: &mut Loader) -> Vec<(u64, u64)> {
    loader.flat_map(|b| b.unwrap()).collect()
}

/// The S3 store of `server`, counting its requests.
fn counted(server: &S3Server) -> (DynStorage, Arc<StorageMetrics>) {
    let store = from_url("s3://data", server.options())
        .unwrap()
        .with_metrics();
    let metrics = store.metrics();
    (store.into_dyn(), metrics)
}

/// An ImageFolder of `images` in `classes` on the in-process S3 server (keep the bucket
/// bound: dropped, its server and files go with it), its store counted, and the dataset
/// listed through that store.
fn image_folder(
    images: usize,
    classes: usize,
) -> (Bucket, DynStorage, Arc<StorageMetrics>, Dataset) {
    let bucket = Bucket::new(&DatasetSpec::tiny(images, classes)).unwrap();
    let (store, requests) = counted(&bucket.server);
    let dataset = Dataset::image_folder_blocking(&*store).unwrap();
    (bucket, store, requests, dataset)
}

fn memory_cache(bytes: u64) -> CacheConfig {
    CacheConfig {
        dir: None,
        memory_bytes: bytes,
        ..CacheConfig::default()
    }
}

fn disk_cache(dir: &std::path::Path) -> CacheConfig {
    CacheConfig {
        dir: Some(dir.to_path_buf()),
        memory_bytes: 0,
        disk_bytes: 1 << 30,
        ..CacheConfig::default()
    }
}

#[test]
fn image_folder_epoch_two_and_run_two_make_no_request() {
    no_hang("cached image folder", || {
        let (_bucket, store, requests, dataset) = image_folder(48, 3);
        let cache_dir = tempfile::tempdir().unwrap();

        let mut plain = loader(Arc::clone(&store), dataset.clone(), None, 2);
        let want: Vec<_> = (0..2).map(|_| epoch(&mut plain)).collect();
        drop(plain);

        let mut cached = loader(
            Arc::clone(&store),
            dataset.clone(),
            Some(disk_cache(cache_dir.path())),
            2,
        );
        let before = requests.snapshot().requests;
        assert_eq!(epoch(&mut cached), want[0]);
        assert_eq!(
            requests.snapshot().requests - before,
            48,
            "one GET per image"
        );
        let before = requests.snapshot().requests;
        assert_eq!(epoch(&mut cached), want[1]);
        let snap = cached.cache().unwrap().snapshot();
        assert_eq!(
            requests.snapshot().requests - before,
            0,
            "epoch two: {snap}"
        );
        assert_eq!(
            snap.validations, 0,
            "the listing validated the entries: {snap}"
        );
        drop(cached);

        // A new run on the same directory starts warm.
        let mut again = loader(
            Arc::clone(&store),
            dataset,
            Some(disk_cache(cache_dir.path())),
            1,
        );
        let before = requests.snapshot().requests;
        assert_eq!(epoch(&mut again), want[0]);
        assert_eq!(requests.snapshot().requests - before, 0);
        assert_eq!(again.cache().unwrap().snapshot().disk_hits, 48);
    });
}

#[test]
fn shards_epoch_two_makes_no_request() {
    no_hang("cached shards", || {
        let root = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(90, 3)
            .write_shards(&root.path().join("data"), 4)
            .unwrap();
        let server = S3Server::start(root.path()).unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        let (_, dataset) = WebDataset::new()
            .cache_dir(None)
            .chunk_bytes(8_000)
            .load_url_blocking("s3://data/shard-{000000..000003}.tar", server.options())
            .unwrap();
        let (store, requests) = counted(&server);
        let mut plain = loader(Arc::clone(&store), dataset.clone(), None, 2);
        let want: Vec<_> = (0..2).map(|_| epoch(&mut plain)).collect();
        drop(plain);
        let config = CacheConfig {
            block_bytes: 4096,
            ..disk_cache(cache_dir.path())
        };
        let mut cached = loader(Arc::clone(&store), dataset, Some(config), 2);
        assert_eq!(epoch(&mut cached), want[0]);
        let before = requests.snapshot().requests;
        assert_eq!(epoch(&mut cached), want[1]);
        let snap = cached.cache().unwrap().snapshot();
        assert_eq!(requests.snapshot().requests - before, 0, "{snap}");
        // Shards were read in blocks, each fetched once: no more bytes than the shards.
        let shards: u64 = std::fs::read_dir(root.path().join("data"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(
            snap.bytes_fetched <= shards,
            "{snap}; shards are {shards} bytes"
        );
    });
}

#[test]
fn a_cache_of_half_the_dataset_keeps_what_the_next_epochs_read() {
    no_hang("half cache", || {
        let (_bucket, store, _, dataset) = image_folder(200, 4);
        let total: u64 = dataset.objects().iter().map(|o| o.size).sum();
        let epochs = 4;
        let mut rates = Vec::new();
        for policy in [CachePolicy::Lru, CachePolicy::Future] {
            let config = CacheConfig {
                policy,
                ..memory_cache(total / 2)
            };
            // Few requests in flight, as against a dataset far larger than the window: with
            // a whole epoch in flight every read is looked up before any of that epoch's
            // answers enters the cache, and then LRU too keeps the right half.
            let mut l = builder(Arc::clone(&store), dataset.clone(), Some(config), epochs)
                .fetch(Fetch::Async { max_in_flight: 4 })
                .build()
                .unwrap();
            for _ in 0..epochs {
                assert_eq!(epoch(&mut l).len(), 200);
            }
            rates.push(l.cache().unwrap().snapshot().hit_rate());
        }
        eprintln!("hit rates: LRU {:.3}, future {:.3}", rates[0], rates[1]);
        // Once per epoch, the best is f (E - 1) / E = 37.5%; the sizes differ a little.
        let best = 0.5 * (epochs - 1) as f64 / epochs as f64;
        assert!(
            rates[1] > 0.9 * best,
            "future {:.3}, best {best:.3}",
            rates[1]
        );
        assert!(
            rates[1] > rates[0] + 0.1,
            "future {:.3}, LRU {:.3}",
            rates[1],
            rates[0]
        );
    });
}

#[test]
fn cache_hits_are_not_taken_for_the_stores_latency() {
    no_hang("hits apart", || {
        let (_bucket, store, requests, dataset) = image_folder(48, 3);
        let latency = Duration::from_millis(30);
        let slow = store.with_latency(Latency::Fixed(latency), 1).into_dyn();
        let config = memory_cache(1 << 30);
        // One request at a time: at the epochs' seam no read of epoch two can join a
        // request of epoch one still under way (that would be the store's latency).
        let mut l = builder(slow, dataset, Some(config), 2)
            .fetch(Fetch::Async { max_in_flight: 1 })
            .build()
            .unwrap();
        let before = requests.snapshot().requests;
        for _ in 0..2 {
            assert_eq!(epoch(&mut l).len(), 48);
        }
        let summary = l.metrics().unwrap().summary();
        assert_eq!(requests.snapshot().requests - before, 48, "{summary}");
        // Epoch one went to the store, epoch two to the cache: the store's latency (what
        // the in-flight controller and the hedger go by) is the delayed requests' alone.
        assert_eq!(
            (summary.fetch.count, summary.cached.count),
            (48, 48),
            "{summary}"
        );
        assert!(summary.fetch.p50 >= latency, "{summary}");
        assert!(summary.to_string().contains("cache hit"), "{summary}");
    });
}
