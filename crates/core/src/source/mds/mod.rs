//! MosaicML Streaming's MDS shards as a dataset, read where they lie: `index.json` lists the
//! shards and their columns; each raw shard's offset table (its first bytes) is read once,
//! then a sample is a ranged GET of its own bytes, its image and label cut out of it.
//! zstd-compressed shards are whole-shard fetch units, decompressed once for all their
//! samples. Labels are stored inside the samples, so they are read with them.

mod layout;
mod write;

use std::sync::Arc;

use async_trait::async_trait;
use loader_storage::{DynStorage, Storage};

use super::blocking::block_on_own_thread;
use super::columns::ColumnNames;
use super::error::{Result, SourceError};
use super::format::{Fit, Format, Probe};
use super::index::Dataset;
use super::litdata::is_litdata_index;
use super::record_files::{RecordFile, dataset_of, get_whole, index_fit, index_of, open_files};
use layout::{Compression, Shard};

/// The file that describes an MDS dataset, and whether a key or URL names one.
pub use super::extensions::{INDEX, is_index as is_mds_index};
pub use write::{MdsColumn, MdsWriter, SIZE_LIMIT};

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

    /// The column holding the labels (an integer encoding); `""` for none.
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.columns.label = Some(name.into());
        self
    }

    /// The dataset `index` (a key of `store`, `index.json` or `split/index.json`) describes.
    pub async fn load(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        let text = get_whole(store, index).await?;
        self.load_index(store, index, &text).await
    }

    /// The dataset of `index`, whose bytes are `text`: for a caller that read it already
    /// to learn which format it is.
    pub(crate) async fn load_index(
        &self,
        store: &DynStorage,
        index: &str,
        text: &[u8],
    ) -> Result<Dataset> {
        let name = store.name().to_owned();
        let problem = |file: &str, problem: String| SourceError::Mds {
            file: file.to_owned(),
            store: name.clone(),
            problem,
        };
        let shards = layout::parse_index(text).map_err(|p| problem(index, p))?;
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
        let (store, problem) = (&**store, &problem);
        let labelled = columns.label.is_some();
        let files = open_files(
            index,
            shards,
            |shard| shard.file(),
            |key, shard| {
                let columns = Arc::clone(&columns);
                async move {
                    let samples = layout::samples(store, &key, &shard)
                        .await
                        .map_err(|e| e.into_source(|p| problem(&key, p)))?;
                    let zstd = samples.compression == Compression::Zstd;
                    // A raw sample's span is its own; a compressed shard's is every
                    // sample's, each its slot.
                    let slots = (0..samples.ranges.len()).map(|i| {
                        u32::try_from(if zstd { i } else { 0 }).map_err(|_| {
                            SourceError::Invalid("a shard of more than 2^32 samples".into())
                        })
                    });
                    Ok::<_, SourceError>(RecordFile {
                        size: samples.size,
                        records: Arc::new(Shard {
                            columns,
                            compression: samples.compression,
                            raw_bytes: samples.raw_bytes,
                        }),
                        samples: samples
                            .ranges
                            .into_iter()
                            .zip(slots)
                            .map(|(r, s)| Ok((r, s?)))
                            .collect::<Result<_>>()?,
                        shared: zstd,
                        key,
                    })
                }
            },
        )
        .await?;
        dataset_of(files, self.chunk_bytes, "sample", labelled)
    }

    /// [`Mds::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, index))
    }
}

#[async_trait(?Send)]
impl Format for Mds {
    fn name(&self) -> &'static str {
        "mds"
    }

    fn described(&self) -> &'static str {
        "MDS shards"
    }

    fn settings(&self) -> &'static [&'static str] {
        &["image_column", "label_column"]
    }

    fn names(&self, name: &str) -> bool {
        is_mds_index(name)
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        index_fit(probe, |text| !is_litdata_index(text)).await
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let (key, text) = index_of(probe, "MDS").await?;
        let mut shards = self.clone();
        shards.columns = shards.columns.with_options(probe.options());
        shards.load_index(probe.store(), &key, &text).await
    }
}
