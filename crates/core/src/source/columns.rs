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
    /// These names with those `options` set (`source.image_column`,
    /// `source.label_column`) over them.
    pub(crate) fn with_options(mut self, options: &crate::options::SourceOptions) -> Self {
        use crate::options::Column;
        if let Some(image) = &options.image_column {
            self.image = Some(image.clone());
        }
        match &options.label_column {
            Column::Auto => {}
            Column::Off => self.label = Some(String::new()),
            Column::Named(name) => self.label = Some(name.clone()),
        }
        self
    }
}
