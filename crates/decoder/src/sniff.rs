//! Which image formats this crate decodes, known by extension or by magic bytes.

/// An image format this crate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG/JFIF (baseline or progressive; gray, YCbCr, CMYK or YCCK).
    Jpeg,
    /// PNG (any bit depth and colour type).
    Png,
    /// WebP, lossy or lossless (image-webp).
    WebP,
    /// Windows bitmaps (the `image` crate's decoder).
    Bmp,
    /// TIFF (the `tiff` crate); more than 8 bits per channel are scaled to 8.
    Tiff,
    /// Netpbm: PPM, PGM, PBM, PAM (the `image` crate's decoder).
    Pnm,
}

impl Format {
    /// The format's usual name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
            Format::WebP => "WebP",
            Format::Bmp => "BMP",
            Format::Tiff => "TIFF",
            Format::Pnm => "PNM",
        }
    }

    /// The format a file extension names, among those this crate decodes (any case):
    /// `jpg`, `jpeg`, `jpe`, `jfif`, `png`, `webp`, `bmp`, `tif`, `tiff`, `ppm`, `pgm`,
    /// `pbm`, `pnm`: every format torchvision's ImageFolder lists. A caller that lists
    /// files can refuse the others up front instead of failing on each at read time.
    pub fn from_extension(extension: &str) -> Option<Format> {
        Self::EXTENSIONS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(extension))
            .map(|(_, format)| *format)
    }

    /// Every file extension this crate decodes (lowercase), with its format.
    pub const EXTENSIONS: [(&'static str, Format); 13] = [
        ("jpg", Format::Jpeg),
        ("jpeg", Format::Jpeg),
        ("jpe", Format::Jpeg),
        ("jfif", Format::Jpeg),
        ("png", Format::Png),
        ("webp", Format::WebP),
        ("bmp", Format::Bmp),
        ("tif", Format::Tiff),
        ("tiff", Format::Tiff),
        ("ppm", Format::Pnm),
        ("pgm", Format::Pnm),
        ("pbm", Format::Pnm),
        ("pnm", Format::Pnm),
    ];

    /// The format the magic bytes announce, if any; file names are not trusted.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        let netpbm = matches!(bytes, [b'P', b'1'..=b'7', next, ..] if next.is_ascii_whitespace());
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
            Some(Format::WebP)
        } else if bytes.starts_with(b"BM") && bytes.len() >= 14 {
            Some(Format::Bmp)
        } else if [b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"]
            .iter()
            .any(|magic| bytes.starts_with(*magic))
        {
            Some(Format::Tiff)
        } else if netpbm {
            Some(Format::Pnm)
        } else {
            None
        }
    }
}
