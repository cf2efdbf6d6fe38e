//! What can be wrong with a source: the one error every source returns, whether the
//! dataset's description is wrong, a shard is, or the store failed under it.

/// Results of reading a source.
pub type Result<T, E = SourceError> = std::result::Result<T, E>;

/// What is wrong with a source: its description (a manifest line, an empty class), one of
/// its shards (named with the byte where the problem starts), or the store under it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The store failed (listing a dataset, reading a manifest or a shard's index); at
    /// the facade this is [`Error::Storage`](crate::Error::Storage), as before sources had
    /// their own error.
    #[error(transparent)]
    Storage(#[from] loader_storage::Error),
    /// ImageFolder found no class folder.
    #[error("no class folders under {store}; ImageFolder expects class/image files")]
    NoClassFolders {
        /// The store listed.
        store: String,
    },
    /// ImageFolder found class folders without images.
    #[error(
        "found no image files (extensions {}) in class folder(s) {folders} of {store}",
        super::extensions::IMAGE_EXTENSIONS.join(", ")
    )]
    EmptyClasses {
        /// The folders, comma-separated.
        folders: String,
        /// The store listed.
        store: String,
    },
    /// A manifest line is wrong.
    #[error("line {line}: {problem}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// A manifest is not UTF-8.
    #[error("manifest {key:?} on {store} is not UTF-8: {source}")]
    NotUtf8 {
        /// Its key.
        key: String,
        /// Its store.
        store: String,
        /// Where the text breaks.
        source: std::str::Utf8Error,
    },
    /// A manifest has no sample.
    #[error("the manifest lists no samples")]
    EmptyManifest,
    /// A fixed class list is empty.
    #[error("the class list is empty")]
    NoClassList,
    /// A layout that does not describe its items.
    #[error("{0}")]
    Invalid(String),
    /// `source.format` names no registered format.
    #[error("source.format={name:?} names no format; known: {known}")]
    UnknownFormat {
        /// The name given.
        name: String,
        /// The registered formats' names.
        known: String,
    },
    /// No format, or more than one equally, reads what a URL names.
    #[error(
        "{url}: {found}; set source.format to one of {known} (Python: format=...) to say which"
    )]
    Layout {
        /// The dataset's URL, without credentials.
        url: String,
        /// What was found there and which formats it fits.
        found: String,
        /// The registered formats' names.
        known: String,
    },
    /// A source setting the dataset's format does not read: refused, not ignored.
    #[error(
        "{key} is read by {readers}, but {url} is {format}: leave it out, or set source.format if the format was mistaken"
    )]
    Unread {
        /// The setting, e.g. `source.image_column`.
        key: String,
        /// The formats that read it.
        readers: String,
        /// The dataset's URL, without credentials.
        url: String,
        /// The format it was opened as, described.
        format: String,
    },
    /// Reading a dataset could not start its thread or runtime.
    #[error("cannot start a {what} to read the dataset: {source}")]
    Start {
        /// What could not start.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Reading the dataset panicked.
    #[error("reading the dataset panicked")]
    Panicked,

    /// The tar structure is broken (truncated, a bad header checksum, a bad size field).
    #[error("shard {shard:?} on {store}: at byte {offset}: {problem}")]
    Corrupt {
        /// The shard's key.
        shard: String,
        /// Its store.
        store: String,
        /// Where the problem starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A sample breaks WebDataset's rules (no image member, a repeated suffix, a bad label).
    #[error("shard {shard:?} on {store}: sample {key:?} at byte {offset}: {problem}")]
    Sample {
        /// The shard's key.
        shard: String,
        /// Its store.
        store: String,
        /// The sample's key.
        key: String,
        /// Where its first member's header starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A Parquet file cannot be read as a dataset (its footer, offset index, columns or
    /// labels).
    #[error("Parquet file {file:?} on {store}: {problem}")]
    Parquet {
        /// The file's key.
        file: String,
        /// Its store.
        store: String,
        /// What is wrong, and where (row group, row).
        problem: String,
    },
    /// An MDS dataset cannot be read (its index, a shard's offset table, its columns).
    #[error("MDS file {file:?} on {store}: {problem}")]
    Mds {
        /// The index's or shard's key.
        file: String,
        /// Its store.
        store: String,
        /// What is wrong.
        problem: String,
    },
    /// A LitData dataset cannot be read (its index, a chunk's table, its leaves).
    #[error("LitData file {file:?} on {store}: {problem}")]
    LitData {
        /// The index's or chunk's key.
        file: String,
        /// Its store.
        store: String,
        /// What is wrong.
        problem: String,
    },
    /// A Megatron-LM indexed dataset cannot be read (its `.idx` tables, its `.bin` file).
    #[error("Megatron file {file:?} on {store}: {problem}")]
    Megatron {
        /// The `.idx` or `.bin` file's key.
        file: String,
        /// Its store.
        store: String,
        /// What is wrong.
        problem: String,
    },
    /// The shard list or URL cannot be understood.
    #[error("shard list {0:?}: {1}")]
    List(String, String),
}

impl SourceError {
    /// Whether a shard is to blame (its tar structure, one of its samples, or the shard list),
    /// rather than the dataset's description or the store.
    pub fn is_shard(&self) -> bool {
        matches!(
            self,
            Self::Corrupt { .. }
                | Self::Sample { .. }
                | Self::List(..)
                | Self::Parquet { .. }
                | Self::Mds { .. }
                | Self::LitData { .. }
                | Self::Megatron { .. }
        )
    }
}

/// What can go wrong writing a format's files (`loader pack`, `loader gen`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The file could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The Parquet writer refused a row group or the footer.
    #[error("writing Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// The index could not be encoded.
    #[error("writing an index: {0}")]
    Json(#[from] serde_json::Error),
    /// A sample does not fit the format (a value over its size field, a wrong column count).
    #[error("{0}")]
    Sample(String),
}
