//! What keys name, by their suffixes: images (the extensions torchvision's ImageFolder
//! lists), tar shards, Parquet files, an `index.json`; and what a listing holds of each,
//! which is how the formats tell a folder's layout apart.

use loader_storage::ObjectMeta;

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

/// Whether `name` ends in `suffix`, in any case (without a lowercased copy: a listing of
/// millions of keys is asked this several times).
fn ends_with_any_case(name: &str, suffix: &str) -> bool {
    let (name, suffix) = (name.as_bytes(), suffix.as_bytes());
    name.len() >= suffix.len() && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// Whether a key or URL names a Parquet file (by its `.parquet` suffix).
pub fn is_parquet(name: &str) -> bool {
    ends_with_any_case(name, ".parquet")
}

/// Whether a key or URL names a tar shard.
pub(crate) fn is_tar(name: &str) -> bool {
    ends_with_any_case(name, ".tar")
}

/// The file that describes an MDS or LitData dataset.
pub const INDEX: &str = "index.json";

/// Whether a key or URL names an MDS or LitData index (`.../index.json`).
pub fn is_index(name: &str) -> bool {
    name == INDEX || name.ends_with("/index.json")
}

/// The suffix of a compressed tar (`.tar.gz`, `.tgz`, ...), if `name` has one.
pub(crate) fn compressed_tar(name: &str) -> Option<&'static str> {
    const SUFFIXES: [&str; 7] = [
        ".tar.gz",
        ".tgz",
        ".tar.zst",
        ".tar.zstd",
        ".tar.bz2",
        ".tar.xz",
        ".tar.lz4",
    ];
    SUFFIXES.into_iter().find(|s| ends_with_any_case(name, s))
}

/// What a listing holds, as the formats tell a layout apart: `.tar` shards come before
/// anything beside them, images before tables (a `datasets` imagefolder's
/// `metadata.parquet`), Parquet files before a top-level `index.json`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Holds {
    pub(crate) shards: bool,
    pub(crate) compressed: bool,
    pub(crate) images: bool,
    pub(crate) parquet: bool,
    pub(crate) index: bool,
}

impl Holds {
    pub(crate) fn of(listed: &[ObjectMeta]) -> Self {
        let any = |f: &dyn Fn(&str) -> bool| listed.iter().any(|m| f(&m.key));
        Self {
            shards: any(&is_tar),
            compressed: any(&|k| compressed_tar(k).is_some()),
            images: any(&|k| image_extension(k).is_some()),
            parquet: any(&is_parquet),
            index: any(&|k| k == INDEX),
        }
    }
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
