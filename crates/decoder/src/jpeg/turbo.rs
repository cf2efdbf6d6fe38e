//! libjpeg-turbo through `loader-turbojpeg`: a region when what is wanted names one, at a
//! reduced scale when the options allow a draft.

use loader_turbojpeg::{Decompressor, Error, ErrorKind, Header, Limits, Output, Region, Scale};

use crate::geometry::Rect;
use crate::options::{ColorMode, DecodeOptions, check_budget};
use crate::wanted::{Decoded, Wanted};
use crate::{DecodeError, DecodeErrorKind as Kind, Image, Result};

/// Rows and columns decoded beyond a planned region on each side (where the image has
/// them): libjpeg's chroma upsampling at a region's edge reads neighbours the region
/// lacks, so the margin keeps the region's own pixels those of a whole decode
/// (`region_decode_equals_whole_decode_then_crop` checks it on every layout).
pub(crate) const MARGIN: usize = 16;

/// A region saves work only when it leaves out enough: below this share of the rows or
/// columns the whole image is decoded instead (no crop bookkeeping, no second pass).
const WORTH_IT: f64 = 0.9;

/// What the turbo path did.
pub(super) enum Outcome {
    Decoded(Decoded),
    /// A JPEG this path leaves to the converting decoders; the buffer comes back.
    NotMine(Vec<u8>),
}

fn error(err: Error) -> DecodeError {
    let kind = match err.kind {
        ErrorKind::Limit => Kind::TooLarge,
        ErrorKind::Unsupported => Kind::Unsupported,
        // Data cut short is told before any decoder runs (`markers::inspect`), by the
        // missing end-of-image marker, not guessed from libjpeg's words.
        ErrorKind::Corrupt | ErrorKind::Init => Kind::Corrupt,
    };
    DecodeError::new(kind, format!("JPEG: {err}")).caused_by(err)
}

/// The largest DCT scale at which the part read still has at least twice the target's
/// size on both sides (Pillow's `draft` rule), or full size.
fn draft_scale(header: &Header, plan: &Wanted) -> Scale {
    let Some((tw, th)) = plan.target else {
        return Scale::ONE;
    };
    let (w, h) = plan
        .region
        .map_or((header.width, header.height), |r| (r.w, r.h));
    [8, 4, 2]
        .into_iter()
        .filter_map(Scale::new)
        .find(|s| w / s.denom() >= 2 * tw && h / s.denom() >= 2 * th)
        .unwrap_or(Scale::ONE)
}

/// The region to decode for `want` (full-scale coordinates) at `scale`: `want` scaled,
/// with a margin, its left edge moved down to a scaled iMCU boundary; `None` when it would
/// be (nearly) the whole image.
fn region(header: &Header, sampling: &[(u8, u8)], want: Rect, scale: Scale) -> Option<Region> {
    // libjpeg aligns a region to 8 x the frame's largest horizontal factor; TurboJPEG's
    // name for an unusual layout (all components 2x1, say, is "4:4:4") can be narrower.
    let widest = sampling.iter().map(|&(h, _)| 8 * usize::from(h)).max()?;
    let mcu = scale.of(header.mcu_width?.max(widest));
    let (w, h) = (header.width, header.height);
    if want.w == 0 || want.h == 0 || want.x + want.w > w || want.y + want.h > h {
        return None;
    }
    let d = scale.denom();
    let (sw, sh) = (scale.of(w), scale.of(h));
    let x0 = (want.x / d).saturating_sub(MARGIN) / mcu * mcu;
    let y0 = (want.y / d).saturating_sub(MARGIN);
    let x1 = ((want.x + want.w).div_ceil(d) + MARGIN).min(sw);
    let y1 = ((want.y + want.h).div_ceil(d) + MARGIN).min(sh);
    let saves =
        ((x1 - x0) as f64) < WORTH_IT * sw as f64 || ((y1 - y0) as f64) < WORTH_IT * sh as f64;
    saves.then_some(Region {
        x: x0,
        y: y0,
        width: x1 - x0,
        height: y1 - y0,
    })
}

pub(super) fn decode(
    bytes: &[u8],
    sampling: &[(u8, u8)],
    options: &DecodeOptions,
    mut buffer: Vec<u8>,
    plan: impl FnOnce(usize, usize) -> Wanted,
) -> Result<Outcome> {
    // One per image: loader-turbojpeg reads every header with a fresh libjpeg-turbo handle
    // anyway (a handle keeps state from the last stream), so keeping one per thread saved
    // nothing.
    let mut decompressor = Decompressor::new().map_err(error)?;
    decompressor
        .set_limits(Limits {
            max_pixels: options.max_pixels,
            ..Limits::default()
        })
        .map_err(error)?;
    let header = match decompressor.header(bytes) {
        Ok(header) => header,
        Err(e) if e.kind == ErrorKind::Unsupported => return Ok(Outcome::NotMine(buffer)),
        Err(e) => return Err(error(e)),
    };
    check_budget("JPEG", header.width, header.height, options)?;
    let output = match (options.color, header.components) {
        (ColorMode::Native, 1) => Output::Grey,
        _ => Output::Rgb,
    };
    let plan = plan(header.width, header.height);
    let scale = if options.draft {
        draft_scale(&header, &plan)
    } else {
        Scale::ONE
    };
    let mut region = plan
        .region
        .and_then(|want| region(&header, sampling, want, scale));
    let shape = match decompressor.decode(bytes, region, scale, output, &mut buffer) {
        Ok(shape) => shape,
        // A region libjpeg refuses (a layout whose alignment it reckons otherwise) is
        // no reason to fail a file that decodes whole: decode it whole.
        Err(_) if region.is_some() => {
            region = None;
            decompressor
                .decode(bytes, None, scale, output, &mut buffer)
                .map_err(error)?
        }
        Err(e) => return Err(error(e)),
    };
    let origin = region.map_or((0, 0), |r| (r.x, r.y));
    Ok(Outcome::Decoded(Decoded {
        image: Image {
            width: shape.width,
            height: shape.height,
            channels: shape.channels,
            data: buffer,
        },
        origin,
        full: (header.width, header.height),
        scale: scale.denom(),
    }))
}
