//! MDS shards whose samples hold token ids, as llm-foundry writes them
//! (`{'tokens': 'ndarray:int32'}`): each sample a document, each raw shard a token file
//! whose documents lie between the samples' headers. Where a document's ids start and how
//! many it holds follow from the shard's offset table alone (read at open, as for images),
//! the sample's size and the columns' encodings: the column is the only one of variable
//! size, or its shape is fixed. The table's read also takes the first sample's headers,
//! which must say what was worked out, so a layout read wrongly is refused, not read as
//! other tokens.

use std::ops::Range;
use std::sync::Arc;

use loader_storage::Storage;

use super::layout::{self, ShardInfo};
use crate::source::columns::default_token_column;
use crate::source::record_files::FileError;
use crate::tokens::{Blocking, Documents, Placement, TokenFile, TokenType};

/// Where a sample's token ids lie, from its shard's columns.
#[derive(Debug, Clone)]
pub(super) struct TokenColumn {
    name: String,
    dtype: TokenType,
    /// The ids a sample holds, when the encoding fixes its shape (no header is stored).
    fixed: Option<u64>,
    /// Variable-size columns: a sample opens with a `u32` size for each.
    variable: u64,
    /// A sample's bytes before the column: its size words and the columns before it.
    before: u64,
    /// A sample's bytes that are not the column's.
    others: u64,
}

impl TokenColumn {
    /// The token column of `shard`: `name`, or the first of [`TOKEN_NAMES`](crate::source::columns::TOKEN_NAMES) present;
    /// refused when its encoding is not an array of integers of a given type, or when
    /// where its ids start would differ from sample to sample in ways the table does not
    /// tell.
    pub(super) fn choose(shard: &ShardInfo, name: Option<&str>) -> Result<Self, String> {
        let names = &shard.column_names;
        let listed = || {
            format!(
                "its columns are {names:?} encoded {:?}",
                shard.column_encodings
            )
        };
        let find = |n: &str| names.iter().position(|c| c == n);
        let k = match name {
            Some(n) => find(n).ok_or_else(|| format!("no token column {n:?}; {}", listed()))?,
            None => default_token_column(
                find,
                |i| id_type(&shard.column_encodings[i]).is_some(),
                listed,
            )?,
        };
        let encoding = &shard.column_encodings[k];
        let dtype = id_type(encoding).ok_or_else(|| {
            format!(
                "column {:?} is encoded {encoding:?}: token ids are read from columns encoded \
                 ndarray:<integer type>, e.g. ndarray:int32 (as llm-foundry writes them), \
                 whose type is in the index, not in each sample",
                names[k]
            )
        })?;
        let fixed = match encoding.split(':').nth(2) {
            None => None,
            Some(shape) => Some(
                shape
                    .split(',')
                    .map(|d| d.trim().parse::<u64>().ok())
                    .try_fold(1u64, |n, d| n.checked_mul(d?))
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("column {:?}: a shape of {shape:?}", names[k]))?,
            ),
        };
        let sizes = &shard.column_sizes;
        let variable = sizes.iter().filter(|s| s.is_none()).count() as u64;
        if fixed.is_some_and(|n| {
            n.checked_mul(dtype.size())
                .is_none_or(|b| sizes[k] != Some(b))
        }) {
            return Err(format!(
                "column {:?} is encoded {encoding:?} but sized {:?} bytes",
                names[k], sizes[k]
            ));
        }
        let unknown: Vec<&String> = names
            .iter()
            .zip(sizes)
            .enumerate()
            .filter(|&(j, (_, s))| s.is_none() && j != k && (fixed.is_none() || j < k))
            .map(|(_, (n, _))| n)
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "columns {unknown:?} are of variable size, so where column {:?}'s ids start \
                 differs from sample to sample in a way the shard's table does not tell; \
                 write the ids in a shard of their own columns, or of fixed-size others",
                names[k]
            ));
        }
        // Sizes are the index's claims: summed without overflow, a sample too short for
        // them is refused when it is measured.
        let fixed_bytes = |range: Range<usize>| -> u64 {
            sizes[range]
                .iter()
                .fold(0u64, |sum, s| sum.saturating_add(s.unwrap_or(0)))
        };
        let before = (4 * variable).saturating_add(fixed_bytes(0..k));
        let others = before.saturating_add(fixed_bytes(k + 1..sizes.len()));
        Ok(Self {
            name: names[k].clone(),
            dtype,
            fixed,
            variable,
            before,
            others,
        })
    }

    /// Where sample `sample`'s ids start in the shard and how many it holds; for a column
    /// of variable shape, also the bytes of its header (`ndim | shape type`, then the
    /// shape).
    fn document(&self, sample: &Range<u64>) -> Result<(u64, u64, u64), String> {
        let len = sample.end - sample.start;
        let size = self.dtype.size();
        let column = len.checked_sub(self.others);
        let found = match (self.fixed, column) {
            // Variable columns after a fixed one add their bytes to what is measured here.
            (Some(n), Some(c)) if c == n * size || (self.variable > 0 && c > n * size) => {
                Some((0, n))
            }
            (None, Some(c)) => header_of(c, size),
            _ => None,
        };
        let (header, n) = found.ok_or_else(|| {
            format!(
                "a sample of {len} bytes does not hold a 1-D ndarray of {} ids in column \
                 {:?} beside its other columns' {} bytes",
                self.dtype.name(),
                self.name,
                self.others
            )
        })?;
        Ok((sample.start + self.before + header, n, header))
    }
}

/// The ids' type of a column encoded `ndarray:<integer type>[:shape]`.
fn id_type(encoding: &str) -> Option<TokenType> {
    let mut parts = encoding.split(':');
    match (parts.next(), parts.next()) {
        (Some("ndarray"), Some(dtype)) => TokenType::from_name(dtype),
        _ => None,
    }
}

/// The header length and ids of a 1-D array whose column takes `c` bytes of `size`-byte
/// ids: MDSWriter stores a byte (`ndim << 2 | shape type`) then the length in the smallest
/// unsigned type that holds it.
fn header_of(c: u64, size: u64) -> Option<(u64, u64)> {
    [1u64, 2, 4, 8].into_iter().find_map(|w| {
        let ids = c.checked_sub(1 + w)?;
        let n = ids / size;
        (ids % size == 0 && n > 0 && shape_width(n) == w).then_some((1 + w, n))
    })
}

/// The bytes MDSWriter stores a dimension `n` in.
fn shape_width(n: u64) -> u64 {
    match n {
        0..0x100 => 1,
        0x100..0x1_0000 => 2,
        0x1_0000..0x1_0000_0000 => 4,
        _ => 8,
    }
}

/// The token file raw shard `shard` (at `key`) is: its table read by one ranged GET with
/// the first sample's headers, which must say what the table and columns gave.
pub(super) async fn token_file(
    store: &dyn Storage,
    key: &str,
    shard: &ShardInfo,
    column: &TokenColumn,
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<(Arc<str>, TokenFile), FileError> {
    if shard.compressed() {
        return Err(FileError::Invalid(
            "its samples are zstd-compressed, so a block's ids are not a range of the shard; \
             token shards are read by range: write them with compression=None, or read \
             them as LitData TokensLoader chunks or Megatron files (loader tokenize writes \
             those)"
                .into(),
        ));
    }
    let (n, size) = (shard.sample_count(), shard.raw_bytes());
    let table = 4 * (n + 2);
    if table > size {
        return Err(FileError::Invalid(format!(
            "{n} samples need a table of {table} bytes; the shard has {size}"
        )));
    }
    // The first sample's size words and header too, when they lie close behind the table
    // (MDSWriter writes its columns' JSON between them).
    let wanted = column.before.saturating_add(9);
    let head = table
        .saturating_add(HEADROOM)
        .saturating_add(wanted)
        .min(size);
    let bytes = store
        .get_range(key, 0..head)
        .await
        .map_err(FileError::Storage)?;
    let ranges = layout::offsets(&bytes, n, size).map_err(FileError::Invalid)?;
    let mut starts = Vec::with_capacity(ranges.len());
    let mut lengths = Vec::with_capacity(ranges.len());
    for (i, sample) in ranges.iter().enumerate() {
        let (start, ids, header) = column
            .document(sample)
            .map_err(|p| FileError::Invalid(format!("sample {i}: {p}")))?;
        if i == 0 {
            let end = sample.start.saturating_add(wanted).min(sample.end);
            let first = match bytes.get(sample.start as usize..end as usize) {
                Some(first) => first.to_vec(),
                None => store
                    .get_range(key, sample.start..end)
                    .await
                    .map_err(FileError::Storage)?
                    .to_vec(),
            };
            first_headers(&first, column, ids, header)
                .map_err(|p| FileError::Invalid(format!("sample 0: {p}")))?;
        }
        starts.push(start);
        lengths.push(ids);
    }
    let documents =
        Documents::from_lengths(lengths).map_err(|e| FileError::Invalid(e.to_string()))?;
    let file = TokenFile {
        dtype: column.dtype,
        documents,
        placement: Placement::Each(starts.into()),
        blocking,
        vocab,
        first_document: 0,
    };
    Ok((Arc::from(key), file))
}

/// Bytes read past a shard's table, for the columns' JSON MDSWriter writes there, so the
/// first sample's headers come with the table in one request.
const HEADROOM: u64 = 2048;

/// Checks the first sample's headers in `bytes` (its first bytes): the column's size word
/// and, for a variable shape, `ndim` 1 and the length `ids`.
fn first_headers(bytes: &[u8], column: &TokenColumn, ids: u64, header: u64) -> Result<(), String> {
    let word = |from: u64, width: u64| -> Option<u64> {
        let from = usize::try_from(from).ok()?;
        let b = bytes.get(from..from.checked_add(width as usize)?)?;
        let mut out = [0u8; 8];
        out[..b.len()].copy_from_slice(b);
        Some(u64::from_le_bytes(out))
    };
    if column.fixed.is_some() {
        return Ok(());
    }
    // The token column is then the only variable one: its size is the first word.
    let said = word(0, 4).ok_or("the shard ends inside its headers")?;
    let column_bytes = header + ids * column.dtype.size();
    let width = header - 1;
    let code = word(column.before, 1).ok_or("the shard ends inside its headers")?;
    let length =
        word(column.before.saturating_add(1), width).ok_or("the shard ends inside its headers")?;
    let shape_code = width.trailing_zeros() as u64;
    if column.variable != 1
        || said != column_bytes
        || code != (1 << 2 | shape_code)
        || length != ids
    {
        return Err(format!(
            "its headers (column size {said}, ndarray header {code:#04x}, length {length}) are \
             not those of a 1-D array of {ids} {} ids in {column_bytes} bytes: is column {:?} \
             of another shape?",
            column.dtype.name(),
            column.name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_columns_size_gives_its_ids_and_header() {
        // 3 int32 ids: 1 + 1 + 12 bytes; 300: 1 + 2 + 1200; 70,000: 1 + 4 + 280,000.
        assert_eq!(header_of(14, 4), Some((2, 3)));
        assert_eq!(header_of(1203, 4), Some((3, 300)));
        assert_eq!(header_of(280_005, 4), Some((5, 70_000)));
        assert_eq!(header_of(2 + 255 * 2, 2), Some((2, 255)));
        assert_eq!(header_of(3 + 256 * 2, 2), Some((3, 256)));
        // No width whose count fits it: not a 1-D array of these ids.
        assert_eq!(header_of(15, 4), None);
        assert_eq!(header_of(2, 4), None);
        // Every size: what is found accounts for every byte, in the width MDSWriter picks.
        for size in [1, 2, 4, 8] {
            for c in (0..70_000).chain(u64::MAX - 70..=u64::MAX) {
                if let Some((header, n)) = header_of(c, size) {
                    assert_eq!(header + n * size, c, "c={c} size={size}");
                    assert_eq!(shape_width(n), header - 1);
                }
            }
        }
    }
}
