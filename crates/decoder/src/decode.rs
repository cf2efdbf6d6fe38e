//! Bytes to pixels: the format sniffed from magic bytes, JPEG in `jpeg/`, PNG by zune-png,
//! the others by the `image` crate's decoders (`formats.rs`).

use zune_core::bytestream::ZCursor;
use zune_core::result::DecodingResult;
use zune_png::PngDecoder;
use zune_png::error::PngDecodeErrors;

use std::panic::{self, AssertUnwindSafe};

use crate::image::sized;
use crate::options::{ColorMode, DecodeOptions, check_budget, zune_options};
use crate::sniff::Format;
use crate::wanted::{Decoded, Wanted};
use crate::{DecodeError, DecodeErrorKind as Kind, Image, Result, codecs, jpeg};

/// Decode `bytes` as whichever format they are.
pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<Image> {
    decode_reusing(bytes, options, Vec::new())
}

/// [`decode`], writing JPEG pixels into `buffer`'s memory (grown if the image needs more):
/// a decode thread that hands back each image's buffer maps no fresh memory per image.
pub(crate) fn decode_reusing(
    bytes: &[u8],
    options: &DecodeOptions,
    buffer: Vec<u8>,
) -> Result<Image> {
    decode_planned(bytes, options, buffer, |_, _| Wanted::default()).map(|d| d.image)
}

/// [`decode_reusing`], told what the steps will read once the image's size is known:
/// `plan(width, height)` names a rectangle and the size it will be resized to, and a
/// decoder that can (JPEG through libjpeg-turbo) decodes only that rectangle and a margin
/// around it, and with [`DecodeOptions::draft`] at a reduced scale. Other decoders
/// decode everything at full size.
pub(crate) fn decode_planned(
    bytes: &[u8],
    options: &DecodeOptions,
    buffer: Vec<u8>,
    plan: impl FnOnce(usize, usize) -> Wanted,
) -> Result<Decoded> {
    let format = Format::sniff(bytes);
    // The third-party decoders are trusted to return errors, not to be free of bugs: a
    // panic on some file (the tiff crate asserts on a tiled planar 16-bit RGB image of
    // Pillow's test set) is that file's error, not the decode thread's end.
    let decoded = panic::catch_unwind(AssertUnwindSafe(|| match format {
        Some(Format::Jpeg) => jpeg::decode(bytes, options, buffer, plan),
        Some(Format::Png) => decode_png(bytes, options).map(Decoded::whole),
        Some(other) => codecs::decode_other(bytes, other, options).map(Decoded::whole),
        None if bytes.is_empty() => Err(DecodeError::new(Kind::Empty, "the data is empty")),
        None => Err(DecodeError::new(
            Kind::UnknownFormat,
            format!(
                "not a JPEG, PNG, WebP, BMP, TIFF or PNM image (starts with {:02x?})",
                &bytes[..bytes.len().min(8)]
            ),
        )),
    }));
    decoded.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        let name = format.map_or("image", Format::name);
        Err(DecodeError::new(
            Kind::Corrupt,
            format!("{name}: the decoder failed on this file (it panicked: {why})"),
        ))
    })
}

/// `err` of the PNG `bytes`: truncated when the file lacks its closing `IEND` chunk (the
/// data ends before the image does), told by the file's structure, not the library's words.
fn png_error(bytes: &[u8], err: PngDecodeErrors) -> DecodeError {
    let closed = bytes.len() >= 12 && bytes[bytes.len() - 12..].windows(4).any(|w| w == b"IEND");
    let kind = if matches!(err, PngDecodeErrors::IoErrors(_)) || !closed {
        Kind::Truncated
    } else if matches!(err, PngDecodeErrors::UnsupportedAPNGImage) {
        Kind::Unsupported
    } else {
        Kind::Corrupt
    };
    DecodeError::new(kind, format!("PNG: {err}")).caused_by(err)
}

fn decode_png(bytes: &[u8], options: &DecodeOptions) -> Result<Image> {
    let zopts = zune_options().png_set_strip_to_8bit(true);
    let mut decoder = PngDecoder::new_with_options(ZCursor::new(bytes), zopts);
    decoder.decode_headers().map_err(|e| png_error(bytes, e))?;
    let (width, height) = decoder
        .dimensions()
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "PNG: no IHDR header"))?;
    check_budget("PNG", width, height, options)?;
    let channels = decoder
        .colorspace()
        .map(|c| c.num_components())
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "PNG: unknown colour type"))?;
    let data = match decoder.decode().map_err(|e| png_error(bytes, e))? {
        DecodingResult::U8(data) => data,
        // strip_to_8bit makes this unreachable; refuse rather than guess.
        _ => {
            return Err(DecodeError::new(
                Kind::Unsupported,
                "PNG: not 8-bit after conversion",
            ));
        }
    };
    let image = sized(
        width,
        height,
        channels,
        data,
        Kind::Truncated,
        "PNG: the image data ends early",
    )?;
    Ok(match options.color {
        ColorMode::Rgb => image.into_rgb(),
        ColorMode::Native => image,
    })
}
