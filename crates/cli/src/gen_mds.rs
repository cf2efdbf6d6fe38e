//! Generated datasets as MDS shards, as MosaicML Streaming's MDSWriter writes them without
//! compression: `index.json`, and shards of at most 64 MiB (its default size limit), each
//! a sample count, `count + 1` offsets and the samples (`image` encoded `jpeg`, then
//! `label` encoded `int`, in the writer's sorted column order).

use std::path::Path;

use loader_testkit::{DatasetItem, DatasetSpec};

use crate::Result;

/// Streaming's default shard size limit.
const SIZE_LIMIT: usize = 1 << 26;

/// Write `spec` as raw MDS shards and their `index.json` under `dir`.
pub fn write_mds(spec: &DatasetSpec, dir: &Path, progress: bool) -> Result<Vec<DatasetItem>> {
    if spec.images == 0 {
        return Err("--images must be at least 1".into());
    }
    std::fs::create_dir_all(dir)?;
    let bar = crate::parallel::bar(spec.images, "images", progress);
    let samples = crate::parallel::parallel(spec.images, &bar, |i| {
        let (key, label) = spec.item(i);
        let image = spec.encode(i)?;
        Ok((key, label, image))
    })?;
    bar.finish_and_clear();
    let mut items = Vec::with_capacity(samples.len());
    let mut shards = Vec::new();
    let mut shard: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    let flush = |shard: &mut Vec<Vec<u8>>, shards: &mut Vec<serde_json::Value>| -> Result {
        if shard.is_empty() {
            return Ok(());
        }
        let name = format!("shard.{:05}.mds", shards.len());
        let n = shard.len();
        let head = 4 * (n + 2);
        let mut out = Vec::with_capacity(head + shard.iter().map(Vec::len).sum::<usize>());
        out.extend_from_slice(&u32::try_from(n)?.to_le_bytes());
        let mut at = head;
        out.extend_from_slice(&u32::try_from(at)?.to_le_bytes());
        for s in shard.iter() {
            at += s.len();
            out.extend_from_slice(&u32::try_from(at)?.to_le_bytes());
        }
        for s in shard.drain(..) {
            out.extend_from_slice(&s);
        }
        std::fs::write(dir.join(&name), &out)?;
        shards.push(serde_json::json!({
            "column_encodings": ["jpeg", "int"],
            "column_names": ["image", "label"],
            "column_sizes": [null, 8],
            "compression": null,
            "format": "mds",
            "hashes": [],
            "raw_data": {"basename": name, "bytes": out.len(), "hashes": {}},
            "samples": n,
            "size_limit": SIZE_LIMIT,
            "version": 2,
            "zip_data": null,
        }));
        Ok(())
    };
    for (key, label, image) in samples {
        let mut sample = Vec::with_capacity(4 + image.len() + 8);
        sample.extend_from_slice(&u32::try_from(image.len())?.to_le_bytes());
        sample.extend_from_slice(&image);
        sample.extend_from_slice(&(label as i64).to_le_bytes());
        if bytes + sample.len() > SIZE_LIMIT {
            flush(&mut shard, &mut shards)?;
            bytes = 0;
        }
        bytes += sample.len();
        items.push(DatasetItem {
            key,
            label,
            size: image.len() as u64,
        });
        shard.push(sample);
    }
    flush(&mut shard, &mut shards)?;
    let index = serde_json::json!({"shards": shards, "version": 2});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(items)
}
