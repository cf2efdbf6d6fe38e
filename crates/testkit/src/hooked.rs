//! A store that passes every request to another, except the `get`s a hook decides to answer
//! itself: how tests stand in for a backend with a bug (a panic), a flaky key or a bucket
//! policy, without writing a whole `Storage` each time.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use loader_storage::{DynStorage, GetOptions, GetResult, ObjectMeta, Result, Storage};

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
    /// Whole-object reads go through the hook; ranged reads straight to the inner store.
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        if options.range.is_none()
            && let Some(answer) = (self.hook)(key)
        {
            return answer.map(GetResult::new);
        }
        self.inner.get_opts(key, options).await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.inner.head(key).await
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
}
