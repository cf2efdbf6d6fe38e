//! Read planning: which samples each batch reads, in what order, and what the engine and
//! the cache are told about them (a chunk's last use, the epochs ahead).

use std::sync::Arc;

use loader_sampler::{
    BatchSampler, DistributedSampler, RandomSampler, Sampler, SamplerState, SequentialSampler,
    ShardSampler, SubsetSampler,
};
use loader_scheduler::{BatchPlan, Chunk, WorkItem};
use loader_storage::layer::Cache;

use crate::error::ConfigError;
use crate::options::{LoaderOptions, ShardOrder};
use crate::state::{OrderStamp, SamplerKind};
use crate::{Dataset, Item, Result};

/// Epochs ahead of the one being read whose reads the cache is told. Two reach the offline
/// optimum in the hit-rate replay (`examples/cache_hit_rate.rs`) where one falls short
/// under sampling with replacement (a sample skipped by the next epoch looks unneeded).
const CACHE_HORIZON: u64 = 2;

/// Positions further apart than this in the order do not share a fetched chunk: the engine
/// lets it go after the first and fetches it again for the second, rather than holding it
/// (e.g. a padded rank's first chunk, read again at the end of its epoch).
const CHUNK_HORIZON: u64 = 8192;

/// The batch sampler of a loader and what it tells the engine and the cache.
#[derive(Clone)]
pub(crate) struct Planner {
    pub(crate) dataset: Dataset,
    pub(crate) sampler: Arc<dyn Sampler>,
    batch_size: usize,
    drop_last: bool,
    /// Whether items are read by their dataset chunks (a shard-local or sequential order).
    chunked: bool,
    /// Epochs to read at most: the engine does not run ahead past the last.
    epochs: Option<u64>,
    /// The cache between the engine and the store, told the upcoming reads.
    pub(crate) cache: Option<Cache>,
}

impl Planner {
    /// The sampler the options ask for (or `custom`), and what its positions mean.
    pub(crate) fn new(
        dataset: Dataset,
        options: &LoaderOptions,
        custom: Option<Arc<dyn Sampler>>,
    ) -> Result<(Self, OrderStamp)> {
        let sharded = !dataset.shards().is_empty();
        let (world, seed) = (options.world_size, options.seed);
        if let Some(range) = &options.subset {
            if custom.is_some() || world > 1 {
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
        let is_custom = custom.is_some();
        let (sampler, chunked, kind) = choose_sampler(&dataset, options, custom)?;
        let stamp = OrderStamp {
            samples: dataset.len() as u64,
            dataset: crate::state::dataset_hash(&dataset),
            epoch_samples: sampler.len() as u64,
            world_size: if is_custom { 1 } else { world as u64 },
            sampler: kind,
            shuffle: options.shuffle,
            seed,
        };
        let planner = Self {
            dataset,
            sampler,
            batch_size: options.batch_size,
            drop_last: options.drop_last,
            chunked: chunked && sharded,
            epochs: options.epochs,
            cache: None,
        };
        if planner.len() == 0 {
            return Err(ConfigError::NoBatch {
                samples: planner.sampler.len(),
                batch_size: planner.batch_size,
                drop_last: planner.drop_last,
            }
            .into());
        }
        Ok((planner, stamp))
    }

    fn batches(&self) -> BatchSampler<Arc<dyn Sampler>> {
        BatchSampler::new(Arc::clone(&self.sampler), self.batch_size, self.drop_last)
    }

    /// Batches per epoch.
    pub(crate) fn len(&self) -> usize {
        self.batches().len()
    }

    /// Whether the epoch of `state` has no batch left from its position: a resume into
    /// the tail that `drop_last` drops (e.g. a checkpoint taken with another batch size).
    pub(crate) fn nothing_left(&self, state: SamplerState) -> bool {
        self.batches().resume(state).next().is_none()
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
                    start
                } else {
                    SamplerState { epoch, position: 0 }
                };
                self.announce(cache, from);
            }
        }
        (start.epoch..end.max(start.epoch)).flat_map(move |epoch| {
            if let Some(cache) = &planner.cache
                && epoch > start.epoch
                && let Some(ahead) = epoch.checked_add(CACHE_HORIZON).filter(|&e| e < end)
            {
                planner.announce(
                    cache,
                    SamplerState {
                        epoch: ahead,
                        position: 0,
                    },
                );
            }
            let from = if epoch == start.epoch {
                start.position
            } else {
                0
            };
            planner.epoch_plans(SamplerState {
                epoch,
                position: from,
            })
        })
    }

    /// The batches of one epoch from `state`'s position. The last is the one after which
    /// the sampler has nothing left, whatever its `len()` says: a sampler that yields fewer
    /// indices than it claims must end its epoch, not run on into the next one.
    fn epoch_plans(&self, state: SamplerState) -> impl Iterator<Item = BatchPlan> + Send + use<> {
        let dataset = self.dataset.clone();
        let last_use = self.chunked.then(|| self.chunk_last_uses(state));
        let (epoch, from) = (state.epoch, state.position);
        let mut position = from;
        let mut cut = self.batches().resume(state).peekable();
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
                            last_use: last_use.get((at - from) as usize).copied().unwrap_or(true),
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
    }

    /// Tell `cache` the reads of the epoch of `state` from its position, as the engine makes
    /// them: an item each, or for a chunked order a chunk once per run of its items.
    fn announce(&self, cache: &Cache, state: SamplerState) {
        let dataset = &self.dataset;
        let last_use = self.chunked.then(|| self.chunk_last_uses(state));
        let mut open = vec![
            false;
            if self.chunked {
                dataset.chunk_count()
            } else {
                0
            }
        ];
        let mut reads: Vec<(Arc<str>, Option<std::ops::Range<u64>>)> =
            Vec::with_capacity(self.sampler.len());
        for (k, index) in self.sampler.resume(state).enumerate() {
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

    /// For each position of the epoch from `state` on: whether its item is the last (for a
    /// while, [`CHUNK_HORIZON`]) to read its chunk, so the engine knows when to drop it.
    fn chunk_last_uses(&self, state: SamplerState) -> Vec<bool> {
        let mut last_seen: Vec<u64> = vec![u64::MAX; self.dataset.chunk_count()];
        let mut flags = Vec::with_capacity(self.sampler.len());
        for (k, index) in self.sampler.resume(state).enumerate() {
            flags.push(true);
            let Some((chunk, _)) = self.dataset.chunk(index) else {
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
}

/// The sampler the options ask for (or `custom`): whether it reads by chunks, and what
/// kind of order it is, for checkpoints.
fn choose_sampler(
    dataset: &Dataset,
    options: &LoaderOptions,
    custom: Option<Arc<dyn Sampler>>,
) -> Result<(Arc<dyn Sampler>, bool, SamplerKind)> {
    let sharded = !dataset.shards().is_empty();
    let (rank, world, seed) = (options.rank, options.world_size, options.seed);
    Ok(match (custom, options.shuffle) {
        (Some(_), true) => {
            return Err(ConfigError::SamplerAndShuffle.into());
        }
        (Some(s), false) => (s, false, SamplerKind::Custom),
        // Not chunked: a chunk at either end of the range holds samples outside it.
        (None, shuffle) if options.subset.is_some() => {
            let range = options.subset.clone().unwrap_or_default();
            let kind = SamplerKind::Subset {
                start: range.start as u64,
                end: range.end as u64,
            };
            let indices: Vec<usize> = range.collect();
            let sampler = if shuffle {
                SubsetSampler::shuffled(indices, seed)
            } else {
                SubsetSampler::new(indices)
            };
            (Arc::new(sampler), false, kind)
        }
        (None, true) if sharded && options.shard_order == ShardOrder::Local => {
            let layout = dataset.shards().iter().map(|s| s.chunks.clone()).collect();
            let mut sampler = ShardSampler::new(layout, seed).rank(rank, world);
            if let Some(buffer) = options.shuffle_buffer {
                sampler = sampler.shuffle_buffer(buffer);
            }
            let kind = SamplerKind::ShardLocal {
                buffer: options.shuffle_buffer.map(|b| b as u64),
            };
            (Arc::new(sampler.build()?), true, kind)
        }
        (None, shuffle) if world > 1 => {
            let sampler = DistributedSampler::new(dataset.len(), rank, world)
                .shuffle(shuffle)
                .seed(seed)
                .build()?;
            (Arc::new(sampler), false, SamplerKind::Distributed)
        }
        (None, true) => (
            Arc::new(RandomSampler::new(dataset.len(), seed)?),
            false,
            SamplerKind::Plain,
        ),
        (None, false) => (
            Arc::new(SequentialSampler::new(dataset.len())),
            true,
            SamplerKind::Plain,
        ),
    })
}
