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

use super::error::{Result, SourceError};
use super::format::About;
use super::index::Dataset;
use super::litdata::is_litdata_index;
use super::record_files::{FileKind, IndexedFiles, RecordFile, dataset_of, open_files};
use layout::{Compression, Shard};

/// The file that describes an MDS dataset, and whether a key or URL names one.
pub use super::extensions::{INDEX, is_index as is_mds_index};
pub use write::{MdsColumn, MdsWriter, SIZE_LIMIT};

/// How MDS shards become a [`Dataset`]: which columns hold the images and labels.
pub type Mds = IndexedFiles<MdsShards>;

/// MDS shards as a [`FileKind`]: an `index.json` that is not LitData's.
#[derive(Debug, Clone, Copy)]
pub struct MdsShards;

#[async_trait(?Send)]
impl FileKind for MdsShards {
    const ABOUT: About = About::new("mds", "MDS shards").reads(&["image_column", "label_column"]);
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
        let columns = shards
            .first()
            .map(|s| {
                layout::choose(
                    s,
                    mds.columns.image.as_deref(),
                    mds.columns.label.as_deref(),
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
        dataset_of(files, mds.chunk_bytes, "sample", labelled)
    }
}
