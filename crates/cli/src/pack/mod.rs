//! `loader pack SRC DST`: write any dataset the loader reads (an ImageFolder, a manifest,
//! WebDataset shards, Parquet files, MDS or LitData chunks) as WebDataset shards with their
//! sidecar indexes (`tar_shard`) or as Parquet files in Hugging Face's layout
//! (`parquet_shard`), optionally re-encoded with the shorter side at most N px, into a local
//! directory or a store (S3, ...).
//!
//! Samples are read by the loader itself, in index order, the re-encode on its CPU pool
//! (`reencode`); this thread only appends to the shard being written. A shard is written
//! under a `.partial` name and published when whole (`destination`), then `pack.json`
//! records it: a pack stopped at any point and run again goes on after the last recorded
//! shard, and writes the same shards a run without the stop would have (the same samples,
//! names and bytes), so no sample is lost or written twice.

mod destination;
mod parquet_shard;
mod reencode;
mod shard;
mod tar_shard;
mod write;

use std::path::Path;

use destination::{Destination, is_remote};
use reencode::reencode;
use shard::{Format, Packable, ShardFile};
use write::Writer;

use bytes::Bytes;
use loader_core::decoder::Pipeline;
use loader_core::storage::redact;
use loader_core::{
    CLASSES_FILE, Column, DataLoader, Dataset, DynStorage, ErrorPolicy, Label, LoaderOptions,
    LoaderState, OptionValue, PACK_FILE, RawBatch, SampleInfo, from_url, store_url,
};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::options::{SourceArgs, parse_size, parse_store_options};
use crate::progress::open_dataset;

const PACK_FORMAT: &str = "loader-pack/1";
/// Samples handed from the loader at a time.
const BATCH: usize = 64;

/// Write a dataset as WebDataset shards with sidecar indexes (or Parquet files),
/// optionally resized.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset: any URL `loader run` reads (an ImageFolder, `.tar` shards, `.parquet`
    /// files, an MDS or LitData `index.json`).
    src: String,
    /// Where the shards, their sidecars and pack.json go: a local directory, or a store's
    /// URL (`s3://bucket/prefix`; large shards uploaded in parts, each shard whole or not
    /// at all).
    dst: String,
    /// What the shards are: WebDataset `.tar` with sidecar indexes, or Parquet files in
    /// Hugging Face's layout (an image struct of bytes and path, a ClassLabel label).
    #[arg(long, value_enum, default_value = "webdataset")]
    format: Format,
    /// Start a new shard once one holds this much, e.g. 256MiB or 1GB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256MiB")]
    shard_size: u64,
    /// Re-encode images as JPEG with the shorter side at most this many pixels
    /// (antialiased bilinear, as torchvision's Resize); smaller images are kept as they are.
    #[arg(long, value_name = "PX", value_parser = clap::value_parser!(u32).range(1..))]
    resize: Option<u32>,
    /// The JPEG quality of re-encoded images (with --resize; default 90).
    #[arg(long, value_name = "Q", requires = "resize", value_parser = clap::value_parser!(u8).range(1..=100))]
    quality: Option<u8>,
    #[command(flatten)]
    source: SourceArgs,
    /// Leave out up to N samples that cannot be read or decoded, each recorded in
    /// pack.json with its error; by default the first stops the pack.
    #[arg(long, value_name = "N")]
    skip_errors: Option<usize>,
    /// Store option as key=value (e.g. aws_endpoint=http://127.0.0.1:9000), for SRC's and
    /// DST's stores when they are not local; repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Stop after writing this many shards in this run, as an interrupted pack would (for
    /// tests of resuming).
    #[arg(long, hide = true)]
    stop_after_shards: Option<usize>,
}

#[cfg(feature = "tools")]
impl Args {
    /// A pack of the local dataset `src` into `dst`, the shorter side at most `px` at the
    /// default quality, in shards of `shard_size` bytes (the benchmark's packed row).
    pub fn resized(src: &Path, dst: &Path, px: u32, shard_size: u64) -> Self {
        Self {
            src: src.to_string_lossy().into_owned(),
            dst: dst.to_string_lossy().into_owned(),
            format: Format::Webdataset,
            shard_size,
            resize: Some(px),
            quality: None,
            source: SourceArgs::default(),
            skip_errors: None,
            options: Vec::new(),
            stop_after_shards: None,
        }
    }
}

/// What a pack is of: a rerun with other settings is refused rather than mixed in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Settings {
    /// The source's URL, its credentials redacted.
    source: String,
    /// What the shards are (packs recorded before Parquet were WebDataset).
    #[serde(default = "webdataset")]
    format: String,
    samples: u64,
    shard_size: u64,
    resize: Option<u32>,
    /// Of re-encoded images; `None` when nothing is re-encoded.
    quality: Option<u8>,
    /// How the source was read: its manifest and columns, as given.
    manifest: Option<String>,
    image_column: Option<String>,
    label_column: Option<String>,
    classes: Vec<String>,
}

impl Settings {
    /// What differs from `now`, as `name: was → now`.
    fn differences(&self, now: &Settings) -> Vec<String> {
        let mut out = Vec::new();
        let mut differ = |name: &str, was: String, is: String| {
            if was != is {
                out.push(format!("{name}: {was} → {is}"));
            }
        };
        differ("source", self.source.clone(), now.source.clone());
        differ("format", self.format.clone(), now.format.clone());
        differ("samples", self.samples.to_string(), now.samples.to_string());
        differ(
            "shard size",
            self.shard_size.to_string(),
            now.shard_size.to_string(),
        );
        differ(
            "resize",
            format!("{:?}", self.resize),
            format!("{:?}", now.resize),
        );
        differ(
            "quality",
            format!("{:?}", self.quality),
            format!("{:?}", now.quality),
        );
        differ(
            "manifest",
            format!("{:?}", self.manifest),
            format!("{:?}", now.manifest),
        );
        differ(
            "image column",
            format!("{:?}", self.image_column),
            format!("{:?}", now.image_column),
        );
        // As read: `""` (recorded by earlier packs) and `none` are the same column.
        let column = |c: &Option<String>| c.as_deref().map(Column::parse);
        differ(
            "label column",
            format!("{:?}", column(&self.label_column)),
            format!("{:?}", column(&now.label_column)),
        );
        differ(
            "classes",
            format!("{} classes", self.classes.len()),
            format!("{} classes", now.classes.len()),
        );
        if out.is_empty() && self.classes != now.classes {
            out.push("class names".into());
        }
        out
    }
}

fn webdataset() -> String {
    Format::Webdataset.name().to_owned()
}

/// `n shards`, or `1 shard`.
fn shards(n: usize) -> String {
    if n == 1 {
        "1 shard".into()
    } else {
        format!("{n} shards")
    }
}

/// Where a URL or path points, to compare two: a local path made absolute (as far as it
/// exists), a store's URL as given.
fn place(url: &str) -> String {
    if is_remote(url) {
        return url.trim_end_matches('/').to_owned();
    }
    let path = Path::new(url.strip_prefix("file://").unwrap_or(url));
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // The deepest part that exists, resolved (symlinks, `..`), and the rest as written.
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break,
        }
    }
    let mut out = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    out.extend(rest.iter().rev());
    out.to_string_lossy().trim_end_matches('/').to_owned()
}

/// `pack.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Packed {
    format: String,
    settings: Settings,
    /// The shards written, in order.
    shards: Vec<ShardDone>,
    /// Samples left out under `--skip-errors`.
    skipped: Vec<Skipped>,
    complete: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct ShardDone {
    name: String,
    /// The source indices it covers, `first..end` (samples skipped among them are not in it).
    first: u64,
    end: u64,
    samples: u64,
    bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Skipped {
    index: u64,
    key: String,
    error: String,
}

pub fn main(args: Args) -> Result {
    if args.shard_size == 0 {
        return Err("--shard-size must be more than 0 bytes, e.g. 256MiB".into());
    }
    let options = parse_store_options(&args.options)?;
    // Options are for stores; a local directory takes none.
    let options_for = |url: &str| {
        if is_remote(url) {
            options.clone()
        } else {
            Vec::new()
        }
    };
    let root = store_url(&args.src)?;
    let source = checked_places(&args, &root, !options.is_empty())?;
    let store = from_url(&root, options_for(&root))?;
    let dataset = open_dataset(&args.src, &store, &args.reading()?, true)?;
    let settings = args.settings(&root, &source, &dataset);
    let labelled = dataset.has_labels();
    if !labelled && args.format == Format::Webdataset {
        eprintln!(
            "{} has no labels: the shards hold images alone, without .cls members (read them \
             with fields, e.g. fields=[\"jpg\"] in Python)",
            redact(&args.src)
        );
    }
    let dst = Destination::open(&args.dst, &options_for(&args.dst))?;
    let mut packed = resume_or_start(&dst, settings)?;
    if packed.complete {
        eprintln!(
            "{} is a complete pack of {} samples in {}: nothing to do",
            dst.name(),
            packed.settings.samples,
            shards(packed.shards.len())
        );
        return Ok(());
    }
    // Parquet files name their classes in their metadata (and `datasets` reading the
    // folder would take a classes.txt for data).
    if !packed.settings.classes.is_empty() && args.format == Format::Webdataset {
        let mut text = packed.settings.classes.join("\n");
        text.push('\n');
        dst.write(CLASSES_FILE, text.into_bytes())?;
    }
    let loader = reader(&args, store, dataset, &mut packed)?;
    let mut writer = Writer::new(&args, &dst, packed, labelled);
    writer.write_all(loader)?;
    writer.report();
    Ok(())
}

/// The source's place, once SRC, DST and `--option` agree: options for a store, DST
/// outside the dataset it packs.
fn checked_places(args: &Args, root: &str, with_options: bool) -> Result<String> {
    if with_options && !is_remote(root) && !is_remote(&args.dst) {
        return Err(
            "--option sets a store's options, but SRC and DST are both local: \
                    leave the options out"
                .into(),
        );
    }
    let source = place(root);
    if let Some(inside) = place(&args.dst).strip_prefix(source.trim_end_matches('/'))
        && (inside.is_empty() || inside.starts_with('/'))
    {
        // Shards among the source's files would be read as part of it by the next run.
        return Err(format!(
            "{} is inside the dataset it packs ({}): pack into a place outside it",
            redact(&args.dst),
            redact(root)
        )
        .into());
    }
    Ok(source)
}

impl Args {
    /// How the source is opened: its manifest and columns, as given.
    fn reading(&self) -> Result<LoaderOptions> {
        let mut reading = LoaderOptions::default();
        self.source.over(&mut reading.source);
        Ok(reading)
    }

    /// What this pack is of, to resume only the same pack (`source` is the root's place).
    fn settings(&self, root: &str, source: &str, dataset: &Dataset) -> Settings {
        Settings {
            // However its path is written, the same source resumes the same pack.
            source: redact(&match self.src.strip_prefix(root) {
                Some(rest) => format!("{source}{rest}"),
                None => self.src.clone(),
            }),
            format: self.format.name().to_owned(),
            samples: dataset.len() as u64,
            shard_size: self.shard_size,
            resize: self.resize,
            quality: self.resize.map(|_| self.quality.unwrap_or(90)),
            manifest: self.source.manifest.clone(),
            image_column: self.source.image_column.clone(),
            label_column: self.source.label_column.as_ref().map(Column::show),
            classes: dataset.classes().to_vec(),
        }
    }
}

/// The loader that reads the samples not packed yet, in index order, re-encoded on its CPU
/// pool when asked; skipped samples counted against one `--skip-errors` budget.
fn reader(
    args: &Args,
    store: DynStorage,
    dataset: Dataset,
    packed: &mut Packed,
) -> Result<DataLoader<Packable, RawBatch<Packable>>> {
    let next = packed.shards.last().map_or(0, |s| s.end);
    let pipeline = match args.resize {
        Some(px) => Some(
            Pipeline::builder()
                .resize(px as usize)
                .to_u8()
                .build()
                .map_err(|e| format!("--resize {px}: {e}"))?,
        ),
        None => None,
    };
    let (resize, quality) = (args.resize, args.quality.unwrap_or(90));
    let mut builder = DataLoader::builder(store, dataset)
        .map(
            move |bytes: Bytes, info: &SampleInfo| {
                let (image, extension) = reencode(bytes, resize, pipeline.as_ref(), quality)?;
                let class = match &info.label {
                    Label::None => None,
                    Label::Class(c) => Some(*c),
                    other => {
                        return Err(format!(
                            "its label is {other:?}: packs hold one class per sample (.cls)"
                        )
                        .into());
                    }
                };
                Ok(Packable {
                    index: info.index,
                    image,
                    extension,
                    class,
                })
            },
            |raw: RawBatch<Packable>| Ok(raw),
        )
        .batch_size(BATCH)
        .epochs(1);
    // The samples left out before `next` stay so; those after it are read again.
    packed.skipped.retain(|s| s.index < next);
    if let Some(n) = args.skip_errors {
        // One budget for the whole pack, however many runs it takes.
        let left = n.checked_sub(packed.skipped.len()).ok_or_else(|| {
            format!(
                "{} samples were left out already, more than --skip-errors {n}",
                packed.skipped.len()
            )
        })?;
        builder = builder.error_policy(ErrorPolicy::Skip { max_failures: left });
    }
    let mut loader = builder.build()?;
    loader.resume(LoaderState::at(0, next))?;
    Ok(loader)
}

/// The pack recorded in `dst`, when its settings are these; else a new one. Leftovers of
/// a stopped run (a `.partial` shard) are removed.
fn resume_or_start(dst: &Destination, settings: Settings) -> Result<Packed> {
    let packed = match dst.read(PACK_FILE)? {
        Some(bytes) => {
            let packed: Packed = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{PACK_FILE} in {} is not a pack record: {e}", dst.name()))?;
            if packed.format != PACK_FORMAT {
                return Err(format!(
                    "{PACK_FILE} in {} is a pack record of format {:?}; this loader writes \
                     {PACK_FORMAT:?}",
                    dst.name(),
                    packed.format
                )
                .into());
            }
            if packed.settings != settings {
                return Err(format!(
                    "{} holds a pack of other settings ({}): pack into another place, or \
                     remove this one to start over",
                    dst.name(),
                    packed.settings.differences(&settings).join("; ")
                )
                .into());
            }
            if !packed.complete && !packed.shards.is_empty() {
                eprintln!(
                    "going on with the pack in {}: {} shards of {} samples were written",
                    dst.name(),
                    packed.shards.len(),
                    packed.shards.last().map_or(0, |s| s.end)
                );
            }
            packed
        }
        None => Packed {
            format: PACK_FORMAT.into(),
            settings,
            shards: Vec::new(),
            skipped: Vec::new(),
            complete: false,
        },
    };
    dst.clean()?;
    Ok(packed)
}

/// Write `pack.json` whole or not at all.
fn record(dst: &Destination, packed: &Packed) -> Result {
    let mut text = serde_json::to_vec_pretty(packed)?;
    text.push(b'\n');
    dst.write(PACK_FILE, text)
}

/// The shard closed and published (with its sidecar index when it is WebDataset's); `end`
/// is the source index after its last.
fn finish(
    shard: Box<dyn ShardFile>,
    dst: &Destination,
    end: u64,
    format: Format,
) -> Result<ShardDone> {
    let closed = shard.close()?;
    dst.publish(&closed.partial, &closed.name, format == Format::Webdataset)?;
    Ok(ShardDone {
        name: closed.name,
        first: closed.first,
        end,
        samples: closed.samples,
        bytes: closed.bytes,
    })
}
