//! A store that passes every request to another, except the `get`s a hook decides to answer
//! itself: how tests stand in for a backend with a bug (a panic), a flaky key or a bucket
//! policy, without writing a whole `Storage` each time.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use loader_storage::{DynStorage, ObjectMeta, Result, Storage};

type Hook = Arc<dyn Fn(&str) -> Option<Result<Bytes>> + Send + Sync>;

/// `inner` with `get(key)` first put to a hook: `Some(answer)` is returned instead of
/// reading (the hook may also panic, as a buggy backend does), `None` reads through.
pub struct HookedStore {
    inner: DynStorage,
    name: String,
    hook: Hook,
}

impl fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedStore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl HookedStore {
    /// Wrap `inner`, keeping its name.
    pub fn new(
        inner: DynStorage,
        hook: impl Fn(&str) -> Option<Result<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: inner.name().to_owned(),
            inner,
            hook: Arc::new(hook),
        }
    }

    /// Name the store `name` in errors instead of the inner store's name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

#[async_trait]
impl Storage for HookedStore {
    fn name(&self) -> &str {
        &self.name
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        match (self.hook)(key) {
            Some(answer) => answer,
            None => self.inner.get(key).await,
        }
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(key, range).await
    }

    async fn get_range_if(&self, key: &str, range: Range<u64>, version: &str) -> Result<Bytes> {
        self.inner.get_range_if(key, range, version).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.inner.head(key).await
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
}
