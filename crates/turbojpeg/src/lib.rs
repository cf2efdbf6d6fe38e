//! libjpeg-turbo's decoder (TurboJPEG 3 API) behind a small safe interface: read the
//! header, then decode the whole image or a region of it, optionally scaled by 1/2, 1/4
//! or 1/8 in the DCT domain, into a caller's buffer.
//!
//! libjpeg-turbo is what Pillow and torchvision decode with: its pixels are theirs. It
//! reports errors by return value (its own `setjmp` stays inside each call), so no C
//! error crosses into Rust frames. Every call is bounded: the pixel count is checked
//! against the caller's budget before a buffer is sized, and the decoder itself is given
//! a pixel, memory and progressive-scan limit.
//!
//! ```
//! use loader_turbojpeg::{Decompressor, Output, Region, Scale};
//!
//! # fn main() -> Result<(), loader_turbojpeg::Error> {
//! # let jpeg = include_bytes!("../tests/grey_24x16.jpg");
//! let mut decoder = Decompressor::new()?;
//! let header = decoder.header(jpeg)?;
//! assert_eq!((header.width, header.height), (24, 16));
//!
//! // The 8x8 pixels at (8, 4): `x` is a multiple of the iMCU width, as libjpeg asks.
//! let region = Region { x: 8, y: 4, width: 8, height: 8 };
//! let mut pixels = Vec::new();
//! let shape = decoder.decode(jpeg, Some(region), Scale::ONE, Output::Rgb, &mut pixels)?;
//! assert_eq!((shape.width, shape.height, pixels.len()), (8, 8, 8 * 8 * 3));
//! # Ok(()) }
//! ```
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int};

use turbojpeg_sys as sys;

/// A failed call: libjpeg-turbo's own message, and whether the data or the library's
/// limits were the cause.
#[derive(Debug, thiserror::Error)]
#[error("libjpeg-turbo: {message}")]
pub struct Error {
    /// What libjpeg-turbo said (or what this wrapper refused).
    pub message: String,
    /// Why the call failed.
    pub kind: ErrorKind,
}

/// Why a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The data is not a JPEG libjpeg-turbo can decode.
    Corrupt,
    /// A limit was reached: too many pixels, too much memory, too many scans.
    Limit,
    /// The image is a kind this wrapper leaves to other decoders (12-bit, lossless,
    /// CMYK), or the region or scale does not fit it.
    Unsupported,
    /// The library could not start (out of memory).
    Init,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind,
        }
    }
}

/// What the header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Components in the output colour space: 1 (grey) or 3 (YCbCr or RGB). CMYK and
    /// YCCK images are refused by [`Decompressor::header`].
    pub components: usize,
    /// Whether the scans are progressive (the whole image is entropy-decoded before any
    /// row comes out, so a region saves less).
    pub progressive: bool,
    /// The width of an iMCU in pixels at full scale as TurboJPEG names the layout: a
    /// region's left edge is a multiple of it (scaled). For sampling factors outside the
    /// named layouts libjpeg aligns to `8 x` the largest horizontal factor, which can be
    /// wider: a caller that knows the factors aligns to that. `None` for layouts TurboJPEG
    /// does not name, which decode whole only.
    pub mcu_width: Option<usize>,
}

/// A DCT-domain scale: `1/denom` of each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    denom: usize,
}

impl Scale {
    /// Full size.
    pub const ONE: Scale = Scale { denom: 1 };

    /// `1/denom`, for a `denom` of 1, 2, 4 or 8.
    pub fn new(denom: usize) -> Option<Scale> {
        matches!(denom, 1 | 2 | 4 | 8).then_some(Scale { denom })
    }

    /// The denominator.
    pub fn denom(self) -> usize {
        self.denom
    }

    /// A full-size length at this scale, as libjpeg rounds it (up).
    pub fn of(self, length: usize) -> usize {
        length.div_ceil(self.denom)
    }
}

/// A rectangle of the scaled image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Left edge: a multiple of the scaled iMCU width ([`Header::mcu_width`] / denom).
    pub x: usize,
    /// Top edge.
    pub y: usize,
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

/// The pixel layout written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// 3 bytes a pixel.
    Rgb,
    /// 1 byte a pixel (grey images only).
    Grey,
}

/// The size of what [`Decompressor::decode`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Bytes a pixel.
    pub channels: usize,
}

/// Limits handed to libjpeg-turbo itself, beside the budget checked before each decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most pixels an image may declare.
    pub max_pixels: u64,
    /// The most scans a progressive image may have: a few hundred at most in real files;
    /// a crafted one with millions would otherwise run for minutes.
    pub max_scans: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pixels: 64 << 20,
            max_scans: 500,
        }
    }
}

/// A TurboJPEG decompression instance: one per thread, reused across images.
pub struct Decompressor {
    handle: sys::tjhandle,
    limits: Option<Limits>,
    /// The handle has read a stream. libjpeg-turbo keeps state from it: a stream cut short
    /// left it half-way (the next good file failed with "Bogus DQT index"), and a stream
    /// without a frame leaves the last image's size in place. So each header is read by a
    /// fresh handle (creating one costs well under a microsecond).
    used: bool,
}

// SAFETY: a TurboJPEG handle holds no thread-local state; it may move between threads as
// long as one thread uses it at a time, which `&mut self` on every call guarantees.
unsafe impl Send for Decompressor {}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init, is non-null, and is destroyed once.
        unsafe { sys::tj3Destroy(self.handle) }
    }
}

/// iMCU widths by TJSAMP (444, 422, 420, GRAY, 440, 411, 441), as `tjMCUWidth`.
const MCU_WIDTH: [usize; 7] = [8, 16, 16, 8, 8, 32, 8];

fn param(p: sys::TJPARAM) -> c_int {
    // The TJPARAM values are small enumerators (0..=25).
    c_int::try_from(p).unwrap_or(c_int::MAX)
}

impl Decompressor {
    /// A new instance.
    pub fn new() -> Result<Self, Error> {
        let mut decompressor = Self {
            handle: Self::init()?,
            limits: None,
            used: false,
        };
        decompressor.set_limits(Limits::default())?;
        Ok(decompressor)
    }

    fn init() -> Result<sys::tjhandle, Error> {
        let init = c_int::try_from(sys::TJINIT_TJINIT_DECOMPRESS).unwrap_or(1);
        // SAFETY: tj3Init has no preconditions; a null return means it failed.
        let handle = unsafe { sys::tj3Init(init) };
        if handle.is_null() {
            return Err(Error::new(
                ErrorKind::Init,
                "could not create a decompressor (out of memory)",
            ));
        }
        Ok(handle)
    }

    /// A handle that has read nothing, with the same limits.
    fn fresh(&mut self) -> Result<(), Error> {
        if !self.used {
            return Ok(());
        }
        let fresh = Self::init()?;
        // SAFETY: the old handle came from tj3Init and is destroyed once; it is replaced
        // at once, so no call sees it again.
        unsafe { sys::tj3Destroy(self.handle) };
        self.handle = fresh;
        self.used = false;
        if let Some(limits) = self.limits.take() {
            self.set_limits(limits)?;
        }
        Ok(())
    }

    fn last_error(&self, kind: ErrorKind) -> Error {
        // SAFETY: the handle is live; the returned string is owned by the handle and
        // NUL-terminated, and copied before any other call on it.
        let message = unsafe {
            let text = sys::tj3GetErrorStr(self.handle);
            if text.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
        };
        let kind = if kind == ErrorKind::Corrupt
            && (message.contains("exceeds")
                || message.contains("limit")
                || message.contains("more than"))
        {
            ErrorKind::Limit
        } else {
            kind
        };
        Error::new(kind, message)
    }

    /// A call's status as a result: a warning (damage libjpeg reads past, as Pillow and
    /// torchvision do: extraneous bytes, a bad ICC marker) is not a failure.
    fn check(&mut self, status: c_int) -> Result<(), Error> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the handle is live.
        let code = unsafe { sys::tj3GetErrorCode(self.handle) };
        match u32::try_from(code) {
            Ok(sys::TJERR_TJERR_WARNING) => Ok(()),
            _ => Err(self.last_error(ErrorKind::Corrupt)),
        }
    }

    fn set(&mut self, p: sys::TJPARAM, value: c_int) -> Result<(), Error> {
        // SAFETY: the handle is live; tj3Set validates the parameter and value.
        if unsafe { sys::tj3Set(self.handle, param(p), value) } != 0 {
            return Err(self.last_error(ErrorKind::Unsupported));
        }
        Ok(())
    }

    fn get(&self, p: sys::TJPARAM) -> c_int {
        // SAFETY: the handle is live; tj3Get only reads a field.
        unsafe { sys::tj3Get(self.handle, param(p)) }
    }

    /// Hand `limits` to libjpeg-turbo (kept until changed).
    pub fn set_limits(&mut self, limits: Limits) -> Result<(), Error> {
        if self.limits == Some(limits) {
            return Ok(());
        }
        let clamp = |v: u64| c_int::try_from(v).unwrap_or(c_int::MAX);
        self.set(sys::TJPARAM_TJPARAM_MAXPIXELS, clamp(limits.max_pixels))?;
        // Megabytes for buffers beyond the output: a progressive image keeps all its DCT
        // coefficients (2 bytes each, up to 3 components at full resolution: 6 bytes a
        // pixel), with room for libjpeg's own tables.
        self.set(
            sys::TJPARAM_TJPARAM_MAXMEMORY,
            clamp((limits.max_pixels.saturating_mul(8) >> 20).saturating_add(64)),
        )?;
        self.set(
            sys::TJPARAM_TJPARAM_SCANLIMIT,
            clamp(u64::from(limits.max_scans)),
        )?;
        // Warnings (extraneous bytes, a damaged restart interval) are decoded through, as
        // Pillow and torchvision do; a file cut short is the caller's to refuse.
        self.set(sys::TJPARAM_TJPARAM_STOPONWARNING, 0)?;
        self.limits = Some(limits);
        Ok(())
    }

    /// Read the header of `jpeg`.
    pub fn header(&mut self, jpeg: &[u8]) -> Result<Header, Error> {
        self.fresh()?;
        self.used = true;
        self.read_header(jpeg)
    }

    fn read_header(&mut self, jpeg: &[u8]) -> Result<Header, Error> {
        let size = jpeg.len().try_into().unwrap_or(0);
        // SAFETY: the pointer and length describe `jpeg`, which libjpeg-turbo only reads
        // within that length (its memory source never reads past `size`).
        let status = unsafe { sys::tj3DecompressHeader(self.handle, jpeg.as_ptr(), size) };
        self.check(status)?;
        let dimension = |v: c_int| usize::try_from(v).unwrap_or(0);
        let width = dimension(self.get(sys::TJPARAM_TJPARAM_JPEGWIDTH));
        let height = dimension(self.get(sys::TJPARAM_TJPARAM_JPEGHEIGHT));
        // A header cut short is only a warning to libjpeg; without a frame there is
        // nothing to decode.
        if width == 0 || height == 0 {
            return Err(Error::new(
                ErrorKind::Corrupt,
                "no frame header (the data ends before it, or it is missing)",
            ));
        }
        if self.get(sys::TJPARAM_TJPARAM_LOSSLESS) == 1 {
            return Err(Error::new(ErrorKind::Unsupported, "a lossless JPEG"));
        }
        if self.get(sys::TJPARAM_TJPARAM_PRECISION) != 8 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "a JPEG of other than 8-bit precision",
            ));
        }
        let colorspace = u32::try_from(self.get(sys::TJPARAM_TJPARAM_COLORSPACE)).ok();
        let components = match colorspace {
            Some(sys::TJCS_TJCS_GRAY) => 1,
            Some(sys::TJCS_TJCS_YCbCr | sys::TJCS_TJCS_RGB) => 3,
            _ => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "a CMYK or YCCK JPEG (left to the converting decoder)",
                ));
            }
        };
        let mcu_width = usize::try_from(self.get(sys::TJPARAM_TJPARAM_SUBSAMP))
            .ok()
            .and_then(|s| MCU_WIDTH.get(s).copied());
        Ok(Header {
            width,
            height,
            components,
            progressive: self.get(sys::TJPARAM_TJPARAM_PROGRESSIVE) == 1,
            mcu_width,
        })
    }

    /// Decode `jpeg` at `scale`, all of it or only `region` of the scaled image, into
    /// `pixels` (resized to fit; its old contents are overwritten). The header is read
    /// again here, so the buffer is always sized from the very bytes decoded.
    pub fn decode(
        &mut self,
        jpeg: &[u8],
        region: Option<Region>,
        scale: Scale,
        output: Output,
        pixels: &mut Vec<u8>,
    ) -> Result<Shape, Error> {
        let header = &self.header(jpeg)?;
        let (full_w, full_h) = (scale.of(header.width), scale.of(header.height));
        let region = region.unwrap_or(Region {
            x: 0,
            y: 0,
            width: full_w,
            height: full_h,
        });
        let whole =
            region.x == 0 && region.y == 0 && (region.width, region.height) == (full_w, full_h);
        let fits = region.width > 0
            && region.height > 0
            && region
                .x
                .checked_add(region.width)
                .is_some_and(|r| r <= full_w)
            && region
                .y
                .checked_add(region.height)
                .is_some_and(|b| b <= full_h);
        if !fits {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("the region {region:?} is not inside the {full_w}x{full_h} scaled image"),
            ));
        }
        if !whole {
            let aligned = header
                .mcu_width
                .map(|m| scale.of(m))
                .is_some_and(|m| region.x.is_multiple_of(m));
            if !aligned {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "the region's left edge {} is not a multiple of the scaled iMCU width {:?}",
                        region.x, header.mcu_width
                    ),
                ));
            }
        }
        let (format, channels) = match output {
            Output::Rgb => (sys::TJPF_TJPF_RGB, 3),
            Output::Grey if header.components == 1 => (sys::TJPF_TJPF_GRAY, 1),
            Output::Grey => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "grey output of a colour image",
                ));
            }
        };
        let limits = self.limits.unwrap_or_default();
        let declared = header.width as u64 * header.height as u64;
        if declared > limits.max_pixels {
            return Err(Error::new(
                ErrorKind::Limit,
                format!("{declared} pixels, over the limit of {}", limits.max_pixels),
            ));
        }
        let pitch = region
            .width
            .checked_mul(channels)
            .filter(|p| *p <= c_int::MAX as usize)
            .ok_or_else(|| Error::new(ErrorKind::Limit, "a row too wide"))?;
        let len = pitch
            .checked_mul(region.height)
            .ok_or_else(|| Error::new(ErrorKind::Limit, "an image too large"))?;
        pixels.clear();
        pixels.resize(len, 0);

        let factor = sys::tjscalingfactor {
            num: 1,
            denom: c_int::try_from(scale.denom).unwrap_or(1),
        };
        // SAFETY: the handle is live and the header was read (tj3SetCroppingRegion checks
        // the region against it and the scale).
        unsafe {
            if sys::tj3SetScalingFactor(self.handle, factor) != 0 {
                return Err(self.last_error(ErrorKind::Unsupported));
            }
            let crop = if whole {
                sys::tjregion {
                    x: 0,
                    y: 0,
                    w: 0,
                    h: 0,
                }
            } else {
                let int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
                sys::tjregion {
                    x: int(region.x),
                    y: int(region.y),
                    w: int(region.width),
                    h: int(region.height),
                }
            };
            if sys::tj3SetCroppingRegion(self.handle, crop) != 0 {
                return Err(self.last_error(ErrorKind::Unsupported));
            }
        }
        let size = jpeg.len().try_into().unwrap_or(0);
        let pitch_c = c_int::try_from(pitch).unwrap_or(c_int::MAX);
        let format = c_int::try_from(format).unwrap_or(0);
        // SAFETY: `pixels` holds exactly `pitch * region.height` bytes, the size
        // libjpeg-turbo writes for this region at this scale and pixel format: the region
        // was checked against the header this handle just read from these same bytes (and
        // by tj3SetCroppingRegion), and a stream without a frame fails before any write;
        // `jpeg` is read within its length.
        let status = unsafe {
            sys::tj3Decompress8(
                self.handle,
                jpeg.as_ptr(),
                size,
                pixels.as_mut_ptr(),
                pitch_c,
                format,
            )
        };
        self.check(status)?;
        Ok(Shape {
            width: region.width,
            height: region.height,
            channels,
        })
    }
}
