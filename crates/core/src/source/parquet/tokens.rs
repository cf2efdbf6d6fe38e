//! Parquet files whose rows hold token ids, as Hugging Face `datasets` writes a tokenized
//! dataset (`input_ids`, a list of integers a row): each row a document, each row group's
//! column chunk a token file read whole (its pages are compressed, so no block is a range of
//! them) and decoded once for all its blocks. The footer alone gives a row group's tokens
//! (the chunk's value count), so blocks are counted at open without reading a page; the
//! documents' lengths come with the decoded ids, and must add up to that count.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::{Record, Records};
use parquet::basic::{LogicalType, Type as PhysicalType};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{DataType, Int32Type, Int64Type};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::SchemaDescriptor;

use super::columns::without_panics;
use super::footer::{Sparse, chunk_span};
use crate::source::columns::TOKEN_NAMES;
use crate::tokens::{Blocking, Documents, Encoded, Placement, TokenFile, TokenType, block_record};

/// The most bytes of ids one row group may decode into: it is decoded whole, its blocks
/// held until read.
const MAX_DECODED: u64 = 512 << 20;

/// The leaf holding the ids of a list column named `name` (or the first of
/// [`TOKEN_NAMES`]), and how it stores them; refused when it is no list of integers.
pub(super) fn choose(
    schema: &SchemaDescriptor,
    name: Option<&str>,
) -> Result<(usize, TokenType), String> {
    let top = |i: usize| schema.column(i).path().parts()[0].clone();
    let find = |n: &str| (0..schema.num_columns()).find(|&i| top(i) == n);
    let listed = || {
        let names: Vec<String> = (0..schema.num_columns())
            .map(|i| schema.column(i).path().string())
            .collect();
        format!("its columns are {names:?}")
    };
    let column = match name {
        Some(n) => find(n).ok_or_else(|| format!("no token column {n:?}; {}", listed()))?,
        None => TOKEN_NAMES.iter().find_map(|n| find(n)).ok_or_else(|| {
            format!(
                "no token column among {TOKEN_NAMES:?}; name the column that holds the ids \
                 (source.token_column); {}",
                listed()
            )
        })?,
    };
    let descr = schema.column(column);
    let dtype = match (descr.physical_type(), descr.logical_type_ref()) {
        (_, Some(LogicalType::Integer(int))) => {
            let sign = if int.is_signed { "" } else { "u" };
            TokenType::from_name(&format!("{sign}int{}", int.bit_width))
        }
        (PhysicalType::INT32, None) => Some(TokenType::I32),
        (PhysicalType::INT64, None) => Some(TokenType::I64),
        _ => None,
    };
    match dtype {
        Some(dtype) if descr.max_rep_level() == 1 => Ok((column, dtype)),
        _ => Err(format!(
            "column {} is {:?} (repeated {} deep): token ids are read from a list of \
             integers a row, as `datasets` writes `input_ids`",
            descr.path().string(),
            descr.physical_type(),
            descr.max_rep_level()
        )),
    }
}

/// The token files of a file of `size` bytes whose footer is `meta`: one per row group
/// holding rows, keyed `key`.
pub(super) fn files(
    key: &Arc<str>,
    meta: &Arc<ParquetMetaData>,
    size: u64,
    (column, dtype): (usize, TokenType),
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<Vec<(Arc<str>, TokenFile)>, String> {
    let mut out = Vec::new();
    for (rg, group) in meta.row_groups().iter().enumerate() {
        let chunk = group.column(column);
        let (rows, tokens) = match (
            u64::try_from(group.num_rows()),
            u64::try_from(chunk.num_values()),
        ) {
            (Ok(rows), Ok(tokens)) => (rows, tokens),
            _ => return Err(format!("row group {rg} claims a negative count")),
        };
        if rows == 0 {
            continue;
        }
        // A row group is decoded whole, for all its blocks at once: its ids are held.
        if tokens.saturating_mul(dtype.size()) > MAX_DECODED {
            return Err(format!(
                "row group {rg} holds {tokens} ids, more than the {} MiB of them a row group \
                 is decoded into at once; write the file in smaller row groups (datasets' \
                 to_parquet(batch_size=...), pyarrow's row_group_size=...)",
                MAX_DECODED >> 20
            ));
        }
        let span = chunk_span(chunk, size).map_err(|e| format!("row group {rg}: {e}"))?;
        // The value count is the footer's claim: the decoded ids must add up to it.
        let documents = Documents::from_lengths([tokens])
            .map_err(|_| format!("row group {rg}: {rows} rows and no token"))?;
        let records = Arc::new(RowGroup {
            meta: Arc::clone(meta),
            row_group: rg,
            column,
            size,
            dtype,
            blocking,
        });
        out.push((
            Arc::clone(key),
            TokenFile {
                dtype,
                documents,
                placement: Placement::Encoded(Encoded {
                    span,
                    records,
                    documents: rows,
                }),
                blocking,
                vocab,
                first_document: 0,
            },
        ));
    }
    Ok(out)
}

/// One row group's token column: decoded into its rows' ids, then each block's record.
#[derive(Debug)]
struct RowGroup {
    meta: Arc<ParquetMetaData>,
    row_group: usize,
    column: usize,
    size: u64,
    dtype: TokenType,
    blocking: Blocking,
}

impl RowGroup {
    /// Every row's ids, as `T`'s values, and each row's length.
    fn read<T: DataType>(
        &self,
        range: &Range<u64>,
        bytes: Bytes,
    ) -> Result<(Vec<T::T>, Vec<u64>), String> {
        let group = self.meta.row_group(self.row_group);
        let chunk = group.column(self.column);
        let rows = usize::try_from(group.num_rows()).map_err(|e| e.to_string())?;
        let sparse = Sparse {
            size: self.size,
            at: range.start,
            bytes,
        };
        let pages = SerializedPageReader::new(Arc::new(sparse), chunk, rows, None)
            .map_err(|e| e.to_string())?;
        let descr = chunk.column_descr_ptr();
        let max_def = descr.max_def_level();
        let mut reader = ColumnReaderImpl::<T>::new(descr, Box::new(pages));
        let (mut values, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
        let mut read = 0;
        while read < rows {
            let (records, _, _) = reader
                .read_records(rows - read, Some(&mut defs), Some(&mut reps), &mut values)
                .map_err(|e| e.to_string())?;
            if records == 0 {
                return Err(format!(
                    "the column chunk holds {read} rows where its row group says {rows}"
                ));
            }
            read += records;
        }
        let mut lengths: Vec<u64> = Vec::with_capacity(rows);
        for (&def, &rep) in defs.iter().zip(&reps) {
            if rep == 0 {
                lengths.push(0);
            }
            if def < max_def {
                return Err(format!(
                    "row {} holds a null or empty list, or a null id: no document",
                    lengths.len().saturating_sub(1)
                ));
            }
            if let Some(last) = lengths.last_mut() {
                *last += 1;
            }
        }
        let claimed = chunk.num_values();
        if values.len() as i64 != claimed || lengths.len() != rows {
            return Err(format!(
                "{} ids in {} rows, where the footer says {claimed} in {rows}",
                values.len(),
                lengths.len()
            ));
        }
        Ok((values, lengths))
    }

    /// Each block's record, from every row's ids as little-endian bytes of the column's
    /// type (`bytes`, `size` each) and the rows' lengths.
    fn blocks(&self, ids: &[u8], lengths: Vec<u64>) -> Result<Vec<Record>, String> {
        let documents = Documents::from_lengths(lengths).map_err(|e| e.to_string())?;
        let size = self.dtype.size() as usize;
        let count = self.blocking.blocks(documents.tokens());
        (0..count)
            .map(|i| {
                let block = self.blocking.block(&documents, i);
                let tokens = block.tokens.start as usize * size..block.tokens.end as usize * size;
                Ok(Record {
                    bytes: Some(block_record(&block, &ids[tokens])),
                    members: Vec::new(),
                    label: None,
                })
            })
            .collect()
    }
}

impl Records for RowGroup {
    fn decode(&self, _key: &str, range: &Range<u64>, bytes: Bytes) -> Result<Vec<Record>, String> {
        let size = self.dtype.size() as usize;
        without_panics(|| {
            // Ids as the column's type stores them: INT32 for types up to 32 bits (their
            // low bytes), INT64 for 64-bit ones.
            let (ids, lengths) = if size == 8 {
                let (values, lengths) = self.read::<Int64Type>(range, bytes)?;
                (
                    values
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect::<Vec<u8>>(),
                    lengths,
                )
            } else {
                let (values, lengths) = self.read::<Int32Type>(range, bytes)?;
                let ids = values
                    .iter()
                    .flat_map(|v| v.to_le_bytes().into_iter().take(size))
                    .collect();
                (ids, lengths)
            };
            self.blocks(&ids, lengths)
        })
        .map_err(|cause| format!("row group {}: {cause}", self.row_group))
    }
}
