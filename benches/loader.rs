//! Loader throughput, side by side in one run (a plain harness: each cell is a whole run,
//! and the point is the ratios between cells):
//! - latency hiding: the evaluation pipeline over a memory store behind 50 ms (median)
//!   simulated latency vs 0 ms, `Async { max_in_flight: 128 }` and the adaptive default,
//!   2 decode threads;
//! - the paper's vanilla baseline, `Sequential { workers: 2 }`, at 50 ms;
//! - overhead: batch 64, no latency, a trivial CPU stage.
//!
//! CPU time per image (user + sys of the whole process) is reported next to images/s.
//!
//! `cargo bench -p loader-benches --bench loader`

#[path = "support/memory.rs"]
mod memory;

use std::sync::Arc;
use std::time::{Duration, Instant};

use loader_core::storage::layer::Latency;
use loader_core::{DataLoader, Dataset, DynStorage, Fetch, Pipeline, StorageExt};
use loader_testkit::DatasetSpec;
use memory::memory_store;

/// User + system CPU time of this process (loader and in-process server together).
fn cpu_time() -> Duration {
    loader_core::scheduler::process_cpu_time().unwrap_or_default()
}

struct Cell {
    name: String,
    items: usize,
    wall: Duration,
    cpu: Duration,
}

impl Cell {
    fn per_sec(&self) -> f64 {
        self.items as f64 / self.wall.as_secs_f64()
    }
}

/// `epochs` passes over `loader`: the engine runs ahead across epoch boundaries, so a
/// few epochs measure the steady state rather than the first request's latency.
fn run<T: Send + 'static, B>(
    name: &str,
    mut loader: DataLoader<T, B>,
    epochs: usize,
    count: impl Fn(&B) -> usize,
) -> Cell {
    let (start, cpu) = (Instant::now(), cpu_time());
    let mut items = 0;
    for _ in 0..epochs {
        for batch in &mut loader {
            items += count(&batch.expect("batch"));
        }
    }
    let cell = Cell {
        name: name.into(),
        items,
        wall: start.elapsed(),
        cpu: cpu_time() - cpu,
    };
    println!(
        "{:<44} {:>7} items {:>8.2} s {:>10.0} items/s {:>8.2} ms CPU/item",
        cell.name,
        cell.items,
        cell.wall.as_secs_f64(),
        cell.per_sec(),
        cell.cpu.as_secs_f64() * 1e3 / cell.items.max(1) as f64
    );
    if let Some(m) = loader.metrics() {
        println!("    {}", m.summary().bottleneck());
    }
    cell
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let spec = DatasetSpec::imagenet(512, 8).with_seed(3);
    let images: Vec<(String, Vec<u8>)> = (0..spec.images)
        .map(|i| (spec.item(i).0, spec.encode(i).expect("encode")))
        .collect();
    let mean_kb =
        images.iter().map(|(_, b)| b.len()).sum::<usize>() as f64 / images.len() as f64 / 1e3;
    println!(
        "{} ImageNet-like JPEGs, {mean_kb:.0} KB on average, 2 decode threads\n",
        images.len()
    );
    let dataset = Dataset::from_pairs(
        images
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.as_str(), (i % 8) as i64)),
    );
    let memory = memory_store(&images);

    // One core's evaluation pipeline, no loader: the CPU ceiling.
    let eval = Pipeline::imagenet_eval();
    let start = Instant::now();
    for (i, (_, bytes)) in images.iter().enumerate().take(200) {
        eval.run(
            bytes,
            loader_core::SampleKey {
                epoch: 0,
                index: i as u64,
            },
        )
        .expect("decode");
    }
    let one_core = 200.0 / start.elapsed().as_secs_f64();
    println!(
        "{:<44} {:>10.0} images/s on one core\n",
        "evaluation pipeline alone", one_core
    );

    let latency = |ms: u64| -> DynStorage {
        if ms == 0 {
            Arc::clone(&memory)
        } else {
            let median = Duration::from_millis(ms);
            Arc::new(Arc::clone(&memory).with_latency(
                Latency::LogNormal {
                    median,
                    p99: median * 3,
                },
                1,
            ))
        }
    };
    let images_loader = |store: DynStorage, fetch: Fetch, subset: usize| {
        let subset = Dataset::from_items(dataset.iter().take(subset).collect(), Vec::new());
        DataLoader::builder(store, subset)
            .batch_size(64)
            .fetch(fetch)
            .decode_threads(2)
            .prefetch(4)
            .transform(Pipeline::imagenet_eval())
            .build()
            .expect("loader")
    };
    let async128 = Fetch::Async { max_in_flight: 128 };
    let at0 = run(
        "async 128, 0 ms",
        images_loader(latency(0), async128, 512),
        3,
        |b| b.len(),
    );
    let at50 = run(
        "async 128, 50 ms (log-normal, p99 150 ms)",
        images_loader(latency(50), async128, 512),
        3,
        |b| b.len(),
    );
    // The default: the loader sets the in-flight limit itself.
    let adaptive0 = run(
        "adaptive (default), 0 ms",
        images_loader(latency(0), Fetch::default(), 512),
        3,
        |b| b.len(),
    );
    let adaptive50 = run(
        "adaptive (default), 50 ms (log-normal, p99 150 ms)",
        images_loader(latency(50), Fetch::default(), 512),
        3,
        |b| b.len(),
    );
    let vanilla = run(
        "sequential 2 workers, 50 ms",
        images_loader(latency(50), Fetch::Sequential { workers: 2 }, 128),
        1,
        |b| b.len(),
    );
    let threads = run(
        "threads 16, 50 ms",
        images_loader(latency(50), Fetch::Threads { threads: 16 }, 512),
        1,
        |b| b.len(),
    );

    // Overhead: a trivial CPU stage, many small items, no latency.
    let tiny: Vec<(String, Vec<u8>)> = (0..20_000)
        .map(|i| (format!("k/{i:06}"), vec![i as u8; 16]))
        .collect();
    let tiny_store = memory_store(&tiny);
    let tiny_set = Dataset::from_pairs(tiny.iter().map(|(k, _)| (k.as_str(), 0)));
    let overhead = DataLoader::builder(tiny_store, tiny_set)
        .batch_size(64)
        .fetch(async128)
        .decode_threads(2)
        .prefetch(8)
        .map(|b, _| Ok(b.len()), |raw| Ok(raw.samples.len()))
        .build()
        .expect("loader");
    let overhead = run(
        "overhead: async 128, trivial stage, batch 64",
        overhead,
        3,
        |n| *n,
    );

    let expected_vanilla = 2.0 / (0.050 + 1.0 / one_core);
    println!();
    println!(
        "latency hiding, async 128 50 ms / 0 ms:     {:.2}x",
        at50.per_sec() / at0.per_sec()
    );
    println!(
        "latency hiding, adaptive 50 ms / 0 ms:      {:.2}x (want >= 0.9)",
        adaptive50.per_sec() / adaptive0.per_sec()
    );
    println!(
        "vanilla at 50 ms: {:.1} items/s; 2 / (50 ms + decode) = {expected_vanilla:.1}",
        vanilla.per_sec()
    );
    println!(
        "async vs vanilla at 50 ms:                  {:.1}x (want >= 15)",
        at50.per_sec() / vanilla.per_sec()
    );
    println!(
        "threads 16 vs vanilla at 50 ms:             {:.1}x",
        threads.per_sec() / vanilla.per_sec()
    );
    println!(
        "efficiency at 50 ms = items/s / (2 cores x one-core pipeline): {:.0}%",
        100.0 * at50.per_sec() / (2.0 * one_core)
    );
    println!(
        "overhead: {:.0} items/s (want >= 300000)",
        overhead.per_sec()
    );
}
