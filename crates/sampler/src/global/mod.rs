//! The global order: one order of a run's samples across its sources, the same whatever the
//! world size, cut into global batches that ranks share. `permute` (random-access
//! permutations), `interleave` (which source each position reads), `source` (each source's
//! own order, in lanes for shards), `order` (epochs, stop rules, segments), `stripe` (ranks'
//! shares of a global batch).

mod interleave;
mod order;
mod permute;
mod source;
mod stripe;

pub use interleave::Interleave;
pub use order::{
    Batching, Draw, Draws, EpochOrder, GlobalOrder, RankBatch, RankBatches, RankRead, Segment,
    StopRule,
};
pub use permute::Permutation;
pub use source::{DEFAULT_LANES, DEFAULT_WINDOW_CHUNKS, SourceEpoch, SourceKind, SourceOrder};
pub use stripe::{Share, Stripe};
