//! Decoded pixels.

use crate::{DecodeError, DecodeErrorKind as Kind, Result};

/// An 8-bit image: `height` rows of `width` pixels of `channels` interleaved bytes (HWC).
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Bytes per pixel: 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA).
    pub channels: usize,
    /// `height * width * channels` bytes, row-major.
    pub data: Vec<u8>,
}

impl Image {
    /// The pixel at (`x`, `y`) as a slice of `channels` bytes.
    pub fn pixel(&self, x: usize, y: usize) -> &[u8] {
        let at = (y * self.width + x) * self.channels;
        &self.data[at..at + self.channels]
    }

    /// The same image with 3 channels: gray is repeated, alpha dropped (as PIL's
    /// `convert("RGB")` does).
    pub fn into_rgb(self) -> Image {
        if self.channels == 3 {
            return self;
        }
        let data = match self.channels {
            1 => self.data.iter().flat_map(|&g| [g, g, g]).collect(),
            2 => self
                .data
                .chunks_exact(2)
                .flat_map(|p| [p[0], p[0], p[0]])
                .collect(),
            _ => self
                .data
                .chunks_exact(self.channels)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        };
        Image {
            width: self.width,
            height: self.height,
            channels: 3,
            data,
        }
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({}x{}x{})", self.width, self.height, self.channels)
    }
}

/// The decoded buffer as an image, if it holds exactly the declared pixels; a decoder that
/// returns less is reported, never indexed past its end.
pub(crate) fn sized(
    width: usize,
    height: usize,
    channels: usize,
    data: Vec<u8>,
    short: Kind,
    why: &str,
) -> Result<Image> {
    if data.len() != width * height * channels {
        return Err(DecodeError::new(short, why));
    }
    Ok(Image {
        width,
        height,
        channels,
        data,
    })
}
