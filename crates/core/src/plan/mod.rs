//! Read planning: the run's global order (one order of every source's samples, the same on
//! any world size) or a caller's sampler, this rank's share of each global batch, and what
//! the engine (`chunked`: which chunks to read whole, and when each is done) and the cache
//! (the epochs ahead) are told.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use loader_sampler::{
    BatchSampler, Batching, DEFAULT_WINDOW_CHUNKS, EpochOrder, GlobalOrder, Interleave, Sampler,
    SamplerState, Segment, SourceKind, SourceOrder, Stripe,
};
use loader_scheduler::BatchPlan;
use loader_storage::layer::Cache;

use crate::error::{ConfigError, StateError};
use crate::options::{LoaderOptions, MixtureOptions, ShardOrder};
use crate::source::Source;
use crate::state::{
    Arrangement, CustomStamp, Fit, LoaderState, MixtureStamp, ORDER_VERSION, OrderStamp,
    SourceStamp, check_position, dataset_hash, next_segment,
};
use crate::{Dataset, Result};

mod chunked;

use chunked::{Chunked, Cut, CutRead};

/// Epochs ahead of the one being read whose reads the cache is told. Two reach the offline
/// optimum in the hit-rate replay (`examples/cache_hit_rate.rs`) where one falls short
/// under sampling with replacement (a sample skipped by the next epoch looks unneeded).
const CACHE_HORIZON: u64 = 2;

/// Reads a rank looks ahead at, at least, to decide what to do with a chunk (read it whole
/// when it reads half of it, and let it go after its last read; one read again further on
/// is fetched again rather than held). Lanes of large chunks look further: a chunk's reads
/// span its lane's window.
const CHUNK_HORIZON: usize = 8192;

/// Reads looked ahead at, at most.
const MAX_HORIZON: usize = 1 << 22;

/// Reads of one epoch the cache is told about at once, at most.
const ANNOUNCE_CAP: usize = 1 << 22;

/// Epoch orders kept built (the engine's epoch, the one ahead it announces, a checkpoint's).
const EPOCHS_KEPT: usize = 4;

/// Lanes of a shard-local order a run starts with when none are given: a multiple of 16 and
/// of its world size, so each of its ranks (and those of world sizes dividing it) reads
/// lanes of its own.
fn auto_lanes(world: usize) -> u32 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let w = world.max(1) as u64;
    let lcm = 16 / gcd(16, w) * w;
    u32::try_from(lcm.min(1 << 16)).unwrap_or(1 << 16)
}

/// A lane's window when none is given, in chunks: 4, or more when a rank of the starting
/// world size reads few lanes, so that it mixes about 8 chunks at once (what one reader
/// mixed before lanes).
fn auto_window_chunks(world: usize, lanes: u32) -> usize {
    let lanes_per_rank = (lanes as usize / world.max(1)).max(1);
    DEFAULT_WINDOW_CHUNKS.max(8usize.div_ceil(lanes_per_rank))
}

/// Lanes and windows a resumed run takes from its state rather than choosing them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Kept {
    lanes: Option<u32>,
    /// Each source's window, where the state says it.
    windows: Vec<Option<usize>>,
}

/// One source as the planner reads it: where its samples start in the loader's dataset, and
/// whether this rank reads them by chunks.
#[derive(Debug, Clone, Copy)]
struct PlanSource {
    offset: usize,
    chunked: bool,
    /// Its samples share their stored spans (Parquet pages): every read takes its chunk,
    /// strays and a caller's sampler's too.
    shared: bool,
}

/// What orders the samples.
#[derive(Clone)]
enum ReadOrder {
    /// The loader's global order, cut into global batches that ranks share.
    Global {
        order: GlobalOrder,
        stripe: Stripe,
        batching: Batching,
        /// Epoch orders recently built, newest last (building one costs a pass over the
        /// sources' phases).
        built: Arc<Mutex<Vec<EpochOrder>>>,
    },
    /// A caller's sampler, read by this rank alone.
    Custom(Arc<dyn Sampler>),
}

/// Positions the interleave counts in: one, or a global batch under per-stream batching.
fn unit(batching: Batching, stripe: &Stripe) -> u64 {
    match batching {
        Batching::Mixed => 1,
        Batching::PerStream => stripe.global_batch() as u64,
    }
}

/// The order of a loader and what it tells the engine and the cache.
#[derive(Clone)]
pub(crate) struct Planner {
    pub(crate) dataset: Dataset,
    /// The sources and options it was made of, to make it again with the lanes and windows
    /// of a state it resumes.
    inputs: Arc<[Source]>,
    options: Arc<LoaderOptions>,
    sources: Arc<[PlanSource]>,
    /// Where each source's samples start in `dataset`.
    offsets: Arc<[usize]>,
    order: ReadOrder,
    batch_size: usize,
    drop_last: bool,
    /// Epochs to read at most: the engine does not run ahead past the last.
    epochs: Option<u64>,
    /// The cache between the engine and the store, told the upcoming reads.
    pub(crate) cache: Option<Cache>,
    /// The ranks whose reads the cache is told: this one's node when its directory is
    /// shared by the node (this rank alone otherwise).
    pub(crate) node: Range<usize>,
    /// What the order is made of, for checkpoints (its segment and cursors aside).
    stamp: OrderStamp,
    /// Start a new segment when a state of another mixture is resumed.
    new_segment: bool,
    /// Reads looked ahead at for chunks.
    horizon: usize,
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
        let world = options.world_size;
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
        let planner = match custom {
            Some(sampler) => Self::custom(sources, dataset, options, sampler)?,
            None => Self::global(sources, dataset, offsets, options, &Kept::default())?,
        };
        planner.check_has_a_batch()?;
        Ok(planner)
    }

    /// A caller's sampler: one dataset, one rank, none of the global order's settings.
    fn custom(
        sources: &[Source],
        dataset: Dataset,
        options: &LoaderOptions,
        sampler: Arc<dyn Sampler>,
    ) -> Result<Self> {
        if options.shuffle {
            return Err(ConfigError::SamplerAndShuffle.into());
        }
        if sources.len() > 1 || options.world_size > 1 {
            return Err(ConfigError::SamplerAndMixture.into());
        }
        let defaults = LoaderOptions::default();
        let ignored = [
            (
                "mixture.stop",
                options.mixture.stop != MixtureOptions::default().stop,
            ),
            (
                "mixture.batching",
                options.mixture.batching != Batching::Mixed,
            ),
            ("mixture.new_segment", options.mixture.new_segment),
            ("lanes", options.lanes != defaults.lanes),
            ("shuffle_buffer", options.shuffle_buffer.is_some()),
            ("shard_order", options.shard_order != ShardOrder::Local),
        ];
        if let Some((key, _)) = ignored.iter().find(|(_, set)| *set) {
            return Err(ConfigError::Option(format!(
                "{key} sets the loader's own order, but a sampler was given, which orders the \
                 samples itself: leave {key} unset, or leave the order to the loader"
            ))
            .into());
        }
        let stamp = OrderStamp {
            version: ORDER_VERSION,
            seed: options.seed,
            shuffle: false,
            mixture: None,
            custom: Some(CustomStamp {
                samples: dataset.len() as u64,
                dataset: dataset_hash(&dataset),
                epoch_samples: sampler.len() as u64,
            }),
        };
        let shared = shares_spans(&dataset);
        Ok(Self {
            dataset,
            inputs: sources.into(),
            options: Arc::new(options.clone()),
            sources: Arc::from(vec![PlanSource {
                offset: 0,
                chunked: false,
                shared,
            }]),
            offsets: Arc::from(vec![0]),
            order: ReadOrder::Custom(sampler),
            batch_size: options.batch_size,
            drop_last: options.drop_last,
            epochs: options.epochs,
            cache: None,
            node: options.rank..options.rank + 1,
            stamp,
            new_segment: false,
            horizon: CHUNK_HORIZON,
        })
    }

    /// The loader's global order over `sources`, with the lanes and windows `kept` from a
    /// state where the options leave them to the loader.
    fn global(
        sources: &[Source],
        dataset: Dataset,
        offsets: &[usize],
        options: &LoaderOptions,
        kept: &Kept,
    ) -> Result<Self> {
        let (world, seed) = (options.world_size.max(1), options.seed);
        if options.rank >= world {
            return Err(loader_sampler::SamplerError::RankOutOfRange {
                rank: options.rank,
                world_size: world,
            }
            .into());
        }
        let weights =
            Interleave::from_weights(&sources.iter().map(|s| s.weight).collect::<Vec<_>>())?
                .weights()
                .to_vec();
        let total_weight: u64 = weights.iter().sum();
        let mut orders = Vec::with_capacity(sources.len());
        let mut plan_sources = Vec::with_capacity(sources.len());
        let mut stamps = Vec::with_capacity(sources.len());
        let mut horizon = CHUNK_HORIZON;
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for (s, source) in sources.iter().enumerate() {
            let data = &source.dataset;
            let hash = dataset_hash(data);
            // The same dataset twice is two sources with permutations of their own.
            let repeat = seen.entry(hash).or_default();
            let identity = hash ^ repeat.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            *repeat += 1;
            let lanes = kept
                .lanes
                .or(options.lanes)
                .unwrap_or_else(|| auto_lanes(world));
            let window = kept
                .windows
                .get(s)
                .copied()
                .flatten()
                .or(options.shuffle_buffer);
            let arranged = arrange(data, options, lanes, window, world);
            stamps.push(SourceStamp {
                samples: data.len() as u64,
                hash,
                weight: weights[s],
                arrangement: arranged.stamp,
            });
            // Reads a rank makes while one chunk of this source is open: its lane's window
            // and the chunk, among the other lanes and sources, over the ranks.
            if arranged.chunked && weights[s] > 0 {
                let (window, lanes) = match &arranged.kind {
                    SourceKind::ShardLocal { window, lanes, .. } => (*window, *lanes as usize),
                    _ => (0, 1),
                };
                let span = (window + max_chunk_samples(data)).saturating_mul(lanes);
                let positions = span as u128 * u128::from(total_weight) / u128::from(weights[s]);
                let reads = usize::try_from(positions / world as u128).unwrap_or(usize::MAX);
                horizon = horizon.max(reads.saturating_mul(2)).min(MAX_HORIZON);
            }
            plan_sources.push(PlanSource {
                offset: offsets[s] + arranged.offset,
                chunked: arranged.chunked,
                shared: shares_spans(data),
            });
            orders.push(SourceOrder::new(
                arranged.len as u64,
                arranged.kind,
                identity,
            )?);
        }
        let lanes = kept
            .lanes
            .or(options.lanes)
            .unwrap_or_else(|| auto_lanes(world)) as usize;
        if world > 1 && !lanes.is_multiple_of(world) && plan_sources.iter().any(|s| s.chunked) {
            // Not an error: every sample is still read once; it costs requests.
            tracing::warn!(
                "world size {world} does not divide the shard order's {lanes} lanes: ranks \
                 share chunks, so shards are read with 2-10x the GETs (BENCHMARKS.md); the \
                 lanes were fixed when the run started; give a run lanes that every world \
                 size it will have divides (e.g. 48 for 3, 6, 12, 24 and 48 ranks) at its \
                 start"
            );
        }
        let stripe = Stripe {
            rank: options.rank,
            world,
            batch_size: options.batch_size,
        };
        let batching = options.mixture.batching;
        let order = GlobalOrder::new(orders, weights, options.mixture.stop, seed)?
            .with_segment(Segment::first(sources.len(), unit(batching, &stripe)))?;
        let stamp = OrderStamp {
            version: ORDER_VERSION,
            seed,
            shuffle: options.shuffle,
            mixture: Some(MixtureStamp {
                sources: stamps,
                stop: options.mixture.stop,
                batching,
                segment: order.segment().clone(),
                cursors: Vec::new(),
                stream: 0,
            }),
            custom: None,
        };
        Ok(Self {
            dataset,
            inputs: sources.into(),
            options: Arc::new(options.clone()),
            sources: plan_sources.into(),
            offsets: offsets.into(),
            order: ReadOrder::Global {
                order,
                stripe,
                batching,
                built: Arc::default(),
            },
            batch_size: options.batch_size,
            drop_last: options.drop_last,
            epochs: options.epochs,
            cache: None,
            node: options.rank..options.rank + 1,
            stamp,
            new_segment: options.mixture.new_segment,
            horizon,
        })
    }

    fn check_has_a_batch(&self) -> Result<()> {
        if self.len() == 0 {
            return Err(ConfigError::NoBatch {
                samples: self
                    .epoch_positions(self.fresh_epoch())
                    .ok()
                    .flatten()
                    .map_or(usize::MAX, |n| n as usize),
                batch_size: self.global_batch(),
                drop_last: self.drop_last,
            }
            .into());
        }
        Ok(())
    }

    /// Samples of a global batch: every rank's batch.
    fn global_batch(&self) -> usize {
        match &self.order {
            ReadOrder::Global { stripe, .. } => stripe.global_batch(),
            ReadOrder::Custom(_) => self.batch_size,
        }
    }

    /// An epoch of the current mixture read from its start (the one after the segment's).
    fn fresh_epoch(&self) -> u64 {
        match &self.order {
            ReadOrder::Global { order, .. } => order.segment().epoch.saturating_add(1),
            ReadOrder::Custom(_) => 0,
        }
    }

    /// The global order of `epoch` (`None` under a caller's sampler), built once while it
    /// is read.
    fn epoch_order(&self, epoch: u64) -> Result<Option<EpochOrder>> {
        let ReadOrder::Global { order, built, .. } = &self.order else {
            return Ok(None);
        };
        let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = built.iter().find(|e| e.epoch() == epoch) {
            return Ok(Some(e.clone()));
        }
        let e = order.epoch(epoch)?;
        if built.len() >= EPOCHS_KEPT {
            built.remove(0);
        }
        built.push(e.clone());
        Ok(Some(e))
    }

    /// That `epoch` has an order this loader can read (a run set to an epoch whose
    /// positions overflow does not).
    pub(crate) fn check_epoch(&self, epoch: u64) -> Result<()> {
        self.epoch_order(epoch).map(drop)
    }

    /// Positions of `epoch`'s order (`None`: endless); for a caller's sampler, its samples.
    pub(crate) fn epoch_positions(&self, epoch: u64) -> Result<Option<u64>> {
        match &self.order {
            ReadOrder::Global { .. } => Ok(self.epoch_order(epoch)?.and_then(|e| e.len())),
            ReadOrder::Custom(sampler) => Ok(Some(sampler.len() as u64)),
        }
    }

    /// Batches per epoch of this rank (`usize::MAX` for an endless one): every rank has as
    /// many, the last global batch being shared out evenly (or dropped under `drop_last`).
    pub(crate) fn len(&self) -> usize {
        match &self.order {
            ReadOrder::Custom(sampler) => {
                BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last).len()
            }
            ReadOrder::Global { .. } => match self.epoch_positions(self.fresh_epoch()) {
                Ok(None) => usize::MAX,
                Err(_) => 0,
                Ok(Some(n)) => {
                    let g = self.global_batch() as u64;
                    let batches = if self.drop_last { n / g } else { n.div_ceil(g) };
                    usize::try_from(batches).unwrap_or(usize::MAX)
                }
            },
        }
    }

    /// Samples this rank reads in an epoch (`usize::MAX`: endless): whole batches, and its
    /// share of the last, short one rounded up.
    pub(crate) fn rank_samples(&self, epoch: u64) -> usize {
        let Ok(Some(n)) = self.epoch_positions(epoch) else {
            return usize::MAX;
        };
        let (g, b) = (self.global_batch() as u64, self.batch_size as u64);
        let world = g / b.max(1);
        let samples = if self.drop_last {
            n / g * b
        } else {
            n / g * b + (n % g).div_ceil(world.max(1))
        };
        usize::try_from(samples).unwrap_or(usize::MAX)
    }

    /// Whether the epoch of `state` has no batch left from its position.
    pub(crate) fn nothing_left(&self, state: SamplerState) -> bool {
        match &self.order {
            ReadOrder::Custom(sampler) => {
                BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last)
                    .resume(state)
                    .next()
                    .is_none()
            }
            ReadOrder::Global { .. } => match self.epoch_positions(state.epoch) {
                Ok(None) | Err(_) => false,
                Ok(Some(n)) => {
                    let left = n.saturating_sub(state.position);
                    left == 0 || (self.drop_last && left < self.global_batch() as u64)
                }
            },
        }
    }

    /// The stamp of the order at `state`: what a checkpoint carries.
    pub(crate) fn stamp(&self, state: SamplerState) -> OrderStamp {
        let mut stamp = self.stamp.clone();
        if let (ReadOrder::Global { order, .. }, Some(m)) = (&self.order, stamp.mixture.as_mut()) {
            m.segment = order.segment().clone();
            if let Ok(Some(e)) = self.epoch_order(state.epoch) {
                m.cursors = e.cursors(state.position);
                m.stream = e.stream_position(state.position);
            }
        }
        stamp
    }

    /// Take `state` on: check it against this order, and go on in its segment, or start a
    /// new one when it was saved under another mixture and that is allowed. Nothing changes
    /// when the state is refused.
    pub(crate) fn adopt(&mut self, state: &LoaderState) -> Result<()> {
        check_position(state, None)?;
        let mut next = self.clone();
        if let Some(saved) = &state.order {
            // Lanes and windows the options leave to the loader are the run's: as its state
            // says, whatever this world size would choose.
            let kept = self.kept(saved);
            if kept != Kept::default() {
                next = Self::global(
                    &self.inputs,
                    self.dataset.clone(),
                    &self.offsets,
                    &self.options,
                    &kept,
                )?;
                next.cache = self.cache.clone();
                next.node = self.node.clone();
            }
            let fit = next.stamp.fit(saved)?;
            if let (
                ReadOrder::Global {
                    order,
                    stripe,
                    batching,
                    built,
                },
                Some(fit),
            ) = (&mut next.order, fit)
            {
                let unit = unit(*batching, stripe);
                let current = next.stamp.clone();
                let segment = match fit {
                    // The same mixture, cut into other global batches under per-stream
                    // batching: the interleave counts in the new ones from here on.
                    Fit::Same(segment) if segment.unit == unit => segment,
                    Fit::Same(_) => next_segment(saved, state, &current, unit),
                    Fit::Changed { .. } if self.new_segment => {
                        next_segment(saved, state, &current, unit)
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
                *built = Arc::default();
            }
        }
        check_position(state, next.epoch_positions(state.epoch)?)?;
        *self = next;
        Ok(())
    }

    /// The lanes and windows of `saved` this loader takes on: those the options leave to the
    /// loader, of each source in both arranged in lanes over the same chunks (all of them,
    /// since a window left to the loader is chosen from the lanes); nothing when they are
    /// what this loader already reads by.
    fn kept(&self, saved: &OrderStamp) -> Kept {
        let (Some(old), Some(own)) = (&saved.mixture, &self.stamp.mixture) else {
            return Kept::default();
        };
        let mut kept = Kept {
            lanes: None,
            windows: vec![None; own.sources.len()],
        };
        let mut same = true;
        for (i, current) in own.sources.iter().enumerate() {
            let Some(found) = old.sources.iter().find(|o| o.same_source(current)) else {
                continue;
            };
            if let (
                Arrangement::ShardLocal {
                    lanes,
                    window,
                    chunks,
                },
                Arrangement::ShardLocal {
                    lanes: own_lanes,
                    window: own_window,
                    chunks: own_chunks,
                },
            ) = (&found.arrangement, &current.arrangement)
                && chunks == own_chunks
            {
                if self.options.lanes.is_none() {
                    kept.lanes = Some(*lanes);
                    same &= lanes == own_lanes;
                }
                if self.options.shuffle_buffer.is_none() {
                    kept.windows[i] = usize::try_from(*window).ok();
                    same &= window == own_window;
                }
            }
        }
        if same {
            return Kept::default();
        }
        kept
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

    /// This rank's batches of `epoch` from position `from`.
    fn cuts(&self, epoch: u64, from: u64) -> Box<dyn Iterator<Item = Cut> + Send> {
        match &self.order {
            ReadOrder::Custom(sampler) => {
                let state = SamplerState {
                    epoch,
                    position: from,
                };
                let mut batches =
                    BatchSampler::new(Arc::clone(sampler), self.batch_size, self.drop_last)
                        .resume(state)
                        .peekable();
                let mut position = from;
                let shared = self.sources.first().is_some_and(|s| s.shared);
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
                                chunkable: shared,
                                position: None,
                            })
                            .collect(),
                    })
                }))
            }
            ReadOrder::Global { stripe, .. } => {
                // An epoch without an order ends at once; `check_epoch` reports why before
                // a pass starts.
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
                                        chunkable: s.chunked && (!r.stray || s.shared),
                                        position: Some(r.position),
                                    }
                                })
                                .collect(),
                        }),
                )
            }
        }
    }

    /// The dataset indices this rank reads in `epoch` from its start (its segment's, in the
    /// segment's epoch), in order, padding included.
    pub(crate) fn planned(&self, epoch: u64) -> impl Iterator<Item = u64> + Send + use<> {
        let from = match &self.order {
            ReadOrder::Global { order, .. } if order.segment().epoch == epoch => {
                order.segment().start
            }
            _ => 0,
        };
        self.cuts(epoch, from)
            .flat_map(|cut| cut.reads.into_iter().map(|r| r.index as u64))
    }

    /// The engine's plans of `epoch` from `from`.
    fn chunked(&self, epoch: u64, from: u64) -> Chunked {
        Chunked::new(self.dataset.clone(), self.cuts(epoch, from), self.horizon)
    }

    /// Batches from `start` on, epoch after epoch (up to the last of `epochs`), for the
    /// engine to run ahead on; the cache is told the reads of the epochs ahead as they come
    /// (of an endless epoch, the reads ahead in it only).
    pub(crate) fn plans(
        &self,
        start: SamplerState,
    ) -> impl Iterator<Item = BatchPlan> + Send + use<> {
        let planner = self.clone();
        let end = self.epochs.unwrap_or(u64::MAX);
        let endless = matches!(self.epoch_positions(start.epoch), Ok(None));
        if let Some(cache) = &self.cache {
            cache.forget_plan();
            let ahead = if endless { 0 } else { CACHE_HORIZON as usize };
            for epoch in (start.epoch..end).take(1 + ahead) {
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
            planner.chunked(epoch, from)
        })
    }

    /// This rank's planner as rank `rank` of the same world would have it.
    fn as_rank(&self, rank: usize) -> Planner {
        let mut other = self.clone();
        if let ReadOrder::Global { stripe, .. } = &mut other.order {
            stripe.rank = rank;
        }
        other
    }

    /// Tell `cache` the reads of `epoch` from `from` of this rank and of the other ranks of
    /// its node (at most [`ANNOUNCE_CAP`] in all), as the engines make them: an item each,
    /// or a chunk once per run of its items; the node's ranks batch by batch, as they read
    /// in step.
    fn announce(&self, cache: &Cache, epoch: u64, from: u64) {
        let own = match &self.order {
            ReadOrder::Global { stripe, .. } => stripe.rank,
            ReadOrder::Custom(_) => 0,
        };
        let ranks: Vec<usize> = match &self.order {
            ReadOrder::Global { .. } if self.node.contains(&own) => self.node.clone().collect(),
            _ => vec![own],
        };
        let mut plans: Vec<_> = ranks
            .iter()
            .map(|&rank| (rank, self.as_rank(rank).chunked(epoch, from)))
            .collect();
        let mut reads: Vec<(Arc<str>, Option<Range<u64>>, bool)> = Vec::new();
        let mut open: HashMap<(usize, Arc<str>, u64, u64), ()> = HashMap::new();
        let mut looked = 0usize;
        while looked < ANNOUNCE_CAP && !plans.is_empty() {
            plans.retain_mut(|(rank, plans)| {
                let Some(plan) = plans.next() else {
                    return false;
                };
                let (rank, here) = (*rank, *rank == own);
                looked += plan.items.len();
                for item in plan.items {
                    match &item.chunk {
                        Some(chunk) => {
                            let id = (
                                rank,
                                Arc::clone(&item.key),
                                chunk.range.start,
                                chunk.range.end,
                            );
                            if open.insert(id.clone(), ()).is_none() {
                                reads.push((
                                    Arc::clone(&item.key),
                                    Some(chunk.range.clone()),
                                    here,
                                ));
                            }
                            if chunk.last_use {
                                open.remove(&id);
                            }
                        }
                        None => reads.push((Arc::clone(&item.key), item.range.clone(), here)),
                    }
                }
                true
            });
        }
        cache.announce_node(
            reads
                .iter()
                .map(|(key, range, here)| (&**key, range.clone(), *here)),
        );
    }
}

/// How one source's samples are arranged: where they start in the source, how many, their
/// kind of order, whether this rank reads them by chunks, and the arrangement as a stamp
/// records it (a resume requires it the same).
struct Arranged {
    offset: usize,
    len: usize,
    kind: SourceKind,
    chunked: bool,
    stamp: Arrangement,
}

/// How `data` is arranged under `options`, in `lanes` with `window` samples shuffled together
/// (none: chosen for `world` ranks) when its shards are read shard-local.
fn arrange(
    data: &Dataset,
    options: &LoaderOptions,
    lanes: u32,
    window: Option<usize>,
    world: usize,
) -> Arranged {
    let sharded = !data.shards().is_empty();
    // Samples that share their stored span (Parquet rows) are read with their chunk (a page)
    // in any order: the engine then keeps the page for the reads of it ahead instead of
    // fetching it again.
    let encoded = shares_spans(data);
    let (kind, stamp) = if options.shuffle {
        (SourceKind::Shuffled, Arrangement::Shuffled)
    } else {
        (SourceKind::Sequential, Arrangement::InOrder)
    };
    if let Some(range) = &options.subset {
        return Arranged {
            offset: range.start,
            len: range.len(),
            kind,
            chunked: encoded,
            stamp: Arrangement::Subset {
                start: range.start as u64,
                end: range.end as u64,
                shuffled: options.shuffle,
            },
        };
    }
    if options.shuffle && sharded && options.shard_order == ShardOrder::Local {
        let shards: Vec<Vec<std::ops::Range<usize>>> =
            data.shards().iter().map(|s| s.chunks.clone()).collect();
        let chunks = shards.iter().map(Vec::len).sum::<usize>().max(1);
        let window = window
            .unwrap_or_else(|| (auto_window_chunks(world, lanes) * data.len()).div_ceil(chunks))
            .max(1);
        // The chunks are part of the order: shards indexed with another chunk size are read
        // in another order.
        let mut layout = xxhash_rust::xxh3::Xxh3::new();
        for c in shards.iter().flatten() {
            layout.update(&(c.start as u64).to_le_bytes());
            layout.update(&(c.end as u64).to_le_bytes());
        }
        return Arranged {
            offset: 0,
            len: data.len(),
            kind: SourceKind::ShardLocal {
                shards: shards.into(),
                lanes,
                window,
            },
            chunked: true,
            stamp: Arrangement::ShardLocal {
                lanes,
                window: window as u64,
                chunks: format!("{chunks}/{:016x}", layout.digest()),
            },
        };
    }
    Arranged {
        offset: 0,
        len: data.len(),
        kind,
        chunked: (!options.shuffle && sharded) || encoded,
        stamp,
    }
}

/// Whether `data`'s samples share their stored spans with others (Parquet pages,
/// compressed shards), so each is best read with its chunk.
fn shares_spans(data: &Dataset) -> bool {
    // A shard's samples are stored alike: its first sample in its own object says, past
    // any read as objects of their own (a Parquet row whose image is a path).
    data.shards().iter().any(|shard| {
        shard
            .chunks
            .iter()
            .filter_map(|c| data.get(c.start))
            .find(|item| item.key == shard.key)
            .and_then(|item| item.record.as_ref())
            .is_some_and(|r| r.shared)
    })
}

/// The most samples a chunk of `data` holds.
fn max_chunk_samples(data: &Dataset) -> usize {
    data.shards()
        .iter()
        .flat_map(|s| s.chunks.iter().map(|c| c.len()))
        .max()
        .unwrap_or(1)
}
