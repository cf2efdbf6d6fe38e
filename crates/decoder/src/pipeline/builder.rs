//! Building a pipeline step by step, in torchvision's order, with its parameters checked.

use std::sync::Arc;

use super::{Inner, Output, Pipeline, Transform};
use crate::augment::{EraseValue, RandomErasing};
use crate::resize::Filter;
use crate::{DecodeError, DecodeErrorKind, DecodeOptions, Result};

/// Builds a [`Pipeline`] step by step, in torchvision's order.
#[derive(Debug, Clone)]
pub struct PipelineBuilder {
    pub(super) transforms: Vec<Transform>,
    pub(super) output: Output,
    pub(super) decode: DecodeOptions,
    pub(super) seed: u64,
    pub(super) erasing: Vec<RandomErasing>,
}

impl PipelineBuilder {
    /// Add any transform.
    pub fn then(mut self, transform: Transform) -> Self {
        self.transforms.push(transform);
        self
    }

    /// `Resize(size)` with the bilinear filter.
    pub fn resize(self, size: usize) -> Self {
        self.then(Transform::Resize {
            size,
            filter: Filter::Bilinear,
        })
    }

    /// `CenterCrop(size)`.
    pub fn center_crop(self, size: usize) -> Self {
        self.then(Transform::CenterCrop {
            height: size,
            width: size,
        })
    }

    /// `RandomResizedCrop(size)` with the default scale (0.08, 1) and ratio (3/4, 4/3).
    pub fn random_resized_crop(self, size: usize) -> Self {
        self.then(Transform::RandomResizedCrop {
            height: size,
            width: size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            filter: Filter::Bilinear,
        })
    }

    /// `RandomHorizontalFlip(p)`.
    pub fn random_horizontal_flip(self, p: f64) -> Self {
        self.then(Transform::RandomHorizontalFlip { p })
    }

    /// `ToTensor()` followed by `Normalize(mean, std)`.
    pub fn to_tensor_normalized(mut self, mean: &[f32], std: &[f32]) -> Self {
        self.output = Output::F32Chw {
            mean: mean.to_vec(),
            std: std.to_vec(),
        };
        self
    }

    /// `ToImage()` (or `PILToTensor()`): u8 CHW, as a tensor of the pixels.
    pub fn to_image(mut self) -> Self {
        self.output = Output::U8Chw;
        self
    }

    /// `RandomErasing(...)` on the output (after [`to_tensor_normalized`] or
    /// [`to_image`]); several run in order.
    ///
    /// [`to_tensor_normalized`]: Self::to_tensor_normalized
    /// [`to_image`]: Self::to_image
    pub fn random_erasing(mut self, erasing: RandomErasing) -> Self {
        self.erasing.push(erasing);
        self
    }

    /// Keep u8 HWC pixels (the default output).
    pub fn to_u8(mut self) -> Self {
        self.output = Output::U8Hwc;
        self
    }

    /// The seed of the random transforms.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Decoder settings (pixel budget, colour mode).
    pub fn decode_options(mut self, options: DecodeOptions) -> Self {
        self.decode = options;
        self
    }

    /// Check the parameters and build.
    pub fn build(self) -> Result<Pipeline> {
        let invalid = |m: String| DecodeError::new(DecodeErrorKind::InvalidArgument, m);
        for t in &self.transforms {
            match *t {
                Transform::Resize { size: 0, .. } => {
                    return Err(invalid("Resize to 0 pixels".into()));
                }
                Transform::CenterCrop { height, width }
                | Transform::RandomResizedCrop { height, width, .. }
                    if height == 0 || width == 0 =>
                {
                    return Err(invalid(format!("a {height}x{width} crop")));
                }
                Transform::RandomResizedCrop { scale, ratio, .. }
                    if !(0.0 < scale.0
                        && scale.0 <= scale.1
                        && 0.0 < ratio.0
                        && ratio.0 <= ratio.1) =>
                {
                    return Err(invalid(format!(
                        "RandomResizedCrop scale {scale:?} / ratio {ratio:?}"
                    )));
                }
                Transform::RandomHorizontalFlip { p } if !(0.0..=1.0).contains(&p) => {
                    return Err(invalid(format!("flip probability {p}")));
                }
                _ => check_augment(t).map_err(invalid)?,
            }
        }
        for e in &self.erasing {
            check_erasing(e, &self.output).map_err(invalid)?;
        }
        let lut = match &self.output {
            Output::U8Hwc | Output::U8Chw => Vec::new(),
            Output::F32Chw { mean, std } => {
                if mean.len() != std.len()
                    || mean.is_empty()
                    || std.iter().any(|s| *s == 0.0 || !s.is_finite())
                {
                    return Err(invalid(format!("Normalize mean {mean:?} / std {std:?}")));
                }
                mean.iter()
                    .zip(std)
                    .map(|(m, s)| std::array::from_fn(|v| ((v as f32 / 255.0) - m) / s))
                    .collect()
            }
        };
        Ok(Pipeline {
            inner: Arc::new(Inner {
                transforms: self.transforms,
                output: self.output,
                decode: self.decode,
                seed: self.seed,
                erasing: self.erasing,
                lut,
            }),
        })
    }
}

fn range_ok((lo, hi): (f64, f64)) -> bool {
    lo.is_finite() && hi.is_finite() && lo <= hi
}

/// The parameters torchvision would refuse (or that would make no sense), said in its terms.
fn check_augment(t: &Transform) -> std::result::Result<(), String> {
    match t {
        Transform::ColorJitter(j) => {
            for (name, r) in [
                ("brightness", j.brightness),
                ("contrast", j.contrast),
                ("saturation", j.saturation),
            ] {
                if let Some(r) = r
                    && (!range_ok(r) || r.0 < 0.0)
                {
                    return Err(format!(
                        "ColorJitter {name} range {r:?}: non-negative, min <= max"
                    ));
                }
            }
            if let Some(r) = j.hue
                && (!range_ok(r) || r.0 < -0.5 || r.1 > 0.5)
            {
                return Err(format!(
                    "ColorJitter hue range {r:?}: within -0.5 to 0.5, min <= max"
                ));
            }
        }
        Transform::RandAugment(a) => {
            if a.num_magnitude_bins < 2 || a.magnitude >= a.num_magnitude_bins {
                return Err(format!(
                    "RandAugment(magnitude={}, num_magnitude_bins={}): at least 2 bins and a \
                     magnitude below their number",
                    a.magnitude, a.num_magnitude_bins
                ));
            }
            if a.num_ops > 64 {
                return Err(format!("RandAugment(num_ops={}): at most 64", a.num_ops));
            }
        }
        Transform::TrivialAugmentWide(a) if a.num_magnitude_bins < 2 => {
            return Err(format!(
                "TrivialAugmentWide(num_magnitude_bins={}): at least 2",
                a.num_magnitude_bins
            ));
        }
        Transform::GaussianBlur(b) => {
            let (kx, ky) = b.kernel;
            if kx % 2 == 0 || ky % 2 == 0 || kx > 1001 || ky > 1001 {
                return Err(format!(
                    "GaussianBlur kernel_size ({kx}, {ky}): odd and positive, at most 1001"
                ));
            }
            if !range_ok(b.sigma) || b.sigma.0 <= 0.0 {
                return Err(format!(
                    "GaussianBlur sigma {:?}: positive, min <= max",
                    b.sigma
                ));
            }
        }
        Transform::RandomRotation(r) if !range_ok(r.degrees) => {
            return Err(format!(
                "RandomRotation degrees {:?}: min <= max",
                r.degrees
            ));
        }
        Transform::RandomAffine(a) => {
            if !range_ok(a.degrees) {
                return Err(format!("RandomAffine degrees {:?}: min <= max", a.degrees));
            }
            if let Some((x, y)) = a.translate
                && !((0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y))
            {
                return Err(format!(
                    "RandomAffine translate ({x}, {y}): each between 0 and 1"
                ));
            }
            if let Some(s) = a.scale
                && (!range_ok(s) || s.0 <= 0.0)
            {
                return Err(format!("RandomAffine scale {s:?}: positive, min <= max"));
            }
            if let Some([a0, a1, b0, b1]) = a.shear
                && (!range_ok((a0, a1)) || !range_ok((b0, b1)))
            {
                return Err(format!("RandomAffine shear {:?}: min <= max", a.shear));
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_erasing(e: &RandomErasing, output: &Output) -> std::result::Result<(), String> {
    if !(0.0..=1.0).contains(&e.p) {
        return Err(format!("RandomErasing p={}: between 0 and 1", e.p));
    }
    if !range_ok(e.scale) || e.scale.0 < 0.0 || e.scale.1 > 1.0 {
        return Err(format!(
            "RandomErasing scale {:?}: within 0 to 1, min <= max",
            e.scale
        ));
    }
    if !range_ok(e.ratio) || e.ratio.0 <= 0.0 {
        return Err(format!(
            "RandomErasing ratio {:?}: positive, min <= max",
            e.ratio
        ));
    }
    match (&e.value, output) {
        (_, Output::U8Hwc) => {
            return Err(
                "RandomErasing runs on a tensor: put it after ToTensor, ToImage or ToDtype".into(),
            );
        }
        (EraseValue::Random, Output::U8Chw) => {
            return Err(
                "RandomErasing(value='random') on a uint8 tensor: normal noise is not a \
                        byte; put it after ToDtype(torch.float32, scale=True)"
                    .into(),
            );
        }
        (EraseValue::Constant(v), _) if !(v.len() == 1 || v.len() == 3) => {
            return Err(format!(
                "RandomErasing value {v:?}: one value, or one per channel"
            ));
        }
        (EraseValue::Constant(v), Output::U8Chw)
            if v.iter()
                .any(|x| x.fract() != 0.0 || !(0.0..=255.0).contains(x)) =>
        {
            return Err(format!(
                "RandomErasing value {v:?} on a uint8 tensor: whole numbers from 0 to 255"
            ));
        }
        _ => {}
    }
    Ok(())
}
