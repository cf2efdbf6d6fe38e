#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Properties of the global order: the same order on any world size, every position read
//! once across any sequence of restripes, every prefix within one of the weights, the stop
//! rules' promises, and segments that continue each source where it stood.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use loader_sampler::{Batching, GlobalOrder, Segment, SourceKind, SourceOrder, StopRule, Stripe};
use proptest::prelude::*;

fn layout(len: usize, per_chunk: usize, chunks_per_shard: usize) -> Arc<[Vec<Range<usize>>]> {
    let chunks: Vec<Range<usize>> = (0..len)
        .step_by(per_chunk)
        .map(|s| s..(s + per_chunk).min(len))
        .collect();
    chunks
        .chunks(chunks_per_shard)
        .map(|c| c.to_vec())
        .collect::<Vec<_>>()
        .into()
}

fn source(len: usize, kind: u8, identity: u64) -> SourceOrder {
    let kind = match kind % 3 {
        0 => SourceKind::Sequential,
        1 => SourceKind::Shuffled,
        _ => SourceKind::ShardLocal {
            shards: layout(len, 3 + (identity % 5) as usize, 2),
            lanes: 1 + (identity % 7) as u32,
            window: 1 + (identity % 9) as usize,
        },
    };
    SourceOrder::new(len as u64, kind, identity).unwrap()
}

fn stop_rule(pick: u8, n: u64) -> StopRule {
    match pick % 5 {
        0 => StopRule::FirstExhausted,
        1 => StopRule::AllExhausted,
        2 => StopRule::AllExhaustedWithoutReplacement,
        3 => StopRule::SamplesPerEpoch(n.max(1)),
        _ => StopRule::CycleForever,
    }
}

/// A mixture from proptest's draws.
fn any_order() -> impl Strategy<Value = GlobalOrder> {
    (
        prop::collection::vec((1usize..60, 0u8..3, 0u64..5), 1..4),
        0u8..5,
        1u64..200,
        any::<u64>(),
    )
        .prop_map(|(specs, stop, n, seed)| {
            let mut weights: Vec<u64> = specs.iter().map(|s| s.2).collect();
            if weights.iter().all(|&w| w == 0) {
                weights[0] = 1;
            }
            let sources = specs
                .iter()
                .enumerate()
                .map(|(i, &(len, kind, _))| source(len, kind, i as u64 * 31 + 7))
                .collect();
            GlobalOrder::new(sources, weights, stop_rule(stop, n), seed).unwrap()
        })
}

/// Up to `cap` positions of an epoch, in order.
fn positions(order: &GlobalOrder, epoch: u64, cap: u64) -> Vec<(usize, u64)> {
    let e = order.epoch(epoch).unwrap();
    e.draws(0)
        .take(cap as usize)
        .map(|d| (d.source, d.sample))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Runs on world sizes W1 → W2 → W3 with other batch sizes, each stopping after some
    /// global batches: every position of the epoch read exactly once, and each position's
    /// sample the one the order names, whatever the stripes.
    #[test]
    fn restripes_read_every_position_once(
        order in any_order(),
        runs in prop::collection::vec((1usize..6, 1usize..9, 0usize..6), 1..4),
        drop_last: bool,
    ) {
        let epoch = order.epoch(0).unwrap();
        let len = epoch.len().unwrap_or(300).min(300);
        let reference: Vec<_> = epoch.draws(0).take(len as usize).collect();
        let mut seen: HashMap<u64, u32> = HashMap::new();
        let mut k = 0u64;
        for (i, &(world, batch_size, steps)) in runs.iter().enumerate() {
            let last_run = i + 1 == runs.len();
            let mut next = k;
            for rank in 0..world {
                let stripe = Stripe { rank, world, batch_size };
                for (taken, batch) in epoch.rank_batches(k, stripe, drop_last).enumerate() {
                    if batch.start >= len || (!last_run && taken == steps) {
                        break;
                    }
                    for read in &batch.reads[..batch.reads.len() - batch.padding] {
                        if read.position >= len {
                            continue;
                        }
                        prop_assert_eq!(read.draw, reference[read.position as usize]);
                        *seen.entry(read.position).or_default() += 1;
                    }
                    prop_assert!(batch.reads.len() <= batch_size);
                    next = batch.end.min(len);
                    if batch.end >= len {
                        break;
                    }
                }
            }
            k = next;
        }
        let g_last = runs.last().map(|r| (r.0 * r.1) as u64).unwrap_or(1);
        // Without drop_last everything up to the end is read once; with it, all but the tail.
        for p in 0..len {
            let n = seen.get(&p).copied().unwrap_or(0);
            prop_assert!(n <= 1, "position {} read {} times", p, n);
            if !drop_last {
                prop_assert_eq!(n, 1, "position {} lost", p);
            }
        }
        if drop_last {
            let read = seen.len() as u64;
            prop_assert!(len - read < g_last, "{} of {} read", read, len);
        }
    }

    /// Every prefix from a segment's start holds each source within one of its weight.
    #[test]
    fn prefixes_follow_the_weights(order in any_order()) {
        let epoch = order.epoch(0).unwrap();
        let total: u64 = order.weights().iter().sum();
        let mut counts = vec![0u64; order.sources().len()];
        let cap = epoch.len().unwrap_or(500).min(500);
        // Only the first phase keeps every source (without replacement, a finished source
        // leaves, and the rest are weighed among themselves).
        let first_out = order.sources().iter().enumerate()
            .filter(|(i, _)| order.weights()[*i] > 0)
            .map(|(i, s)| s.len() * total / order.weights()[i])
            .min().unwrap_or(0);
        let cap = if order.stop() == StopRule::AllExhaustedWithoutReplacement { cap.min(first_out) } else { cap };
        for (n, d) in epoch.draws(0).take(cap as usize).enumerate() {
            counts[d.source] += 1;
            let n = n as u64 + 1;
            for (i, &w) in order.weights().iter().enumerate() {
                let ideal = n as f64 * w as f64 / total as f64;
                prop_assert!((counts[i] as f64 - ideal).abs() < 1.0, "prefix {}: source {} has {} for {}", n, i, counts[i], ideal);
            }
        }
    }

    /// What each stop rule promises, over two epochs.
    #[test]
    fn stop_rules_keep_their_promises(order in any_order()) {
        for e in 0..2u64 {
            let epoch = order.epoch(e).unwrap();
            let Some(len) = epoch.len() else { continue };
            let draws: Vec<_> = epoch.draws(0).take(len.min(5000) as usize).collect();
            let mut per: HashMap<(usize, u64), u32> = HashMap::new();
            for d in &draws {
                *per.entry((d.source, d.sample)).or_default() += 1;
                prop_assert!(d.sample < order.sources()[d.source].len());
            }
            let weighted = |i: usize| order.weights()[i] > 0;
            match order.stop() {
                StopRule::FirstExhausted => {
                    prop_assert!(per.values().all(|&n| n == 1));
                    // Some source is read whole.
                    prop_assert!((0..order.sources().len()).filter(|&i| weighted(i)).any(|i|
                        (0..order.sources()[i].len()).all(|s| per.contains_key(&(i, s)))));
                }
                StopRule::AllExhausted => {
                    for i in (0..order.sources().len()).filter(|&i| weighted(i)) {
                        prop_assert!((0..order.sources()[i].len()).all(|s| per.contains_key(&(i, s))));
                    }
                }
                StopRule::AllExhaustedWithoutReplacement => {
                    prop_assert!(per.values().all(|&n| n == 1));
                    let expected: u64 = (0..order.sources().len()).filter(|&i| weighted(i)).map(|i| order.sources()[i].len()).sum();
                    prop_assert_eq!(len, expected);
                }
                StopRule::SamplesPerEpoch(n) => prop_assert_eq!(len, n),
                StopRule::CycleForever => {}
            }
            // Within a source-epoch, no sample twice.
            let mut by_epoch: HashMap<(usize, u64, u64), u32> = HashMap::new();
            for d in &draws {
                let n = order.sources()[d.source].len();
                *by_epoch.entry((d.source, d.read / n, d.sample)).or_default() += 1;
            }
            prop_assert!(by_epoch.values().all(|&c| c == 1));
        }
        // Reads carry across epochs when the rule says so: each source's reads over five
        // epochs run 0, 1, 2, ... without a gap or a repeat.
        if let StopRule::SamplesPerEpoch(n) = order.stop() {
            let a = order.epoch(0).unwrap().cursors(n);
            let b = order.epoch(1).unwrap().cursors(0);
            prop_assert_eq!(a, b);
            let mut reads: Vec<Vec<u64>> = vec![Vec::new(); order.sources().len()];
            let total: u64 = order.weights().iter().sum();
            let mut n = 0u64;
            for e in 0..5 {
                let epoch = order.epoch(e).unwrap();
                prop_assert_eq!(epoch.cursors(0), reads.iter().map(|r| r.len() as u64).collect::<Vec<_>>());
                for d in epoch.draws(0) {
                    reads[d.source].push(d.read);
                    // One interleave along the run: the weights hold across epochs too, however
                    // short an epoch is.
                    n += 1;
                    for (i, &w) in order.weights().iter().enumerate() {
                        let ideal = n as f64 * w as f64 / total as f64;
                        prop_assert!((reads[i].len() as f64 - ideal).abs() < 1.0);
                    }
                }
            }
            for r in reads {
                prop_assert!(r.iter().enumerate().all(|(i, &x)| x == i as u64));
            }
        }
    }

    /// A new segment at position k under other weights continues each source where it stood:
    /// over the two segments, no source's sample is read twice within a source-epoch.
    #[test]
    fn a_new_segment_continues_every_source(order in any_order(), k in 0u64..80, new_weights in prop::collection::vec(1u64..5, 3)) {
        let epoch = order.epoch(0).unwrap();
        let len = epoch.len().unwrap_or(200).min(200);
        let k = k.min(len);
        let before: Vec<_> = epoch.draws(0).take(k as usize).collect();
        let cursors = epoch.cursors(k);
        let m = order.sources().len();
        let stream_start = if let StopRule::SamplesPerEpoch(_) = order.stop() { k } else { k };
        let next = GlobalOrder::new(order.sources().to_vec(), new_weights[..m].to_vec(), order.stop(), order.seed())
            .unwrap()
            .with_segment(Segment { number: 1, epoch: 0, start: k, stream_start, bases: cursors, unit: 1 })
            .unwrap();
        let after_epoch = next.epoch(0).unwrap();
        let after_len = after_epoch.len().unwrap_or(k + 200).min(k + 200);
        let after: Vec<_> = after_epoch.draws(k).take((after_len.saturating_sub(k)) as usize).collect();
        let mut seen: HashMap<(usize, u64, u64), u32> = HashMap::new();
        for d in before.iter().chain(&after) {
            let n = order.sources()[d.source].len();
            *seen.entry((d.source, d.read / n, d.sample)).or_default() += 1;
        }
        prop_assert!(seen.values().all(|&c| c == 1));
        // Each source's reads go on from its cursor without a gap.
        let mut reads: Vec<Vec<u64>> = vec![Vec::new(); m];
        for d in before.iter().chain(&after) {
            reads[d.source].push(d.read);
        }
        for r in reads {
            prop_assert!(r.windows(2).all(|w| w[1] == w[0] + 1));
        }
    }

    /// Per-stream batching: every global batch from one source.
    #[test]
    fn per_stream_batches_come_from_one_source(order in any_order(), g in 1u64..9) {
        let order = order.clone()
            .with_segment(Segment { unit: g, ..order.segment().clone() })
            .unwrap();
        let epoch = order.epoch(0).unwrap();
        let len = epoch.len().unwrap_or(300).min(300);
        let draws: Vec<_> = epoch.draws(0).take(len as usize).collect();
        for batch in draws.chunks(g as usize) {
            // A batch holding a phase end (a source leaving) changes source once per source
            // that leaves in it.
            let changes = batch.windows(2).filter(|w| w[0].source != w[1].source).count();
            let leaving = if order.stop() == StopRule::AllExhaustedWithoutReplacement {
                order.sources().len() - 1
            } else {
                0
            };
            prop_assert!(changes <= leaving);
        }
        // Epochs of a fixed size that the global batch divides start whole batches too.
        if let StopRule::SamplesPerEpoch(n) = order.stop() && n % g == 0 {
            let second: Vec<_> = order.epoch(1).unwrap().draws(0).take(len as usize).collect();
            for batch in second.chunks(g as usize) {
                prop_assert!(batch.windows(2).all(|w| w[0].source == w[1].source));
            }
        }
        let _ = Batching::PerStream;
    }
}

#[test]
fn one_shuffled_source_matches_torchs_distributed_split() {
    // Rank r of W takes positions r, r + W, ... of each global batch, as DistributedSampler
    // takes indices r, r + W, ... of the epoch's order.
    let order = GlobalOrder::new(
        vec![SourceOrder::new(64, SourceKind::Shuffled, 3).unwrap()],
        vec![1],
        StopRule::FirstExhausted,
        5,
    )
    .unwrap();
    let epoch = order.epoch(0).unwrap();
    let all = positions(&order, 0, 64);
    for rank in 0..4 {
        let reads: Vec<u64> = epoch
            .rank_batches(
                0,
                Stripe {
                    rank,
                    world: 4,
                    batch_size: 4,
                },
                false,
            )
            .flat_map(|b| b.reads)
            .map(|r| r.position)
            .collect();
        let expected: Vec<u64> = (rank as u64..64).step_by(4).collect();
        assert_eq!(reads, expected);
    }
    assert_eq!(all.len(), 64);
}

#[test]
fn shard_lanes_stay_with_one_rank_when_the_world_divides_them() {
    let shards = layout(16 * 40, 10, 4);
    let order = GlobalOrder::new(
        vec![
            SourceOrder::new(
                640,
                SourceKind::ShardLocal {
                    shards,
                    lanes: 16,
                    window: 20,
                },
                1,
            )
            .unwrap(),
        ],
        vec![1],
        StopRule::FirstExhausted,
        0,
    )
    .unwrap();
    let epoch = order.epoch(0).unwrap();
    for world in [1usize, 2, 4, 8, 16] {
        let mut readers: HashMap<u64, Vec<usize>> = HashMap::new();
        for rank in 0..world {
            for batch in epoch.rank_batches(
                0,
                Stripe {
                    rank,
                    world,
                    batch_size: 8,
                },
                false,
            ) {
                for read in batch.reads {
                    assert!(!read.stray);
                    let chunk = read.draw.sample / 10;
                    let r = readers.entry(chunk).or_default();
                    if !r.contains(&rank) {
                        r.push(rank);
                    }
                }
            }
        }
        // A chunk straddles two lanes at most (lanes are cut at sample boundaries).
        assert!(readers.values().all(|r| r.len() <= 2), "world {world}");
        let shared = readers.values().filter(|r| r.len() > 1).count();
        assert!(shared <= 16, "world {world}: {shared} chunks shared");
    }
}

/// GETs a loader's ranks make for an epoch of chunks of `per_chunk` samples: each rank reads a
/// chunk whole when it reads at least half of it, and its samples one by one otherwise.
fn gets(order: &GlobalOrder, world: usize, per_chunk: u64) -> (usize, usize) {
    let epoch = order.epoch(0).unwrap();
    let (mut gets, mut strays) = (0, 0);
    for rank in 0..world {
        let mut reads: HashMap<u64, usize> = HashMap::new();
        for batch in epoch.rank_batches(
            0,
            Stripe {
                rank,
                world,
                batch_size: 32,
            },
            false,
        ) {
            for read in batch.reads {
                strays += usize::from(read.stray);
                *reads.entry(read.draw.sample / per_chunk).or_default() += 1;
            }
        }
        gets += reads
            .values()
            .map(|&n| if 2 * n as u64 >= per_chunk { 1 } else { n })
            .sum::<usize>();
    }
    (gets, strays)
}

#[test]
fn other_world_sizes_keep_most_reads_with_their_lanes() {
    // 16 lanes on world sizes that do not divide 16: a lane's reads go to the ranks its
    // share falls on, so most chunks are still read whole by one rank, and few reads stray
    // to even out the shares. (Measured on the S3 server: docs/benchmarks.md.)
    let order = GlobalOrder::new(
        vec![
            SourceOrder::new(
                7680,
                SourceKind::ShardLocal {
                    shards: layout(7680, 30, 8),
                    lanes: 16,
                    window: 60,
                },
                1,
            )
            .unwrap(),
        ],
        vec![1],
        StopRule::FirstExhausted,
        0,
    )
    .unwrap();
    let (ideal, _) = gets(&order, 8, 30);
    assert!(ideal <= 256 + 32, "8 ranks: {ideal} GETs for 256 chunks");
    // Equal shares of every global batch take some reads from other ranks' lanes (a lane
    // splits where a rank's share of the lanes ends): 2.3x (3 ranks) to 6x (12) the GETs of a
    // world size that divides the lanes, 11x with more ranks than lanes, where reading sample
    // by sample would make 30x as many. Measured here: 599, 854, 938, 1540, 2818 for 256.
    for (world, most) in [(3, 3), (5, 4), (6, 4), (12, 7), (24, 13)] {
        let (n, strays) = gets(&order, world, 30);
        println!(
            "world {world}: {n} GETs ({:.3} per sample), {strays} strays",
            n as f64 / 7680.0
        );
        assert!(n <= most * ideal, "world {world}: {n} GETs against {ideal}");
        assert!(
            strays * 50 < 7680,
            "world {world}: {strays} reads moved to even the shares"
        );
    }
}

#[test]
fn resume_at_a_far_position_is_instant_and_agrees() {
    let order = GlobalOrder::new(
        vec![
            SourceOrder::new(60_000_000, SourceKind::Shuffled, 1).unwrap(),
            SourceOrder::new(30_000_000, SourceKind::Shuffled, 2).unwrap(),
            SourceOrder::new(10_000_000, SourceKind::Sequential, 3).unwrap(),
        ],
        vec![6, 3, 1],
        StopRule::AllExhausted,
        9,
    )
    .unwrap();
    let epoch = order.epoch(0).unwrap();
    let k = 10_000_000u64;
    let far: Vec<_> = epoch.draws(k).take(10).collect();
    // Reading up to k and on gives the same reads (checked on a shorter walk for speed).
    let near: Vec<_> = epoch.draws(k - 1000).skip(1000).take(10).collect();
    assert_eq!(far, near);
    assert_eq!(far[0].read, epoch.cursors(k)[far[0].source]);
}
