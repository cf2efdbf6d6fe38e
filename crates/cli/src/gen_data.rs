//! `loader gen`: the testkit's ImageNet-like dataset, written in parallel with a progress bar.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use loader_testkit::{DatasetItem, DatasetSpec};

use crate::Result;

/// What dataset to generate: shared by `loader gen` and `loader bench`.
#[derive(Debug, clap::Args)]
pub struct DataArgs {
    /// Number of images.
    #[arg(long, default_value_t = 2000)]
    pub images: usize,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Seed of all content.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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
        spec.with_seed(self.seed)
    }
}

/// Arguments of `loader gen`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to write `class_XXX/img_XXXXXX.jpg` into.
    dir: PathBuf,
    #[command(flatten)]
    data: DataArgs,
}

pub fn main(args: Args) -> Result {
    let spec = args.data.spec();
    let items = write(&spec, &args.dir, true)?;
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
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<std::io::Result<Vec<(usize, DatasetItem)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= spec.images {
                            return Ok(mine);
                        }
                        let (key, label) = spec.item(index);
                        let path = dir.join(&key);
                        if let Some(parent) = path.parent() {
                            std::fs::create_dir_all(parent)?;
                        }
                        let bytes = spec.encode(index)?;
                        std::fs::write(&path, &bytes)?;
                        mine.push((
                            index,
                            DatasetItem {
                                key,
                                label,
                                size: bytes.len() as u64,
                            },
                        ));
                        bar.inc(1);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a generator thread panicked")))
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut items = Vec::with_capacity(spec.images);
    for part in results {
        items.extend(part?);
    }
    items.sort_by_key(|(i, _)| *i);
    Ok(items.into_iter().map(|(_, item)| item).collect())
}
