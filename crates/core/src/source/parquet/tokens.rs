//! Parquet files whose rows hold token ids, as Hugging Face `datasets` writes a tokenized
//! dataset (`input_ids`, a list of integers a row): each row a document, each row group's
//! column chunk a token file read whole (its pages are compressed, so no block is a range of
//! them) and decoded once for all its blocks. The footer alone gives a row group's tokens
//! (the chunk's value count), so blocks are counted at open without reading a page; the
//! documents' lengths come with the decoded ids, and must add up to that count.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use loader_scheduler::{Record, Records};
use loader_storage::{DynStorage, ObjectMeta, Storage};
use parquet::basic::{LogicalType, Type as PhysicalType};
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{DataType, Int32Type, Int64Type};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::SchemaDescriptor;

use super::columns::without_panics;
use super::footer::{self, Sparse, chunk_span};
use super::{Keep, Parquet, failed, read_span, save_spans};
use crate::source::columns::default_token_column;
use crate::source::error::{Result as SourceResult, SourceError};
use crate::source::index::Dataset;
use crate::tokens::{Blocking, Documents, Encoded, Placement, TokenFile, TokenType, block_record};

impl Parquet {
    /// The token dataset in the files `metas` describe: each file's footer read (the
    /// column chunks' value counts give its blocks), its row groups' token columns read
    /// when their blocks are loaded.
    pub(super) async fn load_tokens(
        &self,
        store: &DynStorage,
        metas: Vec<ObjectMeta>,
        blocking: crate::tokens::Blocking,
        vocab: Option<u64>,
    ) -> SourceResult<Dataset> {
        if self.columns.image.is_some() || self.columns.label.is_some() || !self.members.is_empty()
        {
            return Err(SourceError::Invalid(
                "source.block_size reads Parquet rows as token ids: leave source.image_column, \
                 source.label_column and source.member_columns unset"
                    .into(),
            ));
        }
        let name = store.name();
        let column = self.columns.tokens.as_deref();
        let per_file: Vec<Vec<_>> = futures::stream::iter(metas)
            .map(|meta| async move {
                let problem = |problem: String| SourceError::Parquet {
                    file: meta.key.clone(),
                    store: name.to_owned(),
                    problem,
                };
                // The footer through the cache directory, as an image file's open reads it:
                // the next run's open of an unchanged file makes no request.
                let cached = self.cached_spans(name, &meta).await;
                let version = meta.version.as_deref();
                let footer = footer::read_metadata(meta.size, |range| {
                    read_span(
                        &**store,
                        &meta.key,
                        version,
                        cached.as_deref(),
                        range,
                        Keep::Yes,
                    )
                })
                .await
                .map_err(|e| failed(e, problem))?;
                save_spans(cached).await;
                open_file(&meta.key, footer, meta.size, column, blocking, vocab).map_err(problem)
            })
            .buffered(self.concurrency)
            .try_collect()
            .await?;
        let files = crate::tokens::TokenFiles::numbered(per_file.into_iter().flatten().collect())
            .map_err(|e| SourceError::Invalid(format!("{name}: {e}")))?;
        Dataset::from_tokens(files)
    }
}

/// The token files of the Parquet file at `key` whose footer is `footer`: its token column
/// (`column`, else the one its schema names so) cut by `blocking`, one file per row group.
pub(super) fn open_file(
    key: &str,
    footer: ParquetMetaData,
    size: u64,
    column: Option<&str>,
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<Vec<(Arc<str>, TokenFile)>, String> {
    let chosen = choose(footer.file_metadata().schema_descr(), column)?;
    files(
        &Arc::from(key),
        &Arc::new(footer),
        size,
        chosen,
        blocking,
        vocab,
    )
}

/// The most bytes one row group's decoding may take: it is decoded whole (two levels, a
/// value and the id a slot, then each block's record), its blocks held until read.
const MAX_DECODED: u64 = 512 << 20;

/// Bytes a decoded id takes at most while its row group is decoded, besides its own bytes
/// twice (the ids, then the records): two `i16` levels and an `i64` value.
const DECODE_OVERHEAD: u64 = 12;

/// The leaf holding the ids of a list column named `name` (or the first of
/// [`TOKEN_NAMES`](crate::source::columns::TOKEN_NAMES) holding integers), and how it stores
/// them; refused when it is no list of integers.
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
        None => default_token_column(find, |i| id_type(schema, i).is_some(), listed)?,
    };
    let descr = schema.column(column);
    let dtype = id_type(schema, column);
    match dtype {
        Some(dtype) => Ok((column, dtype)),
        None => Err(format!(
            "column {} is {:?} (repeated {} deep): token ids are read from a list of \
             integers a row, as `datasets` writes `input_ids`",
            descr.path().string(),
            descr.physical_type(),
            descr.max_rep_level()
        )),
    }
}

/// How leaf `column` stores ids, when it is a list of integers a row.
fn id_type(schema: &SchemaDescriptor, column: usize) -> Option<TokenType> {
    let descr = schema.column(column);
    if descr.max_rep_level() != 1 {
        return None;
    }
    match (descr.physical_type(), descr.logical_type_ref()) {
        (_, Some(LogicalType::Integer(int))) => {
            let sign = if int.is_signed { "" } else { "u" };
            TokenType::from_name(&format!("{sign}int{}", int.bit_width))
        }
        (PhysicalType::INT32, None) => Some(TokenType::I32),
        (PhysicalType::INT64, None) => Some(TokenType::I64),
        _ => None,
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
        let (rows, slots) = match (
            u64::try_from(group.num_rows()),
            u64::try_from(chunk.num_values()),
        ) {
            (Ok(rows), Ok(slots)) => (rows, slots),
            _ => return Err(format!("row group {rg} claims a negative count")),
        };
        if rows == 0 {
            continue;
        }
        // A list's slots are its ids and, for an empty or null list, one null: the
        // statistics' null count takes those out (a file without them has none).
        let nulls = chunk
            .statistics()
            .and_then(|s| s.null_count_opt())
            .unwrap_or(0);
        // And each such slot is a row of no document (a null id is refused when read).
        let tokens = slots.saturating_sub(nulls);
        // A row group is decoded whole, for all its blocks at once.
        let decoded = slots.saturating_mul(DECODE_OVERHEAD + 2 * dtype.size());
        if decoded > MAX_DECODED {
            return Err(format!(
                "row group {rg} holds {slots} ids, which take more than the {} MiB a row \
                 group may be decoded into at once; write the file in smaller row groups \
                 (datasets' to_parquet(batch_size=...), pyarrow's row_group_size=...)",
                MAX_DECODED >> 20
            ));
        }
        let span = chunk_span(chunk, size).map_err(|e| format!("row group {rg}: {e}"))?;
        // The counts are the footer's claims: the decoded ids must add up to them.
        let Ok(documents) = Documents::from_lengths([tokens]) else {
            continue; // rows of empty lists: no token, no block
        };
        let records = Arc::new(RowGroup {
            meta: Arc::clone(meta),
            row_group: rg,
            column,
            size,
            dtype,
            blocking,
            tokens,
            documents: rows.saturating_sub(nulls),
        });
        out.push((
            Arc::clone(key),
            TokenFile {
                dtype,
                documents,
                placement: Placement::Encoded(Encoded {
                    span,
                    records,
                    documents: rows.saturating_sub(nulls),
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
    /// The ids the footer says it holds.
    tokens: u64,
    /// The rows holding ids, as the footer says.
    documents: u64,
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
        // Before the parquet crate allocates what a page header claims.
        super::page_header::check_chunk(&bytes, chunk)?;
        let rows = usize::try_from(group.num_rows()).map_err(|e| e.to_string())?;
        let sparse = Sparse {
            size: self.size,
            at: range.start,
            bytes,
        };
        let pages = SerializedPageReader::new(Arc::new(sparse), chunk, rows, None)
            .map_err(|e| e.to_string())?;
        let slots = u64::try_from(chunk.num_values()).map_err(|e| e.to_string())?;
        let pages = Bounded { pages, left: slots };
        let descr = chunk.column_descr_ptr();
        let max_def = descr.max_def_level();
        // An absent id in a present list, when ids are optional: a null id, refused.
        let null_id = descr.self_type().is_optional().then(|| max_def - 1);
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
        // Each row's ids; an empty or null list is a row of none (no document).
        let mut lengths: Vec<u64> = Vec::with_capacity(rows);
        for (&def, &rep) in defs.iter().zip(&reps) {
            let row = lengths.len();
            if rep == 0 {
                lengths.push(0);
            } else if lengths.is_empty() {
                return Err("its first level goes on a row that never began".into());
            }
            if def == max_def {
                if let Some(last) = lengths.last_mut() {
                    *last += 1;
                }
            } else if Some(def) == null_id || rep != 0 {
                return Err(format!("row {row} holds a null id"));
            }
        }
        let ids: u64 = lengths.iter().sum();
        let documents = lengths.iter().filter(|&&n| n > 0).count() as u64;
        if ids != values.len() as u64
            || ids != self.tokens
            || lengths.len() != rows
            || documents != self.documents
        {
            return Err(format!(
                "{} ids ({ids} by the levels) in {} rows, {documents} of them not empty, \
                 where the footer says {} in {rows}, {} not empty",
                values.len(),
                lengths.len(),
                self.tokens,
                self.documents
            ));
        }
        Ok((values, lengths))
    }

    /// Each block's record, from every row's ids as little-endian bytes of the column's
    /// type (`bytes`, `size` each) and the rows' lengths.
    fn blocks(&self, ids: &[u8], lengths: Vec<u64>) -> Result<Vec<Record>, String> {
        // Rows of no id are no documents (document ids count those that are).
        let lengths = lengths.into_iter().filter(|&n| n > 0);
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
                // Narrower types are stored in INT32: a value past the type's range is a
                // writer's error, not an id to cut to its low bytes.
                let range = stored_range(self.dtype);
                if let Some(v) = values.iter().find(|&&v| !range.contains(&i64::from(v))) {
                    return Err(format!(
                        "{v} is no {} id, as the column's type says its ids are",
                        self.dtype.name()
                    ));
                }
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

/// The INT32 values that are ids of `dtype` (whose narrower types Parquet stores in
/// INT32; a `uint32` as the same 32 bits).
fn stored_range(dtype: TokenType) -> std::ops::RangeInclusive<i64> {
    match dtype {
        TokenType::U8 => 0..=i64::from(u8::MAX),
        TokenType::I8 => i64::from(i8::MIN)..=i64::from(i8::MAX),
        TokenType::U16 => 0..=i64::from(u16::MAX),
        TokenType::I16 => i64::from(i16::MIN)..=i64::from(i16::MAX),
        _ => i64::from(i32::MIN)..=i64::from(i32::MAX),
    }
}

/// A column chunk's pages, refused once their values pass the footer's count: a page
/// header claiming more would have them decoded (and held) before any count is checked.
struct Bounded<P> {
    pages: P,
    /// Values the footer leaves for the pages still to come.
    left: u64,
}

impl<P: PageReader> Iterator for Bounded<P> {
    type Item = parquet::errors::Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<P: PageReader> PageReader for Bounded<P> {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        let page = self.pages.get_next_page()?;
        if let Some(page) = &page {
            let n = u64::from(page.num_values());
            let data = !matches!(page, Page::DictionaryPage { .. });
            // A dictionary holds at most as many distinct ids as there are values.
            let bound = if data { self.left } else { self.left.max(1) };
            if n > bound {
                return Err(parquet::errors::ParquetError::General(format!(
                    "a page of {n} values, past the {} the footer leaves it",
                    self.left
                )));
            }
            if data {
                self.left -= n;
            }
        }
        Ok(page)
    }

    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        self.pages.peek_next_page()
    }

    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        self.pages.skip_next_page()
    }
}
