//! Pillow's `ImageOps` level maps (posterize, solarize, autocontrast, equalize): a lookup
//! table per channel, built as Pillow builds it.

use crate::Image;

fn apply(image: &mut Image, luts: &[[u8; 256]]) {
    let c = image.channels;
    for px in image.data.chunks_exact_mut(c) {
        for (v, lut) in px.iter_mut().zip(luts) {
            *v = lut[usize::from(*v)];
        }
    }
}

fn same_for_all(image: &mut Image, lut: [u8; 256]) {
    let luts = vec![lut; image.channels];
    apply(image, &luts);
}

fn histograms(image: &Image) -> Vec<[u64; 256]> {
    let c = image.channels;
    let mut h = vec![[0u64; 256]; c];
    for px in image.data.chunks_exact(c) {
        for (ch, v) in px.iter().enumerate() {
            h[ch][usize::from(*v)] += 1;
        }
    }
    h
}

/// `ImageOps.posterize(image, bits)`: keep the top `bits` bits (1 to 8).
pub(crate) fn posterize(image: &mut Image, bits: u8) {
    let mask = !((1u16 << (8 - bits.clamp(1, 8))) - 1) as u8;
    same_for_all(image, std::array::from_fn(|i| i as u8 & mask));
}

/// `ImageOps.solarize(image, threshold)`: invert every value at or above the threshold.
pub(crate) fn solarize(image: &mut Image, threshold: f64) {
    same_for_all(
        image,
        std::array::from_fn(|i| {
            if (i as f64) < threshold {
                i as u8
            } else {
                255 - i as u8
            }
        }),
    );
}

/// `ImageOps.autocontrast(image)`: stretch each channel's range to 0-255.
pub(crate) fn autocontrast(image: &mut Image) {
    let luts: Vec<[u8; 256]> = histograms(image)
        .iter()
        .map(|h| {
            let lo = h.iter().position(|&n| n > 0).unwrap_or(0);
            let hi = h.iter().rposition(|&n| n > 0).unwrap_or(0);
            if hi <= lo {
                return std::array::from_fn(|i| i as u8);
            }
            let scale = 255.0 / (hi - lo) as f64;
            let offset = -(lo as f64) * scale;
            std::array::from_fn(|i| (i as f64 * scale + offset).clamp(0.0, 255.0) as i64 as u8)
        })
        .collect();
    apply(image, &luts);
}

/// `ImageOps.equalize(image)`: each channel's histogram made flat, Pillow's way.
pub(crate) fn equalize(image: &mut Image) {
    let luts: Vec<[u8; 256]> = histograms(image)
        .iter()
        .map(|h| {
            let used: Vec<u64> = h.iter().copied().filter(|&n| n > 0).collect();
            let identity = std::array::from_fn(|i| i as u8);
            if used.len() <= 1 {
                return identity;
            }
            let step = (used.iter().sum::<u64>() - used[used.len() - 1]) / 255;
            if step == 0 {
                return identity;
            }
            let mut n = step / 2;
            std::array::from_fn(|i| {
                let v = (n / step).min(255) as u8;
                n += h[i];
                v
            })
        })
        .collect();
    apply(image, &luts);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grey(data: Vec<u8>) -> Image {
        Image {
            width: data.len(),
            height: 1,
            channels: 1,
            data,
        }
    }

    #[test]
    fn level_maps() {
        let mut im = grey(vec![0, 37, 200, 255]);
        posterize(&mut im, 2);
        assert_eq!(im.data, [0, 0, 192, 192]);
        let mut im = grey(vec![0, 100, 178, 179, 255]);
        solarize(&mut im, 178.5);
        assert_eq!(im.data, [0, 100, 178, 76, 0]);
        let mut im = grey(vec![50, 100, 150]);
        autocontrast(&mut im);
        assert_eq!(im.data, [0, 127, 255]);
        let mut im = grey(vec![7, 7, 7]);
        equalize(&mut im);
        assert_eq!(im.data, [7, 7, 7]);
    }
}
