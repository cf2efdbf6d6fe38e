//! A store that passes every request to another, except the `get`s a hook decides to answer
//! itself: how tests stand in for a backend with a bug (a panic), a flaky key, a stalled
//! request or a bucket policy, without writing a whole `Storage` each time.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use loader_storage::{DynStorage, GetOptions, GetResult, ObjectMeta, Result, Storage};

type Hook =
    Arc<dyn Fn(&str, &GetOptions) -> BoxFuture<'static, Option<Result<GetResult>>> + Send + Sync>;

/// `inner` with every `get` first put to a hook: `Some(answer)` is returned instead of
/// reading (the hook may also wait, or panic, as a buggy backend does), `None` reads through.
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
    /// Wrap `inner`, keeping its name; whole-object reads go through `hook`, ranged reads
    /// straight to `inner`.
    pub fn new(
        inner: DynStorage,
        hook: impl Fn(&str) -> Option<Result<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        Self::before_get(inner, move |key, options| {
            let answer = match options.range {
                None => hook(key).map(|answer| answer.map(GetResult::new)),
                Some(_) => None,
            };
            futures::future::ready(answer).boxed()
        })
    }

    /// Wrap `inner`, keeping its name; every read, whole or ranged, first awaits what `hook`
    /// returns for its key and options (a stall, a count, an error), and is answered by it
    /// when that is `Some`.
    pub fn before_get(
        inner: DynStorage,
        hook: impl Fn(&str, &GetOptions) -> BoxFuture<'static, Option<Result<GetResult>>>
        + Send
        + Sync
        + 'static,
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
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        if let Some(answer) = (self.hook)(key, &options).await {
            return answer;
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
