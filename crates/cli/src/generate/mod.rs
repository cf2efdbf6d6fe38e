//! `loader gen`: the testkit's ImageNet-like dataset, written in parallel with a progress bar,
//! as class folders, WebDataset shards, Parquet files (`parquet`) or MDS shards (`mds`).

pub mod mds;
pub mod parquet;

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use loader_testkit::{DatasetItem, DatasetSpec};

use crate::Result;
use crate::parallel::parallel;

/// What dataset to generate: shared by `loader gen` and `loader bench`.
#[derive(Debug, clap::Args)]
pub struct DataArgs {
    /// Number of images.
    #[arg(long, default_value_t = 2000)]
    pub images: usize,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Seed of all content (`--seed` is the loader's, of its order).
    #[arg(long, default_value_t = 0)]
    pub data_seed: u64,
    /// Tiny 64x48 images instead of ImageNet-sized ones (for quick tries).
    #[arg(long)]
    pub tiny: bool,
}

impl DataArgs {
    /// The dataset spec these arguments describe.
    pub fn spec(&self) -> DatasetSpec {
        let spec = if self.tiny {
            DatasetSpec::tiny(self.images, self.classes)
        } else {
            DatasetSpec::imagenet(self.images, self.classes)
        };
        spec.with_seed(self.data_seed)
    }
}

/// Arguments of `loader gen`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to write `class_XXX/img_XXXXXX.jpg` into.
    dir: PathBuf,
    #[command(flatten)]
    data: DataArgs,
    /// Write N WebDataset tar shards (`shard-000000.tar`, ...: `{i}.jpg` and `{i}.cls`
    /// members) with their sidecar indexes instead of class folders.
    #[arg(long, value_name = "N", conflicts_with_all = ["parquet", "mds"])]
    shards: Option<usize>,
    /// Write N Parquet files in Hugging Face's layout (`part-00000.parquet`, ...: an
    /// `image` struct of bytes and path, a `label`; row groups of 100 rows, an offset
    /// index) instead of class folders.
    #[arg(long, value_name = "N", conflicts_with = "mds")]
    parquet: Option<usize>,
    /// Write raw MDS shards (MosaicML Streaming's layout: `index.json`, `shard.00000.mds`,
    /// ...; `image` encoded jpeg, `label` int) instead of class folders.
    #[arg(long)]
    mds: bool,
}

pub fn main(args: Args) -> Result {
    let spec = args.data.spec();
    let items = match (args.shards, args.parquet) {
        (Some(shards), _) => write_shards(&spec, &args.dir, shards, true)?,
        (None, Some(files)) => parquet::write_parquet(&spec, &args.dir, files, true, true)?,
        (None, None) if args.mds => mds::write_mds(&spec, &args.dir, true)?,
        (None, None) => write(&spec, &args.dir, true)?,
    };
    let bytes: u64 = items.iter().map(|i| i.size).sum();
    println!(
        "wrote {} images in {} classes to {} ({:.1} MB, {:.0} KB per image)",
        items.len(),
        args.data.classes,
        args.dir.display(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e3 / items.len().max(1) as f64
    );
    Ok(())
}

/// Write `spec` under `dir` on every core, showing progress when `progress` is set.
pub fn write(spec: &DatasetSpec, dir: &Path, progress: bool) -> Result<Vec<DatasetItem>> {
    if spec.classes == 0 || spec.images == 0 {
        return Err("--images and --classes must be at least 1".into());
    }
    let bar = if progress {
        ProgressBar::new(spec.images as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "generating {bar:30} {pos}/{len} images, {per_sec}, eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let items = parallel(spec.images, &bar, |index| spec.write_image(dir, index));
    bar.finish_and_clear();
    Ok(items?)
}

/// Write `spec` as `shards` WebDataset shards under `dir`, a shard per core at a time, and
/// their sidecar indexes (`shard-000000.tar.idx.json`), so readers need not scan them.
pub fn write_shards(
    spec: &DatasetSpec,
    dir: &Path,
    shards: usize,
    progress: bool,
) -> Result<Vec<DatasetItem>> {
    if spec.classes == 0 || spec.images == 0 || shards == 0 {
        return Err("--images, --classes and --shards must be at least 1".into());
    }
    let count = spec.shard_count(shards);
    let bar = crate::parallel::bar(count, "shards", progress);
    let parts = parallel(count, &bar, |shard| spec.write_shard(dir, shard, shards));
    bar.finish_and_clear();
    let parts = parts?;
    crate::index::write_sidecars(&dir.to_string_lossy(), &[], None, false)?;
    Ok(parts.into_iter().flatten().collect())
}
