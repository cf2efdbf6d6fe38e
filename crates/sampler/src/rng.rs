//! Seeded randomness: one explicit generator (ChaCha8) and our own bounded draws and
//! shuffle, so an epoch's order never changes with a dependency upgrade; a checkpoint
//! written today must resume to the same indices next year.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// SplitMix64's finaliser: a strong 64-bit mix, used to derive independent streams.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator of one epoch of one sampler: a function of `(seed, epoch)` only.
pub(crate) fn epoch_rng(seed: u64, epoch: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(mix(seed) ^ epoch))
}

/// A stateless draw for position `i` of an epoch: random access, so resuming at any
/// position costs nothing and nothing is materialised.
pub(crate) fn counter_u64(seed: u64, epoch: u64, i: u64) -> u64 {
    mix(mix(mix(seed) ^ epoch) ^ mix(i))
}

/// A uniform integer in `0..n` from 64 random bits (Lemire's multiply-shift; the bias is
/// below 2^-32 for any n < 2^32, far under anything a training run can notice).
pub(crate) fn bounded(bits: u64, n: u64) -> u64 {
    ((u128::from(bits) * u128::from(n)) >> 64) as u64
}

/// A uniform float in [0, 1) from 64 random bits.
pub(crate) fn unit_f64(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Fisher-Yates, written out so its output is fixed by this file alone.
pub(crate) fn shuffle<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        let j = bounded(rng.next_u64(), i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// A random permutation of `0..n`, as `u32`s to halve the memory of large epochs.
pub(crate) fn permutation(n: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    shuffle(&mut order, rng);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_stays_in_range_and_covers_it() {
        let mut seen = [false; 7];
        for i in 0..1000 {
            let v = bounded(counter_u64(1, 2, i), 7);
            assert!(v < 7);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn the_order_is_pinned() {
        // If this changes, every saved checkpoint resumes to other indices: don't.
        assert_eq!(
            permutation(10, &mut epoch_rng(0, 0)),
            [7, 9, 0, 6, 1, 5, 2, 4, 3, 8]
        );
        assert_eq!(counter_u64(1, 2, 3), 4_062_381_155_947_230_096);
        assert_ne!(counter_u64(1, 2, 3), counter_u64(1, 2, 4));
    }
}
