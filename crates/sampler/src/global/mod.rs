//! The global order: one order of a run's samples across its sources, the same whatever the
//! world size, cut into global batches that ranks share. `permute` (random-access
//! permutations), `interleave` (which source each position reads), `source` (each source's
//! own order, in lanes for shards), `order` (epochs, stop rules, segments, reads), `stripe`
//! (ranks' shares of a global batch, and a rank's batches of an epoch).

mod interleave;
mod order;
mod permute;
mod source;
mod stripe;

pub use interleave::Interleave;
pub use order::{Batching, Draw, Draws, EpochOrder, GlobalOrder, Segment, StopRule};
pub use permute::Permutation;
pub use source::{DEFAULT_LANES, DEFAULT_WINDOW_CHUNKS, SourceEpoch, SourceKind, SourceOrder};
pub use stripe::{RankBatch, RankBatches, RankRead, Share, Stripe};
