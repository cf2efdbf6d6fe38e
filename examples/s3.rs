//! Train from S3: here the test kit's in-process S3 server behind a 50 ms delay proxy, so
//! it runs anywhere; the comment shows the same against real AWS.
//!
//! `cargo run --release -p loader-examples --example s3`

use std::time::Duration;

use loader_core::storage::layer::RetryConfig;
use loader_core::{DataLoader, Dataset, Fetch, Pipeline, StorageExt, from_url};
use loader_testkit::{DatasetSpec, DelayProxy, S3Server};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    DatasetSpec::imagenet(128, 4).write(&dir.path().join("imagenet"))?;
    let server = S3Server::start(dir.path())?;
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(50))?;

    // Against real AWS, credentials and region come from the usual AWS_* variables:
    //     let store = from_url("s3://my-bucket/imagenet/train", Vec::<(String, String)>::new())?;
    let store = from_url("s3://imagenet", server.options_for(&proxy.url()))?
        .with_timeout(Duration::from_secs(10))
        .with_retry(RetryConfig::default())
        .with_metrics();
    let requests = store.metrics();
    let store = store.into_dyn();

    let dataset = Dataset::image_folder_blocking(&*store)?;
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(32)
        .shuffle(true)
        .fetch(Fetch::Async { max_in_flight: 64 })
        .transform(Pipeline::imagenet_eval())
        .build()?;
    for batch in &mut loader {
        let batch = batch?;
        println!("{:?}, first key {}", batch.shape, batch.info.keys[0]);
    }
    println!("S3 requests: {}", requests.snapshot());
    if let Some(metrics) = loader.metrics() {
        println!("{}", metrics.summary());
    }
    Ok(())
}
