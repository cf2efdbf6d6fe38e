//! Which columns of a table-like dataset (Parquet files, MDS shards) hold its images and
//! labels, or its token ids: the ones the user names, else the first present of the names
//! datasets give them.

/// Names an image column goes by when none is given: Hugging Face's `image` (a struct of
/// `bytes` and `path` in Parquet), CIFAR's `img`, WebDataset-style extensions.
pub(crate) const IMAGE_NAMES: [&str; 6] = ["image", "img", "jpg", "jpeg", "png", "webp"];

/// Names a label column goes by when none is given.
pub(crate) const LABEL_NAMES: [&str; 2] = ["label", "cls"];

/// Names a token column goes by when none is given: llm-foundry's `tokens`, Hugging Face's
/// `input_ids`.
pub(crate) const TOKEN_NAMES: [&str; 2] = ["tokens", "input_ids"];

/// The token column read when none is named: the first of [`TOKEN_NAMES`] present (`find`
/// gives its place) that holds ids (`holds_ids`), else the first present, whose refusal then
/// says what it holds; `listed` says what columns there are, when there is none.
pub(crate) fn default_token_column(
    find: impl Fn(&str) -> Option<usize>,
    holds_ids: impl Fn(usize) -> bool,
    listed: impl FnOnce() -> String,
) -> Result<usize, String> {
    let present: Vec<usize> = TOKEN_NAMES.iter().filter_map(|n| find(n)).collect();
    present
        .iter()
        .copied()
        .find(|&i| holds_ids(i))
        .or(present.first().copied())
        .ok_or_else(|| {
            format!(
                "no token column among {TOKEN_NAMES:?}; name the column that holds the ids \
                 (source.token_column); {}",
                listed()
            )
        })
}

/// What a dataset opened for images says when its rows hold token ids instead (`found`:
/// why no image column was).
pub(crate) fn holds_tokens(found: &str) -> String {
    format!(
        "its rows hold token ids ({found}): they are read in blocks of tokens; set \
         source.block_size to the tokens a row trains on (Python: block_size=, loader run: \
         --block-size)"
    )
}

/// The image, label and token columns a user named, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ColumnNames {
    /// The image column; `None`: the first of [`IMAGE_NAMES`] present.
    pub(crate) image: Option<String>,
    /// The label column (`""`: none); `None`: the first of [`LABEL_NAMES`] present, or none.
    pub(crate) label: Option<String>,
    /// The token column; `None`: the first of [`TOKEN_NAMES`] present.
    pub(crate) tokens: Option<String>,
}

impl ColumnNames {
    /// These names with those `options` set (`source.image_column`,
    /// `source.label_column`, `source.token_column`) over them.
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
        if let Some(tokens) = &options.token_column {
            self.tokens = Some(tokens.clone());
        }
        self
    }
}
