//! A WebDataset shard: a tar of `{index}.jpg|png` and `{index}.cls` members, written so a
//! rerun writes the same bytes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::shard::{Closed, Packable, ShardFile, sync};
use crate::Result;

/// The shard being written, under its `.partial` name.
pub struct TarShard {
    name: String,
    partial: PathBuf,
    tar: tar::Builder<BufWriter<File>>,
    first: u64,
    samples: u64,
    bytes: u64,
}

impl TarShard {
    /// Shard `number` in `staging`, whose first sample is source index `first`.
    pub fn create(staging: &Path, number: usize, first: u64) -> Result<Self> {
        let name = format!("shard-{number:06}.tar");
        let partial = staging.join(format!("{name}.partial"));
        let file = File::create(&partial)
            .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
        Ok(Self {
            name,
            partial,
            tar: tar::Builder::new(BufWriter::new(file)),
            first,
            samples: 0,
            bytes: 0,
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
        self.bytes += 512 + (data.len() as u64).div_ceil(512) * 512;
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
        self.samples += 1;
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn close(self: Box<Self>) -> Result<Closed> {
        let this = *self;
        let mut out = this.tar.into_inner()?;
        out.flush()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        Ok(Closed {
            bytes: sync(file)?,
            name: this.name,
            partial: this.partial,
            first: this.first,
            samples: this.samples,
        })
    }
}
