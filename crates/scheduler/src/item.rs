//! What flows through the engine: planned batches in, finished batches (or errors) out.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::label::Label;

/// One item to load: where its bytes are and what it carries with it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkItem {
    /// Its dataset index.
    pub index: u64,
    /// The object holding its bytes.
    pub key: Arc<str>,
    /// Its bytes within the object; `None` for the whole object.
    pub range: Option<Range<u64>>,
    /// Its label, handed to the collate with the sample.
    pub label: Label,
    /// Its name when the object holds many samples (a WebDataset sample's key), for
    /// errors and batches; `None` when the object key names it.
    pub name: Option<Arc<str>>,
    /// Other parts stored beside it (a WebDataset sample's `.cls`, `.json`, ...), cut out
    /// of the same fetch and handed to the CPU stage in [`SampleInfo::members`].
    pub members: Arc<[Member]>,
    /// The span of the object its source reads in one request (a shard's chunk), so one
    /// GET feeds every sample in it; `None` lets the engine coalesce by itself.
    pub chunk: Option<Chunk>,
    /// Its position in the epoch's order when the batch's items are not consecutive
    /// positions from the plan's (a rank's share of a global batch); `None`: the plan's
    /// position plus its place in the batch.
    pub position: Option<u64>,
    /// When its bytes are stored encoded (a Parquet page's value): how its `range` is
    /// decoded, and which of the decoded records is its. `None`: its `range` is its bytes.
    pub record: Option<RecordOf>,
}

impl WorkItem {
    /// A sample that is one whole object.
    pub fn object(index: u64, key: impl Into<Arc<str>>) -> Self {
        Self {
            index,
            key: key.into(),
            ..Self::default()
        }
    }

    /// A sample that is `range` of object `key` (index 0): what the unit tests build.
    #[cfg(test)]
    pub(crate) fn ranged(key: &str, range: Range<u64>) -> Self {
        Self {
            key: key.into(),
            range: Some(range),
            ..Self::default()
        }
    }

    /// The bytes of the object the item needs: its range and its members'.
    pub fn span(&self) -> Option<Range<u64>> {
        span_of(self.range.as_ref(), &self.members)
    }
}

/// The bytes a sample at `range` with `members` occupies in its object; `None` for a whole
/// object. What a source's index and the engine's item both say of a sample.
pub fn span_of(range: Option<&Range<u64>>, members: &[Member]) -> Option<Range<u64>> {
    let mut span = range?.clone();
    for m in members {
        span.start = span.start.min(m.range.start);
        span.end = span.end.max(m.range.end);
    }
    Some(span)
}

/// A named part of a sample stored beside its main bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its suffix, e.g. `cls` or `json` (WebDataset's extension, lowercased).
    pub name: Arc<str>,
    /// Its bytes within the object.
    pub range: Range<u64>,
}

/// Samples stored encoded inside a span of their object (a Parquet page: compressed, its
/// values encoded one after another): the span is fetched and decoded once, by the first
/// of its items to need it, and each item takes its record by slot. What a source that
/// is not a plain byte layout (Parquet, compressed shards) gives the engine.
pub trait Records: Send + Sync + fmt::Debug {
    /// The records of `range` of `key`, whose bytes are `bytes`, in slot order. The error
    /// says what is wrong with the bytes; the engine adds the key and the backend.
    fn decode(&self, key: &str, range: &Range<u64>, bytes: Bytes) -> Result<Vec<Record>, String>;
}

/// One sample's parts, decoded out of its span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Its main bytes (the image); `None` when the stored value is missing (a null).
    pub bytes: Option<Bytes>,
    /// Its other parts by name, handed to the CPU stage in [`SampleInfo::members`].
    pub members: Vec<(Arc<str>, Bytes)>,
    /// Its label when it is stored with the sample (an MDS column), replacing the one its
    /// item was planned with; `None`: the item's.
    pub label: Option<Label>,
}

/// Where an item's bytes are among the records of its span.
#[derive(Debug, Clone)]
pub struct RecordOf {
    /// How the span is decoded: one instance for every item of a span, so the engine
    /// decodes it once.
    pub records: Arc<dyn Records>,
    /// The item's record among them.
    pub slot: u32,
    /// Whether its span holds other samples too (a page, a compressed shard), so reading
    /// the sample costs reading them all and its span is best read once for all of them;
    /// `false` when the span is the sample's alone (a raw MDS sample's columns).
    pub shared: bool,
}

impl RecordOf {
    /// Whether `item` is stored in a span shared with other samples.
    pub fn shared(item: &WorkItem) -> bool {
        item.record.as_ref().is_some_and(|r| r.shared)
    }
}

impl PartialEq for RecordOf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.records, &other.records)
            && self.slot == other.slot
            && self.shared == other.shared
    }
}

impl Eq for RecordOf {}

/// A span read in one request that feeds several items.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// The bytes of the object to fetch; it holds the item's span.
    pub range: Range<u64>,
    /// Whether this is the chunk's last item in the plan: the engine drops the fetched
    /// bytes when it has admitted it. If unsure, say `true`: a later item of the chunk is
    /// then fetched again, never lost.
    pub last_use: bool,
}

/// A batch as the sampler cut it: the unit of order and of resuming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// The epoch it belongs to.
    pub epoch: u64,
    /// The epoch position of its start (of its first item, or of the global batch it is a
    /// rank's share of).
    pub position: u64,
    /// Its items, in order.
    pub items: Vec<WorkItem>,
    /// Whether it ends its epoch.
    pub last_in_epoch: bool,
    /// Epoch positions it accounts for: its items', or the whole global batch's when ranks
    /// share one. The position after it is delivered is `position + covers`.
    pub covers: u64,
    /// How many of its items, at the end, repeat samples other ranks read (an epoch's last
    /// global batch with fewer samples than ranks).
    pub padding: usize,
}

impl BatchPlan {
    /// A batch of `items` from `position` of `epoch`, accounting for its items alone.
    pub fn new(epoch: u64, position: u64, items: Vec<WorkItem>, last_in_epoch: bool) -> Self {
        Self {
            epoch,
            position,
            covers: items.len() as u64,
            items,
            last_in_epoch,
            padding: 0,
        }
    }
}

/// What the CPU stage is told about the sample it transforms.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SampleInfo {
    /// The dataset index.
    pub index: u64,
    /// The storage key of the object holding it.
    pub key: Arc<str>,
    /// Its bytes within the object (`None`: the whole object).
    pub range: Option<Range<u64>>,
    /// Its name inside the object, for samples of a shard.
    pub name: Option<Arc<str>>,
    /// Its label.
    pub label: Label,
    /// The epoch.
    pub epoch: u64,
    /// Its position within the epoch.
    pub position: u64,
    /// The bytes of its other members, by name, once fetched (empty before the fetch and
    /// for samples without members).
    pub members: Vec<(Arc<str>, Bytes)>,
}

impl SampleInfo {
    /// The bytes of the member called `name` (e.g. `"json"`), if the sample has one.
    pub fn member(&self, name: &str) -> Option<&Bytes> {
        self.members
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, b)| b)
    }
}

impl fmt::Display for SampleInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sample {} (", self.index)?;
        if let Some(name) = &self.name {
            write!(f, "{name:?} in ")?;
        }
        write!(f, "key {:?}", self.key)?;
        if let Some(r) = &self.range {
            write!(f, " bytes {}..{}", r.start, r.end)?;
        }
        write!(f, ", epoch {})", self.epoch)
    }
}

/// An error from the CPU stage.
pub type StageError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an item failed.
#[derive(Debug)]
pub enum ItemFailure {
    /// Reading it from storage failed (after the store's own retries). Shared: one failed
    /// request fails every item it was to feed.
    Fetch(Arc<loader_storage::Error>),
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
        write!(f, "{}: ", self.info)?;
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
            ItemFailure::Fetch(e) => Some(&**e),
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
    /// Epoch positions the plan accounted for ([`BatchPlan::covers`]).
    pub covers: u64,
    /// Samples at the end of `samples` that repeat other ranks' ([`BatchPlan::padding`]).
    pub padding: usize,
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
    /// Its samples' share of the decoded-bytes bound, returned when it is dropped.
    pub(crate) decoded: Option<crate::decoded::DecodedShare>,
}

impl<T> RawBatch<T> {
    /// The same batch with each sample's output mapped by `f`; its share of the engine's
    /// window and bounds goes with it.
    pub fn map<U>(self, mut f: impl FnMut(&SampleInfo, T) -> U) -> RawBatch<U> {
        RawBatch {
            epoch: self.epoch,
            position: self.position,
            planned: self.planned,
            covers: self.covers,
            padding: self.padding,
            samples: self
                .samples
                .into_iter()
                .map(|(info, t)| {
                    let u = f(&info, t);
                    (info, u)
                })
                .collect(),
            skipped: self.skipped,
            last_in_epoch: self.last_in_epoch,
            queued_at: self.queued_at,
            permits: self.permits,
            decoded: self.decoded,
        }
    }

    /// Free the engine's window slots of these items now rather than when the batch is
    /// dropped: the engine may then admit more items, so memory the caller keeps in batches
    /// is outside the engine's bound. A consumer that keeps every batch (collects an epoch)
    /// must call this, or the engine stops admitting once its window is full.
    pub fn release_window(&mut self) {
        self.permits.clear();
        self.decoded = None;
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
    Config(crate::ConfigError),
    /// The engine could not start (a thread or runtime failed to spawn).
    Start {
        /// What could not be started.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
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
            EngineError::Config(e) => write!(f, "invalid configuration: {e}"),
            EngineError::Start { what, source } => {
                write!(f, "cannot start the loader's {what}: {source}")
            }
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
            EngineError::Config(e) => Some(e),
            EngineError::Start { source, .. } => Some(source),
            EngineError::Panicked { .. } => None,
        }
    }
}
