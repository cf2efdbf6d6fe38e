//! One rank's share of each epoch: PyTorch's DistributedSampler semantics.

use crate::rng::{epoch_rng, permutation};
use crate::{Indices, Sampler, SamplerError};

/// Rank `rank` of `world_size` takes the interleaved slice `order[rank], order[rank + W],
/// ...` of the epoch's order (shuffled from `(seed, epoch)`, or sequential). So every
/// rank has the same length, the order is first either padded by repeating its start up
/// to a multiple of `world_size`, or with `drop_last` cut to `floor(N / W) * W`. This
/// `drop_last` is the sampler's own, not the batch sampler's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedSampler {
    dataset_len: usize,
    rank: usize,
    world_size: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

/// Options of a [`DistributedSampler`]; `shuffle` defaults to true, as in PyTorch.
#[derive(Debug, Clone, Copy)]
pub struct DistributedBuilder {
    sampler: DistributedSampler,
}

impl DistributedBuilder {
    /// Shuffle each epoch (default true).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.sampler.shuffle = shuffle;
        self
    }

    /// Seed of the shuffle; every rank must use the same one.
    pub fn seed(mut self, seed: u64) -> Self {
        self.sampler.seed = seed;
        self
    }

    /// Cut the tail instead of padding.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.sampler.drop_last = drop_last;
        self
    }

    /// Check and build.
    pub fn build(self) -> Result<DistributedSampler, SamplerError> {
        let s = self.sampler;
        check_rank(s.rank, s.world_size)?;
        if s.shuffle && u32::try_from(s.dataset_len).is_err() {
            return Err(SamplerError::TooLarge {
                what: "a shuffled epoch",
                len: s.dataset_len as u64,
                hint: "",
            });
        }
        if !s.drop_last && s.dataset_len == 0 {
            return Err(SamplerError::Empty("pad to the world size"));
        }
        Ok(s)
    }
}

impl DistributedSampler {
    /// Start building rank `rank` of `world_size` over `dataset_len` indices.
    #[allow(clippy::new_ret_no_self)] // a builder, since there are several options
    pub fn new(dataset_len: usize, rank: usize, world_size: usize) -> DistributedBuilder {
        DistributedBuilder {
            sampler: DistributedSampler {
                dataset_len,
                rank,
                world_size,
                shuffle: true,
                seed: 0,
                drop_last: false,
            },
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The epoch's full order before it is split across ranks (length N).
    fn order(&self, epoch: u64) -> Vec<u32> {
        if self.shuffle {
            permutation(self.dataset_len, &mut epoch_rng(self.seed, epoch))
        } else {
            (0..self.dataset_len as u32).collect()
        }
    }
}

/// A rank and world size that make sense: at least one rank, and the rank among them.
pub(crate) fn check_rank(rank: usize, world_size: usize) -> Result<(), SamplerError> {
    if world_size == 0 {
        return Err(SamplerError::Zero("the world size"));
    }
    if rank >= world_size {
        return Err(SamplerError::RankOutOfRange { rank, world_size });
    }
    Ok(())
}

impl Sampler for DistributedSampler {
    fn len(&self) -> usize {
        if self.drop_last {
            self.dataset_len / self.world_size
        } else {
            self.dataset_len.div_ceil(self.world_size)
        }
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        let order = self.order(epoch);
        let (rank, world, len) = (self.rank, self.world_size, self.len());
        // Position p of this rank is slot rank + p*W of the padded order; padding repeats
        // the order from its start (cycling, if the dataset is smaller than the world).
        Box::new(
            (position.min(len)..len).map(move |p| order[(rank + p * world) % order.len()] as usize),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_rank_outside_the_world() {
        assert!(DistributedSampler::new(10, 2, 2).build().is_err());
        assert!(DistributedSampler::new(10, 0, 0).build().is_err());
    }
}
