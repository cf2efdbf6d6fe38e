//! A shard being written, whatever its format: samples appended in order under a
//! `.partial` name, then closed whole for the destination to publish.

use std::path::PathBuf;

use bytes::Bytes;

use crate::Result;

/// One sample as written: its index, its image's bytes and extension, its class.
pub struct Packable {
    pub index: u64,
    pub image: Bytes,
    pub extension: &'static str,
    pub class: Option<i64>,
}

/// What a pack writes its shards as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// WebDataset `.tar` shards, each with its sidecar index.
    Webdataset,
    /// Parquet files in Hugging Face's layout (an `image` struct of `bytes` and `path`, an
    /// int64 `label` with `ClassLabel` names), with an offset index.
    Parquet,
}

impl Format {
    /// The name pack.json records.
    pub fn name(self) -> &'static str {
        match self {
            Format::Webdataset => "webdataset",
            Format::Parquet => "parquet",
        }
    }
}

/// A shard closed whole, before it is published.
pub struct Closed {
    /// Its name in the destination.
    pub name: String,
    /// Where it was written.
    pub partial: PathBuf,
    /// The source index of its first sample.
    pub first: u64,
    pub samples: u64,
    /// Its size.
    pub bytes: u64,
}

/// A shard being written.
pub trait ShardFile {
    /// Appends a sample, named by its source index so every run names it the same.
    fn append(&mut self, sample: &Packable) -> Result;
    /// About how many bytes it holds so far.
    fn bytes(&self) -> u64;
    /// Writes what it holds, closes and syncs it.
    fn close(self: Box<Self>) -> Result<Closed>;
}

/// Syncs a finished file and says how large it is.
pub fn sync(file: std::fs::File) -> Result<u64> {
    file.sync_all()?;
    Ok(file.metadata()?.len())
}
