//! Read planning: the run's global order (one order of every source's samples, the same on
//! any world size), this rank's share of each global batch, and what the engine (which
//! chunks to read whole, and when each is done) and the cache (the epochs ahead) are told.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use loader_sampler::{
    BatchSampler, Batching, DEFAULT_WINDOW_CHUNKS, EpochOrder, GlobalOrder, Interleave, Sampler,
    SamplerState, Segment, SourceKind, SourceOrder, Stripe,
};
use loader_scheduler::{BatchPlan, Chunk, WorkItem};
use loader_storage::layer::Cache;

use crate::error::{ConfigError, StateError};
use crate::options::{LoaderOptions, ShardOrder};
use crate::source::Source;
use crate::state::{
    CustomStamp, Fit, LoaderState, MixtureStamp, ORDER_VERSION, OrderStamp, SourceStamp,
    check_position, dataset_hash,
};
use crate::{Dataset, Item, Result};

/// Epochs ahead of the one being read whose reads the cache is told. Two reach the offline
/// optimum in the hit-rate replay (`examples/cache_hit_rate.rs`) where one falls short
/// under sampling with replacement (a sample skipped by the next epoch looks unneeded).
const CACHE_HORIZON: u64 = 2;

/// A rank's reads looked ahead at to decide what to do with a chunk: whether the rank reads
/// enough of it to fetch it whole, and which read is its last (after which the engine lets
/// it go; one read again further on is fetched again rather than held).
const CHUNK_HORIZON: usize = 8192;

/// Reads of an endless epoch the cache is told about at once.
const ANNOUNCE_CAP: usize = 1 << 22;

/// One source as the planner reads it: where its samples start in the loader's dataset, and
/// whether this rank reads them by chunks.
#[derive(Debug, Clone, Copy)]
struct PlanSource {
    offset: usize,
    chunked: bool,
}

/// What orders the samples.
#[derive(Clone)]
enum Order {
    /// The loader's global order, cut into global batches that ranks share.
    Global {
        order: GlobalOrder,
        stripe: Stripe,
        batching: Batching,
        /// The epoch order last built, since building one costs a pass over the sources'
        /// chunk layouts.
        built: Arc<Mutex<Option<EpochOrder>>>,
    },
    /// A caller's sampler, read by this rank alone.
    Custom(Arc<dyn Sampler>),
}

/// The order of a loader and what it tells the engine and the cache.
#[derive(Clone)]
pub(crate) struct Planner {
    pub(crate) dataset: Dataset,
    sources: Arc<[PlanSource]>,
    /// Where each source's samples start in `dataset`.
    offsets: Arc<[usize]>,
    order: Order,
    batch_size: usize,
    drop_last: bool,
    /// Epochs to read at most: the engine does not run ahead past the last.
    epochs: Option<u64>,
    /// The cache between the engine and the store, told the upcoming reads.
    pub(crate) cache: Option<Cache>,
    /// What the order is made of, for checkpoints (its segment and cursors aside).
    stamp: OrderStamp,
    /// Start a new segment when a state of another mixture is resumed.
    new_segment: bool,
}

/// One rank's part of one batch, before it becomes the engine's plan.
struct Cut {
    epoch: u64,
    start: u64,
    end: u64,
    last: bool,
    padding: usize,
    reads: Vec<CutRead>,
}

/// One read of a cut.
#[derive(Clone, Copy)]
struct CutRead {
    /// Its dataset index.
    index: usize,
    /// Whether it may be read with its chunk.
    chunkable: bool,
    /// Its epoch position, when the cut's reads are not consecutive positions.
    position: Option<u64>,
}

impl Planner {
    /// The order the options ask for over `sources` (whose samples are `dataset`, source
    /// `s` from index `offsets[s]`), or a caller's sampler `custom`.
    pub(crate) fn new(
        sources: &[Source],
        dataset: Dataset,
        offsets: &[usize],
        options: &LoaderOptions,
        custom: Option<Arc<dyn Sampler>>,
    ) -> Result<Self> {
        let (world, seed) = (options.world_size, options.seed);
        if let Some(range) = &options.subset {
            if custom.is_some() || world > 1 || sources.len() > 1 {
                return Err(ConfigError::SubsetAndSampler.into());
            }
            if range.is_empty() || range.end > dataset.len() {
                return Err(ConfigError::Subset {
                    start: range.start,
                    end: range.end,
                    samples: dataset.len(),
                }
                .into());
            }
        }
        if let Some(sampler) = custom {
            if options.shuffle {
                return Err(ConfigError::SamplerAndShuffle.into());
            }
            if sources.len() > 1 || world > 1 {
                return Err(ConfigError::SamplerAndMixture.into());
            }
            let stamp = OrderStamp {
                version: ORDER_VERSION,
                seed,
                shuffle: false,
                mixture: None,
                custom: Some(CustomStamp {
                    samples: dataset.len() as u64,
                    dataset: dataset_hash(&dataset),
                    epoch_samples: sampler.len() as u64,
                }),
            };
            let planner = Self {
                dataset,
                sources: Arc::from(vec![PlanSource {
                    offset: 0,
                    chunked: false,
                }]),
                offsets: Arc::from(vec![0]),
                order: Order::Custom(sampler),
                batch_size: options.batch_size,
                drop_last: options.drop_last,
                epochs: options.epochs,
                cache: None,
                stamp,
                new_segment: options.mixture.new_segment,
            };
            planner.check_has_a_batch()?;
            return Ok(planner);
        }
        let mut orders = Vec::with_capacity(sources.len());
        let mut plan_sources = Vec::with_capacity(sources.len());
        let mut stamps = Vec::with_capacity(sources.len());
        let mut arrangement = Vec::with_capacity(sources.len());
        let weights =
            Interleave::from_weights(&sources.iter().map(|s| s.weight).collect::<Vec<_>>())?
                .weights()
                .to_vec();
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for (s, source) in sources.iter().enumerate() {
            let data = &source.dataset;
            let hash = dataset_hash(data);
            // The same dataset twice is two sources with permutations of their own.
            let repeat = seen.entry(hash).or_default();
            let identity = hash ^ repeat.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            *repeat += 1;
            stamps.push(SourceStamp {
                samples: data.len() as u64,
                hash,
                weight: weights[s],
            });
            let sharded = !data.shards().is_empty();
            let (offset, len, kind, chunked, text) = match &options.subset {
                Some(range) => (
                    range.start,
                    range.len(),
                    if options.shuffle {
                        SourceKind::Shuffled
                    } else {
                        SourceKind::Sequential
                    },
                    false,
                    format!(
                        "subset {}..{} {}",
                        range.start,
                        range.end,
                        if options.shuffle {
                            "shuffled"
                        } else {
                            "in order"
                        }
                    ),
                ),
                None if options.shuffle && sharded && options.shard_order == ShardOrder::Local => {
                    let shards: Vec<Vec<std::ops::Range<usize>>> =
                        data.shards().iter().map(|s| s.chunks.clone()).collect();
                    let chunks = shards.iter().map(Vec::len).sum::<usize>().max(1);
                    let window = options
                        .shuffle_buffer
                        .unwrap_or_else(|| (DEFAULT_WINDOW_CHUNKS * data.len()).div_ceil(chunks))
                        .max(1);
                    let text = format!("shard_local(lanes={}, window={window})", options.lanes);
                    let kind = SourceKind::ShardLocal {
                        shards: shards.into(),
                        lanes: options.lanes,
                        window,
                    };
                    (0, data.len(), kind, true, text)
                }
                None if options.shuffle => (
                    0,
                    data.len(),
                    SourceKind::Shuffled,
                    false,
                    "shuffled".into(),
                ),
                None => (
                    0,
                    data.len(),
                    SourceKind::Sequential,
                    sharded,
                    "in order".into(),
                ),
            };
            arrangement.push(text);
            plan_sources.push(PlanSource {
                offset: offsets[s] + offset,
                chunked,
            });
            orders.push(SourceOrder::new(len as u64, kind, identity)?);
        }
        let order = GlobalOrder::new(orders, weights, options.mixture.stop, seed)?;
        let stripe = Stripe {
            rank: options.rank,
            world: world.max(1),
            batch_size: options.batch_size,
        };
        let batching = options.mixture.batching;
        let unit = match batching {
            Batching::Mixed => 1,
            Batching::PerStream => stripe.global_batch() as u64,
        };
        let order = order.with_segment(Segment::first(sources.len(), unit))?;
        if options.rank >= stripe.world {
            return Err(loader_sampler::SamplerError::RankOutOfRange {
                rank: options.rank,
                world_size: stripe.world,
            }
            .into());
        }
        let stamp = OrderStamp {
            version: ORDER_VERSION,
            seed,
            shuffle: options.shuffle,
            mixture: Some(MixtureStamp {
                sources: stamps,
                stop: options.mixture.stop,
                batching,
                arrangement: arrangement.join("; "),
                segment: order.segment().clone(),
                cursors: Vec::new(),
                stream: 0,
            }),
            custom: None,
        };
        let planner = Self {
            dataset,
            sources: plan_sources.into(),
            offsets: offsets.into(),
            order: Order::Global {
                order,
                stripe,
                batching,
                built: Arc::default(),
            },
            batch_size: options.batch_size,
            drop_last: options.drop_last,
            epochs: options.epochs,
            cache: None,
            stamp,
            new_segment: options.mixture.new_segment,
        };
        planner.check_has_a_batch()?;
        Ok(planner)
    }

    fn check_has_a_batch(&self) -> Result<()> {
        if self.len() == 0 {
            return Err(ConfigError::NoBatch {
                samples: self
                    .epoch_positions(self.fresh_epoch())
                    .map_or(usize::MAX, |n| n as usize),
                batch_size: self.global_batch(),
                drop_last: self.drop_last,
            }
            .into());
        }
        Ok(())
    }

    /// Samples in a global batch: every rank's batch.
    fn global_batch(&self) -> usize {
        match &self.order {
            Order::Global { stripe, .. } => stripe.global_batch(),
            Order::Custom(_) => self.batch_size,
        }
    }

    /// An epoch of the current mixture read from its start (the one after the segment's).
    fn fresh_epoch(&self) -> u64 {
        match &self.order {
            Order::Global { order, .. } => order.segment().epoch.saturating_add(1),
            Order::Custom(_) => 0,
        }
    }

    /// The global order of `epoch`, built once while it is being read.
    fn epoch_order(&self, epoch: u64) -> Result<Option<EpochOrder>> {
        let Order::Global { order, built, .. } = &self.order else {
            return Ok(None);
        };
        let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = built.as_ref().filter(|e| e.epoch() == epoch) {
            return Ok(Some(e.clone()));
        }
        let e = order.epoch(epoch)?;
        *built = Some(e.clone());
        Ok(Some(e))
    }

    /// Positions of `epoch`'s order (`None`: endless); for a caller's sampler, its samples.
    pub(crate) fn epoch_positions(&self, epoch: u64) -> Option<u64> {
        match &self.order {
            Order::Global { .. } => self.epoch_order(epoch).ok().flatten().and_then(|e| e.len()),
            Order::Custom(sampler) => Some(sampler.len() as u64),
        }
    }

    /// Batches per epoch of this rank (`usize::MAX` for an endless one): every rank has as
    /// many, the last global batch being shared out evenly (or dropped under `drop_last`).
    pub(crate) fn len(&self) -> usize {
        match &self.order {
            Order::Custom(sampler) => {
                BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last).len()
            }
            Order::Global { .. } => match self.epoch_positions(self.fresh_epoch()) {
                None => usize::MAX,
                Some(n) => {
                    let g = self.global_batch() as u64;
                    let batches = if self.drop_last { n / g } else { n.div_ceil(g) };
                    usize::try_from(batches).unwrap_or(usize::MAX)
                }
            },
        }
    }

    /// Whether the epoch of `state` has no batch left from its position.
    pub(crate) fn nothing_left(&self, state: SamplerState) -> bool {
        match &self.order {
            Order::Custom(sampler) => {
                BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last)
                    .resume(state)
                    .next()
                    .is_none()
            }
            Order::Global { .. } => match self.epoch_positions(state.epoch) {
                None => false,
                Some(n) => {
                    let left = n.saturating_sub(state.position);
                    left == 0 || (self.drop_last && left < self.global_batch() as u64)
                }
            },
        }
    }

    /// The stamp of the order at `state`: what a checkpoint carries.
    pub(crate) fn stamp(&self, state: SamplerState) -> OrderStamp {
        let mut stamp = self.stamp.clone();
        if let (Order::Global { order, .. }, Some(m)) = (&self.order, stamp.mixture.as_mut()) {
            m.segment = order.segment().clone();
            if let Ok(Some(e)) = self.epoch_order(state.epoch) {
                m.cursors = e.cursors(state.position);
                m.stream = e.stream_position(state.position);
            }
        }
        stamp
    }

    /// Take `state` on: check it against this order, and go on in its segment, or start a
    /// new one when it was saved under another mixture and that is allowed.
    pub(crate) fn adopt(&mut self, state: &LoaderState) -> Result<()> {
        check_position(state, None)?;
        if let Some(saved) = &state.order {
            let fit = self.stamp.fit(saved)?;
            if let (
                Order::Global {
                    order,
                    stripe,
                    batching,
                    built,
                },
                Some(fit),
            ) = (&mut self.order, fit)
            {
                let unit = match batching {
                    Batching::Mixed => 1,
                    Batching::PerStream => stripe.global_batch() as u64,
                };
                let segment = match fit {
                    // The same mixture, cut into other global batches under per-stream
                    // batching: the interleave counts in the new ones from here on.
                    Fit::Same(segment) if segment.unit == unit => segment,
                    Fit::Same(_) => next_segment(saved, state, &self.stamp, unit),
                    Fit::Changed { .. } if self.new_segment => {
                        next_segment(saved, state, &self.stamp, unit)
                    }
                    Fit::Changed {
                        what,
                        saved,
                        current,
                    } => {
                        return Err(StateError::MixtureChanged {
                            what,
                            saved,
                            current,
                        }
                        .into());
                    }
                };
                *order = order.clone().with_segment(segment)?;
                *built.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        check_position(state, self.epoch_positions(state.epoch))?;
        Ok(())
    }

    /// This rank's batches of `epoch` from position `from`.
    fn cuts(&self, epoch: u64, from: u64) -> Box<dyn Iterator<Item = Cut> + Send> {
        match &self.order {
            Order::Custom(sampler) => {
                let state = SamplerState {
                    epoch,
                    position: from,
                };
                let mut batches =
                    BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last)
                        .resume(state)
                        .peekable();
                let mut position = from;
                Box::new(std::iter::from_fn(move || {
                    let indices = batches.next()?;
                    let start = position;
                    position += indices.len() as u64;
                    Some(Cut {
                        epoch,
                        start,
                        end: position,
                        last: batches.peek().is_none(),
                        padding: 0,
                        reads: indices
                            .into_iter()
                            .map(|index| CutRead {
                                index,
                                chunkable: false,
                                position: None,
                            })
                            .collect(),
                    })
                }))
            }
            Order::Global { stripe, .. } => {
                let Ok(Some(order)) = self.epoch_order(epoch) else {
                    return Box::new(std::iter::empty());
                };
                let sources = Arc::clone(&self.sources);
                Box::new(
                    order
                        .rank_batches(from, *stripe, self.drop_last)
                        .map(move |batch| Cut {
                            epoch,
                            start: batch.start,
                            end: batch.end,
                            last: batch.last,
                            padding: batch.padding,
                            reads: batch
                                .reads
                                .iter()
                                .map(|r| {
                                    let s = sources[r.draw.source];
                                    CutRead {
                                        index: s.offset + r.draw.sample as usize,
                                        chunkable: s.chunked && !r.stray,
                                        position: Some(r.position),
                                    }
                                })
                                .collect(),
                        }),
                )
            }
        }
    }

    /// The source of dataset index `index`, and its index within that source.
    pub(crate) fn source_of(&self, index: usize) -> Option<(usize, usize)> {
        if index >= self.dataset.len() {
            return None;
        }
        let source = self
            .offsets
            .partition_point(|&o| o <= index)
            .checked_sub(1)?;
        Some((source, index - self.offsets[source]))
    }

    /// The dataset indices this rank reads in `epoch` from its start (its segment's, in the
    /// segment's epoch), in order, padding included.
    pub(crate) fn planned(&self, epoch: u64) -> impl Iterator<Item = u64> + Send + use<> {
        let from = match &self.order {
            Order::Global { order, .. } if order.segment().epoch == epoch => order.segment().start,
            _ => 0,
        };
        self.cuts(epoch, from)
            .flat_map(|cut| cut.reads.into_iter().map(|r| r.index as u64))
    }

    /// Batches from `start` on, epoch after epoch (up to the last of `epochs`), for the
    /// engine to run ahead on; the cache is told the reads of the epochs ahead as they come.
    pub(crate) fn plans(
        &self,
        start: SamplerState,
    ) -> impl Iterator<Item = BatchPlan> + Send + use<> {
        let planner = self.clone();
        let end = self.epochs.unwrap_or(u64::MAX);
        if let Some(cache) = &self.cache {
            cache.forget_plan();
            for epoch in (start.epoch..end).take(1 + CACHE_HORIZON as usize) {
                let from = if epoch == start.epoch {
                    start.position
                } else {
                    0
                };
                self.announce(cache, epoch, from);
            }
        }
        (start.epoch..end.max(start.epoch)).flat_map(move |epoch| {
            if let Some(cache) = &planner.cache
                && epoch > start.epoch
                && let Some(ahead) = epoch.checked_add(CACHE_HORIZON).filter(|&e| e < end)
            {
                planner.announce(cache, ahead, 0);
            }
            let from = if epoch == start.epoch {
                start.position
            } else {
                0
            };
            Chunked::new(planner.dataset.clone(), planner.cuts(epoch, from))
        })
    }

    /// Tell `cache` this rank's reads of `epoch` from `from`, as the engine makes them: an
    /// item each, or a chunk once per run of its items.
    fn announce(&self, cache: &Cache, epoch: u64, from: u64) {
        let mut reads: Vec<(Arc<str>, Option<std::ops::Range<u64>>)> = Vec::new();
        let mut open: HashMap<(Arc<str>, u64, u64), ()> = HashMap::new();
        for plan in Chunked::new(self.dataset.clone(), self.cuts(epoch, from)) {
            for item in plan.items {
                match &item.chunk {
                    Some(chunk) => {
                        let id = (Arc::clone(&item.key), chunk.range.start, chunk.range.end);
                        if open.insert(id.clone(), ()).is_none() {
                            reads.push((Arc::clone(&item.key), Some(chunk.range.clone())));
                        }
                        if chunk.last_use {
                            open.remove(&id);
                        }
                    }
                    None => reads.push((Arc::clone(&item.key), item.range.clone())),
                }
            }
            if reads.len() >= ANNOUNCE_CAP {
                break;
            }
        }
        cache.announce(reads.iter().map(|(key, range)| (&**key, range.clone())));
    }
}

/// The segment a run continues in when it resumes `state` (saved as `saved`) under the
/// order stamped `current`: from the state's position, each current source going on from
/// the reads of the saved source it is (the first not yet taken, if it appears twice), a
/// new one from 0.
fn next_segment(
    saved: &OrderStamp,
    state: &LoaderState,
    current: &OrderStamp,
    unit: u64,
) -> Segment {
    let (Some(s), Some(c)) = (&saved.mixture, &current.mixture) else {
        return Segment::first(0, unit);
    };
    let mut taken = vec![false; s.sources.len()];
    let bases = c
        .sources
        .iter()
        .map(|source| {
            let found = s
                .sources
                .iter()
                .enumerate()
                .position(|(i, old)| !taken[i] && old.same_source(source));
            match found {
                Some(i) => {
                    taken[i] = true;
                    s.cursors.get(i).copied().unwrap_or(0)
                }
                None => 0,
            }
        })
        .collect();
    Segment {
        number: s.segment.number.saturating_add(1),
        epoch: state.epoch,
        start: state.position,
        stream_start: if c.stop.carries_across_epochs() {
            s.stream
        } else {
            state.position
        },
        bases,
        unit,
    }
}

/// The engine's plans of one epoch's cuts: each read that may use its chunk does when this
/// rank reads at least half of the chunk's samples in the reads ahead (else it is read
/// alone, as a ranged request the engine may coalesce), and the last read of a chunk in
/// the reads ahead lets it go.
struct Chunked {
    dataset: Dataset,
    cuts: Box<dyn Iterator<Item = Cut> + Send>,
    ahead: std::collections::VecDeque<Cut>,
    /// Reads of each chunk among the cuts ahead.
    counts: HashMap<u32, usize>,
    buffered: usize,
    /// Open chunks, and whether each is read whole.
    open: HashMap<u32, bool>,
    done: bool,
}

impl Chunked {
    fn new(dataset: Dataset, cuts: Box<dyn Iterator<Item = Cut> + Send>) -> Self {
        Self {
            dataset,
            cuts,
            ahead: std::collections::VecDeque::new(),
            counts: HashMap::new(),
            buffered: 0,
            open: HashMap::new(),
            done: false,
        }
    }

    /// Read cuts ahead until the front one has `CHUNK_HORIZON` reads after it, or the
    /// epoch has no more.
    fn fill(&mut self) {
        while !self.done
            && self.buffered < CHUNK_HORIZON + self.ahead.front().map_or(0, |c| c.reads.len())
        {
            match self.cuts.next() {
                Some(cut) => {
                    for read in &cut.reads {
                        if read.chunkable
                            && let Some((id, _)) = self.dataset.chunk(read.index)
                        {
                            *self.counts.entry(id).or_default() += 1;
                        }
                    }
                    self.buffered += cut.reads.len();
                    self.done = cut.last;
                    self.ahead.push_back(cut);
                }
                None => self.done = true,
            }
        }
    }
}

impl Iterator for Chunked {
    type Item = BatchPlan;

    fn next(&mut self) -> Option<BatchPlan> {
        self.fill();
        let cut = self.ahead.pop_front()?;
        self.buffered -= cut.reads.len();
        let items = cut
            .reads
            .iter()
            .map(|read| {
                let index = read.index;
                // An index past the dataset reads as an invalid key, reported per item.
                let mut item = self
                    .dataset
                    .get(index)
                    .map(Item::to_work)
                    .unwrap_or_default();
                item.index = index as u64;
                item.position = read.position;
                if read.chunkable
                    && let Some((id, range)) = self.dataset.chunk(index)
                {
                    let left = self.counts.get(&id).copied().unwrap_or(1);
                    let whole = *self
                        .open
                        .entry(id)
                        .or_insert_with(|| 2 * left >= self.dataset.chunk_samples(id));
                    let left = left.saturating_sub(1);
                    if left == 0 {
                        self.counts.remove(&id);
                        self.open.remove(&id);
                    } else {
                        self.counts.insert(id, left);
                    }
                    if whole {
                        item.chunk = Some(Chunk {
                            range,
                            last_use: left == 0,
                        });
                    }
                }
                item
            })
            .collect::<Vec<WorkItem>>();
        let mut plan = BatchPlan::new(cut.epoch, cut.start, items, cut.last);
        plan.covers = cut.end - cut.start;
        plan.padding = cut.padding;
        Some(plan)
    }
}
