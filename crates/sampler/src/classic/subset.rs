//! A given list of indices, in order or shuffled per epoch.

use std::sync::Arc;

use crate::rng::{epoch_rng, shuffle};
use crate::{Indices, Sampler};

/// The given indices (a train/validation split, say), in their order or shuffled per
/// epoch from `(seed, epoch)`: PyTorch's SubsetRandomSampler when shuffled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsetSampler {
    indices: Arc<[usize]>,
    shuffle: bool,
    seed: u64,
}

impl SubsetSampler {
    /// The indices in the order given.
    pub fn new(indices: impl Into<Arc<[usize]>>) -> Self {
        Self {
            indices: indices.into(),
            shuffle: false,
            seed: 0,
        }
    }

    /// The indices shuffled per epoch.
    pub fn shuffled(indices: impl Into<Arc<[usize]>>, seed: u64) -> Self {
        Self {
            indices: indices.into(),
            shuffle: true,
            seed,
        }
    }
}

impl Sampler for SubsetSampler {
    fn len(&self) -> usize {
        self.indices.len()
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        let mut order: Vec<usize> = self.indices.to_vec();
        if self.shuffle {
            shuffle(&mut order, &mut epoch_rng(self.seed, epoch));
        }
        Box::new(order.into_iter().skip(position))
    }
}
