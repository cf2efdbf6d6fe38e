//! A random permutation with random access: the value at any position in O(1), nothing
//! materialised, so an order of a billion samples resumes at any position at once.

use crate::rng::mix;

/// Rounds of the Feistel network: 4 make a pseudo-random permutation (Luby-Rackoff); 6
/// leave no pattern a training run could notice in small domains either.
const ROUNDS: usize = 6;

/// A bijection of `0..n` drawn from a seed: a balanced Feistel network over the smallest
/// power of 4 at or above `n`, walking a value outside `0..n` through the network again until
/// it lands inside (format-preserving encryption's cycle walk: at most 4x the domain, so
/// under 4 steps on average, and it always ends because the walk follows a cycle through
/// the starting value).
///
/// ```
/// use loader_sampler::Permutation;
/// let p = Permutation::new(10, 42);
/// let mut all: Vec<u64> = (0..10).map(|i| p.at(i)).collect();
/// all.sort();
/// assert_eq!(all, (0..10).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    /// Bits of each half of the network's input.
    half: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..n` that `seed` names.
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half = bits.div_ceil(2).max(1);
        let mut keys = [0u64; ROUNDS];
        let mut k = mix(seed ^ 0x5045_524D);
        for key in &mut keys {
            k = mix(k);
            *key = k;
        }
        Self { n, half, keys }
    }

    /// Values in the permutation.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether it permutes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The value at position `i` (`i` must be below [`len`](Self::len); others map to
    /// themselves).
    pub fn at(&self, i: u64) -> u64 {
        if i >= self.n || self.n == 1 {
            return i;
        }
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half) - 1;
        let (mut left, mut right) = (x >> self.half, x & mask);
        for key in &self.keys {
            let f = mix(right ^ key) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_is_a_bijection() {
        for n in 0..300u64 {
            let p = Permutation::new(n, n * 7 + 1);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.at(i);
                assert!(v < n && !seen[v as usize], "n {n}: {i} -> {v}");
                seen[v as usize] = true;
            }
        }
    }

    #[test]
    fn seeds_differ_and_large_domains_work() {
        let (a, b) = (Permutation::new(1000, 1), Permutation::new(1000, 2));
        assert!((0..1000).filter(|&i| a.at(i) != b.at(i)).count() > 900);
        let big = Permutation::new(u64::MAX / 3, 5);
        assert!(big.at(123_456_789) < u64::MAX / 3);
    }

    #[test]
    fn the_order_is_pinned() {
        // If this changes, every saved checkpoint resumes to other samples: don't.
        let p = Permutation::new(10, 0);
        let order: Vec<u64> = (0..10).map(|i| p.at(i)).collect();
        assert_eq!(order, [5, 4, 7, 0, 8, 3, 1, 6, 9, 2]);
    }

    #[test]
    fn positions_look_uniform() {
        // Where position 0 lands over many seeds: every value about equally often.
        let n = 16u64;
        let mut counts = vec![0u32; n as usize];
        for seed in 0..16_000 {
            counts[Permutation::new(n, seed).at(0) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{c}");
        }
    }
}
