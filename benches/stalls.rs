//! Black-holed responses through real sockets: what a lost response costs the loader with
//! its default settings (a 30 s deadline per attempt, then a retry), with stall hedging
//! only (the default, `Hedge::stalls_only`), and with tail hedging too (`Hedge::default`).
//! 2,000 objects of 8 KB on the test kit's S3 server behind the delay proxy (10 ms RTT),
//! which holds back 2% of the responses to GETs for ever (the connection stays open); one
//! epoch per setting, batches of 64, the adaptive in-flight limit (capped at 4,096: the
//! servers share the process and its open files), a trivial CPU stage.
//!
//! `cargo bench -p loader-benches --bench stalls` (LOADER_BENCH_STALL_RATE=0.02 and
//! LOADER_BENCH_OBJECTS=2000 change the setup; about 3 minutes, most of it the unhedged
//! epoch)

use std::time::{Duration, Instant};

use bytes::Bytes;
use loader_core::scheduler::{Fetch, Hedge};
use loader_core::{DataLoader, Dataset, RawBatch, SampleInfo, from_url};
use loader_testkit::{DelayProxy, ProxyFaults, S3Server};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let objects: usize = env("LOADER_BENCH_OBJECTS", 2_000);
    let stall_rate: f64 = env("LOADER_BENCH_STALL_RATE", 0.02);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bucket = dir.path().join("data");
    std::fs::create_dir(&bucket).expect("the bucket");
    for i in 0..objects {
        std::fs::write(
            bucket.join(format!("{i:05}")),
            vec![(i % 251) as u8; 8 << 10],
        )
        .expect("an object");
    }
    let server = S3Server::start(dir.path()).expect("the S3 server");
    println!(
        "{objects} objects of 8 KB over S3 behind a 10 ms proxy that black-holes {:.0}% of GET responses; one epoch each, batch 64, default settings otherwise\n",
        stall_rate * 100.0
    );
    println!(
        "| hedging | epoch s | items/s | responses held back | sent again for a stall | tail hedges | timed-out attempts retried | peak in-flight limit |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let settings: [(&str, Option<Hedge>); 3] = [
        ("none", None),
        ("stalls only (default)", Some(Hedge::stalls_only())),
        ("Hedge::default() (p95, 5%)", Some(Hedge::default())),
    ];
    for (name, hedge) in settings {
        let faults = ProxyFaults {
            stall_rate,
            seed: 7,
            ..ProxyFaults::default()
        };
        let proxy = DelayProxy::with_faults(server.addr(), Duration::from_millis(10), 0, faults)
            .expect("the proxy");
        let store = from_url("s3://data", server.options_for(&proxy.url())).expect("the store");
        let dataset = Dataset::from_pairs((0..objects).map(|i| (format!("{i:05}"), 0)));
        let loader = DataLoader::builder(store, dataset)
            .batch_size(64)
            .hedge(hedge)
            // The servers share this process: a request holds four descriptors here (one on
            // a real client), so the open-files bound (half of `ulimit -n`) is not enough.
            .fetch(Fetch::Adaptive {
                max_in_flight: 4_096,
            })
            .map(
                |bytes: Bytes, _: &SampleInfo| Ok(bytes.len()),
                |raw: RawBatch<usize>| Ok(raw.samples.len()),
            )
            .build()
            .expect("the loader");
        let started = Instant::now();
        let mut loader = loader;
        let mut delivered = 0;
        for batch in &mut loader {
            delivered += batch.expect("a batch");
        }
        let elapsed = started.elapsed();
        assert_eq!(delivered, objects, "every object once");
        let summary = loader.metrics().expect("metrics").summary();
        let stats = proxy.stats();
        println!(
            "| {name} | {:.1} | {:.0} | {} | {} | {} | {} | {} |",
            elapsed.as_secs_f64(),
            objects as f64 / elapsed.as_secs_f64(),
            stats.stalled,
            summary.stalls_hedged,
            summary.hedges_sent - summary.stalls_hedged,
            summary.retried,
            summary.limit_peak
        );
    }
}
