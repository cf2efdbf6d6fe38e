//! Plug in your own backend by implementing `Storage`, then add layers to it like any store.
//!
//! `cargo run -p loader-examples --example custom_backend`

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use loader_storage::layer::RetryConfig;
use loader_storage::{
    Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage, StorageExt, check_key,
};

/// A store whose object `n` is `n` repeated `n` times: handy synthetic data.
#[derive(Debug)]
struct Counting;

impl Counting {
    fn object(&self, key: &str) -> Result<Vec<u8>> {
        check_key(self.name(), key)?;
        let n: u8 = key.parse().map_err(|e| {
            Error::new(ErrorKind::NotFound, self.name(), key, "keys are numbers").with_source(e)
        })?;
        Ok(vec![n; usize::from(n)])
    }
}

#[async_trait]
impl Storage for Counting {
    fn name(&self) -> &str {
        "counting://"
    }

    /// The one read to write: `get`, `get_range` and `get_range_if` are made of it.
    /// (This store has one version of each object, so `options.if_match` needs no check.)
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let all = self.object(key)?;
        let bytes = match options.range {
            None => Bytes::from(all),
            Some(range) => {
                let end = (range.end as usize).min(all.len());
                let start = (range.start as usize).min(end);
                Bytes::copy_from_slice(&all[start..end])
            }
        };
        Ok(GetResult::new(bytes))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        Ok(ObjectMeta::new(key, self.object(key)?.len() as u64))
    }

    fn list<'a>(&'a self, _prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        futures::stream::iter(1..=5u8)
            .then(move |n| self.head_owned(n.to_string()))
            .boxed()
    }
}

impl Counting {
    async fn head_owned(&self, key: String) -> Result<ObjectMeta> {
        self.head(&key).await
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let store = Counting
        .with_timeout(Duration::from_secs(1))
        .with_retry(RetryConfig::default())
        .with_metrics();
    let metrics = store.metrics();
    let listed: Vec<ObjectMeta> = store.list("").try_collect().await?;
    for meta in &listed {
        let bytes = store.get(&meta.key).await?;
        println!("{} -> {} bytes", meta.key, bytes.len());
    }
    if let Err(e) = store.get("x").await {
        println!("a bad key reads as: {e}");
    }
    println!("{}", metrics.snapshot());
    Ok(())
}
