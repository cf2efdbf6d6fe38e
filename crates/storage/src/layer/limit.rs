//! At most N requests at a time.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage};

/// A store that lets at most `max` requests reach its inner store at once; the rest wait
/// in FIFO order. A listing holds one permit for as long as its stream lives.
#[derive(Debug)]
pub struct LimitStore<S> {
    inner: S,
    semaphore: Arc<Semaphore>,
    max: usize,
}

impl<S: Storage> LimitStore<S> {
    /// Wrap `inner`; a `max` of 0 is taken as 1, since 0 would block every request forever.
    pub fn new(inner: S, max: usize) -> Self {
        let max = max.max(1);
        Self {
            inner,
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Requests that could start now without waiting.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    async fn permit(&self, key: &str) -> Result<OwnedSemaphorePermit> {
        // The semaphore is never closed while the store lives; map the impossible anyway.
        self.semaphore.clone().acquire_owned().await.map_err(|e| {
            Error::new(
                ErrorKind::Other,
                self.inner.name(),
                key,
                "the limiter closed",
            )
            .with_source(e)
        })
    }
}

#[async_trait]
impl<S: Storage> Storage for LimitStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let _permit = self.permit(key).await?;
        self.inner.get_opts(key, options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let _permit = self.permit(key).await?;
        self.inner.head(key).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        futures::stream::once(self.permit(prefix))
            .flat_map(move |permit| match permit {
                Ok(permit) => self
                    .inner
                    .list(prefix)
                    .map(move |item| {
                        let _held = &permit;
                        item
                    })
                    .boxed(),
                Err(e) => futures::stream::once(async { Err(e) }).boxed(),
            })
            .boxed()
    }

    // Forwarded, so a retry layer below still restarts a listing broken mid-way.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let _permit = self.permit(prefix).await?;
        self.inner.list_all(prefix).await
    }
}
