//! Retry transient failures with exponential backoff and jitter, within bounds.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::BoxStream;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{GetOptions, GetResult, ObjectMeta, Result, Served, Storage};

/// When and how often to retry. Only errors whose kind
/// [is retryable](crate::ErrorKind::is_retryable) (transient, timeout) are retried.
///
/// The default is made for training runs, which would rather wait out an outage than
/// crash: 10 attempts within 2 minutes, backoff from 100 ms doubling to at most 10 s with
/// "equal jitter", seeded per process so the ranks of a job do not retry in lockstep. It
/// rides out a store that is away for 16.35 s at the least (the shortest draws of its backoffs, `the_default_policy_waits_at_least_sixteen_seconds_before_giving_up`; 10 s in the loader tests). AWS SDKs'
/// standard mode makes 3 attempts and stops retrying altogether when its retry quota runs
/// dry during an outage, which suits an interactive service and fails a training run;
/// object_store retries 10 times within 180 s but knows nothing of the loader's timeouts.
/// There is no retry quota here: a loader's requests are bounded by its in-flight limit.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Attempts in all, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// The backoff before the first retry; it grows by `multiplier` per retry.
    pub initial_backoff: Duration,
    /// The longest single backoff.
    pub max_backoff: Duration,
    /// Growth of the backoff per retry.
    pub multiplier: f64,
    /// No retry starts after this much time since the first attempt.
    pub max_elapsed: Duration,
    /// Seed of the jitter: different per process by default, fixed for repeatable tests.
    pub seed: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            max_elapsed: Duration::from_secs(120),
            seed: process_seed(),
        }
    }
}

/// A seed that differs between processes (and between runs of one): the process id and the
/// clock, hashed by the standard library's randomly keyed hasher.
fn process_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

impl RetryConfig {
    /// The backoff before retry number `retry` (1-based): "equal jitter", half fixed and
    /// half random, so retries of many requests spread out but never collapse to zero.
    fn backoff(&self, retry: u32, rng: &mut StdRng) -> Duration {
        let exp = self
            .multiplier
            .max(1.0)
            .powi(retry.saturating_sub(1).min(64) as i32);
        let cap = self.initial_backoff.mul_f64(exp).min(self.max_backoff);
        let half = cap / 2;
        half + half.mul_f64(rng.random::<f64>())
    }
}

/// How often a [`RetryStore`] has retried and given up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Attempts after the first.
    pub retries: u64,
    /// Requests that failed with a retryable error after all attempts or time were spent.
    pub exhausted: u64,
}

/// A store that retries its inner store's transient failures.
///
/// A listing is retried while it has yielded nothing (restarting it then repeats no item);
/// a failure after its first item is passed on, since a restart would repeat items. For a
/// whole listing that is restarted as a whole, use [`RetryStore::list_all`].
#[derive(Debug)]
pub struct RetryStore<S> {
    inner: S,
    config: RetryConfig,
    rng: Mutex<StdRng>,
    retries: AtomicU64,
    exhausted: AtomicU64,
}

impl<S: Storage> RetryStore<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, config: RetryConfig) -> Self {
        let rng = Mutex::new(StdRng::seed_from_u64(config.seed));
        Self {
            inner,
            config,
            rng,
            retries: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    /// Counters since the store was made.
    pub fn stats(&self) -> RetryStats {
        RetryStats {
            retries: self.retries.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// `attempt` until it succeeds, fails for good, or the policy gives up; what was
    /// retried (and what the attempts' own layers met) is added to `served`.
    async fn retry<T, F, Fut>(
        &self,
        served: &mut Served,
        options: &GetOptions,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let err = match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            *served = served.merge(err.served());
            if !err.kind().is_retryable() {
                return Err(err);
            }
            let backoff = {
                // A poisoned lock only means another request panicked mid-draw; the RNG
                // state is still usable.
                let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                self.config.backoff(attempts, &mut rng)
            };
            let elapsed = start.elapsed();
            if attempts >= self.config.max_attempts || elapsed + backoff > self.config.max_elapsed {
                self.exhausted.fetch_add(1, Ordering::Relaxed);
                return Err(err.context(format!(
                    "gave up after {attempts} attempt(s) in {} ms",
                    elapsed.as_millis()
                )));
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            // The caller sees only the last answer; what was retried, it learns here, and
            // its observer now, before the backoff (an adaptive limit cuts on throttling).
            let retried = match err.kind() {
                crate::ErrorKind::Throttled => Served::throttled(),
                _ => Served::retried(),
            };
            options.met(retried);
            *served = served.merge(retried);
            tokio::time::sleep(backoff).await;
        }
    }
}

#[async_trait]
impl<S: Storage> Storage for RetryStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let mut met = Served::default();
        let result = self
            .retry(&mut met, &options, || {
                self.inner.get_opts(key, options.clone())
            })
            .await;
        match result {
            Ok(mut answer) => {
                answer.served = met.merge(answer.served);
                Ok(answer)
            }
            // The failed attempts' facts are in `met` already, the last one's among them.
            Err(e) => Err(e.with_served(met)),
        }
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.retry(&mut Served::default(), &GetOptions::default(), || {
            self.inner.head(key)
        })
        .await
    }

    /// Every object below `prefix`, collected; a transient failure anywhere in the listing
    /// restarts it from the beginning, within the same attempts and time as a request.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        use futures::TryStreamExt;
        self.retry(&mut Served::default(), &GetOptions::default(), || {
            self.inner.list(prefix).try_collect::<Vec<_>>()
        })
        .await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        use futures::StreamExt;
        // Until the first item: open the listing, retrying a retryable first failure.
        let first = async move {
            let opened = self
                .retry(&mut Served::default(), &GetOptions::default(), || async {
                    let mut stream = self.inner.list(prefix);
                    match stream.next().await {
                        Some(Err(e)) => Err(e),
                        first => Ok((first, stream)),
                    }
                })
                .await;
            match opened {
                Ok((first, rest)) => futures::stream::iter(first).chain(rest).left_stream(),
                Err(e) => futures::stream::once(async { Err(e) }).right_stream(),
            }
        };
        futures::stream::once(first).flatten().boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The outage the default policy always rides out, as its docs state: the sum of the
    // shortest draws of its nine backoffs (each at least half its cap).
    #[test]
    fn the_default_policy_waits_at_least_sixteen_seconds_before_giving_up() {
        let config = RetryConfig::default();
        let shortest: Duration = (1..config.max_attempts)
            .map(|retry| {
                let exp = config.multiplier.powi(retry as i32 - 1);
                config.initial_backoff.mul_f64(exp).min(config.max_backoff) / 2
            })
            .sum();
        println!("shortest total backoff of the default policy: {shortest:?}");
        assert!(shortest >= Duration::from_secs(16), "{shortest:?}");
        assert!(shortest < config.max_elapsed);
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let config = RetryConfig::default();
        let mut rng = StdRng::seed_from_u64(1);
        let first = config.backoff(1, &mut rng);
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        let tenth = config.backoff(10, &mut rng);
        assert!(
            tenth >= Duration::from_secs(5) && tenth <= Duration::from_secs(10),
            "{tenth:?}"
        );
        // The default seed differs between processes, so ranks do not retry in lockstep.
        assert_ne!(RetryConfig::default().seed, RetryConfig::default().seed);
        let draws: Vec<_> = (0..8).map(|_| config.backoff(3, &mut rng)).collect();
        assert!(
            draws.windows(2).any(|w| w[0] != w[1]),
            "no jitter: {draws:?}"
        );
    }
}
