//! What opening a Parquet file reads (its footer, offset index and label column), kept in
//! the local cache directory so the next open of the same file (a later run, another rank
//! on the node) reads none of it again. Kept per file with the size and version the
//! listing gave; when either differs the file has changed, and it is read again.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use loader_storage::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::source::local_cache::{cache_path, write_atomically};

/// The format tag of a cache file; one with another is not ours (or too new).
const FORMAT: &str = "loader-parquet-spans/2";

/// Most bytes kept for one file: its footer and label column, not a share of its images
/// (an open reads nothing else, but a file of millions of rows has a large label column).
const MAX_KEPT: u64 = 64 << 20;

/// The cache file's first line: what it describes, then its spans' bytes in order.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    store: String,
    file: String,
    size: u64,
    version: String,
    spans: Vec<[u64; 2]>,
    /// xxh3 of the spans' bytes: a damaged file of the right length is not trusted.
    checksum: u64,
}

/// The spans of one file read at open, from the cache and added to as the open reads more.
#[derive(Debug)]
pub(super) struct Spans {
    path: PathBuf,
    store: String,
    meta: ObjectMeta,
    version: String,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    spans: Vec<(Range<u64>, Bytes)>,
    /// Whether spans were added since the cache file was read.
    added: bool,
}

impl Spans {
    /// The spans cached for the file `meta` describes on the store called `store`, under
    /// `dir`; `None` when the store gives no version (a file rewritten at the same size
    /// could not be told from the one cached).
    pub(super) fn load(dir: &Path, store: &str, meta: &ObjectMeta) -> Option<Self> {
        let version = meta.version.clone()?;
        let path = cache_path(dir, "parquet-footer", store, &meta.key, "bin");
        // Never more than a cache file can hold: a larger one is not ours.
        let spans = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= MAX_KEPT + (1 << 20))
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|bytes| parse(Bytes::from(bytes), store, meta, &version))
            .unwrap_or_default();
        Some(Self {
            path,
            store: store.to_owned(),
            meta: meta.clone(),
            version,
            held: Mutex::new(Held {
                spans,
                added: false,
            }),
        })
    }

    /// The bytes of `range` when a cached span holds them.
    pub(super) fn get(&self, range: &Range<u64>) -> Option<Bytes> {
        let held = self.held.lock().ok()?;
        held.spans.iter().find_map(|(span, bytes)| {
            (span.start <= range.start && range.end <= span.end).then(|| {
                let at = (range.start - span.start) as usize;
                bytes.slice(at..at + (range.end - range.start) as usize)
            })
        })
    }

    /// Keeps `bytes`, read at `range`, while the file's spans stay under [`MAX_KEPT`].
    pub(super) fn put(&self, range: Range<u64>, bytes: Bytes) {
        if let Ok(mut held) = self.held.lock() {
            let kept: u64 = held.spans.iter().map(|(r, _)| r.end - r.start).sum();
            if kept + (range.end - range.start) <= MAX_KEPT {
                held.spans.push((range, bytes));
                held.added = true;
            }
        }
    }

    /// Writes the spans to the cache when the open read any it did not have. A cache that
    /// cannot be written (a read-only home) costs the next open its reads, nothing else.
    pub(super) fn save(&self) {
        let Ok(held) = self.held.lock() else { return };
        if !held.added {
            return;
        }
        let mut body = Vec::new();
        for (_, bytes) in &held.spans {
            body.extend_from_slice(bytes);
        }
        let header = Header {
            format: FORMAT.to_owned(),
            store: self.store.clone(),
            file: self.meta.key.clone(),
            size: self.meta.size,
            version: self.version.clone(),
            spans: held.spans.iter().map(|(r, _)| [r.start, r.end]).collect(),
            checksum: xxhash_rust::xxh3::xxh3_64(&body),
        };
        let Ok(mut out) = serde_json::to_vec(&header) else {
            return;
        };
        out.push(b'\n');
        out.extend_from_slice(&body);
        let _ = write_atomically(&self.path, &out);
    }
}

/// The spans of a cache file, if it is one of ours for this file as it is now.
fn parse(
    bytes: Bytes,
    store: &str,
    meta: &ObjectMeta,
    version: &str,
) -> Option<Vec<(Range<u64>, Bytes)>> {
    let line = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..line]).ok()?;
    if header.format != FORMAT
        || header.store != store
        || header.file != meta.key
        || header.size != meta.size
        || header.version != version
    {
        return None;
    }
    let mut at = line + 1;
    let mut spans = Vec::with_capacity(header.spans.len());
    for [start, end] in header.spans {
        let len = usize::try_from(end.checked_sub(start)?).ok()?;
        if end > meta.size {
            return None;
        }
        let to = at.checked_add(len).filter(|&t| t <= bytes.len())?;
        spans.push((start..end, bytes.slice(at..to)));
        at = to;
    }
    let body_matches = xxhash_rust::xxh3::xxh3_64(&bytes[line + 1..]) == header.checksum;
    (at == bytes.len() && body_matches).then_some(spans)
}
