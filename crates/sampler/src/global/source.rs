//! One source's order: which of its samples its `t`-th read of a source-epoch is.

use std::ops::Range;
use std::sync::Arc;

use super::permute::Permutation;
use crate::SamplerError;
use crate::rng::mix;

/// The fewest lanes a loader gives a shard-local order (it takes 16 and the starting world
/// size's least common multiple): world sizes that divide them give each rank lanes of its
/// own, so each chunk is read by one rank.
pub const DEFAULT_LANES: u32 = 16;
/// A lane's shuffle window, at least, in chunks' worth of samples: a rank reading 2 lanes
/// mixes about 8 chunks, as one reader did before lanes (a loader gives a rank that reads one
/// lane a window of 8).
pub const DEFAULT_WINDOW_CHUNKS: usize = 4;

/// How a source orders its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// In index order every source-epoch.
    Sequential,
    /// A fresh random permutation every source-epoch (a ranged read per sample for shards).
    Shuffled,
    /// Shard-local: the shards in random order and each shard's chunks in random order,
    /// dealt into `lanes` contiguous pieces; read a sample of each lane in turn, each lane
    /// shuffled within windows of `window` samples. A rank whose lanes are its own reads each
    /// chunk with one request and holds a few chunks per lane.
    ShardLocal {
        /// Each shard's chunks, as ranges of the source's sample indices, shard by shard.
        shards: Arc<[Vec<Range<usize>>]>,
        /// Pieces the sequence is dealt into.
        lanes: u32,
        /// Samples shuffled together within a lane.
        window: usize,
    },
}

/// One source of a global order: its size, its kind of order, and its identity (its
/// samples' fingerprint), which seeds its permutations so that they do not change when other
/// sources join or leave a mixture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOrder {
    len: u64,
    kind: SourceKind,
    identity: u64,
}

impl SourceOrder {
    /// A source of `len` samples ordered as `kind`, seeded by `identity` as well as the run's
    /// seed (give a fingerprint of its samples).
    pub fn new(len: u64, kind: SourceKind, identity: u64) -> Result<Self, SamplerError> {
        if len == 0 {
            return Err(SamplerError::Empty("order"));
        }
        if let SourceKind::ShardLocal {
            shards,
            lanes,
            window,
        } = &kind
        {
            if *lanes == 0 {
                return Err(SamplerError::Zero("the lane count"));
            }
            if *window == 0 {
                return Err(SamplerError::Zero("the shuffle window"));
            }
            let total: usize = shards.iter().flatten().map(|c| c.len()).sum();
            if total as u64 != len {
                return Err(SamplerError::ChunkSamples {
                    chunks: total as u64,
                    samples: len,
                });
            }
        }
        Ok(Self {
            len,
            kind,
            identity,
        })
    }

    /// Samples in the source.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has none (never, once built).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its kind of order.
    pub fn kind(&self) -> &SourceKind {
        &self.kind
    }

    /// What seeds its permutations besides the run's seed.
    pub fn identity(&self) -> u64 {
        self.identity
    }

    /// The rank, of `world`, whose lanes read `slot` (a read's place in its source-epoch):
    /// where a rank's share of a global batch takes it from, if the shares allow. A world
    /// size that divides the lane count gives each rank whole lanes (`slot % world`, which
    /// also evens the shares of any run of consecutive slots). Any other spreads each lane
    /// over the ranks its share of the lanes falls on, in proportion (one for most lanes,
    /// two where a rank's share ends within a lane; more than two only for more ranks than
    /// lanes), by a low-discrepancy sequence over the lane's reads, so shares stay even.
    /// Orders without lanes go round the ranks.
    pub fn rank_of(&self, slot: u64, world: usize) -> usize {
        let world = world.max(1) as u64;
        let lanes = match &self.kind {
            SourceKind::ShardLocal { lanes, .. } => u64::from(*lanes),
            _ => return (slot % world) as usize,
        };
        if lanes % world == 0 {
            return (slot % world) as usize;
        }
        let (lane, round) = (slot % lanes, slot / lanes);
        // The golden ratio's fraction, in 64-bit fixed point: round r's point in [0, 1).
        let within = u128::from(round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // The read's point in [0, 1) of the lanes (below 2^64 in fixed point), then its rank.
        let point = ((u128::from(lane) << 64) | within) / u128::from(lanes);
        let rank = (point * u128::from(world)) >> 64;
        (rank as u64).min(world - 1) as usize
    }

    /// Source-epoch `number` of stream `stream`, ready to answer which sample each read is.
    pub fn epoch(&self, seed: u64, stream: u64, number: u64) -> SourceEpoch {
        let key = mix(mix(mix(seed ^ mix(self.identity)) ^ stream) ^ number);
        let plan = match &self.kind {
            SourceKind::Sequential => Plan::Sequential,
            SourceKind::Shuffled => Plan::Shuffled(Permutation::new(self.len, key)),
            SourceKind::ShardLocal {
                shards,
                lanes,
                window,
            } => Plan::Lanes(Lanes::new(shards, self.len, *lanes, *window, key)),
        };
        SourceEpoch {
            len: self.len,
            plan,
        }
    }
}

/// One source-epoch of a source: read `t` (from 0) is sample [`sample`](Self::sample)`(t)`.
#[derive(Debug, Clone)]
pub struct SourceEpoch {
    len: u64,
    plan: Plan,
}

#[derive(Debug, Clone)]
enum Plan {
    Sequential,
    Shuffled(Permutation),
    Lanes(Lanes),
}

impl SourceEpoch {
    /// The source's sample index read `t`-th in this source-epoch (`t` below the source's
    /// length).
    pub fn sample(&self, t: u64) -> u64 {
        let sample = match &self.plan {
            Plan::Sequential => t,
            Plan::Shuffled(p) => p.at(t),
            Plan::Lanes(lanes) => lanes.sample(t),
        };
        debug_assert!(sample < self.len, "sample {sample} of {}", self.len);
        sample
    }
}

/// A shard-local source-epoch: the chunk sequence (shards shuffled, then each shard's
/// chunks), cut into lanes read in turn, each shuffled within windows.
#[derive(Debug, Clone)]
struct Lanes {
    /// The chunks in sequence order: each one's first sample index and where it starts in
    /// the sequence.
    chunk_first: Arc<[u64]>,
    chunk_at: Arc<[u64]>,
    len: u64,
    lanes: u64,
    window: u64,
    key: u64,
}

impl Lanes {
    fn new(shards: &[Vec<Range<usize>>], len: u64, lanes: u32, window: usize, key: u64) -> Self {
        let shard_order = Permutation::new(shards.len() as u64, mix(key ^ 0x0053_4841_5244));
        let chunks: usize = shards.iter().map(Vec::len).sum();
        let (mut chunk_first, mut chunk_at) =
            (Vec::with_capacity(chunks), Vec::with_capacity(chunks));
        let mut at = 0u64;
        for s in 0..shards.len() as u64 {
            let shard = &shards[shard_order.at(s) as usize];
            let chunk_order = Permutation::new(shard.len() as u64, mix(key ^ mix(s + 1)));
            for c in 0..shard.len() as u64 {
                let chunk = &shard[chunk_order.at(c) as usize];
                if chunk.is_empty() {
                    continue;
                }
                chunk_first.push(chunk.start as u64);
                chunk_at.push(at);
                at += chunk.len() as u64;
            }
        }
        Self {
            chunk_first: chunk_first.into(),
            chunk_at: chunk_at.into(),
            len,
            lanes: u64::from(lanes),
            window: window as u64,
            key,
        }
    }

    fn sample(&self, t: u64) -> u64 {
        // Lane ℓ is the contiguous piece ℓ of the sequence (the first `len % lanes` one
        // longer), and reads go round the lanes: read t is lane t % L's (t / L)-th.
        let (lane, q) = (t % self.lanes, t / self.lanes);
        let (short, long) = (self.len / self.lanes, self.len % self.lanes);
        let piece_start = lane * short + lane.min(long);
        let piece_len = short + u64::from(lane < long);
        let (window, offset) = (q / self.window, q % self.window);
        let window_start = window * self.window;
        let window_len = self.window.min(piece_len.saturating_sub(window_start));
        let shuffled = Permutation::new(window_len, mix(self.key ^ mix(lane << 40 ^ window)));
        let s = piece_start + window_start + shuffled.at(offset);
        let c = self
            .chunk_at
            .partition_point(|&at| at <= s)
            .saturating_sub(1);
        self.chunk_first.get(c).copied().unwrap_or(0)
            + (s - self.chunk_at.get(c).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shards: usize, chunks: usize, per: usize) -> Arc<[Vec<Range<usize>>]> {
        (0..shards)
            .map(|s| {
                (0..chunks)
                    .map(|c| {
                        let start = (s * chunks + c) * per;
                        start..start + per
                    })
                    .collect()
            })
            .collect()
    }

    fn all(source: &SourceOrder, seed: u64, stream: u64, number: u64) -> Vec<u64> {
        let e = source.epoch(seed, stream, number);
        (0..source.len()).map(|t| e.sample(t)).collect()
    }

    #[test]
    fn every_kind_reads_each_sample_once_per_source_epoch() {
        for (len, lanes, window) in [
            (105u64, 16u32, 12usize),
            (7, 16, 3),
            (96, 4, 24),
            (105, 1, 1),
        ] {
            let shards = layout(5, 3, 7);
            let shards: Arc<[Vec<Range<usize>>]> = if len == 105 {
                shards
            } else {
                Arc::from(vec![
                    (0..len as usize)
                        .step_by(8)
                        .map(|s| s..(s + 8).min(len as usize))
                        .collect::<Vec<_>>(),
                ])
            };
            for kind in [
                SourceKind::Sequential,
                SourceKind::Shuffled,
                SourceKind::ShardLocal {
                    shards,
                    lanes,
                    window,
                },
            ] {
                let source = SourceOrder::new(len, kind.clone(), 9).unwrap();
                let mut order = all(&source, 1, 2, 3);
                order.sort_unstable();
                assert_eq!(order, (0..len).collect::<Vec<_>>(), "{kind:?}");
            }
        }
    }

    #[test]
    fn a_lane_reads_few_chunks_and_epochs_differ() {
        let source = SourceOrder::new(
            4 * 4 * 10,
            SourceKind::ShardLocal {
                shards: layout(4, 4, 10),
                lanes: 4,
                window: 20,
            },
            0,
        )
        .unwrap();
        let order = all(&source, 1, 0, 0);
        // Lane 0 is reads 0, 4, 8, ...: its windows of 20 samples span at most 3 chunks.
        let lane0: Vec<u64> = order.iter().step_by(4).copied().collect();
        for window in lane0.chunks(20) {
            let mut chunks: Vec<u64> = window.iter().map(|i| i / 10).collect();
            chunks.sort();
            chunks.dedup();
            assert!(chunks.len() <= 3, "{chunks:?}");
        }
        assert_ne!(order, all(&source, 1, 0, 1));
        assert_ne!(order, all(&source, 1, 1, 0));
        assert_eq!(order, all(&source, 1, 0, 0));
    }
}
