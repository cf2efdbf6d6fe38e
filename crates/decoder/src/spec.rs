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
    /// `Resize(size)`: the shorter side becomes `size` (bilinear, antialiased).
    Resize {
        /// The shorter side.
        size: usize,
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
    },
    /// `RandomHorizontalFlip(p)`.
    RandomHorizontalFlip {
        /// The chance of a flip.
        #[serde(default = "half")]
        p: f64,
    },
    /// `ToTensor()`: float32 CHW in [0, 1].
    ToTensor,
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
    ("Resize", &["size"]),
    ("CenterCrop", &["size"]),
    ("RandomResizedCrop", &["size", "scale", "ratio"]),
    ("RandomHorizontalFlip", &["p"]),
    ("ToTensor", &[]),
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
            TransformSpec::ToTensor => "ToTensor",
            TransformSpec::Normalize { .. } => "Normalize",
            TransformSpec::ImageNetNormalize => "ImageNetNormalize",
        }
    }

    /// The pipeline of `steps`, in torchvision's order (the steps on the image, then
    /// `ToTensor`, then `Normalize`): a spec out of that order is refused, never run as some
    /// other pipeline (a `Normalize` before `ToTensor` was once silently dropped).
    pub fn pipeline(steps: &[TransformSpec], seed: u64) -> Result<Pipeline> {
        let mut builder = Pipeline::builder().seed(seed);
        let (mut tensor, mut normalized) = (false, false);
        for step in steps {
            let name = step.name();
            match step {
                TransformSpec::ToTensor if tensor => {
                    return Err(invalid(
                        "ToTensor twice: the second would get a tensor (torchvision raises too)",
                    ));
                }
                TransformSpec::ToTensor => tensor = true,
                TransformSpec::Normalize { .. } | TransformSpec::ImageNetNormalize => {
                    if !tensor {
                        return Err(invalid(format!(
                            "{name} before ToTensor: Normalize takes a float tensor \
                             (torchvision raises too); put ToTensor first"
                        )));
                    }
                    if normalized {
                        return Err(invalid(
                            "Normalize twice: the native pipeline normalizes once; fold the \
                             two into one",
                        ));
                    }
                    normalized = true;
                }
                _ if tensor => {
                    return Err(invalid(format!(
                        "{name} after ToTensor: native steps run on the uint8 image, before \
                         ToTensor (torchvision would run it on the float tensor, with other \
                         pixels); put it before ToTensor, or pass the pipeline as a callable"
                    )));
                }
                _ => {}
            }
            builder = step.add_to(builder)?;
        }
        builder.build()
    }

    fn add_to(&self, builder: crate::PipelineBuilder) -> Result<crate::PipelineBuilder> {
        let name = self.name();
        Ok(match self {
            TransformSpec::Resize { size } => builder.resize(side(name, *size)?),
            TransformSpec::CenterCrop { size } => {
                let (height, width) = sides(name, *size)?;
                builder.then(Transform::CenterCrop { height, width })
            }
            TransformSpec::RandomResizedCrop { size, scale, ratio } => {
                let (height, width) = sides(name, *size)?;
                builder.then(Transform::RandomResizedCrop {
                    height,
                    width,
                    scale: *scale,
                    ratio: *ratio,
                    filter: Filter::Bilinear,
                })
            }
            TransformSpec::RandomHorizontalFlip { p } => {
                if !(0.0..=1.0).contains(p) {
                    return Err(invalid(format!("{name}(p={p}): p must be between 0 and 1")));
                }
                builder.random_horizontal_flip(*p)
            }
            TransformSpec::ToTensor => builder.to_tensor_normalized(&[0.0; 3], &[1.0; 3]),
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
        })
    }
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
        let err = parse(r#"[{"step": "ColorJitter"}]"#).unwrap_err();
        assert!(
            err.contains("ColorJitter") && err.contains("Resize"),
            "{err}"
        );
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
