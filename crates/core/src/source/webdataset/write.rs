//! Writing WebDataset shards: members as the `tar` tool writes them, but with no time, owner
//! or mode of the machine, so the same samples always make the same bytes (a resumed
//! `loader pack` rewrites a shard identically).

use std::io::Write;

/// A tar shard being written to `W`, a member at a time.
pub struct ShardWriter<W: Write> {
    tar: tar::Builder<W>,
    bytes: u64,
}

impl<W: Write> ShardWriter<W> {
    /// A shard written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            tar: tar::Builder::new(out),
            bytes: 0,
        }
    }

    /// Appends one member: `{key}.{suffix}` by WebDataset's grouping rule.
    pub fn member(&mut self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        self.tar.append_data(&mut header, name, data)?;
        // A header and the data padded to blocks of 512.
        self.bytes += 512 + (data.len() as u64).div_ceil(512) * 512;
        Ok(())
    }

    /// The bytes written so far, without the end-of-archive blocks.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The shard finished (its end-of-archive blocks written), and what it was written to.
    pub fn finish(self) -> std::io::Result<W> {
        self.tar.into_inner()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_same_members_write_the_same_bytes_and_read_back() {
        let write = || {
            let mut shard = ShardWriter::new(Vec::new());
            shard.member("000000001.jpg", b"image").unwrap();
            shard.member("000000001.cls", b"3").unwrap();
            assert_eq!(shard.bytes(), 4 * 512);
            shard.finish().unwrap()
        };
        let bytes = write();
        assert_eq!(bytes, write());
        let mut archive = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["000000001.jpg", "000000001.cls"]);
    }
}
