//! Sources: the dataset formats. Each builds the same sample index ([`Dataset`]: items,
//! classes, shard layouts, the objects read) from what the data is stored as, and each is
//! one folder implementing [`Format`]: `image_folder`, `manifest`, `webdataset`,
//! `parquet`, `mds`, `litdata`. [`Dataset::open`] asks the [`registry`] which one a URL
//! names, and hands it a [`SourceContext`]: the store behind the caller's request stack,
//! and the [`SourceOptions`](crate::SourceOptions).
//!
//! Rooms: `format` (the trait, the probe and the context), `registry` (the formats known),
//! `url` (which files a URL names), `open` (choosing one); `extensions` (which keys are
//! images), `columns` (which columns of a table are), `error` (the one [`SourceError`]),
//! `index` (the sample index), `blocking` (async reads for synchronous callers),
//! `local_cache` (where formats keep what they learnt of files: shard indexes, Parquet
//! footers), `record_files` (MDS's and LitData's shared index prologue and file tables);
//! then one folder per format, and `mixture` (several datasets, each in its own store,
//! read as one).

mod blocking;
mod columns;
mod error;
mod extensions;
mod format;
mod image_folder;
mod index;
pub mod litdata;
mod local_cache;
mod manifest;
pub mod mds;
pub mod megatron;
mod mixture;
mod open;
pub mod parquet;
mod record_files;
mod registry;
mod url;
pub mod webdataset;

pub use error::{Result, SourceError, WriteError};
pub use extensions::IMAGE_EXTENSIONS;
pub use format::{About, Fit, Format, Probe, Progress, SourceContext};
pub use image_folder::ImageFolder;
pub use index::{CLASSES_FILE, Dataset, Item, Member, PACK_FILE, ShardLayout};
pub use manifest::{LabelKind, Manifest, ManifestSyntax};
pub use mixture::Source;
pub(crate) use mixture::combine;
pub use open::{open, open_with, store_url};
pub use record_files::{FileKind, IndexedFiles};
pub use registry::{register, registered};
