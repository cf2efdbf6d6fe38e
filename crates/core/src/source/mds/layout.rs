//! What MDS files say: `index.json`'s shards and columns, a shard's offset table, and a
//! sample's columns (a size per variable-size column, then each column's bytes in order).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::{Label, Record, Records};
use loader_storage::Storage;
use serde::Deserialize;

use crate::source::columns::{IMAGE_NAMES, LABEL_NAMES};
use crate::source::record_files::FileError;
/// Encodings whose bytes are an image file.
const IMAGE_ENCODINGS: [&str; 3] = ["jpeg", "png", "bytes"];
/// Encodings read as integer labels.
const INT_ENCODINGS: [&str; 10] = [
    "int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "str_int",
];

#[derive(Debug, Deserialize)]
struct Index {
    shards: Vec<ShardInfo>,
}

/// One shard as `index.json` describes it.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct ShardInfo {
    pub(super) column_encodings: Vec<String>,
    pub(super) column_names: Vec<String>,
    pub(super) column_sizes: Vec<Option<u64>>,
    #[serde(default)]
    compression: Option<String>,
    #[serde(default)]
    format: Option<String>,
    raw_data: FileInfo,
    samples: u64,
    #[serde(default)]
    zip_data: Option<FileInfo>,
}

#[derive(Debug, Clone, Deserialize)]
struct FileInfo {
    basename: String,
    bytes: u64,
}

impl ShardInfo {
    /// The file the shard is read from: its compressed file when it has one.
    pub(super) fn file(&self) -> &str {
        self.zip_data
            .as_ref()
            .map_or(&self.raw_data.basename, |z| &z.basename)
    }

    /// Whether its samples are zstd-compressed (in `zip_data`), not read by range.
    pub(super) fn compressed(&self) -> bool {
        self.zip_data.is_some()
    }

    /// Its samples, as the index counts them.
    pub(super) fn sample_count(&self) -> u64 {
        self.samples
    }

    /// Its raw bytes, as the index gives them.
    pub(super) fn raw_bytes(&self) -> u64 {
        self.raw_data.bytes
    }

    /// Whether `other` has its very columns: names, encodings and sizes.
    pub(super) fn same_columns(&self, other: &ShardInfo) -> bool {
        self.column_names == other.column_names
            && self.column_sizes == other.column_sizes
            && self.column_encodings == other.column_encodings
    }
}

/// The shards `index.json` lists (its text `bytes`).
pub(super) fn parse_index(bytes: &[u8]) -> Result<Vec<ShardInfo>, String> {
    let index: Index = serde_json::from_slice(bytes)
        .map_err(|e| format!("not an MDS index (a JSON object with \"shards\"): {e}"))?;
    for s in &index.shards {
        crate::source::record_files::check_listed_name(&s.raw_data.basename)?;
        if let Some(zip) = &s.zip_data {
            crate::source::record_files::check_listed_name(&zip.basename)?;
        }
        if s.format.as_deref().is_some_and(|f| f != "mds") {
            return Err(format!(
                "shard {:?} is in format {:?}; only MDS shards are read here",
                s.file(),
                s.format
            ));
        }
        // MDS offsets are u32: no raw shard is larger, nor holds more samples.
        let limit = u64::from(u32::MAX);
        if s.samples > limit || s.raw_data.bytes > limit {
            return Err(format!(
                "shard {:?} claims {} samples in {} bytes: more than MDS's 32-bit offsets hold",
                s.file(),
                s.samples,
                s.raw_data.bytes
            ));
        }
        let n = s.column_names.len();
        if n == 0 || s.column_encodings.len() != n || s.column_sizes.len() != n {
            return Err(format!(
                "shard {:?}: {n} column names, {} encodings, {} sizes",
                s.file(),
                s.column_encodings.len(),
                s.column_sizes.len()
            ));
        }
        match (s.compression.as_deref(), &s.zip_data) {
            (None, _) => {}
            (Some(c), Some(_)) if c == "zstd" || c.starts_with("zstd:") => {}
            (Some(c), _) => {
                return Err(format!(
                    "shard {:?} is compressed with {c:?}: MDS shards are read raw or \
                     zstd-compressed; write them with compression=None (read by range, \
                     the fastest) or \"zstd\"",
                    s.file()
                ));
            }
        }
    }
    Ok(index.shards)
}

/// The columns read, by position in a sample.
#[derive(Debug, Clone)]
pub(super) struct Columns {
    names: Vec<String>,
    /// Each column's fixed size, `None` for variable-size ones.
    sizes: Vec<Option<u64>>,
    pub(super) image: usize,
    /// The label column and its encoding.
    pub(super) label: Option<(usize, String)>,
}

impl Columns {
    /// The record of one sample's bytes: its image, its label, its other columns as
    /// members (their bytes as MDS encodes them: `str` as UTF-8, `int` as 8 bytes
    /// little-endian, ...).
    fn cut(&self, sample: &Bytes) -> Result<Record, String> {
        let mut sizes = Vec::with_capacity(self.sizes.len());
        let mut at = 0usize;
        for size in &self.sizes {
            let size = match size {
                Some(s) => usize::try_from(*s).map_err(|e| e.to_string())?,
                None => {
                    let head = sample
                        .get(at..at + 4)
                        .ok_or("the sample ends inside its column sizes")?;
                    at += 4;
                    u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize
                }
            };
            sizes.push(size);
        }
        let mut spans = Vec::with_capacity(sizes.len());
        for size in sizes {
            let end = at
                .checked_add(size)
                .filter(|&e| e <= sample.len())
                .ok_or_else(|| {
                    format!(
                        "its columns need more than its {} bytes: was the shard replaced?",
                        sample.len()
                    )
                })?;
            spans.push(at..end);
            at = end;
        }
        let image = sample.slice(spans[self.image].clone());
        let label = match &self.label {
            None => Label::None,
            Some((i, encoding)) => Label::Class(integer(&sample[spans[*i].clone()], encoding)?),
        };
        let label_column = self.label.as_ref().map(|(i, _)| *i);
        let members = spans
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != self.image && Some(i) != label_column)
            .map(|(i, span)| {
                (
                    Arc::from(self.names[i].as_str()),
                    sample.slice(span.clone()),
                )
            })
            .collect();
        Ok(Record {
            bytes: Some(image),
            members,
            label: Some(label),
        })
    }
}

/// An integer column's value.
fn integer(bytes: &[u8], encoding: &str) -> Result<i64, String> {
    let fixed = |n: usize| -> Result<[u8; 8], String> {
        let mut out = [0u8; 8];
        let got = bytes
            .get(..n)
            .filter(|_| bytes.len() == n)
            .ok_or_else(|| format!("a {encoding} label of {} bytes", bytes.len()))?;
        out[..n].copy_from_slice(got);
        Ok(out)
    };
    Ok(match encoding {
        "int" | "int64" => i64::from_le_bytes(fixed(8)?),
        "int32" => i64::from(i32::from_le_bytes(
            fixed(4)?[..4].try_into().map_err(|_| "int32")?,
        )),
        "int16" => i64::from(i16::from_le_bytes(
            fixed(2)?[..2].try_into().map_err(|_| "int16")?,
        )),
        "int8" => i64::from(fixed(1)?[0] as i8),
        "uint8" => i64::from(fixed(1)?[0]),
        "uint16" => i64::from(u16::from_le_bytes(
            fixed(2)?[..2].try_into().map_err(|_| "uint16")?,
        )),
        "uint32" => i64::from(u32::from_le_bytes(
            fixed(4)?[..4].try_into().map_err(|_| "uint32")?,
        )),
        "uint64" => i64::try_from(u64::from_le_bytes(fixed(8)?))
            .map_err(|_| "a uint64 label past i64".to_owned())?,
        "str_int" => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or("a str_int label that is not an integer")?,
        other => return Err(format!("a label encoded {other:?}")),
    })
}

/// The columns of `shard` to read: `image` (or the first of [`IMAGE_NAMES`] present) and
/// `label` (`Some("")`: none; `None`: the first of [`LABEL_NAMES`] present, or none).
pub(super) fn choose(
    shard: &ShardInfo,
    image: Option<&str>,
    label: Option<&str>,
) -> Result<Columns, String> {
    let names = &shard.column_names;
    let find = |n: &str| names.iter().position(|c| c == n);
    let listed = || {
        format!(
            "its columns are {names:?} encoded {:?}",
            shard.column_encodings
        )
    };
    let image = match image {
        Some(n) => find(n).ok_or_else(|| format!("no column {n:?} for images; {}", listed()))?,
        None => IMAGE_NAMES.iter().find_map(|n| find(n)).ok_or_else(|| {
            format!(
                "no image column among {IMAGE_NAMES:?}; name the column that holds the image \
                 bytes (image_column=..., --image-column); {}",
                listed()
            )
        })?,
    };
    let encoding = &shard.column_encodings[image];
    if !IMAGE_ENCODINGS.contains(&encoding.as_str()) {
        return Err(format!(
            "column {:?} is encoded {encoding:?}: images are read from columns encoded \
             {IMAGE_ENCODINGS:?} (an image file's bytes); \"pil\" holds raw pixels",
            names[image]
        ));
    }
    let label = match label {
        Some("") => None,
        Some(n) => Some(find(n).ok_or_else(|| format!("no label column {n:?}; {}", listed()))?),
        None => LABEL_NAMES.iter().find_map(|n| find(n)),
    };
    let label = match label {
        None => None,
        Some(i) => {
            let encoding = shard.column_encodings[i].clone();
            if !INT_ENCODINGS.contains(&encoding.as_str()) {
                return Err(format!(
                    "label column {:?} is encoded {encoding:?}: MDS labels are read as classes \
                     from integer encodings {INT_ENCODINGS:?}; choose another \
                     (label_column=...) or none (label_column=\"\")",
                    names[i]
                ));
            }
            Some((i, encoding))
        }
    };
    Ok(Columns {
        names: names.clone(),
        sizes: shard.column_sizes.clone(),
        image,
        label,
    })
}

/// How a shard's file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    None,
    Zstd,
}

/// A shard's samples as read at open.
pub(super) struct ShardSamples {
    pub(super) compression: Compression,
    /// The file's size.
    pub(super) size: u64,
    /// The raw shard's size (what a compressed one decompresses to).
    pub(super) raw_bytes: u64,
    /// Each sample's bytes in the file (raw); the whole file for each (compressed).
    pub(super) ranges: Vec<Range<u64>>,
}

/// A shard's samples: a raw shard's offset table read from its first bytes; a compressed
/// shard's count from the index (its table is inside the compressed bytes).
pub(super) async fn samples(
    store: &dyn Storage,
    key: &str,
    shard: &ShardInfo,
) -> Result<ShardSamples, FileError> {
    let n = shard.samples;
    if let Some(zip) = &shard.zip_data {
        // Each sample takes an offset of 4 bytes in the decompressed shard.
        if n.saturating_add(2).saturating_mul(4) > shard.raw_data.bytes {
            return Err(FileError::Invalid(format!(
                "{n} samples cannot fit in a shard of {} bytes",
                shard.raw_data.bytes
            )));
        }
        return Ok(ShardSamples {
            compression: Compression::Zstd,
            size: zip.bytes,
            raw_bytes: shard.raw_data.bytes,
            ranges: (0..n).map(|_| 0..zip.bytes).collect(),
        });
    }
    let size = shard.raw_data.bytes;
    let head = 4 * (n + 2);
    if head > size {
        return Err(FileError::Invalid(format!(
            "{n} samples need a table of {head} bytes; the shard has {size}"
        )));
    }
    let table = store
        .get_range(key, 0..head)
        .await
        .map_err(FileError::Storage)?;
    let ranges = offsets(&table, n, size).map_err(FileError::Invalid)?;
    Ok(ShardSamples {
        compression: Compression::None,
        size,
        raw_bytes: size,
        ranges,
    })
}

/// The sample ranges of a shard's table (`u32` count, then `count + 1` offsets), checked
/// against the count the index gives and the shard's size.
pub(super) fn offsets(table: &[u8], n: u64, size: u64) -> Result<Vec<Range<u64>>, String> {
    let word = |i: u64| -> Option<u64> {
        let at = usize::try_from(4 * i).ok()?;
        let b = table.get(at..at + 4)?;
        Some(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    let count = word(0).ok_or("the shard ends inside its sample count")?;
    if count != n {
        return Err(format!(
            "the shard holds {count} samples; the index says {n}"
        ));
    }
    // No more samples than the table read can hold: a count is not trusted with memory.
    let mut ranges = Vec::with_capacity((n as usize).min(table.len() / 4));
    let mut start = word(1).ok_or("the shard ends inside its offset table")?;
    if start < 4 * (n + 2) {
        return Err(format!(
            "sample 0 starts at byte {start}, inside the offset table"
        ));
    }
    for i in 0..n {
        let end = word(i + 2).ok_or("the shard ends inside its offset table")?;
        if end < start || end > size {
            return Err(format!(
                "sample {i} is bytes {start}..{end} of a shard of {size} bytes"
            ));
        }
        ranges.push(start..end);
        start = end;
    }
    Ok(ranges)
}

/// A shard's samples as the engine decodes them: a raw sample's bytes into its record, or
/// a compressed shard into all of its records.
#[derive(Debug)]
pub(super) struct Shard {
    pub(super) columns: Arc<Columns>,
    pub(super) compression: Compression,
    pub(super) raw_bytes: u64,
}

impl Shard {
    fn record(&self, sample: &Bytes) -> Result<Record, String> {
        self.columns.cut(sample)
    }
}

impl Records for Shard {
    fn decode(&self, _key: &str, _range: &Range<u64>, bytes: Bytes) -> Result<Vec<Record>, String> {
        match self.compression {
            Compression::None => Ok(vec![self.record(&bytes)?]),
            Compression::Zstd => {
                let capacity = usize::try_from(self.raw_bytes).map_err(|e| e.to_string())?;
                let raw = Bytes::from(
                    zstd::bulk::decompress(&bytes, capacity).map_err(|e| format!("zstd: {e}"))?,
                );
                let n = raw
                    .get(..4)
                    .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .ok_or("the decompressed shard ends inside its sample count")?;
                offsets(&raw, n, raw.len() as u64)?
                    .into_iter()
                    .map(|r| self.record(&raw.slice(r.start as usize..r.end as usize)))
                    .collect()
            }
        }
    }
}
