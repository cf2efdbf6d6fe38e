//! Scanning a tar shard's headers with the `tar` crate: where each file member's data is.
//!
//! The crate handles ustar, GNU long names and long links, and pax extended headers (long
//! paths, sizes); we read the shard through ranged reads of large blocks and skip the data
//! of members we do not need.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use loader_storage::Storage;

/// One file member of a tar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TarMember {
    /// Its path, from the pax header or GNU long name when there is one.
    pub(crate) name: String,
    /// Where its (first) header starts.
    pub(crate) header: u64,
    /// Where its data starts, and how long it is.
    pub(crate) data: u64,
    pub(crate) size: u64,
    /// Its bytes, when it is small and the caller asked for such members' contents.
    pub(crate) text: Option<String>,
}

/// Members this small are read while scanning (labels, class names), so building the
/// dataset needs no request per sample.
pub(crate) const SMALL_MEMBER: u64 = 256;

/// A broken tar: where, and what.
#[derive(Debug)]
pub(crate) enum ScanError {
    /// Reading the shard failed.
    Storage(loader_storage::Error),
    /// The bytes are not a valid tar.
    Corrupt { offset: u64, problem: String },
}

/// Every regular-file member of the `size`-byte tar that `reader` reads, in order.
pub(crate) fn scan(reader: &mut BlockReader<'_>, size: u64) -> Result<Vec<TarMember>, ScanError> {
    if size == 0 {
        // What a failed or interrupted upload leaves; webdataset raises on it too.
        return Err(ScanError::Corrupt {
            offset: 0,
            problem: "the shard is empty (0 bytes), as a failed upload leaves it; a tar \
                      without members still has its 1,024-byte end marker"
                .into(),
        });
    }
    let mut magic = [0u8; 6];
    let n = read_up_to(reader, &mut magic).map_err(|e| corrupt(0, &e))?;
    if let Some(codec) = compression(&magic[..n]) {
        return Err(ScanError::Corrupt {
            offset: 0,
            problem: format!(
                "the shard is {codec}-compressed; samples are read by byte ranges, which a \
                 compressed stream does not allow: decompress the shards (they stay tar files)"
            ),
        });
    }
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| corrupt(0, &e))?;
    let mut members = Vec::new();
    // The end of the last member seen, padded: where the next header must start.
    let mut next = 0u64;
    let mut archive = tar::Archive::new(&mut *reader);
    let entries = archive.entries_with_seek().map_err(|e| corrupt(next, &e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| corrupt(next, &e))?;
        let (header, data, len) = (
            entry.raw_header_position(),
            entry.raw_file_position(),
            entry.size(),
        );
        next = data + len.div_ceil(512) * 512;
        if data.saturating_add(len) > size {
            return Err(ScanError::Corrupt {
                offset: header,
                problem: format!(
                    "member {:?} needs bytes up to {} but the shard has {size}: the shard is truncated",
                    String::from_utf8_lossy(&entry.path_bytes()),
                    data + len
                ),
            });
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_contiguous()) {
            continue; // directories, links, devices, pax global headers
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let text = if len <= SMALL_MEMBER {
            let mut buf = Vec::with_capacity(len as usize);
            entry.read_to_end(&mut buf).map_err(|e| corrupt(data, &e))?;
            String::from_utf8(buf).ok()
        } else {
            None
        };
        members.push(TarMember {
            name,
            header,
            data,
            size: len,
            text,
        });
    }
    Ok(members)
}

fn corrupt(offset: u64, e: &io::Error) -> ScanError {
    ScanError::Corrupt {
        offset,
        problem: e.to_string(),
    }
}

/// Read into `buf` until it is full or the reader ends; how many bytes were read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The compression whose magic bytes `head` starts with, if any.
pub(crate) fn compression(head: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 4] = [
        (&[0x1f, 0x8b], "gzip"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (b"BZh", "bzip2"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
    ];
    MAGIC
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, name)| *name)
}

/// Reads an object through ranged reads of `block` bytes, fetching a block only when a
/// read lands in it: the data of large members the scan skips is never fetched.
pub(crate) struct BlockReader<'a> {
    fetch: &'a mut dyn FnMut(u64, u64) -> loader_storage::Result<Bytes>,
    size: u64,
    block: u64,
    pos: u64,
    cached: Option<(u64, Bytes)>,
    /// The storage error that broke the last read, to report it as such.
    pub(crate) failed: Option<loader_storage::Error>,
}

impl<'a> BlockReader<'a> {
    /// Over an object of `size` bytes, `fetch(start, end)` reading a range of it.
    pub(crate) fn new(
        fetch: &'a mut dyn FnMut(u64, u64) -> loader_storage::Result<Bytes>,
        size: u64,
        block: u64,
    ) -> Self {
        Self {
            fetch,
            size,
            block: block.max(512),
            pos: 0,
            cached: None,
            failed: None,
        }
    }
}

impl Read for BlockReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let start = self.pos - self.pos % self.block;
        let hit = matches!(&self.cached, Some((s, _)) if *s == start);
        if !hit {
            let end = (start + self.block).min(self.size);
            match (self.fetch)(start, end) {
                Ok(bytes) => self.cached = Some((start, bytes)),
                Err(e) => {
                    let message = e.to_string();
                    self.failed = Some(e);
                    return Err(io::Error::other(message));
                }
            }
        }
        let Some((s, bytes)) = &self.cached else {
            return Ok(0);
        };
        let from = (self.pos - s) as usize;
        if from >= bytes.len() {
            return Ok(0); // the object is shorter than its size said
        }
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for BlockReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
        };
        self.pos = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// Scan `key` of `size` bytes on `store`, reading blocks of `block` bytes on `runtime`.
pub(crate) fn scan_object(
    store: &dyn Storage,
    key: &str,
    size: u64,
    block: u64,
    runtime: &tokio::runtime::Handle,
    cancel: &AtomicBool,
) -> Result<Vec<TarMember>, ScanError> {
    let mut fetch = |start: u64, end: u64| {
        if cancel.load(Ordering::Acquire) {
            return Err(loader_storage::Error::new(
                loader_storage::ErrorKind::Other,
                store.name(),
                key,
                "indexing stopped: another shard failed",
            ));
        }
        runtime.block_on(store.get_range(key, start..end))
    };
    let mut reader = BlockReader::new(&mut fetch, size, block);
    let scanned = scan(&mut reader, size);
    match (scanned, reader.failed.take()) {
        (Err(_), Some(e)) => Err(ScanError::Storage(e)),
        (result, _) => result,
    }
}
