//! Which keys name images: the extensions torchvision's ImageFolder lists.

/// File extensions torchvision's ImageFolder accepts, compared case-insensitively.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp",
];

/// The image extension `key` ends in, if any (as written, not lowercased).
pub(crate) fn image_extension(key: &str) -> Option<&str> {
    key.rsplit_once('.')
        .map(|(_, ext)| ext)
        .filter(|ext| IMAGE_EXTENSIONS.iter().any(|e| e.eq_ignore_ascii_case(ext)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_extensions_are_case_insensitive() {
        let is_image = |k| image_extension(k).is_some();
        assert!(is_image("a/b.JPEG") && is_image("a/b.png") && is_image("x/y.Jpg"));
        assert!(!is_image("a/b.txt") && !is_image("a/jpg"));
    }

    #[test]
    fn every_listed_extension_is_one_the_decoder_reads() {
        // A listed file the decoder cannot read would fail mid-epoch.
        for ext in IMAGE_EXTENSIONS {
            assert!(
                loader_decoder::Format::from_extension(ext).is_some(),
                "{ext}"
            );
        }
    }
}
