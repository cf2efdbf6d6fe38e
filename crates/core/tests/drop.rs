#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Dropping a DataLoader over the real S3 server in every phase returns and leaves none of
//! its threads and no request running. One test in its own process: threads are counted
//! process-wide by name.

mod common;

use std::pin::Pin;
use std::task::Context;
use std::time::{Duration, Instant};

use common::thumbnails;
use futures::Stream;
use loader_core::scheduler::THREAD_PREFIX;
use loader_core::{DataLoader, Dataset, Fetch, from_url};
use loader_testkit::watchdog::within;
use loader_testkit::{DatasetSpec, DelayProxy, ProxyFaults, S3Server};

/// Generous: only a hang trips it.
const HANG_LIMIT: Duration = Duration::from_secs(60);

fn loader_threads() -> Vec<String> {
    loader_testkit::threads_named(THREAD_PREFIX).unwrap()
}

fn settled_thread_count() -> usize {
    loader_testkit::settled_threads_named(THREAD_PREFIX, HANG_LIMIT)
        .unwrap()
        .len()
}

#[test]
fn dropping_the_loader_in_every_phase_returns_and_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(120, 3)
        .write(&dir.path().join("data"))
        .unwrap();
    let server = S3Server::start(dir.path()).unwrap();
    // Every GET through this proxy gets no answer: a hung server.
    let hung = DelayProxy::with_faults(
        server.addr(),
        Duration::ZERO,
        0,
        ProxyFaults {
            stall_rate: 1.0,
            ..ProxyFaults::default()
        },
    )
    .unwrap();
    let dataset =
        Dataset::image_folder_blocking(&*from_url("s3://data", server.options()).unwrap()).unwrap();
    // Listing ran on a joined `loader-dataset` thread, which may linger in /proc a moment.
    assert_eq!(settled_thread_count(), 0, "{:?}", loader_threads());

    for fetch in [
        Fetch::Sequential { workers: 2 },
        Fetch::Threads { threads: 4 },
        Fetch::Async { max_in_flight: 16 },
    ] {
        for phase in ["built", "server hangs", "mid-epoch", "after the end"] {
            let endpoint = if phase == "server hangs" {
                hung.url()
            } else {
                server.endpoint()
            };
            let store = from_url("s3://data", server.options_for(&endpoint)).unwrap();
            let mut loader = DataLoader::builder(store, dataset.clone())
                .batch_size(8)
                .fetch(fetch)
                .decode_threads(2)
                .transform(thumbnails())
                .build()
                .unwrap();
            match phase {
                "built" => {}
                "server hangs" => {
                    let before = hung.stats().stalled;
                    // Start the engine without blocking on a batch that never comes.
                    let waker = futures::task::noop_waker();
                    let polled = Pin::new(&mut loader).poll_next(&mut Context::from_waker(&waker));
                    assert!(polled.is_pending(), "{fetch:?}: a hung server answered");
                    let start = Instant::now();
                    while hung.stats().stalled == before && start.elapsed() < HANG_LIMIT {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    assert!(
                        hung.stats().stalled > before,
                        "{fetch:?}: no request reached the server"
                    );
                    let in_flight = loader.metrics().map_or(0, |m| m.in_flight());
                    assert!(in_flight > 0, "{fetch:?}: nothing in flight to cancel");
                }
                "mid-epoch" => {
                    for batch in (&mut loader).take(2) {
                        batch.unwrap();
                    }
                }
                _ => assert_eq!((&mut loader).map(|b| b.unwrap().len()).sum::<usize>(), 120),
            }
            let metrics = loader.metrics();
            if phase != "built" {
                assert!(
                    !loader_threads().is_empty(),
                    "{fetch:?} {phase}: no thread?"
                );
            }
            within(HANG_LIMIT, &format!("{fetch:?} {phase}: drop"), move || {
                drop(loader)
            });
            assert_eq!(
                settled_thread_count(),
                0,
                "{fetch:?} {phase}: threads left running: {:?}",
                loader_threads()
            );
            if let Some(metrics) = metrics {
                assert_eq!(
                    metrics.in_flight(),
                    0,
                    "{fetch:?} {phase}: requests left in flight"
                );
            }
        }
    }
}
