//! A Parquet file's footer and offset index, read by ranged GETs from its end.

use std::ops::Range;

use bytes::{Buf, Bytes};
use parquet::errors::ParquetError;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader,
};
use parquet::file::reader::{ChunkReader, Length};

use loader_storage::Storage;

/// Bytes read from a file's end at first: the footer of a file of a few hundred row groups
/// and its offset index usually fit, so most files cost one GET.
const FIRST_READ: u64 = 64 << 10;

/// Reads past the first that a footer may ask for (footer, then page index).
const MAX_READS: usize = 4;

/// One span of a file at its offset in it: what parquet's readers see of a file we read
/// only in part. A read outside it is an error, never a fetch.
#[derive(Debug, Clone)]
pub(super) struct Sparse {
    /// The file's size.
    pub(super) size: u64,
    /// Where the span starts in the file.
    pub(super) at: u64,
    /// Its bytes.
    pub(super) bytes: Bytes,
}

impl Sparse {
    fn slice(&self, start: u64, len: Option<usize>) -> parquet::errors::Result<Bytes> {
        let held = self.bytes.len();
        let from = start
            .checked_sub(self.at)
            .and_then(|f| usize::try_from(f).ok())
            .filter(|&f| f <= held);
        let to = from.and_then(|f| match len {
            Some(n) => f.checked_add(n).filter(|&t| t <= held),
            None => Some(held),
        });
        match (from, to) {
            (Some(from), Some(to)) => Ok(self.bytes.slice(from..to)),
            _ => Err(ParquetError::EOF(format!(
                "bytes {start}..{} were not read with this part of the file (of {} bytes): \
                 the file's metadata points outside the span it describes",
                len.map_or(start, |n| start.saturating_add(n as u64)),
                self.size
            ))),
        }
    }
}

impl Length for Sparse {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for Sparse {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.slice(start, None)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.slice(start, Some(length))
    }
}

/// The footer (with page encoding statistics in full) and, when the file has one, the
/// offset index of a file of `size` bytes, whose spans `fetch` reads. Errors are parquet's,
/// or the fetch's.
pub(super) async fn read_metadata<F, Fut>(
    size: u64,
    fetch: F,
) -> Result<ParquetMetaData, FooterError>
where
    F: Fn(Range<u64>) -> Fut,
    Fut: std::future::Future<Output = Result<Bytes, FooterError>>,
{
    let options = ParquetMetaDataOptions::new().with_encoding_stats_as_mask(false);
    let mut reader = ParquetMetaDataReader::new()
        .with_column_index_policy(PageIndexPolicy::Skip)
        .with_offset_index_policy(PageIndexPolicy::Optional)
        .with_metadata_options(Some(options));
    let mut want = FIRST_READ.min(size);
    for _ in 0..MAX_READS {
        let range = size - want..size;
        // parquet's sized readers take the file's tail, at offsets from its start.
        let tail = fetch(range.clone()).await?;
        // parquet's thrift decoding of a damaged footer must be an error, not a panic.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if reader.has_metadata() {
                reader.read_page_indexes_sized(&tail, size)
            } else {
                reader.try_parse_sized(&tail, size)
            }
        }))
        .unwrap_or_else(|_| {
            Err(ParquetError::General(
                "the footer's decoder failed on it".into(),
            ))
        });
        match result {
            Ok(()) => return reader.finish().map_err(FooterError::Parquet),
            Err(ParquetError::NeedMoreData(needed)) if (needed as u64) > want => {
                want = (needed as u64).min(size);
            }
            Err(ParquetError::NeedMoreDataRange(r)) if r.start < range.start => {
                want = size - r.start.min(size);
            }
            Err(e) => return Err(FooterError::Parquet(e)),
        }
    }
    Err(FooterError::Parquet(ParquetError::General(format!(
        "the footer asked for more bytes {MAX_READS} times over"
    ))))
}

/// The bytes of a column chunk in a file of `size` bytes, checked: parquet's own
/// `byte_range` panics on the negative offsets a damaged footer can hold.
pub(super) fn chunk_span(
    chunk: &parquet::file::metadata::ColumnChunkMetaData,
    size: u64,
) -> Result<Range<u64>, String> {
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or(chunk.data_page_offset());
    let len = chunk.compressed_size();
    let span = u64::try_from(start)
        .ok()
        .zip(u64::try_from(len).ok())
        .filter(|&(_, l)| l > 0 && chunk.data_page_offset() >= 0)
        .and_then(|(s, l)| Some(s..s.checked_add(l)?))
        .filter(|r| r.end <= size);
    span.ok_or_else(|| {
        format!(
            "its column chunk {} at offset {start}, {len} bytes, is outside the file of {size} \
             bytes",
            chunk.column_path()
        )
    })
}

/// A span of the file, checked against the version the listing saw when there is one.
pub(super) async fn get(
    store: &dyn Storage,
    key: &str,
    range: Range<u64>,
    version: Option<&str>,
) -> Result<Bytes, FooterError> {
    let bytes = match version {
        Some(v) => store.get_range_if(key, range.clone(), v).await,
        None => store.get_range(key, range.clone()).await,
    }
    .map_err(FooterError::Storage)?;
    if bytes.len() as u64 != range.end - range.start {
        return Err(FooterError::Parquet(ParquetError::EOF(format!(
            "asked for bytes {}..{}, the store sent {}: the file is shorter than listed",
            range.start,
            range.end,
            bytes.len()
        ))));
    }
    Ok(bytes)
}

/// Why a footer (or a span read at open) could not be had.
#[derive(Debug)]
pub(super) enum FooterError {
    Storage(loader_storage::Error),
    Parquet(ParquetError),
}
