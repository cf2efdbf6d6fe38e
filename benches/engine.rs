//! The engine alone, side by side in one run: planning, admission, fetching as futures, the
//! pool hand-over and reassembly with a trivial CPU stage (an item's length), so that what
//! is measured is the engine's own cost per item. Cells:
//! - the engine over a plain map store (no object_store, no layers), fixed 128 and adaptive;
//! - the same through `DataLoader`, with its default timeout and retry layers;
//! - the engine over object_store's `InMemory` (its lookup and copy included);
//! - 10,000 requests in flight at 500 ms fixed latency (Little's law: 20,000 items/s).
//!
//! Each cell runs `CELL` and counts items after a one-second warm-up; three rounds of the
//! cells, interleaved, and each cell's median.
//!
//! `cargo bench -p loader-benches --bench engine` (LOADER_BENCH_CELL=text runs the cells
//! whose name holds it)

#[path = "support/memory.rs"]
mod memory;
#[path = "support/plans.rs"]
mod plans;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use loader_core::scheduler::{Config, Engine, Fetch, SampleInfo, StageError, Summary};
use loader_core::storage::layer::Latency;
use loader_core::storage::{Error, ErrorKind, ObjectMeta};
use loader_core::{DataLoader, Dataset, DynStorage, Storage, StorageExt};

const ITEMS: usize = 20_000;
const CELL: Duration = Duration::from_secs(6);
const WARM_UP: Duration = Duration::from_secs(1);

/// A map from key to bytes: the cheapest store there is, so the engine is what is measured.
#[derive(Debug)]
struct MapStore(HashMap<String, Bytes>);

#[async_trait::async_trait]
impl Storage for MapStore {
    fn name(&self) -> &str {
        "map"
    }
    async fn get_opts(
        &self,
        key: &str,
        options: loader_core::storage::GetOptions,
    ) -> loader_core::storage::Result<loader_core::storage::GetResult> {
        let bytes = self
            .0
            .get(key)
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "map", key, "no such key"))?;
        let bytes = match options.range {
            None => bytes,
            Some(r) => {
                bytes.slice((r.start as usize).min(bytes.len())..(r.end as usize).min(bytes.len()))
            }
        };
        Ok(loader_core::storage::GetResult::new(bytes))
    }
    async fn head(&self, key: &str) -> loader_core::storage::Result<ObjectMeta> {
        let bytes = self.get(key).await?;
        Ok(ObjectMeta::new(key, bytes.len() as u64))
    }
    fn list<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> futures::stream::BoxStream<'a, loader_core::storage::Result<ObjectMeta>> {
        Box::pin(futures::stream::empty())
    }
}

/// CPU time of the engine's runtime thread (`loader-io`) so far, from the scheduler's own
/// account (`/proc/self/task/*/schedstat`, nanoseconds); zero where that is not available.
fn runtime_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut total = 0u64;
    for task in tasks.flatten() {
        let path = task.path();
        let named = std::fs::read_to_string(path.join("comm"))
            .is_ok_and(|comm| comm.trim_end() == "loader-io");
        if named {
            total += std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}

/// What a cell measured after its warm-up.
struct Measured {
    /// Items per second delivered.
    rate: f64,
    /// The runtime thread's CPU time per item: on a node with cores to spare for the CPU
    /// stage and the consumer, the engine's ceiling is one over it.
    runtime_per_item: Duration,
}

/// Items per second after the warm-up, from batches of `next` until the cell's end.
fn measure(mut next: impl FnMut() -> usize) -> Measured {
    let start = Instant::now();
    let mut counted = 0;
    let mut from = None;
    while start.elapsed() < CELL {
        let n = next();
        match from {
            None if start.elapsed() >= WARM_UP => from = Some((Instant::now(), runtime_cpu())),
            None => {}
            Some(_) => counted += n,
        }
    }
    let Some((wall, cpu)) = from else {
        return Measured {
            rate: f64::NAN,
            runtime_per_item: Duration::ZERO,
        };
    };
    Measured {
        rate: counted as f64 / wall.elapsed().as_secs_f64(),
        runtime_per_item: (runtime_cpu() - cpu) / counted.max(1) as u32,
    }
}

fn engine_cell(store: DynStorage, fetch: Fetch) -> (Measured, Summary) {
    let stage: loader_core::scheduler::Stage<usize> =
        Arc::new(|b: Bytes, _: &SampleInfo| -> Result<usize, StageError> { Ok(b.len()) });
    let config = Config {
        fetch,
        decode_threads: 2,
        prefetch: 8,
        ..Config::default()
    };
    let mut engine =
        Engine::start(store, stage, plans::endless(ITEMS, 64), &config).expect("engine");
    let measured = measure(|| {
        engine
            .next_blocking()
            .expect("endless plans")
            .expect("batch")
            .samples
            .len()
    });
    (measured, engine.metrics().summary())
}

fn loader_cell(store: DynStorage, fetch: Fetch) -> (Measured, Summary) {
    let dataset = Dataset::from_pairs((0..ITEMS).map(|i| (plans::key(i), 0)));
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(64)
        .fetch(fetch)
        .decode_threads(2)
        .prefetch(8)
        .map(|b, _| Ok(b.len()), |raw| Ok(raw.samples.len()))
        .build()
        .expect("loader");
    let measured = measure(|| match loader.next() {
        Some(batch) => batch.expect("batch"),
        None => 0, // an epoch's end: the next call starts the next
    });
    (measured, loader.metrics().expect("metrics").summary())
}

/// Rounds of every cell, interleaved; each cell's median is reported.
const ROUNDS: usize = 3;

type Cell<'a> = (&'a str, Box<dyn Fn() -> (Measured, Summary) + 'a>);

fn report(cells: Vec<Cell<'_>>) {
    // LOADER_BENCH_CELL=text runs only the cells whose name holds it (for a profiler).
    let only = std::env::var("LOADER_BENCH_CELL").ok();
    let cells: Vec<_> = cells
        .into_iter()
        .filter(|(name, _)| {
            only.as_ref()
                .is_none_or(|only| name.contains(only.as_str()))
        })
        .collect();
    let mut runs: Vec<Vec<(Measured, Summary)>> = cells.iter().map(|_| Vec::new()).collect();
    for round in 0..ROUNDS {
        for ((name, cell), runs) in cells.iter().zip(&mut runs) {
            let run = cell();
            println!(
                "round {round}  {name:<52} {:>9.0} items/s, runtime thread {:.2} us/item",
                run.0.rate,
                micros(run.0.runtime_per_item)
            );
            runs.push(run);
        }
    }
    println!();
    for ((name, _), mut runs) in cells.iter().zip(runs) {
        let mut per_item: Vec<Duration> = runs.iter().map(|r| r.0.runtime_per_item).collect();
        per_item.sort();
        runs.sort_by(|a, b| a.0.rate.total_cmp(&b.0.rate));
        let all: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.0.rate)).collect();
        let (measured, summary) = &runs[runs.len() / 2];
        let per_item = per_item[per_item.len() / 2];
        println!(
            "{name:<52} {:>9.0} items/s median of {} ({}); runtime thread {:.2} us/item \
             (ceiling {:.0} items/s); limit {}, {:.0} in flight on average",
            measured.rate,
            runs.len(),
            all.join(" "),
            micros(per_item),
            1.0 / per_item.as_secs_f64(),
            summary.in_flight_limit,
            summary.mean_in_flight
        );
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let objects: Vec<(String, Vec<u8>)> = (0..ITEMS)
        .map(|i| (plans::key(i), vec![i as u8; 16]))
        .collect();
    let map: DynStorage = Arc::new(MapStore(
        objects
            .iter()
            .map(|(k, v)| (k.clone(), Bytes::from(v.clone())))
            .collect(),
    ));
    let in_memory = memory::memory_store(&objects);
    let fixed = Fetch::Async { max_in_flight: 128 };
    println!(
        "trivial stage on 2 threads, batch 64, 16-byte objects; {} s cells, counted after {} s\n",
        CELL.as_secs(),
        WARM_UP.as_secs()
    );
    let slow: DynStorage =
        Arc::new(Arc::clone(&map).with_latency(Latency::Fixed(Duration::from_millis(500)), 1));
    report(vec![
        (
            "engine, map store, async 128",
            Box::new(|| engine_cell(Arc::clone(&map), fixed)),
        ),
        (
            "engine, map store, adaptive (default)",
            Box::new(|| engine_cell(Arc::clone(&map), Fetch::default())),
        ),
        (
            "DataLoader (timeout + retry layers), map, async 128",
            Box::new(|| loader_cell(Arc::clone(&map), fixed)),
        ),
        (
            "engine, object_store InMemory, async 128",
            Box::new(|| engine_cell(Arc::clone(&in_memory), fixed)),
        ),
        (
            "engine, map store, 500 ms, async 10,000",
            Box::new(|| {
                engine_cell(
                    Arc::clone(&slow),
                    Fetch::Async {
                        max_in_flight: 10_000,
                    },
                )
            }),
        ),
    ]);
}
