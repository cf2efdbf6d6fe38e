//! The DataLoader: PyTorch's names, an epoch per pass, exact resume.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use loader_decoder::{Output, Pipeline, Sample, SampleData, SampleKey};
use loader_sampler::{
    BatchSampler, DistributedSampler, RandomSampler, Sampler, SamplerState, SequentialSampler,
    ShardSampler, SubsetSampler,
};
use loader_scheduler::{
    BatchPlan, Chunk, Config, Engine, EngineError, ErrorPolicy, Fetch, Metrics, Order, RawBatch,
    SampleInfo, Stage, StageError, Weigh, WorkItem,
};
use loader_storage::layer::{Cache, CacheConfig, RetryConfig};
use loader_storage::{DynStorage, StorageExt};

use crate::batch::{Batch, collate_into};
use crate::buffer::BufferPool;
use crate::error::{ConfigError, StateError};
use crate::state::{LoaderState, OrderStamp, SamplerKind};
use crate::{Dataset, Error, Item, Result};

/// The default deadline of one attempt of one request: far above any healthy GET of a
/// sample, so only a stalled connection trips it, and then the retry policy takes over.
pub const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Turns the CPU stage's outputs for one batch into the batch type a caller wants; each
/// sample's label, key and members ride with it in its `SampleInfo`.
pub type Collate<T, B> = Arc<dyn Fn(RawBatch<T>) -> Result<B> + Send + Sync>;

/// How a dataset stored in shards is shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardOrder {
    /// Shards in a random order, samples shuffled within a buffer of a few chunks, each
    /// chunk read with one request ([`ShardSampler`]); the default.
    #[default]
    Local,
    /// Every sample of every shard in one random permutation: one ranged request per
    /// sample, coalesced with neighbours when the order keeps them together.
    Global,
}

/// Settings of a [`DataLoader`]; see [`DataLoader::builder`].
pub struct DataLoaderBuilder<T = Sample, B = Batch> {
    storage: DynStorage,
    dataset: Dataset,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    sampler: Option<Arc<dyn Sampler>>,
    stage: Stage<T>,
    weigh: Option<Weigh<T>>,
    collate: Collate<T, B>,
    config: Config,
    retry: Option<RetryConfig>,
    request_timeout: Option<std::time::Duration>,
    shard_order: ShardOrder,
    shuffle_buffer: Option<usize>,
    rank: (usize, usize),
    epochs: Option<u64>,
    cache: Option<CacheConfig>,
    subset: Option<std::ops::Range<usize>>,
    /// Whether the CPU stage is the native image pipeline, which reads JPEG and PNG only.
    decodes_images: bool,
}

/// Loads batches of a [`Dataset`] from a store: a blocking `Iterator` and an async
/// `Stream` of `Result<B>`. One pass is one epoch; passing again reads the next one.
pub struct DataLoader<T = Sample, B = Batch> {
    storage: DynStorage,
    dataset: Dataset,
    sampler: Arc<dyn Sampler>,
    batch_size: usize,
    drop_last: bool,
    stage: Stage<T>,
    weigh: Option<Weigh<T>>,
    collate: Collate<T, B>,
    config: Config,
    /// What has been delivered: the state to resume from.
    state: SamplerState,
    engine: Option<Engine<T>>,
    /// The last batch of an epoch went out: the next call ends the pass.
    end_of_pass: bool,
    /// A failed batch ended the pass: the next pass starts the next epoch.
    skip_to_next_epoch: bool,
    metrics: Option<Arc<Metrics>>,
    /// Whether items are read by their dataset chunks (a shard-local or sequential order).
    chunked: bool,
    /// Epochs to read at most: the engine does not run ahead past the last.
    epochs: Option<u64>,
    /// The cache between the engine and the store, told the upcoming reads.
    cache: Option<Cache>,
    /// What positions mean, for checkpoints.
    stamp: OrderStamp,
    /// Skipped samples of batches that had nothing else, reported with the next batch.
    carried_skips: Vec<loader_scheduler::ItemError>,
}

impl<T, B> std::fmt::Debug for DataLoader<T, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("storage", &self.storage.name())
            .field("samples", &self.dataset.len())
            .field("batch_size", &self.batch_size)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The CPU stage of `pipeline` and the default collate, sharing buffers: the collate hands
/// each sample's buffer back for the stage to write a later sample into, and each dropped
/// batch hands its buffer back for a later batch.
fn pipeline_stage(pipeline: Pipeline) -> (Stage<Sample>, Collate<Sample, Batch>) {
    let pool = Arc::new(BufferPool::default());
    let shared = Arc::clone(&pool);
    let stage = move |bytes: Bytes, info: &SampleInfo| -> std::result::Result<Sample, StageError> {
        let reuse = match pipeline.output() {
            Output::F32Chw { .. } => SampleData::F32(shared.f32_samples.take(0)),
            Output::U8Hwc => SampleData::U8(shared.u8_samples.take(0)),
        };
        let key = SampleKey {
            epoch: info.epoch,
            index: info.index,
        };
        Ok(pipeline.run_reusing(&bytes, key, reuse)?)
    };
    let collate = move |raw| collate_into(raw, &pool);
    (Arc::new(stage), Arc::new(collate))
}

/// The bytes a decoded image holds, for the decoded-bytes bound.
fn sample_weight() -> Weigh<Sample> {
    Arc::new(sample_bytes)
}

/// The bytes `sample`'s pixels hold: what a [`weigh`](DataLoaderBuilder::weigh) of a stage
/// that makes [`Sample`]s gives.
pub fn sample_bytes(sample: &Sample) -> usize {
    match &sample.data {
        SampleData::F32(v) => v.len() * 4,
        SampleData::U8(v) => v.len(),
    }
}

impl DataLoader {
    /// Start configuring a loader of `dataset` from `storage`. Defaults as PyTorch's:
    /// batch size 1, no shuffle, seed 0, keep the last short batch; decode to u8 images
    /// (give a [`transform`](DataLoaderBuilder::transform) for tensors); `Async` fetching
    /// with 64 requests in flight, a decode thread per core, 2 batches of prefetch; every
    /// sample read retried on transient failures ([`RetryConfig::default`]) with a
    /// [`DEFAULT_REQUEST_TIMEOUT`] per attempt.
    pub fn builder(storage: DynStorage, dataset: Dataset) -> DataLoaderBuilder {
        let decode_only = Pipeline::builder()
            .build()
            .unwrap_or_else(|_| Pipeline::imagenet_eval());
        let (stage, collate) = pipeline_stage(decode_only);
        DataLoaderBuilder {
            storage,
            dataset,
            batch_size: 1,
            shuffle: false,
            seed: 0,
            drop_last: false,
            sampler: None,
            stage,
            weigh: Some(sample_weight()),
            collate,
            config: Config::default(),
            retry: Some(RetryConfig::default()),
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            shard_order: ShardOrder::default(),
            shuffle_buffer: None,
            rank: (0, 1),
            epochs: None,
            cache: None,
            subset: None,
            decodes_images: true,
        }
    }
}

impl<T: Send + 'static, B> DataLoaderBuilder<T, B> {
    /// Samples per batch.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// A new random order every epoch (from `seed` and the epoch).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Seed of the shuffle.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drop the last batch of an epoch if it is short.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Any index sampler, e.g. a `DistributedSampler` for this rank. Not together with
    /// `shuffle`, as in PyTorch.
    pub fn sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Some(Arc::new(sampler));
        self
    }

    /// How items are fetched.
    pub fn fetch(mut self, fetch: Fetch) -> Self {
        self.config.fetch = fetch;
        self
    }

    /// Threads of the CPU (decode) pool.
    pub fn decode_threads(mut self, threads: usize) -> Self {
        self.config.decode_threads = threads;
        self
    }

    /// Finished batches kept ready, at most.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.config.prefetch = batches;
        self
    }

    /// `Fail` (default) or `Skip { max_failures }`.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.config.error_policy = policy;
        self
    }

    /// Sampler order (default) or `AsCompleted` (then `state()` is refused).
    pub fn order(mut self, order: Order) -> Self {
        self.config.order = order;
        self
    }

    /// Record a Chrome trace of every fetch, decode and batch (see `Trace::write_json`).
    pub fn trace(mut self, trace: Arc<loader_scheduler::Trace>) -> Self {
        self.config.trace = Some(trace);
        self
    }

    /// How sample reads are retried: by default [`RetryConfig::default()`] (transient
    /// failures and timeouts, 10 attempts within 2 minutes, jittered backoff), so a 503
    /// SlowDown, a reset connection or a store that is away for a few seconds costs time,
    /// not the run. `None` turns retrying off, e.g. for a store that retries by itself.
    pub fn retry(mut self, retry: Option<RetryConfig>) -> Self {
        self.retry = retry;
        self
    }

    /// The deadline of each attempt of each sample read (default
    /// [`DEFAULT_REQUEST_TIMEOUT`]); a timed-out attempt is retried. `None`: no deadline.
    pub fn request_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How a sharded dataset is shuffled (default [`ShardOrder::Local`]).
    pub fn shard_order(mut self, order: ShardOrder) -> Self {
        self.shard_order = order;
        self
    }

    /// Samples shuffled together in shard-local order (default: 8 chunks' worth).
    pub fn shuffle_buffer(mut self, samples: usize) -> Self {
        self.shuffle_buffer = Some(samples);
        self
    }

    /// Read this rank's share of every epoch (PyTorch's DistributedSampler semantics:
    /// equal counts, the last share padded with the first samples). For shards in
    /// shard-local order, ranks read disjoint pieces of the shuffled shard sequence.
    pub fn distributed(mut self, rank: usize, world_size: usize) -> Self {
        self.rank = (rank, world_size);
        self
    }

    /// Read only the samples whose dataset index is in `range`, shuffled within it under
    /// `shuffle`: a train/validation split, or one device's part of a dataset (burn's
    /// `DataLoader::slice`). Samples of shards are then read one ranged request each
    /// (coalesced with neighbours), as under [`ShardOrder::Global`].
    pub fn subset(mut self, range: std::ops::Range<usize>) -> Self {
        self.subset = Some(range);
        self
    }

    /// How many epochs the run reads: the loader then fetches nothing past the last
    /// one (it runs ahead across epoch boundaries before it), and passes after it are empty.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.epochs = Some(epochs);
        self
    }

    /// Send a request again when it is slower than a high quantile of recent ones, within a
    /// budget of extra requests shared with retries, or when it has stalled; see
    /// [`Hedge`](loader_scheduler::Hedge). The default, [`Hedge::stalls_only`](loader_scheduler::Hedge::stalls_only),
    /// sends again only a request unanswered after many times the recent p99 (a lost
    /// response), so it costs a request instead of the 30 s attempt timeout; `None` never
    /// sends a request twice. Order and exactly-once delivery are unchanged.
    pub fn hedge(mut self, hedge: impl Into<Option<loader_scheduler::Hedge>>) -> Self {
        self.config.hedge = hedge.into();
        self
    }

    /// Fetched bytes not yet decoded, at most (default
    /// [`DEFAULT_MAX_BUFFERED_BYTES`](loader_scheduler::DEFAULT_MAX_BUFFERED_BYTES)).
    pub fn max_buffered_bytes(mut self, bytes: u64) -> Self {
        self.config.max_buffered_bytes = bytes;
        self
    }

    /// Decoded images and finished batches held for the consumer, in bytes, at most
    /// (default [`DEFAULT_MAX_DECODED_BYTES`](loader_scheduler::DEFAULT_MAX_DECODED_BYTES));
    /// past it no new batch starts until the consumer takes one, so the engine holds at
    /// most this plus one batch. Applies to [`transform`](Self::transform) stages, whose
    /// samples' sizes the loader knows, and to a [`map`](Self::map) stage given a
    /// [`weigh`](Self::weigh); another `map` stage is bounded in items.
    pub fn max_decoded_bytes(mut self, bytes: u64) -> Self {
        self.config.max_decoded_bytes = bytes;
        self
    }

    /// Ranged samples of one object closer than `gap` bytes in the order are read with
    /// one request of at most `max` bytes (defaults 256 KiB and 16 MiB).
    pub fn coalesce(mut self, gap: u64, max: u64) -> Self {
        self.config.coalesce_gap = gap;
        self.config.max_coalesced_bytes = max;
        self
    }

    /// Run on this tokio runtime instead of one the loader owns.
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.config.runtime = Some(handle);
        self
    }

    /// Cache what is read in memory and on local disk within `config`'s budgets, so later
    /// epochs (and later runs on the same directory) read from the node. The loader tells
    /// the cache its upcoming reads (this epoch's rest and the next two epochs'), which
    /// [`CachePolicy::Future`](loader_storage::layer::CachePolicy::Future) keeps by; the
    /// dataset's [`objects`](Dataset::objects) validate the entries, so a hit makes no
    /// request. See [`loader_storage::layer::CacheStore`].
    pub fn cache(mut self, config: CacheConfig) -> Self {
        self.cache = Some(config);
        self
    }

    /// Check the settings and make the loader. Nothing is fetched before the first batch
    /// is asked for.
    pub fn build(self) -> Result<DataLoader<T, B>> {
        if self.batch_size == 0 {
            return Err(ConfigError::NoBatchSize.into());
        }
        if self.dataset.is_empty() {
            return Err(ConfigError::EmptyDataset.into());
        }
        if self.decodes_images {
            self.dataset.check_decodable(self.storage.name())?;
        }
        self.config
            .validate()
            .map_err(|e| Error::from(ConfigError::Engine(e)))?;
        let sharded = !self.dataset.shards().is_empty();
        let (rank, world) = self.rank;
        if let Some(range) = &self.subset {
            if self.sampler.is_some() || world > 1 {
                return Err(ConfigError::SubsetAndSampler.into());
            }
            if range.is_empty() || range.end > self.dataset.len() {
                return Err(ConfigError::Subset {
                    start: range.start,
                    end: range.end,
                    samples: self.dataset.len(),
                }
                .into());
            }
        }
        let custom = self.sampler.is_some();
        let (sampler, chunked, kind): (Arc<dyn Sampler>, bool, SamplerKind) =
            match (self.sampler, self.shuffle) {
                (Some(_), true) => {
                    return Err(ConfigError::SamplerAndShuffle.into());
                }
                (Some(s), false) => (s, false, SamplerKind::Custom),
                // Not chunked: a chunk at either end of the range holds samples outside it.
                (None, shuffle) if self.subset.is_some() => {
                    let range = self.subset.unwrap_or_default();
                    let kind = SamplerKind::Subset {
                        start: range.start as u64,
                        end: range.end as u64,
                    };
                    let indices: Vec<usize> = range.collect();
                    let sampler = if shuffle {
                        SubsetSampler::shuffled(indices, self.seed)
                    } else {
                        SubsetSampler::new(indices)
                    };
                    (Arc::new(sampler), false, kind)
                }
                (None, true) if sharded && self.shard_order == ShardOrder::Local => {
                    let layout = self
                        .dataset
                        .shards()
                        .iter()
                        .map(|s| s.chunks.clone())
                        .collect();
                    let mut sampler = ShardSampler::new(layout, self.seed).rank(rank, world);
                    if let Some(buffer) = self.shuffle_buffer {
                        sampler = sampler.shuffle_buffer(buffer);
                    }
                    let kind = SamplerKind::ShardLocal {
                        buffer: self.shuffle_buffer.map(|b| b as u64),
                    };
                    (Arc::new(sampler.build()?), true, kind)
                }
                (None, shuffle) if world > 1 => {
                    let sampler = DistributedSampler::new(self.dataset.len(), rank, world)
                        .shuffle(shuffle)
                        .seed(self.seed)
                        .build()?;
                    (Arc::new(sampler), false, SamplerKind::Distributed)
                }
                (None, true) => (
                    Arc::new(RandomSampler::new(self.dataset.len(), self.seed)?),
                    false,
                    SamplerKind::Plain,
                ),
                (None, false) => (
                    Arc::new(SequentialSampler::new(self.dataset.len())),
                    true,
                    SamplerKind::Plain,
                ),
            };
        let stamp = OrderStamp {
            samples: self.dataset.len() as u64,
            dataset: crate::state::dataset_hash(&self.dataset),
            epoch_samples: sampler.len() as u64,
            world_size: if custom { 1 } else { world as u64 },
            sampler: kind,
            shuffle: self.shuffle,
            seed: self.seed,
        };
        let batches =
            BatchSampler::new(Arc::clone(&sampler), self.batch_size, self.drop_last).len();
        if batches == 0 {
            return Err(ConfigError::NoBatch {
                samples: sampler.len(),
                batch_size: self.batch_size,
                drop_last: self.drop_last,
            }
            .into());
        }
        // Per attempt, inside the retry: a stalled attempt is abandoned and repeated.
        let storage = match self.request_timeout {
            Some(timeout) => Arc::new(self.storage.with_timeout(timeout)) as DynStorage,
            None => self.storage,
        };
        let storage = match self.retry {
            Some(retry) => Arc::new(storage.with_retry(retry)) as DynStorage,
            None => storage,
        };
        // Outside the retry: a hit makes no request, a miss's request is retried below.
        let (storage, cache) = match self.cache {
            Some(config) => {
                let store = storage.with_cache(config)?;
                let cache = store.cache();
                cache.learn(self.dataset.objects().iter().cloned());
                (Arc::new(store) as DynStorage, Some(cache))
            }
            None => (storage, None),
        };
        Ok(DataLoader {
            storage,
            dataset: self.dataset,
            sampler,
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            stage: self.stage,
            weigh: self.weigh,
            collate: self.collate,
            config: self.config,
            state: SamplerState::default(),
            engine: None,
            end_of_pass: false,
            skip_to_next_epoch: false,
            metrics: None,
            chunked: chunked && sharded,
            epochs: self.epochs,
            cache,
            stamp,
            carried_skips: Vec::new(),
        })
    }
}

impl<T: Send + 'static> DataLoaderBuilder<T, Batch> {
    /// The image transform, e.g. `Pipeline::imagenet_eval()`; it decodes too.
    pub fn transform(self, pipeline: Pipeline) -> DataLoaderBuilder<Sample, Batch> {
        let (stage, collate) = pipeline_stage(pipeline);
        let mut builder = self.with_stage(stage, Some(sample_weight()), collate);
        builder.decodes_images = true;
        builder
    }
}

impl<T: Send + 'static, B> DataLoaderBuilder<T, B> {
    /// Any CPU stage (bytes of a sample to `U`, for data that is not images) with the
    /// collate that makes batches of them.
    pub fn map<U, C>(
        self,
        stage: impl Fn(Bytes, &SampleInfo) -> std::result::Result<U, StageError> + Send + Sync + 'static,
        collate: impl Fn(RawBatch<U>) -> Result<C> + Send + Sync + 'static,
    ) -> DataLoaderBuilder<U, C> {
        let mut builder = self.with_stage(Arc::new(stage), None, Arc::new(collate));
        builder.decodes_images = false;
        builder
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
            storage: self.storage,
            dataset: self.dataset,
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            seed: self.seed,
            drop_last: self.drop_last,
            sampler: self.sampler,
            stage,
            weigh,
            collate,
            config: self.config,
            retry: self.retry,
            request_timeout: self.request_timeout,
            shard_order: self.shard_order,
            shuffle_buffer: self.shuffle_buffer,
            rank: self.rank,
            epochs: self.epochs,
            cache: self.cache,
            subset: self.subset,
            decodes_images: self.decodes_images,
        }
    }
}

impl<T: Send + 'static, B> DataLoader<T, B> {
    /// Batches per epoch.
    pub fn len(&self) -> usize {
        BatchSampler::new(Arc::clone(&self.sampler), self.batch_size, self.drop_last).len()
    }

    /// Whether an epoch has no batch (never, for a built loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// The epoch the next pass reads, as PyTorch's `sampler.set_epoch`. Setting the epoch
    /// the loader is already in keeps its position (and what it prefetched): after
    /// `resume(state)`, the training loop's `set_epoch(state.epoch)` continues the epoch
    /// instead of reading its first samples again. Another epoch starts at its beginning.
    pub fn set_epoch(&mut self, epoch: u64) {
        let next = self.next_state();
        if next.epoch != epoch {
            self.restart(SamplerState { epoch, position: 0 });
        } else if next.position == 0 {
            // The last batch went out but the consumer stopped without asking past it (it
            // took `len()` batches): the pass it starts now reads this epoch, not nothing.
            self.end_of_pass = false;
        }
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.next_state().epoch
    }

    /// Make the next pass a whole epoch, as PyTorch's DataLoader is when iterated again
    /// after a `break`: part way through an epoch, its rest is dropped and the pass reads
    /// the next epoch; between epochs (the last batch delivered, or none yet) nothing
    /// changes, and what was prefetched is kept. Returns the epoch the next pass reads.
    pub fn to_epoch_start(&mut self) -> u64 {
        let next = self.next_state();
        if next.position != 0 {
            self.restart(SamplerState {
                epoch: next.epoch + 1,
                position: 0,
            });
        } else {
            // The last batch went out and the pass has yet to end: the engine, running
            // ahead, already holds the next epoch's batches.
            self.end_of_pass = false;
        }
        self.next_state().epoch
    }

    /// Samples an epoch reads (this rank's, for a distributed loader), counting those of a
    /// last batch that `drop_last` drops.
    pub fn samples_per_epoch(&self) -> usize {
        self.sampler.len()
    }

    /// The state to checkpoint: resuming from it delivers exactly what this loader has not
    /// delivered yet, and then the same epochs as without the interruption. A batch that
    /// failed under `Fail` was not delivered, so it is fetched again. Refused under
    /// `AsCompleted` order, whose batches follow no sampler position.
    pub fn state(&self) -> Result<LoaderState> {
        if self.config.order == Order::AsCompleted {
            return Err(StateError::AsCompleted.into());
        }
        Ok(LoaderState {
            epoch: self.state.epoch,
            position: self.state.position,
            order: Some(self.stamp),
        })
    }

    /// Continue from a saved state. A state saved under another order (another dataset,
    /// world size, sampler, shuffle or seed) is refused, naming both sides: its position
    /// would name other samples here, and some would be read twice or never.
    pub fn resume(&mut self, state: LoaderState) -> Result<()> {
        crate::state::check(&state, &self.stamp, self.sampler.len())?;
        self.restart(SamplerState {
            epoch: state.epoch,
            position: state.position,
        });
        Ok(())
    }

    /// What this loader's positions mean; a state carries it, and [`resume`](Self::resume)
    /// compares it.
    pub fn order_stamp(&self) -> OrderStamp {
        self.stamp
    }

    /// Reports of skipped samples not yet handed over with a batch: a batch whose every
    /// sample was skipped is not delivered (an empty batch would fail far from the cause),
    /// and its reports go with the next batch. At the end of a pass, what this returns
    /// would otherwise wait for the next epoch's first batch; taking it here hands it over
    /// now instead (and only here).
    pub fn take_unreported_skips(&mut self) -> Vec<loader_scheduler::ItemError> {
        std::mem::take(&mut self.carried_skips)
    }

    /// The cache's handle, when [`cache`](DataLoaderBuilder::cache) was set: its
    /// [`snapshot`](Cache::snapshot) counts hits, misses, bytes and evictions.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// The running engine's metrics (fetch, decode, queue and consumer timings).
    pub fn metrics(&self) -> Option<Arc<Metrics>> {
        self.metrics.clone()
    }

    /// Where the next pass starts, taking a pending skip to the next epoch into account.
    fn next_state(&self) -> SamplerState {
        if self.skip_to_next_epoch {
            SamplerState {
                epoch: self.state.epoch + 1,
                position: 0,
            }
        } else {
            self.state
        }
    }

    fn restart(&mut self, state: SamplerState) {
        self.engine = None;
        self.state = state;
        self.end_of_pass = false;
        self.skip_to_next_epoch = false;
    }

    /// Batches from `state` on, epoch after epoch (up to the last of `epochs`), for the
    /// engine to run ahead on.
    fn plans(&self) -> impl Iterator<Item = BatchPlan> + Send + 'static {
        let (sampler, dataset) = (Arc::clone(&self.sampler), self.dataset.clone());
        let (batch_size, drop_last, start) = (self.batch_size, self.drop_last, self.state);
        let chunked = self.chunked;
        let end = self.epochs.unwrap_or(u64::MAX);
        let cache = self.cache.clone();
        if let Some(cache) = &cache {
            cache.forget_plan();
            let ahead = (start.epoch..end).take(1 + CACHE_HORIZON as usize);
            for epoch in ahead {
                let from = if epoch == start.epoch {
                    start
                } else {
                    SamplerState { epoch, position: 0 }
                };
                announce(cache, &*sampler, &dataset, from, chunked);
            }
        }
        (start.epoch..end.max(start.epoch)).flat_map(move |epoch| {
            if let Some(cache) = &cache
                && epoch > start.epoch
                && let Some(ahead) = epoch.checked_add(CACHE_HORIZON).filter(|&e| e < end)
            {
                let from = SamplerState {
                    epoch: ahead,
                    position: 0,
                };
                announce(cache, &*sampler, &dataset, from, chunked);
            }
            let batches = BatchSampler::new(Arc::clone(&sampler), batch_size, drop_last);
            let from = if epoch == start.epoch {
                start.position
            } else {
                0
            };
            let state = SamplerState {
                epoch,
                position: from,
            };
            let dataset = dataset.clone();
            let last_use = chunked.then(|| chunk_last_uses(&*sampler, &dataset, state));
            let mut position = from;
            let mut cut = batches.resume(state).peekable();
            // The last batch is the one after which the sampler has nothing left, whatever
            // its `len()` says: a sampler that yields fewer indices than it claims must
            // end its epoch, not run on into the next one within the same pass.
            std::iter::from_fn(move || {
                let indices = cut.next()?;
                let items: Vec<WorkItem> = indices
                    .iter()
                    .enumerate()
                    .map(|(k, &i)| {
                        let at = position + k as u64;
                        // An index past the dataset reads as an invalid key, reported per item.
                        let mut item = dataset.get(i).map(Item::to_work).unwrap_or_default();
                        item.index = i as u64;
                        if let Some(last_use) = &last_use {
                            item.chunk = dataset.chunk(i).map(|(_, range)| Chunk {
                                range,
                                last_use: last_use
                                    .get((at - from) as usize)
                                    .copied()
                                    .unwrap_or(true),
                            });
                        }
                        item
                    })
                    .collect();
                let plan = BatchPlan {
                    epoch,
                    position,
                    last_in_epoch: cut.peek().is_none(),
                    items,
                };
                position += plan.items.len() as u64;
                Some(plan)
            })
        })
    }

    /// Whether the epoch of `state` has no batch left from its position: a resume into
    /// the tail that `drop_last` drops (e.g. a checkpoint taken with another batch size).
    fn nothing_left(&self) -> bool {
        BatchSampler::new(Arc::clone(&self.sampler), self.batch_size, self.drop_last)
            .resume(self.state)
            .next()
            .is_none()
    }

    /// Start the engine if none runs. `Ok(false)`: the epoch has nothing left, so this pass
    /// is empty and the state moves to the next epoch (the engine, which runs on across
    /// epochs, would otherwise deliver the next epoch within this pass).
    fn ensure_engine(&mut self) -> Result<bool> {
        if self.skip_to_next_epoch {
            let next = self.next_state();
            self.restart(next);
        }
        if self.engine.is_none() && self.nothing_left() {
            self.state = SamplerState {
                epoch: self.state.epoch + 1,
                position: 0,
            };
            return Ok(false);
        }
        if self.engine.is_none() {
            let engine = Engine::start_weighed(
                Arc::clone(&self.storage),
                Arc::clone(&self.stage),
                self.weigh.clone(),
                self.plans(),
                &self.config,
            )?;
            self.metrics = Some(engine.metrics());
            self.engine = Some(engine);
        }
        Ok(true)
    }

    /// A batch failed: this pass ends here and the next one starts the next epoch, while
    /// `state()` still points at the failed batch.
    fn fail_pass(&mut self) {
        self.engine = None;
        self.end_of_pass = true;
        self.skip_to_next_epoch = true;
    }

    fn handle(&mut self, raw: Option<std::result::Result<RawBatch<T>, EngineError>>) -> Handled<B> {
        match raw {
            Some(Ok(mut raw)) => {
                // Handed over: what the caller keeps in its batches is its own memory, and
                // a caller that collects a whole epoch must not stall the engine.
                raw.release_window();
                let delivered = match self.config.order {
                    Order::Sampler => raw.position + raw.planned as u64,
                    Order::AsCompleted => self.state.position + raw.planned as u64,
                };
                let (epoch, last) = (raw.epoch, raw.last_in_epoch);
                if raw.samples.is_empty() {
                    // Every sample was skipped: an empty batch would crash a model far from
                    // the cause, so none is delivered; its reports ride with the next batch.
                    self.carried_skips.append(&mut raw.skipped);
                    self.state.position = delivered;
                    if last {
                        self.state = SamplerState {
                            epoch: epoch + 1,
                            position: 0,
                        };
                        return Handled::Out(None);
                    }
                    return Handled::Again;
                }
                if !self.carried_skips.is_empty() {
                    let mut skipped = std::mem::take(&mut self.carried_skips);
                    skipped.append(&mut raw.skipped);
                    raw.skipped = skipped;
                }
                match (self.collate)(raw) {
                    Ok(batch) => {
                        self.state.position = delivered;
                        if last {
                            self.state = SamplerState {
                                epoch: epoch + 1,
                                position: 0,
                            };
                            self.end_of_pass = true;
                        }
                        Handled::Out(Some(Ok(batch)))
                    }
                    // Not delivered, so not counted: as a failed batch, the pass ends and
                    // `state()` points at this batch, which a resume reads again.
                    Err(e) => {
                        self.fail_pass();
                        Handled::Out(Some(Err(e)))
                    }
                }
            }
            Some(Err(e)) => {
                self.fail_pass();
                Handled::Out(Some(Err(e.into())))
            }
            None => {
                self.engine = None;
                Handled::Out(None)
            }
        }
    }
}

/// What one batch from the engine makes of the pass.
enum Handled<B> {
    /// The pass's next item: a batch, an error, or its end.
    Out(Option<Result<B>>),
    /// Nothing to deliver (every sample skipped): take the next batch.
    Again,
}

impl<T: Send + 'static, B> Iterator for DataLoader<T, B> {
    type Item = Result<B>;

    fn next(&mut self) -> Option<Result<B>> {
        if std::mem::take(&mut self.end_of_pass) {
            return None;
        }
        match self.ensure_engine() {
            Err(e) => return Some(Err(e)),
            Ok(false) => return None,
            Ok(true) => {}
        }
        loop {
            let raw = self.engine.as_mut()?.next_blocking();
            if let Handled::Out(out) = self.handle(raw) {
                return out;
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.len()))
    }
}

impl<T: Send + 'static, B> Stream for DataLoader<T, B> {
    type Item = Result<B>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<B>>> {
        let this = self.get_mut();
        if std::mem::take(&mut this.end_of_pass) {
            return Poll::Ready(None);
        }
        match this.ensure_engine() {
            Err(e) => return Poll::Ready(Some(Err(e))),
            Ok(false) => return Poll::Ready(None),
            Ok(true) => {}
        }
        loop {
            let Some(engine) = this.engine.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(engine).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(raw) => {
                    if let Handled::Out(out) = this.handle(raw) {
                        return Poll::Ready(out);
                    }
                }
            }
        }
    }
}

/// Epochs ahead of the one being read whose reads the cache is told. Two reach the offline
/// optimum in the hit-rate replay (`examples/cache_hit_rate.rs`) where one falls short
/// under sampling with replacement (a sample skipped by the next epoch looks unneeded).
const CACHE_HORIZON: u64 = 2;

/// Tell `cache` the reads of the epoch of `state` from its position, as the engine makes
/// them: an item each, or for a chunked order a chunk once per run of its items.
fn announce(
    cache: &Cache,
    sampler: &dyn Sampler,
    dataset: &Dataset,
    state: SamplerState,
    chunked: bool,
) {
    let last_use = chunked.then(|| chunk_last_uses(sampler, dataset, state));
    let mut open = vec![false; if chunked { dataset.chunk_count() } else { 0 }];
    let mut reads: Vec<(Arc<str>, Option<std::ops::Range<u64>>)> =
        Vec::with_capacity(sampler.len());
    for (k, index) in sampler.resume(state).enumerate() {
        let Some(item) = dataset.get(index) else {
            continue;
        };
        let chunk = last_use
            .as_ref()
            .and_then(|flags| Some((dataset.chunk(index)?, flags.get(k)?)));
        match chunk {
            Some(((id, range), &last)) => {
                let Some(is_open) = open.get_mut(id as usize) else {
                    continue;
                };
                if !*is_open {
                    reads.push((Arc::clone(&item.key), Some(range)));
                }
                *is_open = !last;
            }
            None => reads.push((Arc::clone(&item.key), item.range.clone())),
        }
    }
    cache.announce(reads.iter().map(|(key, range)| (&**key, range.clone())));
}

/// Positions further apart than this in the order do not share a fetched chunk: the engine
/// lets it go after the first and fetches it again for the second, rather than holding it
/// (e.g. a padded rank's first chunk, read again at the end of its epoch).
const CHUNK_HORIZON: u64 = 8192;

/// For each position of the epoch from `state` on: whether its item is the last (for a
/// while, [`CHUNK_HORIZON`]) to read its chunk, so the engine knows when to drop it.
fn chunk_last_uses(sampler: &dyn Sampler, dataset: &Dataset, state: SamplerState) -> Vec<bool> {
    let mut last_seen: Vec<u64> = vec![u64::MAX; dataset.chunk_count()];
    let mut flags = Vec::with_capacity(sampler.len());
    for (k, index) in sampler.resume(state).enumerate() {
        flags.push(true);
        let Some((chunk, _)) = dataset.chunk(index) else {
            continue;
        };
        let Some(seen) = last_seen.get_mut(chunk as usize) else {
            continue;
        };
        let at = k as u64;
        if *seen != u64::MAX && at - *seen <= CHUNK_HORIZON {
            flags[*seen as usize] = false;
        }
        *seen = at;
    }
    flags
}
