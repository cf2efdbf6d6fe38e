//! LitData's chunks (`litdata.optimize`'s output) as a dataset, read where they lie:
//! `index.json` lists the chunks and a sample's leaves; each chunk's table (its first
//! bytes) is read once, then a sample is a ranged GET of its own bytes, its image, label
//! and other leaves cut out of it. zstd frames (litdata's default `compression="zstd"`
//! writes a frame per run of items) are fetch units decompressed once for their items.
//! Labels are stored inside the samples, so they are read with them.
//!
//! Rooms: `index` (what `index.json` says), `leaves` (a sample's leaves: which is the
//! image and label, an item cut into its record), `chunk` (a chunk's tables and frames,
//! and how its spans decode).

mod chunk;
mod index;
mod leaves;

use std::sync::Arc;

use async_trait::async_trait;
use loader_storage::{DynStorage, Storage};

use super::blocking::block_on_own_thread;
use super::columns::ColumnNames;
use super::error::{Result, SourceError};
use super::extensions::is_index;
use super::format::{Fit, Format, Probe};
use super::index::Dataset;
use super::record_files::{dataset_of, get_whole, index_fit, index_of, open_files};
use leaves::Columns;

/// Whether `text`, the bytes of an `index.json`, describes LitData chunks rather than
/// MDS shards.
pub fn is_litdata_index(text: &[u8]) -> bool {
    index::is_litdata(text)
}

/// How LitData chunks become a [`Dataset`]: which leaves hold the images and labels.
#[derive(Debug, Clone)]
pub struct LitData {
    columns: ColumnNames,
    chunk_bytes: u64,
}

impl Default for LitData {
    fn default() -> Self {
        Self::new()
    }
}

impl LitData {
    /// Images from the first leaf named `image`, `img`, `jpg`, `jpeg`, `png` or `webp` (or
    /// the one leaf of image bytes), labels from `label`, `cls` or `class` when present; raw chunks
    /// read in runs of 4 MiB in shard-local order.
    pub fn new() -> Self {
        Self {
            columns: ColumnNames::default(),
            chunk_bytes: super::webdataset::DEFAULT_CHUNK_BYTES,
        }
    }

    /// The leaf holding the images (stored `jpeg`, `bytes` or `image:...`): a dict's key,
    /// or a tuple's position (`"0"`, `"1"`, ...).
    pub fn image_column(mut self, name: impl Into<String>) -> Self {
        self.columns.image = Some(name.into());
        self
    }

    /// The leaf holding the labels (a Python `int`); `""` for none.
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.columns.label = Some(name.into());
        self
    }

    /// The dataset `index` (a key of `store`, `index.json` or `split/index.json`) describes.
    pub async fn load(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        let text = get_whole(store, index).await?;
        self.load_index(store, index, &text).await
    }

    /// [`LitData::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, index))
    }

    /// The dataset of `index`, whose bytes are `text`.
    pub(crate) async fn load_index(
        &self,
        store: &DynStorage,
        index: &str,
        text: &[u8],
    ) -> Result<Dataset> {
        let name = store.name().to_owned();
        let problem = |file: &str, problem: String| SourceError::LitData {
            file: file.to_owned(),
            store: name.clone(),
            problem,
        };
        let described = index::parse_index(text).map_err(|p| problem(index, p))?;
        let columns = Columns::choose(
            &described.leaves,
            self.columns.image.as_deref(),
            self.columns.label.as_deref(),
        )
        .map_err(|p| problem(index, p))?;
        let labelled = columns.label.is_some();
        let columns = Arc::new(columns);
        let (store, packing, problem) = (&**store, described.packing, &problem);
        let files = open_files(
            index,
            described.chunks,
            |chunk| &chunk.filename,
            |key, chunk| {
                let columns = Arc::clone(&columns);
                async move {
                    chunk::items(store, &key, &chunk, packing, columns)
                        .await
                        .map_err(|e| e.into_source(|p| problem(&key, p)))
                }
            },
        )
        .await?;
        dataset_of(files, self.chunk_bytes, "item", labelled)
    }
}

#[async_trait(?Send)]
impl Format for LitData {
    fn name(&self) -> &'static str {
        "litdata"
    }

    fn described(&self) -> &'static str {
        "LitData chunks"
    }

    fn settings(&self) -> &'static [&'static str] {
        &["image_column", "label_column"]
    }

    fn names(&self, name: &str) -> bool {
        is_index(name)
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        index_fit(probe, is_litdata_index).await
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let (key, text) = index_of(probe, "LitData").await?;
        let mut chunks = self.clone();
        chunks.columns = chunks.columns.with_options(probe.options());
        chunks.load_index(probe.store(), &key, &text).await
    }
}
