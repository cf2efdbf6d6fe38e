//! Samplers for a caller's own order: PyTorch's classic index samplers, each a pure function
//! of (seed, epoch), resumable at any position, one per file.
//!
//! A loader does not read by these: it reads by the [`GlobalOrder`](crate::GlobalOrder),
//! which is the same on any world size and resumes elastically. Hand one of these to
//! `DataLoaderBuilder::sampler` when you need an order of your own (a subset, weights per
//! sample, PyTorch's `DistributedSampler` split); `batch` cuts any of them into batches.

mod batch;
mod block;
mod distributed;
mod random;
mod sequential;
mod shard;
mod subset;
mod weighted;

pub use batch::{BatchIter, BatchSampler};
pub use block::BlockShuffleSampler;
pub use distributed::{DistributedBuilder, DistributedSampler};
pub use random::{RandomSampler, ReplacementSampler};
pub use sequential::SequentialSampler;
pub use shard::{ShardSampler, ShardSamplerBuilder};
pub use subset::SubsetSampler;
pub use weighted::WeightedSampler;
