//! Request counts, bytes, errors and a latency histogram.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::BoxStream;
use hdrhistogram::Histogram;

use crate::{GetOptions, GetResult, ObjectMeta, Result, Storage};

/// The live counters of a [`MetricsStore`]; cheap to share with whoever reports them.
#[derive(Debug)]
pub struct StorageMetrics {
    requests: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    /// Microseconds, 1 µs to 10 min at 2 significant digits.
    latency: Mutex<Histogram<u64>>,
}

impl Default for StorageMetrics {
    fn default() -> Self {
        Self {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            latency: Mutex::new(
                Histogram::new_with_bounds(1, 600_000_000, 2).expect("constant bounds are valid"),
            ),
        }
    }
}

impl StorageMetrics {
    fn record(&self, elapsed: Duration, bytes: Option<u64>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match bytes {
            Some(n) => {
                self.bytes.fetch_add(n, Ordering::Relaxed);
            }
            None => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let micros = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut hist = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        hist.saturating_record(micros);
    }

    /// The counters as they are now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let hist = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let at = |q: f64| Duration::from_micros(hist.value_at_quantile(q));
        MetricsSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            latency: LatencySummary {
                count: hist.len(),
                mean: Duration::from_micros(hist.mean() as u64),
                p50: at(0.50),
                p90: at(0.90),
                p99: at(0.99),
                max: Duration::from_micros(hist.max()),
            },
        }
    }
}

/// A point-in-time copy of [`StorageMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// Requests finished (successes and failures).
    pub requests: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Bytes returned by successful reads.
    pub bytes: u64,
    /// Latency of all finished requests.
    pub latency: LatencySummary,
}

/// Latency percentiles (2 significant digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencySummary {
    /// Requests measured.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest request.
    pub max: Duration,
}

impl fmt::Display for MetricsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{} requests ({} failed), {:.1} MB, latency p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.requests,
            self.errors,
            self.bytes as f64 / 1e6,
            ms(self.latency.p50),
            ms(self.latency.p90),
            ms(self.latency.p99),
            ms(self.latency.max),
        )
    }
}

/// A store that measures every request to its inner store. Listings count as one request
/// when their stream is created, with no latency recorded.
#[derive(Debug)]
pub struct MetricsStore<S> {
    inner: S,
    metrics: Arc<StorageMetrics>,
}

impl<S: Storage> MetricsStore<S> {
    /// Wrap `inner` with fresh counters.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            metrics: Arc::default(),
        }
    }

    /// The live counters, to keep after the store is moved into a loader.
    pub fn metrics(&self) -> Arc<StorageMetrics> {
        Arc::clone(&self.metrics)
    }

    async fn measure<T>(
        &self,
        request: impl Future<Output = Result<T>>,
        size: impl Fn(&T) -> u64,
    ) -> Result<T> {
        let start = Instant::now();
        let result = request.await;
        self.metrics
            .record(start.elapsed(), result.as_ref().ok().map(size));
        result
    }
}

#[async_trait]
impl<S: Storage> Storage for MetricsStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        self.measure(self.inner.get_opts(key, options), |r| r.bytes.len() as u64)
            .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.measure(self.inner.head(key), |_| 0).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix)
    }

    // Forwarded, so a retry layer below still restarts a listing broken mid-way.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        self.inner.list_all(prefix).await
    }
}
