//! torchvision's `ColorJitter`: brightness, contrast, saturation and hue factors drawn
//! from their ranges, applied in a random order.

use rand::Rng;
use rand::seq::SliceRandom;

use super::enhance::{brightness, contrast, saturation};
use super::hue::adjust_hue;
use crate::Image;

/// `ColorJitter(brightness, contrast, saturation, hue)`, each as the `(min, max)` range
/// torchvision stores (`None` when the factor is left alone).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColorJitter {
    /// Brightness factors (1 keeps the image).
    pub brightness: Option<(f64, f64)>,
    /// Contrast factors.
    pub contrast: Option<(f64, f64)>,
    /// Saturation factors.
    pub saturation: Option<(f64, f64)>,
    /// Hue shifts, in turns, within -0.5 to 0.5.
    pub hue: Option<(f64, f64)>,
}

impl ColorJitter {
    pub(crate) fn apply(&self, image: &mut Image, rng: &mut impl Rng) {
        let mut order = [0u8, 1, 2, 3];
        order.shuffle(rng);
        let mut draw =
            |range: Option<(f64, f64)>| range.map(|(lo, hi)| lo + (hi - lo) * rng.random::<f64>());
        let factors = [
            draw(self.brightness),
            draw(self.contrast),
            draw(self.saturation),
            draw(self.hue),
        ];
        for op in order {
            let Some(f) = factors[usize::from(op)] else {
                continue;
            };
            match op {
                0 => brightness(image, f as f32),
                1 => contrast(image, f as f32),
                2 => saturation(image, f as f32),
                _ => adjust_hue(image, f),
            }
        }
    }
}
