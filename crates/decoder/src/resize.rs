//! Resampling with fast_image_resize (SIMD, antialiased convolution like PIL's).

use std::cell::RefCell;

use fast_image_resize::images::{TypedImage, TypedImageRef};
use fast_image_resize::pixels::{U8, U8x2, U8x3, U8x4};
use fast_image_resize::{FilterType, PixelTrait, ResizeAlg, ResizeOptions, Resizer};

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
    if !(1..=4).contains(&src.channels) {
        return Err(invalid(format!(
            "cannot resize {}-channel pixels",
            src.channels
        )));
    }
    let as_u32 =
        |v: usize| u32::try_from(v).map_err(|_| invalid(format!("{v} pixels is too large")));
    let (src_w, src_h, dst_w, dst_h) = (
        as_u32(src.width)?,
        as_u32(src.height)?,
        as_u32(width)?,
        as_u32(height)?,
    );
    let options = ResizeOptions::new()
        .resize_alg(filter.alg())
        .crop(region.0, region.1, region.2, region.3);
    let mut data = vec![0u8; width * height * src.channels];
    // Typed per channel count: the untyped `Resizer::resize` compiles its convolutions for
    // all thirteen pixel types (a fifth of this crate's release build), four are used.
    let run = |data: &mut [u8]| match src.channels {
        1 => typed::<U8>(&src.data, data, (src_w, src_h, dst_w, dst_h), &options),
        2 => typed::<U8x2>(&src.data, data, (src_w, src_h, dst_w, dst_h), &options),
        3 => typed::<U8x3>(&src.data, data, (src_w, src_h, dst_w, dst_h), &options),
        4 => typed::<U8x4>(&src.data, data, (src_w, src_h, dst_w, dst_h), &options),
        n => Err(format!("cannot resize {n}-channel pixels")),
    };
    run(&mut data).map_err(invalid)?;
    Ok(Image {
        width,
        height,
        channels: src.channels,
        data,
    })
}

/// Resample `src` (`w x h` pixels of `P`) into `dst` (`dw x dh`) on this thread's resizer.
fn typed<P: PixelTrait>(
    src: &[u8],
    dst: &mut [u8],
    (w, h, dw, dh): (u32, u32, u32, u32),
    options: &ResizeOptions,
) -> std::result::Result<(), String> {
    let src =
        TypedImageRef::<P>::from_buffer(w, h, src).map_err(|e| format!("resize source: {e}"))?;
    let mut dst =
        TypedImage::<P>::from_buffer(dw, dh, dst).map_err(|e| format!("resize target: {e}"))?;
    RESIZER
        .with(|r| r.borrow_mut().resize_typed(&src, &mut dst, options))
        .map_err(|e| format!("resize: {e}"))
}
