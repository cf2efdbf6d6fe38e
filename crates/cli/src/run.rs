//! `loader run`: iterate a real dataset with a progress bar, then the per-stage summary.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::storage::layer::{CacheConfig, CachePolicy};
use loader_core::webdataset::WebDataset;
use loader_core::{
    DataLoader, Dataset, DynStorage, ErrorPolicy, Fetch, Pipeline, ShardOrder, StorageExt,
    from_url, store_url,
};

use crate::{Result, Strategy};

/// Arguments of `loader run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset URL: s3://bucket/prefix, http(s)://host/prefix, file:///dir or a path (an
    /// ImageFolder, or a prefix of WebDataset `.tar` shards), or shards as a brace list:
    /// s3://bucket/train-{000000..000127}.tar.
    url: String,
    /// With --shuffle over shards: `local` (shards shuffled, samples within a buffer of
    /// chunks, few large GETs) or `global` (one permutation, a GET per sample).
    #[arg(long, value_enum, default_value = "local")]
    order: ReadOrder,
    /// A manifest key under the URL (CSV `key,label` or JSON lines) instead of listing.
    #[arg(long)]
    manifest: Option<String>,
    /// Store option as key=value (e.g. aws_endpoint=http://127.0.0.1:9000); repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Fetch strategy.
    #[arg(long, value_enum, default_value = "async")]
    fetch: Strategy,
    /// Requests in flight with `--fetch async`, fixed (default: set by the loader itself
    /// from what it measures, up to 16,384).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Threads with `--fetch threads`; workers with `--fetch sequential`.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// CPU threads for decoding (default: one per core).
    #[arg(long)]
    decode_threads: Option<usize>,
    /// Epochs to read.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Shuffle each epoch.
    #[arg(long)]
    shuffle: bool,
    /// Skip up to N failing samples per epoch (reported) instead of stopping at the first.
    #[arg(long, value_name = "N")]
    skip_errors: Option<usize>,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of every fetch, decode and batch.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Cache what is read in this directory, so later epochs and later runs read from
    /// local disk (a second process on the same directory reads it without writing).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    /// The disk cache's budget, e.g. 2GB or 512MiB.
    #[arg(long, value_name = "SIZE", default_value = "16GiB", value_parser = parse_size)]
    cache_size: u64,
    /// The memory cache's budget (with or without --cache-dir); 0 for none.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache_memory: Option<u64>,
    /// What a full cache keeps: `future` (what the coming epochs read soonest), `lru`, or
    /// `pin-once` (what came first).
    #[arg(long, value_name = "POLICY", default_value = "future")]
    cache_policy: CachePolicy,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// A size as people write it: `2GB`, `512MiB`, `1.5 G`, or bytes.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size ({e}); write e.g. 2GB or 512MiB"))
}

/// How shards are shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadOrder {
    /// Shard-local order.
    Local,
    /// A global permutation.
    Global,
}

impl From<ReadOrder> for ShardOrder {
    fn from(order: ReadOrder) -> Self {
        match order {
            ReadOrder::Local => ShardOrder::Local,
            ReadOrder::Global => ShardOrder::Global,
        }
    }
}

/// The dataset at `url` on `store` (opened at the URL's root), with a progress bar while
/// shards are indexed.
pub fn open_dataset(
    url: &str,
    store: &DynStorage,
    manifest: Option<&str>,
    progress: bool,
) -> Result<Dataset> {
    let (bar, indexing) = crate::index::indexing_bar(progress);
    let dataset =
        Dataset::open_blocking(url, store, manifest, &WebDataset::new().progress(indexing))?;
    bar.finish_and_clear();
    Ok(dataset)
}

/// Split `key=value` options.
pub fn parse_options(options: &[String]) -> Result<Vec<(String, String)>> {
    options
        .iter()
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                .ok_or_else(|| format!("--option {o:?} is not KEY=VALUE").into())
        })
        .collect()
}

/// The strategy with its concurrency; `async` without a fixed `max_in_flight` adapts.
pub fn fetch(strategy: Strategy, max_in_flight: Option<usize>, threads: usize) -> Fetch {
    match (strategy, max_in_flight) {
        (Strategy::Sequential, _) => Fetch::Sequential { workers: threads },
        (Strategy::Threads, _) => Fetch::Threads { threads },
        (Strategy::Async, Some(max_in_flight)) => Fetch::Async { max_in_flight },
        (Strategy::Async, None) => Fetch::default(),
    }
}

pub fn main(args: Args) -> Result {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Retries and timeouts are the loader's defaults (and the dataset reads' own); the
    // metrics layer underneath counts every attempt.
    let root = store_url(&args.url)?;
    let store = from_url(&root, parse_options(&args.options)?)?.with_metrics();
    let requests = store.metrics();
    let store = store.into_dyn();
    let store_name = store.name().to_owned();
    let dataset = open_dataset(&args.url, &store, args.manifest.as_deref(), !args.json)?;
    eprintln!(
        "{} samples, {} classes at {}",
        dataset.len(),
        dataset.classes().len(),
        store.name()
    );
    let workers = if args.fetch == Strategy::Sequential && args.threads == 16 {
        cores
    } else {
        args.threads
    };
    let trace = args
        .trace
        .as_ref()
        .map(|_| std::sync::Arc::new(loader_core::Trace::new()));
    let mut builder = DataLoader::builder(store, dataset);
    if let Some(trace) = &trace {
        builder = builder.trace(std::sync::Arc::clone(trace));
    }
    let mut builder = builder
        .batch_size(args.batch_size)
        .shuffle(args.shuffle)
        .shard_order(args.order.into())
        .epochs(args.epochs)
        .fetch(fetch(args.fetch, args.max_in_flight, workers))
        .decode_threads(args.decode_threads.unwrap_or(cores))
        .prefetch(4)
        .error_policy(args.skip_errors.map_or(ErrorPolicy::Fail, |max_failures| {
            ErrorPolicy::Skip { max_failures }
        }))
        .transform(Pipeline::imagenet_eval());
    let caching = args.cache_dir.is_some() || args.cache_memory.is_some_and(|m| m > 0);
    if caching {
        let defaults = CacheConfig::default();
        builder = builder.cache(CacheConfig {
            dir: args.cache_dir.clone(),
            memory_bytes: args.cache_memory.unwrap_or(defaults.memory_bytes),
            disk_bytes: args.cache_size,
            policy: args.cache_policy,
            ..defaults
        });
    }
    let mut loader = builder.build()?;
    let total = loader.len() as u64 * args.epochs;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} batches {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let (mut images, mut skipped) = (0usize, 0usize);
    let mut epochs = Vec::new();
    for _ in 0..args.epochs {
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
