//! An image on its way through the steps.

use std::borrow::Cow;

use crate::geometry::{self, Rect};
use crate::resize::{Filter, pixels, resize};
use crate::{Image, Result};

/// An image on its way through the steps: crops and a flip stay pending (a rectangle and
/// a flag) until a resize or the output reads the pixels, so they cost no copy.
pub(super) struct View<'a> {
    pub(super) image: Cow<'a, Image>,
    pub(super) rect: Rect,
    pub(super) flip: bool,
}

impl View<'_> {
    /// A sub-rectangle given in the coordinates the view shows (after the pending flip).
    pub(super) fn crop(&mut self, shown: Rect) {
        let x = if self.flip {
            self.rect.w - shown.x - shown.w
        } else {
            shown.x
        };
        self.rect = Rect {
            x: self.rect.x + x,
            y: self.rect.y + shown.y,
            w: shown.w,
            h: shown.h,
        };
    }

    /// The pixels as shown, as a new image (used only on rare paths: padding, a flip
    /// followed by a resize).
    pub(super) fn materialize(&self) -> Image {
        let (c, r) = (self.image.channels, self.rect);
        let mut data = Vec::with_capacity(r.w * r.h * c);
        for y in r.y..r.y + r.h {
            for xs in 0..r.w {
                let x = if self.flip {
                    r.x + r.w - 1 - xs
                } else {
                    r.x + xs
                };
                data.extend_from_slice(self.image.pixel(x, y));
            }
        }
        Image {
            width: r.w,
            height: r.h,
            channels: c,
            data,
        }
    }

    /// The pixels as shown, owned: moved out when the view is the whole of an owned,
    /// unflipped image (after a resize), copied otherwise. The view is left empty until
    /// [`replace`](Self::replace).
    pub(super) fn take_image(&mut self) -> Image {
        let whole = self.rect.x == 0
            && self.rect.y == 0
            && self.rect.w == self.image.width
            && self.rect.h == self.image.height;
        if whole && !self.flip && matches!(self.image, Cow::Owned(_)) {
            let empty = Image {
                width: 0,
                height: 0,
                channels: self.image.channels,
                data: Vec::new(),
            };
            return std::mem::replace(&mut self.image, Cow::Owned(empty)).into_owned();
        }
        self.materialize()
    }

    pub(super) fn replace(&mut self, image: Image) {
        self.rect = Rect {
            x: 0,
            y: 0,
            w: image.width,
            h: image.height,
        };
        self.image = Cow::Owned(image);
        self.flip = false;
    }

    pub(super) fn resize_to(&mut self, height: usize, width: usize, filter: Filter) -> Result<()> {
        if self.flip {
            // Keep torchvision's order exactly: flip first, then resample.
            let flipped = self.materialize();
            self.replace(flipped);
        }
        let resized = resize(&self.image, pixels(self.rect), height, width, filter)?;
        self.replace(resized);
        Ok(())
    }

    /// `Resize` to (`height`, `width`) then a crop of it, computed only where the crop
    /// is: the evaluation pipeline's resize then costs a third less.
    pub(super) fn resize_and_crop(
        &mut self,
        height: usize,
        width: usize,
        crop: Rect,
        filter: Filter,
    ) -> Result<()> {
        if self.flip {
            let flipped = self.materialize();
            self.replace(flipped);
        }
        let (sx, sy) = (
            self.rect.w as f64 / width as f64,
            self.rect.h as f64 / height as f64,
        );
        let region = (
            self.rect.x as f64 + crop.x as f64 * sx,
            self.rect.y as f64 + crop.y as f64 * sy,
            crop.w as f64 * sx,
            crop.h as f64 * sy,
        );
        let resized = resize(&self.image, region, crop.h, crop.w, filter)?;
        self.replace(resized);
        Ok(())
    }
}

/// torchvision's zero padding so a center crop of `height` x `width` fits.
pub(super) fn pad(image: &Image, height: usize, width: usize) -> Image {
    let [left, top, right, bottom] =
        geometry::center_crop_padding(image.height, image.width, height, width);
    let (w, h, c) = (
        image.width + left + right,
        image.height + top + bottom,
        image.channels,
    );
    let mut data = vec![0u8; w * h * c];
    for y in 0..image.height {
        let src = &image.data[y * image.width * c..][..image.width * c];
        data[((y + top) * w + left) * c..][..image.width * c].copy_from_slice(src);
    }
    Image {
        width: w,
        height: h,
        channels: c,
        data,
    }
}
