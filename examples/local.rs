//! An ImageFolder on local disk, with the ImageNet evaluation transform.
//!
//! `cargo run --release -p loader-examples --example local`

use loader_core::{DataLoader, Pipeline};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    loader_testkit::DatasetSpec::tiny(64, 4).write(dir.path())?;

    let (store, dataset) = loader_core::open(&dir.path().to_string_lossy())?;
    println!(
        "{} images in classes {:?}",
        dataset.len(),
        dataset.classes()
    );

    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(16)
        .shuffle(true)
        .transform(Pipeline::imagenet_eval())
        .build()?;
    for epoch in 0..2 {
        loader.set_epoch(epoch);
        for batch in &mut loader {
            let batch = batch?;
            println!(
                "epoch {epoch}: batch {:?}, labels {:?}",
                batch.shape,
                batch.labels.as_i64().map(|l| &l[..l.len().min(4)])
            );
        }
    }
    if let Some(metrics) = loader.metrics() {
        println!("{}", metrics.summary());
    }
    Ok(())
}
