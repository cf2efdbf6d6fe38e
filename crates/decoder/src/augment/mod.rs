//! Augmentations past crop and flip, with torchvision's semantics on PIL images: the
//! bytes Pillow computes, its roundings included (`enhance`, `hue`, `levels`, `affine`),
//! the tensor kernels where torchvision runs those on PIL images too (`blur`), the
//! random draws of the transforms (`jitter`, `policy`), and `erase` on the output tensor.
//!
//! Each draws from the sample's own seeded stream, so a sample is augmented the same way
//! on every run; the draws are torchvision's distributions, not torch's random numbers.

mod affine;
mod blur;
mod enhance;
mod erase;
mod hue;
mod jitter;
mod levels;
mod policy;

pub use affine::{Fill, Interpolation, RandomAffine, RandomRotation};
pub use blur::GaussianBlur;
pub use erase::{EraseValue, RandomErasing};
pub use jitter::ColorJitter;
pub use policy::{RandAugment, TrivialAugmentWide};
