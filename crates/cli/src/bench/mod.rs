//! `loader bench`: the paper's experiment — storage latency x fetch strategy — on a
//! generated dataset served by the in-process S3 server behind the delay proxy.
//!
//! `main` prepares the data (`data`), the rows of stores (`rows`), the datasets, then
//! measures the matrix (`matrix`, one cell at a time with `measure`) and reports.

mod data;
mod matrix;
mod measure;
mod rows;

use std::path::PathBuf;

use loader_core::webdataset::WebDataset;
use loader_core::{Dataset, DynStorage, LoaderOptions, SourceContext};
use loader_testkit::S3Server;

use crate::options::{BENCH_BATCH_SIZE, LoaderArgs};
use crate::report::{Format, Report};
use crate::{Result, Strategy, generate};

/// Arguments of `loader bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset to generate (once; it is reused from the cache).
    #[command(flatten)]
    dataset: generate::DataArgs,
    /// Where the dataset is generated (reused between runs); default: the user cache.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Round-trip times to add, in ms, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,10,50,100,200,500")]
    rtts: Vec<u64>,
    /// Leave out the local-disk row.
    #[arg(long)]
    no_local: bool,
    /// How the dataset is stored, comma-separated: `files` (an object per image),
    /// `shards-local` (WebDataset shards, shard-local shuffled order), `shards-global`
    /// (shards, a global permutation: a ranged GET per image), `parquet-local` (Parquet
    /// files in Hugging Face's layout with an offset index, file-local order: a GET per
    /// page), `parquet-global` (the same, a global permutation), `parquet-no-index`
    /// (without an offset index: a GET per row group's image column), `mds` (raw MDS
    /// shards, shard-local order), `packed-256` (the `files` images packed by `loader pack
    /// --resize 256` into shards, shard-local order).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "files")]
    formats: Vec<Format>,
    /// Also read each remote row through a disk cache as large as the dataset (async
    /// only): a cell for the first, cold epoch (after the warm-up, to the epoch's end) and
    /// one for the warm epochs after it; GET/img then counts the store's requests.
    #[arg(long)]
    cache: bool,
    /// Images per shard for the shard formats.
    #[arg(long, default_value_t = 256)]
    shard_images: usize,
    /// Strategies to compare, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sequential,threads,async"
    )]
    strategies: Vec<Strategy>,
    /// Requests in flight for `async`, fixed (default: set by the loader itself; the
    /// table then shows the limit it reached).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Threads for `threads`.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Workers for `sequential` (default: one per core, as PyTorch's num_workers).
    #[arg(long)]
    workers: Option<usize>,
    /// Seconds of each cell before its clock starts: the loader first fills its prefetch
    /// and fetch window, work that timing from its start would charge to too few images.
    /// At least eight round trips: a new connection through the proxy takes two before its
    /// first answer, whatever the strategy, and images decoded behind those first slow
    /// answers would otherwise be counted to the cell.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Each cell stops this many seconds after its warm-up...
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// ...or this many images, whichever comes first. A cell must be long against what the
    /// loader holds admitted (~1,400 images with 1,024 in flight), or the images decoded
    /// before its clock started inflate it: 10,000 keep every cell time-bound here.
    #[arg(long, default_value_t = 10000)]
    max_images: usize,
    /// Directory for report.md, results.json and plot.svg.
    #[arg(long, default_value = "bench-report")]
    out: PathBuf,
    /// An external S3 endpoint instead of the in-process server (with --bucket, --option).
    #[arg(long, requires = "bucket")]
    endpoint: Option<String>,
    /// The bucket (and prefix) holding the dataset on the external endpoint.
    #[arg(long)]
    bucket: Option<String>,
    /// Store option as key=value for the external endpoint; repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// The loader's options (each cell sets its fetch strategy, shuffle and shard order).
    #[command(flatten)]
    loader: LoaderArgs,
}

/// The bucket of the generated Parquet files, with an offset index or without.
fn wanted_bucket(indexed: bool) -> &'static str {
    if indexed {
        Format::ParquetLocal.bucket()
    } else {
        Format::ParquetNoIndex.bucket()
    }
}

/// Where generated data goes by default: `$LOADER_CACHE` if set, else the library's cache
/// directory (the one shard indexes are kept in), else a temporary one.
fn cache_dir() -> PathBuf {
    std::env::var_os("LOADER_CACHE")
        .map(PathBuf::from)
        .or_else(loader_core::webdataset::default_cache_dir)
        .unwrap_or_else(|| std::env::temp_dir().join("loader-cache"))
}

/// The loader's options for every cell, refusing those the benchmark sets per cell.
fn cell_options(args: &Args) -> Result<LoaderOptions> {
    let mut options = args.loader.over(LoaderOptions::default())?;
    let defaults = LoaderOptions::default();
    if options.shuffle != defaults.shuffle
        || options.shard_order != defaults.shard_order
        || options.engine.fetch != defaults.engine.fetch
        || options.cache != defaults.cache
    {
        return Err(
            "the benchmark sets shuffle, shard_order, engine.fetch and the cache per \
                    cell (--formats, --strategies, --cache); leave them out of --set"
                .into(),
        );
    }
    options.batch_size = args.loader.batch_size.unwrap_or(BENCH_BATCH_SIZE);
    Ok(options)
}

pub fn main(args: Args) -> Result {
    if args.loader.listed() {
        return Ok(());
    }
    let options = cell_options(&args)?;
    if args.max_images == 0 || args.seconds <= 0.0 || args.warmup < 0.0 {
        return Err("--max-images and --seconds must be positive, --warmup not negative".into());
    }
    if args.strategies.is_empty() {
        return Err("--strategies lists no strategy".into());
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let root = args.data.clone().unwrap_or_else(|| {
        cache_dir().join(format!(
            "bench-{}-{}-{}{}",
            args.dataset.images,
            args.dataset.classes,
            args.dataset.data_seed,
            if args.dataset.tiny { "-tiny" } else { "" }
        ))
    });
    if args.endpoint.is_none() {
        data::prepare(&args, &root)?;
    }
    // The rows: local disk, then the S3 server at each round-trip time.
    let server = match args.endpoint {
        None => Some(S3Server::start(&root)?),
        Some(_) => None,
    };
    let rows = rows::rows(&args, &root, server.as_ref())?;
    let Some(first) = rows.first() else {
        return Err("no rows: give --rtts or drop --no-local".into());
    };
    let datasets = datasets(&args, first)?;
    let (cells, ceilings, decoders) =
        matrix::measure_all(&args, &options, &root, &rows, &datasets, cores)?;
    drop(rows);
    drop(server);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut report = Report::new(cells, ceilings, cores, options.batch_size, command);
    report.decoders = decoders;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.table());
    }
    report.write(&args.out)?;
    eprintln!("report written to {}", args.out.display());
    Ok(())
}

/// Each format's dataset, opened on the first row's store.
fn datasets(args: &Args, first: &rows::Row) -> Result<Vec<(Format, Dataset)>> {
    let mut datasets = Vec::new();
    for &format in &args.formats {
        let store: DynStorage = (first.open)(format.bucket())?;
        // Read as `loader run` reads, behind the default timeouts and retries.
        let context = SourceContext::new(store, &LoaderOptions::default());
        let dataset = match format {
            Format::ShardsLocal | Format::ShardsGlobal => {
                // Named, not listed: the bucket may hold other runs' shard counts.
                let shards: Vec<String> =
                    (0..args.dataset.images.div_ceil(args.shard_images.max(1)))
                        .map(|s| format!("shard-{s:06}.tar"))
                        .collect();
                WebDataset::new().load_blocking(context.store(), &shards)?
            }
            _ => Dataset::open_blocking("", &context)?,
        };
        eprintln!("{format:?}: {} images", dataset.len());
        datasets.push((format, dataset));
    }
    if datasets.is_empty() {
        return Err("--formats lists no format".into());
    }
    Ok(datasets)
}
