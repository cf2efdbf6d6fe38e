//! Read from S3: here the test kit's in-process S3 server, behind a 50 ms delay proxy, with
//! the layers a remote store wants.
//!
//! `cargo run -p loader-examples --example s3`

use std::time::Duration;

use futures::TryStreamExt;
use loader_storage::layer::RetryConfig;
use loader_storage::{ObjectMeta, Storage, StorageExt, from_url};
use loader_testkit::{DatasetSpec, DelayProxy, S3Server};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    DatasetSpec::tiny(32, 4).write(&dir.path().join("imagenet"))?;
    let server = S3Server::start(dir.path())?;
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(50))?;

    // With real S3: from_url("s3://bucket/train", [("aws_region", "eu-west-1")]) and the
    // usual AWS_* environment variables.
    let store = from_url("s3://imagenet", server.options_for(&proxy.url()))?
        .with_timeout(Duration::from_secs(10))
        .with_retry(RetryConfig::default())
        .with_metrics();
    let metrics = store.metrics();

    let objects: Vec<ObjectMeta> = store.list("").try_collect().await?;
    let total: usize = futures::future::try_join_all(objects.iter().map(|o| store.get(&o.key)))
        .await?
        .iter()
        .map(|b| b.len())
        .sum();
    println!(
        "{} objects, {total} bytes, all in flight at once",
        objects.len()
    );
    println!("{}", metrics.snapshot());
    Ok(())
}
