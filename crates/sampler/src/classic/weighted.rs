//! Weighted draws, with replacement (alias method) or without (weighted random keys).

use std::sync::Arc;

use crate::rng::{bounded, counter_u64, unit_f64};
use crate::{Indices, Sampler, SamplerError};

/// `num_samples` indices drawn with probability proportional to their weight: PyTorch's
/// WeightedRandomSampler.
///
/// With replacement, each draw is a pure function of `(seed, epoch, position)` through a
/// Walker/Vose alias table, so no epoch is materialised. Without replacement, an epoch is
/// the `num_samples` indices with the smallest keys `-ln(u) / w` (Efraimidis-Spirakis),
/// which never draws an index twice nor one of weight zero.
#[derive(Debug, Clone)]
pub struct WeightedSampler {
    weights: Arc<[f64]>,
    num_samples: usize,
    replacement: bool,
    seed: u64,
    /// Alias table for draws with replacement: (probability of keeping column i, alias).
    alias: Arc<[(f64, u32)]>,
}

impl WeightedSampler {
    /// Draw `num_samples` per epoch. Weights must be finite and non-negative with a
    /// positive sum; without replacement, `num_samples` may not exceed the count of
    /// positive weights.
    pub fn new(
        weights: impl Into<Arc<[f64]>>,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<Self, SamplerError> {
        let weights: Arc<[f64]> = weights.into();
        if u32::try_from(weights.len()).is_err() {
            return Err(SamplerError::TooLarge {
                what: "the weights",
                len: weights.len() as u64,
                hint: "",
            });
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(SamplerError::BadWeight {
                index: i,
                weight: *w,
            });
        }
        let total: f64 = weights.iter().sum();
        if total.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !total.is_finite() {
            return Err(SamplerError::NoPositiveWeight(total));
        }
        let positive = weights.iter().filter(|w| **w > 0.0).count();
        if !replacement && num_samples > positive {
            return Err(SamplerError::TooFewWeights {
                wanted: num_samples,
                positive,
            });
        }
        let alias = if replacement {
            alias_table(&weights, total)
        } else {
            Arc::from([])
        };
        Ok(Self {
            weights,
            num_samples,
            replacement,
            seed,
            alias,
        })
    }
}

/// Vose's alias method: O(n) to build, O(1) per draw.
fn alias_table(weights: &[f64], total: f64) -> Arc<[(f64, u32)]> {
    let n = weights.len();
    let mut prob: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
    let mut alias = vec![0u32; n];
    let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| prob[i] < 1.0);
    while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
        alias[s] = l as u32;
        prob[l] -= 1.0 - prob[s];
        if prob[l] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // Leftovers are 1 up to rounding; a zero weight must stay unreachable, so only
    // columns that still hold mass are clamped to certainty.
    for i in large.into_iter().chain(small) {
        if weights[i] > 0.0 {
            prob[i] = 1.0;
        }
    }
    prob.into_iter().zip(alias).collect()
}

impl Sampler for WeightedSampler {
    fn len(&self) -> usize {
        self.num_samples
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        let position = position.min(self.num_samples);
        if self.replacement {
            let (seed, alias) = (self.seed, Arc::clone(&self.alias));
            let n = alias.len() as u64;
            return Box::new((position..self.num_samples).map(move |i| {
                let column_bits = counter_u64(seed, epoch, 2 * i as u64);
                let coin = unit_f64(counter_u64(seed, epoch, 2 * i as u64 + 1));
                let column = bounded(column_bits, n) as usize;
                let (keep, other) = alias[column];
                if coin < keep { column } else { other as usize }
            }));
        }
        let mut keyed: Vec<(f64, u32)> = self
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0.0)
            .map(|(i, w)| {
                let u = unit_f64(counter_u64(self.seed, epoch, i as u64)).max(f64::MIN_POSITIVE);
                (-u.ln() / w, i as u32)
            })
            .collect();
        let k = self.num_samples;
        if k < keyed.len() {
            keyed.select_nth_unstable_by(k, |a, b| a.0.total_cmp(&b.0));
            keyed.truncate(k);
        }
        keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        Box::new(keyed.into_iter().skip(position).map(|(_, i)| i as usize))
    }
}
