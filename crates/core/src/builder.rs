//! The builder: a loader's options, its CPU stage and collate, and `build`, which checks
//! them and wraps the store in its timeout, retry and cache layers.

use std::sync::Arc;

use bytes::Bytes;
use loader_decoder::{Pipeline, Sample};
use loader_sampler::{Batching, Sampler, StopRule};
use loader_scheduler::{
    ErrorPolicy, Fetch, Hedge, Order, RawBatch, SampleInfo, Stage, StageError, Trace, Weigh,
};
use loader_storage::layer::{CacheConfig, RetryConfig};
use loader_storage::{DynStorage, StorageExt};

use crate::batch::Batch;
use crate::buffer::Lender;
use crate::error::ConfigError;
use crate::loader::DataLoader;
use crate::memory::BatchMemory;
use crate::options::{LoaderOptions, PackingOptions, ShardOrder};
use crate::plan::Planner;
use crate::source::{Source, combine};
use crate::stage::{Collate, Stages, pipeline_stage, sample_weight, token_stage};
use crate::tokens::{Packing, Placement, Row, TokenBatch};
use crate::{Dataset, Error, Result};

/// Settings of a [`DataLoader`]; see [`DataLoader::builder`].
pub struct DataLoaderBuilder<T = Sample, B = Batch> {
    /// The datasets read, each with its store and weight (one, unless a mixture).
    sources: Vec<Source>,
    options: LoaderOptions,
    sampler: Option<Arc<dyn Sampler>>,
    stage: Stage<T>,
    weigh: Option<Weigh<T>>,
    collate: Collate<T, B>,
    trace: Option<Arc<Trace>>,
    runtime: Option<tokio::runtime::Handle>,
    /// A whole retry policy, beyond what `storage.max_retries` says.
    retry: Option<RetryConfig>,
    /// Where the native collate writes batches, when another owner lends the memory.
    lender: Lender,
}

impl DataLoader {
    /// Start configuring a loader of `dataset` from `storage`, with the defaults of
    /// [`LoaderOptions`] (PyTorch's where it has the setting: batch size 1, no shuffle, seed
    /// 0, keep the last short batch); decode to u8 images (give a
    /// [`transform`](DataLoaderBuilder::transform) for tensors); the adaptive in-flight
    /// limit, a decode thread per core, 2 batches of prefetch; every sample read retried on
    /// transient failures ([`RetryConfig::default`]) with a
    /// [`DEFAULT_REQUEST_TIMEOUT`](crate::DEFAULT_REQUEST_TIMEOUT) per attempt.
    pub fn builder(storage: DynStorage, dataset: Dataset) -> DataLoaderBuilder {
        Self::mixture(vec![Source::new(storage, dataset)])
    }

    /// Start configuring a loader of several datasets, each in its own store, read by their
    /// weights: every prefix of the run's order holds each source within one sample of its
    /// share. Epochs end by [`stop`](DataLoaderBuilder::stop) (default: when the first source
    /// has been read whole); otherwise as [`builder`](Self::builder).
    ///
    /// ```
    /// use loader_core::{DataLoader, Dataset, Source, StopRule, from_url};
    /// # fn main() -> loader_core::Result<()> {
    /// let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    /// loader_testkit::DatasetSpec::tiny(14, 2).write(a.path()).unwrap();
    /// loader_testkit::DatasetSpec::tiny(6, 2).write(b.path()).unwrap();
    /// let open = |d: &tempfile::TempDir| -> loader_core::Result<Source> {
    ///     let store = from_url(&d.path().to_string_lossy(), Vec::<(String, String)>::new())?;
    ///     let dataset = Dataset::image_folder_blocking(&*store)?;
    ///     Ok(Source::new(store, dataset))
    /// };
    /// let loader = DataLoader::mixture(vec![open(&a)?.weight(0.7), open(&b)?.weight(0.3)])
    ///     .batch_size(4)
    ///     .shuffle(true)
    ///     .stop(StopRule::AllExhausted)
    ///     .build()?;
    /// assert_eq!(loader.samples_per_epoch(), 20); // b's 6 samples read by position 20
    /// # Ok(())
    /// # }
    /// ```
    pub fn mixture(sources: Vec<Source>) -> DataLoaderBuilder {
        let decode_only = Pipeline::builder()
            .build()
            .unwrap_or_else(|_| Pipeline::imagenet_eval());
        let lender = Lender::default();
        let (stage, collate) = pipeline_stage(decode_only, Arc::clone(&lender));
        DataLoaderBuilder {
            sources,
            options: LoaderOptions::default(),
            sampler: None,
            stage,
            weigh: Some(sample_weight()),
            collate,
            trace: None,
            runtime: None,
            retry: None,
            lender,
        }
    }
}

impl<T: Send + 'static, B> DataLoaderBuilder<T, B> {
    /// Every plain-data setting at once, e.g. from a front end that set them by key.
    pub fn options(mut self, options: LoaderOptions) -> Self {
        self.options = options;
        // A whole retry policy given before is replaced by what these options say.
        self.retry = None;
        self
    }

    /// The plain-data settings given so far.
    pub fn current_options(&self) -> &LoaderOptions {
        &self.options
    }

    /// Set one option by its dotted key ([`LoaderOptions::set`]).
    pub fn set(mut self, key: &str, value: &str) -> Result<Self> {
        self.options
            .set(key, value)
            .map_err(|e| Error::from(ConfigError::Key(e)))?;
        if key.trim() == "storage.max_retries" {
            self.retry = None;
        }
        Ok(self)
    }

    /// Samples per batch.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.options.batch_size = batch_size;
        self
    }

    /// A new random order every epoch (from `seed` and the epoch).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.options.shuffle = shuffle;
        self
    }

    /// Seed of the shuffle.
    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = seed;
        self
    }

    /// Drop the last batch of an epoch if it is short.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.options.drop_last = drop_last;
        self
    }

    /// A caller's own order: any index sampler (the sampler crate's classic ones, or your
    /// own), e.g. a `DistributedSampler` for this rank. It replaces the global order: a
    /// state saved with it is a position in that sampler's epoch, resumed with the same
    /// sampler (not elastically). Not together with `shuffle`, as in PyTorch.
    pub fn sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Some(Arc::new(sampler));
        self
    }

    /// How items are fetched.
    pub fn fetch(mut self, fetch: Fetch) -> Self {
        self.options.engine.fetch = fetch;
        self
    }

    /// Threads of the CPU (decode) pool.
    pub fn decode_threads(mut self, threads: usize) -> Self {
        self.options.engine.decode_threads = Some(threads);
        self
    }

    /// Finished batches kept ready, at most.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.options.engine.prefetch = batches;
        self
    }

    /// `Fail` (default) or `Skip { max_failures }`.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.options.engine.skip_errors = match policy {
            ErrorPolicy::Skip { max_failures } => Some(max_failures),
            _ => None,
        };
        self
    }

    /// Sampler order (default) or `AsCompleted` (then `state()` is refused).
    pub fn order(mut self, order: Order) -> Self {
        self.options.engine.order = order;
        self
    }

    /// Record a Chrome trace of every fetch, decode and batch (see `Trace::write_json`).
    pub fn trace(mut self, trace: Arc<Trace>) -> Self {
        self.trace = Some(trace);
        self
    }

    /// How sample reads are retried: by default [`RetryConfig::default()`] (transient
    /// failures and timeouts, 10 attempts within 2 minutes, jittered backoff), so a 503
    /// SlowDown, a reset connection or a store that is away for a few seconds costs time,
    /// not the run. `None` turns retrying off, e.g. for a store that retries by itself.
    pub fn retry(mut self, retry: Option<RetryConfig>) -> Self {
        self.options.storage.max_retries = retry.as_ref().map(|r| r.max_attempts.saturating_sub(1));
        self.retry = retry;
        self
    }

    /// The deadline of each attempt of each sample read (default
    /// [`DEFAULT_REQUEST_TIMEOUT`](crate::DEFAULT_REQUEST_TIMEOUT)); a timed-out attempt is
    /// retried. `None`: no deadline.
    pub fn request_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.options.storage.request_timeout = timeout;
        self
    }

    /// How a sharded dataset is shuffled (default [`ShardOrder::Local`]).
    pub fn shard_order(mut self, order: ShardOrder) -> Self {
        self.options.shard_order = order;
        self
    }

    /// Samples shuffled together in each lane of the shard-local order (default: 4 chunks'
    /// worth, or more when a rank of the starting world size reads fewer than 2 lanes, so
    /// that it mixes about 8 chunks; chosen when a run starts and kept in its state).
    pub fn shuffle_buffer(mut self, samples: usize) -> Self {
        self.options.shuffle_buffer = Some(samples);
        self
    }

    /// Read this rank's share of each global batch: global batch `b` is positions
    /// `K + b·G .. K + (b+1)·G` of the epoch's order (`G` = `world_size` × `batch_size`, `K`
    /// where the run started), and rank `r` takes `batch_size` of them, as PyTorch's
    /// DistributedSampler gives rank `r` the indices `r, r + W, ...`; shards' lanes stay
    /// with one rank. The order does not depend on the world size (a shard order's lanes and
    /// windows, chosen when the run starts, are kept in its state), so a state saved on one
    /// resumes on any other. An epoch's last global batch is shared out evenly (batches
    /// differ by at most one sample); a rank left without a sample repeats one
    /// ([`BatchInfo::padding`](crate::BatchInfo::padding)), so every rank takes as many steps.
    pub fn distributed(mut self, rank: usize, world_size: usize) -> Self {
        self.options.rank = rank;
        self.options.world_size = world_size;
        self
    }

    /// Read only the samples whose dataset index is in `range`, shuffled within it under
    /// `shuffle`: a train/validation split, or one device's part of a dataset (burn's
    /// `DataLoader::slice`). Samples of shards are then read one ranged request each
    /// (coalesced with neighbours), as under [`ShardOrder::Global`].
    pub fn subset(mut self, range: std::ops::Range<usize>) -> Self {
        self.options.subset = Some(range);
        self
    }

    /// When an epoch of a mixture ends (default [`StopRule::FirstExhausted`]).
    pub fn stop(mut self, stop: StopRule) -> Self {
        self.options.mixture.stop = stop;
        self
    }

    /// Mixed global batches (default) or each from one source ([`Batching::PerStream`]).
    pub fn batching(mut self, batching: Batching) -> Self {
        self.options.mixture.batching = batching;
        self
    }

    /// Lanes of a shard-local order (default: 16 and the world size's least common multiple,
    /// chosen when a run starts and kept in its state, so a resume on another world size
    /// keeps them): a world size that divides them gives each rank lanes of its own, so each
    /// chunk is read by one rank; others share chunks among ranks. Given here, they are part
    /// of the order: a state of other lanes is refused.
    pub fn lanes(mut self, lanes: u32) -> Self {
        self.options.lanes = Some(lanes);
        self
    }

    /// Resume a state saved under other weights or sources by starting a new segment at
    /// its position (each source in both continues where it stood, a new one from its
    /// start), instead of refusing it.
    pub fn new_segment(mut self, allow: bool) -> Self {
        self.options.mixture.new_segment = allow;
        self
    }

    /// How many epochs the run reads: the loader then fetches nothing past the last
    /// one (it runs ahead across epoch boundaries before it), and passes after it are empty.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.options.epochs = Some(epochs);
        self
    }

    /// Send a request again when it is slower than a high quantile of recent ones, within a
    /// budget of extra requests shared with retries, or when it has stalled; see
    /// [`Hedge`]. The default, [`Hedge::stalls_only`], sends again only a request
    /// unanswered after many times the recent p99 (a lost response), so it costs a request
    /// instead of the 30 s attempt timeout; `None` never sends a request twice. Order and
    /// exactly-once delivery are unchanged.
    pub fn hedge(mut self, hedge: impl Into<Option<Hedge>>) -> Self {
        self.options.engine.hedge = hedge.into();
        self
    }

    /// Fetched bytes not yet decoded, at most (default
    /// [`DEFAULT_MAX_BUFFERED_BYTES`](loader_scheduler::DEFAULT_MAX_BUFFERED_BYTES)).
    pub fn max_buffered_bytes(mut self, bytes: u64) -> Self {
        self.options.engine.max_buffered_bytes = bytes;
        self
    }

    /// Decoded images and finished batches held for the consumer, in bytes, at most
    /// (default [`DEFAULT_MAX_DECODED_BYTES`](loader_scheduler::DEFAULT_MAX_DECODED_BYTES));
    /// past it no new batch starts until the consumer takes one, so the engine holds at
    /// most this plus one batch. Applies to [`transform`](Self::transform) stages, whose
    /// samples' sizes the loader knows, and to a [`map`](Self::map) stage given a
    /// [`weigh`](Self::weigh); another `map` stage is bounded in items.
    pub fn max_decoded_bytes(mut self, bytes: u64) -> Self {
        self.options.engine.max_decoded_bytes = bytes;
        self
    }

    /// Ranged samples of one object closer than `gap` bytes in the order are read with
    /// one request of at most `max` bytes (defaults 256 KiB and 16 MiB).
    pub fn coalesce(mut self, gap: u64, max: u64) -> Self {
        self.options.engine.coalesce_gap = gap;
        self.options.engine.max_coalesced_bytes = max;
        self
    }

    /// Run on this tokio runtime instead of one the loader owns.
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// Cache what is read in memory and on local disk within `config`'s budgets, so later
    /// epochs (and later runs on the same directory) read from the node. The loader tells
    /// the cache its upcoming reads (this epoch's rest and the next two epochs'), which
    /// [`CachePolicy::Future`](loader_storage::layer::CachePolicy::Future) keeps by; the
    /// dataset's [`objects`](Dataset::objects) validate the entries, so a hit makes no
    /// request. See [`loader_storage::layer::CacheStore`].
    pub fn cache(mut self, config: CacheConfig) -> Self {
        let cache = &mut self.options.cache;
        cache.dir = config.dir;
        cache.memory = Some(config.memory_bytes);
        cache.size = config.disk_bytes;
        cache.policy = config.policy;
        cache.block = config.block_bytes;
        self
    }

    /// Check the settings and make the loader. Nothing is fetched before the first batch
    /// is asked for.
    pub fn build(self) -> Result<DataLoader<T, B>> {
        let options = self.options;
        if options.batch_size == 0 {
            return Err(ConfigError::NoBatchSize.into());
        }
        if self.sources.is_empty() || self.sources.iter().all(|s| s.dataset.is_empty()) {
            return Err(ConfigError::EmptyDataset.into());
        }
        options.validate()?;
        let mut config = options.engine_config();
        config.trace = self.trace;
        config.runtime = self.runtime;
        let (storage, dataset, offsets) = combine(&self.sources)?;
        match (dataset.tokens(), options.packing.end_of_document) {
            (None, _) if options.packing != PackingOptions::default() => {
                return Err(ConfigError::Option(
                    "the packing.* options say how token rows are packed, but the dataset \
                     holds other samples: open it with source.block_size, or leave them unset"
                        .into(),
                )
                .into());
            }
            (Some(files), Some(end)) => {
                // An id no file can hold would never end a document: the setting would
                // silently do nothing.
                let dtype = files.dtype();
                let vocab = files.files()[0].1.vocab;
                if end < 0 || end > dtype.max_id() || vocab.is_some_and(|v| end as u64 >= v) {
                    return Err(ConfigError::Option(format!(
                        "packing.end_of_document {end} is no id of these files ({} ids{}): \
                         give the tokenizer's end-of-document id",
                        dtype.name(),
                        vocab.map_or(String::new(), |v| format!(", a vocabulary of {v}"))
                    ))
                    .into());
                }
            }
            _ => {}
        }
        if let Some(files) = dataset.tokens() {
            // A file read whole (a Parquet row group) is fetched and decoded for every
            // block an order reads alone: only the shard-local order reads it once.
            let whole = files
                .files()
                .iter()
                .any(|(_, f)| matches!(f.placement, Placement::Encoded(_)));
            if whole && (options.shard_order == ShardOrder::Global || self.sampler.is_some()) {
                return Err(ConfigError::Option(
                    "these token files are read a row group at a time, decoded once for all \
                     its blocks in the shard-local order; a global order or a sampler would \
                     fetch and decode a row group for each block: use shard_order=local"
                        .into(),
                )
                .into());
            }
            let tokens = options.batch_size as u64 * files.blocking().row_len();
            if tokens > i32::MAX as u64 {
                return Err(ConfigError::Option(format!(
                    "batch_size {} x block_size {} is {tokens} tokens a batch: more than \
                     cu_seqlens' int32 offsets count; give fewer rows or shorter blocks",
                    options.batch_size,
                    files.blocking().row_len()
                ))
                .into());
            }
        }
        let mut planner = Planner::new(&self.sources, dataset, &offsets, &options, self.sampler)?;
        // The same request stack a dataset's index was read through (a whole retry
        // policy given to the builder instead of `storage.max_retries`).
        let retry = self.retry.or_else(|| options.retry_config());
        let storage = options.storage.stack(storage, retry);
        // Outside the retry: a hit makes no request, a miss's request is retried below.
        let storage = match options.cache_config() {
            Some(cache_config) => {
                let store = storage.with_cache(cache_config)?;
                let cache = store.cache();
                cache.learn(planner.dataset.objects().iter().cloned());
                planner.cache = Some(cache);
                // A directory is shared by the node's ranks (memory is this process's own).
                if options.cache.dir.is_some() {
                    // Rank and world size are the options'; the node, the launcher's.
                    planner.node = options.node_ranks(&crate::Launch::node_from_env())?;
                }
                Arc::new(store) as DynStorage
            }
            None => storage,
        };
        Ok(DataLoader::new(
            storage,
            planner,
            Stages {
                stage: self.stage,
                weigh: self.weigh,
                collate: self.collate,
            },
            config,
        ))
    }
}

impl<T: Send + 'static> DataLoaderBuilder<T, Batch> {
    /// The image transform, e.g. `Pipeline::imagenet_eval()`; it decodes too.
    pub fn transform(self, pipeline: Pipeline) -> DataLoaderBuilder<Sample, Batch> {
        let (stage, collate) = pipeline_stage(pipeline, Arc::clone(&self.lender));
        self.with_stage(stage, Some(sample_weight()), collate)
    }
}

impl<T: Send + 'static, B> DataLoaderBuilder<T, B> {
    /// Write the native collate's batches into memory `memory` lends (torch's pinned
    /// allocator, a device's staging buffers) rather than the loader's own reused buffers:
    /// each batch is written once, where it must end up. It applies to the images or
    /// tensors of a [`transform`](Self::transform)'s batches, whichever of the two is called
    /// first; a [`map`](Self::map) stage's collate chooses its own memory
    /// ([`collate_in`](crate::collate_in)).
    pub fn batch_memory(self, memory: Arc<dyn BatchMemory>) -> Self {
        *self.lender.lock().unwrap_or_else(|e| e.into_inner()) = Some(memory);
        self
    }

    /// Any CPU stage (bytes of a sample to `U`, for data that is not images) with the
    /// collate that makes batches of them.
    pub fn map<U, C>(
        self,
        stage: impl Fn(Bytes, &SampleInfo) -> std::result::Result<U, StageError> + Send + Sync + 'static,
        collate: impl Fn(RawBatch<U>) -> Result<C> + Send + Sync + 'static,
    ) -> DataLoaderBuilder<U, C> {
        self.with_stage(Arc::new(stage), None, Arc::new(collate))
    }

    /// Read the sources' token blocks (a token format opened with `source.block_size`) as
    /// rows packed by `packing`, batched as [`TokenBatch`]es: `[B, L]` ids, labels,
    /// positions and document ids, and `cu_seqlens` over the batch. The `packing.*`
    /// options say it as settings (`options.packing.packing()`); a `packing` unlike what
    /// they ask is refused.
    pub fn tokens(self, packing: Packing) -> Result<DataLoaderBuilder<Row, TokenBatch>> {
        let asked = &self.options.packing;
        if *asked != PackingOptions::default()
            && (packing.mask_boundaries, packing.end_of_document)
                != (asked.mask_boundaries, asked.end_of_document)
        {
            return Err(ConfigError::Option(format!(
                "the packing.* options ask for mask_boundaries {} and end_of_document {:?}, \
                 but tokens() was given {} and {:?}: set them in one place",
                asked.mask_boundaries,
                asked.end_of_document,
                packing.mask_boundaries,
                packing.end_of_document
            ))
            .into());
        }
        let (_, dataset, _) = combine(&self.sources)?;
        let files = dataset.tokens().cloned().ok_or(ConfigError::NotTokens)?;
        let (stage, weigh, collate) = token_stage(files, packing);
        Ok(self.with_stage(stage, Some(weigh), collate))
    }

    /// Weigh each output of the CPU stage in bytes, so [`max_decoded_bytes`](Self::max_decoded_bytes)
    /// bounds a [`map`](Self::map) stage's outputs as it bounds a transform's (whose
    /// samples the loader weighs itself). Without it a `map` stage is bounded in items only.
    pub fn weigh(mut self, weigh: impl Fn(&T) -> usize + Send + Sync + 'static) -> Self {
        self.weigh = Some(Arc::new(weigh));
        self
    }

    /// The same settings with another CPU stage and collate (and so other types).
    fn with_stage<U, C>(
        self,
        stage: Stage<U>,
        weigh: Option<Weigh<U>>,
        collate: Collate<U, C>,
    ) -> DataLoaderBuilder<U, C> {
        DataLoaderBuilder {
            sources: self.sources,
            options: self.options,
            sampler: self.sampler,
            stage,
            weigh,
            collate,
            trace: self.trace,
            runtime: self.runtime,
            retry: self.retry,
            lender: self.lender,
        }
    }
}
