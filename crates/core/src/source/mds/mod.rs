//! MosaicML Streaming's MDS shards as a dataset, read where they lie: `index.json` lists the
//! shards and their columns; each raw shard's offset table (its first bytes) is read once,
//! then a sample is a ranged GET of its own bytes, its image and label cut out of it.
//! zstd-compressed shards are whole-shard fetch units, decompressed once for all their
//! samples. Labels are stored inside the samples, so they are read with them.

mod layout;

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use loader_scheduler::RecordOf;
use loader_storage::layer::{RetryConfig, RetryStore};
use loader_storage::{DynStorage, ObjectMeta, Storage};

use super::blocking::block_on_own_thread;
use super::columns::ColumnNames;
use super::error::{Result, SourceError};
use super::index::{Dataset, Item, ShardLayout};
use layout::{Compression, Shard, ShardSamples};

/// The file that describes an MDS dataset.
pub const INDEX: &str = "index.json";

/// Whether a key or URL names an MDS (or LitData) index (`.../index.json`).
pub fn is_mds_index(name: &str) -> bool {
    name == INDEX || name.ends_with("/index.json")
}

/// How MDS shards become a [`Dataset`]: which columns hold the images and labels.
#[derive(Debug, Clone)]
pub struct Mds {
    columns: ColumnNames,
    chunk_bytes: u64,
}

impl Default for Mds {
    fn default() -> Self {
        Self::new()
    }
}

impl Mds {
    /// Images from the first column named `image`, `img`, `jpg`, `jpeg`, `png` or `webp`,
    /// labels from `label` or `cls` when present; raw shards read in chunks of 4 MiB in
    /// shard-local order.
    pub fn new() -> Self {
        Self {
            columns: ColumnNames::default(),
            chunk_bytes: super::webdataset::DEFAULT_CHUNK_BYTES,
        }
    }

    /// The column holding the images (encoded `jpeg`, `png` or `bytes`).
    pub fn image_column(mut self, name: impl Into<String>) -> Self {
        self.columns.image = Some(name.into());
        self
    }

    /// Whether an image or label column was named.
    pub(crate) fn names_columns(&self) -> bool {
        self.columns.named()
    }

    /// The column holding the labels (an integer encoding); `""` for none.
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.columns.label = Some(name.into());
        self
    }

    /// The dataset `index` (a key of `store`, `index.json` or `split/index.json`) describes.
    pub async fn load(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        let retried = RetryStore::new(&**store, RetryConfig::default());
        let name = store.name().to_owned();
        let problem = |file: &str, problem: String| SourceError::Mds {
            file: file.to_owned(),
            store: name.clone(),
            problem,
        };
        let text = retried.get(index).await?;
        let shards = layout::parse_index(&text).map_err(|p| problem(index, p))?;
        let dir = index.rsplit_once('/').map_or("", |(d, _)| d);
        let columns = shards
            .first()
            .map(|s| {
                layout::choose(
                    s,
                    self.columns.image.as_deref(),
                    self.columns.label.as_deref(),
                )
            })
            .transpose()
            .map_err(|p| problem(index, p))?
            .ok_or_else(|| problem(index, "it lists no shard".into()))?;
        if let Some(other) = shards.iter().find(|s| !columns.fits(s)) {
            return Err(problem(
                index,
                format!(
                    "shard {:?} has other columns than the first: {:?}",
                    other.file(),
                    other.column_names
                ),
            ));
        }
        let columns = Arc::new(columns);
        let retried = &retried;
        let read: Vec<(String, ShardSamples)> = futures::stream::iter(shards)
            .map(|shard| {
                let key = if dir.is_empty() {
                    shard.file().to_owned()
                } else {
                    format!("{dir}/{}", shard.file())
                };
                let problem = &problem;
                async move {
                    let samples =
                        layout::samples(retried, &key, &shard)
                            .await
                            .map_err(|e| match e {
                                layout::ShardError::Storage(e) => SourceError::Storage(e),
                                layout::ShardError::Invalid(p) => problem(&key, p),
                            })?;
                    Ok::<_, SourceError>((key, samples))
                }
            })
            .buffered(8)
            .try_collect()
            .await?;
        let mut items = Vec::new();
        let mut layouts = Vec::with_capacity(read.len());
        let mut objects = Vec::with_capacity(read.len());
        for (key, samples) in read {
            let key: Arc<str> = key.into();
            objects.push(ObjectMeta {
                key: key.to_string(),
                size: samples.size,
                version: None,
            });
            let records: Arc<dyn loader_scheduler::Records> = Arc::new(Shard {
                columns: Arc::clone(&columns),
                compression: samples.compression,
                raw_bytes: samples.raw_bytes,
            });
            let first = items.len();
            for (i, range) in samples.ranges.iter().enumerate() {
                let slot = match samples.compression {
                    Compression::None => 0,
                    Compression::Zstd => i,
                };
                items.push(Item {
                    key: Arc::clone(&key),
                    range: Some(range.clone()),
                    label: loader_scheduler::Label::None,
                    name: Some(format!("sample {i}").into()),
                    members: Arc::default(),
                    record: Some(RecordOf {
                        records: Arc::clone(&records),
                        slot: u32::try_from(slot).map_err(|_| {
                            SourceError::Invalid("a shard of more than 2^32 samples".into())
                        })?,
                        // A raw sample's span is its own; a compressed shard's is every
                        // sample's.
                        shared: samples.compression == Compression::Zstd,
                    }),
                });
            }
            let chunks = match samples.compression {
                // The whole shard is one chunk: one fetch, one decompression.
                Compression::Zstd => std::iter::once(first..items.len()).collect(),
                Compression::None => chunk(&samples.ranges, first, self.chunk_bytes),
            };
            layouts.push(ShardLayout { key, chunks });
        }
        let dataset = Dataset::from_shards(items, Vec::new(), layouts)?.with_objects(objects);
        Ok(if columns.label.is_none() {
            dataset.without_labels()
        } else {
            dataset
        })
    }

    /// [`Mds::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, index))
    }
}

/// Neighbouring samples grouped into chunks of about `bytes`, as dataset index ranges
/// from `first`.
fn chunk(ranges: &[std::ops::Range<u64>], first: usize, bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < ranges.len() {
        let mut end = start + 1;
        while end < ranges.len() && ranges[end].end - ranges[start].start <= bytes {
            end += 1;
        }
        chunks.push(first + start..first + end);
        start = end;
    }
    chunks
}
