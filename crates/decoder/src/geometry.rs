//! torchvision's size and offset rules, as pure functions (tested in isolation).

use rand::Rng;

/// A rectangle of pixels: left column, top row, width, height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// Left column.
    pub x: usize,
    /// Top row.
    pub y: usize,
    /// Width.
    pub w: usize,
    /// Height.
    pub h: usize,
}

/// `Resize(size)` with an int: the shorter side becomes `size`, the longer
/// `int(size * long / short)` (truncated). Returns (height, width).
pub fn resize_shorter(height: usize, width: usize, size: usize) -> (usize, usize) {
    if height <= width {
        let long = (size as u128 * width as u128 / height.max(1) as u128) as usize;
        (size, long)
    } else {
        let long = (size as u128 * height as u128 / width.max(1) as u128) as usize;
        (long, size)
    }
}

/// Python's `round` (ties to even) of `n / 2` for a non-negative integer `n`, which is
/// what `int(round((H - h) / 2.0))` in torchvision's `center_crop` computes.
fn half_round_even(n: usize) -> usize {
    let half = n / 2;
    if n % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

/// `CenterCrop` offsets for a crop no larger than the image: (top, left).
pub fn center_crop_offsets(
    height: usize,
    width: usize,
    crop_h: usize,
    crop_w: usize,
) -> (usize, usize) {
    (
        half_round_even(height.saturating_sub(crop_h)),
        half_round_even(width.saturating_sub(crop_w)),
    )
}

/// torchvision's zero padding before a center crop larger than the image:
/// (left, top, right, bottom).
pub fn center_crop_padding(
    height: usize,
    width: usize,
    crop_h: usize,
    crop_w: usize,
) -> [usize; 4] {
    let pad_w = crop_w.saturating_sub(width);
    let pad_h = crop_h.saturating_sub(height);
    [pad_w / 2, pad_h / 2, pad_w.div_ceil(2), pad_h.div_ceil(2)]
}

/// `RandomResizedCrop.get_params`: up to 10 draws of an area fraction in `scale` and a
/// log-uniform aspect ratio in `ratio`; then a center crop with the ratio clamped.
pub fn random_resized_crop(
    rng: &mut impl Rng,
    height: usize,
    width: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Rect {
    let area = (height * width) as f64;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * uniform(rng, scale.0, scale.1);
        let aspect = uniform(rng, log_lo, log_hi).exp();
        let w = (target_area * aspect).sqrt().round_ties_even() as usize;
        let h = (target_area / aspect).sqrt().round_ties_even() as usize;
        if 0 < w && w <= width && 0 < h && h <= height {
            let y = rng.random_range(0..=height - h);
            let x = rng.random_range(0..=width - w);
            return Rect { x, y, w, h };
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (w, h) = if in_ratio < ratio.0.min(ratio.1) {
        (
            width,
            ((width as f64 / ratio.0.min(ratio.1)).round_ties_even() as usize).min(height),
        )
    } else if in_ratio > ratio.0.max(ratio.1) {
        (
            ((height as f64 * ratio.0.max(ratio.1)).round_ties_even() as usize).min(width),
            height,
        )
    } else {
        (width, height)
    };
    Rect {
        x: (width - w) / 2,
        y: (height - h) / 2,
        w: w.max(1),
        h: h.max(1),
    }
}

fn uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        rng.random_range(lo..hi)
    } else {
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn resize_follows_torchvision() {
        // torchvision: Resize(256) of a 500x375 (WxH) image gives 341x256.
        assert_eq!(resize_shorter(375, 500, 256), (256, 341));
        assert_eq!(resize_shorter(500, 375, 256), (341, 256));
        assert_eq!(resize_shorter(300, 300, 256), (256, 256));
        // int() truncates: 256 * 333 / 250 = 340.99...
        assert_eq!(resize_shorter(250, 333, 256), (256, 340));
    }

    #[test]
    fn center_crop_rounds_half_to_even_like_python() {
        // round(16.0) = 16; round(0.5) = 0; round(1.5) = 2; round(2.5) = 2
        assert_eq!(center_crop_offsets(256, 341, 224, 224), (16, 58)); // (341-224)/2 = 58.5 -> 58
        assert_eq!(center_crop_offsets(225, 225, 224, 224), (0, 0));
        assert_eq!(center_crop_offsets(227, 227, 224, 224), (2, 2));
        assert_eq!(center_crop_offsets(229, 229, 224, 224), (2, 2));
        assert_eq!(center_crop_padding(100, 200, 150, 150), [0, 25, 0, 25]);
        assert_eq!(center_crop_padding(101, 200, 150, 150), [0, 24, 0, 25]);
    }

    #[test]
    fn random_resized_crop_stays_inside_and_respects_its_ranges() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..2000 {
            let r = random_resized_crop(&mut rng, 375, 500, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0));
            assert!(r.x + r.w <= 500 && r.y + r.h <= 375, "{r:?}");
            let area = (r.w * r.h) as f64 / (375.0 * 500.0);
            assert!((0.07..=1.01).contains(&area), "{r:?} area {area}");
        }
    }

    #[test]
    fn random_resized_crop_falls_back_to_a_clamped_center_crop() {
        // A 1000x10 strip can never fit a crop of ratio <= 4/3 and area >= 8%.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let r = random_resized_crop(&mut rng, 10, 1000, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0));
        // in_ratio 100 > 4/3: h = 10, w = round(10 * 4/3) = 13, centered.
        assert_eq!(
            r,
            Rect {
                x: (1000 - 13) / 2,
                y: 0,
                w: 13,
                h: 10
            }
        );
    }
}
