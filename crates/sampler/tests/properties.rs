#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Properties every sampler promises, checked with proptest.

use std::collections::{HashMap, HashSet};

use loader_sampler::{
    BatchSampler, BlockShuffleSampler, DistributedSampler, RandomSampler, ReplacementSampler,
    Sampler, SamplerState, SequentialSampler, SubsetSampler, WeightedSampler,
};
use proptest::prelude::*;

fn epoch(s: &dyn Sampler, e: u64) -> Vec<usize> {
    s.epoch(e).collect()
}

/// Every sampler kind, configured from proptest's draws.
fn any_sampler() -> impl Strategy<Value = Box<dyn Sampler>> {
    (
        0usize..300,
        any::<u64>(),
        1usize..40,
        0usize..4,
        1usize..5,
        any::<bool>(),
    )
        .prop_map(|(n, seed, block, rank, world, flag)| -> Box<dyn Sampler> {
            match seed % 7 {
                0 => Box::new(SequentialSampler::new(n)),
                1 => Box::new(RandomSampler::new(n, seed).unwrap()),
                2 => Box::new(ReplacementSampler::new(n.max(1), n, seed).unwrap()),
                3 => Box::new(SubsetSampler::shuffled(
                    (0..n).rev().step_by(2).collect::<Vec<_>>(),
                    seed,
                )),
                4 => Box::new(BlockShuffleSampler::new(n, block, seed).unwrap()),
                5 => Box::new(
                    DistributedSampler::new(n.max(1), rank % world, world)
                        .shuffle(flag)
                        .seed(seed)
                        .drop_last(!flag)
                        .build()
                        .unwrap(),
                ),
                _ => {
                    let weights: Vec<f64> = (0..n.max(1)).map(|i| (i % 5) as f64 + 0.5).collect();
                    Box::new(WeightedSampler::new(weights, n, flag, seed).unwrap())
                }
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_permutation_holds_every_index_once(n in 0usize..2000, seed: u64, e in 0u64..100) {
        let mut order = epoch(&RandomSampler::new(n, seed).unwrap(), e);
        order.sort_unstable();
        prop_assert_eq!(order, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn block_shuffle_is_a_permutation(n in 0usize..2000, block in 1usize..100, seed: u64, e in 0u64..10) {
        let mut order = epoch(&BlockShuffleSampler::new(n, block, seed).unwrap(), e);
        order.sort_unstable();
        prop_assert_eq!(order, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn same_seed_and_epoch_same_order_other_epoch_other_order(n in 11usize..2000, seed: u64, e in 0u64..1000) {
        let a = RandomSampler::new(n, seed).unwrap();
        let b = RandomSampler::new(n, seed).unwrap();
        prop_assert_eq!(epoch(&a, e), epoch(&b, e));
        prop_assert_ne!(epoch(&a, e), epoch(&a, e + 1));
    }

    #[test]
    fn distributed_drop_last_splits_the_truncated_order(n in 0usize..500, world in 1usize..9, seed: u64, e in 0u64..5, shuffle: bool) {
        let ranks: Vec<Vec<usize>> = (0..world)
            .map(|r| epoch(&DistributedSampler::new(n, r, world).shuffle(shuffle).seed(seed).drop_last(true).build().unwrap(), e))
            .collect();
        let per_rank = n / world;
        let mut union = HashSet::new();
        for rank in &ranks {
            prop_assert_eq!(rank.len(), per_rank);
            for &i in rank {
                prop_assert!(union.insert(i), "index {} on two ranks", i);
            }
        }
        // The union is the first floor(N/W)*W of the epoch's (unsplit) order.
        let whole = DistributedSampler::new(n, 0, 1).shuffle(shuffle).seed(seed).build();
        let order = match whole { Ok(s) => epoch(&s, e), Err(_) => Vec::new() };
        let head: HashSet<usize> = order.into_iter().take(per_rank * world).collect();
        prop_assert_eq!(union, head);
    }

    #[test]
    fn distributed_padding_covers_everything_and_repeats_the_start(n in 1usize..500, world in 1usize..9, seed: u64, e in 0u64..5, shuffle: bool) {
        let order = epoch(&DistributedSampler::new(n, 0, 1).shuffle(shuffle).seed(seed).build().unwrap(), e);
        let per_rank = n.div_ceil(world);
        let mut counts: HashMap<usize, usize> = HashMap::new();
        let mut padded = vec![usize::MAX; per_rank * world];
        for r in 0..world {
            let rank = epoch(&DistributedSampler::new(n, r, world).shuffle(shuffle).seed(seed).build().unwrap(), e);
            prop_assert_eq!(rank.len(), per_rank);
            for (p, &i) in rank.iter().enumerate() {
                *counts.entry(i).or_default() += 1;
                padded[r + p * world] = i;
            }
        }
        prop_assert_eq!(counts.len(), n, "every index is covered");
        // Interleaving the ranks back gives the order followed by its own start.
        prop_assert_eq!(&padded[..n], &order[..]);
        for (j, &i) in padded[n..].iter().enumerate() {
            prop_assert_eq!(i, order[j % n]);
        }
    }

    #[test]
    fn batches_concatenate_to_the_order(sampler in any_sampler(), batch in 1usize..50, drop_last: bool, e in 0u64..3) {
        let order = epoch(&*sampler, e);
        let batches: Vec<Vec<usize>> = BatchSampler::new(&*sampler, batch, drop_last).epoch(e).collect();
        let expected_batches = if drop_last { order.len() / batch } else { order.len().div_ceil(batch) };
        prop_assert_eq!(batches.len(), expected_batches);
        prop_assert!(batches.iter().all(|b| !b.is_empty() && b.len() <= batch));
        if drop_last {
            prop_assert!(batches.iter().all(|b| b.len() == batch));
        }
        let flat: Vec<usize> = batches.concat();
        prop_assert_eq!(&flat[..], &order[..flat.len()]);
    }

    #[test]
    fn resume_at_any_position_is_the_uninterrupted_tail(sampler in any_sampler(), cut in 0usize..400, e in 0u64..3) {
        let order = epoch(&*sampler, e);
        let cut = cut.min(order.len());
        let mut first = sampler.epoch(e);
        let head: Vec<usize> = first.by_ref().take(cut).collect();
        let state = first.state();
        prop_assert_eq!(state, SamplerState { epoch: e, position: cut as u64 });
        // Through serde, as a checkpoint would go.
        let saved = serde_json::to_string(&state).unwrap();
        let restored: SamplerState = serde_json::from_str(&saved).unwrap();
        let tail: Vec<usize> = sampler.resume(restored).collect();
        prop_assert_eq!([head, tail].concat(), order);
        // And the next epoch, resumed from its start, is the one an uninterrupted run sees.
        let next: Vec<usize> = sampler.resume(SamplerState { epoch: e + 1, position: 0 }).collect();
        prop_assert_eq!(next, epoch(&*sampler, e + 1));
    }

    #[test]
    fn resumed_batches_finish_the_epoch(sampler in any_sampler(), batch in 1usize..20, cut in 0usize..300, drop_last: bool) {
        let batcher = BatchSampler::new(&*sampler, batch, drop_last);
        let all: Vec<usize> = batcher.epoch(0).flatten().collect();
        let mut it = batcher.epoch(0);
        let head: Vec<usize> = it.by_ref().take(cut / batch.max(1)).flatten().collect();
        let tail: Vec<usize> = batcher.resume(it.state()).flatten().collect();
        prop_assert_eq!([head, tail].concat(), all);
    }

    #[test]
    fn weighted_without_replacement_never_repeats_nor_draws_zero_weights(n in 1usize..300, seed: u64, e in 0u64..5) {
        let weights: Vec<f64> = (0..n).map(|i| if i % 3 == 0 { 0.0 } else { (i % 7) as f64 + 0.1 }).collect();
        let positive = weights.iter().filter(|w| **w > 0.0).count();
        let sampler = WeightedSampler::new(weights.clone(), positive, false, seed);
        let Ok(sampler) = sampler else { prop_assert_eq!(positive, 0); return Ok(()); };
        let drawn = epoch(&sampler, e);
        prop_assert_eq!(drawn.len(), positive);
        let unique: HashSet<usize> = drawn.iter().copied().collect();
        prop_assert_eq!(unique.len(), drawn.len());
        prop_assert!(drawn.iter().all(|&i| weights[i] > 0.0));
    }
}

/// Chi-square statistic of observed counts against probabilities proportional to `weights`.
fn chi_square(draws: &[usize], weights: &[f64]) -> f64 {
    let total: f64 = weights.iter().sum();
    let mut observed = vec![0f64; weights.len()];
    for &i in draws {
        observed[i] += 1.0;
    }
    observed
        .iter()
        .zip(weights)
        .filter(|(_, w)| **w > 0.0)
        .map(|(o, w)| {
            let expected = draws.len() as f64 * w / total;
            (o - expected).powi(2) / expected
        })
        .sum()
}

/// 99.9th percentile of chi-square with 9 degrees of freedom.
const CHI2_9DF_P999: f64 = 27.877;

#[test]
fn weighted_with_replacement_matches_the_weights() {
    let weights = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    for seed in [1u64, 2, 3, 42, 1234] {
        let sampler = WeightedSampler::new(weights.to_vec(), 50_000, true, seed).unwrap();
        let stat = chi_square(&epoch(&sampler, 0), &weights);
        assert!(stat < CHI2_9DF_P999, "seed {seed}: chi-square {stat:.1}");
    }
}

#[test]
fn the_chi_square_check_catches_a_uniform_sampler() {
    // The same check against a deliberately wrong sampler (uniform draws) must fail,
    // or the test above proves nothing.
    let weights = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    let uniform = ReplacementSampler::new(weights.len(), 50_000, 1).unwrap();
    let stat = chi_square(&epoch(&uniform, 0), &weights);
    assert!(
        stat > CHI2_9DF_P999,
        "a uniform sampler passed: chi-square {stat:.1}"
    );
}

#[test]
fn weighted_with_replacement_never_draws_zero_weights() {
    let weights = [0.0, 1.0, 0.0, 5.0, 0.0];
    let sampler = WeightedSampler::new(weights.to_vec(), 10_000, true, 9).unwrap();
    assert!(epoch(&sampler, 0).iter().all(|&i| i == 1 || i == 3));
}

#[test]
fn weighted_refuses_bad_weights_clearly() {
    for (weights, needle) in [
        (vec![1.0, -1.0], "weight 1 is -1"),
        (vec![1.0, f64::NAN], "weight 1 is NaN"),
        (vec![0.0, 0.0], "at least one must be positive"),
        (vec![], "at least one must be positive"),
    ] {
        let err = WeightedSampler::new(weights.clone(), 1, true, 0).unwrap_err();
        assert!(err.to_string().contains(needle), "{weights:?}: {err}");
    }
    let err = WeightedSampler::new(vec![1.0, 0.0, 2.0], 3, false, 0).unwrap_err();
    assert!(err.to_string().contains("without replacement"), "{err}");
}

#[test]
fn a_billion_draws_with_replacement_allocate_nothing_up_front() {
    let sampler = ReplacementSampler::new(1_000_000_000, 1_000_000_000, 5).unwrap();
    assert_eq!(sampler.len(), 1_000_000_000);
    // Resuming near the end is immediate: each draw is a function of its position.
    let tail: Vec<usize> = sampler
        .resume(SamplerState {
            epoch: 3,
            position: 999_999_990,
        })
        .collect();
    assert_eq!(tail.len(), 10);
    assert!(tail.iter().all(|&i| i < 1_000_000_000));
}
