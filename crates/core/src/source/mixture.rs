//! Several datasets read as one: each with its store and weight, their samples one index
//! whose keys name the store they are in.

use std::sync::Arc;

use loader_scheduler::Label;
use loader_storage::{DynStorage, MountStore};

use super::index::{Dataset, Item, ShardLayout};
use crate::error::ConfigError;
use crate::tokens::TokenFiles;

/// One dataset of a mixture: where it is stored, its samples, and its weight (the share of
/// the mixture's reads it gets, relative to the others').
#[derive(Debug, Clone)]
pub struct Source {
    /// The store its samples are read from (with its own URL, credentials and format).
    pub store: DynStorage,
    /// Its samples.
    pub dataset: Dataset,
    /// Its weight; 1 unless set.
    pub weight: f64,
}

impl Source {
    /// `dataset` on `store`, weight 1.
    pub fn new(store: DynStorage, dataset: Dataset) -> Self {
        Self {
            store,
            dataset,
            weight: 1.0,
        }
    }

    /// The same source with weight `weight`.
    pub fn weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }
}

/// The kind of labels a dataset's samples carry, for checking that sources agree.
fn label_kind(dataset: &Dataset) -> Option<String> {
    dataset.get(0).map(|item| match &item.label {
        Label::None => "no label".into(),
        Label::Class(_) => "class labels".into(),
        Label::Classes(set) => format!("multi-label sets of {} classes", set.of),
        Label::Value(_) => "single numbers".into(),
        Label::Values(v) => format!("lists of {} numbers", v.len()),
    })
}

/// The sources' samples as one dataset read through one store: sample `i` of source `s` is
/// index `offsets[s] + i`, its key `MOUNT/key` on the [`MountStore`], where `MOUNT` is the
/// source's fingerprint (its name, for batches and errors, stays its own key). One source is
/// returned as it is.
pub(crate) fn combine(sources: &[Source]) -> crate::Result<(DynStorage, Dataset, Vec<usize>)> {
    if let [one] = sources {
        return Ok((Arc::clone(&one.store), one.dataset.clone(), vec![0]));
    }
    if let Some(index) = sources.iter().position(|s| s.dataset.is_empty()) {
        return Err(ConfigError::EmptySource { index }.into());
    }
    // Stores are mounted at their dataset's fingerprint, not their place in the list, so a
    // cache directory's entries stay with their dataset when the list is reordered.
    let mut mounts: Vec<String> = Vec::with_capacity(sources.len());
    for s in sources {
        let name = format!("{:016x}", crate::state::dataset_hash(&s.dataset));
        let again = mounts.iter().filter(|m| m.starts_with(&name)).count();
        mounts.push(if again == 0 {
            name
        } else {
            format!("{name}-{again}")
        });
    }
    if sources[0].dataset.tokens().is_some() {
        return combine_tokens(sources, mounts);
    }
    let first = &sources[0].dataset;
    for (index, s) in sources.iter().enumerate().skip(1) {
        if s.dataset.tokens().is_some() {
            return Err(ConfigError::MixtureTokens {
                index,
                problem: "holds token blocks, source 0 other samples".into(),
            }
            .into());
        }
        if s.dataset.classes() != first.classes() {
            return Err(ConfigError::MixtureClasses {
                index,
                first: abbreviate(first.classes()),
                other: abbreviate(s.dataset.classes()),
            }
            .into());
        }
        let (a, b) = (label_kind(first), label_kind(&s.dataset));
        if a != b {
            return Err(ConfigError::MixtureLabels {
                index,
                first: a.unwrap_or_default(),
                other: b.unwrap_or_default(),
            }
            .into());
        }
    }
    let mut items: Vec<Item> = Vec::new();
    let mut shards: Vec<ShardLayout> = Vec::new();
    let mut objects = Vec::new();
    let mut offsets = Vec::with_capacity(sources.len());
    let mut stores = Vec::with_capacity(sources.len());
    for (source, mount) in sources.iter().zip(mounts) {
        let offset = items.len();
        offsets.push(offset);
        stores.push((mount.clone(), Arc::clone(&source.store)));
        let mounted = |key: &str| -> Arc<str> { MountStore::key(&mount, key).into() };
        items.extend(source.dataset.iter().map(|item| Item {
            key: mounted(&item.key),
            name: Some(item.name.clone().unwrap_or_else(|| Arc::clone(&item.key))),
            ..item
        }));
        shards.extend(source.dataset.shards().iter().map(|shard| {
            ShardLayout {
                key: mounted(&shard.key),
                chunks: shard
                    .chunks
                    .iter()
                    .map(|c| c.start + offset..c.end + offset)
                    .collect(),
            }
        }));
        objects.extend(source.dataset.objects().iter().map(|o| {
            let mut o = o.clone();
            o.key = MountStore::key(&mount, &o.key);
            o
        }));
    }
    let labelled = sources.iter().all(|s| s.dataset.has_labels());
    let mut dataset =
        Dataset::from_shards(items, first.classes().to_vec(), shards)?.with_objects(objects);
    if !labelled {
        dataset = dataset.without_labels();
    }
    let store: DynStorage = Arc::new(MountStore::new(stores)?);
    Ok((store, dataset, offsets))
}

/// Token sources as one stream of blocks, each source's files after the last's.
fn combine_tokens(
    sources: &[Source],
    mounts: Vec<String>,
) -> crate::Result<(DynStorage, Dataset, Vec<usize>)> {
    let unlike = |index, problem: String| ConfigError::MixtureTokens { index, problem };
    let mut parts: Vec<TokenFiles> = Vec::with_capacity(sources.len());
    let mut objects = Vec::new();
    let mut offsets = Vec::with_capacity(sources.len());
    let mut stores = Vec::with_capacity(sources.len());
    let mut offset = 0usize;
    for (index, (source, mount)) in sources.iter().zip(mounts).enumerate() {
        let Some(files) = source.dataset.tokens() else {
            return Err(unlike(index, "holds samples, source 0 token blocks".into()).into());
        };
        if let Some(first) = parts.first() {
            let problem = if files.dtype() != first.dtype() {
                format!(
                    "stores ids as {}, source 0 as {}",
                    files.dtype().name(),
                    first.dtype().name()
                )
            } else if files.blocking().row_len() != first.blocking().row_len() {
                format!(
                    "is cut in blocks of {} tokens, source 0 in blocks of {}",
                    files.blocking().row_len(),
                    first.blocking().row_len()
                )
            } else if files.files()[0].1.vocab != first.files()[0].1.vocab {
                "declares another vocabulary size than source 0".into()
            } else {
                String::new()
            };
            if !problem.is_empty() {
                return Err(unlike(index, problem).into());
            }
        }
        offsets.push(offset);
        offset += source.dataset.len();
        parts.push(files.rekeyed(|key| MountStore::key(&mount, key).into()));
        objects.extend(source.dataset.objects().iter().map(|o| {
            let mut o = o.clone();
            o.key = MountStore::key(&mount, &o.key);
            o
        }));
        stores.push((mount, Arc::clone(&source.store)));
    }
    let parts: Vec<&TokenFiles> = parts.iter().collect();
    let files = TokenFiles::concat(&parts)
        .map_err(|e| unlike(sources.len() - 1, format!("cannot be added: {e}")))?;
    let dataset = Dataset::from_tokens(files)?.with_objects(objects);
    let store: DynStorage = Arc::new(MountStore::new(stores)?);
    Ok((store, dataset, offsets))
}

fn abbreviate(classes: &[String]) -> String {
    match classes.len() {
        0 => "no class names".into(),
        n if n <= 4 => classes.join(", "),
        n => format!("{}, ... ({n} classes)", classes[..3].join(", ")),
    }
}
