//! JPEG: libjpeg-turbo (`turbo`, the default: Pillow's and torchvision's own decoder, and
//! the one that decodes a region) or zune-jpeg (`zune`, pure Rust), chosen by
//! [`JpegDecoder`]; `markers` is the walk both rely on for header repair and truncation.

mod markers;
#[cfg(feature = "libjpeg-turbo")]
mod turbo;
mod zune;

use crate::options::{DecodeOptions, JpegDecoder};
use crate::wanted::{Decoded, Wanted};
use crate::{DecodeError, DecodeErrorKind as Kind, Result};

/// Decode `bytes`, asking `plan` (given the image's size) which part is wanted.
pub(crate) fn decode(
    bytes: &[u8],
    options: &DecodeOptions,
    buffer: Vec<u8>,
    plan: impl FnOnce(usize, usize) -> Wanted,
) -> Result<Decoded> {
    // Header damage that libjpeg reads past (and so PIL and torchvision decode) would make
    // zune-jpeg's strict mode refuse the file.
    let repaired = markers::repair(bytes);
    let bytes = repaired.as_deref().unwrap_or(bytes);
    let found = markers::inspect(bytes);
    // Decoders return an image for data cut inside the last scan (missing blocks come out
    // grey); PIL refuses such files, and so do we, before spending a decode on them.
    if !found.complete {
        return Err(DecodeError::new(
            Kind::Truncated,
            "JPEG: the data ends before the end-of-image marker (the file is truncated)",
        ));
    }
    let decoded = match options.jpeg {
        #[cfg(feature = "libjpeg-turbo")]
        JpegDecoder::LibjpegTurbo => {
            match turbo::decode(bytes, &found.sampling, options, buffer, plan)? {
                turbo::Outcome::Decoded(decoded) => decoded,
                // CMYK, YCCK, 12-bit and lossless files: the converting decoders below.
                turbo::Outcome::NotMine(buffer) => {
                    Decoded::whole(zune_or_fallback(bytes, &found.sampling, options, buffer)?)
                }
            }
        }
        #[cfg(not(feature = "libjpeg-turbo"))]
        JpegDecoder::LibjpegTurbo => {
            let _ = (buffer, plan);
            return Err(DecodeError::new(
                Kind::Unsupported,
                "JPEG: this build has no libjpeg-turbo (build loader-decoder with its \
                 `libjpeg-turbo` feature, or choose JpegDecoder::Zune)",
            ));
        }
        JpegDecoder::Zune => {
            Decoded::whole(zune_or_fallback(bytes, &found.sampling, options, buffer)?)
        }
    };
    Ok(decoded)
}

fn zune_or_fallback(
    bytes: &[u8],
    sampling: &[(u8, u8)],
    options: &DecodeOptions,
    buffer: Vec<u8>,
) -> Result<crate::Image> {
    if markers::zune_handles(sampling) {
        zune::decode(bytes, options, buffer)
    } else {
        zune::decode_fallback(bytes, options)
    }
}
