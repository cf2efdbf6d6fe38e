//! Indices per second for a 10-million-index epoch: a random permutation, and one rank's
//! share of a shuffled distributed split; then the global order: resuming at position 10^7
//! of a 10^8-sample mixture (no replay), reading 10 million positions of it, and one rank
//! of 8 cutting its shares of 10 million positions' global batches.
//!
//! `cargo bench -p loader-benches --bench sampler`

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use loader_sampler::{
    DistributedSampler, GlobalOrder, RandomSampler, Sampler, SourceKind, SourceOrder, StopRule,
    Stripe,
};

const N: usize = 10_000_000;

fn sampler(c: &mut Criterion) {
    let mut group = c.benchmark_group("sampler_10M");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));

    let random = RandomSampler::new(N, 7).expect("sampler");
    group.throughput(Throughput::Elements(N as u64));
    let mut epoch = 0;
    group.bench_function("random_permutation", |b| {
        b.iter(|| {
            epoch += 1;
            random.epoch(epoch).fold(0usize, |acc, i| acc ^ i)
        })
    });

    // Each rank builds the whole epoch's order and walks its interleaved slice.
    let world = 8;
    let rank = DistributedSampler::new(N, 3, world)
        .seed(7)
        .build()
        .expect("sampler");
    group.throughput(Throughput::Elements(rank.len() as u64));
    group.bench_function("distributed_rank_of_8", |b| {
        b.iter(|| {
            epoch += 1;
            rank.epoch(epoch).fold(0usize, |acc, i| acc ^ i)
        })
    });
    group.finish();
}

/// `samples` in shards of 1,008 samples, chunks of 36 (4 MiB of ~110 KB images).
fn shards(samples: usize) -> Arc<[Vec<Range<usize>>]> {
    let chunk = 36;
    let per_shard = 28 * chunk;
    (0..samples)
        .step_by(per_shard)
        .map(|s| {
            (s..(s + per_shard).min(samples))
                .step_by(chunk)
                .map(|c| c..(c + chunk).min(samples).min(s + per_shard))
                .collect()
        })
        .collect()
}

fn global(c: &mut Criterion) {
    let mut group = c.benchmark_group("global_order");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    // 10^8 samples: 6·10^7 in shards read in 16 lanes, 3·10^7 shuffled, 10^7 in order.
    let lanes = SourceKind::ShardLocal {
        shards: shards(60_000_000),
        lanes: 16,
        window: 144,
    };
    let sources = vec![
        SourceOrder::new(60_000_000, lanes, 1).expect("source"),
        SourceOrder::new(30_000_000, SourceKind::Shuffled, 2).expect("source"),
        SourceOrder::new(10_000_000, SourceKind::Sequential, 3).expect("source"),
    ];
    let mixture =
        GlobalOrder::new(sources, vec![6, 3, 1], StopRule::AllExhausted, 7).expect("order");
    let mut epoch = 0;
    group.bench_function("resume_at_1e7_of_a_1e8_mixture", |b| {
        b.iter(|| {
            epoch += 1;
            let order = mixture.epoch(epoch).expect("epoch");
            // Reads of all three sources, so each builds its source-epoch.
            order
                .draws(10_000_000)
                .take(10)
                .fold(0, |acc, d| acc ^ d.sample)
        })
    });
    // The same without shards: permutations and an interleave only.
    let flat = GlobalOrder::new(
        vec![
            SourceOrder::new(60_000_000, SourceKind::Shuffled, 1).expect("source"),
            SourceOrder::new(30_000_000, SourceKind::Shuffled, 2).expect("source"),
            SourceOrder::new(10_000_000, SourceKind::Sequential, 3).expect("source"),
        ],
        vec![6, 3, 1],
        StopRule::AllExhausted,
        7,
    )
    .expect("order");
    group.bench_function("resume_at_1e7_of_a_1e8_mixture_without_shards", |b| {
        b.iter(|| {
            epoch += 1;
            let order = flat.epoch(epoch).expect("epoch");
            order
                .draws(10_000_000)
                .take(10)
                .fold(0, |acc, d| acc ^ d.sample)
        })
    });
    let one = GlobalOrder::new(
        vec![SourceOrder::new(N as u64, SourceKind::Shuffled, 1).expect("source")],
        vec![1],
        StopRule::FirstExhausted,
        7,
    )
    .expect("order");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("reads_of_one_shuffled_source", |b| {
        b.iter(|| {
            epoch += 1;
            let order = one.epoch(epoch).expect("epoch");
            order.draws(0).fold(0, |acc, d| acc ^ d.sample)
        })
    });
    // A rank computes every position of each global batch to cut its share: the cost of
    // an order that does not depend on the world size.
    let stripe = Stripe {
        rank: 3,
        world: 8,
        batch_size: 64,
    };
    group.bench_function("rank_of_8_shares_of_global_batches", |b| {
        b.iter(|| {
            epoch += 1;
            let order = one.epoch(epoch).expect("epoch");
            order
                .rank_batches(0, stripe, false)
                .fold(0, |acc, batch| acc + batch.reads.len())
        })
    });
    group.finish();
}

criterion_group!(benches, sampler, global);
criterion_main!(benches);
