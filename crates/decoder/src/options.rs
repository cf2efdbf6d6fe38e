//! Decoder settings: the pixel budget and the output channels.

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
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            max_pixels: 64 * 1024 * 1024,
            color: ColorMode::Rgb,
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
