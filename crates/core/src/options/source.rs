//! How a dataset is found and read when it is opened: the format, and each format's own
//! settings, declared once like the loader's (`source.*` keys).

use super::{OptionKey, OptionValue};
use crate::error::{ConfigError, OptionError};
use crate::source::LabelKind;
use crate::tokens::Blocking;

/// A column chosen by name, found by its usual names, or none at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Column {
    /// The first of the format's usual names that is present (`label`, `cls`, ...).
    #[default]
    Auto,
    /// No such column: every sample goes without.
    Off,
    /// This one.
    Named(String),
}

/// `auto`, `none` (or empty), or a name.
impl OptionValue for Column {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text.trim() {
            "auto" => Column::Auto,
            "" | "none" => Column::Off,
            name => Column::Named(name.to_owned()),
        })
    }
    fn show(&self) -> String {
        match self {
            Column::Auto => "auto".into(),
            Column::Off => "none".into(),
            Column::Named(name) => name.clone(),
        }
    }
}

options_group! {
    /// How [`Dataset::open`](crate::Dataset::open) finds and reads a dataset: which format,
    /// and the settings of the format it is. A setting the format found does not read is
    /// refused, naming the formats that do.
    pub struct SourceOptions {
        /// The dataset's format by its registered name: `imagefolder`, `manifest`, `webdataset`, `parquet`, `mds`, `litdata`, `megatron` (none: found from the URL and its listing).
        format: Option<String> = None,
        /// A manifest key under the URL (CSV `key,label` or JSON lines), read instead of listing.
        manifest: Option<String> = None,
        /// How a manifest's labels are read: `class` (an index or a name), `multi` (several classes) or `values` (numbers).
        labels: LabelKind = LabelKind::Class,
        /// The classes a manifest's labels are among, in index order (none: the names it gives, or its indices).
        classes: Option<Vec<String>> = None,
        /// WebDataset: each sample's members as `to_tuple` names them, the first the main one; an ImageFolder's or a manifest's: what each object is to the stage (none: the image and `.cls`).
        fields: Option<Vec<String>> = None,
        /// Parquet, MDS and LitData: the column of the images (none: `image`, `img`, `jpg`, `jpeg`, `png` or `webp`).
        image_column: Option<String> = None,
        /// Parquet, MDS and LitData: the column of the labels (`auto`: `label` or `cls` when present; `none`: unlabelled).
        label_column: Column = Column::Auto,
        /// Parquet: other columns handed to the stage as each sample's members, by name.
        member_columns: Vec<String> = Vec::new(),
        /// MDS and Parquet token datasets: the column of the token ids, an MDS `ndarray:<integer type>` or a Parquet list of integers (none: `tokens` or `input_ids`).
        token_column: Option<String> = None,
        /// Token datasets (Megatron-LM, LitData `TokensLoader` chunks, MDS, Parquet): the tokens a row trains on; each block reads one more, for the shifted labels (required: no default fits every model).
        block_size: Option<u64> = None,
        /// Token datasets: keep each file's last tokens, fewer than a block, as a short row padded to `block_size` (default: dropped, as Megatron-LM and LitData do).
        keep_tail: bool = false,
        /// Token datasets: ids at or past this are refused as damage or a wrong id type (none: unchecked but for negative ids).
        vocab_size: Option<u64> = None,
    }
}

impl SourceOptions {
    /// Set the option at `key` (relative to `source.`) from its text.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        let key = key.trim();
        let relative = key.strip_prefix("source.").unwrap_or(key);
        let found = self.set_key(relative, value);
        super::answer(key, &format!("source.{relative}"), found, Self::keys)
    }

    /// Every source option, under `source.`: its key, its default and what it does.
    pub fn keys() -> Vec<OptionKey> {
        let mut out = Vec::new();
        Self::default().list("source.", &mut out);
        out
    }

    /// The keys (under `source.`) whose values differ from their defaults: what the caller
    /// chose, which the format found must read.
    pub fn chosen(&self) -> Vec<String> {
        let (mut now, mut defaults) = (Vec::new(), Vec::new());
        self.list("source.", &mut now);
        Self::default().list("source.", &mut defaults);
        now.into_iter()
            .zip(defaults)
            .filter(|(n, d)| n.default != d.default)
            .map(|(n, _)| n.key)
            .collect()
    }

    /// Refuse settings that only make sense together, naming the one missing.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.manifest.is_none() {
            if self.classes.is_some() {
                return Err(ConfigError::Option(
                    "source.classes lists the classes a manifest's labels are among: set \
                     source.manifest too (Python: give manifest= too)"
                        .into(),
                ));
            }
            if self.labels != LabelKind::Class {
                return Err(ConfigError::Option(
                    "source.labels says how a manifest's labels are read: set source.manifest \
                     too (Python: give manifest= too); a folder's labels are its classes, \
                     shards' their .cls members"
                        .into(),
                ));
            }
        }
        if self
            .image_column
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(ConfigError::Option(
                "source.image_column is empty: name the column of the images, or leave it \
                 unset to find it by its usual names"
                    .into(),
            ));
        }
        if self.block_size.is_none()
            && (self.keep_tail || self.vocab_size.is_some() || self.token_column.is_some())
        {
            return Err(ConfigError::Option(
                "source.keep_tail, source.vocab_size and source.token_column say how token \
                 blocks are read: set source.block_size too"
                    .into(),
            ));
        }
        if self.vocab_size == Some(0) {
            return Err(ConfigError::Option(
                "source.vocab_size is 0: no id would be read; give the tokenizer's vocabulary \
                 size, or leave it unset"
                    .into(),
            ));
        }
        self.blocking()?;
        Ok(())
    }

    /// How token files are cut: `source.block_size` and `source.keep_tail`; `None` when no
    /// block size is set.
    pub fn blocking(&self) -> Result<Option<Blocking>, ConfigError> {
        self.block_size
            .map(|len| {
                Blocking::new(len, self.keep_tail)
                    .map_err(|e| ConfigError::Option(format!("source.block_size: {e}")))
            })
            .transpose()
    }
}
