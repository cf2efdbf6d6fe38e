//! A WebDataset shard: a tar of `{index}.jpg|png` and `{index}.cls` members, written so a
//! rerun writes the same bytes.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use loader_core::webdataset::ShardWriter;

use super::shard::{Closed, Packable, ShardFile, Staged};
use crate::Result;

/// The shard being written, under its `.partial` name.
pub struct TarShard {
    staged: Staged,
    tar: ShardWriter<BufWriter<File>>,
}

impl TarShard {
    /// Shard `number` in `staging`, whose first sample is source index `first`.
    pub fn create(staging: &Path, number: usize, first: u64) -> Result<Self> {
        let (staged, out) = Staged::create(staging, number, first, ".tar")?;
        Ok(Self {
            staged,
            tar: ShardWriter::new(out),
        })
    }
}

impl ShardFile for TarShard {
    fn append(&mut self, sample: &Packable) -> Result {
        let key = format!("{:09}", sample.index);
        self.tar
            .member(&format!("{key}.{}", sample.extension), &sample.image)?;
        if let Some(class) = sample.class {
            self.tar
                .member(&format!("{key}.cls"), class.to_string().as_bytes())?;
        }
        self.staged.samples += 1;
        self.staged.bytes = self.tar.bytes();
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.staged.bytes
    }

    fn close(self: Box<Self>) -> Result<Closed> {
        let this = *self;
        let out = this.tar.finish()?;
        this.staged.close(out)
    }
}
