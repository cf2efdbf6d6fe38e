#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The adaptive in-flight limit on a real engine: it grows under latency, backs off when the
//! store throttles, stays put when fixed, and never costs a sample. Assertions are on the
//! engine's counters, never on its speed.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use loader_scheduler::{Config, Fetch, LimitReason, Summary};
use loader_storage::layer::{Latency, RetryConfig};
use loader_storage::{DynStorage, StorageExt};
use loader_testkit::HookedStore;

mod support;

use support::files;

/// Every batch with `fetch` on 2 decode threads, in batches of 32.
fn drain(store: DynStorage, count: u64, fetch: Fetch) -> (Vec<u64>, Summary) {
    let config = Config {
        fetch,
        decode_threads: 2,
        ..Config::default()
    };
    let (seen, summary, _) = support::drain(store, count, 32, config);
    (seen, summary)
}

#[test]
fn the_limit_grows_under_latency_and_every_sample_arrives_once_in_order() {
    let count = 4_000;
    let (_dir, store) = files(count);
    let store: DynStorage =
        Arc::new(store.with_latency(Latency::Fixed(Duration::from_millis(20)), 1));
    let (seen, summary) = drain(store, count as u64, Fetch::default());
    assert_eq!(seen, (0..count as u64).collect::<Vec<_>>());
    assert!(summary.adaptive);
    // 128 at the start; at 20 ms and a trivial stage the limit binds, so it must grow.
    assert!(
        summary.limit_peak >= 512 && summary.limit_changes > 0,
        "{summary}"
    );
    assert!(summary.in_flight_limit <= summary.max_in_flight);
    assert!(summary.peak_in_flight <= summary.limit_peak, "{summary}");
}

#[test]
fn the_limit_backs_off_when_the_store_throttles_and_nothing_is_lost() {
    let count = 1_500;
    let (_dir, store) = files(count);
    // 400 reads per second at 10 ms: about 4 in flight is all the store takes; 503 SlowDown
    // arrives after the round trip, as it does from S3, and the retry layer retries it.
    let retry = RetryConfig {
        max_attempts: 50,
        initial_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
        max_elapsed: Duration::from_secs(60),
        seed: 7,
        ..RetryConfig::default()
    };
    let store: DynStorage = Arc::new(
        store
            .with_throttle(400.0)
            .with_latency(Latency::Fixed(Duration::from_millis(10)), 1)
            .with_retry(retry),
    );
    let (seen, summary) = drain(store, count as u64, Fetch::default());
    assert_eq!(
        seen,
        (0..count as u64).collect::<Vec<_>>(),
        "none lost or repeated"
    );
    assert!(summary.throttled > 0, "the store throttled: {summary}");
    assert!(
        summary.in_flight_limit < summary.limit_peak.max(128),
        "the limit came down from {}: {summary}",
        summary.limit_peak
    );
    assert!(summary.in_flight_limit <= 16, "{summary}");
}

#[test]
fn a_fixed_limit_stays_fixed() {
    let count = 1_000;
    let (_dir, store) = files(count);
    let store: DynStorage =
        Arc::new(store.with_latency(Latency::Fixed(Duration::from_millis(5)), 1));
    let (seen, summary) = drain(store, count as u64, Fetch::Async { max_in_flight: 16 });
    assert_eq!(seen.len(), count);
    assert!(!summary.adaptive);
    assert_eq!(
        (
            summary.in_flight_limit,
            summary.limit_changes,
            summary.limit_reason
        ),
        (16, 0, LimitReason::Start)
    );
    assert!(summary.peak_in_flight <= 16);
}

/// `inner` that throttles the first read of `00000` and holds the second until `release`;
/// the other objects pass.
fn throttled_then_held(inner: DynStorage, release: Arc<tokio::sync::Notify>) -> HookedStore {
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let backend = inner.name().to_owned();
    HookedStore::before_get(inner, move |key, _| {
        let (first, release, backend) = (Arc::clone(&first), Arc::clone(&release), backend.clone());
        let key = (key == "00000").then(|| key.to_owned());
        async move {
            let key = key?;
            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return Some(Err(loader_storage::Error::new(
                    loader_storage::ErrorKind::Throttled,
                    backend,
                    key,
                    "slow down",
                )));
            }
            release.notified().await;
            None
        }
        .boxed()
    })
}

// The in-flight limit and the hedger's stall guard read the engine's throttling count:
// it must rise while the throttled request still backs off, not when its retries end.
// The request's retry is held until the engine's metrics show the throttling, so this
// test hangs (and the watchdog fails it) if they learn it only from the result; and the
// total afterwards is 1, not counted twice.
#[test]
fn the_engine_hears_of_throttling_while_the_request_still_backs_off() {
    let (_dir, inner) = files(8);
    let release = Arc::new(tokio::sync::Notify::new());
    let held = throttled_then_held(inner, Arc::clone(&release));
    let retry = RetryConfig {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        ..RetryConfig::default()
    };
    let store: DynStorage = Arc::new(held.with_retry(retry));
    let stage = Arc::new(
        |bytes: bytes::Bytes,
         _: &loader_scheduler::SampleInfo|
         -> Result<usize, loader_scheduler::StageError> { Ok(bytes.len()) },
    );
    let config = Config {
        fetch: Fetch::Async { max_in_flight: 4 },
        decode_threads: 1,
        ..Config::default()
    };
    let total =
        loader_testkit::watchdog::within(support::HANG_LIMIT, "a throttled read", move || {
            let mut engine =
                loader_scheduler::Engine::start(store, stage, support::plans(8, 8), &config)
                    .unwrap();
            let metrics = engine.metrics();
            while metrics.summary().throttled == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            release.notify_one();
            let batch = engine.next_blocking().unwrap().unwrap();
            assert_eq!(batch.samples.len(), 8);
            while engine.next_blocking().is_some() {}
            metrics.summary().throttled
        });
    assert_eq!(total, 1, "one throttled answer, counted once");
}
