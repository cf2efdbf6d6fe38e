//! `loader run`: iterate a real dataset with a progress bar, then the per-stage summary.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::{DataLoader, Dataset, ErrorPolicy, Fetch, Pipeline, StorageExt, from_url};

use crate::{Result, Strategy};

/// Arguments of `loader run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset URL: s3://bucket/prefix, http(s)://host/prefix, file:///dir or a path.
    url: String,
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
    /// Requests in flight with `--fetch async`.
    #[arg(long, default_value_t = 128)]
    max_in_flight: usize,
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
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
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

/// The strategy with its concurrency.
pub fn fetch(strategy: Strategy, max_in_flight: usize, threads: usize) -> Fetch {
    match strategy {
        Strategy::Sequential => Fetch::Sequential { workers: threads },
        Strategy::Threads => Fetch::Threads { threads },
        Strategy::Async => Fetch::Async { max_in_flight },
    }
}

pub fn main(args: Args) -> Result {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Retries and timeouts are the loader's defaults (and the dataset reads' own); the
    // metrics layer underneath counts every attempt.
    let store = from_url(&args.url, parse_options(&args.options)?)?.with_metrics();
    let requests = store.metrics();
    let store = store.into_dyn();
    let store_name = store.name().to_owned();
    let dataset = match &args.manifest {
        Some(key) => Dataset::manifest_blocking(&*store, key)?,
        None => Dataset::image_folder_blocking(&*store)?,
    };
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
    let mut loader = builder
        .batch_size(args.batch_size)
        .shuffle(args.shuffle)
        .fetch(fetch(args.fetch, args.max_in_flight, workers))
        .decode_threads(args.decode_threads.unwrap_or(cores))
        .prefetch(4)
        .error_policy(args.skip_errors.map_or(ErrorPolicy::Fail, |max_failures| {
            ErrorPolicy::Skip { max_failures }
        }))
        .transform(Pipeline::imagenet_eval())
        .build()?;
    let total = loader.len() as u64 * args.epochs;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} batches {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let (mut images, mut skipped) = (0usize, 0usize);
    for _ in 0..args.epochs {
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
    }
    bar.finish_and_clear();
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
        });
        println!("{json:#}");
    } else {
        println!(
            "{images} images ({skipped} skipped) in {seconds:.1} s: {:.0} img/s",
            images as f64 / seconds
        );
        println!("storage: {}", requests.snapshot());
        if let Some(summary) = summary {
            println!("{summary}");
        }
    }
    Ok(())
}
