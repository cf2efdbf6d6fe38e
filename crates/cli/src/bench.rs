//! `loader bench`: the paper's experiment — storage latency x fetch strategy — on a
//! generated dataset served by the in-process S3 server behind the delay proxy.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::decoder::{IMAGENET_MEAN, IMAGENET_STD, JpegDecoder, SampleData};
use loader_core::storage::layer::{CacheConfig, StorageMetrics};
use loader_core::webdataset::WebDataset;
use loader_core::{
    DataLoader, Dataset, DecodeOptions, DynStorage, LoaderOptions, Pipeline, SampleKey, ShardOrder,
    SourceContext, StorageExt, from_url,
};
use loader_testkit::{DelayProxy, S3Server};

use crate::options::{LoaderArgs, fetch, parse_store_options};
use crate::report::{Cell, DecoderRate, Format, Report};
use crate::{Result, Strategy, gen_data};

/// Arguments of `loader bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset to generate (once; it is reused from the cache).
    #[command(flatten)]
    dataset: gen_data::DataArgs,
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

/// The batch size the benchmark measures unless `--batch-size` says otherwise: the paper's.
const BENCH_BATCH_SIZE: usize = 64;

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

/// Peak resident memory of this process since the last reset, in MB (Linux).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Start measuring peak memory afresh (Linux: writing 5 to clear_refs resets VmHWM).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// User + system CPU time of this process (loader and in-process server together).
fn cpu_time() -> Duration {
    loader_core::scheduler::process_cpu_time().unwrap_or_default()
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
    let bucket_dir = root.join("bench");
    let marker = root.join(".complete");
    let packed = args.formats.contains(&Format::Packed256);
    // The packed row is made from the files row's images.
    let files = args.formats.contains(&Format::Files) || packed;
    let sharded = args
        .formats
        .iter()
        .any(|f| matches!(f, Format::ShardsLocal | Format::ShardsGlobal));
    let shard_dir = root.join("shards");
    let shard_marker = root.join(format!(".shards-{}-complete", args.shard_images));
    if args.endpoint.is_none() && sharded && !shard_marker.exists() {
        eprintln!(
            "generating {} images as shards in {} ...",
            args.dataset.images,
            shard_dir.display()
        );
        let _ = std::fs::remove_dir_all(&shard_dir);
        let spec = args.dataset.spec();
        let shards = args.dataset.images.div_ceil(args.shard_images.max(1));
        gen_data::write_shards(&spec, &shard_dir, shards, !args.json)?;
        std::fs::write(&shard_marker, b"")?;
    }
    // Parquet files of four shards' images each, with an offset index and without one.
    for (indexed, wanted) in [
        (true, Format::ParquetLocal),
        (false, Format::ParquetNoIndex),
    ] {
        let wanted = args
            .formats
            .iter()
            .any(|f| f.parquet() && (*f == wanted || (indexed && *f == Format::ParquetGlobal)));
        let per_file = 4 * args.shard_images.max(1);
        let dir = root.join(wanted_bucket(indexed));
        let done = root.join(format!(".{}-{per_file}-complete", wanted_bucket(indexed)));
        if args.endpoint.is_none() && wanted && !done.exists() {
            eprintln!(
                "generating {} images as Parquet files in {} ...",
                args.dataset.images,
                dir.display()
            );
            let _ = std::fs::remove_dir_all(&dir);
            let files = args.dataset.images.div_ceil(per_file);
            crate::gen_parquet::write_parquet(
                &args.dataset.spec(),
                &dir,
                files,
                indexed,
                !args.json,
            )?;
            std::fs::write(&done, b"")?;
        }
    }
    let mds_marker = root.join(".mds-complete");
    if args.endpoint.is_none() && args.formats.contains(&Format::Mds) && !mds_marker.exists() {
        let dir = root.join(Format::Mds.bucket());
        eprintln!(
            "generating {} images as MDS shards in {} ...",
            args.dataset.images,
            dir.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
        crate::gen_mds::write_mds(&args.dataset.spec(), &dir, !args.json)?;
        std::fs::write(&mds_marker, b"")?;
    }
    if args.endpoint.is_none() && files && !marker.exists() {
        eprintln!(
            "generating {} images in {} ...",
            args.dataset.images,
            bucket_dir.display()
        );
        let spec = args.dataset.spec();
        gen_data::write(&spec, &bucket_dir, !args.json)?;
        std::fs::write(&marker, b"")?;
    }
    let packed_dir = root.join(Format::Packed256.bucket());
    let packed_marker = root.join(".packed-256-complete");
    if args.endpoint.is_none() && packed && !packed_marker.exists() {
        eprintln!(
            "packing {} images at 256 px into {} ...",
            args.dataset.images,
            packed_dir.display()
        );
        let _ = std::fs::remove_dir_all(&packed_dir);
        crate::pack::main(crate::pack::Args::resized(
            &bucket_dir,
            &packed_dir,
            256,
            4 << 20,
        ))?;
        std::fs::write(&packed_marker, b"")?;
    }

    // The rows: local disk, then the S3 server at each round-trip time.
    let server = if args.endpoint.is_none() {
        Some(S3Server::start(&root)?)
    } else {
        None
    };
    // Each row opens a store per bucket (format).
    type Open = Box<dyn Fn(&str) -> Result<DynStorage>>;
    let mut rows: Vec<(String, Option<u64>, Open, Option<DelayProxy>)> = Vec::new();
    if !args.no_local && args.endpoint.is_none() {
        let root = root.clone();
        rows.push((
            "local disk".into(),
            None,
            Box::new(move |bucket: &str| {
                Ok(from_url(
                    &root.join(bucket).to_string_lossy(),
                    Vec::<(String, String)>::new(),
                )?)
            }),
            None,
        ));
    }
    for &rtt in &args.rtts {
        let (store, proxy) = match (&server, &args.endpoint) {
            (Some(server), _) => {
                let proxy = if rtt > 0 {
                    Some(DelayProxy::start(
                        server.addr(),
                        Duration::from_millis(rtt),
                    )?)
                } else {
                    None
                };
                let endpoint = proxy
                    .as_ref()
                    .map_or_else(|| server.endpoint(), DelayProxy::url);
                let options = server.options_for(&endpoint);
                let open: Open = Box::new(move |bucket: &str| {
                    Ok(from_url(&format!("s3://{bucket}"), options.clone())?)
                });
                (open, proxy)
            }
            (None, Some(endpoint)) => {
                let url = format!("s3://{}", args.bucket.as_deref().unwrap_or_default());
                let mut options = parse_store_options(&args.options)?;
                options.push(("aws_endpoint".into(), endpoint.clone()));
                // An external endpoint holds one dataset, at --bucket.
                let open: Open = Box::new(move |_: &str| Ok(from_url(&url, options.clone())?));
                (open, None)
            }
            (None, None) => unreachable!("either the in-process server or an endpoint"),
        };
        rows.push((format!("S3, RTT {rtt} ms"), Some(rtt), store, proxy));
    }
    let Some((_, _, first, _)) = rows.first() else {
        return Err("no rows: give --rtts or drop --no-local".into());
    };
    let mut datasets = Vec::new();
    for &format in &args.formats {
        let store = first(format.bucket())?;
        let dataset = match format {
            Format::Files => Dataset::image_folder_blocking(&*store)?,
            f if f.parquet() || f == Format::Mds || f == Format::Packed256 => {
                let context = SourceContext::new(store.clone(), &LoaderOptions::default());
                Dataset::open_blocking("", &context)?
            }
            _ => {
                let shards: Vec<String> =
                    (0..args.dataset.images.div_ceil(args.shard_images.max(1)))
                        .map(|s| format!("shard-{s:06}.tar"))
                        .collect();
                WebDataset::new().load_blocking(&store, &shards)?
            }
        };
        eprintln!("{format:?}: {} images", dataset.len());
        datasets.push((format, dataset));
    }
    let Some((_, dataset)) = datasets.first() else {
        return Err("--formats lists no format".into());
    };

    // The one-core pipeline speed moves 10-20% with the load of this shared machine, so it
    // is measured before the first cell and after each, and each cell's efficiency is
    // taken against the mean of the two measurements beside it: a ratio measured side by
    // side, as the machine was at the time.
    let probe = CeilingProbe::new(&first(args.formats[0].bucket())?, dataset)?;
    let mut ceilings = vec![probe.measure()?];
    eprintln!(
        "evaluation pipeline alone on one core: {:.0} images/s",
        ceilings[0]
    );
    let decoders = probe.decoders()?;

    let workers = args.workers.unwrap_or(cores);
    let mut cells = Vec::new();
    for (row, rtt, open, _proxy) in &rows {
        for (format, dataset) in &datasets {
            let store = open(format.bucket())?;
            for &strategy in &args.strategies {
                let concurrency = match strategy {
                    Strategy::Sequential => workers,
                    Strategy::Threads => args.threads,
                    Strategy::Async => args.max_in_flight.unwrap_or(0), // adaptive: the limit reached, after
                };
                let fetch = fetch(
                    strategy,
                    args.max_in_flight,
                    if strategy == Strategy::Sequential {
                        workers
                    } else {
                        args.threads
                    },
                );
                let loader_of = |store: DynStorage| {
                    DataLoader::builder(store, dataset.clone())
                        .options(options.clone())
                        .fetch(fetch)
                        .shuffle(*format != Format::Files)
                        .shard_order(if format.global() {
                            ShardOrder::Global
                        } else {
                            ShardOrder::Local
                        })
                        .transform(Pipeline::imagenet_eval())
                };
                let loader = loader_of(Arc::clone(&store)).build()?;
                let mut cell = measure(
                    loader,
                    row,
                    *rtt,
                    strategy,
                    concurrency,
                    &args,
                    None,
                    !args.json,
                )?;
                cell.format = *format;
                cells.push(cell);
                ceilings.push(probe.measure()?);
                if args.cache && rtt.is_some() && strategy == Strategy::Async {
                    let warmup = warmup_for(args.warmup, *rtt);
                    let dir = root.join(".bench-cache");
                    let _ = std::fs::remove_dir_all(&dir);
                    let counted = Arc::clone(&store).with_metrics();
                    let requests = counted.metrics();
                    let loader = loader_of(counted.into_dyn())
                        .cache(CacheConfig {
                            dir: Some(dir.clone()),
                            // The disk tier alone: epoch two from local disk.
                            memory_bytes: 0,
                            disk_bytes: u64::MAX / 2,
                            ..CacheConfig::default()
                        })
                        .build()?;
                    let (mut cold, loader) =
                        cold_epoch(loader, row, *rtt, concurrency, &requests, warmup)?;
                    cold.format = *format;
                    cells.push(cold);
                    ceilings.push(probe.measure()?);
                    let mut warm = measure(
                        loader,
                        row,
                        *rtt,
                        strategy,
                        concurrency,
                        &args,
                        Some(&requests),
                        !args.json,
                    )?;
                    warm.format = *format;
                    warm.cache = Some("warm");
                    cells.push(warm);
                    ceilings.push(probe.measure()?);
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
    }
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

/// The evaluation pipeline alone on one core, over up to 100 of the dataset's images held
/// in memory: the CPU ceiling's unit.
struct CeilingProbe {
    bytes: Vec<Vec<u8>>,
    pipeline: Pipeline,
}

impl CeilingProbe {
    fn new(store: &DynStorage, dataset: &Dataset) -> Result<Self> {
        // Through a loader that hands out the fetched bytes: a sample is not always a byte
        // range of its object (a Parquet row is cut out of its decoded page).
        let n = dataset.len().min(100);
        let loader = DataLoader::builder(Arc::clone(store), dataset.clone())
            .subset(0..n)
            .batch_size(n.max(1))
            .map(
                |bytes, _| Ok(bytes.to_vec()),
                |raw: loader_core::RawBatch<Vec<u8>>| {
                    Ok(raw.samples.into_iter().map(|(_, b)| b).collect::<Vec<_>>())
                },
            )
            .build()?;
        let mut bytes = Vec::with_capacity(n);
        for batch in loader {
            bytes.extend(batch?);
        }
        Ok(Self {
            bytes,
            pipeline: Pipeline::imagenet_eval(),
        })
    }

    /// One pass over the images, each written into the last one's output buffer as the
    /// loader's decode threads do, so the pipeline's own work is what is timed and not
    /// the state of this thread's heap.
    fn pass(&self, pipeline: &Pipeline, epoch: u64) -> Result<()> {
        let mut reuse = SampleData::F32(Vec::new());
        for (i, b) in self.bytes.iter().enumerate() {
            let index = i as u64;
            reuse = pipeline
                .run_reusing(b, SampleKey { epoch, index }, reuse)?
                .data;
        }
        Ok(())
    }

    /// Images/s on this thread. Warm, as the cells are measured warm: one untimed pass,
    /// then passes for at least 1 s.
    fn measure(&self) -> Result<f64> {
        self.measure_with(&self.pipeline)
    }

    fn measure_with(&self, pipeline: &Pipeline) -> Result<f64> {
        self.pass(pipeline, 0)?;
        let (start, mut passes) = (Instant::now(), 0u64);
        while passes == 0 || start.elapsed() < Duration::from_secs(1) {
            passes += 1;
            self.pass(pipeline, passes)?;
        }
        Ok((passes as usize * self.bytes.len()) as f64 / start.elapsed().as_secs_f64().max(1e-9))
    }

    /// The ImageNet pipelines on one core with each JPEG decoder and mode, on the same
    /// images: what the decoder choice is worth on this machine.
    fn decoders(&self) -> Result<Vec<DecoderRate>> {
        let modes = [
            ("libjpeg-turbo", JpegDecoder::LibjpegTurbo, false),
            ("zune", JpegDecoder::Zune, false),
            ("libjpeg-turbo draft", JpegDecoder::LibjpegTurbo, true),
        ];
        let mut rates = Vec::new();
        for pipeline_name in ["imagenet_eval", "imagenet_train"] {
            for (decoder, jpeg, draft) in modes {
                let builder = match pipeline_name {
                    "imagenet_eval" => Pipeline::builder().resize(256).center_crop(224),
                    _ => Pipeline::builder()
                        .random_resized_crop(224)
                        .random_horizontal_flip(0.5),
                };
                let pipeline = builder
                    .to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD)
                    .decode_options(DecodeOptions {
                        jpeg,
                        draft,
                        ..DecodeOptions::default()
                    })
                    .build()?;
                rates.push(DecoderRate {
                    pipeline: pipeline_name.to_string(),
                    decoder: decoder.to_string(),
                    images_per_sec: self.measure_with(&pipeline)?,
                });
            }
        }
        Ok(rates)
    }
}

/// The warm-up of a cell at `rtt`: as given, and at least eight round trips.
fn warmup_for(seconds: f64, rtt: Option<u64>) -> Duration {
    let trips = Duration::from_millis(8 * rtt.unwrap_or(0));
    Duration::from_secs_f64(seconds).max(trips)
}

/// A cell's concurrency: as given, or with an adaptive in-flight limit the limit the loader
/// reached.
fn adaptive_limit(given: usize, summary: Option<&loader_core::Summary>) -> usize {
    match summary {
        Some(s) if s.adaptive => s.in_flight_limit,
        _ => given,
    }
}

/// Run one cell until its time or image budget is spent (across epochs if needed).
/// The first epoch through an empty cache, timed from the end of the warm-up (as the other
/// cells are) to the end of the epoch: a cell, and the loader to go on with.
fn cold_epoch(
    mut loader: DataLoader,
    row: &str,
    rtt: Option<u64>,
    concurrency: usize,
    requests: &StorageMetrics,
    warmup: Duration,
) -> Result<(Cell, DataLoader)> {
    reset_peak_rss();
    let begun = Instant::now();
    let mut clock = None;
    let mut images = 0;
    for batch in &mut loader {
        let batch = batch?;
        match clock {
            None if begun.elapsed() >= warmup => {
                clock = Some((Instant::now(), cpu_time(), requests.snapshot()));
            }
            None => {}
            Some(_) => images += batch.len(),
        }
    }
    let Some((start, cpu, before)) = clock else {
        return Err("the cold epoch ended during its warm-up: generate more images".into());
    };
    let seconds = start.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu).as_secs_f64();
    let after = requests.snapshot();
    let summary = loader.metrics().map(|m| m.summary());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let cell = Cell {
        row: row.to_owned(),
        rtt_ms: rtt,
        strategy: Strategy::Async,
        concurrency: adaptive_limit(concurrency, summary.as_ref()),
        images,
        seconds,
        images_per_sec: images as f64 / seconds,
        mb_per_sec: (after.bytes - before.bytes) as f64 / 1e6 / seconds,
        cpu_ms_per_image: cpu * 1e3 / images.max(1) as f64,
        wait_p50_ms: summary.as_ref().map_or(0.0, |s| ms(s.consumer_wait.p50)),
        wait_p99_ms: summary.as_ref().map_or(0.0, |s| ms(s.consumer_wait.p99)),
        bottleneck: summary.map(|s| s.bottleneck()).unwrap_or_default(),
        format: Format::Files,
        gets_per_image: (after.requests - before.requests) as f64 / images.max(1) as f64,
        peak_rss_mb: peak_rss_mb(),
        cache: Some("cold"),
    };
    Ok((cell, loader))
}

/// Measure `loader` over a window after its warm-up. GETs and bytes are the engine's
/// fetches, or with `requests` the store's (under a cache, hits are fetches too).
#[allow(clippy::too_many_arguments)]
fn measure(
    mut loader: DataLoader,
    row: &str,
    rtt: Option<u64>,
    strategy: Strategy,
    concurrency: usize,
    args: &Args,
    requests: Option<&StorageMetrics>,
    progress: bool,
) -> Result<Cell> {
    let bar = if progress {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let (limit, warmup) = (
        Duration::from_secs_f64(args.seconds),
        warmup_for(args.warmup, rtt),
    );
    // The clock, the CPU time and the bytes fetched when the warm-up ended.
    let fetched = |loader: &DataLoader| match requests {
        Some(r) => {
            let s = r.snapshot();
            (s.bytes, s.requests)
        }
        None => loader.metrics().map_or((0, 0), |m| {
            let s = m.summary();
            (s.bytes, s.fetch.count)
        }),
    };
    let begun = Instant::now();
    reset_peak_rss();
    let mut clock = (warmup.is_zero()).then(|| (Instant::now(), cpu_time(), (0, 0)));
    let mut images = 0usize;
    'cells: loop {
        while let Some(batch) = loader.next() {
            let batch = batch?;
            let Some((start, _, _)) = clock else {
                if begun.elapsed() >= warmup {
                    clock = Some((Instant::now(), cpu_time(), fetched(&loader)));
                }
                continue;
            };
            images += batch.len();
            bar.set_message(format!(
                "{row:<16} {:<10} {images:>5} images, {:.0} img/s",
                format!("{strategy:?}").to_lowercase(),
                images as f64 / start.elapsed().as_secs_f64().max(1e-9)
            ));
            if images >= args.max_images || start.elapsed() >= limit {
                break 'cells;
            }
        }
    }
    let Some((start, cpu, fetched_before)) = clock else {
        return Err("the cell ended during its warm-up".into());
    };
    let seconds = start.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu).as_secs_f64();
    let summary = loader.metrics().map(|m| m.summary());
    let (fetched, gets) = fetched(&loader);
    drop(loader);
    bar.finish_and_clear();
    let fetched = fetched.saturating_sub(fetched_before.0);
    let gets = gets.saturating_sub(fetched_before.1);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(Cell {
        row: row.to_owned(),
        rtt_ms: rtt,
        strategy,
        concurrency: adaptive_limit(concurrency, summary.as_ref()),
        images,
        seconds,
        images_per_sec: images as f64 / seconds,
        mb_per_sec: fetched as f64 / 1e6 / seconds,
        cpu_ms_per_image: cpu * 1e3 / images.max(1) as f64,
        wait_p50_ms: summary.as_ref().map_or(0.0, |s| ms(s.consumer_wait.p50)),
        wait_p99_ms: summary.as_ref().map_or(0.0, |s| ms(s.consumer_wait.p99)),
        bottleneck: summary.map(|s| s.bottleneck()).unwrap_or_default(),
        format: Format::Files,
        gets_per_image: gets as f64 / images.max(1) as f64,
        peak_rss_mb: peak_rss_mb(),
        cache: None,
    })
}
