//! A shard being written, whatever its format: samples appended in order under a
//! `.partial` name, then closed whole for the destination to publish.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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

/// What every shard being written keeps: its names, its first sample, its counts.
pub struct Staged {
    name: String,
    partial: PathBuf,
    first: u64,
    /// Samples appended.
    pub samples: u64,
    /// About how many bytes they take.
    pub bytes: u64,
}

impl Staged {
    /// Shard `number` (`shard-NNNNNN` with `suffix`) created in `staging` under its
    /// `.partial` name, whose first sample is source index `first`; and the file to write.
    pub fn create(
        staging: &Path,
        number: usize,
        first: u64,
        suffix: &str,
    ) -> Result<(Self, BufWriter<File>)> {
        let name = format!("shard-{number:06}{suffix}");
        let partial = staging.join(format!("{name}.partial"));
        let file = File::create(&partial)
            .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
        let staged = Self {
            name,
            partial,
            first,
            samples: 0,
            bytes: 0,
        };
        Ok((staged, BufWriter::new(file)))
    }

    /// The shard closed: `out` flushed and synced.
    pub fn close(self, mut out: BufWriter<File>) -> Result<Closed> {
        out.flush()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(Closed {
            bytes: file.metadata()?.len(),
            name: self.name,
            partial: self.partial,
            first: self.first,
            samples: self.samples,
        })
    }
}
