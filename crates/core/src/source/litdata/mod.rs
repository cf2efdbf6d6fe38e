//! LitData's chunks (`litdata.optimize`'s output) as a dataset, read where they lie:
//! `index.json` lists the chunks and a sample's leaves; each chunk's table (its first
//! bytes) is read once, then a sample is a ranged GET of its own bytes, its image, label
//! and other leaves cut out of it. zstd frames (litdata's default `compression="zstd"`
//! writes a frame per run of items) are fetch units decompressed once for their items.
//! Labels are stored inside the samples, so they are read with them.
//!
//! Chunks written for `TokensLoader` are a token dataset (`tokens`): each item a
//! document, read in blocks of `source.block_size` tokens.
//!
//! Rooms: `index` (what `index.json` says), `leaves` (a sample's leaves: which is the
//! image and label, an item cut into its record), `chunk` (a chunk's tables and frames,
//! and how its spans decode), `tokens` (a token chunk's table as documents), `write`
//! (token chunks as `optimize` writes them).

mod chunk;
mod index;
mod leaves;
mod tokens;
mod write;

use std::sync::Arc;

use async_trait::async_trait;
use loader_storage::{DynStorage, Storage};

use super::error::{Result, SourceError};
use super::format::About;
use super::index::Dataset;
use super::record_files::{FileKind, IndexedFiles, dataset_of, open_files};
use crate::tokens::TokenFiles;
use leaves::Columns;
pub use write::TokenChunkWriter;

/// Whether `text`, the bytes of an `index.json`, describes LitData chunks rather than
/// MDS shards.
pub fn is_litdata_index(text: &[u8]) -> bool {
    index::is_litdata(text)
}

/// How LitData chunks become a [`Dataset`]: which leaves hold the images and labels.
pub type LitData = IndexedFiles<LitDataChunks>;

/// LitData chunks as a [`FileKind`]: an `index.json` with LitData's `config`.
#[derive(Debug, Clone, Copy)]
pub struct LitDataChunks;

#[async_trait(?Send)]
impl FileKind for LitDataChunks {
    const ABOUT: About = About::new("litdata", "LitData chunks").reads(&[
        "image_column",
        "label_column",
        "block_size",
        "keep_tail",
        "vocab_size",
    ]);
    const NAMED: &'static str = "LitData";

    fn is_kind(text: &[u8]) -> bool {
        is_litdata_index(text)
    }

    async fn load_index(
        litdata: &LitData,
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
        match (described.tokens, litdata.tokens) {
            (Some(dtype), Some((blocking, vocab))) => {
                if litdata.columns.image.is_some() || litdata.columns.label.is_some() {
                    return Err(problem(
                        index,
                        "its chunks hold token ids, no leaves: leave source.image_column \
                         and source.label_column unset"
                            .into(),
                    ));
                }
                let (store, problem) = (&**store, &problem);
                let files = open_files(
                    index,
                    described.chunks,
                    |chunk| &chunk.filename,
                    |key, chunk| async move {
                        // LitData's blocks share no token: `TokensLoader(block_size=L + 1)`.
                        tokens::token_file(store, &key, &chunk, dtype, blocking.disjoint(), vocab)
                            .await
                            .map_err(|e| e.into_source(|p| problem(&key, p)))
                    },
                )
                .await?;
                let files =
                    TokenFiles::numbered(files).map_err(|e| problem(index, e.to_string()))?;
                return Dataset::from_tokens(files);
            }
            (Some(_), None) => {
                return Err(problem(
                    index,
                    "its chunks are written for TokensLoader: they are read in blocks of \
                     tokens; set source.block_size to the tokens a row trains on (Python: \
                     block_size=, loader run: --block-size)"
                        .into(),
                ));
            }
            (None, Some(_)) => {
                return Err(problem(
                    index,
                    "source.block_size cuts token chunks, but these hold samples (litdata's \
                     PyTreeLoader): leave it unset"
                        .into(),
                ));
            }
            (None, None) => {}
        }
        let columns = Columns::choose(
            &described.leaves,
            litdata.columns.image.as_deref(),
            litdata.columns.label.as_deref(),
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
        dataset_of(files, litdata.chunk_bytes, "item", labelled)
    }
}
