//! Generated datasets as MDS shards, as MosaicML Streaming's MDSWriter writes them without
//! compression (`loader_core::mds::MdsWriter`): `image` encoded `jpeg`, `label` encoded `int`.

use std::path::Path;

use loader_core::mds::{MdsColumn, MdsWriter};
use loader_testkit::{DatasetItem, DatasetSpec};

use crate::Result;

/// Write `spec` as raw MDS shards and their `index.json` under `dir`.
pub fn write_mds(spec: &DatasetSpec, dir: &Path, progress: bool) -> Result<Vec<DatasetItem>> {
    if spec.images == 0 {
        return Err("--images must be at least 1".into());
    }
    let bar = crate::parallel::bar(spec.images, "images", progress);
    let samples = crate::parallel::parallel(spec.images, &bar, |i| {
        let (key, label) = spec.item(i);
        let image = spec.encode(i)?;
        Ok((key, label, image))
    })?;
    bar.finish_and_clear();
    let columns = vec![
        MdsColumn::variable("image", "jpeg"),
        MdsColumn::fixed("label", "int", 8),
    ];
    let mut writer = MdsWriter::create(dir, columns)?;
    let mut items = Vec::with_capacity(samples.len());
    for (key, label, image) in samples {
        writer.write(&[&image, &(label as i64).to_le_bytes()])?;
        items.push(DatasetItem {
            key,
            label,
            size: image.len() as u64,
        });
    }
    writer.finish()?;
    Ok(items)
}
