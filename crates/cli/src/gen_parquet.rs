//! Generated datasets as Parquet files in Hugging Face's layout: an `image` struct of
//! `bytes` and `path` and an int64 `label`, row groups of 100 rows (what `datasets` writes
//! for images), uncompressed 1 MiB pages, with or without an offset index.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use loader_testkit::{DatasetItem, DatasetSpec};
use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::Result;

const SCHEMA: &str = "message schema {
    optional group image {
        optional binary bytes;
        optional binary path (STRING);
    }
    optional int64 label;
}";

/// Rows per row group: `datasets`' batch size for image datasets.
pub const ROW_GROUP_ROWS: usize = 100;

/// Write `spec` as `files` Parquet files (`part-00000.parquet`, ...) under `dir`, one per
/// core at a time; `page_index`: with an offset index (page-sized reads), or without one
/// (as pyarrow writes by default).
pub fn write_parquet(
    spec: &DatasetSpec,
    dir: &Path,
    files: usize,
    page_index: bool,
    progress: bool,
) -> Result<Vec<DatasetItem>> {
    if spec.images == 0 || files == 0 {
        return Err("--images and the number of Parquet files must be at least 1".into());
    }
    std::fs::create_dir_all(dir)?;
    let per_file = spec.images.div_ceil(files);
    let count = spec.images.div_ceil(per_file);
    let bar = crate::parallel::bar(count, "Parquet files", progress);
    let parts = crate::parallel::parallel(count, &bar, |f| {
        let rows = f * per_file..((f + 1) * per_file).min(spec.images);
        write_file(
            spec,
            &dir.join(format!("part-{f:05}.parquet")),
            rows,
            page_index,
        )
        .map_err(std::io::Error::other)
    });
    bar.finish_and_clear();
    Ok(parts?.into_iter().flatten().collect())
}

fn write_file(
    spec: &DatasetSpec,
    path: &Path,
    rows: std::ops::Range<usize>,
    page_index: bool,
) -> std::result::Result<Vec<DatasetItem>, Box<dyn std::error::Error + Send + Sync>> {
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        // Min and max of 100 KB images would only bloat every page header and the index.
        .set_statistics_enabled(EnabledStatistics::None)
        .set_data_page_size_limit(1 << 20)
        // A page ends once it holds about the limit: checked every few rows.
        .set_write_batch_size(4)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_offset_index_disabled(!page_index)
        .build();
    let tmp = path.with_extension("parquet.partial");
    let mut writer = SerializedFileWriter::new(File::create(&tmp)?, schema, Arc::new(props))?;
    let mut items = Vec::with_capacity(rows.len());
    let all: Vec<usize> = rows.collect();
    for group in all.chunks(ROW_GROUP_ROWS) {
        let mut images = Vec::with_capacity(group.len());
        let mut paths = Vec::with_capacity(group.len());
        let mut labels = Vec::with_capacity(group.len());
        for &i in group {
            let (key, label) = spec.item(i);
            let bytes = spec.encode(i)?;
            items.push(DatasetItem {
                key: key.clone(),
                label,
                size: bytes.len() as u64,
            });
            images.push(ByteArray::from(bytes));
            paths.push(ByteArray::from(key.into_bytes()));
            labels.push(label as i64);
        }
        let mut rg = writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut col) = rg.next_column()? {
            match (column, col.untyped()) {
                (0, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    w.write_batch(&images, Some(&vec![2; images.len()]), None)?;
                }
                (1, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    w.write_batch(&paths, Some(&vec![2; paths.len()]), None)?;
                }
                (2, ColumnWriter::Int64ColumnWriter(w)) => {
                    w.write_batch(&labels, Some(&vec![1; labels.len()]), None)?;
                }
                _ => return Err("the schema's columns changed".into()),
            }
            col.close()?;
            column += 1;
        }
        rg.close()?;
    }
    writer.close()?;
    std::fs::rename(&tmp, path)?;
    Ok(items)
}
