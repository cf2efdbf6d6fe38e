//! What a read met on its way comes back in its result (`GetResult::served`) or its error
//! (`Error::served`), filled by the layers it passed: a retry layer's retries and throttling
//! answers, a cache's own answer. No side channel: a layer that moves the read to another
//! task passes the facts on with the answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use loader_storage::layer::{CacheConfig, RetryConfig};
use loader_storage::{
    Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage, StorageExt, from_url,
};

/// Answers `script[n]` to its n-th read (then successes): `Some(kind)` fails with that kind.
#[derive(Debug)]
struct Scripted {
    script: Vec<Option<ErrorKind>>,
    reads: AtomicUsize,
}

#[async_trait]
impl Storage for Scripted {
    fn name(&self) -> &str {
        "scripted://"
    }
    async fn get_opts(&self, key: &str, _: GetOptions) -> Result<GetResult> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        match self.script.get(n).copied().flatten() {
            Some(kind) => Err(Error::new(kind, self.name(), key, "scripted")),
            None => Ok(GetResult::new(Bytes::from_static(b"answer"))),
        }
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        Ok(ObjectMeta::new(key, 6))
    }
    fn list<'a>(&'a self, _: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        Box::pin(futures::stream::empty())
    }
}

/// A layer of someone else's that reads on a task of its own.
#[derive(Debug)]
struct Spawning<S>(Arc<S>);

#[async_trait]
impl<S: Storage + 'static> Storage for Spawning<S> {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let (inner, key) = (Arc::clone(&self.0), key.to_owned());
        tokio::spawn(async move { inner.get_opts(&key, options).await })
            .await
            .unwrap_or_else(|e| Err(Error::new(ErrorKind::Other, "spawning", "", e.to_string())))
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.0.head(key).await
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.0.list(prefix)
    }
}

fn quick_retries(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        ..RetryConfig::default()
    }
}

fn scripted(script: Vec<Option<ErrorKind>>) -> Scripted {
    Scripted {
        script,
        reads: AtomicUsize::new(0),
    }
}

#[tokio::test]
async fn retries_and_throttling_reach_the_result_through_a_layer_on_another_task() {
    let (t, e) = (Some(ErrorKind::Throttled), Some(ErrorKind::Transient));
    let store = Spawning(Arc::new(
        scripted(vec![t, t, e]).with_retry(quick_retries(10)),
    ));
    let answer = store.get_opts("k", GetOptions::default()).await.unwrap();
    assert_eq!(answer.bytes.as_ref(), b"answer");
    assert_eq!((answer.served.throttled, answer.served.retries), (2, 1));
    assert!(!answer.served.cached);
}

#[tokio::test]
async fn a_read_that_fails_for_good_says_what_it_met_in_its_error() {
    let t = Some(ErrorKind::Throttled);
    let store = scripted(vec![t; 10]).with_retry(quick_retries(3));
    let err = store.get_range("k", 0..4).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled);
    // Three attempts: two throttling answers retried, the last one is the error itself.
    assert_eq!((err.served().throttled, err.served().retries), (2, 0));
    // Not retryable: returned at once, nothing retried.
    let store = scripted(vec![Some(ErrorKind::NotFound)]).with_retry(quick_retries(3));
    let err = store.get("k").await.unwrap_err();
    assert_eq!(err.served(), Default::default());
}

#[tokio::test]
async fn a_cached_answer_is_the_reads_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), vec![7u8; 10_000]).unwrap();
    std::fs::write(dir.path().join("b"), vec![8u8; 10_000]).unwrap();
    let local = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let store = local
        .with_cache(CacheConfig {
            memory_bytes: 1 << 20,
            ..CacheConfig::default()
        })
        .unwrap();
    // Known sizes and versions, so no read waits for a HEAD.
    store.head("a").await.unwrap();
    store.head("b").await.unwrap();
    let first = store
        .get_opts("a", GetOptions::range(0..5000))
        .await
        .unwrap();
    assert!(!first.served.cached, "a miss asked the store");
    let (hit, miss) = futures::join!(
        store.get_opts("a", GetOptions::range(0..5000)),
        store.get_opts("b", GetOptions::range(0..5000)),
    );
    assert!(hit.unwrap().served.cached);
    assert!(!miss.unwrap().served.cached);
}

/// Throttles its first read; holds its second until `release` is notified.
#[derive(Debug)]
struct ThrottleThenHold {
    reads: AtomicUsize,
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Storage for ThrottleThenHold {
    fn name(&self) -> &str {
        "held://"
    }
    async fn get_opts(&self, key: &str, _: GetOptions) -> Result<GetResult> {
        if self.reads.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(Error::new(
                ErrorKind::Throttled,
                self.name(),
                key,
                "slow down",
            ));
        }
        self.release.notified().await;
        Ok(GetResult::new(Bytes::from_static(b"answer")))
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        Ok(ObjectMeta::new(key, 6))
    }
    fn list<'a>(&'a self, _: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        Box::pin(futures::stream::empty())
    }
}

#[tokio::test]
async fn an_observer_hears_of_throttling_while_the_read_is_still_under_way() {
    // The read's second attempt waits until the test has heard of the first one's
    // throttling: the test passes only if the observer is told before the read returns.
    // Through a cache (its single flight runs the request for the read) and a layer that
    // reads on another task.
    for cached in [false, true] {
        let release = Arc::new(tokio::sync::Notify::new());
        let inner = ThrottleThenHold {
            reads: AtomicUsize::new(0),
            release: Arc::clone(&release),
        };
        let retried: Arc<dyn Storage> =
            Arc::new(Spawning(Arc::new(inner.with_retry(quick_retries(5)))));
        let store: Arc<dyn Storage> = if cached {
            Arc::new(
                retried
                    .with_cache(CacheConfig {
                        memory_bytes: 1 << 20,
                        ..CacheConfig::default()
                    })
                    .unwrap(),
            )
        } else {
            retried
        };
        let (told, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let observer = loader_storage::Observer::new(move |fact| {
            let _ = told.send(fact);
        });
        let read = tokio::spawn({
            let store = Arc::clone(&store);
            async move {
                store
                    .get_opts("k", GetOptions::range(0..6).observe(observer))
                    .await
            }
        });
        let fact = tokio::time::timeout(Duration::from_secs(20), heard.recv())
            .await
            .unwrap_or_else(|_| panic!("cached {cached}: no word of the throttling in 20 s"))
            .expect("the observer is alive while the read is");
        assert_eq!((fact.throttled, fact.retries), (1, 0), "cached {cached}");
        assert!(
            !read.is_finished(),
            "cached {cached}: the read waits for its release"
        );
        release.notify_one();
        let answer = tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("the released read returns")
            .unwrap()
            .unwrap();
        assert_eq!(answer.served.throttled, 1, "the total still comes back");
    }
}
