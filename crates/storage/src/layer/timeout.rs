//! A deadline per request.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage};

/// A store whose requests fail with [`ErrorKind::Timeout`] after `timeout`; for a listing,
/// the deadline applies to each item. The timed-out request is dropped, which cancels it.
#[derive(Debug)]
pub struct TimeoutStore<S> {
    inner: S,
    timeout: Duration,
}

impl<S: Storage> TimeoutStore<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self { inner, timeout }
    }

    fn elapsed(&self, key: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            self.inner.name(),
            key,
            format!("no answer within {} ms", self.timeout.as_millis()),
        )
    }

    async fn within<T>(&self, key: &str, request: impl Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.timeout, request)
            .await
            .unwrap_or_else(|_| Err(self.elapsed(key)))
    }
}

#[async_trait]
impl<S: Storage> Storage for TimeoutStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        self.within(key, self.inner.get_opts(key, options)).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.within(key, self.inner.head(key)).await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let inner = self.inner.list(prefix);
        futures::stream::unfold(Some(inner), move |state| async move {
            let mut stream = state?;
            match tokio::time::timeout(self.timeout, stream.next()).await {
                Ok(Some(item)) => Some((item, Some(stream))),
                Ok(None) => None,
                // Report the stall once, then end: the listing cannot go on from there.
                Err(_) => Some((Err(self.elapsed(prefix)), None)),
            }
        })
        .boxed()
    }
}
