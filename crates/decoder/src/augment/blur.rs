//! torchvision's `GaussianBlur`: a separable Gaussian in f32 over reflect-padded edges,
//! rounded half to even, as its tensor kernel (which v2 also runs on PIL images) does.

use rand::Rng;

use crate::{DecodeError, DecodeErrorKind, Image, Result};

/// `GaussianBlur(kernel_size, sigma)`.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianBlur {
    /// The kernel's (width, height): odd and positive.
    pub kernel: (usize, usize),
    /// The standard deviation's range, drawn once per image for both axes.
    pub sigma: (f64, f64),
}

/// torch's `linspace` in f32 as its scalar CPU loop computes it (compiled with fused
/// multiply-adds): the first half counted from the start, the rest from the end. The
/// magnitude tables are boundaries (`int(16.0)` against `int(15.999999)`), so the last bit
/// matters. torch's vector loop, taken for 16 values or more on AVX2 machines (32 on
/// AVX-512), can differ from this in the last bit.
pub(crate) fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                step.mul_add(i as f32, start)
            } else {
                (-step).mul_add((steps - 1 - i) as f32, end)
            }
        })
        .collect()
}

/// v2's `_get_gaussian_kernel1d`: a softmax of `-(x / sigma)^2` over
/// `linspace(-lim, lim)` with `lim = (k - 1) / (2 sqrt 2)`.
fn kernel1d(size: usize, sigma: f32) -> Vec<f32> {
    let lim = (size as f64 - 1.0) / (2.0 * 2f64.sqrt());
    let x = linspace(-lim as f32, lim as f32, size);
    let v: Vec<f32> = x.iter().map(|x| -(x / sigma).powi(2)).collect();
    let max = v.iter().copied().fold(f32::MIN, f32::max);
    let e: Vec<f32> = v.iter().map(|v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|e| e / sum).collect()
}

/// torch's `reflect` padding index: the edge pixel is not repeated.
fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let i = if i < 0 { -i } else { i };
    (if i >= n { 2 * (n - 1) - i } else { i }) as usize
}

impl GaussianBlur {
    pub(crate) fn apply(&self, image: &Image, rng: &mut impl Rng) -> Result<Image> {
        let (lo, hi) = self.sigma;
        let sigma = (lo + (hi - lo) * rng.random::<f64>()) as f32;
        blur(image, self.kernel, sigma)
    }
}

pub(crate) fn blur(image: &Image, (kx, ky): (usize, usize), sigma: f32) -> Result<Image> {
    let (w, h, c) = (image.width, image.height, image.channels);
    if kx / 2 >= w || ky / 2 >= h {
        return Err(DecodeError::new(
            DecodeErrorKind::InvalidArgument,
            format!(
                "GaussianBlur(kernel_size=({kx}, {ky})) on a {w}x{h} image: the kernel's \
                 half-width must be smaller than the image (torch's reflect padding refuses \
                 it too); use a smaller kernel or blur after a larger resize"
            ),
        ));
    }
    let (wx, wy) = (kernel1d(kx, sigma), kernel1d(ky, sigma));
    let (rx, ry) = ((kx / 2) as isize, (ky / 2) as isize);
    let mut rows = vec![0f32; w * h * c];
    for y in 0..h {
        let line = &image.data[y * w * c..][..w * c];
        for x in 0..w {
            for ch in 0..c {
                let mut acc = 0f32;
                for (k, wk) in wx.iter().enumerate() {
                    let xs = reflect(x as isize + k as isize - rx, w);
                    acc += wk * f32::from(line[xs * c + ch]);
                }
                rows[(y * w + x) * c + ch] = acc;
            }
        }
    }
    let mut data = vec![0u8; w * h * c];
    for y in 0..h {
        for x in 0..w {
            for ch in 0..c {
                let mut acc = 0f32;
                for (k, wk) in wy.iter().enumerate() {
                    let ys = reflect(y as isize + k as isize - ry, h);
                    acc += wk * rows[(ys * w + x) * c + ch];
                }
                data[(y * w + x) * c + ch] = acc.round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
    Ok(Image {
        width: w,
        height: h,
        channels: c,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_sum_to_one_and_flat_images_stay_flat() {
        let k = kernel1d(5, 1.2);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(k[2] > k[1] && k[1] > k[0] && (k[0] - k[4]).abs() < 1e-9);
        let im = Image {
            width: 6,
            height: 5,
            channels: 3,
            data: vec![77; 90],
        };
        assert_eq!(blur(&im, (3, 5), 0.8).unwrap().data, im.data);
        assert!(blur(&im, (13, 3), 0.8).is_err());
        assert_eq!(reflect(-1, 4), 1);
        assert_eq!(reflect(4, 4), 2);
    }
}
