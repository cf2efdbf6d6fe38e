#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! One randomized property of the whole loader, through its public API: whatever the
//! dataset size, batch size, `drop_last`, shuffle, rank and world size, fetch strategy,
//! prefetch, in-flight and thread counts (down to 1), start position, interruption and
//! resume (followed or not by `set_epoch`), how the consumer stops a pass (reading to its
//! end, stopping after exactly the batches left as a loop of `len()` steps does, or
//! breaking early and starting a new pass), transient faults, stalls past the timeout and a
//! panicking backend, and whether the bytes come from local disk, the in-process S3 server
//! or that server behind the delay proxy, and whether a cache (memory, disk, both; tiny
//! budgets, any policy) sits in front of the store, under the loader's global order or a
//! sampler given to it: every epoch delivers each of this rank's samples exactly once, in
//! order, with the sample's own bytes, or reports it skipped with its key; nothing hangs
//! (every run is under the watchdog) and no thread of the loader is left once it is
//! dropped. (Several ranks and restripes across runs: `elastic.rs`.)
//!
//! 512 cases by default (about 40 s in a debug build on 2 cores);
//! `LOADER_PROPTEST_CASES=N` runs N. Alone in its test binary: threads are counted
//! process-wide.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use loader_core::sampler::{BatchSampler, RandomSampler, SamplerState, SequentialSampler, Stripe};
use loader_core::scheduler::THREAD_PREFIX;
use loader_core::storage::layer::{CacheConfig, CachePolicy, FaultConfig, RetryConfig};
use loader_core::{
    DataLoader, Dataset, DynStorage, ErrorPolicy, Fetch, LoaderState, RawBatch, SampleInfo,
    Sampler, StorageExt, from_url,
};
use loader_testkit::watchdog::within;
use loader_testkit::{DelayProxy, HookedStore, S3Server};
use proptest::prelude::*;

const MAX_ITEMS: usize = 300;

/// Files `0.bin` .. `299.bin`, each holding its index, on disk and behind the S3 server
/// (directly and through a 2 ms delay proxy); made once for all cases.
struct World {
    _dir: tempfile::TempDir,
    local: DynStorage,
    s3: DynStorage,
    delayed: DynStorage,
    _server: S3Server,
    _proxy: DelayProxy,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        for i in 0..MAX_ITEMS {
            std::fs::write(data.join(format!("{i}.bin")), i.to_string()).unwrap();
        }
        let server = S3Server::start(dir.path()).unwrap();
        let proxy = DelayProxy::start(server.addr(), Duration::from_millis(2)).unwrap();
        World {
            local: from_url(&data.to_string_lossy(), Vec::<(String, String)>::new()).unwrap(),
            s3: from_url("s3://data", server.options()).unwrap(),
            delayed: from_url("s3://data", server.options_for(&proxy.url())).unwrap(),
            _dir: dir,
            _server: server,
            _proxy: proxy,
        }
    })
}

#[derive(Debug, Clone)]
struct Case {
    items: usize,
    batch_size: usize,
    drop_last: bool,
    shuffle: bool,
    world_size: usize,
    rank: usize,
    fetch: Fetch,
    decode_threads: usize,
    prefetch: usize,
    /// Where the first loader starts: (epoch, fraction of the epoch).
    start: (u64, f64),
    /// Stop after this many batches of the first pass, checkpoint, and resume in a new loader.
    interrupt_after: Option<usize>,
    set_epoch_after_resume: bool,
    passes: usize,
    /// How each pass is consumed: 0 to its end; 1 exactly the batches left and no more
    /// (a `for _ in range(len(loader))` loop), then `set_epoch` of the next epoch; 2 one
    /// batch, a `break`, and a new pass for the rest.
    consumer: u8,
    error_rate: f64,
    stall_rate: f64,
    panic_at: Option<usize>,
    /// 0: local disk, 1: S3, 2: S3 behind the delay proxy.
    backend: u8,
    /// 0: no cache, 1: a memory cache, 2: memory and disk, 3: disk only; budgets so small
    /// that entries are evicted (and refused) all the time, by the policy `seed` picks.
    cache: u8,
    seed: u64,
    /// A sampler given to the loader (one rank) rather than the loader's global order.
    custom: bool,
}

fn fetch() -> impl Strategy<Value = Fetch> {
    prop_oneof![
        (1..4usize).prop_map(|workers| Fetch::Sequential { workers }),
        (1..6usize).prop_map(|threads| Fetch::Threads { threads }),
        (1..40usize).prop_map(|max_in_flight| Fetch::Async { max_in_flight }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            1..=MAX_ITEMS,
            1..=64usize,
            any::<bool>(),
            any::<bool>(),
            1..=3usize,
        ),
        (fetch(), 1..=3usize, 1..=3usize),
        (
            (0..3u64, 0.0..=1.0f64),
            prop::option::of(0..6usize),
            any::<bool>(),
            1..=2usize,
            0..3u8,
        ),
        (
            prop_oneof![3 => Just(0.0), 1 => Just(0.05), 1 => Just(0.2)],
            prop_oneof![4 => Just(0.0), 1 => Just(0.01)],
            prop::option::weighted(0.3, 0..MAX_ITEMS),
            prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
            any::<u64>(),
            prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        ),
    )
        .prop_flat_map(|(shape, engine, run, faults)| {
            let world_size = shape.4;
            (0..world_size).prop_map(move |rank| {
                let (items, batch_size, drop_last, shuffle, world_size) = shape;
                let (fetch, decode_threads, prefetch) = engine;
                let (start, interrupt_after, set_epoch_after_resume, passes, consumer) = run;
                let (error_rate, stall_rate, panic_at, backend, seed, cache) = faults;
                let custom = seed % 5 == 0 && world_size == 1;
                Case {
                    custom,
                    items,
                    batch_size,
                    drop_last,
                    shuffle,
                    world_size,
                    rank,
                    fetch,
                    decode_threads,
                    prefetch,
                    start,
                    interrupt_after,
                    set_epoch_after_resume,
                    passes,
                    consumer,
                    error_rate,
                    stall_rate,
                    panic_at: panic_at.filter(|&i| i < items),
                    backend,
                    cache,
                    seed,
                }
            })
        })
}

/// What one delivered batch was: (epoch position, index) of its samples and of its
/// skipped items, with each skip's error text.
#[derive(Debug)]
struct Seen {
    epoch: u64,
    samples: Vec<(u64, u64)>,
    skipped: Vec<(u64, u64, String)>,
}

impl Case {
    /// A caller's sampler, when the case gives one.
    fn sampler(&self) -> Arc<dyn Sampler> {
        if self.shuffle {
            Arc::new(RandomSampler::new(self.items, self.seed).unwrap())
        } else {
            Arc::new(SequentialSampler::new(self.items))
        }
    }

    /// Samples of a global batch: every rank's.
    fn global_batch(&self) -> u64 {
        (self.world_size * self.batch_size) as u64
    }

    /// Batches per epoch; 0 when `drop_last` leaves none (the loader refuses to build).
    fn batches(&self) -> usize {
        if self.custom {
            return BatchSampler::new(self.sampler(), self.batch_size, self.drop_last).len();
        }
        self.batches_left(0) as usize
    }

    /// Batches of this rank from `position` to the epoch's end.
    fn batches_left(&self, position: u64) -> u64 {
        let left = (self.items as u64).saturating_sub(position);
        if self.drop_last {
            left / self.global_batch()
        } else {
            left.div_ceil(self.global_batch())
        }
    }

    /// (epoch position, index) of this rank's reads of `epoch` from `position` on, in the
    /// order the loader must deliver them. Under the global order: positions of the epoch's
    /// order (read off a one-rank loader of the same data, whose share is every position),
    /// global batches from `position` cut among the ranks as `Stripe` cuts them.
    fn expected(&self, state: LoaderState) -> Vec<(u64, u64)> {
        if self.custom {
            return BatchSampler::new(self.sampler(), self.batch_size, self.drop_last)
                .resume(sampler_state(state.clone()))
                .flatten()
                .enumerate()
                .map(|(k, i)| (state.position + k as u64, i as u64))
                .collect();
        }
        let order = DataLoader::builder(self.store(), self.dataset())
            .shuffle(self.shuffle)
            .seed(self.seed)
            .build()
            .unwrap()
            .planned(state.epoch)
            .take(self.items)
            .collect::<Vec<u64>>();
        let (g, end) = (self.global_batch(), self.items as u64);
        let stripe = Stripe {
            rank: self.rank,
            world: self.world_size,
            batch_size: self.batch_size,
        };
        let mut out = Vec::new();
        let mut k = state.position;
        while k < end {
            let stop = (k + g).min(end);
            if self.drop_last && stop - k < g {
                break;
            }
            // One source without lanes: a read's slot is its position, its rank slot % W.
            let preferred: Vec<usize> = (k..stop)
                .map(|p| (p % self.world_size as u64) as usize)
                .collect();
            let share = stripe.share(&preferred);
            for o in share.offsets.iter().chain(&share.padding) {
                let p = k + u64::from(*o);
                out.push((p, order[p as usize]));
            }
            k = stop;
        }
        out
    }

    fn dataset(&self) -> Dataset {
        Dataset::from_pairs((0..self.items).map(|i| (format!("{i}.bin"), 0)))
    }

    fn store(&self) -> DynStorage {
        let world = world();
        let base = match self.backend {
            0 => Arc::clone(&world.local),
            1 => Arc::clone(&world.s3),
            _ => Arc::clone(&world.delayed),
        };
        let faulty: DynStorage = if self.error_rate > 0.0 || self.stall_rate > 0.0 {
            Arc::new(
                base.with_faults(
                    FaultConfig::transient(self.error_rate, self.seed)
                        .with_stalls(self.stall_rate, Duration::from_secs(2)),
                ),
            )
        } else {
            base
        };
        match self.panic_at {
            // A backend with a bug: `get` panics on one key.
            Some(i) => {
                let key = format!("{i}.bin");
                Arc::new(HookedStore::new(faulty, move |k| {
                    (k == key).then(|| panic!("injected backend panic"))
                }))
            }
            None => faulty,
        }
    }

    fn loader(&self, cache_dir: &std::path::Path) -> DataLoader<u64, Seen> {
        let mut builder = DataLoader::builder(self.store(), self.dataset());
        if self.cache > 0 {
            let policy = [CachePolicy::Lru, CachePolicy::PinOnce, CachePolicy::Future]
                [(self.seed % 3) as usize];
            builder = builder.cache(CacheConfig {
                dir: (self.cache >= 2).then(|| cache_dir.to_path_buf()),
                memory_bytes: if self.cache == 3 { 0 } else { 40 },
                disk_bytes: 2_000,
                policy,
                ..CacheConfig::default()
            });
        }
        let builder = builder
            .batch_size(self.batch_size)
            .drop_last(self.drop_last)
            .fetch(self.fetch)
            .decode_threads(self.decode_threads)
            .prefetch(self.prefetch)
            .error_policy(ErrorPolicy::Skip {
                max_failures: usize::MAX,
            })
            // Fast retries and a short deadline, so faulty cases stay quick; 12 attempts
            // make exhausting them at a 20% fault rate a 1-in-4-billion event (and even
            // then the sample is reported skipped, which the property allows).
            .retry(Some(RetryConfig {
                max_attempts: 12,
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(5),
                seed: self.seed,
                ..RetryConfig::default()
            }))
            .request_timeout(Some(Duration::from_millis(150)));
        let builder = if self.custom {
            builder.sampler(self.sampler())
        } else {
            builder
                .shuffle(self.shuffle)
                .seed(self.seed)
                .distributed(self.rank, self.world_size)
        };
        builder
            .map(
                |bytes: Bytes, info: &SampleInfo| {
                    let text = std::str::from_utf8(&bytes)?;
                    if text != info.index.to_string() {
                        return Err(format!(
                            "sample {} got the bytes {text:?} of another",
                            info.index
                        )
                        .into());
                    }
                    Ok(info.index)
                },
                |raw: RawBatch<u64>| {
                    Ok(Seen {
                        epoch: raw.epoch,
                        samples: raw
                            .samples
                            .iter()
                            .map(|(info, index)| (info.position, *index))
                            .collect(),
                        skipped: raw
                            .skipped
                            .iter()
                            .map(|e| (e.info.position, e.info.index, e.to_string()))
                            .collect(),
                    })
                },
            )
            .build()
            .unwrap()
    }
}

/// One pass, or at most `limit` batches of it; with the reports of skipped samples no
/// batch could carry (a last batch whose every sample was skipped is not delivered).
fn pass(loader: &mut DataLoader<u64, Seen>, limit: Option<usize>) -> Vec<Seen> {
    let limit = limit.unwrap_or(usize::MAX);
    let mut seen: Vec<Seen> = (&mut *loader)
        .take(limit)
        .map(|batch| batch.unwrap())
        .collect();
    let unreported = loader.take_unreported_skips();
    if let Some(first) = unreported.first() {
        seen.push(Seen {
            epoch: first.info.epoch,
            samples: Vec::new(),
            skipped: unreported
                .iter()
                .map(|e| (e.info.position, e.info.index, e.to_string()))
                .collect(),
        });
    }
    seen
}

fn sampler_state(state: LoaderState) -> SamplerState {
    SamplerState {
        epoch: state.epoch,
        position: state.position,
    }
}

/// Check what one epoch delivered, from `from` on, against the sampler's order.
fn check_epoch(case: &Case, state: LoaderState, seen: &[Seen]) -> Result<(), TestCaseError> {
    let mut got: Vec<(u64, u64)> = Vec::new();
    for batch in seen {
        prop_assert_eq!(batch.epoch, state.epoch);
        got.extend(&batch.samples);
        for (position, index, error) in &batch.skipped {
            let key = format!("\"{index}.bin\"");
            prop_assert!(error.contains(&key), "a skip without its key: {}", error);
            if Some(*index as usize) != case.panic_at {
                // Only an exhausted retry may skip another sample; say so loudly.
                prop_assert!(
                    error.contains("gave up after"),
                    "unexpected skip: {}",
                    error
                );
            }
            got.push((*position, *index));
        }
    }
    got.sort_unstable();
    let mut want = case.expected(state);
    want.sort_unstable();
    let positions: Vec<u64> = got.iter().map(|g| g.0).collect();
    let want_positions: Vec<u64> = want.iter().map(|w| w.0).collect();
    prop_assert_eq!(positions, want_positions, "positions lost or repeated");
    prop_assert_eq!(got, want, "not the order's samples");
    Ok(())
}

fn loader_threads_settle() -> Vec<String> {
    loader_testkit::settled_threads_named(THREAD_PREFIX, Duration::from_secs(10)).unwrap()
}

fn run(case: Case) -> Result<(), TestCaseError> {
    let batches = case.batches();
    if batches == 0 {
        return Ok(()); // the builder refuses an epoch without a batch (its own test)
    }
    let epoch_len = case.items as u64;
    let position = ((epoch_len as f64 * case.start.1) as u64).min(epoch_len);
    let mut state = LoaderState::at(case.start.0, position);
    let cache_dir = tempfile::tempdir().unwrap();
    let mut loader = case.loader(cache_dir.path());
    loader.resume(state.clone()).unwrap();
    for pass_no in 0..case.passes {
        let mut seen = Vec::new();
        if pass_no == 0
            && let Some(after) = case.interrupt_after
        {
            seen.extend(pass(&mut loader, Some(after)));
            // A checkpoint, a new process: only the state survives.
            let checkpoint = serde_json::to_string(&loader.state().unwrap()).unwrap();
            drop(loader);
            loader = case.loader(cache_dir.path());
            let resumed: LoaderState = serde_json::from_str(&checkpoint).unwrap();
            loader.resume(resumed.clone()).unwrap();
            if case.set_epoch_after_resume {
                loader.set_epoch(resumed.epoch);
            }
            if resumed.position == 0 && resumed.epoch == state.epoch + 1 {
                // The interruption fell on the epoch's end: this pass is complete.
                check_epoch(&case, state.clone(), &seen)?;
                state = resumed;
                continue;
            }
        }
        match case.consumer {
            0 => seen.extend(pass(&mut loader, None)),
            1 => {
                let now = loader.state().unwrap();
                let left = if case.custom {
                    BatchSampler::new(case.sampler(), case.batch_size, case.drop_last)
                        .resume(sampler_state(now))
                        .count()
                } else {
                    case.batches_left(now.position) as usize
                };
                seen.extend(pass(&mut loader, Some(left)));
            }
            _ => {
                let first = pass(&mut loader, Some(1));
                // A delivered batch has samples: without one, this pass already ended (a
                // resume into the tail `drop_last` drops), and a new one is the next epoch.
                let ended = first.iter().all(|s| s.samples.is_empty());
                seen.extend(first);
                if !ended {
                    seen.extend(pass(&mut loader, None));
                }
            }
        }
        check_epoch(&case, state.clone(), &seen)?;
        state = LoaderState::at(state.epoch + 1, 0);
        if case.consumer == 1 {
            // The training loop's own call before its next epoch (it never asked past the
            // last batch, so the loader may still stand in the one it read).
            loader.set_epoch(state.epoch);
        }
        let now = loader.state().unwrap();
        prop_assert_eq!((now.epoch, now.position), (state.epoch, state.position));
    }
    drop(loader);
    let left = loader_threads_settle();
    prop_assert!(left.is_empty(), "threads left after drop: {:?}", left);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("LOADER_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

#[test]
fn every_epoch_delivers_each_sample_exactly_once_whatever_happens() {
    let config = ProptestConfig {
        cases: cases(),
        // Shrinking replays cases: keep it short, the first failure is printed in full.
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    // The injected panics are expected: keep them out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"injected backend panic") {
            default_hook(info);
        }
    }));
    proptest!(config, |(case in case())| {
        let shown = format!("{case:?}");
        let result = within(Duration::from_secs(120), &shown, move || run(case));
        result?;
    });
}
