//! Throttling: a store that answers "503 SlowDown" above a request rate, as S3 does per
//! prefix, so a loader's back-off can be tested.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage};

/// A store that takes at most `per_second` reads per second (a token bucket holding a
/// tenth of a second's worth) and answers the others with [`ErrorKind::Throttled`]
/// before they reach `inner`. Heads and listings pass.
#[derive(Debug)]
pub struct ThrottleStore<S> {
    inner: S,
    per_second: f64,
    bucket: Mutex<(f64, Instant)>,
    throttled: AtomicU64,
    passed: AtomicU64,
}

impl<S: Storage> ThrottleStore<S> {
    /// Wrap `inner`, taking `per_second` reads per second.
    pub fn new(inner: S, per_second: f64) -> Self {
        let per_second = per_second.max(1e-3);
        Self {
            inner,
            per_second,
            bucket: Mutex::new((Self::depth(per_second), Instant::now())),
            throttled: AtomicU64::new(0),
            passed: AtomicU64::new(0),
        }
    }

    fn depth(per_second: f64) -> f64 {
        (per_second / 10.0).max(1.0)
    }

    /// Reads answered with throttling so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Reads let through so far.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }

    fn admit(&self, key: &str) -> Result<()> {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = &mut *bucket;
        let now = Instant::now();
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.per_second;
        *tokens = (*tokens + refill).min(Self::depth(self.per_second));
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            self.passed.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.throttled.fetch_add(1, Ordering::Relaxed);
        Err(Error::new(
            ErrorKind::Throttled,
            self.inner.name(),
            key,
            format!(
                "503 SlowDown: please reduce your request rate (over {:.0} requests/s)",
                self.per_second
            ),
        ))
    }
}

#[async_trait]
impl<S: Storage> Storage for ThrottleStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        self.admit(key)?;
        self.inner.get_opts(key, options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.inner.head(key).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    // Forwarded, so a retry layer below still restarts a listing broken mid-way.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.inner.list_all(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::local::LocalStore;

    #[tokio::test]
    async fn answers_slow_down_past_its_rate_and_names_the_key() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(dir.path().join("a"), b"x").expect("write");
        let store = ThrottleStore::new(LocalStore::new(dir.path()).expect("a store"), 0.01);
        // The bucket holds one read and refills in 100 s: the second is throttled.
        assert!(store.get("a").await.is_ok());
        let err = store.get("a").await.expect_err("throttled");
        assert_eq!(err.kind(), ErrorKind::Throttled);
        assert!(err.to_string().contains("SlowDown") && err.to_string().contains('a'));
        assert_eq!((store.passed(), store.throttled()), (1, 1));
    }
}
