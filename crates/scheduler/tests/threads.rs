#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Dropping the engine in every phase returns and leaves none of its threads running.
//! One test in its own process: threads are counted process-wide by name.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_scheduler::{BatchPlan, Config, Engine, Fetch, SampleInfo, THREAD_PREFIX, WorkItem};
use loader_storage::layer::Latency;
use loader_storage::{DynStorage, StorageExt, from_url};
use loader_testkit::watchdog::within;

const HANG_LIMIT: Duration = Duration::from_secs(30);

fn loader_threads() -> usize {
    loader_testkit::threads_named(THREAD_PREFIX).unwrap().len()
}

fn settled_thread_count() -> usize {
    loader_testkit::settled_threads_named(THREAD_PREFIX, HANG_LIMIT)
        .unwrap()
        .len()
}

fn plans(count: u64, batch: u64, epochs: u64) -> impl Iterator<Item = BatchPlan> + Send + 'static {
    (0..epochs).flat_map(move |epoch| {
        (0..count / batch).map(move |b| {
            let items = (b * batch..(b + 1) * batch)
                .map(|i| WorkItem::object(i, format!("{i:04}")))
                .collect();
            BatchPlan::new(epoch, b * batch, items, b + 1 == count / batch)
        })
    })
}

#[test]
fn dropping_in_every_phase_returns_and_joins_every_thread() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..100 {
        std::fs::write(dir.path().join(format!("{i:04}")), b"x").unwrap();
    }
    let base = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let stage: loader_scheduler::Stage<usize> = Arc::new(|b: Bytes, _: &SampleInfo| Ok(b.len()));
    assert_eq!(loader_threads(), 0);
    for fetch in [
        Fetch::Sequential { workers: 2 },
        Fetch::Threads { threads: 4 },
        Fetch::Async { max_in_flight: 16 },
    ] {
        let config = Config {
            fetch,
            decode_threads: 2,
            prefetch: 2,
            ..Config::default()
        };
        // Phases: before the first batch (requests hang), mid-epoch, after the run ended.
        for (phase, latency, take) in [
            ("hanging requests", Duration::from_secs(600), 0),
            ("mid-epoch", Duration::from_millis(10), 2),
            ("after the end", Duration::ZERO, usize::MAX),
        ] {
            let store =
                Arc::new(base.clone().with_latency(Latency::Fixed(latency), 0)) as DynStorage;
            let mut engine =
                Engine::start(store, Arc::clone(&stage), plans(100, 10, 1), &config).unwrap();
            let metrics = engine.metrics();
            let mut taken = 0;
            while taken < take {
                match engine.next_blocking() {
                    Some(batch) => {
                        batch.unwrap();
                        taken += 1;
                    }
                    None => break,
                }
            }
            if take == 0 {
                std::thread::sleep(Duration::from_millis(50)); // let requests start
            }
            assert!(
                loader_threads() > 0,
                "{fetch:?} {phase}: no thread was started?"
            );
            within(HANG_LIMIT, &format!("{fetch:?} {phase}: drop"), move || {
                drop(engine)
            });
            assert_eq!(
                settled_thread_count(),
                0,
                "{fetch:?} {phase}: threads left running: {:?}",
                loader_testkit::threads_named(THREAD_PREFIX).unwrap()
            );
            assert_eq!(
                metrics.in_flight(),
                0,
                "{fetch:?} {phase}: requests left in flight"
            );
        }
    }
}
