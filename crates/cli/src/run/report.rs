//! What a run says at its end: a summary for a person, or JSON (`--json`).

use std::io::Write;
use std::sync::Arc;

use loader_core::storage::layer::{CacheSnapshot, NodeSnapshot, StorageMetrics};
use loader_core::{DataLoader, LoaderState};

use super::Args;
use super::drive::{Tally, requests};
use crate::Result;

/// A finished run: its tally and what the loader knew at the end.
pub(super) struct Finished {
    tally: Tally,
    seconds: f64,
    state: Option<LoaderState>,
    cache: Option<CacheSnapshot>,
    /// The node's totals when ranks share the cache's directory: this rank's final figures
    /// and the others' as they last recorded them.
    node: Option<NodeSnapshot>,
    summary: Option<loader_core::Summary>,
}

impl Finished {
    /// `loader`'s last word on the run `tally` counted (the loader is dropped here, its
    /// threads joined, before anything is printed).
    pub(super) fn of<T: Send + 'static, B>(loader: DataLoader<T, B>, tally: Tally) -> Self {
        let state = loader.state().ok();
        let cache = loader.cache().map(|c| c.snapshot());
        let node = loader.cache().and_then(|c| {
            c.flush();
            c.node_snapshot()
        });
        let seconds = tally.start.elapsed().as_secs_f64();
        let summary = loader.metrics().map(|m| m.summary());
        Self {
            tally,
            seconds,
            state,
            cache,
            node,
            summary,
        }
    }
}

/// The run's summary, as `--json` or text.
pub(super) fn print(
    args: &Args,
    run: &Finished,
    names: &[String],
    metrics: &[Arc<StorageMetrics>],
) -> Result {
    if args.json {
        println!("{:#}", json(run, names, metrics));
        return Ok(());
    }
    // With --print-keys stdout holds the keys alone; the summary goes to stderr.
    let mut out: Box<dyn Write> = if args.print_keys {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    text(&mut out, run, names, metrics)
}

fn text(
    out: &mut dyn Write,
    run: &Finished,
    names: &[String],
    metrics: &[Arc<StorageMetrics>],
) -> Result {
    let t = &run.tally;
    let padding = if t.padded > 0 {
        format!(", {} padding repeats", t.padded)
    } else {
        String::new()
    };
    if t.tokens > 0 {
        writeln!(
            out,
            "{} blocks, {} tokens ({} skipped{padding}) in {:.1} s: {:.0} tokens/s",
            t.images,
            t.tokens,
            t.skipped,
            run.seconds,
            t.tokens as f64 / run.seconds
        )?;
    } else {
        writeln!(
            out,
            "{} images ({} skipped{padding}) in {:.1} s: {:.0} img/s",
            t.images,
            t.skipped,
            run.seconds,
            t.images as f64 / run.seconds
        )?;
    }
    if let Some(state) = &run.state {
        writeln!(
            out,
            "state: epoch {}, position {}",
            state.epoch, state.position
        )?;
    }
    if t.epochs.len() > 1 {
        for (e, epoch) in t.epochs.iter().enumerate() {
            writeln!(
                out,
                "epoch {}: {:.0} img/s, {} requests",
                t.first_epoch + e as u64,
                epoch["images_per_sec"].as_f64().unwrap_or(0.0),
                epoch["requests"]
            )?;
        }
    }
    for (name, m) in names.iter().zip(metrics) {
        writeln!(out, "storage {name}: {}", m.snapshot())?;
    }
    if let Some(cache) = &run.cache {
        writeln!(out, "cache: {cache}")?;
    }
    if let Some(node) = run.node.as_ref().filter(|n| n.processes > 1) {
        writeln!(out, "node cache: {node}")?;
    }
    if let Some(summary) = &run.summary {
        writeln!(out, "{summary}")?;
    }
    Ok(())
}

fn json(run: &Finished, names: &[String], metrics: &[Arc<StorageMetrics>]) -> serde_json::Value {
    let t = &run.tally;
    let (total_requests, total_bytes) = requests(metrics);
    serde_json::json!({
        // The stores' names, never the URLs as given: they may hold credentials.
        "url": names.join(", "),
        "images": t.images,
        "skipped": t.skipped,
        "padded": t.padded,
        "batches": t.batches,
        "seconds": run.seconds,
        "images_per_sec": t.images as f64 / run.seconds,
        // Token datasets: the tokens trained on (blocks are counted as `images`).
        "tokens": (t.tokens > 0).then_some(t.tokens),
        "tokens_per_sec": (t.tokens > 0).then(|| t.tokens as f64 / run.seconds),
        "bytes": total_bytes,
        "requests": total_requests,
        "state": run.state.as_ref().map(|s| serde_json::json!({"epoch": s.epoch, "position": s.position})),
        "bottleneck": run.summary.as_ref().map(|s| s.bottleneck()),
        "epochs": t.epochs,
        "cache": run.cache.as_ref().map(cache_json),
        "node_cache": run.node.as_ref().map(|n| serde_json::json!({
            "processes": n.processes,
            "hits": n.hits,
            "misses": n.misses,
            "hit_rate": n.hit_rate(),
            "bytes_from_cache": n.bytes_served,
            "bytes_fetched": n.bytes_fetched,
            "requests": n.requests,
            "evictions": n.evictions,
            "corrupt": n.corrupt,
        })),
    })
}

fn cache_json(c: &CacheSnapshot) -> serde_json::Value {
    serde_json::json!({
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
    })
}
