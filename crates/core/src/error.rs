//! The facade's error: everything a user of the loader can get back.

use loader_scheduler::EngineError;

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
    /// The dataset description is wrong (a manifest line, an empty class, ...).
    #[error("dataset: {0}")]
    Dataset(String),
    /// The loader's settings make no sense (batch size 0, ...).
    #[error("invalid loader settings: {0}")]
    Config(String),
    /// Samples of one batch could not be collated.
    #[error("collate: {0}")]
    Collate(String),
    /// `state()` is not available (e.g. with `as_completed` order).
    #[error("state: {0}")]
    State(String),
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
