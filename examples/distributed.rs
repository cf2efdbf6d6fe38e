//! Two ranks in one process, as torchrun would start two: each reads a disjoint shard of
//! every epoch, of equal length.
//!
//! `cargo run --release -p loader-examples --example distributed`

use std::collections::HashSet;

use loader_core::{DataLoader, Dataset, DistributedSampler, Pipeline, from_url};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    loader_testkit::DatasetSpec::tiny(50, 5).write(dir.path())?;
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )?;
    let dataset = Dataset::image_folder_blocking(&*store)?;

    let mut shards = Vec::new();
    for rank in 0..2 {
        // In a real job: DistributedSampler::from_env(len)? reads RANK and WORLD_SIZE.
        let sampler = DistributedSampler::new(dataset.len(), rank, 2)
            .shuffle(true)
            .seed(7)
            .build()?;
        let loader = DataLoader::builder(store.clone(), dataset.clone())
            .batch_size(5)
            .sampler(sampler)
            .transform(Pipeline::imagenet_eval())
            .build()?;
        let mut seen = HashSet::new();
        for batch in loader {
            seen.extend(batch?.indices);
        }
        println!("rank {rank}: {} samples", seen.len());
        shards.push(seen);
    }
    assert!(shards[0].is_disjoint(&shards[1]), "ranks overlap");
    println!(
        "disjoint shards covering {} samples",
        shards[0].len() + shards[1].len()
    );
    Ok(())
}
