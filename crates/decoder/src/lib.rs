//! Bytes in, pixels out: JPEG (libjpeg-turbo, Pillow's own decoder, or zune-jpeg in pure
//! Rust), PNG (zune-png), and WebP, BMP, TIFF and PNM (the `image` crate's decoders) with
//! the format sniffed from magic bytes, and torchvision's transforms, seeded per sample.
//! A pipeline that crops first decodes only the crop's region of a JPEG, and with
//! [`DecodeOptions::draft`] decodes large JPEGs at the reduced scale its resize needs.
//!
//! Never panics on any byte string: bad input is a [`DecodeError`] that says what was
//! wrong, and an image declaring more than [`DecodeOptions::max_pixels`] is refused before
//! its pixels are allocated.
//!
//! ```
//! use loader_decoder::{Pipeline, SampleKey, SampleData, decode, DecodeOptions};
//!
//! // A 64x48 grey JPEG, made here so the example stands alone.
//! let mut jpeg = Vec::new();
//! jpeg_encoder::Encoder::new(&mut jpeg, 90)
//!     .encode(&[128u8; 64 * 48], 64, 48, jpeg_encoder::ColorType::Luma)
//!     .unwrap();
//!
//! let image = decode(&jpeg, &DecodeOptions::default()).unwrap();
//! assert_eq!((image.width, image.height, image.channels), (64, 48, 3)); // RGB by default
//!
//! // Resize(256) → CenterCrop(224) → ToTensor → Normalize, as f32 CHW.
//! let eval = Pipeline::imagenet_eval();
//! let sample = eval.run(&jpeg, SampleKey { epoch: 0, index: 7 }).unwrap();
//! assert_eq!(sample.shape, [3, 224, 224]);
//! assert!(matches!(sample.data, SampleData::F32(ref v) if v.len() == 3 * 224 * 224));
//!
//! // Or straight into a slot of a batch buffer.
//! let mut batch = vec![0f32; 2 * 3 * 224 * 224];
//! let slot = &mut batch[3 * 224 * 224..];
//! eval.run_into_f32(&jpeg, SampleKey { epoch: 0, index: 8 }, slot).unwrap();
//!
//! assert!(decode(b"GIF89a", &DecodeOptions::default()).is_err());
//! ```
//!
//! # Rooms
//!
//! `decode` (the format's decoder, PNG's here) with `jpeg/` (libjpeg-turbo, zune-jpeg,
//! markers) and `codecs` (the other formats, through the `image` crate), over `wanted`
//! (what a decode is asked for and gives back), `sniff` (which format bytes or a name are), `options` (budget, channels, decoder, draft), below `image` (pixels) and `resize` (antialiased bilinear) and `geometry` (crop
//! rectangles, torchvision's draws); `augment/` (torchvision's colour, level, blur, warp and erasing steps, to Pillow's bytes);
//! `pipeline/` composes them into a seeded pipeline;
//! `spec` is the pipeline as data (torchvision's names) for front ends; `error`.

mod augment;
mod codecs;
mod decode;
mod error;
pub mod geometry;
mod image;
mod jpeg;
mod options;
mod pipeline;
mod resize;
mod sniff;
mod spec;
mod wanted;

pub use augment::{
    ColorJitter, EraseValue, Fill, GaussianBlur, Interpolation, RandAugment, RandomAffine,
    RandomErasing, RandomRotation, TrivialAugmentWide,
};
pub use decode::decode;
pub use error::{DecodeError, DecodeErrorKind, Result};
pub use image::Image;
pub use options::{ColorMode, DecodeOptions, JpegDecoder};
pub use pipeline::{
    IMAGENET_MEAN, IMAGENET_STD, Output, Pipeline, PipelineBuilder, Sample, SampleData, SampleKey,
    Transform,
};
pub use resize::Filter;
pub use sniff::Format;
pub use spec::{Amount, EraseWith, Interp, Size, TRANSFORM_STEPS, TransformSpec};
