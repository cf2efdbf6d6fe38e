//! A transform spec: the steps of a pipeline as data, by torchvision's names, so a front
//! end (the Python package) hands over a list and every rule of building it lives here.
//!
//! ```
//! use loader_decoder::TransformSpec;
//!
//! let spec: Vec<TransformSpec> = serde_json::from_str(
//!     r#"[{"step": "Resize", "size": 256}, {"step": "CenterCrop", "size": 224},
//!         {"step": "ToTensor"}, {"step": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}]"#,
//! ).unwrap();
//! let pipeline = TransformSpec::pipeline(&spec, 0).unwrap();
//! assert_eq!(pipeline.output_shape(), Some([3, 224, 224]));
//! ```

use serde::{Deserialize, Serialize};

use crate::augment::{
    ColorJitter, EraseValue, Fill, GaussianBlur, Interpolation, RandAugment, RandomAffine,
    RandomErasing, RandomRotation, TrivialAugmentWide,
};
use crate::error::{DecodeError, DecodeErrorKind, Result};
use crate::pipeline::{IMAGENET_MEAN, IMAGENET_STD, Pipeline, Transform};
use crate::resize::Filter;

/// A size as torchvision takes it: one number (a square, or a resize's shorter side) or
/// `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// Both sides.
    Square(usize),
    /// `[height, width]`.
    HeightWidth([usize; 2]),
}

/// One step of a pipeline, tagged `"step"` with torchvision's class name; the fields are
/// the class's parameters the native pipeline runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", deny_unknown_fields)]
#[non_exhaustive]
pub enum TransformSpec {
    /// `Resize(size, interpolation)`: the shorter side becomes `size` (antialiased, as
    /// torchvision's on PIL images).
    Resize {
        /// The shorter side.
        size: usize,
        /// Bilinear (the default) or bicubic.
        #[serde(default)]
        interpolation: Interp,
    },
    /// `CenterCrop(size)`.
    CenterCrop {
        /// The crop.
        size: Size,
    },
    /// `RandomResizedCrop(size, scale, ratio)` (bilinear, antialiased).
    RandomResizedCrop {
        /// The output.
        size: Size,
        /// The crop's area as a share of the image's, drawn between these.
        #[serde(default = "default_scale")]
        scale: (f64, f64),
        /// The crop's aspect ratio (width / height), drawn log-uniformly between these.
        #[serde(default = "default_ratio")]
        ratio: (f64, f64),
        /// Bilinear (the default) or bicubic.
        #[serde(default)]
        interpolation: Interp,
    },
    /// `RandomHorizontalFlip(p)`.
    RandomHorizontalFlip {
        /// The chance of a flip.
        #[serde(default = "half")]
        p: f64,
    },
    /// `ColorJitter(brightness, contrast, saturation, hue)`: each an amount (torchvision's
    /// number: `[max(0, 1 - x), 1 + x]`, or `[-x, x]` for the hue) or a `[min, max]` range.
    ColorJitter {
        /// Brightness.
        #[serde(default)]
        brightness: Option<Amount>,
        /// Contrast.
        #[serde(default)]
        contrast: Option<Amount>,
        /// Saturation.
        #[serde(default)]
        saturation: Option<Amount>,
        /// Hue, in turns (at most 0.5).
        #[serde(default)]
        hue: Option<Amount>,
    },
    /// `RandAugment(num_ops, magnitude, num_magnitude_bins, interpolation, fill)`.
    RandAugment {
        /// Operations per image.
        #[serde(default = "two")]
        num_ops: usize,
        /// The magnitude's bin.
        #[serde(default = "nine")]
        magnitude: usize,
        /// Bins.
        #[serde(default = "bins")]
        num_magnitude_bins: usize,
        /// Nearest (the default) or bilinear.
        #[serde(default = "nearest")]
        interpolation: Interp,
        /// The fill of uncovered pixels: a number or one per channel (0 when absent).
        #[serde(default)]
        fill: Option<Amount>,
    },
    /// `TrivialAugmentWide(num_magnitude_bins, interpolation, fill)`.
    TrivialAugmentWide {
        /// Bins.
        #[serde(default = "bins")]
        num_magnitude_bins: usize,
        /// Nearest (the default) or bilinear.
        #[serde(default = "nearest")]
        interpolation: Interp,
        /// The fill of uncovered pixels.
        #[serde(default)]
        fill: Option<Amount>,
    },
    /// `GaussianBlur(kernel_size, sigma)`.
    GaussianBlur {
        /// One odd size, or `[width, height]` (torchvision's `(kx, ky)`).
        kernel_size: Size,
        /// One sigma or a `[min, max]` range (default `[0.1, 2.0]`).
        #[serde(default = "default_sigma")]
        sigma: Amount,
    },
    /// `RandomRotation(degrees, interpolation, expand, center, fill)`.
    RandomRotation {
        /// `d` for `[-d, d]`, or `[min, max]`.
        degrees: Amount,
        /// Nearest (the default) or bilinear.
        #[serde(default = "nearest")]
        interpolation: Interp,
        /// Grow the output to hold the rotated image.
        #[serde(default)]
        expand: bool,
        /// `[x, y]`; the middle when absent.
        #[serde(default)]
        center: Option<(f64, f64)>,
        /// The fill of uncovered pixels.
        #[serde(default)]
        fill: Option<Amount>,
    },
    /// `RandomAffine(degrees, translate, scale, shear, interpolation, fill, center)`.
    RandomAffine {
        /// `d` for `[-d, d]`, or `[min, max]`.
        degrees: Amount,
        /// The largest shift as a share of `[width, height]`.
        #[serde(default)]
        translate: Option<(f64, f64)>,
        /// The scale's `[min, max]`.
        #[serde(default)]
        scale: Option<(f64, f64)>,
        /// `s` for x in `[-s, s]`, `[min, max]` for x, or `[xmin, xmax, ymin, ymax]`.
        #[serde(default)]
        shear: Option<Amount>,
        /// Nearest (the default) or bilinear.
        #[serde(default = "nearest")]
        interpolation: Interp,
        /// The fill of uncovered pixels.
        #[serde(default)]
        fill: Option<Amount>,
        /// `[x, y]`; the middle when absent.
        #[serde(default)]
        center: Option<(f64, f64)>,
    },
    /// `ToTensor()`: float32 CHW in [0, 1].
    ToTensor,
    /// v2's `ToImage()`: a uint8 CHW tensor of the pixels.
    ToImage,
    /// `PILToTensor()`: the same as `ToImage`.
    PILToTensor,
    /// v2's `ToDtype(torch.float32, scale=True)` after `ToImage`: what `ToTensor` gives.
    ToDtype {
        /// `"float32"` (the only one native).
        dtype: String,
        /// Scale to [0, 1] (must be true natively).
        #[serde(default)]
        scale: bool,
    },
    /// `RandomErasing(p, scale, ratio, value)`, on the tensor.
    RandomErasing {
        /// The chance of erasing.
        #[serde(default = "half")]
        p: f64,
        /// The area's share range.
        #[serde(default = "erase_scale")]
        scale: (f64, f64),
        /// The aspect ratio's range.
        #[serde(default = "erase_ratio")]
        ratio: (f64, f64),
        /// A number, one per channel, or `"random"` (default 0).
        #[serde(default)]
        value: Option<EraseWith>,
    },
    /// `Normalize(mean, std)`, after `ToTensor`.
    Normalize {
        /// Per channel.
        mean: Vec<f32>,
        /// Per channel.
        std: Vec<f32>,
    },
    /// `Normalize` with ImageNet's mean and std.
    ImageNetNormalize,
}

/// An interpolation by torchvision's `InterpolationMode` names, lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interp {
    /// `NEAREST`.
    Nearest,
    /// `BILINEAR`.
    #[default]
    Bilinear,
    /// `BICUBIC`.
    Bicubic,
}

/// A parameter torchvision takes as one number or as several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    /// One number.
    One(f64),
    /// A list.
    Many(Vec<f64>),
}

/// What `RandomErasing` writes: a number, one per channel, or `"random"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EraseWith {
    /// Numbers.
    Values(Amount),
    /// `"random"`.
    Word(String),
}

fn two() -> usize {
    2
}

fn nine() -> usize {
    9
}

fn bins() -> usize {
    31
}

fn nearest() -> Interp {
    Interp::Nearest
}

fn default_sigma() -> Amount {
    Amount::Many(vec![0.1, 2.0])
}

fn erase_scale() -> (f64, f64) {
    (0.02, 0.33)
}

fn erase_ratio() -> (f64, f64) {
    (0.3, 3.3)
}

fn default_scale() -> (f64, f64) {
    (0.08, 1.0)
}

fn default_ratio() -> (f64, f64) {
    (3.0 / 4.0, 4.0 / 3.0)
}

fn half() -> f64 {
    0.5
}

/// Every step a spec may name, with its fields in the order torchvision takes them
/// positionally: front ends take their list of supported steps from here.
pub const TRANSFORM_STEPS: &[(&str, &[&str])] = &[
    ("Resize", &["size", "interpolation"]),
    ("CenterCrop", &["size"]),
    (
        "RandomResizedCrop",
        &["size", "scale", "ratio", "interpolation"],
    ),
    ("RandomHorizontalFlip", &["p"]),
    (
        "ColorJitter",
        &["brightness", "contrast", "saturation", "hue"],
    ),
    (
        "RandAugment",
        &[
            "num_ops",
            "magnitude",
            "num_magnitude_bins",
            "interpolation",
            "fill",
        ],
    ),
    (
        "TrivialAugmentWide",
        &["num_magnitude_bins", "interpolation", "fill"],
    ),
    ("GaussianBlur", &["kernel_size", "sigma"]),
    (
        "RandomRotation",
        &["degrees", "interpolation", "expand", "center", "fill"],
    ),
    (
        "RandomAffine",
        &[
            "degrees",
            "translate",
            "scale",
            "shear",
            "interpolation",
            "fill",
            "center",
        ],
    ),
    ("ToTensor", &[]),
    ("ToImage", &[]),
    ("PILToTensor", &[]),
    ("ToDtype", &["dtype", "scale"]),
    ("RandomErasing", &["p", "scale", "ratio", "value"]),
    ("Normalize", &["mean", "std"]),
    ("ImageNetNormalize", &[]),
];

/// The largest side a spec may ask for, so a typo cannot ask for terabytes of pixels.
const MAX_SIDE: usize = 1_000_000;

impl TransformSpec {
    /// torchvision's class name.
    pub fn name(&self) -> &'static str {
        match self {
            TransformSpec::Resize { .. } => "Resize",
            TransformSpec::CenterCrop { .. } => "CenterCrop",
            TransformSpec::RandomResizedCrop { .. } => "RandomResizedCrop",
            TransformSpec::RandomHorizontalFlip { .. } => "RandomHorizontalFlip",
            TransformSpec::ColorJitter { .. } => "ColorJitter",
            TransformSpec::RandAugment { .. } => "RandAugment",
            TransformSpec::TrivialAugmentWide { .. } => "TrivialAugmentWide",
            TransformSpec::GaussianBlur { .. } => "GaussianBlur",
            TransformSpec::RandomRotation { .. } => "RandomRotation",
            TransformSpec::RandomAffine { .. } => "RandomAffine",
            TransformSpec::ToTensor => "ToTensor",
            TransformSpec::ToImage => "ToImage",
            TransformSpec::PILToTensor => "PILToTensor",
            TransformSpec::ToDtype { .. } => "ToDtype",
            TransformSpec::RandomErasing { .. } => "RandomErasing",
            TransformSpec::Normalize { .. } => "Normalize",
            TransformSpec::ImageNetNormalize => "ImageNetNormalize",
        }
    }

    /// The pipeline of `steps`, in torchvision's order: the steps on the image, then
    /// `ToTensor` (or `ToImage`, optionally `ToDtype(float32, scale=True)`), then
    /// `Normalize`, with `RandomErasing` anywhere on the tensor. A spec out of that order is
    /// refused, never run as some other pipeline (a `Normalize` before `ToTensor` was once
    /// silently dropped).
    pub fn pipeline(steps: &[TransformSpec], seed: u64) -> Result<Pipeline> {
        let mut builder = Pipeline::builder().seed(seed);
        let mut stage = Stage::Image;
        for step in steps {
            let name = step.name();
            stage = match (step, stage) {
                (TransformSpec::ToTensor, Stage::Image) => Stage::Float,
                (TransformSpec::ToImage | TransformSpec::PILToTensor, Stage::Image) => Stage::Bytes,
                (TransformSpec::ToDtype { .. }, Stage::Image) => {
                    return Err(invalid(
                        "ToDtype before ToImage: torchvision passes a PIL image through \
                         ToDtype unchanged; put ToImage first",
                    ));
                }
                (TransformSpec::ToDtype { dtype, scale }, Stage::Bytes) => {
                    if dtype != "float32" || !scale {
                        return Err(invalid(format!(
                            "ToDtype({dtype}, scale={scale}): only ToDtype(torch.float32, \
                             scale=True) is native (the [0, 1] floats of ToTensor); pass \
                             other conversions as a callable"
                        )));
                    }
                    Stage::Float
                }
                (
                    TransformSpec::ToTensor
                    | TransformSpec::ToImage
                    | TransformSpec::PILToTensor
                    | TransformSpec::ToDtype { .. },
                    _,
                ) => {
                    return Err(invalid(format!(
                        "{name} after the image is already a tensor: ToTensor twice, or \
                         ToImage then ToTensor (torchvision raises too); convert once"
                    )));
                }
                (TransformSpec::Normalize { .. } | TransformSpec::ImageNetNormalize, s) => {
                    match s {
                        Stage::Float => Stage::Normalized,
                        Stage::Normalized => {
                            return Err(invalid(
                                "Normalize twice: the native pipeline normalizes once; fold the \
                             two into one",
                            ));
                        }
                        Stage::Bytes => {
                            return Err(invalid(format!(
                                "{name} of a uint8 tensor: Normalize takes floats; put \
                             ToDtype(torch.float32, scale=True) before it"
                            )));
                        }
                        Stage::Image => {
                            return Err(invalid(format!(
                                "{name} before ToTensor: Normalize takes a float tensor \
                             (torchvision raises too); put ToTensor first"
                            )));
                        }
                    }
                }
                (TransformSpec::RandomErasing { .. }, Stage::Image) => {
                    return Err(invalid(
                        "RandomErasing on the image: it erases a tensor; put it after \
                         ToTensor (or ToImage), as torchvision's examples do",
                    ));
                }
                (TransformSpec::RandomErasing { .. }, s) => s,
                (_, Stage::Image) => Stage::Image,
                (_, Stage::Bytes) => {
                    return Err(invalid(format!(
                        "{name} after ToImage: native steps compute Pillow's pixels (the PIL \
                         image before ToImage), torchvision's tensor kernels others; put it \
                         before ToImage, or pass the pipeline as a callable"
                    )));
                }
                (_, _) => {
                    return Err(invalid(format!(
                        "{name} after ToTensor: native steps run on the uint8 image, before \
                         ToTensor (torchvision would run it on the float tensor, with other \
                         pixels); put it before ToTensor, or pass the pipeline as a callable"
                    )));
                }
            };
            builder = step.add_to(builder, stage)?;
        }
        builder.build()
    }

    fn add_to(
        &self,
        builder: crate::PipelineBuilder,
        stage: Stage,
    ) -> Result<crate::PipelineBuilder> {
        let name = self.name();
        Ok(match self {
            TransformSpec::Resize {
                size,
                interpolation,
            } => builder.then(Transform::Resize {
                size: side(name, *size)?,
                filter: resize_filter(name, *interpolation)?,
            }),
            TransformSpec::CenterCrop { size } => {
                let (height, width) = sides(name, *size)?;
                builder.then(Transform::CenterCrop { height, width })
            }
            TransformSpec::RandomResizedCrop {
                size,
                scale,
                ratio,
                interpolation,
            } => {
                let (height, width) = sides(name, *size)?;
                builder.then(Transform::RandomResizedCrop {
                    height,
                    width,
                    scale: *scale,
                    ratio: *ratio,
                    filter: resize_filter(name, *interpolation)?,
                })
            }
            TransformSpec::RandomHorizontalFlip { p } => {
                if !(0.0..=1.0).contains(p) {
                    return Err(invalid(format!("{name}(p={p}): p must be between 0 and 1")));
                }
                builder.random_horizontal_flip(*p)
            }
            TransformSpec::ColorJitter {
                brightness,
                contrast,
                saturation,
                hue,
            } => builder.then(Transform::ColorJitter(ColorJitter {
                brightness: jitter(name, "brightness", brightness, false)?,
                contrast: jitter(name, "contrast", contrast, false)?,
                saturation: jitter(name, "saturation", saturation, false)?,
                hue: jitter(name, "hue", hue, true)?,
            })),
            TransformSpec::RandAugment {
                num_ops,
                magnitude,
                num_magnitude_bins,
                interpolation,
                fill: f,
            } => builder.then(Transform::RandAugment(RandAugment {
                num_ops: *num_ops,
                magnitude: *magnitude,
                num_magnitude_bins: *num_magnitude_bins,
                interpolation: warp(name, *interpolation)?,
                fill: fill(name, f)?,
            })),
            TransformSpec::TrivialAugmentWide {
                num_magnitude_bins,
                interpolation,
                fill: f,
            } => builder.then(Transform::TrivialAugmentWide(TrivialAugmentWide {
                num_magnitude_bins: *num_magnitude_bins,
                interpolation: warp(name, *interpolation)?,
                fill: fill(name, f)?,
            })),
            TransformSpec::GaussianBlur { kernel_size, sigma } => {
                let kernel = match *kernel_size {
                    Size::Square(k) => (k, k),
                    Size::HeightWidth([kx, ky]) => (kx, ky),
                };
                let sigma = match sigma {
                    Amount::One(s) => (*s, *s),
                    Amount::Many(v) => pair(name, "sigma", v)?,
                };
                builder.then(Transform::GaussianBlur(GaussianBlur { kernel, sigma }))
            }
            TransformSpec::RandomRotation {
                degrees,
                interpolation,
                expand,
                center,
                fill: f,
            } => builder.then(Transform::RandomRotation(RandomRotation {
                degrees: symmetric(name, "degrees", degrees)?,
                interpolation: warp(name, *interpolation)?,
                expand: *expand,
                center: *center,
                fill: fill(name, f)?,
            })),
            TransformSpec::RandomAffine {
                degrees,
                translate,
                scale,
                shear,
                interpolation,
                fill: f,
                center,
            } => {
                let shear = match shear {
                    None => None,
                    Some(Amount::One(s)) => Some([-s.abs(), s.abs(), 0.0, 0.0]),
                    Some(Amount::Many(v)) => Some(match v[..] {
                        [a, b] => [a, b, 0.0, 0.0],
                        [a, b, c, d] => [a, b, c, d],
                        _ => {
                            return Err(invalid(format!(
                                "{name}(shear={v:?}): one number, two or four"
                            )));
                        }
                    }),
                };
                builder.then(Transform::RandomAffine(RandomAffine {
                    degrees: symmetric(name, "degrees", degrees)?,
                    translate: *translate,
                    scale: *scale,
                    shear,
                    interpolation: warp(name, *interpolation)?,
                    fill: fill(name, f)?,
                    center: *center,
                }))
            }
            TransformSpec::ToTensor | TransformSpec::ToDtype { .. } => {
                builder.to_tensor_normalized(&[0.0; 3], &[1.0; 3])
            }
            TransformSpec::ToImage | TransformSpec::PILToTensor => builder.to_image(),
            TransformSpec::Normalize { mean, std } => {
                if mean.is_empty() || mean.len() != std.len() {
                    return Err(invalid(format!(
                        "{name}(mean={mean:?}, std={std:?}): one mean and one std per channel"
                    )));
                }
                builder.to_tensor_normalized(mean, std)
            }
            TransformSpec::ImageNetNormalize => {
                builder.to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD)
            }
            TransformSpec::RandomErasing {
                p,
                scale,
                ratio,
                value,
            } => {
                let value = match value {
                    None => EraseValue::Constant(vec![0.0]),
                    Some(EraseWith::Values(Amount::One(v))) => {
                        EraseValue::Constant(vec![*v as f32])
                    }
                    Some(EraseWith::Values(Amount::Many(v))) => {
                        EraseValue::Constant(v.iter().map(|v| *v as f32).collect())
                    }
                    Some(EraseWith::Word(w)) if w == "random" => EraseValue::Random,
                    Some(EraseWith::Word(w)) => {
                        return Err(invalid(format!(
                            "{name}(value={w:?}): a number, one per channel, or \"random\""
                        )));
                    }
                };
                builder.random_erasing(RandomErasing {
                    p: *p,
                    scale: *scale,
                    ratio: *ratio,
                    value,
                    before_normalize: stage == Stage::Float,
                })
            }
        })
    }
}

/// Where a spec is: on the PIL image, a uint8 tensor, floats, normalized floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Image,
    Bytes,
    Float,
    Normalized,
}

fn resize_filter(name: &str, interpolation: Interp) -> Result<Filter> {
    match interpolation {
        Interp::Bilinear => Ok(Filter::Bilinear),
        Interp::Bicubic => Ok(Filter::Bicubic),
        Interp::Nearest => Err(invalid(format!(
            "{name} with nearest interpolation: the native resize is bilinear or bicubic \
             (antialiased); pass the pipeline as a callable for nearest"
        ))),
    }
}

fn warp(name: &str, interpolation: Interp) -> Result<Interpolation> {
    match interpolation {
        Interp::Nearest => Ok(Interpolation::Nearest),
        Interp::Bilinear => Ok(Interpolation::Bilinear),
        Interp::Bicubic => Err(invalid(format!(
            "{name} with bicubic interpolation: native warps are nearest or bilinear; pass \
             the pipeline as a callable for bicubic"
        ))),
    }
}

fn pair(name: &str, field: &str, v: &[f64]) -> Result<(f64, f64)> {
    match *v {
        [a, b] => Ok((a, b)),
        _ => Err(invalid(format!(
            "{name}({field}={v:?}): one number or [min, max]"
        ))),
    }
}

/// torchvision's number-or-range: `x` for `[-x, x]`.
fn symmetric(name: &str, field: &str, amount: &Amount) -> Result<(f64, f64)> {
    match amount {
        Amount::One(x) if *x < 0.0 => Err(invalid(format!(
            "{name}({field}={x}): a single number must be non-negative"
        ))),
        Amount::One(x) => Ok((-x, *x)),
        Amount::Many(v) => pair(name, field, v),
    }
}

/// `ColorJitter`'s `_check_input`: a number `x` is `[max(0, 1 - x), 1 + x]` (`[-x, x]` for
/// the hue), and a range that is only the centre is no jitter at all.
fn jitter(
    name: &str,
    field: &str,
    amount: &Option<Amount>,
    hue: bool,
) -> Result<Option<(f64, f64)>> {
    let Some(amount) = amount else {
        return Ok(None);
    };
    let (lo, hi) = match amount {
        Amount::One(x) if *x < 0.0 => {
            return Err(invalid(format!(
                "{name}({field}={x}): must be non-negative"
            )));
        }
        Amount::One(x) if hue => (-x, *x),
        Amount::One(x) => ((1.0 - x).max(0.0), 1.0 + x),
        Amount::Many(v) => pair(name, field, v)?,
    };
    let center = if hue { 0.0 } else { 1.0 };
    Ok((lo != center || hi != center).then_some((lo, hi)))
}

/// torchvision's `_parse_fill` for an RGB image: a number for every channel, or one per
/// channel, each truncated to an int.
fn fill(name: &str, amount: &Option<Amount>) -> Result<Fill> {
    let values = match amount {
        None => return Ok([0; 3]),
        Some(Amount::One(x)) => vec![*x; 3],
        Some(Amount::Many(v)) if v.len() == 1 => vec![v[0]; 3],
        Some(Amount::Many(v)) => v.clone(),
    };
    if values.len() != 3 || values.iter().any(|v| !(0.0..256.0).contains(v)) {
        return Err(invalid(format!(
            "{name}(fill={values:?}): one number or one per channel, each from 0 to 255"
        )));
    }
    Ok([values[0] as u8, values[1] as u8, values[2] as u8])
}

fn invalid(message: impl Into<String>) -> DecodeError {
    DecodeError::new(DecodeErrorKind::InvalidArgument, message)
}

fn side(name: &str, size: usize) -> Result<usize> {
    if size == 0 || size > MAX_SIDE {
        return Err(invalid(format!(
            "{name}({size}): a size is a whole number of pixels from 1 to {MAX_SIDE}"
        )));
    }
    Ok(size)
}

fn sides(name: &str, size: Size) -> Result<(usize, usize)> {
    match size {
        Size::Square(s) => Ok((side(name, s)?, side(name, s)?)),
        Size::HeightWidth([h, w]) => Ok((side(name, h)?, side(name, w)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> std::result::Result<Vec<TransformSpec>, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn torchvision_names_and_defaults() {
        let spec = parse(
            r#"[{"step": "RandomResizedCrop", "size": [200, 100]},
                {"step": "RandomHorizontalFlip"}, {"step": "ToTensor"}, {"step": "ImageNetNormalize"}]"#,
        )
        .unwrap();
        assert_eq!(
            spec[0],
            TransformSpec::RandomResizedCrop {
                size: Size::HeightWidth([200, 100]),
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
                interpolation: Interp::Bilinear,
            }
        );
        let pipeline = TransformSpec::pipeline(&spec, 7).unwrap();
        assert_eq!(pipeline.output_shape(), Some([3, 200, 100]));
        // Every step the enum has is listed for front ends.
        for s in &spec {
            assert!(TRANSFORM_STEPS.iter().any(|(n, _)| *n == s.name()));
        }
    }

    #[test]
    fn unknown_steps_fields_and_bad_values_are_refused() {
        let err = parse(r#"[{"step": "AugMix"}]"#).unwrap_err();
        assert!(err.contains("AugMix") && err.contains("Resize"), "{err}");
        let err = parse(r#"[{"step": "Resize", "size": 256, "max_size": 300}]"#).unwrap_err();
        assert!(err.contains("max_size"), "{err}");
        assert!(parse(r#"[{"step": "Resize", "size": -3}]"#).is_err());
        let zero = parse(r#"[{"step": "CenterCrop", "size": 0}]"#).unwrap();
        assert!(TransformSpec::pipeline(&zero, 0).is_err());
    }

    #[test]
    fn steps_out_of_torchvision_order_are_refused() {
        for (json, says) in [
            (r#"[{"step": "ImageNetNormalize"}]"#, "before ToTensor"),
            (
                r#"[{"step": "ToTensor"}, {"step": "ToTensor"}]"#,
                "ToTensor twice",
            ),
            (
                r#"[{"step": "ToTensor"}, {"step": "Resize", "size": 8}]"#,
                "after ToTensor",
            ),
            (
                r#"[{"step": "ToTensor"}, {"step": "ImageNetNormalize"}, {"step": "ImageNetNormalize"}]"#,
                "Normalize twice",
            ),
        ] {
            let err = TransformSpec::pipeline(&parse(json).unwrap(), 0)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{json}: {err}");
        }
    }
}
