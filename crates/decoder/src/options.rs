//! Decoder settings: the pixel budget, the output channels and the JPEG decoder.

use zune_core::options::DecoderOptions;

use crate::{DecodeError, DecodeErrorKind as Kind, Result};

/// Which channels the decoded image has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorMode {
    /// Always 3 channels: gray expanded, alpha dropped, CMYK converted (torchvision's
    /// `convert("RGB")`). The default.
    #[default]
    Rgb,
    /// What the file holds: 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA); CMYK and
    /// YCCK JPEGs still come out as RGB.
    Native,
}

/// Decoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The most pixels an image may declare; larger ones are refused before any pixel
    /// buffer is allocated, so a hostile header cannot exhaust memory.
    pub max_pixels: u64,
    /// Output channels.
    pub color: ColorMode,
    /// Which JPEG decoder.
    pub jpeg: JpegDecoder,
    /// Let the JPEG decoder work at 1/2, 1/4 or 1/8 scale (in the DCT domain, as Pillow's
    /// `draft` does) when the pipeline's first step resizes the image, or crops and
    /// resizes it, to at most half of that scale: far less work on large photos, slightly other pixels
    /// than torchvision's (docs/python.md, "Decode modes"). Off by default.
    pub draft: bool,
}

/// Which decoder reads JPEGs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JpegDecoder {
    /// libjpeg-turbo, Pillow's and torchvision's decoder (so their pixels exactly), and
    /// the one that decodes only the region a crop keeps. The default when the crate's
    /// `libjpeg-turbo` feature is on (it is by default).
    LibjpegTurbo,
    /// zune-jpeg, pure Rust: within a mean of 0.2 levels of libjpeg-turbo. The default
    /// without the `libjpeg-turbo` feature.
    Zune,
}

impl Default for JpegDecoder {
    fn default() -> Self {
        if cfg!(feature = "libjpeg-turbo") {
            Self::LibjpegTurbo
        } else {
            Self::Zune
        }
    }
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            max_pixels: 64 * 1024 * 1024,
            color: ColorMode::Rgb,
            jpeg: JpegDecoder::default(),
            draft: false,
        }
    }
}

pub(crate) fn check_budget(
    format: &str,
    width: usize,
    height: usize,
    options: &DecodeOptions,
) -> Result<()> {
    let pixels = width as u64 * height as u64;
    if pixels == 0 {
        return Err(DecodeError::new(
            Kind::Corrupt,
            format!("{format} declares a {width}x{height} image"),
        ));
    }
    if pixels > options.max_pixels {
        return Err(DecodeError::new(
            Kind::TooLarge,
            format!(
                "{format} declares {width}x{height} = {pixels} pixels, over the budget of {}",
                options.max_pixels
            ),
        ));
    }
    Ok(())
}

/// zune's own dimension guard, set well above any budget so ours is the one that speaks.
pub(crate) fn zune_options() -> DecoderOptions {
    DecoderOptions::default()
        .set_max_width(1 << 20)
        .set_max_height(1 << 20)
}
