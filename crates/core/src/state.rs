//! A loader's checkpoint: where the run stands in its global order, and what that order was
//! made of, so a resume under another order is refused (or, when asked for, starts a new
//! segment of a mixture) instead of silently reading other samples.

use serde::{Deserialize, Serialize};

use crate::Dataset;
use crate::error::StateError;
use crate::tokens::Placement;
use loader_sampler::{Batching, Segment, StopRule};
use loader_scheduler::Label;

/// The version of [`OrderStamp`] this build writes: 2, the global order (one position for
/// every rank). States of version 1 counted each rank's own samples.
pub const ORDER_VERSION: u32 = 2;

/// Where a run stands: the epoch, and how many positions of that epoch's global order the
/// delivered steps consumed (skipped samples count: they were reported), with the stamp of
/// the order. Every rank of a run has the same state after the same step, so any rank's
/// checkpoint restores every rank, on any world size and batch size. Serialisable into any
/// checkpoint; [`DataLoader::resume`](crate::DataLoader::resume) checks the stamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LoaderState {
    /// The epoch being read.
    pub epoch: u64,
    /// Positions of that epoch's global order consumed (for a caller's sampler: this
    /// rank's samples delivered).
    pub position: u64,
    /// What the order was made of; `None` in a state written by hand, which is not checked
    /// (the loader's own order and segment go on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderStamp>,
}

impl LoaderState {
    /// A state at `position` of `epoch`, without a stamp: not checked on resume, it names a
    /// position of the resuming loader's own order. A shard order whose lanes are left to
    /// the loader chooses them by the world size a run starts on; only a stamped state carries
    /// them to another world size.
    pub fn at(epoch: u64, position: u64) -> Self {
        Self {
            epoch,
            position,
            order: None,
        }
    }
}

/// What a position means: the sources, how they are ordered and mixed, and where the
/// current mixture took over. Two loaders with equal stamps deliver the same samples at the
/// same positions, whatever their world and batch sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderStamp {
    /// [`ORDER_VERSION`] when written by this build; 0 or 1 for a state of a build that
    /// counted each rank's own samples, which is refused.
    #[serde(default)]
    pub version: u32,
    /// The seed of the shuffle.
    pub seed: u64,
    /// Whether the order is shuffled.
    pub shuffle: bool,
    /// The global order; `None` under a caller's sampler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture: Option<MixtureStamp>,
    /// A caller's sampler; `None` under the global order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomStamp>,
}

/// The global order a state was saved under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MixtureStamp {
    /// Each source, in the loader's order.
    pub sources: Vec<SourceStamp>,
    /// When an epoch ends.
    pub stop: StopRule,
    /// Mixed or per-source global batches.
    pub batching: Batching,
    /// Where the current weights and sources took over.
    pub segment: Segment,
    /// Each source's reads before the state's position: where a new segment continues it.
    pub cursors: Vec<u64>,
    /// The state's position in the sources' stream (the same as the epoch position unless
    /// reads carry across epochs).
    pub stream: u64,
}

/// One source of a global order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceStamp {
    /// Its samples.
    pub samples: u64,
    /// A hash of every sample's object, byte range and label, in order.
    pub hash: u64,
    /// Its whole-number weight in the mixture.
    pub weight: u64,
    /// How it orders its own samples: a source in a state and in the loader resuming it must
    /// be arranged alike.
    pub arrangement: Arrangement,
}

/// How a source orders its own samples, as a stamp records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "order")]
pub enum Arrangement {
    /// Shard-local: its shards' chunks dealt into lanes, each shuffled within a window.
    ShardLocal {
        /// Lanes of the order.
        lanes: u32,
        /// Samples shuffled together in a lane.
        window: u64,
        /// Its chunks: how many, and a hash of their sample ranges.
        chunks: String,
    },
    /// A new permutation every source-epoch.
    Shuffled,
    /// In index order.
    InOrder,
    /// A range of its indices, shuffled or in order.
    Subset {
        /// First index.
        start: u64,
        /// One past the last.
        end: u64,
        /// Whether shuffled.
        shuffled: bool,
    },
}

impl std::fmt::Display for Arrangement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrangement::ShardLocal {
                lanes,
                window,
                chunks,
            } => write!(
                f,
                "shard_local(lanes={lanes}, window={window}, chunks={chunks})"
            ),
            Arrangement::Shuffled => f.write_str("shuffled"),
            Arrangement::InOrder => f.write_str("in order"),
            Arrangement::Subset {
                start,
                end,
                shuffled,
            } => write!(
                f,
                "subset {start}..{end} {}",
                if *shuffled { "shuffled" } else { "in order" }
            ),
        }
    }
}

impl SourceStamp {
    /// The source's identity, whatever its weight.
    pub fn same_source(&self, other: &SourceStamp) -> bool {
        self.samples == other.samples && self.hash == other.hash
    }
}

/// What is known of a caller's sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CustomStamp {
    /// Samples in the dataset.
    pub samples: u64,
    /// A hash of every sample's object, byte range and label, in order.
    pub dataset: u64,
    /// Samples the sampler yields per epoch.
    pub epoch_samples: u64,
}

/// The highest epoch a state may name: past it, the next epoch's number would not exist.
const MAX_EPOCH: u64 = 1 << 62;

/// What a saved mixture stamp means against the loader's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The same order: go on in the saved segment.
    Same(Segment),
    /// Other weights, sources, stop rule or batching: a new segment at the saved position
    /// may continue it (when asked for).
    Changed {
        /// What changed, for the message.
        what: &'static str,
        saved: String,
        current: String,
    },
}

impl OrderStamp {
    /// Check that `saved` (a checkpoint's stamp) describes an order this loader (stamped
    /// `self`) can continue, and how.
    pub(crate) fn fit(&self, saved: &OrderStamp) -> Result<Option<Fit>, StateError> {
        let differ = |what: &'static str, saved: String, current: String| {
            Err(StateError::OtherOrder {
                what,
                saved,
                current,
            })
        };
        if saved.version != ORDER_VERSION {
            return Err(StateError::OldVersion {
                version: saved.version,
            });
        }
        if saved.shuffle != self.shuffle {
            return differ(
                "shuffle",
                saved.shuffle.to_string(),
                self.shuffle.to_string(),
            );
        }
        if saved.shuffle && saved.seed != self.seed {
            return differ("seed", saved.seed.to_string(), self.seed.to_string());
        }
        match (&saved.custom, &self.custom, &saved.mixture, &self.mixture) {
            (Some(s), Some(c), _, _) => {
                if s.samples != c.samples || s.dataset != c.dataset {
                    return differ(
                        "dataset",
                        format!("{} samples (hash {:016x})", s.samples, s.dataset),
                        format!("{} samples (hash {:016x})", c.samples, c.dataset),
                    );
                }
                if s.epoch_samples != c.epoch_samples {
                    return differ(
                        "samples per epoch of the sampler",
                        s.epoch_samples.to_string(),
                        c.epoch_samples.to_string(),
                    );
                }
                Ok(None)
            }
            (None, None, Some(s), Some(c)) => {
                // A source in both must order its samples alike: its cursor counts reads of
                // that order.
                for current in &c.sources {
                    if let Some(old) = s.sources.iter().find(|old| old.same_source(current))
                        && old.arrangement != current.arrangement
                    {
                        return differ(
                            "arrangement of a source's samples",
                            old.arrangement.to_string(),
                            current.arrangement.to_string(),
                        );
                    }
                }
                if s.stop.carries_across_epochs() != c.stop.carries_across_epochs() {
                    return differ("stop rule", stop_name(s.stop), stop_name(c.stop));
                }
                let same_sources = s.sources.len() == c.sources.len()
                    && s.sources
                        .iter()
                        .zip(&c.sources)
                        .all(|(a, b)| a.same_source(b));
                let changed = |what, saved: String, current: String| {
                    Ok(Some(Fit::Changed {
                        what,
                        saved,
                        current,
                    }))
                };
                if !same_sources {
                    // One source alone is a dataset, not a mixture: say it as one.
                    let what = if s.sources.len() == 1 && c.sources.len() == 1 {
                        "dataset"
                    } else {
                        "sources"
                    };
                    return changed(what, sources_text(&s.sources), sources_text(&c.sources));
                }
                if s.sources
                    .iter()
                    .zip(&c.sources)
                    .any(|(a, b)| a.weight != b.weight)
                {
                    return changed(
                        "weights",
                        weights_text(&s.sources),
                        weights_text(&c.sources),
                    );
                }
                if s.stop != c.stop {
                    return changed("stop rule", stop_name(s.stop), stop_name(c.stop));
                }
                if s.batching != c.batching {
                    use crate::options::OptionValue;
                    return changed("batching", s.batching.show(), c.batching.show());
                }
                Ok(Some(Fit::Same(s.segment.clone())))
            }
            _ => differ(
                "sampler",
                sampler_name(saved).into(),
                sampler_name(self).into(),
            ),
        }
    }
}

fn sampler_name(stamp: &OrderStamp) -> &'static str {
    if stamp.custom.is_some() {
        "a sampler given to the loader"
    } else {
        "the loader's global order"
    }
}

/// A stop rule as the options spell it.
fn stop_name(stop: StopRule) -> String {
    crate::options::OptionValue::show(&stop)
}

fn sources_text(sources: &[SourceStamp]) -> String {
    sources
        .iter()
        .map(|s| format!("{} samples (hash {:016x})", s.samples, s.hash))
        .collect::<Vec<_>>()
        .join(", ")
}

fn weights_text(sources: &[SourceStamp]) -> String {
    sources
        .iter()
        .map(|s| s.weight.to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Check `state`'s epoch and position against an epoch of `epoch_positions` positions
/// (`None`: endless).
pub(crate) fn check_position(
    state: &LoaderState,
    epoch_positions: Option<u64>,
) -> Result<(), StateError> {
    if state.epoch > MAX_EPOCH {
        return Err(StateError::EpochOutOfRange { epoch: state.epoch });
    }
    if let Some(samples) = epoch_positions
        && state.position > samples
    {
        return Err(StateError::BeyondEpoch {
            position: state.position,
            samples: samples as usize,
        });
    }
    Ok(())
}

/// A label's part of the dataset hash: a class (or none, -1) as eight bytes, the other
/// kinds tagged.
fn hash_label(hasher: &mut xxhash_rust::xxh3::Xxh3, label: &Label) {
    match label {
        Label::None => hasher.update(&(-1i64).to_le_bytes()),
        Label::Class(c) => hasher.update(&c.to_le_bytes()),
        Label::Classes(set) => {
            hasher.update(b"classes");
            hasher.update(&set.of.to_le_bytes());
            set.indices
                .iter()
                .for_each(|i| hasher.update(&i.to_le_bytes()));
        }
        Label::Value(v) => {
            hasher.update(b"value");
            hasher.update(&v.to_le_bytes());
        }
        Label::Values(v) => {
            hasher.update(b"values");
            hasher.update(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|x| hasher.update(&x.to_le_bytes()));
        }
    }
}

/// Hashes `words` in runs of 1,024: an update a value costs more than hashing its bytes.
fn hash_words(hasher: &mut xxhash_rust::xxh3::Xxh3, words: &[u64]) {
    let mut bytes = Vec::with_capacity(8 * 1024);
    for run in words.chunks(1024) {
        bytes.clear();
        run.iter()
            .for_each(|word| bytes.extend_from_slice(&word.to_le_bytes()));
        hasher.update(&bytes);
    }
}

/// A dataset's fingerprint: a hash of each sample's object, range and label; for token
/// files, of each file's key, ids, documents and cut.
pub(crate) fn dataset_hash(dataset: &Dataset) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    if let Some(tokens) = dataset.tokens() {
        hasher.update(b"tokens");
        for (key, file) in tokens.files() {
            hasher.update(key.as_bytes());
            hasher.update(&[0]);
            hasher.update(file.dtype.name().as_bytes());
            let placed = match &file.placement {
                Placement::From(offset) => *offset,
                Placement::Each(starts) => {
                    hash_words(&mut hasher, starts);
                    u64::MAX
                }
                Placement::Encoded(encoded) => {
                    hash_words(&mut hasher, &[encoded.span.start, encoded.span.end]);
                    u64::MAX - 1
                }
            };
            for n in [
                placed,
                file.blocking.row_len(),
                u64::from(file.blocking.keep_tail()),
                u64::from(file.blocking.is_disjoint()),
                file.vocab.unwrap_or(0),
                file.first_document,
                file.document_count(),
            ] {
                hasher.update(&n.to_le_bytes());
            }
            hash_words(&mut hasher, file.documents.ends());
        }
        return hasher.digest();
    }
    for item in dataset.records().unwrap_or_default() {
        hasher.update(item.key.as_bytes());
        hasher.update(&[0]);
        if let Some(name) = &item.name {
            hasher.update(name.as_bytes());
        }
        hasher.update(&[0]);
        if let Some(range) = &item.range {
            hasher.update(&range.start.to_le_bytes());
            hasher.update(&range.end.to_le_bytes());
        }
        hash_label(&mut hasher, &item.label);
    }
    hasher.digest()
}

/// The segment a run continues in when it resumes `state` (saved as `saved`) under the
/// order stamped `current`: from the state's position, each current source going on from
/// the reads of the saved source it is (the first not yet taken, if it appears twice), a
/// new one from 0.
pub(crate) fn next_segment(
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
