//! Train from WebDataset tar shards on S3: the test kit's in-process S3 server behind a
//! 50 ms delay proxy. Shard-local order reads each 4 MiB chunk of a shard with one GET.
//!
//! `cargo run --release -p loader-examples --example webdataset`

use std::time::Duration;

use loader_core::webdataset::WebDataset;
use loader_core::{DataLoader, Pipeline};
use loader_testkit::{DatasetSpec, DelayProxy, S3Server};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // 512 ImageNet-sized images in 4 shards of 128 (`{i}.jpg` + `{i}.cls` members).
    DatasetSpec::imagenet(512, 8).write_shards(&dir.path().join("train"), 4)?;
    let server = S3Server::start(dir.path())?;
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(50))?;

    // Against real S3 the options come from the usual AWS_* variables:
    //     WebDataset::new().load_url("s3://my-bucket/train-{000000..000127}.tar", [])
    let url = "s3://train/shard-{000000..000003}.tar";
    let (store, dataset) =
        WebDataset::new().load_url_blocking(url, server.options_for(&proxy.url()))?;
    println!(
        "{} samples in {} shards",
        dataset.len(),
        dataset.shards().len()
    );

    let epochs = 2;
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(32)
        .shuffle(true) // shard-local order: ShardOrder::Local is the default for shards
        .epochs(epochs)
        .transform(Pipeline::imagenet_eval())
        .build()?;
    let gets_before = proxy.stats().gets;
    for epoch in 0..epochs {
        let mut images = 0;
        for batch in &mut loader {
            let batch = batch?;
            images += batch.len();
            if images == batch.len() {
                println!(
                    "epoch {epoch}: first batch {:?}, keys {:?}...",
                    batch.shape,
                    &batch.info.keys[..3]
                );
            }
        }
        println!("epoch {epoch}: {images} images");
    }
    let gets = proxy.stats().gets - gets_before;
    println!("{gets} GETs for {} images", 512 * epochs);
    if let Some(metrics) = loader.metrics() {
        println!("{}", metrics.summary());
    }
    Ok(())
}
