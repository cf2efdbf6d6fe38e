//! Pillow's `ImageEnhance` (brightness, contrast, colour, sharpness) and the channel
//! arithmetic under it, to the byte: torchvision's `adjust_*` on a PIL image call these.

use crate::Image;

/// `Image.blend(degenerate, image, factor)` in place, as Pillow's `ImagingBlend` computes
/// it: f32 arithmetic, truncated, clamped only when the factor extrapolates.
fn blend_with(image: &mut Image, factor: f32, degenerate: impl Fn(usize) -> u8) {
    if factor == 1.0 {
        return;
    }
    let inside = (0.0..=1.0).contains(&factor);
    for (i, v) in image.data.iter_mut().enumerate() {
        let d = f32::from(degenerate(i));
        if factor == 0.0 {
            *v = d as u8;
            continue;
        }
        let t = d + factor * (f32::from(*v) - d);
        *v = if inside {
            t as u8
        } else if t <= 0.0 {
            0
        } else if t >= 255.0 {
            255
        } else {
            t as u8
        };
    }
}

/// ITU-R 601-2 luma as Pillow's `convert("L")` rounds it.
pub(crate) fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

/// `ImageEnhance.Brightness(image).enhance(factor)`: a blend with black.
pub(crate) fn brightness(image: &mut Image, factor: f32) {
    blend_with(image, factor, |_| 0);
}

/// `ImageEnhance.Contrast`: a blend with the grey of the image's mean luma.
pub(crate) fn contrast(image: &mut Image, factor: f32) {
    let c = image.channels;
    let (mut sum, n) = (0u64, (image.width * image.height) as u64);
    for px in image.data.chunks_exact(c) {
        sum += u64::from(if c >= 3 {
            luma(px[0], px[1], px[2])
        } else {
            px[0]
        });
    }
    let mean = if n == 0 {
        0
    } else {
        (sum as f64 / n as f64 + 0.5) as u8
    };
    blend_with(image, factor, |_| mean);
}

/// `ImageEnhance.Color` (saturation): a blend with the image's own luma as RGB; a grey
/// image is its own degenerate, so it does not change.
pub(crate) fn saturation(image: &mut Image, factor: f32) {
    if image.channels < 3 {
        return;
    }
    let c = image.channels;
    let grey: Vec<u8> = image
        .data
        .chunks_exact(c)
        .map(|px| luma(px[0], px[1], px[2]))
        .collect();
    blend_with(image, factor, |i| grey[i / c]);
}

/// `ImageEnhance.Sharpness`: a blend with `ImageFilter.SMOOTH` (a 3x3 kernel of ones with
/// 5 in the middle, over 13), whose border pixels Pillow leaves as they are.
pub(crate) fn sharpness(image: &mut Image, factor: f32) {
    let smooth = smooth(image);
    blend_with(image, factor, |i| smooth[i]);
}

fn smooth(image: &Image) -> Vec<u8> {
    let (w, h, c) = (image.width, image.height, image.channels);
    let mut out = image.data.clone();
    if w < 3 || h < 3 {
        return out;
    }
    let k = [1.0f32 / 13.0, 5.0 / 13.0];
    let at = |x: usize, y: usize, ch: usize| f32::from(image.data[(y * w + x) * c + ch]);
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for ch in 0..c {
                // Pillow's order of sums: row below, the row, row above, each left to right.
                let row = |yy: usize, mid: f32| {
                    at(x - 1, yy, ch) * k[0] + at(x, yy, ch) * mid + at(x + 1, yy, ch) * k[0]
                };
                let mut ss = 0.5f32;
                ss += row(y + 1, k[0]);
                ss += row(y, k[1]);
                ss += row(y - 1, k[0]);
                out[(y * w + x) * c + ch] = clip8(ss);
            }
        }
    }
    out
}

/// Pillow's `clip8`: clamp, then truncate.
pub(crate) fn clip8(v: f32) -> u8 {
    if v <= 0.0 {
        0
    } else if v >= 255.0 {
        255
    } else {
        v as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgb(data: Vec<u8>, width: usize) -> Image {
        Image {
            width,
            height: data.len() / 3 / width,
            channels: 3,
            data,
        }
    }

    #[test]
    fn blends_truncate_inside_and_clamp_outside() {
        let mut im = rgb(vec![100, 200, 255], 1);
        brightness(&mut im, 0.5);
        assert_eq!(im.data, [50, 100, 127]);
        let mut im = rgb(vec![100, 200, 255], 1);
        brightness(&mut im, 1.5);
        assert_eq!(im.data, [150, 255, 255]);
        let mut im = rgb(vec![10, 20, 30], 1);
        brightness(&mut im, 0.0);
        assert_eq!(im.data, [0, 0, 0]);
    }

    #[test]
    fn saturation_zero_is_pillows_grey() {
        let mut im = rgb(vec![255, 0, 0, 0, 255, 0], 2);
        saturation(&mut im, 0.0);
        // convert("L") of pure red and pure green.
        assert_eq!(im.data, [76, 76, 76, 150, 150, 150]);
    }

    #[test]
    fn smooth_keeps_the_border() {
        let mut data = vec![0u8; 3 * 3 * 3];
        data[4 * 3] = 130;
        let im = rgb(data, 3);
        let s = smooth(&im);
        assert_eq!(s[4 * 3], 50); // 130 * 5 / 13 + 0.5
        assert_eq!(s[0], 0);
    }
}
