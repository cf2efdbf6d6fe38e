//! Generated datasets as Parquet files in Hugging Face's layout (`loader_core::parquet::ImageWriter`), row groups
//! of 100 rows (what `datasets` writes for images), with or without an offset index.

use std::fs::File;
use std::path::Path;

use loader_testkit::{DatasetItem, DatasetSpec};

use loader_core::parquet::{ImageRow, ImageWriter, writer_properties};

use crate::Result;

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
    let tmp = path.with_extension("parquet.partial");
    let props = writer_properties(page_index)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let mut writer = ImageWriter::new(File::create(&tmp)?, props, true)?;
    let mut items = Vec::with_capacity(rows.len());
    let all: Vec<usize> = rows.collect();
    for group in all.chunks(ROW_GROUP_ROWS) {
        let mut rows = Vec::with_capacity(group.len());
        for &i in group {
            let (key, label) = spec.item(i);
            let bytes = spec.encode(i)?;
            items.push(DatasetItem {
                key: key.clone(),
                label,
                size: bytes.len() as u64,
            });
            rows.push(ImageRow {
                image: bytes.into(),
                path: key,
                label: Some(label as i64),
            });
        }
        writer.write_group(rows)?;
    }
    writer.finish()?;
    std::fs::rename(&tmp, path)?;
    Ok(items)
}
