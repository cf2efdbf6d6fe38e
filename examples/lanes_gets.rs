//! GETs per sample the global order plans for shards read shard-local, by world size and lane
//! count, on a dataset of ImageNet's size in chunks (1,000,000 samples in 4 MiB chunks of 36):
//! each rank reads a chunk whole when it reads at least half of it, and its samples one by one
//! otherwise, as the loader's planner decides. (`benches/scripts/elastic.sh` measures the same
//! on the S3 server with a small dataset, whose few chunks per lane make lane ends count.)
//!
//! `cargo run --release -p loader-examples --example lanes_gets`

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use loader_core::sampler::{GlobalOrder, SourceKind, SourceOrder, StopRule, Stripe};

const SAMPLES: usize = 1_000_000;
const PER_CHUNK: usize = 36;

fn layout() -> Arc<[Vec<Range<usize>>]> {
    let per_shard = 28 * PER_CHUNK;
    (0..SAMPLES)
        .step_by(per_shard)
        .map(|s| {
            (s..(s + per_shard).min(SAMPLES))
                .step_by(PER_CHUNK)
                .map(|c| c..(c + PER_CHUNK).min(SAMPLES))
                .collect()
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shards = layout();
    println!("| lanes | world size | GETs per sample | chunks read by more than one rank |");
    println!("|---:|---:|---:|---:|");
    for lanes in [16u32, 48] {
        let order = GlobalOrder::new(
            vec![SourceOrder::new(
                SAMPLES as u64,
                SourceKind::ShardLocal {
                    shards: Arc::clone(&shards),
                    lanes,
                    window: 4 * PER_CHUNK,
                },
                1,
            )?],
            vec![1],
            StopRule::FirstExhausted,
            0,
        )?;
        let epoch = order.epoch(0)?;
        for world in [1usize, 3, 6, 8, 16, 24, 32, 64] {
            let mut gets = 0usize;
            let mut readers: HashMap<u64, u32> = HashMap::new();
            for rank in 0..world {
                let mut reads: HashMap<u64, usize> = HashMap::new();
                for batch in epoch.rank_batches(
                    0,
                    Stripe {
                        rank,
                        world,
                        batch_size: 64,
                    },
                    false,
                ) {
                    for read in batch.reads {
                        *reads
                            .entry(read.draw.sample / PER_CHUNK as u64)
                            .or_default() += 1;
                    }
                }
                for (&chunk, &n) in &reads {
                    gets += if 2 * n >= PER_CHUNK { 1 } else { n };
                    *readers.entry(chunk).or_default() += 1;
                }
            }
            let shared = readers.values().filter(|&&r| r > 1).count();
            println!(
                "| {lanes} | {world} | {:.4} | {:.1}% |",
                gets as f64 / SAMPLES as f64,
                100.0 * shared as f64 / readers.len() as f64
            );
        }
    }
    Ok(())
}
