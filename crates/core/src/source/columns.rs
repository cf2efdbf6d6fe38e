//! Which columns of a table-like dataset (Parquet files, MDS shards) hold its images and
//! labels: the ones the user names, else the first present of the names datasets give them.

/// Names an image column goes by when none is given: Hugging Face's `image` (a struct of
/// `bytes` and `path` in Parquet), CIFAR's `img`, WebDataset-style extensions.
pub(crate) const IMAGE_NAMES: [&str; 6] = ["image", "img", "jpg", "jpeg", "png", "webp"];

/// Names a label column goes by when none is given.
pub(crate) const LABEL_NAMES: [&str; 2] = ["label", "cls"];

/// The image and label columns a user named, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ColumnNames {
    /// The image column; `None`: the first of [`IMAGE_NAMES`] present.
    pub(crate) image: Option<String>,
    /// The label column (`""`: none); `None`: the first of [`LABEL_NAMES`] present, or none.
    pub(crate) label: Option<String>,
}

impl ColumnNames {
    /// Whether either column was named: refused for a format without columns.
    pub(crate) fn named(&self) -> bool {
        self.image.is_some() || self.label.is_some()
    }
}
