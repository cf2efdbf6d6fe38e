//! How the engine fetches, decodes, orders and handles errors.

/// How items are fetched: the paper's three strategies, so its comparison can be rerun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// PyTorch's vanilla DataLoader: each of `workers` workers takes a whole batch and,
    /// item after item, fetches then decodes it, with no overlap inside a worker.
    Sequential {
        /// Worker threads, each holding one batch.
        workers: usize,
    },
    /// The paper's threaded fetcher: `threads` blocking threads, each fetching and then
    /// decoding one item at a time.
    Threads {
        /// Fetch-and-decode threads.
        threads: usize,
    },
    /// Fetches as futures on a tokio runtime, exactly `max_in_flight` at once at most, CPU
    /// work on the decode pool: the adaptive strategy with the limit fixed by hand.
    Async {
        /// Requests in flight at most.
        max_in_flight: usize,
    },
    /// [`Fetch::Async`] with the in-flight limit set by the engine, in a closed loop, from
    /// what it measures: raised while requests wait for a slot and the CPU stage has room
    /// (doubling per round trip at first, so it follows the latency), lowered when the store
    /// throttles or errors rise, or when the run uses far less; never above `max_in_flight`
    /// nor above the byte budget ([`Config::max_buffered_bytes`]) over the mean request. The
    /// default: no one has to guess rate x latency.
    Adaptive {
        /// The hard cap on requests in flight.
        max_in_flight: usize,
    },
}

/// The default cap of [`Fetch::Adaptive`]: 500 ms of latency at 30,000 items/s. The byte
/// budget usually binds first (1 GiB over 100 KB images is about 10,000).
pub const DEFAULT_IN_FLIGHT_CAP: usize = 16_384;

impl Default for Fetch {
    fn default() -> Self {
        Fetch::Adaptive {
            max_in_flight: DEFAULT_IN_FLIGHT_CAP,
        }
    }
}

/// The order of the delivered items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Exactly the sampler's order, batches as the batch sampler cut them (the default).
    #[default]
    Sampler,
    /// Items as they finish, batched in arrival order within an epoch: no head-of-line
    /// blocking behind a slow request, but no position to resume from.
    AsCompleted,
}

/// What a failed item does to its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// The batch is an error, and the epoch ends there (the default).
    #[default]
    Fail,
    /// The batch shrinks and reports the skipped items with their errors; more than
    /// `max_failures` in one epoch is an error.
    Skip {
        /// Failures allowed per epoch.
        max_failures: usize,
    },
}

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Fetch strategy.
    pub fetch: Fetch,
    /// Threads of the CPU pool (the `Async` strategy's decode pool).
    pub decode_threads: usize,
    /// Finished batches waiting for the consumer, at most.
    pub prefetch: usize,
    /// Delivery order.
    pub order: Order,
    /// Failure handling.
    pub error_policy: ErrorPolicy,
    /// A runtime to run on; `None` makes the engine start its own (one thread).
    pub runtime: Option<tokio::runtime::Handle>,
    /// Record every fetch, CPU stage and batch into this trace.
    pub trace: Option<std::sync::Arc<crate::Trace>>,
    /// Fetched bytes not yet decoded, at most, under the `Async` strategy (requests whose
    /// size is known: ranges and chunks; whole objects are bounded by the item window). A
    /// chunk kept for its later samples counts until its last one is decoded. The blocking
    /// strategies are bounded by their threads and the item window instead.
    pub max_buffered_bytes: u64,
    /// Decoded samples and finished batches not yet handed to the consumer, in bytes, at
    /// most (when the engine is told what a sample weighs, `Engine::start_weighed`): while
    /// they exceed it, no new batch is admitted, though the batches already admitted
    /// complete. A batch handed over (`RawBatch::release_window`) or dropped no longer counts.
    pub max_decoded_bytes: u64,
    /// Ranged items of one object closer than this (in bytes) are read in one request.
    pub coalesce_gap: u64,
    /// A coalesced request reads at most this many bytes.
    pub max_coalesced_bytes: u64,
    /// Send a request again when it is slower than a high quantile of recent ones, within a
    /// budget of extra requests shared with retries, or when it has stalled (many times the
    /// p99). Default [`Hedge::stalls_only`](crate::Hedge::stalls_only): a stalled request
    /// costs a second request instead of the attempt timeout; no tail hedging. `None`:
    /// never. Order and exactly-once delivery are the same either way.
    pub hedge: Option<crate::Hedge>,
}

/// Default of [`Config::max_buffered_bytes`]: room for a few shards' worth of 4 MiB chunks
/// per request in flight, far under a training node's memory.
pub const DEFAULT_MAX_BUFFERED_BYTES: u64 = 1 << 30;

/// Default of [`Config::max_decoded_bytes`]: a few batches of ImageNet-sized f32 tensors
/// (602 KB each) beyond what the item window holds at the default settings.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 1 << 30;

/// A refused setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A strategy with no worker, thread or request slot would never fetch anything.
    #[error("{0}: nothing would ever be fetched")]
    NothingFetched(&'static str),
    /// `decode_threads` is 0.
    #[error("decode_threads must be at least 1")]
    NoDecodeThreads,
    /// `prefetch` is 0.
    #[error("prefetch must be at least 1")]
    NoPrefetch,
    /// `max_buffered_bytes` is 0.
    #[error("max_buffered_bytes must be at least 1")]
    NoBufferedBytes,
    /// A hedge setting out of its range.
    #[error("hedge: {0}")]
    Hedge(String),
}

impl Default for Config {
    fn default() -> Self {
        Self {
            fetch: Fetch::default(),
            decode_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            prefetch: 2,
            order: Order::default(),
            error_policy: ErrorPolicy::default(),
            runtime: None,
            trace: None,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES,
            coalesce_gap: 256 << 10,
            max_coalesced_bytes: 16 << 20,
            hedge: Some(crate::Hedge::stalls_only()),
        }
    }
}

impl Config {
    /// Check the settings, naming what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let zero = match self.fetch {
            Fetch::Sequential { workers: 0 } => Some("Sequential { workers: 0 }"),
            Fetch::Threads { threads: 0 } => Some("Threads { threads: 0 }"),
            Fetch::Async { max_in_flight: 0 } => Some("Async { max_in_flight: 0 }"),
            Fetch::Adaptive { max_in_flight: 0 } => Some("Adaptive { max_in_flight: 0 }"),
            _ => None,
        };
        if let Some(what) = zero {
            return Err(ConfigError::NothingFetched(what));
        }
        if self.decode_threads == 0 {
            return Err(ConfigError::NoDecodeThreads);
        }
        if self.prefetch == 0 {
            return Err(ConfigError::NoPrefetch);
        }
        if self.max_buffered_bytes == 0 {
            return Err(ConfigError::NoBufferedBytes);
        }
        if let Some(hedge) = &self.hedge {
            hedge.validate().map_err(ConfigError::Hedge)?;
        }
        Ok(())
    }
}
