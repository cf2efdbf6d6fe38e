//! Sources: where a dataset's samples come from. Each builds the same sample index
//! ([`Dataset`]: items, classes, shard layouts, the objects read) from what the data is
//! stored as: an ImageFolder listing, a manifest, WebDataset shards, or a Vec.
//!
//! Rooms: `index` (the sample index), `error` (what can be wrong with a source),
//! `blocking` (async reads for synchronous callers), then one file or folder per format, and `open` (which source a URL names).

mod blocking;
mod error;
mod image_folder;
mod index;
mod manifest;
mod open;
pub mod webdataset;

pub use error::DatasetError;
pub use index::{Dataset, IMAGE_EXTENSIONS, Item, Member, ShardLayout};
pub use manifest::ManifestFormat;
pub use open::store_url;
