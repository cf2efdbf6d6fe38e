//! What a pipeline takes and gives: its steps, the key that seeds a sample's draws, its
//! output format and the sample it makes.

use crate::augment::{
    ColorJitter, GaussianBlur, RandAugment, RandomAffine, RandomRotation, TrivialAugmentWide,
};
use crate::resize::Filter;

/// Identifies a sample for its augmentation: the same key gets the same random draws on
/// every run and every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SampleKey {
    /// The epoch.
    pub epoch: u64,
    /// The dataset index.
    pub index: u64,
}

/// One step of a pipeline, with torchvision's semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// `Resize(size)`: the shorter side becomes `size`, the aspect ratio is kept.
    Resize {
        /// The shorter side after resizing.
        size: usize,
        /// Resampling filter.
        filter: Filter,
    },
    /// `CenterCrop((height, width))`; zero-padded if the image is smaller.
    CenterCrop {
        /// Crop height.
        height: usize,
        /// Crop width.
        width: usize,
    },
    /// `RandomResizedCrop((height, width), scale, ratio)`.
    RandomResizedCrop {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
        /// Range of the crop's area as a fraction of the image's.
        scale: (f64, f64),
        /// Range of the crop's aspect ratio (width / height), drawn log-uniformly.
        ratio: (f64, f64),
        /// Resampling filter.
        filter: Filter,
    },
    /// `RandomHorizontalFlip(p)`.
    RandomHorizontalFlip {
        /// Probability of flipping.
        p: f64,
    },
    /// `ColorJitter(brightness, contrast, saturation, hue)`.
    ColorJitter(ColorJitter),
    /// `RandAugment(...)`.
    RandAugment(RandAugment),
    /// `TrivialAugmentWide(...)`.
    TrivialAugmentWide(TrivialAugmentWide),
    /// `GaussianBlur(kernel_size, sigma)`.
    GaussianBlur(GaussianBlur),
    /// `RandomRotation(...)`.
    RandomRotation(RandomRotation),
    /// `RandomAffine(...)`.
    RandomAffine(RandomAffine),
}

/// What a pipeline hands back.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The pixels as they are: u8, height × width × channels.
    U8Hwc,
    /// `ToImage()` / `PILToTensor()`: u8, channels × height × width.
    U8Chw,
    /// `ToTensor` then `Normalize(mean, std)`: f32, channels × height × width. Give one
    /// mean and std per channel (mean 0 and std 1 for `ToTensor` alone).
    F32Chw {
        /// Per-channel mean, subtracted after scaling to [0, 1].
        mean: Vec<f32>,
        /// Per-channel standard deviation, divided by.
        std: Vec<f32>,
    },
}

/// The pixels a pipeline produced.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleData {
    /// For [`Output::U8Hwc`] and [`Output::U8Chw`].
    U8(Vec<u8>),
    /// For [`Output::F32Chw`].
    F32(Vec<f32>),
}

/// A transformed sample: its data and shape (`[H, W, C]` for u8 HWC, `[C, H, W]` for the others).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The shape, in the layout of the data.
    pub shape: [usize; 3],
    /// The values.
    pub data: SampleData,
}
