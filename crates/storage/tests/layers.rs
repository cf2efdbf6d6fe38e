#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Layer behaviour: each layer proven on its own, over real stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use loader_storage::backend::LocalStore;
use loader_storage::layer::{FaultConfig, Latency, RetryConfig};
use loader_storage::{ErrorKind, ObjectMeta, Result, Storage, StorageExt, from_url};
use loader_testkit::S3Server;

/// Generous bound for "does not hang"; never a speed check.
const HANG_LIMIT: Duration = Duration::from_secs(30);

fn dir_with(count: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..count {
        std::fs::write(dir.path().join(format!("k{i}")), format!("value {i}")).unwrap();
    }
    dir
}

fn quick_retries(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..RetryConfig::default()
    }
}

#[tokio::test]
async fn retry_recovers_from_injected_transient_faults() {
    let dir = dir_with(50);
    let faulty = LocalStore::new(dir.path())
        .unwrap()
        .with_faults(FaultConfig::transient(0.3, 42));
    let store = faulty.with_retry(quick_retries(20));
    for i in 0..50 {
        let got = store.get(&format!("k{i}")).await.unwrap();
        assert_eq!(got.as_ref(), format!("value {i}").as_bytes());
    }
    // The layer's own counter: a retry underneath could not make it move.
    assert!(store.stats().retries > 0, "{:?}", store.stats());
    assert_eq!(store.stats().retries, store.inner().injected());
    assert_eq!(store.stats().exhausted, 0);
}

#[tokio::test]
async fn retry_recovers_over_real_s3() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bkt")).unwrap();
    std::fs::write(dir.path().join("bkt/x"), b"payload").unwrap();
    let server = S3Server::start(dir.path()).unwrap();
    let s3 = from_url("s3://bkt", server.options()).unwrap();
    let store = s3
        .with_faults(FaultConfig::transient(0.5, 7))
        .with_retry(quick_retries(30));
    for _ in 0..20 {
        assert_eq!(store.get("x").await.unwrap().as_ref(), b"payload");
    }
    assert!(store.stats().retries > 0);
}

#[tokio::test]
async fn retry_gives_up_on_not_found_at_once() {
    let dir = dir_with(1);
    let counted = LocalStore::new(dir.path()).unwrap().with_metrics();
    let requests = counted.metrics();
    let store = counted.with_retry(quick_retries(5));
    let err = store.get("missing").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        requests.snapshot().requests,
        1,
        "NotFound must not be retried"
    );
    assert_eq!(store.stats().retries, 0);
}

#[tokio::test]
async fn retry_gives_up_after_max_attempts_and_says_so() {
    let dir = dir_with(1);
    let counted = LocalStore::new(dir.path())
        .unwrap()
        .with_faults(FaultConfig::transient(1.0, 1))
        .with_metrics();
    let requests = counted.metrics();
    let store = counted.with_retry(quick_retries(4));
    let err = store.get("k0").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert!(err.to_string().contains("gave up after 4 attempt"), "{err}");
    assert_eq!(requests.snapshot().requests, 4);
    assert_eq!(store.stats().exhausted, 1);
}

#[tokio::test]
async fn retry_respects_its_total_time_budget() {
    let dir = dir_with(1);
    let config = RetryConfig {
        max_attempts: 1_000,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(20),
        max_elapsed: Duration::from_millis(200),
        ..RetryConfig::default()
    };
    let store = LocalStore::new(dir.path())
        .unwrap()
        .with_faults(FaultConfig::transient(1.0, 1))
        .with_retry(config);
    let err = tokio::time::timeout(HANG_LIMIT, store.get("k0"))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    let retries = store.stats().retries;
    assert!(
        (1..1_000).contains(&retries),
        "time budget ignored: {retries} retries"
    );
}

#[tokio::test]
async fn timeout_fires_and_a_stalled_request_is_retried() {
    let dir = dir_with(1);
    let slow = LocalStore::new(dir.path())
        .unwrap()
        .with_latency(Latency::Fixed(Duration::from_secs(60)), 0)
        .with_timeout(Duration::from_millis(50));
    let err = tokio::time::timeout(HANG_LIMIT, slow.get("k0"))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.to_string().contains("50 ms"), "{err}");

    // Every other request stalls past the deadline; timeout + retry still delivers.
    let store = LocalStore::new(dir.path())
        .unwrap()
        .with_faults(FaultConfig::transient(0.0, 3).with_stalls(0.5, Duration::from_secs(60)))
        .with_timeout(Duration::from_millis(50))
        .with_retry(quick_retries(30));
    for _ in 0..10 {
        let got = tokio::time::timeout(HANG_LIMIT, store.get("k0"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.as_ref(), b"value 0");
    }
    assert!(store.stats().retries > 0);
}

#[tokio::test]
async fn latency_is_applied() {
    let dir = dir_with(1);
    let store = LocalStore::new(dir.path())
        .unwrap()
        .with_latency(Latency::Fixed(Duration::from_millis(100)), 0);
    let start = Instant::now();
    tokio::time::timeout(HANG_LIMIT, store.get("k0"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
}

/// A store that records the most requests it ever saw at once.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

#[async_trait]
impl Storage for Gauge {
    fn name(&self) -> &str {
        "gauge://"
    }
    async fn get_opts(
        &self,
        key: &str,
        options: loader_storage::GetOptions,
    ) -> Result<loader_storage::GetResult> {
        let _ = (key, options);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(loader_storage::GetResult::new(Bytes::new()))
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        Ok(ObjectMeta::new(key, 0))
    }
    fn list<'a>(&'a self, _prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        futures::stream::empty().boxed()
    }
}

#[tokio::test]
async fn concurrency_limit_caps_requests_in_flight() {
    let gauge = Arc::new(Gauge::default());
    let store = Arc::clone(&gauge).with_concurrency_limit(3);
    futures::stream::iter(0..40)
        .map(|i| {
            let store = &store;
            async move { store.get(&format!("k{i}")).await }
        })
        .buffer_unordered(40)
        .for_each(|r| async move {
            r.unwrap();
        })
        .await;
    let peak = gauge.peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "peak {peak} exceeds the limit");
    assert!(peak >= 2, "the limit serialised everything (peak {peak})");
    assert_eq!(store.available(), 3);
}

#[tokio::test]
async fn metrics_count_requests_bytes_errors_and_latency() {
    let dir = dir_with(3);
    let store = LocalStore::new(dir.path())
        .unwrap()
        .with_latency(Latency::Fixed(Duration::from_millis(20)), 0)
        .with_metrics();
    for i in 0..3 {
        store.get(&format!("k{i}")).await.unwrap();
    }
    store.get("missing").await.unwrap_err();
    let snap = store.metrics().snapshot();
    assert_eq!(snap.requests, 4);
    assert_eq!(snap.errors, 1);
    assert_eq!(snap.bytes, 3 * "value 0".len() as u64);
    assert_eq!(snap.latency.count, 4);
    assert!(snap.latency.p50 >= Duration::from_millis(19), "{snap}");
    assert!(snap.latency.p50 <= snap.latency.p90 && snap.latency.p90 <= snap.latency.p99);
    assert!(snap.to_string().contains("4 requests (1 failed)"), "{snap}");
}
