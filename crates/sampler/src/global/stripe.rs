//! Ranks' shares of a global batch: every position to exactly one rank, equal shares, and
//! each read to the rank whose lanes it belongs to wherever the shares allow.

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

    /// This rank's share of a global batch whose reads have lane slots `slots` (a read's
    /// position within its source-epoch; slot `s` belongs to rank `s % world`, which keeps a
    /// lane with one rank whenever `world` divides the lane count). A batch shorter than
    /// [`global_batch`](Self::global_batch) (an epoch's last) is cut as evenly as possible:
    /// shares differ by at most one, the ranks with most reads of their own taking the larger
    /// ones (then the lower ranks), and a rank left without a sample repeats one (reported in
    /// `padding`).
    pub fn share(&self, slots: &[u64]) -> Share {
        let world = self.world.max(1);
        let n = slots.len();
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); world];
        for (offset, &slot) in slots.iter().enumerate() {
            lists[(slot % world as u64) as usize].push(offset as u32);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_batch_once_and_keep_lanes() {
        for world in 1..=9usize {
            for n in [1usize, 3, 8, 16, 37, 64] {
                let slots: Vec<u64> = (100..100 + n as u64).collect();
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
        // Two sources' slots interleaved: both runs start on rank 0.
        let slots: Vec<u64> = (0..5).chain(0..3).collect();
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
