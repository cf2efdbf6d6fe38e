//! zune-jpeg, the pure-Rust decoder (the fallback when libjpeg-turbo is not built in, and
//! the choice of `JpegDecoder::Zune`), with the jpeg-decoder crate for the sampling layouts
//! zune-jpeg gets wrong.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;

use crate::image::sized;
use crate::options::{ColorMode, DecodeOptions, check_budget, zune_options};
use crate::{DecodeError, DecodeErrorKind as Kind, Image, Result};

fn jpeg_error(err: DecodeErrors) -> DecodeError {
    let kind = match &err {
        DecodeErrors::ExhaustedData | DecodeErrors::IoErrors(_) => Kind::Truncated,
        DecodeErrors::LargeDimensions(_) => Kind::TooLarge,
        DecodeErrors::Unsupported(_) => Kind::Unsupported,
        _ => Kind::Corrupt,
    };
    // Data cut short is told before any decoder runs (`markers::inspect`), by the missing
    // end-of-image marker, not guessed here from the library's words.
    DecodeError::new(kind, format!("JPEG: {err}")).caused_by(err)
}

/// The jpeg-decoder crate, for the sampling layouts zune-jpeg gets wrong.
pub(super) fn decode_fallback(bytes: &[u8], options: &DecodeOptions) -> Result<Image> {
    use jpeg_decoder::{Decoder, PixelFormat};
    let mut decoder = Decoder::new(bytes);
    let corrupt = |e: jpeg_decoder::Error| {
        let kind = match e {
            jpeg_decoder::Error::Unsupported(_) => Kind::Unsupported,
            jpeg_decoder::Error::Io(_) => Kind::Truncated,
            _ => Kind::Corrupt,
        };
        DecodeError::new(kind, format!("JPEG: {e}")).caused_by(e)
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
    let image = whole(width, height, channels, data)?;
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

pub(super) fn decode(bytes: &[u8], options: &DecodeOptions, mut data: Vec<u8>) -> Result<Image> {
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
    whole(width, height, channels, data)
}

/// The decoder's pixels as an image, refused when their length is not what the header said.
fn whole(width: usize, height: usize, channels: usize, data: Vec<u8>) -> Result<Image> {
    sized(
        width,
        height,
        channels,
        data,
        Kind::Corrupt,
        "JPEG: the decoder returned a short image",
    )
}
