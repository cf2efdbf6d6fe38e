//! torchvision's `RandomErasing`, on the output tensor: a rectangle of random area and
//! aspect ratio set to a value, per-channel values, or standard normal noise.

use rand::Rng;

/// What an erased rectangle holds.
#[derive(Debug, Clone, PartialEq)]
pub enum EraseValue {
    /// One value for every channel, or one per channel.
    Constant(Vec<f32>),
    /// Standard normal noise (torchvision's `value="random"`).
    Random,
}

/// `RandomErasing(p, scale, ratio, value)` after `ToTensor` (or `ToImage`).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomErasing {
    /// The chance of erasing.
    pub p: f64,
    /// The rectangle's area as a share of the image's, drawn between these.
    pub scale: (f64, f64),
    /// Its aspect ratio (height / width), drawn log-uniformly between these.
    pub ratio: (f64, f64),
    /// What it is set to.
    pub value: EraseValue,
    /// The value is in [0, 1] pixel units and normalized with the pixels (torchvision's
    /// `ToTensor, RandomErasing, Normalize`); when false it is written as it is
    /// (`ToTensor, Normalize, RandomErasing`, or a uint8 tensor).
    pub before_normalize: bool,
}

/// A rectangle to erase: top, left, height, width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) top: usize,
    pub(crate) left: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
}

/// A standard normal draw (Box-Muller: two uniforms, no extra crate for one formula).
fn normal(rng: &mut impl Rng) -> f32 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

impl RandomErasing {
    /// torchvision's draw: up to ten tries for a rectangle smaller than the image.
    pub(crate) fn region(&self, rng: &mut impl Rng, height: usize, width: usize) -> Option<Region> {
        if rng.random::<f64>() >= self.p {
            return None;
        }
        let area = (height * width) as f64;
        let (lo, hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let erase = area * (self.scale.0 + (self.scale.1 - self.scale.0) * rng.random::<f64>());
            let aspect = (lo + (hi - lo) * rng.random::<f64>()).exp();
            let h = (erase * aspect).sqrt().round_ties_even() as usize;
            let w = (erase / aspect).sqrt().round_ties_even() as usize;
            if !(h < height && w < width) {
                continue;
            }
            let top = rng.random_range(0..=height - h);
            let left = rng.random_range(0..=width - w);
            return Some(Region {
                top,
                left,
                height: h,
                width: w,
            });
        }
        None
    }

    /// Erase in f32 CHW `out` of `shape`, normalizing the value by `mean` and `std` when
    /// it is given before `Normalize`.
    pub(crate) fn apply_f32(
        &self,
        rng: &mut impl Rng,
        out: &mut [f32],
        [c, h, w]: [usize; 3],
        mean: &[f32],
        std: &[f32],
    ) {
        let Some(r) = self.region(rng, h, w) else {
            return;
        };
        for ch in 0..c {
            for y in r.top..r.top + r.height {
                for v in &mut out[(ch * h + y) * w + r.left..][..r.width] {
                    let x = match &self.value {
                        EraseValue::Random => normal(rng),
                        EraseValue::Constant(values) => values[ch.min(values.len() - 1)],
                    };
                    *v = if self.before_normalize {
                        (x - mean[ch]) / std[ch]
                    } else {
                        x
                    };
                }
            }
        }
    }

    /// Erase in u8 CHW `out` (the value is a whole number of levels, checked when built).
    pub(crate) fn apply_u8(&self, rng: &mut impl Rng, out: &mut [u8], [c, h, w]: [usize; 3]) {
        let Some(r) = self.region(rng, h, w) else {
            return;
        };
        let EraseValue::Constant(values) = &self.value else {
            return;
        };
        for ch in 0..c {
            let x = values[ch.min(values.len() - 1)] as u8;
            for y in r.top..r.top + r.height {
                out[(ch * h + y) * w + r.left..][..r.width].fill(x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn regions_fit_and_follow_the_scale() {
        let e = RandomErasing {
            p: 1.0,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Constant(vec![0.0]),
            before_normalize: false,
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut seen = 0;
        for _ in 0..500 {
            if let Some(r) = e.region(&mut rng, 40, 60) {
                seen += 1;
                assert!(r.top + r.height <= 40 && r.left + r.width <= 60);
                let share = (r.height * r.width) as f64 / 2400.0;
                assert!(share < 0.45, "{r:?}");
            }
        }
        assert!(seen > 450, "{seen}");
    }
}
