//! torchvision's automatic augmentation policies, `RandAugment` and
//! `TrivialAugmentWide`: their fourteen operations with the magnitude tables of v2.

use rand::Rng;

use super::affine::{Fill, Interpolation, affine, rotate};
use super::blur::linspace;
use super::enhance::{brightness, contrast, saturation, sharpness};
use super::levels::{autocontrast, equalize, posterize, solarize};
use crate::Image;

/// One operation of the policies' augmentation space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Nothing.
    Identity,
    /// Shear along x.
    ShearX,
    /// Shear along y.
    ShearY,
    /// Shift along x.
    TranslateX,
    /// Shift along y.
    TranslateY,
    /// Rotation.
    Rotate,
    /// Brightness.
    Brightness,
    /// Saturation.
    Color,
    /// Contrast.
    Contrast,
    /// Sharpness.
    Sharpness,
    /// Fewer bits per channel.
    Posterize,
    /// Inversion above a threshold.
    Solarize,
    /// Stretched range.
    AutoContrast,
    /// Flattened histogram.
    Equalize,
}

/// The space in torchvision's order.
pub const OPS: [Op; 14] = [
    Op::Identity,
    Op::ShearX,
    Op::ShearY,
    Op::TranslateX,
    Op::TranslateY,
    Op::Rotate,
    Op::Brightness,
    Op::Color,
    Op::Contrast,
    Op::Sharpness,
    Op::Posterize,
    Op::Solarize,
    Op::AutoContrast,
    Op::Equalize,
];

/// Which policy's magnitudes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Space {
    RandAugment,
    TrivialAugmentWide,
}

/// The magnitudes of `op` over `bins` bins for an image of `height` x `width`, and whether
/// its sign is drawn; `None` for the operations that take none.
fn magnitudes(
    space: Space,
    op: Op,
    bins: usize,
    height: usize,
    width: usize,
) -> Option<(Vec<f32>, bool)> {
    let wide = space == Space::TrivialAugmentWide;
    let posterize_bits = |quarters: f64| {
        let d = ((bins - 1) as f64 / quarters) as f32;
        (0..bins)
            .map(|i| (8 - (i as f32 / d).round_ties_even() as i32) as f32)
            .collect()
    };
    Some(match op {
        Op::Identity | Op::AutoContrast | Op::Equalize => return None,
        Op::ShearX | Op::ShearY => (linspace(0.0, if wide { 0.99 } else { 0.3 }, bins), true),
        Op::TranslateX | Op::TranslateY => {
            let side = if op == Op::TranslateX { width } else { height };
            let end = if wide {
                32.0
            } else {
                150.0 / 331.0 * side as f64
            };
            (linspace(0.0, end as f32, bins), true)
        }
        Op::Rotate => (linspace(0.0, if wide { 135.0 } else { 30.0 }, bins), true),
        Op::Brightness | Op::Color | Op::Contrast | Op::Sharpness => {
            (linspace(0.0, if wide { 0.99 } else { 0.9 }, bins), true)
        }
        Op::Posterize => (posterize_bits(if wide { 6.0 } else { 4.0 }), false),
        Op::Solarize => (linspace(1.0, 0.0, bins), false),
    })
}

/// Apply `op` at `magnitude` as torchvision's `_apply_image_or_video_transform` does.
pub(crate) fn apply_op(
    image: Image,
    op: Op,
    magnitude: f64,
    interpolation: Interpolation,
    fill: Fill,
) -> Image {
    let mut image = image;
    let shear = |image: &Image, s: (f64, f64)| {
        affine(
            image,
            0.0,
            (0.0, 0.0),
            1.0,
            s,
            interpolation,
            fill,
            Some((0.0, 0.0)),
        )
    };
    let shift = |image: &Image, t: (f64, f64)| {
        affine(image, 0.0, t, 1.0, (0.0, 0.0), interpolation, fill, None)
    };
    match op {
        Op::Identity => {}
        Op::ShearX => return shear(&image, (magnitude.atan().to_degrees(), 0.0)),
        Op::ShearY => return shear(&image, (0.0, magnitude.atan().to_degrees())),
        Op::TranslateX => return shift(&image, (magnitude.trunc(), 0.0)),
        Op::TranslateY => return shift(&image, (0.0, magnitude.trunc())),
        Op::Rotate => return rotate(&image, magnitude, interpolation, false, None, fill),
        Op::Brightness => brightness(&mut image, (1.0 + magnitude) as f32),
        Op::Color => saturation(&mut image, (1.0 + magnitude) as f32),
        Op::Contrast => contrast(&mut image, (1.0 + magnitude) as f32),
        Op::Sharpness => sharpness(&mut image, (1.0 + magnitude) as f32),
        Op::Posterize => posterize(&mut image, magnitude as u8),
        Op::Solarize => solarize(&mut image, 255.0 * magnitude),
        Op::AutoContrast => autocontrast(&mut image),
        Op::Equalize => equalize(&mut image),
    }
    image
}

/// `RandAugment(num_ops, magnitude, num_magnitude_bins, interpolation, fill)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandAugment {
    /// Operations per image, each drawn uniformly from the space.
    pub num_ops: usize,
    /// The magnitude's bin, below `num_magnitude_bins`.
    pub magnitude: usize,
    /// Bins of the magnitude tables.
    pub num_magnitude_bins: usize,
    /// How the geometric operations sample.
    pub interpolation: Interpolation,
    /// The fill of uncovered pixels.
    pub fill: Fill,
}

/// `TrivialAugmentWide(num_magnitude_bins, interpolation, fill)`: one operation per
/// image at a magnitude bin drawn uniformly.
#[derive(Debug, Clone, PartialEq)]
pub struct TrivialAugmentWide {
    /// Bins of the magnitude tables.
    pub num_magnitude_bins: usize,
    /// How the geometric operations sample.
    pub interpolation: Interpolation,
    /// The fill of uncovered pixels.
    pub fill: Fill,
}

fn draw_magnitude(
    rng: &mut impl Rng,
    space: Space,
    op: Op,
    bins: usize,
    bin: Option<usize>,
    image: &Image,
) -> f64 {
    let Some((table, signed)) = magnitudes(space, op, bins, image.height, image.width) else {
        return 0.0;
    };
    let bin = bin.unwrap_or_else(|| rng.random_range(0..bins));
    let m = f64::from(table[bin.min(bins - 1)]);
    if signed && rng.random::<f64>() <= 0.5 {
        -m
    } else {
        m
    }
}

impl RandAugment {
    pub(crate) fn apply(&self, mut image: Image, rng: &mut impl Rng) -> Image {
        for _ in 0..self.num_ops {
            let op = OPS[rng.random_range(0..OPS.len())];
            let m = draw_magnitude(
                rng,
                Space::RandAugment,
                op,
                self.num_magnitude_bins,
                Some(self.magnitude),
                &image,
            );
            image = apply_op(image, op, m, self.interpolation, self.fill);
        }
        image
    }
}

impl TrivialAugmentWide {
    pub(crate) fn apply(&self, image: Image, rng: &mut impl Rng) -> Image {
        let op = OPS[rng.random_range(0..OPS.len())];
        let m = draw_magnitude(
            rng,
            Space::TrivialAugmentWide,
            op,
            self.num_magnitude_bins,
            None,
            &image,
        );
        apply_op(image, op, m, self.interpolation, self.fill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchvisions_tables() {
        let (shear, signed) = magnitudes(Space::RandAugment, Op::ShearX, 31, 10, 10).unwrap();
        assert!(signed && (shear[9] - 0.09).abs() < 1e-6 && shear[30] == 0.3);
        let (bits, _) = magnitudes(Space::RandAugment, Op::Posterize, 31, 10, 10).unwrap();
        assert_eq!((bits[0], bits[9], bits[30]), (8.0, 7.0, 4.0));
        let (bits, _) = magnitudes(Space::TrivialAugmentWide, Op::Posterize, 31, 10, 10).unwrap();
        assert_eq!(bits[30], 2.0);
        let (t, _) = magnitudes(Space::RandAugment, Op::TranslateX, 31, 10, 331).unwrap();
        assert!((t[30] - 150.0).abs() < 1e-4);
        assert!(magnitudes(Space::RandAugment, Op::Equalize, 31, 10, 10).is_none());
    }
}
