//! Checkpoint mid-epoch and resume exactly: no sample lost or repeated.
//!
//! `cargo run --release -p loader-examples --example resume`

use loader_core::{DataLoader, LoaderState, Pipeline};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    loader_testkit::DatasetSpec::tiny(40, 4).write(dir.path())?;
    let (store, dataset) = loader_core::open(&dir.path().to_string_lossy())?;
    let make = || {
        DataLoader::builder(store.clone(), dataset.clone())
            .batch_size(8)
            .shuffle(true)
            .seed(1)
            .transform(Pipeline::imagenet_eval())
            .build()
    };

    let mut loader = make()?;
    let mut seen: Vec<u64> = Vec::new();
    for batch in (&mut loader).take(2) {
        seen.extend(batch?.info.indices);
    }
    // The checkpoint: a few bytes of JSON next to the model's weights.
    let checkpoint = serde_json::to_string(&loader.state()?)?;
    println!("checkpoint after {} samples: {checkpoint}", seen.len());
    drop(loader); // the job dies

    let mut loader = make()?;
    loader.resume(serde_json::from_str::<LoaderState>(&checkpoint)?)?;
    for batch in &mut loader {
        seen.extend(batch?.info.indices);
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..40).collect::<Vec<_>>());
    println!(
        "epoch finished after the resume: all {} samples exactly once",
        seen.len()
    );
    Ok(())
}
