//! What handing a batch to burn or candle costs, against keeping the raw `Batch`, side by
//! side in one run (a plain harness: each cell is a whole run, the point is the ratios).
//! ImageNet-shaped batches (64 x 3 x 224 x 224 f32, 38.5 MB) from 224 px JPEGs in a memory
//! store, decoded and normalised on 2 threads; each cell reads the same 3 epochs, in 3
//! interleaved rounds, and reports wall and CPU time per batch (median of the rounds) and
//! the time of the hand-over call itself:
//! - raw: the batch is dropped, its buffer goes back to the loader's pool;
//! - burn: made into an `ImageBatch` on the flex device (the tensor holds the buffer,
//!   which goes back when burn drops it);
//! - candle, moved: the buffer moves into the tensor and leaves the pool, which maps a new
//!   one for the next batch;
//! - candle, copied: candle copies the values into memory of its own; the buffer goes back.
//!
//! `cargo bench -p loader-benches --features adapters --bench handover`

#[path = "support/memory.rs"]
mod memory;

use std::sync::Arc;
use std::time::{Duration, Instant};

use loader_core::{Batch, DataLoader, Dataset, DynStorage, Fetch, Pipeline};
use loader_testkit::DatasetSpec;
use memory::memory_store;

const IMAGES: usize = 640;
const EPOCHS: usize = 3;

#[derive(Clone, Copy, PartialEq)]
enum Hand {
    Raw,
    Burn,
    CandleMoved,
    CandleCopied,
}

impl Hand {
    fn name(self) -> &'static str {
        match self {
            Hand::Raw => "raw Batch, dropped",
            Hand::Burn => "burn ImageBatch (flex)",
            Hand::CandleMoved => "candle, values moved",
            Hand::CandleCopied => "candle, values copied",
        }
    }

    /// Hand `batch` over and drop what it became, as a training step would.
    fn take(self, batch: Batch, burn: &burn_tensor::Device) {
        match self {
            Hand::Raw => drop(batch),
            Hand::Burn => {
                let made = loader_burn::Convert::convert(&loader_burn::Images, batch, burn)
                    .expect("burn batch");
                drop(made);
            }
            Hand::CandleMoved => {
                let made = loader_candle::to_candle(batch, &candle_core::Device::Cpu)
                    .expect("candle batch");
                drop(made);
            }
            Hand::CandleCopied => {
                let values = batch.as_f32().expect("f32 batch");
                let made = candle_core::Tensor::from_slice(
                    values,
                    batch.shape.to_vec(),
                    &candle_core::Device::Cpu,
                )
                .expect("candle tensor");
                drop(made);
                drop(batch);
            }
        }
    }
}

struct Cell {
    wall: Duration,
    cpu: Duration,
    call: Duration,
    batches: usize,
}

fn run(hand: Hand, store: &DynStorage, dataset: &Dataset) -> Cell {
    let mut loader = DataLoader::builder(Arc::clone(store), dataset.clone())
        .batch_size(64)
        .fetch(Fetch::Async { max_in_flight: 128 })
        .decode_threads(2)
        .transform(
            Pipeline::builder()
                .to_tensor_normalized(
                    &loader_core::decoder::IMAGENET_MEAN,
                    &loader_core::decoder::IMAGENET_STD,
                )
                .build()
                .expect("pipeline"),
        )
        .build()
        .expect("loader");
    let device = burn_tensor::Device::default();
    let (start, cpu) = (
        Instant::now(),
        loader_core::scheduler::process_cpu_time().unwrap_or_default(),
    );
    let (mut call, mut batches) = (Duration::ZERO, 0);
    for _ in 0..EPOCHS {
        for batch in &mut loader {
            let batch = batch.expect("batch");
            let at = Instant::now();
            hand.take(batch, &device);
            call += at.elapsed();
            batches += 1;
        }
    }
    Cell {
        wall: start.elapsed(),
        cpu: loader_core::scheduler::process_cpu_time().unwrap_or_default() - cpu,
        call,
        batches,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut spec = DatasetSpec::imagenet(IMAGES, 8).with_seed(11);
    (spec.width, spec.height, spec.target_bytes) = ((224, 224), (224, 224), None);
    let images: Vec<(String, Vec<u8>)> = (0..IMAGES)
        .map(|i| (spec.item(i).0, spec.encode(i).expect("encode")))
        .collect();
    let dataset = Dataset::from_pairs(
        images
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.as_str(), (i % 8) as i64)),
    );
    let store = memory_store(&images);
    println!(
        "{IMAGES} 224 px JPEGs, batches of 64 x 3 x 224 x 224 f32, {EPOCHS} epochs per cell, 3 rounds\n"
    );
    let hands = [Hand::Raw, Hand::Burn, Hand::CandleMoved, Hand::CandleCopied];
    let mut cells: Vec<Vec<Cell>> = hands.iter().map(|_| Vec::new()).collect();
    for _ in 0..3 {
        for (i, &hand) in hands.iter().enumerate() {
            cells[i].push(run(hand, &store, &dataset));
        }
    }
    let per_batch = |c: &Cell, d: Duration| d.as_secs_f64() * 1e3 / c.batches.max(1) as f64;
    let raw_cpu = median(cells[0].iter().map(|c| per_batch(c, c.cpu)).collect());
    println!(
        "{:<26} {:>12} {:>12} {:>10} {:>14}",
        "hand-over", "wall ms/b", "CPU ms/b", "CPU ratio", "call ms/b"
    );
    for (hand, runs) in hands.iter().zip(&cells) {
        let wall = median(runs.iter().map(|c| per_batch(c, c.wall)).collect());
        let cpu = median(runs.iter().map(|c| per_batch(c, c.cpu)).collect());
        let call = median(runs.iter().map(|c| per_batch(c, c.call)).collect());
        println!(
            "{:<26} {:>12.2} {:>12.2} {:>10.3} {:>14.3}",
            hand.name(),
            wall,
            cpu,
            cpu / raw_cpu,
            call
        );
    }
}
