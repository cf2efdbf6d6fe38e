#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Faults against the real in-process S3 server: transient errors, cut and stalled
//! responses, missing, forbidden and corrupt objects, a server that dies mid-epoch, a
//! consumer that stalls. Every test checks that each sampled index is delivered (or, under
//! `Skip`, reported) exactly once, in order, with the right bytes.
//!
//! `LOADER_FAULT_RUNS=N` repeats the randomised tests with N seeds (default 1); docs/reliability.md
//! gives a 20-seed run's counts.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::thumbnails;
use loader_core::scheduler::{EngineError, ItemFailure, RawBatch, SampleInfo};
use loader_core::storage::layer::{FaultConfig, RetryConfig};
use loader_core::storage::{ErrorKind, Storage};
use loader_core::{
    DataLoader, Dataset, DynStorage, Error, ErrorPolicy, Fetch, StorageExt, from_url,
};
use loader_testkit::HookedStore;
use loader_testkit::watchdog::within;
use loader_testkit::{DatasetSpec, DelayProxy, ProxyFaults, S3Server};

/// Generous: only a hang trips it, never slowness.
const HANG_LIMIT: Duration = Duration::from_secs(60);

fn runs() -> u64 {
    std::env::var("LOADER_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// FNV-1a: enough to tell a wrong or truncated object from the right one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A bucket `data` of tiny JPEGs on a real S3 server, its dataset (listed through S3), and
/// the checksum of every source file by index.
struct Served {
    dir: tempfile::TempDir,
    server: S3Server,
    dataset: Dataset,
    sums: Vec<u64>,
}

impl Served {
    fn new(images: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(images, 4)
            .with_seed(9)
            .write(&dir.path().join("data"))
            .unwrap();
        let server = S3Server::start(dir.path()).unwrap();
        let dataset =
            Dataset::image_folder_blocking(&*from_url("s3://data", server.options()).unwrap())
                .unwrap();
        let sums = dataset
            .iter()
            .map(|item| checksum(&std::fs::read(dir.path().join("data").join(&*item.key)).unwrap()))
            .collect();
        Self {
            dir,
            server,
            dataset,
            sums,
        }
    }

    fn path(&self, index: usize) -> PathBuf {
        self.dir
            .path()
            .join("data")
            .join(&*self.dataset.get(index).unwrap().key)
    }

    fn store_at(&self, endpoint: &str) -> DynStorage {
        from_url("s3://data", self.server.options_for(endpoint)).unwrap()
    }
}

/// Timeouts well above a tiny GET on this machine, retries enough that a 6% fault rate
/// essentially never exhausts them (0.06^8).
fn resilient(store: impl Storage + 'static, timeout: Duration, seed: u64) -> DynStorage {
    Arc::new(store.with_timeout(timeout).with_retry(RetryConfig {
        max_attempts: 8,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        max_elapsed: Duration::from_secs(30),
        seed,
        ..RetryConfig::default()
    }))
}

/// One delivered batch: (index, checksum) of each sample, and the skipped (index, error).
#[derive(Debug)]
struct Checked {
    epoch: u64,
    samples: Vec<(u64, u64)>,
    skipped: Vec<(u64, String, bool)>,
}

fn checksums(store: DynStorage, dataset: &Dataset) -> loader_core::DataLoaderBuilder<u64, Checked> {
    // These tests bring their own retry layer (`resilient`), whose bounds they rely on: the
    // loader's default retry on top would ride out the outages they expect to see fail.
    DataLoader::builder(store, dataset.clone()).retry(None).map(
        |bytes: Bytes, _: &SampleInfo| Ok(checksum(&bytes)),
        |raw: RawBatch<u64>| {
            Ok(Checked {
                epoch: raw.epoch,
                samples: raw.samples.iter().map(|(i, s)| (i.index, *s)).collect(),
                skipped: raw
                    .skipped
                    .iter()
                    .map(|e| {
                        let fetch = matches!(e.failure, ItemFailure::Fetch(_));
                        (e.info.index, e.to_string(), fetch)
                    })
                    .collect(),
            })
        },
    )
}

/// Run one pass under the watchdog, failing on any error; the loader comes back.
fn one_epoch(mut loader: DataLoader<u64, Checked>) -> (DataLoader<u64, Checked>, Vec<(u64, u64)>) {
    within(HANG_LIMIT, "one epoch", move || {
        let epoch = loader.epoch();
        let mut out = Vec::new();
        for batch in &mut loader {
            let batch = batch.unwrap();
            assert_eq!(batch.epoch, epoch, "a batch of another epoch");
            assert!(batch.skipped.is_empty(), "{:?}", batch.skipped);
            out.extend(batch.samples);
        }
        (loader, out)
    })
}

/// Delivered exactly the sampler's order, each with the checksum of its source file.
fn assert_exact(delivered: &[(u64, u64)], order: &[u64], served: &Served, what: &str) {
    let indices: Vec<u64> = delivered.iter().map(|d| d.0).collect();
    assert_eq!(indices, order, "{what}: not every index once, in order");
    for &(index, sum) in delivered {
        assert_eq!(
            sum, served.sums[index as usize],
            "{what}: wrong bytes for index {index}"
        );
    }
}

fn strategies() -> [Fetch; 3] {
    [
        Fetch::Sequential { workers: 2 },
        Fetch::Threads { threads: 8 },
        Fetch::Async { max_in_flight: 32 },
    ]
}

/// One shuffled epoch of `served` through `store`: every index once, in the sampler's order,
/// with the bytes of its file.
fn shuffled_epoch_is_exact(
    store: DynStorage,
    served: &Served,
    seed: u64,
    fetch: Fetch,
    what: &str,
) {
    let loader = checksums(store, &served.dataset)
        .batch_size(16)
        .shuffle(true)
        .seed(seed)
        .fetch(fetch)
        .decode_threads(2)
        .build()
        .unwrap();
    // The loader's own plan: the order itself is the sampler's to prove (loader-sampler's
    // tests); here, that faults lose, repeat and reorder nothing of it.
    let order: Vec<u64> = loader.planned(0).collect();
    assert_eq!(order.len(), served.dataset.len());
    let (_, delivered) = one_epoch(loader);
    assert_exact(&delivered, &order, served, what);
}

#[test]
fn transient_errors_and_stalls_lose_and_repeat_nothing() {
    const IMAGES: usize = 200;
    let served = Served::new(IMAGES);
    for run in 0..runs() {
        let mut stalls = 0;
        for (s, fetch) in strategies().into_iter().enumerate() {
            let seed = run * 10 + s as u64;
            // 5% fail at once, 1% stall far past the timeout.
            let faults = Arc::new(served.store_at(&served.server.endpoint()).with_faults(
                FaultConfig::transient(0.05, seed).with_stalls(0.01, Duration::from_secs(30)),
            ));
            let store = resilient(Arc::clone(&faults), Duration::from_millis(500), seed);
            let what = format!("run {run}, {fetch:?}");
            shuffled_epoch_is_exact(store, &served, seed, fetch, &what);
            assert!(faults.injected() > 0, "{what}: no error was injected");
            stalls += faults.stalled();
            eprintln!(
                "{what}: {} errors and {} stalls injected, all recovered",
                faults.injected(),
                faults.stalled()
            );
        }
        assert!(stalls > 0, "run {run}: no request stalled");
    }
}

#[test]
fn responses_cut_mid_way_or_stalled_by_the_network_are_retried() {
    const IMAGES: usize = 200;
    let served = Served::new(IMAGES);
    for run in 0..runs() {
        let mut stalls = 0;
        for (s, fetch) in strategies().into_iter().enumerate() {
            let seed = 100 + run * 10 + s as u64;
            let proxy = DelayProxy::with_faults(
                served.server.addr(),
                Duration::ZERO,
                0,
                ProxyFaults {
                    cut_rate: 0.05,
                    stall_rate: 0.01,
                    seed,
                },
            )
            .unwrap();
            let store = resilient(
                served.store_at(&proxy.url()),
                Duration::from_millis(500),
                seed,
            );
            let what = format!("run {run}, {fetch:?}");
            shuffled_epoch_is_exact(store, &served, seed, fetch, &what);
            let stats = proxy.stats();
            assert!(stats.cut > 0, "{what}: no response was cut: {stats:?}");
            stalls += stats.stalled;
            eprintln!("{what}: {stats:?}, all recovered");
        }
        assert!(stalls > 0, "run {run}: no response stalled");
    }
}

/// Indices 5 (missing), 12 (corrupt JPEG) and 20 (forbidden) of 40 are bad.
struct Broken {
    served: Served,
    /// S3, except that one key is forbidden while `deny` is set, as a bucket policy would.
    forbid: DynStorage,
    deny: Arc<AtomicBool>,
    originals: Vec<(PathBuf, Vec<u8>)>,
}

const MISSING: usize = 5;
const CORRUPT: usize = 12;
const FORBIDDEN: usize = 20;

impl Broken {
    fn new() -> Self {
        let served = Served::new(40);
        let originals: Vec<(PathBuf, Vec<u8>)> = [MISSING, CORRUPT]
            .iter()
            .map(|&i| (served.path(i), std::fs::read(served.path(i)).unwrap()))
            .collect();
        std::fs::remove_file(served.path(MISSING)).unwrap();
        // Half a JPEG: the header parses, the scan ends early.
        let half = &originals[1].1[..originals[1].1.len() / 2];
        std::fs::write(served.path(CORRUPT), half).unwrap();
        let deny = Arc::new(AtomicBool::new(true));
        let forbidden = served.dataset.get(FORBIDDEN).unwrap().key.to_string();
        let inner = served.store_at(&served.server.endpoint());
        let name = inner.name().to_owned();
        let denied = Arc::clone(&deny);
        let forbid: DynStorage = Arc::new(HookedStore::new(inner, move |key| {
            (key == forbidden && denied.load(Ordering::SeqCst)).then(|| {
                Err(loader_core::storage::Error::new(
                    ErrorKind::PermissionDenied,
                    &name,
                    key,
                    "access denied by the bucket policy",
                ))
            })
        }));
        Self {
            served,
            forbid,
            deny,
            originals,
        }
    }

    fn repair(&self, index: usize) {
        match index {
            MISSING => std::fs::write(&self.originals[0].0, &self.originals[0].1).unwrap(),
            CORRUPT => std::fs::write(&self.originals[1].0, &self.originals[1].1).unwrap(),
            _ => self.deny.store(false, Ordering::SeqCst),
        }
    }

    fn key(&self, index: usize) -> String {
        self.served.dataset.get(index).unwrap().key.to_string()
    }

    /// The real decode pipeline, so a corrupt JPEG is found where a user would meet it.
    fn loader(&self, policy: ErrorPolicy) -> DataLoader {
        DataLoader::builder(Arc::clone(&self.forbid), self.served.dataset.clone())
            .batch_size(4)
            .fetch(Fetch::Async { max_in_flight: 8 })
            .decode_threads(2)
            .error_policy(policy)
            .transform(thumbnails())
            .build()
            .unwrap()
    }
}

#[test]
fn permanent_faults_fail_naming_key_and_cause_and_the_loader_stays_usable() {
    let broken = Broken::new();
    let mut loader = broken.loader(ErrorPolicy::Fail);
    let mut states = Vec::new();
    // Each pass ends at the next bad item; it is then repaired, and the next pass (the
    // next epoch) gets further, until an epoch completes.
    for (epoch, bad, cause) in [
        (0, MISSING, "not found"),
        (1, CORRUPT, "decode failed"),
        (2, FORBIDDEN, "permission denied"),
    ] {
        assert_eq!(loader.epoch(), epoch);
        let mut delivered = Vec::new();
        let mut error = None;
        for batch in &mut loader {
            match batch {
                Ok(batch) => delivered.extend(batch.info.indices),
                Err(e) => error = Some(e),
            }
        }
        let error = error.unwrap_or_else(|| panic!("epoch {epoch}: no error for index {bad}"));
        let text = error.to_string();
        assert!(
            text.contains(&broken.key(bad)) && text.to_lowercase().contains(cause),
            "epoch {epoch}: the error should name {:?} and {cause:?}: {text}",
            broken.key(bad)
        );
        if bad != CORRUPT {
            assert!(text.contains("s3://data"), "no backend in: {text}");
        }
        let batch_start = (bad / 4 * 4) as u64;
        assert_eq!(delivered, (0..batch_start).collect::<Vec<_>>());
        let state = loader.state().unwrap();
        assert_eq!((state.epoch, state.position), (epoch, batch_start));
        states.push(state);
        broken.repair(bad);
    }
    assert_eq!(loader.epoch(), 3);
    let all: Vec<u64> = (&mut loader)
        .flat_map(|b| b.unwrap().info.indices)
        .collect();
    assert_eq!(all, (0..40).collect::<Vec<_>>(), "the repaired epoch");
    // Each failed epoch can be finished from its checkpoint.
    loader.resume(states[0].clone()).unwrap();
    let rest: Vec<u64> = (&mut loader)
        .flat_map(|b| b.unwrap().info.indices)
        .collect();
    assert_eq!(rest, (4..40).collect::<Vec<_>>());
}

#[test]
fn skip_completes_the_epoch_and_reports_exactly_the_bad_items() {
    let broken = Broken::new();
    let mut loader = broken.loader(ErrorPolicy::Skip { max_failures: 3 });
    let mut delivered = Vec::new();
    let mut skipped = Vec::new();
    for batch in &mut loader {
        let batch = batch.unwrap();
        delivered.extend(batch.info.indices.iter().copied());
        for e in &batch.info.skipped {
            let fetch = matches!(e.failure, ItemFailure::Fetch(_));
            skipped.push((e.info.index, e.to_string(), fetch));
        }
    }
    let bad = [MISSING as u64, CORRUPT as u64, FORBIDDEN as u64];
    assert_eq!(
        skipped.iter().map(|s| s.0).collect::<Vec<_>>(),
        bad,
        "{skipped:?}"
    );
    for (index, text, fetch) in &skipped {
        assert!(text.contains(&broken.key(*index as usize)), "{text}");
        assert_eq!(*fetch, *index != CORRUPT as u64, "{text}");
    }
    let mut all = delivered.clone();
    all.extend(bad);
    all.sort_unstable();
    assert_eq!(all, (0..40).collect::<Vec<_>>(), "lost or repeated items");
    assert_eq!(delivered.len(), 37);

    // One more failure than allowed is an error, not a silent loss.
    let mut strict = broken.loader(ErrorPolicy::Skip { max_failures: 2 });
    let failed = strict.find_map(|b| b.err()).unwrap();
    assert!(
        matches!(
            failed,
            Error::Engine(EngineError::TooManyFailures {
                max_failures: 2,
                ..
            })
        ),
        "{failed}"
    );
}

#[test]
fn server_gone_mid_epoch_is_an_error_and_resume_after_restart_loses_nothing() {
    const IMAGES: usize = 240;
    let mut served = Served::new(IMAGES);
    for fetch in strategies() {
        let store = resilient(
            served.store_at(&served.server.endpoint()),
            Duration::from_secs(2),
            1,
        );
        let mut loader = checksums(store, &served.dataset)
            .batch_size(8)
            .shuffle(true)
            .seed(4)
            .fetch(fetch)
            .decode_threads(2)
            .prefetch(2)
            .build()
            .unwrap();
        let mut delivered = Vec::new();
        for batch in (&mut loader).take(2) {
            delivered.extend(batch.unwrap().samples);
        }
        served.server.stop();
        let (returned, rest, error) = within(HANG_LIMIT, &format!("{fetch:?}: server gone"), {
            move || {
                let mut rest = Vec::new();
                let mut error = None;
                for batch in &mut loader {
                    match batch {
                        Ok(batch) => rest.extend(batch.samples),
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                (loader, rest, error)
            }
        });
        let mut loader = returned;
        delivered.extend(rest);
        let error = error.unwrap_or_else(|| panic!("{fetch:?}: no error with the server gone"));
        assert!(
            delivered.len() < IMAGES,
            "{fetch:?}: everything was prefetched before the stop"
        );
        let text = error.to_string();
        assert!(text.contains("s3://data"), "{fetch:?}: no backend: {text}");
        let state = loader.state().unwrap();
        assert_eq!(state.position, delivered.len() as u64);

        served.server.restart().unwrap();
        loader.resume(state).unwrap();
        let order: Vec<u64> = loader.planned(0).collect();
        delivered.extend(one_epoch(loader).1);
        assert_exact(
            &delivered,
            &order,
            &served,
            &format!("{fetch:?}, stopped and restarted"),
        );
    }
}

/// A sample that counts how many of its kind are alive.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn a_stalled_consumer_keeps_live_buffers_bounded_and_the_epoch_completes() {
    const IMAGES: usize = 300;
    let served = Served::new(IMAGES);
    let live = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (batch, prefetch, in_flight, decode) = (10, 2, 16, 2);
    let stage = {
        let (live, peak) = (Arc::clone(&live), Arc::clone(&peak));
        move |_: Bytes, info: &SampleInfo| {
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            Ok((info.index, Tracked(Arc::clone(&live))))
        }
    };
    let mut loader = DataLoader::builder(
        served.store_at(&served.server.endpoint()),
        served.dataset.clone(),
    )
    .batch_size(batch)
    .prefetch(prefetch)
    .decode_threads(decode)
    .fetch(Fetch::Async {
        max_in_flight: in_flight,
    })
    .map(stage, |raw: RawBatch<(u64, Tracked)>| Ok(raw))
    .build()
    .unwrap();
    let bound = prefetch * batch + (batch + in_flight + decode) + batch;
    let held = loader.next().unwrap().unwrap();
    // The consumer stalls for seconds: the loader must stop fetching, not pile up.
    std::thread::sleep(Duration::from_secs(2));
    let at_stall = peak.load(Ordering::SeqCst);
    assert!(at_stall <= bound, "peak {at_stall} > bound {bound}");
    let mut seen: Vec<u64> = held.samples.iter().map(|(_, (i, _))| *i).collect();
    drop(held);
    for raw in &mut loader {
        seen.extend(raw.unwrap().samples.iter().map(|(_, (i, _))| *i));
    }
    assert_eq!(seen, (0..IMAGES as u64).collect::<Vec<_>>());
    assert!(peak.load(Ordering::SeqCst) <= bound);
    // The loader runs ahead into the next epoch; dropping it frees that too.
    drop(loader);
    assert_eq!(live.load(Ordering::SeqCst), 0, "samples leaked");
}
