//! Bytes to pixels: the format sniffed from magic bytes, JPEG by zune-jpeg, PNG by zune-png,
//! the others by the `image` crate's decoders (`formats.rs`).

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_core::result::DecodingResult;
use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;
use zune_png::PngDecoder;
use zune_png::error::PngDecodeErrors;

use crate::format::Format;
use crate::options::{ColorMode, DecodeOptions, check_budget};
use crate::{DecodeError, DecodeErrorKind as Kind, Image, Result, formats, jpeg_markers};

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
    match Format::sniff(bytes) {
        Some(Format::Jpeg) => decode_jpeg(bytes, options, buffer),
        Some(Format::Png) => decode_png(bytes, options),
        Some(other) => formats::decode_other(bytes, other, options),
        None if bytes.is_empty() => Err(DecodeError::new(Kind::Empty, "the data is empty")),
        None => Err(DecodeError::new(
            Kind::UnknownFormat,
            format!(
                "not a JPEG, PNG, WebP, BMP, TIFF or PNM image (starts with {:02x?})",
                &bytes[..bytes.len().min(8)]
            ),
        )),
    }
}

/// The decoded buffer as an image, if it holds exactly the declared pixels; a decoder that
/// returns less is reported, never indexed past its end.
fn sized(
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

/// zune's own dimension guard, set well above any budget so ours is the one that speaks.
fn zune_options() -> DecoderOptions {
    DecoderOptions::default()
        .set_max_width(1 << 20)
        .set_max_height(1 << 20)
}

fn jpeg_error(err: DecodeErrors) -> DecodeError {
    let kind = match &err {
        DecodeErrors::ExhaustedData | DecodeErrors::IoErrors(_) => Kind::Truncated,
        DecodeErrors::LargeDimensions(_) => Kind::TooLarge,
        DecodeErrors::Unsupported(_) => Kind::Unsupported,
        _ => Kind::Corrupt,
    };
    let text = err.to_string();
    let kind = if kind == Kind::Corrupt && text.to_ascii_lowercase().contains("eof") {
        Kind::Truncated
    } else {
        kind
    };
    DecodeError::new(kind, format!("JPEG: {text}"))
}

fn decode_jpeg(bytes: &[u8], options: &DecodeOptions, buffer: Vec<u8>) -> Result<Image> {
    // Header damage that libjpeg reads past (and so PIL and torchvision decode) would make
    // zune-jpeg's strict mode refuse the file; strict mode stays, for the scan's sake.
    let repaired = jpeg_markers::repair(bytes);
    let bytes = repaired.as_deref().unwrap_or(bytes);
    let markers = jpeg_markers::inspect(bytes);
    let image = if jpeg_markers::zune_handles(&markers.sampling) {
        decode_jpeg_zune(bytes, options, buffer)?
    } else {
        decode_jpeg_fallback(bytes, options)?
    };
    // zune-jpeg, even in strict mode, returns an image for data cut inside the last scan
    // (missing blocks come out grey); PIL refuses such files, and so do we.
    if !markers.complete {
        return Err(DecodeError::new(
            Kind::Truncated,
            "JPEG: the data ends before the end-of-image marker (the file is truncated)",
        ));
    }
    Ok(image)
}

/// The jpeg-decoder crate, for the sampling layouts zune-jpeg gets wrong.
fn decode_jpeg_fallback(bytes: &[u8], options: &DecodeOptions) -> Result<Image> {
    use jpeg_decoder::{Decoder, PixelFormat};
    let mut decoder = Decoder::new(bytes);
    let corrupt = |e: jpeg_decoder::Error| {
        let kind = match e {
            jpeg_decoder::Error::Unsupported(_) => Kind::Unsupported,
            jpeg_decoder::Error::Io(_) => Kind::Truncated,
            _ => Kind::Corrupt,
        };
        DecodeError::new(kind, format!("JPEG: {e}"))
    };
    decoder.read_info().map_err(corrupt)?;
    let info = decoder
        .info()
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "JPEG: no frame header"))?;
    let (width, height) = (usize::from(info.width), usize::from(info.height));
    check_budget("JPEG", width, height, options)?;
    decoder.set_max_decoding_buffer_size(
        usize::try_from(options.max_pixels.saturating_mul(4)).unwrap_or(usize::MAX),
    );
    let data = decoder.decode().map_err(corrupt)?;
    let channels = match info.pixel_format {
        PixelFormat::L8 => 1,
        PixelFormat::RGB24 => 3,
        PixelFormat::CMYK32 => 4,
        PixelFormat::L16 => {
            return Err(DecodeError::new(
                Kind::Unsupported,
                "JPEG: 16-bit lossless JPEG",
            ));
        }
    };
    let image = sized(
        width,
        height,
        channels,
        data,
        Kind::Corrupt,
        "JPEG: the decoder returned a short image",
    )?;
    Ok(match (options.color, channels) {
        (ColorMode::Native, 1) | (_, 3) => image,
        (ColorMode::Rgb, 1) => image.into_rgb(),
        // Adobe CMYK as jpeg-decoder hands it over: already un-inverted ink values.
        (_, _) => {
            let rgb = image
                .data
                .chunks_exact(4)
                .flat_map(|p| {
                    let k = 255 - u16::from(p[3]);
                    [0, 1, 2].map(|c| ((255 - u16::from(p[c])) * k / 255) as u8)
                })
                .collect();
            Image {
                width,
                height,
                channels: 3,
                data: rgb,
            }
        }
    })
}

fn decode_jpeg_zune(bytes: &[u8], options: &DecodeOptions, mut data: Vec<u8>) -> Result<Image> {
    // Strict mode: a truncated or damaged scan is an error, not silently grey pixels.
    let mut decoder =
        JpegDecoder::new_with_options(ZCursor::new(bytes), zune_options().set_strict_mode(true));
    decoder.decode_headers().map_err(jpeg_error)?;
    let (width, height) = decoder
        .dimensions()
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "JPEG: no frame header"))?;
    check_budget("JPEG", width, height, options)?;
    let input = decoder.input_colorspace().unwrap_or(ColorSpace::YCbCr);
    let out = match (options.color, input) {
        (ColorMode::Native, ColorSpace::Luma) => ColorSpace::Luma,
        _ => ColorSpace::RGB,
    };
    decoder.set_options(
        zune_options()
            .set_strict_mode(true)
            .jpeg_set_out_colorspace(out),
    );
    let channels = out.num_components();
    // Zeroed first, as zune's own `decode` does: a scan that ends early leaves the rest
    // zero, never the pixels of the image this buffer held before.
    data.clear();
    data.resize(width * height * channels, 0);
    decoder.decode_into(&mut data).map_err(jpeg_error)?;
    sized(
        width,
        height,
        channels,
        data,
        Kind::Corrupt,
        "JPEG: the decoder returned a short image",
    )
}

fn png_error(err: PngDecodeErrors) -> DecodeError {
    let text = err.to_string();
    let lower = text.to_ascii_lowercase();
    let kind = if matches!(err, PngDecodeErrors::IoErrors(_))
        || lower.contains("eof")
        || lower.contains("end of")
        || lower.contains("no more bytes")
    {
        Kind::Truncated
    } else if matches!(err, PngDecodeErrors::UnsupportedAPNGImage) {
        Kind::Unsupported
    } else {
        Kind::Corrupt
    };
    DecodeError::new(kind, format!("PNG: {text}"))
}

fn decode_png(bytes: &[u8], options: &DecodeOptions) -> Result<Image> {
    let zopts = zune_options().png_set_strip_to_8bit(true);
    let mut decoder = PngDecoder::new_with_options(ZCursor::new(bytes), zopts);
    decoder.decode_headers().map_err(png_error)?;
    let (width, height) = decoder
        .dimensions()
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "PNG: no IHDR header"))?;
    check_budget("PNG", width, height, options)?;
    let channels = decoder
        .colorspace()
        .map(|c| c.num_components())
        .ok_or_else(|| DecodeError::new(Kind::Corrupt, "PNG: unknown colour type"))?;
    let data = match decoder.decode().map_err(png_error)? {
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
