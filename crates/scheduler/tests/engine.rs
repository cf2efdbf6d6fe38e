#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The engine's promises: order, exactly once, error policies, bounded memory, clean drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use loader_scheduler::{
    BatchPlan, Config, Engine, EngineError, ErrorPolicy, Fetch, Order, SampleInfo, StageError,
    WorkItem,
};
use loader_storage::layer::{FaultConfig, Latency};
use loader_storage::{DynStorage, StorageExt, from_url};
use loader_testkit::watchdog::within;

const HANG_LIMIT: Duration = Duration::from_secs(30);

fn store(count: usize) -> (tempfile::TempDir, DynStorage) {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..count {
        std::fs::write(dir.path().join(format!("{i:04}")), i.to_le_bytes()).unwrap();
    }
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    (dir, store)
}

/// Batches over `order` (indices into the store), for `epochs` epochs.
fn plans(
    order: Vec<u64>,
    batch: usize,
    epochs: u64,
) -> impl Iterator<Item = BatchPlan> + Send + 'static {
    (0..epochs).flat_map(move |epoch| {
        let chunks: Vec<Vec<u64>> = order.chunks(batch).map(<[u64]>::to_vec).collect();
        let last = chunks.len() - 1;
        chunks.into_iter().enumerate().map(move |(b, chunk)| {
            let items = chunk
                .iter()
                .map(|&i| WorkItem::object(i, format!("{i:04}")))
                .collect();
            BatchPlan::new(epoch, (b * batch) as u64, items, b == last)
        })
    })
}

/// The CPU stage of these tests: the stored number back.
fn parse() -> loader_scheduler::Stage<u64> {
    Arc::new(|bytes: Bytes, _: &SampleInfo| -> Result<u64, StageError> {
        let raw: [u8; 8] = bytes.as_ref().try_into()?;
        Ok(u64::from_le_bytes(raw))
    })
}

fn strategies() -> [Fetch; 3] {
    [
        Fetch::Sequential { workers: 2 },
        Fetch::Threads { threads: 4 },
        Fetch::Async { max_in_flight: 16 },
    ]
}

fn config(fetch: Fetch) -> Config {
    Config {
        fetch,
        decode_threads: 2,
        prefetch: 2,
        ..Config::default()
    }
}

#[test]
fn every_strategy_delivers_every_item_once_in_order_across_epochs() {
    let (_dir, store) = store(100);
    // A shuffled order with a short last batch.
    let order: Vec<u64> = (0..100u64).map(|i| (i * 37) % 100).collect();
    let mut results = Vec::new();
    for fetch in strategies() {
        let slow = Arc::new(store.clone().with_latency(
            Latency::LogNormal {
                median: Duration::from_millis(2),
                p99: Duration::from_millis(10),
            },
            1,
        )) as DynStorage;
        let mut engine =
            Engine::start(slow, parse(), plans(order.clone(), 16, 2), &config(fetch)).unwrap();
        let mut seen = Vec::new();
        while let Some(batch) = engine.next_blocking() {
            let batch = batch.unwrap();
            assert!(batch.skipped.is_empty());
            for (info, value) in batch.samples {
                assert_eq!(info.index, value, "{fetch:?}: the bytes of another key");
                seen.push((batch.epoch, info.position, value));
            }
        }
        let expected: Vec<(u64, u64, u64)> = (0..2)
            .flat_map(|e| {
                order
                    .iter()
                    .enumerate()
                    .map(move |(p, &i)| (e, p as u64, i))
            })
            .collect();
        assert_eq!(seen, expected, "{fetch:?}");
        results.push(seen);
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "strategies disagree"
    );
}

#[test]
fn as_completed_delivers_every_item_once_per_epoch() {
    let (_dir, store) = store(60);
    let slow = Arc::new(store.with_latency(
        Latency::LogNormal {
            median: Duration::from_millis(2),
            p99: Duration::from_millis(20),
        },
        4,
    )) as DynStorage;
    let config = Config {
        order: Order::AsCompleted,
        ..config(Fetch::Async { max_in_flight: 32 })
    };
    let mut engine = Engine::start(slow, parse(), plans((0..60).collect(), 8, 2), &config).unwrap();
    let mut per_epoch = vec![Vec::new(), Vec::new()];
    while let Some(batch) = engine.next_blocking() {
        let batch = batch.unwrap();
        for (info, v) in batch.samples {
            assert_eq!(
                info.epoch, batch.epoch,
                "an item crossed the epoch boundary"
            );
            per_epoch[batch.epoch as usize].push(v);
        }
    }
    for mut epoch in per_epoch {
        epoch.sort_unstable();
        assert_eq!(epoch, (0..60).collect::<Vec<_>>());
    }
}

#[test]
fn skip_reports_every_failed_item_and_fail_stops_the_epoch() {
    let (_dir, store) = store(200);
    for fetch in strategies() {
        let faulty =
            Arc::new(store.clone().with_faults(FaultConfig::transient(0.1, 3))) as DynStorage;
        let config = Config {
            error_policy: ErrorPolicy::Skip { max_failures: 200 },
            ..config(fetch)
        };
        let mut engine =
            Engine::start(faulty, parse(), plans((0..200).collect(), 10, 1), &config).unwrap();
        let (mut delivered, mut skipped) = (Vec::new(), Vec::new());
        while let Some(batch) = engine.next_blocking() {
            let batch = batch.unwrap();
            assert_eq!(
                batch.samples.len() + batch.skipped.len(),
                batch.planned,
                "a short batch without a report"
            );
            delivered.extend(batch.samples.iter().map(|(i, _)| i.index));
            for e in &batch.skipped {
                assert!(e.to_string().contains(&*e.info.key), "{e}");
                skipped.push(e.info.index);
            }
        }
        assert!(!skipped.is_empty(), "{fetch:?}: no fault was injected");
        let mut all: Vec<u64> = delivered.into_iter().chain(skipped).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..200).collect::<Vec<_>>(),
            "{fetch:?}: lost or duplicated"
        );

        let faulty =
            Arc::new(store.clone().with_faults(FaultConfig::transient(0.1, 3))) as DynStorage;
        let mut engine = Engine::start(
            faulty,
            parse(),
            plans((0..200).collect(), 10, 1),
            &config_fail(fetch),
        )
        .unwrap();
        let mut outcome = None;
        while let Some(batch) = engine.next_blocking() {
            if let Err(e) = batch {
                outcome = Some(e);
                break;
            }
        }
        match outcome {
            Some(EngineError::Batch { errors, .. }) => {
                assert!(errors[0].to_string().contains("injected fault"))
            }
            other => panic!("{fetch:?}: expected a failed batch, got {other:?}"),
        }
        assert!(
            engine.next_blocking().is_none(),
            "the run goes on after a failed batch"
        );
    }
}

fn config_fail(fetch: Fetch) -> Config {
    Config {
        error_policy: ErrorPolicy::Fail,
        ..config(fetch)
    }
}

#[test]
fn too_many_failures_is_an_error() {
    let (_dir, store) = store(100);
    let faulty = Arc::new(store.with_faults(FaultConfig::transient(0.5, 9))) as DynStorage;
    let config = Config {
        error_policy: ErrorPolicy::Skip { max_failures: 3 },
        ..config(Fetch::Async { max_in_flight: 8 })
    };
    let mut engine =
        Engine::start(faulty, parse(), plans((0..100).collect(), 10, 1), &config).unwrap();
    let mut error = None;
    while let Some(batch) = engine.next_blocking() {
        if let Err(e) = batch {
            error = Some(e.to_string());
        }
    }
    assert!(error.is_some_and(|e| e.contains("more than 3 failed")));
}

#[test]
fn a_panicking_stage_is_an_item_error_not_a_hang() {
    let (_dir, store) = store(20);
    let stage: loader_scheduler::Stage<u64> = Arc::new(|_bytes: Bytes, info: &SampleInfo| {
        if info.index == 7 {
            panic!("bad sample");
        }
        Ok(info.index)
    });
    let config = Config {
        error_policy: ErrorPolicy::Skip { max_failures: 5 },
        ..config(Fetch::Async { max_in_flight: 4 })
    };
    let mut engine = Engine::start(store, stage, plans((0..20).collect(), 5, 1), &config).unwrap();
    let skipped = within(HANG_LIMIT, "an epoch with a panicking stage", move || {
        let mut skipped = Vec::new();
        while let Some(batch) = engine.next_blocking() {
            skipped.extend(batch.unwrap().skipped.into_iter().map(|e| e.to_string()));
        }
        skipped
    });
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].contains("panicked: bad sample"), "{skipped:?}");
}

/// A sample that counts how many of its kind are alive.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn a_slow_consumer_keeps_live_samples_bounded() {
    let (_dir, store) = store(400);
    let live = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let stage: loader_scheduler::Stage<Tracked> = {
        let (live, peak) = (Arc::clone(&live), Arc::clone(&peak));
        Arc::new(move |_b: Bytes, _: &SampleInfo| {
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            Ok(Tracked(Arc::clone(&live)))
        })
    };
    let (batch, prefetch, in_flight, decode) = (10, 2, 16, 2);
    let config = Config {
        prefetch,
        decode_threads: decode,
        ..config(Fetch::Async {
            max_in_flight: in_flight,
        })
    };
    let mut engine =
        Engine::start(store, stage, plans((0..400).collect(), batch, 1), &config).unwrap();
    let held = engine.next_blocking().unwrap().unwrap();
    // Stall: the loader must stop fetching rather than pile up samples.
    std::thread::sleep(Duration::from_millis(500));
    let bound = prefetch * batch + (batch + in_flight + decode) + batch;
    assert!(
        peak.load(Ordering::SeqCst) <= bound,
        "peak {} > bound {bound}",
        peak.load(Ordering::SeqCst)
    );
    let mut count = held.samples.len();
    drop(held); // a consumer that is done with its batch before it asks for the next
    while let Some(next) = engine.next_blocking() {
        count += next.unwrap().samples.len();
    }
    assert_eq!(count, 400);
    assert!(peak.load(Ordering::SeqCst) <= bound);
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

#[test]
fn dropping_before_the_first_batch_returns() {
    let (_dir, store) = store(10);
    let slow =
        Arc::new(store.with_latency(Latency::Fixed(Duration::from_secs(600)), 0)) as DynStorage;
    let engine = Engine::start(
        slow,
        parse(),
        plans((0..10).collect(), 5, 1),
        &config(Fetch::Async { max_in_flight: 4 }),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    within(HANG_LIMIT, "drop before the first batch", move || {
        drop(engine)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_use_and_drop_inside_a_runtime_do_not_panic() {
    let (_dir, store) = store(30);
    // The engine's own runtime, iterated synchronously from inside this one.
    let mut engine = Engine::start(
        store.clone(),
        parse(),
        plans((0..30).collect(), 10, 1),
        &config(Fetch::Async { max_in_flight: 4 }),
    )
    .unwrap();
    assert_eq!(engine.next_blocking().unwrap().unwrap().samples.len(), 10);
    drop(engine);
    // The caller's runtime, as a stream.
    let config = Config {
        runtime: Some(tokio::runtime::Handle::current()),
        ..config(Fetch::Async { max_in_flight: 4 })
    };
    let engine = Engine::start(store, parse(), plans((0..30).collect(), 10, 1), &config).unwrap();
    let batches: Vec<_> = engine.collect().await;
    assert_eq!(batches.len(), 3);
    assert!(batches.iter().all(Result::is_ok));
}

#[test]
fn nonsense_configuration_is_an_error() {
    let (_dir, store) = store(1);
    for config in [
        Config {
            prefetch: 0,
            ..Config::default()
        },
        Config {
            decode_threads: 0,
            ..Config::default()
        },
        config(Fetch::Async { max_in_flight: 0 }),
        config(Fetch::Threads { threads: 0 }),
    ] {
        let err = Engine::start(store.clone(), parse(), plans(vec![0], 1, 1), &config).unwrap_err();
        assert!(matches!(err, EngineError::Config(_)), "{err}");
    }
}
