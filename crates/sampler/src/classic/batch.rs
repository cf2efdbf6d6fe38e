//! Batches of indices over any sampler.

use crate::{EpochIter, Sampler, SamplerState};

/// Groups a sampler's indices into batches of `batch_size`; the last, short batch is
/// kept unless `drop_last`. The batches of an epoch concatenate to the sampler's order.
#[derive(Debug, Clone)]
pub struct BatchSampler<S> {
    sampler: S,
    batch_size: usize,
    drop_last: bool,
}

impl<S: Sampler> BatchSampler<S> {
    /// Batches of `batch_size` (0 is taken as 1) over `sampler`.
    pub fn new(sampler: S, batch_size: usize, drop_last: bool) -> Self {
        Self {
            sampler,
            batch_size: batch_size.max(1),
            drop_last,
        }
    }

    /// The underlying sampler.
    pub fn sampler(&self) -> &S {
        &self.sampler
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        if self.drop_last {
            self.sampler.len() / self.batch_size
        } else {
            self.sampler.len().div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches of `epoch`.
    pub fn epoch(&self, epoch: u64) -> BatchIter {
        self.resume(SamplerState { epoch, position: 0 })
    }

    /// The batches not yet produced; `state.position` counts indices (as
    /// [`BatchIter::state`] reports them), so it may point inside a batch.
    pub fn resume(&self, state: SamplerState) -> BatchIter {
        let limit = self.len() * self.batch_size;
        BatchIter {
            indices: self.sampler.resume(state),
            batch_size: self.batch_size,
            limit: limit.min(self.sampler.len()) as u64,
        }
    }
}

/// An epoch's batches, with the index-level state to resume from.
#[derive(Debug)]
pub struct BatchIter {
    indices: EpochIter,
    batch_size: usize,
    /// Indices of the epoch that can end up in a batch (the tail is cut with drop_last).
    limit: u64,
}

impl BatchIter {
    /// Where the epoch stands, in indices produced.
    pub fn state(&self) -> SamplerState {
        self.indices.state()
    }
}

impl Iterator for BatchIter {
    type Item = Vec<usize>;

    fn next(&mut self) -> Option<Vec<usize>> {
        let position = self.indices.state().position;
        let left = self.limit.saturating_sub(position) as usize;
        // Batches stay aligned to the epoch: after resuming inside a batch, the first one
        // is that batch's remainder. The short tail is already cut by `limit` under drop_last.
        let to_boundary = self.batch_size - (position % self.batch_size as u64) as usize;
        let want = to_boundary.min(left);
        let batch: Vec<usize> = self.indices.by_ref().take(want).collect();
        (!batch.is_empty()).then_some(batch)
    }
}
