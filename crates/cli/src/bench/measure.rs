//! One cell's measurement: a loader read for the warm-up and the measured seconds, a cold
//! epoch into the cache, and the one-core ceiling probe the cells are compared with.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::decoder::{IMAGENET_MEAN, IMAGENET_STD, JpegDecoder, SampleData};
use loader_core::storage::layer::StorageMetrics;
use loader_core::{DataLoader, Dataset, DecodeOptions, DynStorage, Pipeline, SampleKey};

use super::Args;
use crate::report::{Cell, DecoderRate, Format};
use crate::{Result, Strategy};

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

/// The evaluation pipeline alone on one core, over up to 100 of the dataset's images held
/// in memory: the CPU ceiling's unit.
pub(super) struct CeilingProbe {
    bytes: Vec<Vec<u8>>,
    pipeline: Pipeline,
}

impl CeilingProbe {
    pub(super) fn new(store: &DynStorage, dataset: &Dataset) -> Result<Self> {
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
    pub(super) fn measure(&self) -> Result<f64> {
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
    pub(super) fn decoders(&self) -> Result<Vec<DecoderRate>> {
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
pub(super) fn warmup_for(seconds: f64, rtt: Option<u64>) -> Duration {
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
pub(super) fn cold_epoch(
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
pub(super) fn measure(
    mut loader: DataLoader,
    row: &str,
    rtt: Option<u64>,
    strategy: Strategy,
    concurrency: usize,
    args: &Args,
    requests: Option<&StorageMetrics>,
    progress: bool,
) -> Result<Cell> {
    let bar = spinner(progress);
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

/// A cell's spinner, hidden without a terminal to show it.
fn spinner(progress: bool) -> ProgressBar {
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
    bar
}
