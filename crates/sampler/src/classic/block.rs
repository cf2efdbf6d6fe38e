//! Block shuffle: shuffle blocks of consecutive indices, then the indices inside a block.

use crate::rng::{epoch_rng, mix, permutation, shuffle};
use crate::{Indices, Sampler, SamplerError};

/// Shuffles blocks of `block_size` consecutive indices, then the indices within each
/// block, every epoch from `(seed, epoch)`.
///
/// Use it when neighbouring indices live together, as in tar shards or record files read
/// with range requests: a reader then works through one region at a time (mostly
/// sequential reads, a small cache suffices) while the order is still well mixed at the
/// scale of an epoch. The price is weaker local mixing: a batch holds items from only a
/// few blocks, so pick a block much smaller than an epoch and, if needed, a shuffle buffer
/// downstream. Only the block order is held in memory (one `u32` per block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockShuffleSampler {
    len: usize,
    block_size: usize,
    seed: u64,
}

impl BlockShuffleSampler {
    /// Over `0..len` in blocks of `block_size`.
    pub fn new(len: usize, block_size: usize, seed: u64) -> Result<Self, SamplerError> {
        if block_size == 0 {
            return Err(SamplerError::Zero("the block size"));
        }
        if u32::try_from(len.div_ceil(block_size)).is_err() {
            return Err(SamplerError::TooLarge {
                what: "the block order",
                len: len.div_ceil(block_size) as u64,
                hint: "; use larger blocks",
            });
        }
        Ok(Self {
            len,
            block_size,
            seed,
        })
    }

    fn block(&self, epoch: u64, block: usize) -> Vec<usize> {
        let start = block * self.block_size;
        let mut items: Vec<usize> = (start..(start + self.block_size).min(self.len)).collect();
        shuffle(
            &mut items,
            &mut epoch_rng(mix(self.seed ^ block as u64), epoch),
        );
        items
    }
}

impl Sampler for BlockShuffleSampler {
    fn len(&self) -> usize {
        self.len
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        let blocks = permutation(
            self.len.div_ceil(self.block_size),
            &mut epoch_rng(self.seed, epoch),
        );
        // Find the block holding `position`: blocks are full-sized except the last one,
        // which may sit anywhere in the shuffled order.
        let mut skip = position.min(self.len);
        let mut first = blocks.len();
        for (i, &b) in blocks.iter().enumerate() {
            let size = self.block_size.min(self.len - b as usize * self.block_size);
            if skip < size {
                first = i;
                break;
            }
            skip -= size;
        }
        let this = *self;
        Box::new(
            blocks
                .into_iter()
                .skip(first)
                .flat_map(move |b| this.block(epoch, b as usize))
                .skip(skip),
        )
    }
}
