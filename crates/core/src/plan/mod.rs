//! Read planning (the read order; nothing else is named "plan"): the run's global order
//! (one order of every source's samples, the same on any world size) or a caller's sampler,
//! this rank's share of each global batch, and what the engine (`chunked`: which chunks to
//! read whole, and when each is done) and the cache (the epochs ahead) are told.
//!
//! Rooms: `build` (a planner made: the global order or a caller's sampler), `resume` (a
//! planner's part in a saved state), `announce` (what the cache is told), `chunked` (chunks
//! read whole); here, the planner's queries and the cuts of an epoch.

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
use crate::options::{LoaderOptions, MixtureOptions, ShardOrder, WeighBy};
use crate::source::Source;
use crate::state::{
    Arrangement, CustomStamp, Fit, LoaderState, MixtureStamp, ORDER_VERSION, OrderStamp,
    SourceStamp, check_position, dataset_hash, next_segment,
};
use crate::{Dataset, Result};

mod announce;
mod build;
mod chunked;
mod resume;

use chunked::{Chunked, Cut, CutRead};

/// Reads a rank looks ahead at, at least, to decide what to do with a chunk (read it whole
/// when it reads half of it, and let it go after its last read; one read again further on
/// is fetched again rather than held). Lanes of large chunks look further: a chunk's reads
/// span its lane's window.
/// Epochs ahead of the one being read whose reads the cache is told. Two reach the offline
/// optimum in the hit-rate replay (`examples/cache_hit_rate.rs`) where one falls short
/// under sampling with replacement (a sample skipped by the next epoch looks unneeded).
const CACHE_HORIZON: u64 = 2;

const CHUNK_HORIZON: usize = 8192;

/// Reads looked ahead at, at most.
const MAX_HORIZON: usize = 1 << 22;

/// Epoch orders kept built (the engine's epoch, the one ahead it announces, a checkpoint's).
const EPOCHS_KEPT: usize = 4;

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
}
