//! `0, 1, 2, ...`: PyTorch's SequentialSampler.

use crate::{Indices, Sampler};

/// Every index in order, the same every epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequentialSampler {
    len: usize,
}

impl SequentialSampler {
    /// Over `0..len`.
    pub fn new(len: usize) -> Self {
        Self { len }
    }
}

impl Sampler for SequentialSampler {
    fn len(&self) -> usize {
        self.len
    }

    fn indices_from(&self, _epoch: u64, position: usize) -> Indices {
        Box::new(position.min(self.len)..self.len)
    }
}
