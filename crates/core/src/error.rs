//! The facade's error: everything a user of the loader can get back.

use loader_scheduler::EngineError;

use crate::source::SourceError;

/// An error from building or running a loader, or from reading a dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A storage operation failed (listing a dataset, reading a manifest).
    #[error(transparent)]
    Storage(#[from] loader_storage::Error),
    /// A batch could not be delivered: its items' errors name their keys and causes.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A sampler was misconfigured.
    #[error("sampler: {0}")]
    Sampler(#[from] loader_sampler::SamplerError),
    /// A transform was misconfigured.
    #[error("transform: {0}")]
    Transform(#[from] loader_decoder::DecodeError),
    /// The dataset description is wrong (a manifest line, an empty class, a bad shard...).
    /// Never [`SourceError::Storage`]: a source's storage failure is [`Error::Storage`].
    #[error("dataset: {0}")]
    Dataset(SourceError),
    /// The loader's settings make no sense (batch size 0, ...).
    #[error("invalid loader settings: {0}")]
    Config(#[from] ConfigError),
    /// Samples of one batch could not be collated.
    #[error("collate: {0}")]
    Collate(#[from] CollateError),
    /// `state()` is not available (e.g. with `as_completed` order), or a state does not fit.
    #[error("state: {0}")]
    State(#[from] StateError),
    /// The cache could not be opened (its directory cannot be created, locked or read).
    #[error(transparent)]
    Cache(#[from] loader_storage::layer::CacheError),
}

/// A source's error as the facade reports it: the store's failures stay
/// [`Error::Storage`], the rest are [`Error::Dataset`].
impl From<SourceError> for Error {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Storage(e) => Error::Storage(e),
            other => Error::Dataset(other),
        }
    }
}

/// An option set by key that could not be: a loader setting that makes no sense.
impl From<OptionError> for Error {
    fn from(e: OptionError) -> Self {
        Error::Config(ConfigError::Key(e))
    }
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the samples of a batch could not be stacked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollateError {
    /// A custom collate's own error.
    #[error("{0}")]
    Other(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A sample's shape differs from the batch's first.
    #[error(
        "{sample} has shape {shape:?} but the batch's first has {first:?}; give a transform that ends in a fixed-size crop"
    )]
    Shape {
        /// The sample, as its key and position name it.
        sample: String,
        /// Its shape.
        shape: [usize; 3],
        /// The first sample's.
        first: [usize; 3],
    },
    /// A sample's label cannot join the batch's labels tensor (another kind, or another
    /// size, than the batch's first).
    #[error("{sample}: {why}")]
    Labels {
        /// The sample.
        sample: String,
        /// What does not fit.
        why: String,
    },
    /// The memory a batch is written into could not be had (a lender such as torch's
    /// pinned allocator refused, or lent a block that cannot hold the batch).
    #[error("batch memory: {0}")]
    Memory(#[source] crate::memory::MemoryError),
    /// u8 and f32 samples in one batch.
    #[error("{sample} mixes u8 and f32 output")]
    MixedOutput {
        /// The sample.
        sample: String,
    },
}

/// Settings that make no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `batch_size(0)`.
    #[error("batch_size must be at least 1")]
    NoBatchSize,
    /// A dataset without samples.
    #[error("the dataset is empty")]
    EmptyDataset,
    /// Both a sampler and `shuffle`.
    #[error("give either `sampler` or `shuffle`, not both (as in PyTorch)")]
    SamplerAndShuffle,
    /// An epoch with no batch.
    #[error(
        "an epoch has no batch: {samples} samples, batch size {batch_size}{}",
        if *drop_last { ", drop_last" } else { "" }
    )]
    NoBatch {
        /// Samples per epoch.
        samples: usize,
        /// The batch size.
        batch_size: usize,
        /// Whether the short batch is dropped.
        drop_last: bool,
    },
    /// A `subset` outside the dataset or empty.
    #[error("subset {start}..{end} is not a non-empty range of the dataset's {samples} samples")]
    Subset {
        /// First index asked for.
        start: usize,
        /// One past the last index asked for.
        end: usize,
        /// Samples in the dataset.
        samples: usize,
    },
    /// A `subset` together with a sampler or `distributed`, which choose the indices too.
    #[error("give either `subset` or a sampler / `distributed`, not both")]
    SubsetAndSampler,
    /// A caller's sampler with several sources or ranks, which the global order decides.
    #[error(
        "a sampler given to the loader reads one dataset on one rank; for ranks or a mixture \
         of datasets, leave the order to the loader (distributed, weights)"
    )]
    SamplerAndMixture,
    /// Sources of a mixture with other class lists: a label would name one class in one and
    /// another in the other.
    #[error(
        "the sources of a mixture have other classes: source 0 has {first}, source {index} \
         {other}; a label would name one class in one and another in the other. Give them the \
         same class list (a manifest's classes=, the same folders)"
    )]
    MixtureClasses {
        /// The source that differs from source 0, by its place in the list.
        index: usize,
        /// Source 0's classes, abbreviated.
        first: String,
        /// Its classes, abbreviated.
        other: String,
    },
    /// Sources of a mixture with other kinds of label (classes, sets, numbers).
    #[error(
        "the sources of a mixture carry other kinds of label: source 0 has {first}, source {index} {other}"
    )]
    MixtureLabels {
        /// The source that differs from source 0, by its place in the list.
        index: usize,
        /// Source 0's kind of label.
        first: String,
        /// Its kind of label.
        other: String,
    },
    /// Sources of a mixture that cannot be read as one stream of token blocks: one of token
    /// files beside one of other samples, or token files stored or cut otherwise.
    #[error(
        "source {index} of the mixture {problem}; a mixture reads either token blocks of one \
         kind (the same id type, vocabulary and block length) or other samples, not both"
    )]
    MixtureTokens {
        /// The source that differs from source 0, by its place in the list.
        index: usize,
        /// How it differs.
        problem: String,
    },
    /// Token packing asked of a dataset whose samples are not token blocks.
    #[error(
        "the dataset holds no token blocks: open a token dataset (a Megatron-LM .idx/.bin \
         pair) with source.block_size set"
    )]
    NotTokens,
    /// A source of a mixture without samples.
    #[error("source {index} of the mixture has no samples")]
    EmptySource {
        /// The source, by its place in the list.
        index: usize,
    },
    /// The engine refused its settings.
    #[error(transparent)]
    Engine(#[from] loader_scheduler::ConfigError),
    /// A loader option out of its range, named.
    #[error("{0}")]
    Option(String),
    /// A loader option key that is unknown, or a value it cannot read.
    #[error(transparent)]
    Key(#[from] OptionError),
}

/// Why a state cannot be taken or resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Under `AsCompleted` order.
    #[error(
        "with as_completed order batches do not follow the sampler, so there is no position to resume from"
    )]
    AsCompleted,
    /// A position past the epoch.
    #[error("position {position} is beyond the epoch's {samples} samples")]
    BeyondEpoch {
        /// The position asked for.
        position: u64,
        /// Samples in the epoch.
        samples: usize,
    },
    /// An epoch no run reaches.
    #[error("epoch {epoch} is not an epoch a run reaches (at most 2^62)")]
    EpochOutOfRange {
        /// The epoch asked for.
        epoch: u64,
    },
    /// A state saved under another order: its positions would name other samples.
    #[error(
        "the state was saved under another {what} ({saved}) than this loader's ({current}); \
         its position would name other samples here, so it is refused. Resume with the \
         settings it was saved under (the world size and batch size may change)"
    )]
    OtherOrder {
        /// What differs.
        what: &'static str,
        /// The saved state's.
        saved: String,
        /// This loader's.
        current: String,
    },
    /// A state saved under another mixture (weights, sources, stop rule or batching), which
    /// a new segment could continue, but none was asked for.
    #[error(
        "the state was saved under other {what} ({saved}) than this loader's ({current}). \
         Set new_segment to continue from it: a new segment starts at its position, the \
         sources in both continue where they stood and new ones start at their first sample; \
         or resume with the mixture it was saved under"
    )]
    MixtureChanged {
        /// What differs.
        what: &'static str,
        /// The saved state's.
        saved: String,
        /// This loader's.
        current: String,
    },
    /// A state of a build that counted each rank's own samples.
    #[error(
        "the state was saved by an earlier version of the loader (order version {version}), \
         whose positions counted each rank's own samples; this version counts positions of \
         one global order, so it cannot say which samples that state had read. Start the \
         epoch it names again (set_epoch), or resume with the build that saved it"
    )]
    OldVersion {
        /// The state's order version.
        version: u32,
    },
}

impl CollateError {
    /// A custom collate's error, e.g. `CollateError::other("labels do not match")`.
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Self::Other(error.into())
    }
}

/// An option that cannot be set: a key no option has (naming those that exist), or a
/// value that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// No option has this key.
    #[error("no loader option {key:?}; the options are: {known}")]
    Unknown {
        /// The key given.
        key: String,
        /// Every key, comma-separated.
        known: String,
    },
    /// The value does not fit the option.
    #[error("loader option {key}: {problem}")]
    Value {
        /// The option.
        key: String,
        /// What is wrong with the value.
        problem: String,
    },
}
