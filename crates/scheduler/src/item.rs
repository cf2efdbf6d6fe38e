//! What flows through the engine: planned batches in, finished batches (or errors) out.

use std::fmt;
use std::sync::Arc;

/// One item to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// Its dataset index.
    pub index: u64,
    /// Its storage key.
    pub key: Arc<str>,
}

/// A batch as the sampler cut it: the unit of order and of resuming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// The epoch it belongs to.
    pub epoch: u64,
    /// The epoch position (in items) of its first item.
    pub position: u64,
    /// Its items, in order.
    pub items: Vec<WorkItem>,
    /// Whether it ends its epoch.
    pub last_in_epoch: bool,
}

/// What the CPU stage is told about the sample it transforms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleInfo {
    /// The dataset index.
    pub index: u64,
    /// The storage key.
    pub key: Arc<str>,
    /// The epoch.
    pub epoch: u64,
    /// Its position within the epoch.
    pub position: u64,
}

/// An error from the CPU stage.
pub type StageError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an item failed.
#[derive(Debug)]
pub enum ItemFailure {
    /// Reading it from storage failed (after the store's own retries).
    Fetch(loader_storage::Error),
    /// Decoding or transforming it failed.
    Stage(StageError),
    /// The CPU stage (or, in a blocking strategy, anything else of the item's work)
    /// panicked; the panic was caught so the engine goes on. A backend's panic is a
    /// [`ItemFailure::Fetch`] error naming the key and backend.
    Panic(String),
    /// The engine was dropped while the item was loading.
    Cancelled,
}

/// A failed item: which one, and why.
#[derive(Debug)]
pub struct ItemError {
    /// The sample.
    pub info: SampleInfo,
    /// The cause.
    pub failure: ItemFailure,
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sample {} (key {:?}, epoch {}): ",
            self.info.index, self.info.key, self.info.epoch
        )?;
        match &self.failure {
            ItemFailure::Fetch(e) => write!(f, "fetch failed: {e}"),
            ItemFailure::Stage(e) => write!(f, "decode failed: {e}"),
            ItemFailure::Panic(m) => write!(f, "panicked: {m}"),
            ItemFailure::Cancelled => write!(f, "cancelled: the loader was dropped"),
        }
    }
}

impl std::error::Error for ItemError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.failure {
            ItemFailure::Fetch(e) => Some(e),
            ItemFailure::Stage(e) => Some(e.as_ref()),
            ItemFailure::Panic(_) | ItemFailure::Cancelled => None,
        }
    }
}

/// A finished batch: the samples that loaded, in order, and the ones skipped with why.
#[derive(Debug)]
pub struct RawBatch<T> {
    /// The epoch.
    pub epoch: u64,
    /// The epoch position of the planned batch's first item (in `Sampler` order).
    pub position: u64,
    /// Items the plan held (loaded + skipped).
    pub planned: usize,
    /// The loaded samples.
    pub samples: Vec<(SampleInfo, T)>,
    /// Items skipped under [`ErrorPolicy::Skip`](crate::ErrorPolicy::Skip), with their errors.
    pub skipped: Vec<ItemError>,
    /// Whether it ends its epoch.
    pub last_in_epoch: bool,
    /// When it entered the ready queue, to measure how long batches wait there.
    pub(crate) queued_at: std::time::Instant,
    /// The engine's window slots of these items, freed when the batch is dropped.
    pub(crate) permits: Vec<tokio::sync::OwnedSemaphorePermit>,
}

impl<T> RawBatch<T> {
    /// Free the engine's window slots of these items now rather than when the batch is
    /// dropped: the engine may then admit more items, so memory the caller keeps in batches
    /// is outside the engine's bound. A consumer that keeps every batch (collects an epoch)
    /// must call this, or the engine stops admitting once its window is full.
    pub fn release_window(&mut self) {
        self.permits.clear();
    }
}

/// Why the engine could not deliver a batch.
#[derive(Debug)]
pub enum EngineError {
    /// Under [`ErrorPolicy::Fail`](crate::ErrorPolicy::Fail): the batch at `position` of
    /// `epoch` had failed items. Nothing of it was delivered.
    Batch {
        /// The epoch.
        epoch: u64,
        /// The epoch position of the batch's first item.
        position: u64,
        /// Every failed item of the batch.
        errors: Vec<ItemError>,
    },
    /// Under `Skip { max_failures }`: the epoch had more failures than allowed.
    TooManyFailures {
        /// The epoch.
        epoch: u64,
        /// The limit.
        max_failures: usize,
        /// The failures of the batch that crossed the limit.
        errors: Vec<ItemError>,
    },
    /// The configuration was refused.
    Config(String),
    /// The engine could not start (a thread or runtime failed to spawn).
    Start(String),
    /// Something panicked outside any one item (the sampler, a plan iterator, the engine
    /// itself); the run ends here instead of ending the epoch as if it were complete.
    Panicked {
        /// Where.
        what: &'static str,
        /// The panic's message.
        message: String,
    },
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Batch {
                epoch,
                position,
                errors,
            } => {
                write!(f, "batch at position {position} of epoch {epoch} failed: ")?;
                list(f, errors)
            }
            EngineError::TooManyFailures {
                epoch,
                max_failures,
                errors,
            } => {
                write!(
                    f,
                    "more than {max_failures} failed samples in epoch {epoch}; the last: "
                )?;
                list(f, errors)
            }
            EngineError::Config(m) => write!(f, "invalid configuration: {m}"),
            EngineError::Start(m) => write!(f, "cannot start the loader: {m}"),
            EngineError::Panicked { what, message } => {
                write!(f, "the loader panicked in {what}: {message}")
            }
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, errors: &[ItemError]) -> fmt::Result {
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Batch { errors, .. } | EngineError::TooManyFailures { errors, .. } => {
                errors
                    .first()
                    .map(|e| e as &(dyn std::error::Error + 'static))
            }
            _ => None,
        }
    }
}
