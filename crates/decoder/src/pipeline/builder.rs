//! Building a pipeline step by step, in torchvision's order, with its parameters checked.

use std::sync::Arc;

use super::{Inner, Output, Pipeline, Transform};
use crate::resize::Filter;
use crate::{DecodeError, DecodeErrorKind, DecodeOptions, Result};

/// Builds a [`Pipeline`] step by step, in torchvision's order.
#[derive(Debug, Clone)]
pub struct PipelineBuilder {
    pub(super) transforms: Vec<Transform>,
    pub(super) output: Output,
    pub(super) decode: DecodeOptions,
    pub(super) seed: u64,
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
                _ => {}
            }
        }
        let lut = match &self.output {
            Output::U8Hwc => Vec::new(),
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
                lut,
            }),
        })
    }
}
