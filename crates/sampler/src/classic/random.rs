//! Random order: a fresh permutation per epoch, or draws with replacement.

use std::sync::Arc;

use crate::rng::{bounded, counter_u64, epoch_rng, permutation};
use crate::{Indices, Sampler, SamplerError};

/// A random permutation of `0..len` per epoch, seeded by `(seed, epoch)`: PyTorch's
/// RandomSampler without replacement. Holds one `u32` per index while an epoch is read
/// (40 MB for 10 million), so `len` must fit in a `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomSampler {
    len: usize,
    seed: u64,
}

impl RandomSampler {
    /// Over `0..len`.
    pub fn new(len: usize, seed: u64) -> Result<Self, SamplerError> {
        if u32::try_from(len).is_err() {
            return Err(SamplerError::TooLarge {
                what: "a random permutation",
                len: len as u64,
                hint: "; use BlockShuffleSampler",
            });
        }
        Ok(Self { len, seed })
    }

    /// The whole order of `epoch`.
    pub fn order(&self, epoch: u64) -> Vec<u32> {
        permutation(self.len, &mut epoch_rng(self.seed, epoch))
    }
}

/// Walks a shared permutation from a position on.
pub(crate) fn walk(order: Arc<[u32]>, position: usize) -> Indices {
    Box::new((position.min(order.len())..order.len()).map(move |i| order[i] as usize))
}

impl Sampler for RandomSampler {
    fn len(&self) -> usize {
        self.len
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        walk(self.order(epoch).into(), position)
    }
}

/// `num_samples` uniform draws from `0..len` with replacement. Each draw is a pure
/// function of `(seed, epoch, position)`, so nothing is materialised: a billion draws
/// cost no memory, and resuming anywhere is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplacementSampler {
    /// Draws come from `0..population`.
    population: usize,
    num_samples: usize,
    seed: u64,
}

impl ReplacementSampler {
    /// Draw `num_samples` per epoch from `0..len`.
    pub fn new(len: usize, num_samples: usize, seed: u64) -> Result<Self, SamplerError> {
        if len == 0 && num_samples > 0 {
            return Err(SamplerError::Empty("draw samples from"));
        }
        Ok(Self {
            population: len,
            num_samples,
            seed,
        })
    }
}

impl Sampler for ReplacementSampler {
    fn len(&self) -> usize {
        self.num_samples
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        let (seed, n) = (self.seed, self.population as u64);
        Box::new(
            (position.min(self.num_samples)..self.num_samples)
                .map(move |i| bounded(counter_u64(seed, epoch, i as u64), n) as usize),
        )
    }
}
