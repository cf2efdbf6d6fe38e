//! Resampling with fast_image_resize (SIMD, antialiased convolution like PIL's).

use std::cell::RefCell;

use fast_image_resize::images::{Image as FirImage, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use crate::geometry::Rect;
use crate::{DecodeError, DecodeErrorKind, Image, Result};

/// Resampling filter. All are antialiased when shrinking, as torchvision's PIL path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    /// Bilinear (triangle) filter: torchvision's default.
    #[default]
    Bilinear,
    /// Bicubic (Catmull-Rom), sharper.
    Bicubic,
    /// Lanczos3: the highest quality, the slowest.
    Lanczos3,
}

impl Filter {
    fn alg(self) -> ResizeAlg {
        ResizeAlg::Convolution(match self {
            Filter::Bilinear => FilterType::Bilinear,
            Filter::Bicubic => FilterType::CatmullRom,
            Filter::Lanczos3 => FilterType::Lanczos3,
        })
    }
}

thread_local! {
    // A Resizer keeps scratch buffers; one per thread avoids reallocating them per image.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

fn pixel_type(channels: usize) -> Result<PixelType> {
    Ok(match channels {
        1 => PixelType::U8,
        2 => PixelType::U8x2,
        3 => PixelType::U8x3,
        4 => PixelType::U8x4,
        n => {
            return Err(DecodeError::new(
                DecodeErrorKind::InvalidArgument,
                format!("cannot resize {n}-channel pixels"),
            ));
        }
    })
}

/// A source region with fractional edges: (left, top, width, height).
pub(crate) type CropBox = (f64, f64, f64, f64);

/// The box of whole pixels `r`.
pub(crate) fn pixels(r: Rect) -> CropBox {
    (r.x as f64, r.y as f64, r.w as f64, r.h as f64)
}

/// Resample the `region` of `src` to `width` x `height`. The filter's taps may reach past
/// the region (up to the image's edges), exactly as for the whole image, so resampling a
/// region equals resampling everything and cropping the result.
pub(crate) fn resize(
    src: &Image,
    region: CropBox,
    height: usize,
    width: usize,
    filter: Filter,
) -> Result<Image> {
    let invalid = |what: String| DecodeError::new(DecodeErrorKind::InvalidArgument, what);
    if width == 0 || height == 0 {
        return Err(invalid(format!("cannot resize to {width}x{height}")));
    }
    let pt = pixel_type(src.channels)?;
    let as_u32 =
        |v: usize| u32::try_from(v).map_err(|_| invalid(format!("{v} pixels is too large")));
    let src_ref = ImageRef::new(as_u32(src.width)?, as_u32(src.height)?, &src.data, pt)
        .map_err(|e| invalid(format!("resize source: {e}")))?;
    let mut dst = FirImage::new(as_u32(width)?, as_u32(height)?, pt);
    let options = ResizeOptions::new()
        .resize_alg(filter.alg())
        .crop(region.0, region.1, region.2, region.3);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src_ref, &mut dst, &options))
        .map_err(|e| invalid(format!("resize: {e}")))?;
    Ok(Image {
        width,
        height,
        channels: src.channels,
        data: dst.into_vec(),
    })
}
