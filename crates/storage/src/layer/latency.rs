//! Simulated storage latency: a seeded delay before every request.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, LogNormal};

use crate::{GetOptions, GetResult, ObjectMeta, Result, Storage};

/// The z-score of the 99th percentile of a standard normal distribution.
const Z_P99: f64 = 2.326_347_874;

/// How long each simulated request waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// The same delay every time.
    Fixed(Duration),
    /// Log-normal delays with the given median and 99th percentile, the usual shape of
    /// object store latency (a body near the median and a long tail).
    LogNormal {
        /// Half of the requests wait less than this.
        median: Duration,
        /// One request in a hundred waits longer than this; must be at least `median`.
        p99: Duration,
    },
}

enum Sampler {
    Fixed(Duration),
    LogNormal(LogNormal<f64>),
}

impl Sampler {
    fn new(latency: Latency) -> Self {
        match latency {
            Latency::Fixed(d) => Sampler::Fixed(d),
            Latency::LogNormal { median, p99 } => {
                let median_s = median.as_secs_f64().max(1e-6);
                let p99_s = p99.as_secs_f64().max(median_s);
                let mu = median_s.ln();
                let sigma = (p99_s / median_s).ln() / Z_P99;
                // sigma is finite and >= 0 by the clamps above; a zero sigma is a fixed delay.
                match LogNormal::new(mu, sigma) {
                    Ok(dist) => Sampler::LogNormal(dist),
                    Err(_) => Sampler::Fixed(median),
                }
            }
        }
    }
}

/// A store that sleeps before passing each request on, to imitate remote storage in
/// benchmarks and tests without sockets. Draws are seeded, so a run can be repeated.
pub struct LatencyStore<S> {
    inner: S,
    latency: Latency,
    sampler: Sampler,
    rng: Mutex<StdRng>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for LatencyStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyStore")
            .field("inner", &self.inner)
            .field("latency", &self.latency)
            .finish_non_exhaustive()
    }
}

impl<S: Storage> LatencyStore<S> {
    /// Wrap `inner`, drawing delays from `latency` with an RNG seeded by `seed`.
    pub fn new(inner: S, latency: Latency, seed: u64) -> Self {
        Self {
            inner,
            latency,
            sampler: Sampler::new(latency),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// The next delay.
    pub fn sample(&self) -> Duration {
        match &self.sampler {
            Sampler::Fixed(d) => *d,
            Sampler::LogNormal(dist) => {
                let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                // Capped so a freak draw cannot stall a test for hours.
                Duration::from_secs_f64(dist.sample(&mut *rng).min(600.0))
            }
        }
    }

    async fn delay(&self) {
        tokio::time::sleep(self.sample()).await;
    }
}

#[async_trait]
impl<S: Storage> Storage for LatencyStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        self.delay().await;
        self.inner.get_opts(key, options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.delay().await;
        self.inner.head(key).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        futures::stream::once(self.delay())
            .flat_map(move |()| self.inner.list(prefix))
            .boxed()
    }

    // Forwarded, so a retry layer below still restarts a listing broken mid-way.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.delay().await;
        self.inner.list_all(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalStore;

    #[test]
    fn lognormal_matches_median_and_p99() {
        let dir = tempfile::tempdir().unwrap();
        let latency = Latency::LogNormal {
            median: Duration::from_millis(50),
            p99: Duration::from_millis(200),
        };
        let store = LatencyStore::new(LocalStore::new(dir.path()).unwrap(), latency, 7);
        let mut draws: Vec<f64> = (0..20_000).map(|_| store.sample().as_secs_f64()).collect();
        draws.sort_by(f64::total_cmp);
        let median = draws[draws.len() / 2];
        let p99 = draws[draws.len() * 99 / 100];
        assert!((median - 0.050).abs() < 0.003, "median {median}");
        assert!((p99 - 0.200).abs() < 0.025, "p99 {p99}");
    }

    #[test]
    fn same_seed_same_delays() {
        let dir = tempfile::tempdir().unwrap();
        let latency = Latency::LogNormal {
            median: Duration::from_millis(10),
            p99: Duration::from_millis(100),
        };
        let a = LatencyStore::new(LocalStore::new(dir.path()).unwrap(), latency, 3);
        let b = LatencyStore::new(LocalStore::new(dir.path()).unwrap(), latency, 3);
        let da: Vec<_> = (0..10).map(|_| a.sample()).collect();
        let db: Vec<_> = (0..10).map(|_| b.sample()).collect();
        assert_eq!(da, db);
    }
}
