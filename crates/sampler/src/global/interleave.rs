//! Which source each position of a mixture reads: a deterministic interleave in which every
//! prefix holds each source within one sample of its share.

use std::sync::Arc;

use crate::SamplerError;

/// Whole-number weights are searched for up to this sum (0.7/0.3 is 7:3, thirds are 1:1:1);
/// other weights are rounded to a sum of [`FINE`].
const EXACT_UP_TO: u64 = 10_000;
/// The sum weights are rounded to when they are no ratio of small whole numbers: shares are
/// then within 2^-16 of those asked for, and a period's table takes 384 KiB.
const FINE: u64 = 1 << 16;
/// The longest period (sum of whole-number weights) an interleave builds a table for.
const MAX_PERIOD: u64 = 1 << 22;

/// For weights `a_i` (whole numbers, `D = Σ a_i`), the source of each position: every prefix of
/// `n` positions holds source `i` within one (strictly) of `n · a_i / D`. The pattern repeats
/// every `D` positions; one period is built once by earliest deadline first (each source's
/// `j`-th sample must come after position `(j-1)·D/a_i - 1` and before `j·D/a_i`: a unit-job
/// schedule that always exists, Tijdeman 1980), and any position, count or draw is then
/// found without replaying the positions before it.
///
/// ```
/// use loader_sampler::Interleave;
/// let mix = Interleave::new(&[7, 3]).unwrap();
/// let first: Vec<usize> = (0..10).map(|k| mix.source_at(k)).collect();
/// assert_eq!(first.iter().filter(|&&s| s == 1).count(), 3);
/// assert_eq!(mix.count_before(1, 1_000_000), 300_000);
/// assert_eq!(mix.source_at(mix.position_of(1, 12345).unwrap()), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Interleave {
    weights: Arc<[u64]>,
    period: u64,
    /// The source of each position of one period.
    pattern: Arc<[u16]>,
    /// Each source's positions within one period, ascending.
    positions: Arc<[Arc<[u32]>]>,
}

impl Interleave {
    /// The interleave of sources with whole-number `weights` (a source of weight 0 is never
    /// read). Their sum must be at most 2^22, and there may be at most 65,536 sources.
    pub fn new(weights: &[u64]) -> Result<Self, SamplerError> {
        if weights.is_empty() {
            return Err(SamplerError::NoSource);
        }
        if weights.len() > usize::from(u16::MAX) + 1 {
            return Err(SamplerError::TooMany {
                what: "a mixture's sources",
                len: weights.len() as u64,
                most: u64::from(u16::MAX) + 1,
                hint: "",
            });
        }
        let period = weights.iter().try_fold(0u64, |a, &w| a.checked_add(w));
        let Some(period) = period.filter(|&p| p <= MAX_PERIOD) else {
            return Err(SamplerError::TooMany {
                what: "the sum of a mixture's whole-number weights",
                len: period.unwrap_or(u64::MAX),
                most: MAX_PERIOD,
                hint: "; give smaller whole numbers, or fractions",
            });
        };
        if period == 0 {
            return Err(SamplerError::NoPositiveWeight(0.0));
        }
        let pattern = earliest_deadline_first(weights, period);
        let mut positions: Vec<Vec<u32>> = weights
            .iter()
            .map(|&a| Vec::with_capacity(a as usize))
            .collect();
        for (slot, &source) in pattern.iter().enumerate() {
            positions[usize::from(source)].push(slot as u32);
        }
        Ok(Self {
            weights: weights.into(),
            period,
            pattern: pattern.into(),
            positions: positions.into_iter().map(Arc::from).collect(),
        })
    }

    /// The interleave of sources weighted by `weights` (finite, not negative, some positive),
    /// and the whole numbers it reads them as: their exact ratio when the weights are ratios
    /// of whole numbers summing to at most 10,000 (0.7/0.3 → 7:3, [1, 1, 2], thirds), else
    /// rounded to 2^16ths (largest remainders; a positive weight never rounds to 0).
    pub fn from_weights(weights: &[f64]) -> Result<Self, SamplerError> {
        Self::new(&whole_weights(weights)?)
    }

    /// The whole-number weights, as given or as [`from_weights`](Self::from_weights) read them.
    pub fn weights(&self) -> &[u64] {
        &self.weights
    }

    /// Sources interleaved.
    pub fn sources(&self) -> usize {
        self.weights.len()
    }

    /// Positions after which the pattern repeats (the sum of the weights).
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The source at position `k`.
    pub fn source_at(&self, k: u64) -> usize {
        usize::from(self.pattern[(k % self.period) as usize])
    }

    /// How many of positions `0..k` read `source`.
    pub fn count_before(&self, source: usize, k: u64) -> u64 {
        let Some(at) = self.positions.get(source) else {
            return 0;
        };
        let (whole, rest) = (k / self.period, k % self.period);
        whole * self.weights[source] + at.partition_point(|&p| u64::from(p) < rest) as u64
    }

    /// The position of `source`'s `j`-th read (from 0); `None` for a source of weight 0
    /// (or past `u64::MAX`).
    pub fn position_of(&self, source: usize, j: u64) -> Option<u64> {
        let a = *self.weights.get(source)?;
        if a == 0 {
            return None;
        }
        let at = &self.positions[source];
        (j / a)
            .checked_mul(self.period)?
            .checked_add(u64::from(at[(j % a) as usize]))
    }
}

/// One period of the interleave: at each position, among the sources whose next read may come
/// already, the one whose deadline is nearest (ties to the lower index). Two heaps (sources
/// waiting for their next read's release, and those released, by deadline): O(D log m).
fn earliest_deadline_first(weights: &[u64], period: u64) -> Vec<u16> {
    use std::cmp::{Ordering, Reverse};
    use std::collections::BinaryHeap;

    /// A source's next read `j = taken + 1`: released at the first slot `s` with
    /// `(j - 1)·D < (s + 1)·a`, due by `j / a`.
    #[derive(PartialEq, Eq)]
    struct Next {
        index: usize,
        j: u64,
        a: u64,
    }
    impl Next {
        fn release(&self, d: u64) -> u64 {
            // The smallest s with (s + 1)·a > (j - 1)·D.
            ((u128::from(self.j - 1) * u128::from(d)) / u128::from(self.a)) as u64
        }
    }
    impl Ord for Next {
        // The nearer deadline j / a first, then the lower index.
        fn cmp(&self, other: &Self) -> Ordering {
            let (l, r) = (
                u128::from(self.j) * u128::from(other.a),
                u128::from(other.j) * u128::from(self.a),
            );
            r.cmp(&l).then(other.index.cmp(&self.index))
        }
    }
    impl PartialOrd for Next {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }

    let mut waiting: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut ready: BinaryHeap<Next> = BinaryHeap::new();
    let mut taken = vec![0u64; weights.len()];
    for (index, &a) in weights.iter().enumerate().filter(|(_, a)| **a > 0) {
        let next = Next { index, j: 1, a };
        waiting.push(Reverse((next.release(period), index)));
    }
    let mut pattern = Vec::with_capacity(period as usize);
    for slot in 0..period {
        while let Some(&Reverse((release, index))) = waiting.peek() {
            if release > slot {
                break;
            }
            waiting.pop();
            let a = weights[index];
            ready.push(Next {
                index,
                j: taken[index] + 1,
                a,
            });
        }
        // Some source is always released: if none were, Σ taken·D ≥ (slot + 1)·D, yet
        // Σ taken = slot. The fallback keeps the table whole should that ever be wrong.
        let next = match ready.pop() {
            Some(next) => next,
            None => match waiting.pop() {
                Some(Reverse((_, index))) => Next {
                    index,
                    j: taken[index] + 1,
                    a: weights[index],
                },
                None => break,
            },
        };
        taken[next.index] += 1;
        pattern.push(next.index as u16);
        if taken[next.index] < next.a {
            let following = Next {
                index: next.index,
                j: taken[next.index] + 1,
                a: next.a,
            };
            waiting.push(Reverse((following.release(period), next.index)));
        }
    }
    pattern
}

/// Whole-number weights in the ratio of `weights`.
pub(crate) fn whole_weights(weights: &[f64]) -> Result<Vec<u64>, SamplerError> {
    if let Some((index, &weight)) = weights
        .iter()
        .enumerate()
        .find(|(_, w)| !w.is_finite() || **w < 0.0)
    {
        return Err(SamplerError::BadWeight { index, weight });
    }
    let total: f64 = weights.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return Err(SamplerError::NoPositiveWeight(total));
    }
    let shares: Vec<f64> = weights.iter().map(|w| w / total).collect();
    for sum in 1..=EXACT_UP_TO {
        let scaled: Vec<f64> = shares.iter().map(|s| s * sum as f64).collect();
        if scaled
            .iter()
            .all(|x| (x - x.round()).abs() <= 1e-9 * sum as f64)
        {
            let whole: Vec<u64> = scaled.iter().map(|x| x.round() as u64).collect();
            if whole.iter().sum::<u64>() == sum
                && whole
                    .iter()
                    .zip(weights)
                    .all(|(&a, &w)| (a == 0) == (w == 0.0))
            {
                return Ok(whole);
            }
        }
    }
    // Largest remainders to a sum of FINE, then every positive weight at least 1.
    let scaled: Vec<f64> = shares.iter().map(|s| s * FINE as f64).collect();
    let mut whole: Vec<u64> = scaled.iter().map(|x| x.floor() as u64).collect();
    let mut order: Vec<usize> = (0..whole.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (scaled[a] - scaled[a].floor(), scaled[b] - scaled[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let short = FINE.saturating_sub(whole.iter().sum());
    for &i in order.iter().take(short as usize) {
        whole[i] += 1;
    }
    for (a, &w) in whole.iter_mut().zip(weights) {
        if w > 0.0 && *a == 0 {
            *a = 1;
        }
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix of two periods holds each source strictly within one of its share.
    fn check(weights: &[u64]) {
        let mix = Interleave::new(weights).unwrap();
        let d = mix.period();
        let mut counts = vec![0u64; weights.len()];
        for k in 0..2 * d {
            counts[mix.source_at(k)] += 1;
            let n = k + 1;
            for (i, &a) in weights.iter().enumerate() {
                let ideal = (n as f64) * a as f64 / d as f64;
                assert!(
                    (counts[i] as f64 - ideal).abs() < 1.0,
                    "{weights:?}: prefix {n}: source {i} has {} for {ideal}",
                    counts[i]
                );
                assert_eq!(mix.count_before(i, n), counts[i]);
            }
        }
        for (i, &a) in weights.iter().enumerate() {
            for j in 0..2 * a {
                let p = mix.position_of(i, j).unwrap();
                assert_eq!(mix.source_at(p), i);
                assert_eq!(mix.count_before(i, p), j);
            }
        }
    }

    #[test]
    fn every_prefix_is_within_one_of_its_share() {
        for weights in [
            &[1u64][..],
            &[1, 1],
            &[7, 3],
            &[1, 1, 1, 1, 1, 1, 1, 97],
            &[5, 4, 3, 2, 1],
            &[1, 0, 2],
            &[13, 17, 19, 23],
            &[1, 1000],
            &[333, 333, 334],
        ] {
            check(weights);
        }
        // Many sources of random weights: Tijdeman's bound holds for any number of them.
        let mut x = 7u64;
        for _ in 0..200 {
            let m = (x % 9 + 2) as usize;
            let weights: Vec<u64> = (0..m)
                .map(|_| {
                    x = crate::rng::mix(x);
                    x % 40
                })
                .collect();
            if weights.iter().sum::<u64>() > 0 {
                check(&weights);
            }
        }
    }

    #[test]
    fn weights_are_read_as_ratios() {
        assert_eq!(whole_weights(&[0.7, 0.3]).unwrap(), [7, 3]);
        assert_eq!(whole_weights(&[1.0, 1.0, 2.0]).unwrap(), [1, 1, 2]);
        assert_eq!(whole_weights(&[1.0 / 3.0, 2.0 / 3.0]).unwrap(), [1, 2]);
        assert_eq!(whole_weights(&[0.5, 0.0, 0.5]).unwrap(), [1, 0, 1]);
        let fine = whole_weights(&[0.123_456_7, 0.876_543_3, 1e-9]).unwrap();
        assert_eq!(fine.iter().sum::<u64>(), FINE + 1);
        // Thousands of sources of weights that are no small ratio build quickly.
        let many: Vec<f64> = (0..2000).map(|i| 1.0 + (i as f64).sqrt()).collect();
        let mix = Interleave::from_weights(&many).unwrap();
        assert!(mix.period() <= FINE + 2000);
        assert_eq!(fine[2], 1);
        assert!(whole_weights(&[0.0, 0.0]).is_err());
        assert!(whole_weights(&[1.0, -1.0]).is_err());
        assert!(whole_weights(&[f64::NAN]).is_err());
    }
}
