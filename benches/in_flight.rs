//! In-flight requests on a simulated big node, side by side in one run: the adaptive limit
//! against fixed limits, at several latencies, with a CPU stage that sleeps 2 ms on 64
//! threads (standing in for 64 decode cores, 32,000 items/s, without using the CPU), over
//! a memory store behind the latency layer. Each cell runs for `CELL` from the engine's
//! start, so the adaptive limit's ramp is charged to it; each setting runs three times,
//! interleaved with the others, and its median counts. Then a cell whose latency jumps
//! from 20 to 200 ms mid-run, printing items/s per second. Last, hedging: a heavy-tailed
//! latency (log-normal, median 20 ms, p99 200 ms) with in-flight fixed at rate x median (no
//! over-provisioning to hide the tail), without and with `Hedge::default()`: the consumer's
//! wait per batch at p50 and p99, and the extra requests. The engine alone (a trivial stage)
//! is the `engine` bench.
//!
//! `cargo bench -p loader-benches --bench in_flight` (LOADER_BENCH_LATENCIES=0,10,50,100,200,500
//! and LOADER_BENCH_FIXED=16,64,256,1024,4096,16384 choose the sweep)

#[path = "support/memory.rs"]
mod memory;
#[path = "support/plans.rs"]
mod plans;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use loader_core::scheduler::{Config, Engine, Fetch, Hedge, SampleInfo, StageError, Summary};
use loader_core::storage::layer::Latency;
use loader_core::{DynStorage, StorageExt};
use loader_testkit::HookedStore;

const ITEMS: usize = 20_000;
const CELL: Duration = Duration::from_secs(6);
const THREADS: usize = 64;
const STAGE: Duration = Duration::from_millis(2);
/// Runs of each setting, interleaved; the median is reported.
const ROUNDS: usize = 3;

fn list(var: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// `inner` whose latency is `ms.load()` milliseconds at each whole-object read.
fn delayed(inner: DynStorage, ms: Arc<AtomicU64>) -> DynStorage {
    Arc::new(HookedStore::before_get(inner, move |_, options| {
        let wait = Duration::from_millis(ms.load(Ordering::Relaxed));
        let whole = options.range.is_none();
        async move {
            if whole {
                tokio::time::sleep(wait).await;
            }
            None
        }
        .boxed()
    }))
}

/// Items per second for each second of a cell, and the engine's summary at its end.
fn cell(
    store: DynStorage,
    fetch: Fetch,
    hedge: Option<Hedge>,
    at: impl Fn(Duration),
) -> (Vec<f64>, Summary) {
    let stage = Arc::new(|b: Bytes, _: &SampleInfo| -> Result<usize, StageError> {
        std::thread::sleep(STAGE);
        Ok(b.len())
    });
    let config = Config {
        fetch,
        decode_threads: THREADS,
        prefetch: 8,
        hedge,
        ..Config::default()
    };
    let mut engine =
        Engine::start(store, stage, plans::endless(ITEMS, 64), &config).expect("engine");
    let start = Instant::now();
    let mut per_second = vec![0u64; CELL.as_secs() as usize];
    while let Some(batch) = engine.next_blocking() {
        let elapsed = start.elapsed();
        if elapsed >= CELL {
            break;
        }
        at(elapsed);
        per_second[elapsed.as_secs() as usize] += batch.expect("batch").samples.len() as u64;
    }
    let summary = engine.metrics().summary();
    (per_second.into_iter().map(|n| n as f64).collect(), summary)
}

fn main() {
    let objects: Vec<(String, Vec<u8>)> = (0..ITEMS)
        .map(|i| (plans::key(i), vec![i as u8; 100]))
        .collect();
    let memory = memory::memory_store(&objects);
    let latencies = list("LOADER_BENCH_LATENCIES", &[0, 10, 50, 100, 200, 500]);
    let fixed = list("LOADER_BENCH_FIXED", &[16, 64, 256, 1024, 4096, 16384]);
    println!(
        "{THREADS} threads x {} ms stage (ceiling {:.0} items/s), {} s per cell from the start",
        STAGE.as_millis(),
        THREADS as f64 / STAGE.as_secs_f64(),
        CELL.as_secs()
    );
    for &ms in &latencies {
        let store: DynStorage = Arc::new(
            Arc::clone(&memory).with_latency(Latency::Fixed(Duration::from_millis(ms)), 1),
        );
        // Fixed limits, then the adaptive default (`None`), interleaved over the rounds.
        let settings: Vec<Option<u64>> = fixed.iter().copied().map(Some).chain([None]).collect();
        let mut runs: Vec<Vec<(f64, f64, usize)>> = settings.iter().map(|_| Vec::new()).collect();
        for _ in 0..ROUNDS {
            for (setting, runs) in settings.iter().zip(&mut runs) {
                let fetch = match setting {
                    Some(n) => Fetch::Async {
                        max_in_flight: *n as usize,
                    },
                    None => Fetch::default(),
                };
                let (rates, summary) = cell(Arc::clone(&store), fetch, None, |_| {});
                let rate = rates.iter().sum::<f64>() / rates.len() as f64;
                let steady = rates[2..].iter().sum::<f64>() / (rates.len() - 2) as f64;
                runs.push((rate, steady, summary.in_flight_limit));
            }
        }
        let median = |runs: &mut Vec<(f64, f64, usize)>| {
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            runs[runs.len() / 2]
        };
        let mut best = (0.0f64, 0u64);
        for (setting, runs) in settings.iter().zip(&mut runs) {
            let all: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.0)).collect();
            let (rate, steady, limit) = median(runs);
            match setting {
                Some(n) => {
                    println!(
                        "{ms:>4} ms  fixed {n:>6}: {rate:>8.0} items/s (median of {ROUNDS}: {})",
                        all.join(" ")
                    );
                    if rate > best.0 {
                        best = (rate, *n);
                    }
                }
                None => println!(
                    "{ms:>4} ms  adaptive   : {rate:>8.0} items/s (median of {ROUNDS}: {}), \
                     {:.0}% of the best fixed ({}); after 2 s {steady:.0}; limit reached {limit}",
                    all.join(" "),
                    100.0 * rate / best.0,
                    best.1
                ),
            }
        }
    }
    // A store that slows down mid-run.
    let ms = Arc::new(AtomicU64::new(20));
    let store = delayed(Arc::clone(&memory), Arc::clone(&ms));
    let jump = CELL / 3;
    let (rates, summary) = cell(store, Fetch::default(), None, |t| {
        if t >= jump {
            ms.store(200, Ordering::Relaxed);
        }
    });
    let limit = summary.in_flight_limit;
    let rates: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "20 -> 200 ms at {} s, adaptive: items per second {} ; limit at the end {limit}",
        jump.as_secs(),
        rates.join(" ")
    );

    // Hedging against a heavy tail, in-flight at rate x median.
    let tail = Latency::LogNormal {
        median: Duration::from_millis(20),
        p99: Duration::from_millis(200),
    };
    let in_flight = (THREADS as f64 / STAGE.as_secs_f64() * 0.020) as usize;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for hedge in [None, Some(Hedge::default())] {
        let store: DynStorage = Arc::new(Arc::clone(&memory).with_latency(tail, 7));
        let fetch = Fetch::Async {
            max_in_flight: in_flight,
        };
        let (rates, s) = cell(store, fetch, hedge, |_| {});
        let rate = rates.iter().sum::<f64>() / rates.len() as f64;
        println!(
            "tail p99 = 10x median, {in_flight} in flight, {}: {rate:.0} items/s, consumer wait p50 {:.2} ms p99 {:.2} ms, fetch p99 {:.1} ms, hedges {} ({:.1}% of fetches), won {}",
            if hedge.is_some() {
                "hedged (p95, 5%)"
            } else {
                "no hedging"
            },
            ms(s.consumer_wait.p50),
            ms(s.consumer_wait.p99),
            ms(s.fetch.p99),
            s.hedges_sent,
            100.0 * s.hedges_sent as f64 / s.fetch.count.max(1) as f64,
            s.hedges_won
        );
    }
}
