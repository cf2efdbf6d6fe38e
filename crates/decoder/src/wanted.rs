//! What a decode is asked for once the image's size is known (a [`Wanted`]), and what it
//! gives back (a [`Decoded`] image, perhaps a part of the whole at a reduced scale).

use crate::Image;
use crate::geometry::Rect;

/// What the steps will read of an image, known once its size is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// The part read (`None`: all of it).
    pub region: Option<Rect>,
    /// The (width, height) the first resize makes of that part, when the steps resize it
    /// first: with [`DecodeOptions::draft`] a decoder may decode at 1/2, 1/4 or 1/8 scale
    /// while that leaves at least twice this size.
    pub target: Option<(usize, usize)>,
}

/// A decoded image, or the part of it its `Wanted` asked for.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The pixels decoded.
    pub image: Image,
    /// Where `image`'s top-left pixel sits in the whole image at `scale`.
    pub origin: (usize, usize),
    /// The whole image's (width, height), at full scale.
    pub full: (usize, usize),
    /// The image was decoded at 1/`scale` of each side (1: full size).
    pub scale: usize,
}

impl Decoded {
    pub(crate) fn whole(image: Image) -> Self {
        let full = (image.width, image.height);
        Self {
            image,
            origin: (0, 0),
            full,
            scale: 1,
        }
    }
}
