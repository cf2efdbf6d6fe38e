//! `loader run`: iterate a real dataset with a progress bar, then the per-stage summary.
//! `main` parses, opens, builds, drives (`drive`) and reports (`report`).

mod drive;
mod report;

use std::path::Path;
use std::sync::Arc;

use loader_core::storage::layer::{CachePolicy, StorageMetrics};
use loader_core::{
    DataLoader, LabelKind, Launch, LoaderOptions, LoaderState, Pipeline, ShardOrder, Source,
    StopRule, StorageExt, Trace, from_url, store_url,
};

use crate::options::{
    LoaderArgs, SourceArgs, declared, fetch, option_value, parse_size, parse_store_options,
};
use crate::progress::open_dataset;
use crate::{Result, Strategy};

/// Arguments of `loader run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset URL: s3://bucket/prefix, http(s)://host/prefix, file:///dir or a path (an
    /// ImageFolder, or a prefix of WebDataset `.tar` shards), or shards as a brace list:
    /// s3://bucket/train-{000000..000127}.tar. Several URLs are a mixture, read by
    /// --weights.
    #[arg(required_unless_present = "list_options")]
    urls: Vec<String>,
    /// Each URL's weight in the mixture, comma-separated (default: equal).
    #[arg(long, value_delimiter = ',', value_name = "W,W,...")]
    weights: Vec<f64>,
    #[arg(long, value_name = "RULE", value_parser = option_value::<StopRule>, help = declared("mixture.stop"))]
    stop: Option<StopRule>,
    /// This process's rank (default: the launcher's: torchrun, SLURM or MPI; else 0).
    #[arg(long, requires = "world_size")]
    rank: Option<usize>,
    /// Processes that share each global batch (default: the launcher's, else 1).
    #[arg(long, requires = "rank")]
    world_size: Option<usize>,
    /// Stop after this many batches (this rank's, across epochs), e.g. to save the state.
    #[arg(long, value_name = "N")]
    stop_after_batches: Option<u64>,
    /// Write the loader's state (JSON) here when the run stops: any rank's resumes every
    /// rank, on any world size.
    #[arg(long, value_name = "FILE")]
    save_state: Option<std::path::PathBuf>,
    /// Resume from a state written by --save-state (or by any rank of a run).
    #[arg(long, value_name = "FILE")]
    resume: Option<std::path::PathBuf>,
    /// Print each delivered sample as `epoch<TAB>source<TAB>key` on stdout (padding, a repeat
    /// that evens out an epoch's last global batch, is left out).
    #[arg(long)]
    print_keys: bool,
    #[arg(long, value_name = "local|global", value_parser = option_value::<ShardOrder>, help = declared("shard_order"))]
    order: Option<ShardOrder>,
    #[arg(long, value_name = "TOKENS", help = declared("source.block_size"))]
    block_size: Option<u64>,
    #[arg(long, value_name = "class|multi|values", requires = "manifest", value_parser = option_value::<LabelKind>, help = declared("source.labels"))]
    labels: Option<LabelKind>,
    #[command(flatten)]
    source: SourceArgs,
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
    /// Epochs of the run, counted from its first (default 1): a resumed run goes on to the
    /// end of the last.
    #[arg(long)]
    epochs: Option<u64>,
    /// Shuffle each epoch.
    #[arg(long)]
    shuffle: bool,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of every fetch, decode and batch.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Cache what is read in this directory, so later epochs and later runs read from
    /// local disk; the ranks of a node share one directory, within one budget.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = declared("cache.size"))]
    cache_size: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = declared("cache.memory"))]
    cache_memory: Option<u64>,
    #[arg(long, value_name = "POLICY", help = declared("cache.policy"))]
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
        if let Some(stop) = self.stop {
            o.mixture.stop = stop;
        }
        self.source.over(&mut o.source);
        o.source.labels = self.labels.unwrap_or_default();
        o.source.block_size = self.block_size;
        // Ranks: as given, else the launcher's.
        let (rank, world) = match (self.rank, self.world_size) {
            (Some(rank), Some(world)) => (rank, world),
            _ => {
                let launch = Launch::from_env()?;
                (launch.rank, launch.world_size)
            }
        };
        (o.rank, o.world_size) = (rank, world);
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
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let options = args.checked_options(cores)?;
    let opened = open(&args, &options)?;
    let trace = args.trace.as_ref().map(|_| Arc::new(Trace::new()));
    let tokens = opened.sources[0].dataset.tokens().is_some();
    let mut builder = DataLoader::mixture(opened.sources).options(options.clone());
    if let Some(trace) = &trace {
        builder = builder.trace(Arc::clone(trace));
    }
    let metrics = &opened.metrics;
    let finished = if tokens {
        let loader = builder.tokens(options.packing.packing())?.build()?;
        drive_and_save(loader, &args, &options, metrics)?
    } else {
        let loader = builder.transform(Pipeline::imagenet_eval()).build()?;
        drive_and_save(loader, &args, &options, metrics)?
    };
    if let (Some(trace), Some(path)) = (&trace, &args.trace) {
        trace.write_json(std::io::BufWriter::new(std::fs::File::create(path)?))?;
        eprintln!(
            "trace of {} events written to {}",
            trace.len(),
            path.display()
        );
    }
    report::print(&args, &finished, &opened.names, &opened.metrics)
}

/// Resume the run if asked, drive it, save its state if asked.
fn drive_and_save<T: Send + 'static, B: drive::Counted>(
    mut loader: DataLoader<T, B>,
    args: &Args,
    options: &LoaderOptions,
    metrics: &[Arc<StorageMetrics>],
) -> Result<report::Finished> {
    if let Some(path) = &args.resume {
        loader.resume(read_state(path)?)?;
    }
    let tally = drive::drive(&mut loader, args, options, metrics)?;
    if let Some(path) = &args.save_state {
        save_state(&loader.state()?, path)?;
    }
    Ok(report::Finished::of(loader, tally))
}

impl Args {
    /// The options, once the URLs and their weights agree with them.
    fn checked_options(&self, cores: usize) -> Result<LoaderOptions> {
        if self.urls.is_empty() {
            return Err("give the dataset's URL".into());
        }
        if !self.weights.is_empty() && self.weights.len() != self.urls.len() {
            return Err(format!(
                "{} weights for {} URLs: give one weight per URL",
                self.weights.len(),
                self.urls.len()
            )
            .into());
        }
        let options = self.options(cores)?;
        if options.source.manifest.is_some() && self.urls.len() > 1 {
            return Err("--manifest names one dataset's manifest: give one URL with it".into());
        }
        Ok(options)
    }
}

/// The datasets a run reads, each on its store, and what their stores measure.
struct Opened {
    sources: Vec<Source>,
    /// Each store's counters: the metrics layer under the retries counts every attempt.
    metrics: Vec<Arc<StorageMetrics>>,
    /// The stores' names, never the URLs as given: they may hold credentials.
    names: Vec<String>,
}

/// Each URL's dataset, opened as `options` say, with its weight.
fn open(args: &Args, options: &LoaderOptions) -> Result<Opened> {
    let progress = !args.json && !args.print_keys;
    let mut opened = Opened {
        sources: Vec::with_capacity(args.urls.len()),
        metrics: Vec::new(),
        names: Vec::new(),
    };
    for (i, url) in args.urls.iter().enumerate() {
        let root = store_url(url)?;
        let store = from_url(&root, parse_store_options(&args.options)?)?.with_metrics();
        opened.metrics.push(store.metrics());
        let store = store.into_dyn();
        opened.names.push(store.name().to_owned());
        let dataset = open_dataset(url, &store, options, progress)?;
        match dataset.tokens() {
            Some(files) => eprintln!(
                "{} blocks of {} tokens in {} files at {}",
                dataset.len(),
                files.blocking().row_len(),
                files.files().len(),
                store.name()
            ),
            None => eprintln!(
                "{} samples, {} classes at {}",
                dataset.len(),
                dataset.classes().len(),
                store.name()
            ),
        }
        let weight = args.weights.get(i).copied().unwrap_or(1.0);
        opened
            .sources
            .push(Source::new(store, dataset).weight(weight));
    }
    Ok(opened)
}

/// The state written by `--save-state`.
fn read_state(path: &Path) -> Result<LoaderState> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the state {}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a loader state: {e}", path.display()))?)
}

/// Written whole, then renamed: a run killed while writing leaves the old state, and ranks
/// saving to one path each rename a whole file of their own.
fn save_state(state: &LoaderState, path: &Path) -> Result {
    let text = serde_json::to_string_pretty(state)?;
    let partial = path.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)?;
    Ok(())
}
