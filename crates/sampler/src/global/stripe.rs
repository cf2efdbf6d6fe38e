//! Ranks' shares of a global batch: every position to exactly one rank, equal shares, and
//! each read to the rank whose lanes it belongs to wherever the shares allow; and a rank's
//! batches of an epoch's order, cut so.

use super::order::{Draw, Draws, EpochOrder};

/// How global batches are cut among ranks: rank `rank` of `world` takes `batch_size` of each
/// global batch of `world × batch_size` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub world: usize,
    /// Samples per rank per batch.
    pub batch_size: usize,
}

/// A rank's share of one global batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Share {
    /// Its positions, as offsets within the global batch, ascending.
    pub offsets: Vec<u32>,
    /// For each offset: whether it was moved here from the rank whose lanes it belongs to
    /// (to even out the shares), so its chunk is another rank's.
    pub strays: Vec<bool>,
    /// Offsets of samples repeated to give this rank a sample at all, when the epoch's last
    /// global batch holds fewer samples than there are ranks (appended after `offsets`).
    pub padding: Vec<u32>,
}

impl Stripe {
    /// Positions in a global batch.
    pub fn global_batch(&self) -> usize {
        self.world * self.batch_size
    }

    /// This rank's share of a global batch whose reads belong to the ranks `preferred` (the
    /// rank whose lanes each read is in: [`SourceOrder::rank_of`](super::SourceOrder::rank_of)),
    /// each read going to its own rank wherever the shares allow. A batch shorter than
    /// [`global_batch`](Self::global_batch) (an epoch's last) is cut as evenly as possible:
    /// shares differ by at most one, the ranks with most reads of their own taking the larger
    /// ones (then the lower ranks), and a rank left without a sample repeats one (reported in
    /// `padding`).
    pub fn share(&self, preferred: &[usize]) -> Share {
        let world = self.world.max(1);
        let n = preferred.len();
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); world];
        for (offset, &rank) in preferred.iter().enumerate() {
            debug_assert!(rank < world, "rank {rank} of {world}");
            lists[rank.min(world - 1)].push(offset as u32);
        }
        let mut larger: Vec<usize> = (0..world).collect();
        larger.sort_by_key(|&r| (std::cmp::Reverse(lists[r].len()), r));
        let mut targets = vec![n / world; world];
        for &r in larger.iter().take(n % world) {
            targets[r] += 1;
        }
        let target = |r: usize| targets[r];
        // Over-full ranks give up their last positions; under-full ones take them in order.
        let mut pool: Vec<u32> = Vec::new();
        for (r, list) in lists.iter_mut().enumerate() {
            while list.len() > target(r) {
                pool.extend(list.pop());
            }
        }
        pool.sort_unstable();
        let mut pool = pool.into_iter();
        let mut strays: Vec<u32> = Vec::new();
        for (r, list) in lists.iter_mut().enumerate() {
            while list.len() < target(r) {
                let Some(offset) = pool.next() else { break };
                if r == self.rank {
                    strays.push(offset);
                }
                list.push(offset);
            }
        }
        let mut offsets = std::mem::take(&mut lists[self.rank.min(world - 1)]);
        offsets.sort_unstable();
        let strays = offsets.iter().map(|o| strays.contains(o)).collect();
        let padding = if offsets.is_empty() && n > 0 {
            vec![(self.rank % n) as u32]
        } else {
            Vec::new()
        };
        Share {
            offsets,
            strays,
            padding,
        }
    }
}

/// One rank's part of a global batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankBatch {
    /// The global batch's first epoch position.
    pub start: u64,
    /// One past its last: the state after this batch is delivered.
    pub end: u64,
    /// This rank's reads, in position order, then any padding.
    pub reads: Vec<RankRead>,
    /// How many of `reads`, at the end, repeat another rank's sample (see
    /// [`Share::padding`]).
    pub padding: usize,
    /// Whether no global batch follows it in the epoch.
    pub last: bool,
}

/// One sample a rank reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankRead {
    /// The read.
    pub draw: Draw,
    /// Its epoch position.
    pub position: u64,
    /// Whether it belongs to another rank's lanes (moved here to even out the shares).
    pub stray: bool,
}

/// A rank's batches of an epoch (see [`EpochOrder::rank_batches`]).
#[derive(Debug)]
pub struct RankBatches {
    draws: Draws,
    stripe: Stripe,
    drop_last: bool,
    batch: Vec<Draw>,
}

impl EpochOrder {
    /// This rank's batches from position `from`: global batch `b` is positions
    /// `from + b·G ..` of `G = world × batch_size`, cut by `stripe`; under `drop_last` an
    /// epoch's last, short global batch is not read by any rank.
    pub fn rank_batches(&self, from: u64, stripe: Stripe, drop_last: bool) -> RankBatches {
        RankBatches::new(self.draws(from), stripe, drop_last)
    }
}

impl RankBatches {
    fn new(draws: Draws, stripe: Stripe, drop_last: bool) -> Self {
        Self {
            draws,
            stripe,
            drop_last,
            batch: Vec::new(),
        }
    }

    /// The epoch position the next batch starts at.
    pub fn position(&self) -> u64 {
        self.draws.position()
    }
}

impl Iterator for RankBatches {
    type Item = RankBatch;

    fn next(&mut self) -> Option<RankBatch> {
        let g = self.stripe.global_batch().max(1) as u64;
        let len = self.draws.epoch.len();
        let start = self.draws.position();
        let end = match len {
            Some(len) if start >= len => return None,
            Some(len) => len.min(start.saturating_add(g)),
            None => start.saturating_add(g),
        };
        if self.drop_last && end - start < g {
            return None;
        }
        self.batch.clear();
        self.batch
            .extend(self.draws.by_ref().take((end - start) as usize));
        let end = start + self.batch.len() as u64;
        if self.batch.is_empty() {
            return None;
        }
        let sources = self.draws.epoch.sources();
        let world = self.stripe.world;
        let preferred: Vec<usize> = self
            .batch
            .iter()
            .map(|d| sources[d.source].rank_of(d.slot, world))
            .collect();
        let share = self.stripe.share(&preferred);
        let mut reads: Vec<RankRead> = share
            .offsets
            .iter()
            .zip(&share.strays)
            .map(|(&o, &stray)| RankRead {
                draw: self.batch[o as usize],
                position: start + u64::from(o),
                stray,
            })
            .collect();
        reads.extend(share.padding.iter().map(|&o| RankRead {
            draw: self.batch[o as usize],
            position: start + u64::from(o),
            stray: true,
        }));
        let last = match len {
            Some(len) => end >= len || (self.drop_last && len - end < g),
            None => false,
        };
        Some(RankBatch {
            start,
            end,
            reads,
            padding: share.padding.len(),
            last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_batch_once_and_keep_lanes() {
        for world in 1..=9usize {
            for n in [1usize, 3, 8, 16, 37, 64] {
                let slots: Vec<usize> = (100..100 + n).map(|t| t % world).collect();
                let mut seen = vec![0u32; n];
                let mut sizes = Vec::new();
                for rank in 0..world {
                    let share = Stripe {
                        rank,
                        world,
                        batch_size: n.div_ceil(world),
                    }
                    .share(&slots);
                    sizes.push(share.offsets.len() + share.padding.len());
                    for &o in &share.offsets {
                        seen[o as usize] += 1;
                    }
                    // Consecutive slots divide evenly: nobody strays.
                    assert!(share.strays.iter().all(|s| !s));
                    if n >= world {
                        assert!(share.padding.is_empty());
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "world {world}, n {n}");
                let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
                assert!(hi.unwrap() - lo.unwrap() <= 1);
            }
        }
    }

    #[test]
    fn uneven_lanes_are_evened_out_by_moving_few() {
        // Two sources' reads interleaved: both runs start on rank 0.
        let slots: Vec<usize> = (0..5).chain(0..3).map(|t| t % 2).collect();
        let world = 2;
        let mut total = 0;
        for rank in 0..world {
            let share = Stripe {
                rank,
                world,
                batch_size: 4,
            }
            .share(&slots);
            assert_eq!(share.offsets.len(), 4);
            total += share.strays.iter().filter(|s| **s).count();
        }
        assert_eq!(total, 1);
    }
}
