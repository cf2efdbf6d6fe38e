//! A loader's checkpoint: where it stands, and what its order was made of, so a resume
//! under another order is refused instead of silently reading other samples.

use serde::{Deserialize, Serialize};

use crate::Dataset;
use crate::error::StateError;
use loader_scheduler::Label;

/// Where a loader stands: the epoch, and how many of its items were delivered (skipped
/// items count as delivered: they were reported), with the stamp of the order they were
/// counted in. Serialisable into any checkpoint; [`DataLoader::resume`](crate::DataLoader::resume)
/// refuses a state whose stamp is not the loader's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LoaderState {
    /// The epoch being read.
    pub epoch: u64,
    /// How many samples of that epoch (this rank's) were delivered.
    pub position: u64,
    /// What the order was made of; `None` in a state written by hand, which is not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderStamp>,
}

impl LoaderState {
    /// A state at `position` of `epoch`, without a stamp (not checked on resume).
    pub fn at(epoch: u64, position: u64) -> Self {
        Self {
            epoch,
            position,
            order: None,
        }
    }
}

/// What a position means: the dataset, the sampler and the share of it this rank reads. Two
/// loaders with equal stamps deliver the same samples at the same positions (every rank of
/// one run has the same stamp, so any rank's checkpoint restores every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderStamp {
    /// Samples in the dataset.
    pub samples: u64,
    /// A hash of every sample's object, byte range and label, in order.
    pub dataset: u64,
    /// Samples an epoch of one rank reads.
    pub epoch_samples: u64,
    /// Ranks the epoch is split over.
    pub world_size: u64,
    /// Which sampler makes the order.
    pub sampler: SamplerKind,
    /// Whether the order is shuffled.
    pub shuffle: bool,
    /// The seed of the shuffle.
    pub seed: u64,
}

/// The samplers a loader builds, and a sampler given to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SamplerKind {
    /// Every sample in dataset order, or a random permutation per epoch.
    Plain,
    /// A share of each epoch per rank (PyTorch's `DistributedSampler`).
    Distributed,
    /// Shards in random order, samples shuffled within a buffer.
    ShardLocal {
        /// Samples shuffled together.
        buffer: Option<u64>,
    },
    /// A range of the dataset's indices.
    Subset {
        /// First index.
        start: u64,
        /// One past the last.
        end: u64,
    },
    /// A sampler the caller gave: only its length is known.
    Custom,
}

/// The highest epoch a state may name: past it, the next epoch's number would not exist.
const MAX_EPOCH: u64 = 1 << 62;

impl OrderStamp {
    /// Check that `saved` (a checkpoint's stamp) describes the same order as `self`.
    pub(crate) fn check(&self, saved: &OrderStamp) -> Result<(), StateError> {
        let differ = |what: &'static str, saved: String, current: String| {
            Err(StateError::OtherOrder {
                what,
                saved,
                current,
            })
        };
        if saved.samples != self.samples || saved.dataset != self.dataset {
            return differ(
                "dataset",
                format!("{} samples (hash {:016x})", saved.samples, saved.dataset),
                format!("{} samples (hash {:016x})", self.samples, self.dataset),
            );
        }
        if saved.world_size != self.world_size {
            return differ(
                "world size",
                saved.world_size.to_string(),
                self.world_size.to_string(),
            );
        }
        if saved.sampler != self.sampler {
            return differ(
                "sampler",
                format!("{:?}", saved.sampler),
                format!("{:?}", self.sampler),
            );
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
        if saved.epoch_samples != self.epoch_samples {
            return differ(
                "samples per epoch",
                saved.epoch_samples.to_string(),
                self.epoch_samples.to_string(),
            );
        }
        Ok(())
    }
}

/// Check `state` against a loader whose order is `stamp` and whose epochs hold
/// `epoch_samples` samples.
pub(crate) fn check(
    state: &LoaderState,
    stamp: &OrderStamp,
    epoch_samples: usize,
) -> Result<(), StateError> {
    if state.epoch > MAX_EPOCH {
        return Err(StateError::EpochOutOfRange { epoch: state.epoch });
    }
    // Another order first: it says why a position does not fit, where "beyond the epoch"
    // would not.
    if let Some(saved) = &state.order {
        stamp.check(saved)?;
    }
    if state.position > epoch_samples as u64 {
        return Err(StateError::BeyondEpoch {
            position: state.position,
            samples: epoch_samples,
        });
    }
    Ok(())
}

/// A label's part of the dataset hash: a class (or none, -1) as the eight bytes it always
/// was, so states saved before labels had other kinds still resume; the other kinds tagged.
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

/// The dataset's part of a stamp: a hash of each sample's object, range and label.
pub(crate) fn dataset_hash(dataset: &Dataset) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for item in dataset.items() {
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
