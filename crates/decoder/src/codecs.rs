//! WebP, BMP, TIFF and PNM (PPM/PGM/PBM), the other formats torchvision's ImageFolder
//! lists, through the `image` crate's decoders (image-webp, tiff and its own BMP/PNM),
//! with this crate's pixel budget and PIL's `convert("RGB")` channel rules.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, Limits};

use crate::options::{ColorMode, DecodeOptions, check_budget};
use crate::sniff::Format;
use crate::{DecodeError, DecodeErrorKind as Kind, Image, Result};

/// `format`'s bytes as pixels: the header is read and its size checked against the
/// budget before any pixel buffer is allocated.
pub(crate) fn decode_other(bytes: &[u8], format: Format, options: &DecodeOptions) -> Result<Image> {
    let (name, kind) = match format {
        Format::WebP => ("WebP", ImageFormat::WebP),
        Format::Bmp => ("BMP", ImageFormat::Bmp),
        Format::Tiff => ("TIFF", ImageFormat::Tiff),
        Format::Pnm => ("PNM", ImageFormat::Pnm),
        Format::Jpeg | Format::Png => {
            return Err(DecodeError::new(
                Kind::InvalidArgument,
                "JPEG and PNG have decoders of their own",
            ));
        }
    };
    let error = |e: ImageError| image_error(name, e);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), kind);
    let mut limits = Limits::default();
    // Four channels of 32-bit floats at most (TIFF), for the largest image the budget allows.
    limits.max_alloc = Some(options.max_pixels.saturating_mul(16));
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(error)?;
    let (width, height) = decoder.dimensions();
    let (width, height) = (width as usize, height as usize);
    check_budget(name, width, height, options)?;
    let image = DynamicImage::from_decoder(decoder).map_err(error)?;
    let has_alpha = image.color().has_alpha();
    let gray = !image.color().has_color();
    let (channels, data) = match (options.color, gray, has_alpha) {
        // PIL's convert("RGB"): gray repeated, alpha dropped (not composited), palettes
        // expanded (the decoders hand palettes over expanded).
        (ColorMode::Rgb, _, _) | (ColorMode::Native, false, false) => {
            (3, image.into_rgb8().into_raw())
        }
        (ColorMode::Native, true, false) => (1, image.into_luma8().into_raw()),
        (ColorMode::Native, true, true) => (2, image.into_luma_alpha8().into_raw()),
        (ColorMode::Native, false, true) => (4, image.into_rgba8().into_raw()),
    };
    if data.len() != width * height * channels {
        return Err(DecodeError::new(
            Kind::Corrupt,
            format!("{name}: the decoder returned a short image"),
        ));
    }
    Ok(Image {
        width,
        height,
        channels,
        data,
    })
}

fn image_error(format: &str, err: ImageError) -> DecodeError {
    let kind = match &err {
        ImageError::Limits(_) => Kind::TooLarge,
        ImageError::Unsupported(_) => Kind::Unsupported,
        ImageError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Kind::Truncated,
        _ => Kind::Corrupt,
    };
    DecodeError::new(kind, format!("{format}: {err}")).caused_by(err)
}
