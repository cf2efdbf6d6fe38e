//! MosaicML Streaming's MDS shards as a dataset, read where they lie: `index.json` lists the
//! shards and their columns; each raw shard's offset table (its first bytes) is read once,
//! then a sample is a ranged GET of its own bytes, its image and label cut out of it.
//! zstd-compressed shards are whole-shard fetch units, decompressed once for all their
//! samples. Labels are stored inside the samples, so they are read with them.
//!
//! Shards whose samples hold token ids (`tokens`) are a token dataset: each sample a
//! document, read in blocks of `source.block_size` tokens.
//!
//! Rooms: `layout` (the index, a shard's table, a sample cut into its record), `tokens`
//! (a token column's place in a sample, a raw shard as a token file), `write`.

mod layout;
mod tokens;
mod write;

use std::sync::Arc;

use async_trait::async_trait;
use loader_storage::{DynStorage, Storage};

use super::error::{Result, SourceError};
use super::format::About;
use super::index::Dataset;
use super::litdata::is_litdata_index;
use super::record_files::{FileKind, IndexedFiles, RecordFile, dataset_of, open_files};
use crate::tokens::TokenFiles;
use layout::{Compression, Shard};
use tokens::TokenColumn;

/// The file that describes an MDS dataset, and whether a key or URL names one.
pub use super::extensions::{INDEX, is_index as is_mds_index};
pub use write::{MdsColumn, MdsWriter, SIZE_LIMIT, ndarray_value};

/// How MDS shards become a [`Dataset`]: which columns hold the images and labels.
pub type Mds = IndexedFiles<MdsShards>;

/// MDS shards as a [`FileKind`]: an `index.json` that is not LitData's.
#[derive(Debug, Clone, Copy)]
pub struct MdsShards;

#[async_trait(?Send)]
impl FileKind for MdsShards {
    const ABOUT: About = About::new("mds", "MDS shards").reads(&[
        "image_column",
        "label_column",
        "token_column",
        "block_size",
        "keep_tail",
        "vocab_size",
    ]);
    const NAMED: &'static str = "MDS";

    fn is_kind(text: &[u8]) -> bool {
        !is_litdata_index(text)
    }

    async fn load_index(
        mds: &Mds,
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
        let first = shards
            .first()
            .ok_or_else(|| problem(index, "it lists no shard".into()))?;
        if let Some(other) = shards.iter().find(|s| !s.same_columns(first)) {
            return Err(problem(
                index,
                format!(
                    "shard {:?} has other columns than the first: {:?}",
                    other.file(),
                    other.column_names
                ),
            ));
        }
        if let Some((blocking, vocab)) = mds.tokens {
            if mds.columns.image.is_some() || mds.columns.label.is_some() {
                return Err(problem(
                    index,
                    "source.block_size reads its samples as token ids: leave \
                     source.image_column and source.label_column unset"
                        .into(),
                ));
            }
            let column = TokenColumn::choose(first, mds.columns.tokens.as_deref())
                .map_err(|p| problem(index, p))?;
            let (store, column, problem) = (&**store, &column, &problem);
            let files = open_files(
                index,
                shards,
                |shard| shard.file(),
                |key, shard| async move {
                    tokens::token_file(store, &key, &shard, column, blocking, vocab)
                        .await
                        .map_err(|e| e.into_source(|p| problem(&key, p)))
                },
            )
            .await?;
            let files = TokenFiles::numbered(files).map_err(|e| problem(index, e.to_string()))?;
            return Dataset::from_tokens(files);
        }
        let columns = layout::choose(
            first,
            mds.columns.image.as_deref(),
            mds.columns.label.as_deref(),
        )
        .map_err(
            |p| match TokenColumn::choose(first, mds.columns.tokens.as_deref()) {
                // Token ids and no images: the user has a token dataset.
                Ok(_) if mds.columns.image.is_none() => {
                    problem(index, super::columns::holds_tokens(&p))
                }
                _ => problem(index, p),
            },
        )?;
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
        dataset_of(files, mds.chunk_bytes, "sample", labelled)
    }
}
