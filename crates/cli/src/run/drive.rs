//! The run's passes over its epochs: batches counted, keys printed, skips reported, with a
//! progress bar.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::storage::layer::StorageMetrics;
use loader_core::tokens::TokenBatch;
use loader_core::{Batch, BatchInfo, DataLoader, LoaderOptions};

use super::Args;
use crate::Result;

/// A batch as a run counts it: its samples, and the tokens it trains on.
pub(super) trait Counted {
    /// Where its samples came from.
    fn info(&self) -> &BatchInfo;
    /// Tokens trained on, padding repeats left out (0 for images).
    fn tokens(&self) -> u64 {
        0
    }
}

impl Counted for Batch {
    fn info(&self) -> &BatchInfo {
        &self.info
    }
}

impl Counted for TokenBatch {
    fn info(&self) -> &BatchInfo {
        &self.info
    }
    fn tokens(&self) -> u64 {
        TokenBatch::tokens(self)
    }
}

/// What a run read.
pub(super) struct Tally {
    /// Samples delivered (images, or token blocks), padding left out.
    pub(super) images: usize,
    /// Tokens trained on (token datasets).
    pub(super) tokens: u64,
    pub(super) skipped: usize,
    /// Repeats that even out an epoch's last global batch.
    pub(super) padded: usize,
    pub(super) batches: u64,
    /// Each pass's figures: images, seconds, images per second, requests.
    pub(super) epochs: Vec<serde_json::Value>,
    pub(super) first_epoch: u64,
    pub(super) start: Instant,
}

/// Requests and bytes the stores have served so far.
pub(super) fn requests(metrics: &[Arc<StorageMetrics>]) -> (u64, u64) {
    metrics.iter().fold((0, 0), |(r, b), m| {
        let s = m.snapshot();
        (r + s.requests, b + s.bytes)
    })
}

/// Read the run's epochs (to `--stop-after-batches`), printing keys when asked.
pub(super) fn drive<T: Send + 'static, B: Counted>(
    loader: &mut DataLoader<T, B>,
    args: &Args,
    options: &LoaderOptions,
    metrics: &[Arc<StorageMetrics>],
) -> Result<Tally> {
    let first_epoch = loader.epoch();
    let passes = options.epochs.unwrap_or(1).saturating_sub(first_epoch);
    let bar = bar(loader, args, passes);
    let mut tally = Tally {
        images: 0,
        tokens: 0,
        skipped: 0,
        padded: 0,
        batches: 0,
        epochs: Vec::new(),
        first_epoch,
        start: Instant::now(),
    };
    let stdout = std::io::stdout();
    let mut keys_out = std::io::BufWriter::new(stdout.lock());
    let more = |tally: &Tally| args.stop_after_batches.is_none_or(|n| tally.batches < n);
    for _ in 0..passes {
        let (epoch_start, epoch_images) = (Instant::now(), tally.images);
        let epoch_requests = requests(metrics).0;
        while more(&tally) {
            let Some(batch) = loader.next() else { break };
            let batch = batch?;
            count(&mut tally, &batch, &bar);
            if args.print_keys {
                let info = batch.info();
                let real = info.indices.len() - info.padding;
                for (index, key) in info.indices[..real].iter().zip(&info.keys[..real]) {
                    let source = loader.source_of(*index).map_or(0, |(s, _)| s);
                    writeln!(keys_out, "{}\t{source}\t{key}", info.epoch)?;
                }
            }
            let secs = tally.start.elapsed().as_secs_f64().max(1e-9);
            let rate = match tally.tokens {
                0 => format!("{:.0} img/s", tally.images as f64 / secs),
                tokens => format!("{:.0} tokens/s", tokens as f64 / secs),
            };
            bar.set_message(format!(
                "{rate}, {:.1} MB/s",
                requests(metrics).1 as f64 / 1e6 / secs
            ));
            bar.inc(1);
        }
        // A last batch whose every sample was skipped is not delivered: its reports are here.
        for e in loader.take_unreported_skips() {
            bar.println(format!("skipped: {e}"));
            tally.skipped += 1;
        }
        let seconds = epoch_start.elapsed().as_secs_f64();
        tally.epochs.push(serde_json::json!({
            "images": tally.images - epoch_images,
            "seconds": seconds,
            "images_per_sec": (tally.images - epoch_images) as f64 / seconds.max(1e-9),
            "requests": requests(metrics).0 - epoch_requests,
        }));
        if !more(&tally) {
            break;
        }
    }
    keys_out.flush()?;
    bar.finish_and_clear();
    Ok(tally)
}

/// A batch's samples, tokens, padding and skips, counted; skips reported above the bar.
fn count(tally: &mut Tally, batch: &impl Counted, bar: &ProgressBar) {
    let info = batch.info();
    tally.batches += 1;
    tally.images += info.indices.len() - info.padding;
    tally.tokens += batch.tokens();
    tally.padded += info.padding;
    for e in &info.skipped {
        bar.println(format!("skipped: {e}"));
        tally.skipped += 1;
    }
}

/// The progress bar of `passes` epochs (or of `--stop-after-batches`), hidden when the
/// output is keys or JSON.
fn bar<T: Send + 'static, B>(loader: &DataLoader<T, B>, args: &Args, passes: u64) -> ProgressBar {
    let endless = loader.len() == usize::MAX;
    let total = match (args.stop_after_batches, endless) {
        (Some(n), _) => n,
        (None, true) => 0,
        (None, false) => loader.len() as u64 * passes,
    };
    let bar = if !args.json && !args.print_keys {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} batches {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
