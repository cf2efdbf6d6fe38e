//! Indices per second for a 10-million-index epoch: a random permutation, and one rank's
//! share of a shuffled distributed split.
//!
//! `cargo bench -p loader-benches --bench sampler`

use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use loader_sampler::{DistributedSampler, RandomSampler, Sampler};

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

criterion_group!(benches, sampler);
criterion_main!(benches);
