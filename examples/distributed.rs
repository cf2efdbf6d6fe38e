//! Ranks in one process, as torchrun would start them: two ranks read the first half of an
//! epoch in shares of global batches, save the state (the same on both), and three ranks of
//! another batch size resume from it; together they read the epoch's samples exactly once.
//!
//! `cargo run --release -p loader-examples --example distributed`

use std::collections::HashSet;

use loader_core::{DataLoader, LoaderState, Pipeline};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    loader_testkit::DatasetSpec::tiny(50, 5).write(dir.path())?;
    let (store, dataset) = loader_core::open(&dir.path().to_string_lossy())?;
    // In a real job, rank and world size come from RANK and WORLD_SIZE (torchrun).
    let rank = |rank: usize, world: usize, batch: usize| {
        DataLoader::builder(store.clone(), dataset.clone())
            .batch_size(batch)
            .shuffle(true)
            .seed(7)
            .distributed(rank, world)
            .transform(Pipeline::imagenet_eval())
            .build()
    };

    let mut seen = Vec::new();
    let mut two = vec![rank(0, 2, 5)?, rank(1, 2, 5)?];
    for _ in 0..3 {
        for loader in &mut two {
            if let Some(batch) = loader.next() {
                seen.extend(batch?.info.indices);
            }
        }
    }
    let states: Vec<LoaderState> = two.iter().map(|l| l.state()).collect::<Result<_, _>>()?;
    assert_eq!(states[0], states[1], "every rank's state is the same");
    println!(
        "2 ranks read {} samples; state: epoch {}, position {}",
        seen.len(),
        states[0].epoch,
        states[0].position
    );
    drop(two);

    for r in 0..3 {
        let mut loader = rank(r, 3, 4)?;
        loader.resume(states[0].clone())?;
        let before = seen.len();
        for batch in &mut loader {
            seen.extend(batch?.info.indices);
        }
        println!("rank {r} of 3 resumed and read {}", seen.len() - before);
    }
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "a sample read twice");
    assert_eq!(unique.len(), dataset.len(), "a sample never read");
    println!("together: each of the {} samples once", dataset.len());
    Ok(())
}
