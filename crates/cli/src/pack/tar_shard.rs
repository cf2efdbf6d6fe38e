//! A WebDataset shard: a tar of `{index}.jpg|png` and `{index}.cls` members, written so a
//! rerun writes the same bytes.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use super::shard::{Closed, Packable, ShardFile, Staged};
use crate::Result;

/// The shard being written, under its `.partial` name.
pub struct TarShard {
    staged: Staged,
    tar: tar::Builder<BufWriter<File>>,
}

impl TarShard {
    /// Shard `number` in `staging`, whose first sample is source index `first`.
    pub fn create(staging: &Path, number: usize, first: u64) -> Result<Self> {
        let (staged, out) = Staged::create(staging, number, first, ".tar")?;
        Ok(Self {
            staged,
            tar: tar::Builder::new(out),
        })
    }

    fn member(&mut self, name: &str, data: &[u8]) -> Result {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        // No time: a rerun writes the same bytes.
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        self.tar.append_data(&mut header, name, data)?;
        // A header and the data padded to blocks of 512.
        self.staged.bytes += 512 + (data.len() as u64).div_ceil(512) * 512;
        Ok(())
    }
}

impl ShardFile for TarShard {
    fn append(&mut self, sample: &Packable) -> Result {
        let key = format!("{:09}", sample.index);
        self.member(&format!("{key}.{}", sample.extension), &sample.image)?;
        if let Some(class) = sample.class {
            self.member(&format!("{key}.cls"), class.to_string().as_bytes())?;
        }
        self.staged.samples += 1;
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.staged.bytes
    }

    fn close(self: Box<Self>) -> Result<Closed> {
        let this = *self;
        let out = this.tar.into_inner()?;
        this.staged.close(out)
    }
}
