//! `loader run`: iterate a real dataset with a progress bar, then the per-stage summary.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::storage::layer::CachePolicy;
use loader_core::{
    DataLoader, LabelKind, LoaderOptions, Manifest, Pipeline, ShardOrder, StorageExt, from_url,
    store_url,
};

use crate::options::{LoaderArgs, fetch, option_value, parse_size, parse_store_options};
use crate::progress::open_dataset;
use crate::{Result, Strategy};

/// Arguments of `loader run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset URL: s3://bucket/prefix, http(s)://host/prefix, file:///dir or a path (an
    /// ImageFolder, or a prefix of WebDataset `.tar` shards), or shards as a brace list:
    /// s3://bucket/train-{000000..000127}.tar.
    #[arg(required_unless_present = "list_options")]
    url: Option<String>,
    /// With --shuffle over shards: `local` (shards shuffled, samples within a buffer of
    /// chunks, few large GETs) or `global` (one permutation, a GET per sample).
    #[arg(long, value_name = "local|global", value_parser = option_value::<ShardOrder>)]
    order: Option<ShardOrder>,
    /// A manifest key under the URL (CSV `key,label` or JSON lines) instead of listing.
    #[arg(long)]
    manifest: Option<String>,
    /// How the manifest's labels are read: `class` (an index or a name), `multi` (several
    /// classes per sample) or `values` (numbers).
    #[arg(long, value_name = "class|multi|values", requires = "manifest", value_parser = label_kind)]
    labels: Option<LabelKind>,
    /// Store option as key=value (e.g. aws_endpoint=http://127.0.0.1:9000); repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// The loader's options.
    #[command(flatten)]
    loader: LoaderArgs,
    /// Fetch strategy (default: `async`, with the in-flight limit set by the loader).
    #[arg(long, value_enum)]
    fetch: Option<Strategy>,
    /// Requests in flight with `--fetch async`, fixed (default: set by the loader itself
    /// from what it measures, up to 16,384).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Threads with `--fetch threads`; workers with `--fetch sequential` (default: one per
    /// core for `sequential`, 16 for `threads`).
    #[arg(long)]
    threads: Option<usize>,
    /// Epochs this run reads (default 1).
    #[arg(long)]
    epochs: Option<u64>,
    /// Shuffle each epoch.
    #[arg(long)]
    shuffle: bool,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of every fetch, decode and batch.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Cache what is read in this directory, so later epochs and later runs read from
    /// local disk (a second process on the same directory reads it without writing).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    /// The disk cache's budget, e.g. 2GB or 512MiB (default 16 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache_size: Option<u64>,
    /// The memory cache's budget (with or without --cache-dir); 0 for none.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache_memory: Option<u64>,
    /// What a full cache keeps: `future` (what the coming epochs read soonest), `lru`, or
    /// `pin-once` (what came first).
    #[arg(long, value_name = "POLICY")]
    cache_policy: Option<CachePolicy>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The loader's options: this command's flags, then the shared ones, `--set` last.
    fn options(&self, cores: usize) -> Result<LoaderOptions> {
        let mut o = LoaderOptions::default();
        if self.fetch.is_some() || self.max_in_flight.is_some() || self.threads.is_some() {
            let strategy = self.fetch.unwrap_or(Strategy::Async);
            let threads = match (strategy, self.threads) {
                (_, Some(threads)) => threads,
                (Strategy::Sequential, None) => cores,
                (_, None) => 16,
            };
            o.engine.fetch = fetch(strategy, self.max_in_flight, threads);
        }
        o.shuffle = self.shuffle;
        o.epochs = Some(self.epochs.unwrap_or(1));
        if let Some(order) = self.order {
            o.shard_order = order;
        }
        if let Some(dir) = &self.cache_dir {
            o.cache.dir = Some(dir.clone());
        }
        if let Some(size) = self.cache_size {
            o.cache.size = size;
        }
        if let Some(memory) = self.cache_memory {
            o.cache.memory = Some(memory);
        }
        if let Some(policy) = self.cache_policy {
            o.cache.policy = policy;
        }
        let mut o = self.loader.over(o)?;
        // A run reads a known number of epochs; `--set epochs=none` would never end.
        o.epochs = Some(o.epochs.unwrap_or(1));
        o.validate()?;
        Ok(o)
    }
}

pub fn main(args: Args) -> Result {
    if args.loader.listed() {
        return Ok(());
    }
    let Some(url) = args.url.as_deref() else {
        return Err("give the dataset's URL".into());
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Retries and timeouts are the loader's defaults (and the dataset reads' own); the
    // metrics layer underneath counts every attempt.
    let root = store_url(url)?;
    let store = from_url(&root, parse_store_options(&args.options)?)?.with_metrics();
    let requests = store.metrics();
    let store = store.into_dyn();
    let store_name = store.name().to_owned();
    let manifest = args.manifest.as_deref().map(|key| Manifest {
        key,
        labels: args.labels.unwrap_or_default(),
        classes: None,
    });
    let dataset = open_dataset(url, &store, manifest, !args.json)?;
    eprintln!(
        "{} samples, {} classes at {}",
        dataset.len(),
        dataset.classes().len(),
        store.name()
    );
    let options = args.options(cores)?;
    let trace = args
        .trace
        .as_ref()
        .map(|_| std::sync::Arc::new(loader_core::Trace::new()));
    let mut builder = DataLoader::builder(store, dataset).options(options.clone());
    if let Some(trace) = &trace {
        builder = builder.trace(std::sync::Arc::clone(trace));
    }
    let builder = builder.transform(Pipeline::imagenet_eval());
    let mut loader = builder.build()?;
    let epoch_count = options.epochs.unwrap_or(1);
    let total = loader.len() as u64 * epoch_count;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} batches {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let (mut images, mut skipped) = (0usize, 0usize);
    let mut epochs = Vec::new();
    for _ in 0..epoch_count {
        let (epoch_start, epoch_images) = (Instant::now(), images);
        let epoch_requests = requests.snapshot().requests;
        for batch in &mut loader {
            let batch = batch?;
            images += batch.len();
            for e in &batch.skipped {
                bar.println(format!("skipped: {e}"));
                skipped += 1;
            }
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{:.0} img/s, {:.1} MB/s",
                images as f64 / secs,
                requests.snapshot().bytes as f64 / 1e6 / secs
            ));
            bar.inc(1);
        }
        // A last batch whose every sample was skipped is not delivered: its reports are here.
        for e in loader.take_unreported_skips() {
            bar.println(format!("skipped: {e}"));
            skipped += 1;
        }
        let seconds = epoch_start.elapsed().as_secs_f64();
        epochs.push(serde_json::json!({
            "images": images - epoch_images,
            "seconds": seconds,
            "images_per_sec": (images - epoch_images) as f64 / seconds.max(1e-9),
            "requests": requests.snapshot().requests - epoch_requests,
        }));
    }
    bar.finish_and_clear();
    let cache = loader.cache().map(|c| c.snapshot());
    let seconds = start.elapsed().as_secs_f64();
    let summary = loader.metrics().map(|m| m.summary());
    drop(loader);
    if let (Some(trace), Some(path)) = (&trace, &args.trace) {
        trace.write_json(std::io::BufWriter::new(std::fs::File::create(path)?))?;
        eprintln!(
            "trace of {} events written to {}",
            trace.len(),
            path.display()
        );
    }
    if args.json {
        let json = serde_json::json!({
            // The store's name, never the URL as given: it may hold credentials.
            "url": store_name,
            "images": images,
            "skipped": skipped,
            "seconds": seconds,
            "images_per_sec": images as f64 / seconds,
            "bytes": requests.snapshot().bytes,
            "requests": requests.snapshot().requests,
            "bottleneck": summary.as_ref().map(|s| s.bottleneck()),
            "epochs": epochs,
            "cache": cache.map(|c| serde_json::json!({
                "hits": c.memory_hits + c.disk_hits,
                "memory_hits": c.memory_hits,
                "disk_hits": c.disk_hits,
                "misses": c.misses,
                "hit_rate": c.hit_rate(),
                "bytes_from_cache": c.bytes_served,
                "bytes_fetched": c.bytes_fetched,
                "requests": c.requests,
                "validations": c.validations,
                "evictions": c.memory.evictions + c.disk.evictions,
                "rejected_admissions": c.memory.rejected + c.disk.rejected,
                "memory_bytes": c.memory.bytes,
                "memory_peak_bytes": c.memory.peak_bytes,
                "disk_bytes": c.disk.bytes,
                "disk_peak_bytes": c.disk.peak_bytes,
                "corrupt": c.corrupt,
                "stale": c.stale,
                "write_errors": c.write_errors,
            })),
        });
        println!("{json:#}");
    } else {
        println!(
            "{images} images ({skipped} skipped) in {seconds:.1} s: {:.0} img/s",
            images as f64 / seconds
        );
        if epochs.len() > 1 {
            for (e, epoch) in epochs.iter().enumerate() {
                println!(
                    "epoch {e}: {:.0} img/s, {} requests",
                    epoch["images_per_sec"].as_f64().unwrap_or(0.0),
                    epoch["requests"]
                );
            }
        }
        println!("storage: {}", requests.snapshot());
        if let Some(cache) = cache {
            println!("cache: {cache}");
        }
        if let Some(summary) = summary {
            println!("{summary}");
        }
    }
    Ok(())
}

/// A `--labels` value.
fn label_kind(name: &str) -> std::result::Result<LabelKind, String> {
    LabelKind::from_name(name).ok_or_else(|| format!("{name:?}: give class, multi or values"))
}
