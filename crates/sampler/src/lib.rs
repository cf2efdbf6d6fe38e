//! The order in which a run's samples are read, epoch by epoch.
//!
//! [`GlobalOrder`] is what a loader reads by: one order of every source of a run (a
//! weighted mixture, shards read in lanes), a pure function of the seed and the mixture,
//! the same on any world size, cut into global batches that ranks share, so a run resumes
//! exactly once on another number of ranks. Every order is computed from `(seed, epoch)`
//! alone, with no global RNG: the same run gives the same order on any machine.
//!
//! ```
//! use loader_sampler::{GlobalOrder, SourceKind, SourceOrder, StopRule, Stripe};
//!
//! // Two sources mixed 3:1, each shuffled, seed 7.
//! let order = GlobalOrder::new(
//!     vec![
//!         SourceOrder::new(30, SourceKind::Shuffled, 0).unwrap(),
//!         SourceOrder::new(10, SourceKind::Shuffled, 1).unwrap(),
//!     ],
//!     vec![3, 1],
//!     StopRule::FirstExhausted,
//!     7,
//! )
//! .unwrap();
//! let epoch = order.epoch(0).unwrap();
//! // Global batches of 8: 2 ranks of 4, or 4 ranks of 2, read the same samples, each once.
//! let read = |world, batch_size| {
//!     let mut all: Vec<(usize, u64)> = (0..world)
//!         .flat_map(|rank| epoch.rank_batches(0, Stripe { rank, world, batch_size }, false))
//!         .flat_map(|batch| batch.reads)
//!         .map(|read| (read.draw.source, read.draw.sample))
//!         .collect();
//!     all.sort();
//!     all
//! };
//! let two = read(2, 4);
//! assert_eq!(two, read(4, 2));
//! assert!(two.windows(2).all(|w| w[0] != w[1]), "each sample once");
//! ```
//!
//! # Rooms
//!
//! `global/` is the order a loader reads by (see its module doc for its rooms). `classic/`
//! holds PyTorch's classic index samplers (`sequential`, `random`, `subset`, `weighted`,
//! `distributed`, `block`, `shard`, and `batch` to cut any of them into batches), one per
//! file, for a caller's own order: `DataLoaderBuilder::sampler` takes any [`Sampler`].
//! `rng` is the seeded stream they all share.
//!
//! ```
//! use loader_sampler::{BatchSampler, DistributedSampler, RandomSampler, Sampler, SamplerState};
//!
//! // A shuffled epoch of 10 items, a new order each epoch.
//! let random = RandomSampler::new(10, 42).unwrap();
//! let order: Vec<usize> = random.epoch(0).collect();
//! assert_eq!(order.len(), 10);
//! assert_ne!(order, random.epoch(1).collect::<Vec<_>>());
//!
//! // Stop after 4 items, checkpoint, resume: nothing lost or repeated.
//! let mut it = random.epoch(0);
//! let head: Vec<usize> = it.by_ref().take(4).collect();
//! let state: SamplerState = it.state();
//! let tail: Vec<usize> = random.resume(state).collect();
//! assert_eq!([head, tail].concat(), order);
//!
//! // Rank 1 of 4 with shuffling, as PyTorch's DistributedSampler splits (padded).
//! let rank1 = DistributedSampler::new(10, 1, 4).shuffle(true).seed(42).build().unwrap();
//! assert_eq!(rank1.len(), 3);
//!
//! // Batches of 4 over any sampler.
//! let batches: Vec<Vec<usize>> = BatchSampler::new(random, 4, false).epoch(0).collect();
//! assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

mod classic;
mod global;
mod rng;

pub use classic::{
    BatchIter, BatchSampler, BlockShuffleSampler, DistributedBuilder, DistributedSampler,
    RandomSampler, ReplacementSampler, SequentialSampler, ShardSampler, ShardSamplerBuilder,
    SubsetSampler, WeightedSampler,
};
pub use global::{
    Batching, DEFAULT_LANES, DEFAULT_WINDOW_CHUNKS, Draw, Draws, EpochOrder, GlobalOrder,
    Interleave, Permutation, RankBatch, RankBatches, RankRead, Segment, Share, SourceEpoch,
    SourceKind, SourceOrder, StopRule, Stripe,
};

/// A sampler's configuration was not acceptable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// A size that must be at least 1 is 0.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// More indices (or blocks, weights) than an epoch's order can hold.
    #[error("{what} holds at most 2^32 entries, not {len}{hint}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        len: u64,
        /// What to do instead, if anything.
        hint: &'static str,
    },
    /// A rank outside `0..world_size`.
    #[error("rank {rank} is out of range for world size {world_size} (ranks are 0..{world_size})")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// Nothing to sample from.
    #[error("cannot {0} an empty dataset")]
    Empty(&'static str),
    /// A weight is negative or not finite.
    #[error("weight {index} is {weight}; weights must be finite and not negative")]
    BadWeight {
        /// Its index.
        index: usize,
        /// Its value.
        weight: f64,
    },
    /// No weight is positive.
    #[error("the weights sum to {0}; at least one must be positive")]
    NoPositiveWeight(f64),
    /// More draws without replacement than positive weights.
    #[error("cannot draw {wanted} samples without replacement from {positive} positive weights")]
    TooFewWeights {
        /// Draws asked for.
        wanted: usize,
        /// Positive weights.
        positive: usize,
    },
    /// A mixture of no source.
    #[error("a mixture needs at least one source")]
    NoSource,
    /// Weights for another number of sources.
    #[error("{weights} weights for {sources} sources: give one weight per source")]
    WeightCount {
        /// Weights given.
        weights: usize,
        /// Sources.
        sources: usize,
    },
    /// A segment of another number of sources than the order's.
    #[error("a segment of {segment} sources for an order of {sources}")]
    SegmentSources {
        /// Sources the segment counts reads of.
        segment: usize,
        /// Sources of the order.
        sources: usize,
    },
    /// A segment starting past the end of its epoch.
    #[error("a segment starting at position {start} of epochs of {samples} samples")]
    SegmentStart {
        /// Its start.
        start: u64,
        /// Positions per epoch.
        samples: u64,
    },
    /// Shard chunks that do not hold the source's samples.
    #[error("the shards' chunks hold {chunks} samples, not the source's {samples}")]
    ChunkSamples {
        /// Samples in the chunks.
        chunks: u64,
        /// Samples in the source.
        samples: u64,
    },
    /// A count over what the order can hold.
    #[error("{what}: {len}, more than {most}{hint}")]
    TooMany {
        /// What is too many.
        what: &'static str,
        /// How many.
        len: u64,
        /// How many at most.
        most: u64,
        /// What to do instead, if anything.
        hint: &'static str,
    },
    /// Shard-local order for more ranks than the data allows.
    #[error("{samples} samples cannot give each of {ranks} ranks a sample with drop_last")]
    TooFewSamples {
        /// Samples in all shards.
        samples: usize,
        /// Ranks.
        ranks: usize,
    },
}

/// Where an epoch stands: enough to resume it exactly. Serialise it with any serde format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SamplerState {
    /// The epoch being read.
    pub epoch: u64,
    /// How many indices of that epoch were produced already.
    pub position: u64,
}

/// The indices of one epoch from some position on; owns everything it needs.
pub type Indices = Box<dyn Iterator<Item = usize> + Send>;

/// Produces the index order of each epoch, deterministically from its configuration.
pub trait Sampler: Send + Sync + fmt::Debug {
    /// Indices per epoch.
    fn len(&self) -> usize;

    /// Whether an epoch is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices of `epoch` from `position` on (skipping is cheap for every sampler here).
    fn indices_from(&self, epoch: u64, position: usize) -> Indices;

    /// All indices of `epoch`, with their position tracked for [`EpochIter::state`].
    fn epoch(&self, epoch: u64) -> EpochIter {
        self.resume(SamplerState { epoch, position: 0 })
    }

    /// The indices `state`'s epoch has not produced yet.
    fn resume(&self, state: SamplerState) -> EpochIter {
        let position = usize::try_from(state.position)
            .unwrap_or(usize::MAX)
            .min(self.len());
        EpochIter {
            inner: self.indices_from(state.epoch, position),
            state: SamplerState {
                epoch: state.epoch,
                position: position as u64,
            },
        }
    }
}

macro_rules! forward_sampler {
    ($($ty:ty),*) => {$(
        impl<S: Sampler + ?Sized> Sampler for $ty {
            fn len(&self) -> usize {
                (**self).len()
            }
            fn indices_from(&self, epoch: u64, position: usize) -> Indices {
                (**self).indices_from(epoch, position)
            }
        }
    )*};
}

forward_sampler!(std::sync::Arc<S>, Box<S>, &S);

/// An epoch's indices that knows how far it got.
pub struct EpochIter {
    inner: Indices,
    state: SamplerState,
}

impl EpochIter {
    /// The state to save: resuming from it yields exactly what this iterator has not.
    pub fn state(&self) -> SamplerState {
        self.state
    }
}

impl fmt::Debug for EpochIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpochIter")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Iterator for EpochIter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let next = self.inner.next()?;
        self.state.position += 1;
        Some(next)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}
