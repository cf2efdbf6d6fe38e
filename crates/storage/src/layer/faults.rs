//! Fault injection: a seeded fraction of requests fail or stall, for tests of resilience.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage};

/// Which requests fail, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Fraction of requests, in [0, 1], that fail with `kind` instead of reaching the store.
    pub error_rate: f64,
    /// The kind of the injected errors.
    pub kind: ErrorKind,
    /// Fraction of requests, in [0, 1], that first stall for `stall` (to trip timeouts).
    pub stall_rate: f64,
    /// How long a stalled request waits before it goes on.
    pub stall: Duration,
    /// Seed of the draws.
    pub seed: u64,
}

impl FaultConfig {
    /// Fail `error_rate` of requests with a transient error.
    pub fn transient(error_rate: f64, seed: u64) -> Self {
        Self {
            error_rate,
            kind: ErrorKind::Transient,
            stall_rate: 0.0,
            stall: Duration::ZERO,
            seed,
        }
    }

    /// Also stall `rate` of requests for `stall`.
    pub fn with_stalls(mut self, rate: f64, stall: Duration) -> Self {
        self.stall_rate = rate;
        self.stall = stall;
        self
    }
}

/// A store that fails or stalls a seeded fraction of requests before they reach `inner`.
/// Listings are passed through untouched.
#[derive(Debug)]
pub struct FaultStore<S> {
    inner: S,
    config: FaultConfig,
    rng: Mutex<StdRng>,
    injected: AtomicU64,
    stalled: AtomicU64,
}

impl<S: Storage> FaultStore<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, config: FaultConfig) -> Self {
        let rng = Mutex::new(StdRng::seed_from_u64(config.seed));
        Self {
            inner,
            config,
            rng,
            injected: AtomicU64::new(0),
            stalled: AtomicU64::new(0),
        }
    }

    /// How many errors were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// How many requests were stalled so far.
    pub fn stalled(&self) -> u64 {
        self.stalled.load(Ordering::Relaxed)
    }

    async fn maybe_fail(&self, key: &str) -> Result<()> {
        let (fail, stall) = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            (
                rng.random_bool(self.config.error_rate.clamp(0.0, 1.0)),
                rng.random_bool(self.config.stall_rate.clamp(0.0, 1.0)),
            )
        };
        if stall {
            self.stalled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.config.stall).await;
        }
        if fail {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::new(
                self.config.kind,
                self.inner.name(),
                key,
                "injected fault",
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl<S: Storage> Storage for FaultStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        self.maybe_fail(key).await?;
        self.inner.get_opts(key, options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.maybe_fail(key).await?;
        self.inner.head(key).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
}
