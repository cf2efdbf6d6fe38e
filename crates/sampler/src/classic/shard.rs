//! Shard-local order: shards shuffled, their chunks shuffled, samples shuffled within a
//! bounded buffer, so a reader only has a few chunks open at a time.

use std::ops::Range;
use std::sync::Arc;

use super::distributed::check_rank;
use super::random::walk;
use crate::rng::{epoch_rng, mix, shuffle};
use crate::{Indices, Sampler, SamplerError};

/// WebDataset's and MosaicML Streaming's kind of order, as a pure function of
/// `(seed, epoch, rank)`, so it resumes exactly. Each epoch:
///
/// 1. the shards are put in a random order, and each shard's chunks (runs of neighbouring
///    samples read with one request) in a random order of their own;
/// 2. that sequence of every sample is cut into `world_size` equal, contiguous pieces and
///    this rank takes its piece: ranks read disjoint samples and share at most the shard
///    at each end of their piece. Without `drop_last` the last piece is padded with the
///    sequence's first samples, as PyTorch's DistributedSampler pads; with it the tail
///    that does not divide evenly is dropped;
/// 3. within the piece, samples are shuffled within consecutive windows of
///    `shuffle_buffer` samples: about `shuffle_buffer` / (samples per chunk) + 1 chunks are
///    being read at a time.
///
/// Dataset indices must run shard by shard, chunk by chunk, as the shard index lays them
/// out: chunk ranges are given as index ranges.
///
/// ```
/// use loader_sampler::{Sampler, ShardSampler};
/// // Two shards of two chunks of 3 samples each.
/// let shards = vec![vec![0..3, 3..6], vec![6..9, 9..12]];
/// let sampler = ShardSampler::new(shards, 7).shuffle_buffer(3).build().unwrap();
/// let mut epoch: Vec<usize> = sampler.epoch(0).collect();
/// // Each window of 3 holds exactly one chunk here.
/// for window in epoch.chunks(3) {
///     assert_eq!(window.iter().map(|i| i / 3).min(), window.iter().map(|i| i / 3).max());
/// }
/// epoch.sort();
/// assert_eq!(epoch, (0..12).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone)]
pub struct ShardSampler {
    shards: Arc<[Vec<Range<usize>>]>,
    samples: usize,
    seed: u64,
    shuffle_buffer: usize,
    rank: usize,
    world_size: usize,
    drop_last: bool,
}

/// Options of a [`ShardSampler`].
#[derive(Debug, Clone)]
pub struct ShardSamplerBuilder {
    sampler: ShardSampler,
}

impl ShardSampler {
    /// Over `shards`, each given as the index ranges of its chunks; one rank of one, a
    /// shuffle buffer of 8 chunks' worth of samples.
    #[allow(clippy::new_ret_no_self)] // a builder, since there are several options
    pub fn new(shards: Vec<Vec<Range<usize>>>, seed: u64) -> ShardSamplerBuilder {
        let samples = shards.iter().flatten().map(|c| c.len()).sum();
        let chunks = shards.iter().map(Vec::len).sum::<usize>().max(1);
        ShardSamplerBuilder {
            sampler: ShardSampler {
                shards: shards.into(),
                samples,
                seed,
                shuffle_buffer: (8 * samples).div_ceil(chunks).max(1),
                rank: 0,
                world_size: 1,
                drop_last: false,
            },
        }
    }

    /// The whole sequence of all ranks for `epoch`, before the cut into pieces.
    fn sequence(&self, epoch: u64) -> Vec<u32> {
        let mut shards: Vec<usize> = (0..self.shards.len()).collect();
        shuffle(&mut shards, &mut epoch_rng(self.seed, epoch));
        let mut out = Vec::with_capacity(self.samples);
        for s in shards {
            let mut chunks: Vec<&Range<usize>> = self.shards[s].iter().collect();
            shuffle(
                &mut chunks,
                &mut epoch_rng(mix(self.seed ^ mix(s as u64 ^ 0x0053_4841_5244)), epoch),
            );
            for c in chunks {
                out.extend(c.clone().map(|i| i as u32));
            }
        }
        out
    }

    /// This rank's samples of `epoch`, in order.
    pub fn order(&self, epoch: u64) -> Vec<u32> {
        let all = self.sequence(epoch);
        let per = self.len();
        if all.is_empty() {
            return Vec::new();
        }
        let start = self.rank * per;
        let mut piece: Vec<u32> = (start..start + per).map(|i| all[i % all.len()]).collect();
        for (w, window) in piece.chunks_mut(self.shuffle_buffer).enumerate() {
            shuffle(
                window,
                &mut epoch_rng(
                    mix(self.seed ^ mix((w as u64) << 20 ^ self.rank as u64)),
                    epoch,
                ),
            );
        }
        piece
    }
}

impl ShardSamplerBuilder {
    /// Samples shuffled together (more mixes better and keeps more chunks open).
    pub fn shuffle_buffer(mut self, samples: usize) -> Self {
        self.sampler.shuffle_buffer = samples;
        self
    }

    /// This process's rank and the number of ranks.
    pub fn rank(mut self, rank: usize, world_size: usize) -> Self {
        self.sampler.rank = rank;
        self.sampler.world_size = world_size;
        self
    }

    /// Drop the tail that does not divide evenly among ranks instead of padding.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.sampler.drop_last = drop_last;
        self
    }

    /// Check the options.
    pub fn build(self) -> Result<ShardSampler, SamplerError> {
        let s = self.sampler;
        check_rank(s.rank, s.world_size)?;
        if s.shuffle_buffer == 0 {
            return Err(SamplerError::Zero("the shuffle buffer"));
        }
        if u32::try_from(s.samples).is_err() {
            return Err(SamplerError::TooLarge {
                what: "a shard-local epoch",
                len: s.samples as u64,
                hint: "",
            });
        }
        if s.samples == 0 {
            return Err(SamplerError::Empty("order"));
        }
        if s.drop_last && s.samples < s.world_size {
            return Err(SamplerError::TooFewSamples {
                samples: s.samples,
                ranks: s.world_size,
            });
        }
        Ok(s)
    }
}

impl Sampler for ShardSampler {
    fn len(&self) -> usize {
        if self.drop_last {
            self.samples / self.world_size
        } else {
            self.samples.div_ceil(self.world_size)
        }
    }

    fn indices_from(&self, epoch: u64, position: usize) -> Indices {
        walk(self.order(epoch).into(), position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shards: usize, chunks: usize, per_chunk: usize) -> Vec<Vec<Range<usize>>> {
        (0..shards)
            .map(|s| {
                (0..chunks)
                    .map(|c| {
                        let start = (s * chunks + c) * per_chunk;
                        start..start + per_chunk
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn ranks_are_disjoint_cover_everything_and_equal() {
        let shards = layout(5, 3, 7); // 105 samples
        for world in [1, 2, 3, 4, 8] {
            let mut seen = vec![0usize; 105];
            let mut lens = Vec::new();
            for rank in 0..world {
                let s = ShardSampler::new(shards.clone(), 3)
                    .rank(rank, world)
                    .build()
                    .unwrap();
                let order: Vec<usize> = s.epoch(2).collect();
                assert_eq!(order.len(), s.len());
                lens.push(order.len());
                for i in order {
                    seen[i] += 1;
                }
            }
            assert!(lens.iter().all(|&l| l == lens[0]));
            assert!(
                seen.iter().all(|&n| n >= 1),
                "world {world}: every sample read"
            );
            let extra: usize = seen.iter().map(|&n| n - 1).sum();
            assert_eq!(
                extra,
                105usize.div_ceil(world) * world - 105,
                "only the padding repeats"
            );
        }
    }

    #[test]
    fn a_rank_reads_few_chunks_at_a_time_and_epochs_differ() {
        let shards = layout(4, 4, 10);
        let s = ShardSampler::new(shards, 1)
            .shuffle_buffer(20)
            .build()
            .unwrap();
        let order = s.order(0);
        for window in order.chunks(20) {
            let mut chunks: Vec<u32> = window.iter().map(|i| i / 10).collect();
            chunks.sort();
            chunks.dedup();
            assert!(chunks.len() <= 3, "{chunks:?}");
        }
        assert_ne!(s.order(0), s.order(1));
        assert_eq!(s.order(1), s.order(1));
    }
}
