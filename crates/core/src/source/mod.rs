//! Sources: where a dataset's samples come from. Each builds the same sample index
//! ([`Dataset`]: items, classes, shard layouts, the objects read) from what the data is
//! stored as: an ImageFolder listing, a manifest, WebDataset shards, Parquet files, MDS shards, LitData chunks, or a Vec.
//!
//! Rooms: `extensions` (which keys are images), `columns` (which columns of a table are) and
//! `error` (what can be wrong with a source, the one [`SourceError`]) at the bottom, `index` (the sample index),
//! `blocking` (async reads for synchronous callers), `local_cache` (the directory where
//! sources keep what they learnt of files: shard indexes, Parquet footers), `record_files` (the index of files holding samples stored encoded, MDS's and LitData's), then one file or folder per format, `open` (which source a URL names), and `mixture`
//! (several datasets, each in its own store, read as one).

mod blocking;
mod columns;
mod error;
mod extensions;
mod image_folder;
mod index;
pub mod litdata;
mod local_cache;
mod manifest;
pub mod mds;
mod mixture;
mod open;
pub mod parquet;
mod record_files;
pub mod webdataset;

pub use error::SourceError;
pub use extensions::IMAGE_EXTENSIONS;
pub use index::{CLASSES_FILE, Dataset, Item, Member, PACK_FILE, ShardLayout};
pub use manifest::{LabelKind, Manifest, ManifestFormat};
pub use mixture::Source;
pub(crate) use mixture::combine;
pub use open::{Formats, store_url};
