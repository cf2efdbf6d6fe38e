//! What a Parquet file's image column is read by: fetch units of one page (or of a
//! dictionary with the pages that use it), and their decoding into one record per row.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::{Record, Records};
use parquet::basic::{Encoding, PageType};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::ByteArrayType;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::serialized_reader::SerializedPageReader;

use super::columns::{read_all, spread};
use super::footer::Sparse;

/// A span of the image column read in one request, and the rows it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unit {
    /// Its row group.
    pub(super) row_group: usize,
    /// Its bytes in the file.
    pub(super) range: Range<u64>,
    /// Its rows, counted within the row group.
    pub(super) rows: Range<u64>,
}

/// How a file's image column is cut into units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// One unit per page, from the offset index.
    Pages,
    /// One unit per row group's column chunk: the file has no offset index, or its
    /// dictionary-encoded pages cannot be told from the others.
    ColumnChunks,
}

/// The units of leaf `column` of a file of `size` bytes, row group by row group; checks
/// the footer and offset index against the file as it goes (a lying index is an error, not
/// a read outside the file).
pub(super) fn units(
    meta: &ParquetMetaData,
    column: usize,
    size: u64,
) -> Result<(Vec<Unit>, Cut), String> {
    let mut units = Vec::new();
    let mut cut = Cut::Pages;
    for (rg, group) in meta.row_groups().iter().enumerate() {
        let rows = u64::try_from(group.num_rows())
            .map_err(|_| format!("row group {rg} has a negative row count"))?;
        if rows == 0 {
            continue;
        }
        let chunk = group.column(column);
        let Range { start, end } =
            super::footer::chunk_span(chunk, size).map_err(|e| format!("row group {rg}: {e}"))?;
        let locations = meta
            .page_index()
            .and_then(|p| p.offset_index(rg, column))
            .map(|o| o.page_locations());
        let pages = match locations {
            Some(l) if !l.is_empty() => {
                // Bytes before the first page are a dictionary page, flagged or not.
                let before = u64::try_from(l[0].offset).is_ok_and(|at| at > start);
                dictionary_pages(chunk, before).map(|dict| (l, dict))
            }
            _ => None,
        };
        let Some((locations, dict)) = pages else {
            cut = Cut::ColumnChunks;
            units.push(Unit {
                row_group: rg,
                range: start..end,
                rows: 0..rows,
            });
            continue;
        };
        let bounds = |i: usize| -> Result<(Range<u64>, u64), String> {
            let page = &locations[i];
            let at = u64::try_from(page.offset).ok();
            let len = u64::try_from(page.compressed_page_size)
                .ok()
                .filter(|&l| l > 0);
            let first = u64::try_from(page.first_row_index).ok();
            match (at, len, first) {
                (Some(at), Some(len), Some(first))
                    if at >= start && at.saturating_add(len) <= end && first < rows =>
                {
                    Ok((at..at + len, first))
                }
                _ => Err(format!(
                    "row group {rg}: the offset index puts page {i} at offset {}, {} bytes, \
                     first row {}, outside its column chunk (bytes {start}..{end}, {rows} rows)",
                    page.offset, page.compressed_page_size, page.first_row_index
                )),
            }
        };
        let mut last = (start, 0u64);
        let mut spans = Vec::with_capacity(locations.len());
        for i in 0..locations.len() {
            let (range, first) = bounds(i)?;
            if range.start < last.0 || (i == 0 && first != 0) || (i > 0 && first <= last.1) {
                return Err(format!(
                    "row group {rg}: the offset index's page {i} (offset {}, first row {first}) \
                     does not follow the page before it",
                    range.start
                ));
            }
            last = (range.end, first);
            spans.push((range, first));
        }
        let row_end = |i: usize| spans.get(i + 1).map_or(rows, |(_, f)| *f);
        // The pages that use the dictionary come first (writers fall back to plain once
        // the dictionary is full): they are one unit with it.
        let dict = dict.min(spans.len());
        if dict > 0 {
            units.push(Unit {
                row_group: rg,
                range: start..spans[dict - 1].0.end,
                rows: 0..row_end(dict - 1),
            });
        }
        for (i, (range, first)) in spans.iter().enumerate().skip(dict) {
            units.push(Unit {
                row_group: rg,
                range: range.clone(),
                rows: *first..row_end(i),
            });
        }
    }
    Ok((units, cut))
}

/// How many of a column chunk's data pages are dictionary-encoded: 0 without a
/// dictionary; `None` when it has one but its page statistics do not say.
fn dictionary_pages(chunk: &ColumnChunkMetaData, before_first_page: bool) -> Option<usize> {
    if chunk.dictionary_page_offset().is_none() && !before_first_page {
        return Some(0);
    }
    let stats = chunk.page_encoding_stats()?;
    let pages = stats
        .iter()
        .filter(|s| matches!(s.page_type, PageType::DATA_PAGE | PageType::DATA_PAGE_V2))
        .filter(|s| {
            matches!(
                s.encoding,
                Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY
            )
        })
        .map(|s| usize::try_from(s.count).unwrap_or(0))
        .sum();
    Some(pages)
}

/// The member columns' values of a file's rows, handed with each row's image.
#[derive(Debug, Default)]
pub(super) struct RowMembers {
    /// Row of the file each row group starts at.
    pub(super) group_starts: Vec<u64>,
    /// Each member column's name and values, by row of the file.
    pub(super) columns: Vec<(Arc<str>, Vec<Option<Bytes>>)>,
}

/// A file's image column as the engine decodes it: any of its units into one record per
/// row, each item naming its unit by its range and its row by its slot.
#[derive(Debug)]
pub(super) struct ImageColumn {
    pub(super) meta: Arc<ParquetMetaData>,
    pub(super) column: usize,
    pub(super) size: u64,
    pub(super) units: Vec<Unit>,
    /// Indexes of `units` by range start (row groups need not be in byte order).
    by_start: Vec<usize>,
    members: RowMembers,
}

impl ImageColumn {
    pub(super) fn new(
        meta: Arc<ParquetMetaData>,
        column: usize,
        size: u64,
        units: Vec<Unit>,
        members: RowMembers,
    ) -> Self {
        let mut by_start: Vec<usize> = (0..units.len()).collect();
        by_start.sort_by_key(|&i| units[i].range.start);
        Self {
            meta,
            column,
            size,
            units,
            by_start,
            members,
        }
    }

    fn decode_unit(&self, unit: &Unit, bytes: Bytes) -> Result<Vec<Record>, String> {
        let group = self.meta.row_group(unit.row_group);
        let chunk = group.column(self.column);
        // Before the parquet crate allocates what a page header claims.
        super::page_header::check_chunk(&bytes, chunk)?;
        let rows = usize::try_from(group.num_rows()).map_err(|e| e.to_string())?;
        let locations = self
            .meta
            .page_index()
            .and_then(|p| p.offset_index(unit.row_group, self.column))
            .map(|o| o.page_locations().clone());
        let sparse = Sparse {
            size: self.size,
            at: unit.range.start,
            bytes,
        };
        let pages = SerializedPageReader::new(Arc::new(sparse), chunk, rows, locations)
            .map_err(|e| e.to_string())?;
        let descr = chunk.column_descr_ptr();
        let max_def = descr.max_def_level();
        let mut reader = ColumnReaderImpl::<ByteArrayType>::new(descr, Box::new(pages));
        let skip = unit.rows.start as usize;
        let skipped = reader.skip_records(skip).map_err(|e| e.to_string())?;
        if skipped != skip {
            return Err(format!("the row group ends after {skipped} rows of {skip}"));
        }
        let count = (unit.rows.end - unit.rows.start) as usize;
        // Not sized from the index: a count is not trusted with memory.
        let mut defs = Vec::with_capacity(count.min(1 << 16));
        let values = read_all(&mut reader, count, &mut defs)?;
        // A page holding more rows than the offset index gives it would pair later images
        // with earlier rows' labels: the rest of the unit must be empty. (Reading on past
        // the unit's bytes fails, which is the end of it.)
        let (mut more_defs, mut more) = (Vec::new(), Vec::new());
        if let Ok((extra, _, _)) = reader.read_records(1, Some(&mut more_defs), None, &mut more)
            && extra > 0
        {
            return Err(format!(
                "its pages hold more than the {count} rows the offset index gives them: the \
                 index does not describe the file"
            ));
        }
        let first = self
            .members
            .group_starts
            .get(unit.row_group)
            .map_or(0, |s| s + unit.rows.start) as usize;
        Ok(spread(values, &defs, max_def, count)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| Record {
                bytes: v.map(|v| Bytes::copy_from_slice(v.data())),
                members: self
                    .members
                    .columns
                    .iter()
                    .filter_map(|(name, values)| {
                        let value = values.get(first + i)?.clone()?;
                        Some((Arc::clone(name), value))
                    })
                    .collect(),
                label: None,
            })
            .collect())
    }
}

impl Records for ImageColumn {
    fn decode(&self, _key: &str, range: &Range<u64>, bytes: Bytes) -> Result<Vec<Record>, String> {
        let at = self
            .by_start
            .partition_point(|&i| self.units[i].range.start < range.start);
        let unit = self
            .by_start
            .get(at)
            .map(|&i| &self.units[i])
            .filter(|u| u.range == *range)
            .ok_or_else(|| "no page of the image column starts here".to_owned())?;
        let rows = &unit.rows;
        super::columns::without_panics(|| self.decode_unit(unit, bytes)).map_err(|cause| {
            format!(
                "row group {}, rows {}..{} of it: {cause}",
                unit.row_group, rows.start, rows.end
            )
        })
    }
}
