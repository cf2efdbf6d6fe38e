//! A Parquet shard in Hugging Face's layout (`loader_core::parquet::ImageWriter`): a row per sample, its image's
//! `path` the name a WebDataset pack would give it, row groups of at most 1024 rows or
//! 64 MiB, held in memory until written.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use loader_core::parquet::{ImageRow, ImageWriter, features, writer_properties};

use super::shard::{Closed, Packable, ShardFile, Staged};
use crate::Result;

/// Rows of a row group at most.
const GROUP_ROWS: usize = 1024;
/// Image bytes of a row group at most (the memory a shard being written holds).
const GROUP_BYTES: u64 = 64 << 20;

/// The shard being written, under its `.partial` name.
pub struct ParquetShard {
    staged: Staged,
    writer: ImageWriter<BufWriter<File>>,
    group: Vec<ImageRow>,
    group_bytes: u64,
}

impl ParquetShard {
    /// Shard `number` in `staging`, whose first sample is source index `first`; with a
    /// label column when `labelled`, its `classes` named in the metadata as `datasets`'
    /// `ClassLabel`.
    pub fn create(
        staging: &Path,
        number: usize,
        first: u64,
        labelled: bool,
        classes: &[String],
    ) -> Result<Self> {
        let (staged, out) = Staged::create(staging, number, first, ".parquet")?;
        let props = writer_properties(true)
            .set_key_value_metadata(Some(vec![features(labelled, classes)]))
            .build();
        Ok(Self {
            staged,
            writer: ImageWriter::new(out, props, labelled)?,
            group: Vec::new(),
            group_bytes: 0,
        })
    }

    fn flush(&mut self) -> Result {
        if !self.group.is_empty() {
            self.writer.write_group(std::mem::take(&mut self.group))?;
            self.group_bytes = 0;
        }
        Ok(())
    }
}

impl ShardFile for ParquetShard {
    fn append(&mut self, sample: &Packable) -> Result {
        let path = format!("{:09}.{}", sample.index, sample.extension);
        // The row's bytes and its page and index entries, about.
        let size = (sample.image.len() + path.len()) as u64 + 32;
        self.group.push(ImageRow {
            image: sample.image.clone(),
            path,
            label: sample.class,
        });
        self.group_bytes += size;
        self.staged.bytes += size;
        self.staged.samples += 1;
        if self.group.len() >= GROUP_ROWS || self.group_bytes >= GROUP_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.staged.bytes
    }

    fn close(mut self: Box<Self>) -> Result<Closed> {
        self.flush()?;
        let this = *self;
        let out = this.writer.finish()?;
        this.staged.close(out)
    }
}
