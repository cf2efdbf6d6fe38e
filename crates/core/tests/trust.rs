#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! What a week-long run meets, each case once a hang, a repeated sample or a wrong label on
//! the old code: resume near an epoch's end, a panicking backend or sampler, `set_epoch`
//! after `resume`, a failing collate, a FIFO named by a manifest, a read that never returns,
//! and transient faults with nothing but the defaults. Every call that could hang runs
//! under the testkit's watchdog, so a hang is a failed test, not a stuck CI.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use loader_core::sampler::{Indices, SequentialSampler};
use loader_core::storage::layer::FaultConfig;
use loader_core::storage::{ObjectMeta, Result as StorageResult};
use loader_core::{
    CollateError, DataLoader, Dataset, DynStorage, Error, ErrorPolicy, Fetch, ItemError,
    LoaderOptions, LoaderState, RawBatch, SampleInfo, Sampler, SourceContext, Storage, StorageExt,
    from_url,
};
use loader_testkit::HookedStore;
use loader_testkit::watchdog::no_hang;

fn strategies() -> [Fetch; 3] {
    [
        Fetch::Sequential { workers: 1 },
        Fetch::Threads { threads: 1 },
        Fetch::Async { max_in_flight: 1 },
    ]
}

/// `n` small files `i.bin` holding their index, on local disk, with label `i % 3`.
struct Files {
    dir: tempfile::TempDir,
    store: DynStorage,
    dataset: Dataset,
}

fn files(n: usize) -> Files {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(dir.path().join(format!("{i}.bin")), i.to_string()).unwrap();
    }
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let dataset = Dataset::from_pairs((0..n).map(|i| (format!("{i}.bin"), (i % 3) as i64)));
    Files {
        dir,
        store,
        dataset,
    }
}

/// One delivered batch: (index, label) of each sample, and the indices of skipped ones
/// with their error text.
#[derive(Debug, Clone, PartialEq)]
struct Got {
    samples: Vec<(u64, i64)>,
    skipped: Vec<(u64, String)>,
}

/// A stage that checks the bytes are the sample's own, and a collate that keeps indices
/// and labels.
fn checked(store: DynStorage, dataset: Dataset) -> loader_core::DataLoaderBuilder<u64, Got> {
    DataLoader::builder(store, dataset).map(
        |bytes: Bytes, info: &SampleInfo| {
            let text = std::str::from_utf8(&bytes)?;
            assert_eq!(text, info.index.to_string(), "bytes of another sample");
            Ok(info.index)
        },
        |raw: RawBatch<u64>| {
            Ok(Got {
                samples: raw
                    .samples
                    .iter()
                    .map(|(info, _)| (info.index, info.label.class().unwrap_or(-1)))
                    .collect(),
                skipped: raw
                    .skipped
                    .iter()
                    .map(|e: &ItemError| (e.info.index, e.to_string()))
                    .collect(),
            })
        },
    )
}

/// One pass: its batches, or the error text that ended it.
fn pass(loader: &mut DataLoader<u64, Got>) -> Vec<Result<Got, String>> {
    (&mut *loader)
        .map(|batch| batch.map_err(|e| e.to_string()))
        .collect()
}

fn indices(batches: &[Result<Got, String>]) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| b.as_ref().unwrap().samples.iter().map(|s| s.0))
        .collect()
}

// Defect 1: the admission window was sized from the first plan (here the 1-item tail of
// epoch 0); the next epoch's 8-item batch could never gather its permits.
#[test]
fn resume_near_the_end_of_an_epoch_then_a_full_epoch_does_not_hang() {
    for fetch in strategies() {
        let f = files(9);
        let mut loader = checked(Arc::clone(&f.store), f.dataset.clone())
            .batch_size(8)
            .fetch(fetch)
            .decode_threads(1)
            .prefetch(1)
            .build()
            .unwrap();
        loader.resume(LoaderState::at(0, 8)).unwrap();
        let (tail, next) = no_hang(&format!("{fetch:?}: two passes after resume"), move || {
            (pass(&mut loader), pass(&mut loader))
        });
        assert_eq!(indices(&tail), [8], "{fetch:?}");
        assert_eq!(indices(&next), (0..9).collect::<Vec<_>>(), "{fetch:?}");
        drop(f.dir);
    }
}

// Defect 2: the panic was printed and the item never reported (Async), or the pool thread
// died (Threads, Sequential): `next()` waited forever.
#[test]
fn a_panicking_backend_is_an_error_naming_key_and_backend_never_a_hang() {
    for fetch in strategies() {
        for policy in [ErrorPolicy::Fail, ErrorPolicy::Skip { max_failures: 1 }] {
            let f = files(10);
            // A backend with a bug: `get` panics on one key.
            let store: DynStorage = Arc::new(
                HookedStore::new(Arc::clone(&f.store), |key| {
                    (key == "4.bin").then(|| panic!("a bug in the backend"))
                })
                .named("panicky://test"),
            );
            let mut loader = checked(store, f.dataset.clone())
                .batch_size(3)
                .fetch(fetch)
                .decode_threads(1)
                .error_policy(policy)
                .build()
                .unwrap();
            let what = format!("{fetch:?} {policy:?}");
            let (first, second) = no_hang(&what, move || (pass(&mut loader), pass(&mut loader)));
            match policy {
                ErrorPolicy::Fail => {
                    assert_eq!(first.len(), 2, "{what}: {first:?}");
                    let err = first[1].as_ref().unwrap_err();
                    for needle in [
                        "\"4.bin\"",
                        "panicky://test",
                        "panicked",
                        "a bug in the backend",
                    ] {
                        assert!(err.contains(needle), "{what}: {needle} missing in {err}");
                    }
                }
                ErrorPolicy::Skip { .. } => {
                    assert_eq!(
                        indices(&first),
                        [0, 1, 2, 3, 5, 6, 7, 8, 9],
                        "{what}: {first:?}"
                    );
                    let skipped: Vec<_> = first
                        .iter()
                        .flat_map(|b| b.as_ref().unwrap().skipped.clone())
                        .collect();
                    assert_eq!(skipped.len(), 1, "{what}");
                    assert_eq!(skipped[0].0, 4);
                    assert!(skipped[0].1.contains("panicked"), "{what}: {skipped:?}");
                }
            }
            // The loader is still usable: the next epoch reads (and meets the bug again).
            assert!(!second.is_empty(), "{what}");
        }
    }
}

/// A sampler with a bug: it panics when asked for epoch 1.
#[derive(Debug)]
struct PanickySampler(SequentialSampler);

impl Sampler for PanickySampler {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        if epoch == 1 {
            panic!("a bug in the sampler");
        }
        self.0.indices_from(epoch, position)
    }
}

// The panic took the engine's driver down with it: the pass ended as if the epoch were
// complete, or waited forever.
#[test]
fn a_panicking_sampler_is_an_error_not_a_normal_end_of_the_epoch() {
    for fetch in strategies() {
        let f = files(6);
        let mut loader = checked(Arc::clone(&f.store), f.dataset.clone())
            .batch_size(4)
            .fetch(fetch)
            .decode_threads(1)
            .sampler(PanickySampler(SequentialSampler::new(6)))
            .build()
            .unwrap();
        let (first, second) = no_hang(&format!("{fetch:?}"), move || {
            (pass(&mut loader), pass(&mut loader))
        });
        // The engine plans ahead into epoch 1 while epoch 0 is delivered: epoch 0 comes
        // whole, and the next pass is the error.
        assert_eq!(indices(&first), (0..6).collect::<Vec<_>>(), "{fetch:?}");
        assert_eq!(second.len(), 1, "{fetch:?}: {second:?}");
        let err = second[0].as_ref().unwrap_err();
        assert!(
            err.contains("panicked") && err.contains("a bug in the sampler"),
            "{fetch:?}: {err}"
        );
    }
}

// Defect 3: `set_epoch(state.epoch)` after `resume(state)` (the training loop of docs/rust.md after a
// restart) restarted the epoch at position 0 and delivered its first samples again.
#[test]
fn set_epoch_after_resume_keeps_the_position() {
    let f = files(10);
    let mut loader = checked(Arc::clone(&f.store), f.dataset.clone())
        .batch_size(4)
        .shuffle(true)
        .seed(3)
        .build()
        .unwrap();
    let full = no_hang("a whole epoch", {
        let mut whole = checked(Arc::clone(&f.store), f.dataset.clone())
            .batch_size(4)
            .shuffle(true)
            .seed(3)
            .build()
            .unwrap();
        move || {
            whole.set_epoch(2);
            indices(&pass(&mut whole))
        }
    });
    loader.resume(LoaderState::at(2, 4)).unwrap();
    loader.set_epoch(2);
    assert_eq!(at(loader.state().unwrap()), (2, 4));
    let rest = no_hang("the resumed epoch", move || indices(&pass(&mut loader)));
    assert_eq!(
        rest,
        full[4..],
        "the resumed epoch repeated or lost samples"
    );
}

// Reported by review: a collate that failed counted its batch as delivered, so `state()`
// moved past samples the user never got.
#[test]
fn a_failed_collate_does_not_move_the_state_past_the_batch() {
    let f = files(8);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let mut loader = DataLoader::builder(Arc::clone(&f.store), f.dataset.clone())
        .batch_size(2)
        .map(
            |_: Bytes, info: &SampleInfo| Ok(info.index),
            move |raw: RawBatch<u64>| {
                if counted.fetch_add(1, Ordering::SeqCst) == 1 {
                    return Err(Error::Collate(CollateError::other("refused once")));
                }
                Ok(raw.samples.iter().map(|s| s.1).collect::<Vec<_>>())
            },
        )
        .build()
        .unwrap();
    let (first, state, resumed) = no_hang("collate failure", move || {
        let first: Vec<_> = (&mut loader)
            .map(|b| b.map_err(|e| e.to_string()))
            .collect();
        let state = loader.state().unwrap();
        loader.resume(state.clone()).unwrap();
        let resumed: Vec<_> = (&mut loader).map(|b| b.unwrap()).collect();
        (first, state, resumed)
    });
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first[1].as_ref().unwrap_err().contains("refused once"));
    assert_eq!(
        at(state),
        (0, 2),
        "the state moved past the batch that failed to collate"
    );
    assert_eq!(resumed, [vec![2, 3], vec![4, 5], vec![6, 7]]);
}

// Defect 5: nothing retried by default: with 5% transient errors the first batch failed.
#[test]
fn transient_errors_are_ridden_out_with_the_default_settings() {
    let f = files(500);
    let mut injected = 0;
    for (epoch, seed) in (0..20u64).enumerate() {
        let faulty = Arc::new(Arc::clone(&f.store).with_faults(FaultConfig::transient(0.05, seed)));
        let mut loader = checked(Arc::clone(&faulty) as DynStorage, f.dataset.clone())
            .batch_size(32)
            .build()
            .unwrap();
        let got = no_hang(&format!("epoch {epoch}"), move || pass(&mut loader));
        assert!(got.iter().all(Result::is_ok), "seed {seed}: {got:?}");
        assert_eq!(indices(&got), (0..500).collect::<Vec<_>>());
        injected += faulty.injected();
    }
    // 10,000 items read through 5% faults: about 500 injected, all retried away.
    assert!(injected > 300, "only {injected} faults injected");
}

// Defect 7: a manifest naming a FIFO blocked the read (and the loader's drop) forever.
#[test]
fn a_fifo_named_by_a_manifest_is_refused_not_read() {
    let f = files(4);
    let fifo = f.dir.path().join("zz_fifo.bin");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let mut pairs: Vec<(String, i64)> = (0..4).map(|i| (format!("{i}.bin"), 0)).collect();
    pairs.push(("zz_fifo.bin".into(), 0));
    let mut loader = checked(Arc::clone(&f.store), Dataset::from_pairs(pairs))
        .batch_size(5)
        .error_policy(ErrorPolicy::Skip { max_failures: 1 })
        .build()
        .unwrap();
    let got = no_hang("a FIFO in the dataset", move || pass(&mut loader));
    let batch = got[0].as_ref().unwrap();
    assert_eq!(batch.samples.len(), 4);
    assert_eq!(batch.skipped.len(), 1);
    let err = &batch.skipped[0].1;
    assert!(
        err.contains("zz_fifo.bin") && err.contains("not a regular file"),
        "{err}"
    );
}

/// A backend whose reads block their thread forever, as a read on a hung network mount
/// does: the future waits on a blocking-pool thread that never returns.
#[derive(Debug)]
struct HungMount;

#[async_trait]
impl Storage for HungMount {
    fn name(&self) -> &str {
        "hung://mount"
    }
    async fn get_opts(
        &self,
        key: &str,
        options: loader_core::storage::GetOptions,
    ) -> StorageResult<loader_core::storage::GetResult> {
        // Every read hangs, whole or ranged, on a blocking thread as a hung mount does.
        let _ = (key, options);
        let _ = tokio::task::spawn_blocking(|| {
            std::thread::sleep(Duration::from_secs(3600));
        })
        .await;
        Ok(loader_core::storage::GetResult::new(Bytes::new()))
    }
    async fn head(&self, key: &str) -> StorageResult<ObjectMeta> {
        Ok(ObjectMeta::new(key, 0))
    }
    fn list<'a>(&'a self, _: &'a str) -> BoxStream<'a, StorageResult<ObjectMeta>> {
        Box::pin(futures::stream::empty())
    }
}

// Defect 7, second half: dropping the loader waited for the stuck blocking read.
#[test]
fn dropping_a_loader_returns_even_when_a_blocking_read_never_does() {
    for fetch in strategies() {
        let dataset = Dataset::from_pairs((0..4).map(|i| (format!("{i}.bin"), 0)));
        let mut loader = checked(Arc::new(HungMount), dataset)
            .batch_size(2)
            .fetch(fetch)
            .build()
            .unwrap();
        no_hang(&format!("{fetch:?}: drop over a hung read"), move || {
            // Poll once: the engine starts and its reads get stuck; nothing is ready.
            let waker = futures::task::noop_waker();
            let mut cx = std::task::Context::from_waker(&waker);
            let polled = futures::Stream::poll_next(std::pin::Pin::new(&mut loader), &mut cx);
            assert!(polled.is_pending());
            std::thread::sleep(Duration::from_millis(200));
            let metrics = loader.metrics().unwrap();
            drop(loader);
            // The stuck read's thread was left behind, and the metrics say so.
            assert!(metrics.detached_on_drop(), "{fetch:?}");
        });
    }
}

// Defect 5, second half: a store away for 10 s (the S3 server stopped, then restarted on
// its port) is ridden out by the default retry policy, 128 requests in flight.
#[test]
fn a_store_away_for_ten_seconds_is_ridden_out_by_the_defaults() {
    const IMAGES: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for i in 0..IMAGES {
        std::fs::write(data.join(format!("{i}.bin")), i.to_string()).unwrap();
    }
    let mut server = loader_testkit::S3Server::start(dir.path()).unwrap();
    let store = from_url("s3://data", server.options()).unwrap();
    let dataset = Dataset::from_pairs((0..IMAGES).map(|i| (format!("{i}.bin"), 0)));
    let mut loader = checked(store, dataset)
        .batch_size(16)
        .fetch(Fetch::Async { max_in_flight: 128 })
        .build()
        .unwrap();
    let got = no_hang("an epoch across a 10 s outage", move || {
        let mut got: Vec<Result<Got, String>> = (&mut loader)
            .take(2)
            .map(|b| b.map_err(|e| e.to_string()))
            .collect();
        server.stop();
        let restarted = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            server.restart().unwrap();
            server
        });
        got.extend(pass(&mut loader));
        let server = restarted.join().unwrap();
        drop(server);
        got
    });
    assert!(got.iter().all(Result::is_ok), "{got:?}");
    assert_eq!(indices(&got), (0..IMAGES as u64).collect::<Vec<_>>());
}

/// A store whose listing and reads fail transiently a few times first, as S3 does under
/// load: listings fail before their first item, then once midway; reads fail twice.
#[derive(Debug)]
struct FlakyListing {
    inner: DynStorage,
    lists: AtomicUsize,
    gets: AtomicUsize,
}

fn transient(name: &str, key: &str) -> loader_core::storage::Error {
    loader_core::storage::Error::new(
        loader_core::storage::ErrorKind::Transient,
        name,
        key,
        "503 SlowDown",
    )
}

#[async_trait]
impl Storage for FlakyListing {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn get_opts(
        &self,
        key: &str,
        options: loader_core::storage::GetOptions,
    ) -> StorageResult<loader_core::storage::GetResult> {
        if options.range.is_none() && self.gets.fetch_add(1, Ordering::SeqCst) < 2 {
            return Err(transient(self.name(), key));
        }
        self.inner.get_opts(key, options).await
    }
    async fn head(&self, key: &str) -> StorageResult<ObjectMeta> {
        self.inner.head(key).await
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, StorageResult<ObjectMeta>> {
        use futures::StreamExt;
        match self.lists.fetch_add(1, Ordering::SeqCst) {
            0 | 1 => {
                futures::stream::once(async move { Err(transient(self.name(), prefix)) }).boxed()
            }
            2 => self
                .inner
                .list(prefix)
                .take(3)
                .chain(futures::stream::once(async move {
                    Err(transient(self.name(), prefix))
                }))
                .boxed(),
            _ => self.inner.list(prefix),
        }
    }
}

// Defect 5: listings and manifest reads were not retried at all. A dataset opened by URL
// reads them through the same request stack as its samples (the default: retried).
#[test]
fn listings_and_manifest_reads_are_retried_by_default() {
    let dir = tempfile::tempdir().unwrap();
    loader_testkit::DatasetSpec::tiny(9, 3)
        .write(dir.path())
        .unwrap();
    std::fs::write(dir.path().join("m.csv"), "class_000/a.jpg,0\n").unwrap();
    let local = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let flaky = Arc::new(FlakyListing {
        inner: Arc::clone(&local),
        lists: AtomicUsize::new(0),
        gets: AtomicUsize::new(0),
    });
    let open = |settings: &[(&str, &str)]| {
        let mut options = LoaderOptions::default();
        for (key, value) in settings {
            options.set(key, value).unwrap();
        }
        let store = Arc::clone(&flaky) as DynStorage;
        Dataset::open_blocking("", &SourceContext::new(store, &options))
    };
    let listed = open(&[]).unwrap();
    assert_eq!(listed, Dataset::image_folder_blocking(&*local).unwrap());
    assert_eq!(listed.len(), 9);
    assert!(
        flaky.lists.load(Ordering::SeqCst) >= 4,
        "broken listings restarted"
    );
    let manifest = open(&[("source.manifest", "m.csv")]).unwrap();
    assert_eq!(manifest.len(), 1);
    assert!(flaky.gets.load(Ordering::SeqCst) >= 3);
}

// The rule (docs/reliability.md): a sample skipped for a transient
// error (once retries, here off, are spent) is reported with its key and not read again in
// that epoch; the next epoch reads it. The `Skip` budget counts the failures of one epoch
// since the loader started or resumed it: a resume starts it afresh, because a checkpoint
// holds positions, not failures.
#[test]
fn a_transient_skip_loses_the_sample_for_its_epoch_only_and_resume_resets_the_budget() {
    let f = files(12);
    // The first read of 2.bin fails transiently; every read of 9.bin does.
    let remaining = std::sync::Mutex::new(std::collections::HashMap::from([
        ("2.bin".to_owned(), 1),
        ("9.bin".to_owned(), usize::MAX),
    ]));
    let name = f.store.name().to_owned();
    let store: DynStorage = Arc::new(HookedStore::new(Arc::clone(&f.store), move |key| {
        let mut remaining = remaining.lock().unwrap();
        let left = remaining.get_mut(key).filter(|left| **left > 0)?;
        *left -= 1;
        Some(Err(transient(&name, key)))
    }));
    let mut loader = checked(Arc::clone(&store), f.dataset.clone())
        .batch_size(4)
        .retry(None)
        // One request at a time, in the order of the plan: the engine runs ahead into later
        // epochs, and "the first read of 2.bin" must be epoch 0's.
        .fetch(Fetch::Async { max_in_flight: 1 })
        .error_policy(ErrorPolicy::Skip { max_failures: 1 })
        .build()
        .unwrap();
    let (first, state, resumed, next) = no_hang("skips and budget", move || {
        let first = pass(&mut loader);
        let state = loader.state().unwrap();
        loader.resume(state.clone()).unwrap();
        let resumed = pass(&mut loader);
        let next = pass(&mut loader);
        (first, state, resumed, next)
    });
    // Epoch 0: 2.bin skipped and reported; 9.bin is the second failure, over the budget.
    assert_eq!(first.len(), 3, "{first:?}");
    let skipped = &first[0].as_ref().unwrap().skipped;
    assert_eq!(skipped.len(), 1, "{first:?}");
    assert!(skipped[0].1.contains("\"2.bin\""), "{skipped:?}");
    assert!(
        first[2]
            .as_ref()
            .unwrap_err()
            .contains("more than 1 failed")
    );
    // The failed batch was not delivered: the state points at it.
    assert_eq!(at(state), (0, 8));
    // Resumed: a fresh budget, so 9.bin (which always fails) is one skip, not too many.
    assert_eq!(indices(&resumed), [8, 10, 11], "{resumed:?}");
    assert_eq!(resumed[0].as_ref().unwrap().skipped[0].0, 9);
    // Epoch 1 reads 2.bin again: the skip lost it for epoch 0 only.
    let mut want: Vec<u64> = (0..12).collect();
    want.retain(|&i| i != 9);
    assert_eq!(indices(&next), want);
}

/// A state's epoch and position, without its order stamp.
fn at(state: LoaderState) -> (u64, u64) {
    (state.epoch, state.position)
}
