//! A chunk's tables and how its spans decode. A chunk is stored one of four ways, as
//! `litdata.optimize` writes it:
//! - raw: `u32` item count, `count + 1` `u32` file offsets, the items;
//! - `compression="zstd"` (`compression_level="batch"`, litdata's default for zstd):
//!   the `LDFZ01` framed layout, a directory of zstd frames each holding a run of items;
//! - `compression_level="chunk"`: the raw layout, the whole file one zstd frame;
//! - `compression_level="sample"`: the raw layout, each item its own zstd frame.

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::{Record, Records};
use loader_storage::Storage;

use super::index::{ChunkInfo, Packing};
use super::leaves::Columns;
use crate::source::record_files::{FileError, RecordFile};

/// The framed zstd chunk's magic, and the sizes of its prefix and of a frame's entry.
const FRAMED_MAGIC: &[u8; 8] = b"LDFZ01\0\0";
const FRAMED_PREFIX: u64 = 24;
const FRAME_ENTRY: u64 = 24;
/// How far a zstd frame that does not declare its content size may grow: 64 times its own
/// size or 64 MiB, whichever is more. Image bytes barely compress, so a real item is far
/// below it and a hostile one stops.
const INFLATION_LIMIT: u64 = 64;
const INFLATION_FLOOR: u64 = 64 << 20;
/// The most a whole-file compressed chunk may claim to hold per byte of its file: its
/// items, one entry each in the index, are allocated at open on the index's word.
const WHOLE_INFLATION_LIMIT: u64 = 1024;

/// A chunk's items, the chunk at `key`: a raw or per-item compressed chunk's offset table and a framed
/// chunk's directory read from its first bytes; a whole-file compressed chunk's count from
/// the index (its table is inside the compressed bytes).
pub(super) async fn items(
    store: &dyn Storage,
    key: &str,
    chunk: &ChunkInfo,
    packing: Packing,
    columns: Arc<Columns>,
) -> Result<RecordFile, FileError> {
    let n = chunk.chunk_size;
    let size = chunk.chunk_bytes;
    let table = |head: u64| async move {
        if head > size {
            return Err(FileError::Invalid(format!(
                "{n} items need a table of {head} bytes; the chunk has {size}"
            )));
        }
        store
            .get_range(key, 0..head)
            .await
            .map_err(FileError::Storage)
    };
    match packing {
        Packing::Raw | Packing::Sample => {
            let head = 4 * (n + 2);
            let table = table(head).await?;
            let ranges = offsets(&table, n, size)?;
            Ok(RecordFile {
                key: key.to_owned(),
                size,
                samples: ranges.into_iter().map(|r| (r, 0)).collect(),
                shared: false,
                records: Arc::new(Chunk {
                    columns,
                    packing: Stored::Items {
                        compressed: packing == Packing::Sample,
                    },
                }),
            })
        }
        Packing::Whole => {
            // The index gives the decompressed size: the file's own is asked for. Each item
            // takes an offset and a size per leaf at least.
            let least = 4 + 4 * columns.leaves() as u64;
            if n.saturating_mul(least).saturating_add(8) > size {
                return Err(format!("{n} items cannot fit in a chunk of {size} bytes").into());
            }
            let file = store.head(key).await.map_err(FileError::Storage)?.size;
            if size > file.saturating_mul(WHOLE_INFLATION_LIMIT) {
                return Err(format!(
                    "the index says the chunk inflates to {size} bytes; its file has {file}"
                )
                .into());
            }
            let slots = (0..n).map(|i| u32::try_from(i).map_err(|_| "more than 2^32 items"));
            Ok(RecordFile {
                key: key.to_owned(),
                size: file,
                samples: slots
                    .map(|s| Ok((0..file, s?)))
                    .collect::<Result<_, FileError>>()?,
                shared: true,
                records: Arc::new(Chunk {
                    columns,
                    packing: Stored::Whole {
                        items: n,
                        raw: size,
                    },
                }),
            })
        }
        Packing::Framed => {
            // At most one frame per item: one read holds the directory whatever the frames.
            let head = (FRAMED_PREFIX + 4 * (n + 1) + FRAME_ENTRY * n).min(size);
            let dir = table(head).await?;
            let framed = Framed::parse(&dir, n, size)?;
            let samples = framed
                .frames
                .iter()
                .flat_map(|f| (0..f.items).map(|i| (f.span.clone(), i)))
                .collect();
            Ok(RecordFile {
                key: key.to_owned(),
                size,
                samples,
                shared: true,
                records: Arc::new(Chunk {
                    columns,
                    packing: Stored::Framed(framed),
                }),
            })
        }
    }
}

/// The item ranges of a chunk's table (`u32` count, then `count + 1` offsets), checked
/// against the count the index gives and the chunk's size.
fn offsets(table: &[u8], n: u64, size: u64) -> Result<Vec<Range<u64>>, String> {
    let count = word(table, 0).ok_or("the chunk ends inside its item count")?;
    if count != n {
        return Err(format!("the chunk holds {count} items; the index says {n}"));
    }
    let head = 4 * (n + 2);
    let mut start = word(table, 1).ok_or("the chunk ends inside its offset table")?;
    if start < head {
        return Err(format!(
            "item 0 starts at byte {start}, inside the offset table"
        ));
    }
    // No more items than the table read can hold: a count is not trusted with memory.
    let mut ranges = Vec::with_capacity((n as usize).min(table.len() / 4));
    for i in 0..n {
        let end = word(table, i + 2).ok_or("the chunk ends inside its offset table")?;
        if end <= start || end > size {
            return Err(if end == start && start == head {
                // litdata writes samples without media (numbers, text) as an Arrow table
                // after an empty item table.
                "its items are an Arrow table at the chunk's end, as litdata writes samples \
                 without images; samples with an image leaf are stored as items"
                    .into()
            } else {
                format!("item {i} is bytes {start}..{end} of a chunk of {size} bytes")
            });
        }
        ranges.push(start..end);
        start = end;
    }
    Ok(ranges)
}

/// The `i`th little-endian `u32` of `bytes`.
fn word(bytes: &[u8], i: u64) -> Option<u64> {
    let at = usize::try_from(i.checked_mul(4)?).ok()?;
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

/// One zstd frame of a framed chunk.
#[derive(Debug)]
struct Frame {
    /// Its compressed bytes in the file.
    span: Range<u64>,
    /// Its first item and how many it holds.
    first: u64,
    items: u32,
    /// What it decompresses to.
    raw: u64,
}

/// A framed chunk's directory.
#[derive(Debug)]
pub(super) struct Framed {
    /// Each item's start in the items' bytes laid end to end, and their end.
    offsets: Vec<u64>,
    frames: Vec<Frame>,
}

impl Framed {
    /// The directory at the start of a framed chunk (`dir`), checked against the index's
    /// count `n` and the file's `size`.
    fn parse(dir: &[u8], n: u64, size: u64) -> Result<Self, String> {
        if dir.get(..8) != Some(&FRAMED_MAGIC[..]) {
            return Err("no LDFZ01 magic where the index says a framed zstd chunk starts".into());
        }
        let version = dir.get(8..10).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if version != Some(1) {
            return Err(format!(
                "framed zstd version {version:?}; version 1 is read"
            ));
        }
        let count = word(dir, 3).ok_or("the chunk ends inside its directory")?;
        let frames = word(dir, 5).ok_or("the chunk ends inside its directory")?;
        if count != n || frames == 0 || frames > n {
            return Err(format!(
                "the chunk holds {count} items in {frames} frames; the index says {n} items"
            ));
        }
        let offsets: Vec<u64> = (0..=n)
            .map(|i| word(dir, FRAMED_PREFIX / 4 + i))
            .collect::<Option<_>>()
            .ok_or("the chunk ends inside its offset table")?;
        let table = FRAMED_PREFIX + 4 * (n + 1);
        let mut next = 0;
        // No more frames than the directory read can hold: a count is not trusted with memory.
        let mut parsed =
            Vec::with_capacity((frames as usize).min(dir.len() / FRAME_ENTRY as usize));
        for f in 0..frames {
            let at = usize::try_from(table + f * FRAME_ENTRY).map_err(|e| e.to_string())?;
            let entry = dir
                .get(at..at + FRAME_ENTRY as usize)
                .ok_or("the chunk ends inside its frame table")?;
            let u32_at = |i: usize| {
                u64::from(u32::from_le_bytes([
                    entry[i],
                    entry[i + 1],
                    entry[i + 2],
                    entry[i + 3],
                ]))
            };
            let mut off = [0u8; 8];
            off.copy_from_slice(&entry[8..16]);
            let (first, items, off, len, raw) = (
                u32_at(0),
                u32_at(4),
                u64::from_le_bytes(off),
                u32_at(16),
                u32_at(20),
            );
            let end = first.checked_add(items).filter(|&e| e <= n);
            let (Some(end), true) = (end, first == next && items > 0) else {
                return Err(format!(
                    "frame {f} holds items {first}..{} after item {next}",
                    first.saturating_add(items)
                ));
            };
            let span = off..off.saturating_add(len);
            let want = offsets[end as usize].checked_sub(offsets[first as usize]);
            if off < table + frames * FRAME_ENTRY
                || span.end > size
                || len == 0
                || want != Some(raw)
            {
                return Err(format!(
                    "frame {f} is bytes {}..{} of {size}, inflating to {raw} bytes for items \
                     {first}..{end}",
                    span.start, span.end
                ));
            }
            parsed.push(Frame {
                span,
                first,
                items: u32::try_from(items).map_err(|e| e.to_string())?,
                raw,
            });
            next = end;
        }
        if next != n {
            return Err(format!("its frames hold {next} of its {n} items"));
        }
        if offsets.windows(2).any(|w| w[1] <= w[0]) {
            return Err("its item offsets do not increase".into());
        }
        Ok(Self {
            offsets,
            frames: parsed,
        })
    }
}

/// How a chunk's spans hold its items.
#[derive(Debug)]
enum Stored {
    /// Each span one item, zstd-compressed when `compressed`.
    Items {
        compressed: bool,
    },
    /// The whole file one zstd frame of the raw layout, of `items` items in `raw` bytes.
    Whole {
        items: u64,
        raw: u64,
    },
    Framed(Framed),
}

/// A chunk's items as the engine decodes them.
#[derive(Debug)]
pub(super) struct Chunk {
    columns: Arc<Columns>,
    packing: Stored,
}

impl Records for Chunk {
    fn decode(&self, _key: &str, range: &Range<u64>, bytes: Bytes) -> Result<Vec<Record>, String> {
        match &self.packing {
            Stored::Items { compressed: false } => Ok(vec![self.columns.record(&bytes)?]),
            Stored::Items { compressed: true } => {
                Ok(vec![self.columns.record(&inflate(&bytes, None)?)?])
            }
            Stored::Whole { items, raw } => {
                let raw = inflate(&bytes, Some(*raw))?;
                offsets(&raw, *items, raw.len() as u64)?
                    .into_iter()
                    .map(|r| {
                        self.columns
                            .record(&raw.slice(r.start as usize..r.end as usize))
                    })
                    .collect()
            }
            Stored::Framed(framed) => {
                let f = framed
                    .frames
                    .iter()
                    .find(|f| f.span == *range)
                    .ok_or_else(|| format!("no frame at bytes {range:?}"))?;
                let raw = inflate(&bytes, Some(f.raw))?;
                let base = framed.offsets[f.first as usize];
                (f.first..f.first + u64::from(f.items))
                    .map(|i| {
                        let (s, e) = (framed.offsets[i as usize], framed.offsets[i as usize + 1]);
                        self.columns
                            .record(&raw.slice((s - base) as usize..(e - base) as usize))
                    })
                    .collect()
            }
        }
    }
}

/// A zstd frame's content: exactly `size` bytes when known; else at most what its header
/// declares (up to 1 GiB, the most one read returns), or without a declared size at most
/// [`INFLATION_LIMIT`] times its own size or [`INFLATION_FLOOR`].
fn inflate(bytes: &[u8], size: Option<u64>) -> Result<Bytes, String> {
    let limit = match size {
        Some(s) => s,
        None => match zstd::zstd_safe::get_frame_content_size(bytes) {
            Ok(Some(declared)) if declared <= loader_storage::DEFAULT_MAX_READ_BYTES => declared,
            Ok(Some(declared)) => {
                return Err(format!(
                    "a zstd frame declares {declared} bytes, more than the 1 GiB a sample may be"
                ));
            }
            _ => (bytes.len() as u64)
                .saturating_mul(INFLATION_LIMIT)
                .max(INFLATION_FLOOR),
        },
    };
    let mut out = Vec::with_capacity(usize::try_from(limit.min(1 << 26)).unwrap_or(0));
    zstd::stream::read::Decoder::new(bytes)
        .map_err(|e| format!("zstd: {e}"))?
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("zstd: {e}"))?;
    match size {
        Some(s) if out.len() as u64 != s => Err(format!(
            "a zstd frame inflates to {} bytes; {s} were written",
            out.len()
        )),
        None if out.len() as u64 > limit => Err(format!(
            "a zstd frame of {} bytes inflates past {limit} bytes",
            bytes.len()
        )),
        _ => Ok(Bytes::from(out)),
    }
}
