//! A planner made: the global order of a run's sources (lanes, windows, the arrangement
//! of shard-local sources), or a caller's own sampler, checked against the options.

use super::resume::Kept;
#[allow(clippy::wildcard_imports)]
use super::*;

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
    pub(super) fn custom(
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
    pub(super) fn global(
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
        let weights = Interleave::from_weights(&weights(sources, options.mixture.weigh_by)?)?
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
                 share chunks, so shards are read with 2-10x the GETs (docs/benchmarks.md); the \
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
}

/// How one source's samples are arranged: where they start in the source, how many, their
/// kind of order, whether this rank reads them by chunks, and the arrangement as a stamp
/// records it (a resume requires it the same).
pub(super) struct Arranged {
    offset: usize,
    len: usize,
    kind: SourceKind,
    chunked: bool,
    stamp: Arrangement,
}

/// Lanes of a shard-local order a run starts with when none are given: a multiple of 16 and
/// of its world size, so each of its ranks (and those of world sizes dividing it) reads
/// lanes of its own.
pub(super) fn auto_lanes(world: usize) -> u32 {
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
pub(super) fn auto_window_chunks(world: usize, lanes: u32) -> usize {
    let lanes_per_rank = (lanes as usize / world.max(1)).max(1);
    DEFAULT_WINDOW_CHUNKS.max(8usize.div_ceil(lanes_per_rank))
}

/// How `data` is arranged under `options`, in `lanes` with `window` samples shuffled together
/// (none: chosen for `world` ranks) when its shards are read shard-local.
pub(super) fn arrange(
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
pub(super) fn shares_spans(data: &Dataset) -> bool {
    // A shard's samples are stored alike: its first sample in its own object says, past
    // any read as objects of their own (a Parquet row whose image is a path).
    data.shards().iter().any(|shard| {
        shard
            .chunks
            .iter()
            .filter_map(|c| data.get(c.start))
            .find(|item| item.key == shard.key)
            .and_then(|item| item.record)
            .is_some_and(|r| r.shared)
    })
}

/// The most samples a chunk of `data` holds.
pub(super) fn max_chunk_samples(data: &Dataset) -> usize {
    data.shards()
        .iter()
        .flat_map(|s| s.chunks.iter().map(|c| c.len()))
        .max()
        .unwrap_or(1)
}

/// The sources' weights as `weigh_by` reads them: as given, or (documents) each divided by
/// the blocks a document of its source makes on average.
fn weights(sources: &[Source], weigh_by: WeighBy) -> Result<Vec<f64>> {
    sources
        .iter()
        .enumerate()
        .map(|(index, s)| match weigh_by {
            WeighBy::Samples => Ok(s.weight),
            WeighBy::Documents => {
                let files = s
                    .dataset
                    .tokens()
                    .ok_or_else(|| ConfigError::MixtureTokens {
                        index,
                        problem: "holds no token documents to weigh (mixture.weigh_by=documents)"
                            .into(),
                    })?;
                let documents: u64 = files.files().iter().map(|(_, f)| f.document_count()).sum();
                Ok(s.weight * s.dataset.len() as f64 / documents.max(1) as f64)
            }
        })
        .collect()
}
