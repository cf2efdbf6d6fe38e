//! The matrix: every row x format x strategy measured in turn, each beside a fresh
//! measurement of the one-core ceiling, and with `--cache` a cold and a warm epoch.

use std::path::Path;
use std::sync::Arc;

use loader_core::storage::layer::CacheConfig;
use loader_core::{
    DataLoader, DataLoaderBuilder, Dataset, DynStorage, LoaderOptions, Pipeline, ShardOrder,
    StorageExt,
};

use super::Args;
use super::measure::{CeilingProbe, cold_epoch, measure, warmup_for};
use super::rows::Row;
use crate::options::fetch;
use crate::report::{Cell, DecoderRate, Format};
use crate::{Result, Strategy};

/// Every cell, the ceilings measured around them, and the decoders' one-core rates.
pub(super) fn measure_all(
    args: &Args,
    options: &LoaderOptions,
    root: &Path,
    rows: &[Row],
    datasets: &[(Format, Dataset)],
    cores: usize,
) -> Result<(Vec<Cell>, Vec<f64>, Vec<DecoderRate>)> {
    // The one-core pipeline speed moves 10-20% with the load of this shared machine, so it
    // is measured before the first cell and after each, and each cell's efficiency is
    // taken against the mean of the two measurements beside it: a ratio measured side by
    // side, as the machine was at the time.
    let (first, dataset) = (&rows[0], &datasets[0].1);
    let probe = CeilingProbe::new(&(first.open)(args.formats[0].bucket())?, dataset)?;
    let mut ceilings = vec![probe.measure()?];
    eprintln!(
        "evaluation pipeline alone on one core: {:.0} images/s",
        ceilings[0]
    );
    let decoders = probe.decoders()?;
    let mut cells = Vec::new();
    for row in rows {
        for (format, dataset) in datasets {
            let store = (row.open)(format.bucket())?;
            for &strategy in &args.strategies {
                let cell = Setting {
                    args,
                    options,
                    row,
                    format: *format,
                    dataset,
                    strategy,
                    workers: args.workers.unwrap_or(cores),
                };
                let mut cell = cell.measure(&store, root, &probe, &mut ceilings)?;
                cells.append(&mut cell);
            }
        }
    }
    Ok((cells, ceilings, decoders))
}

/// One cell's setting: its row, format and strategy.
struct Setting<'a> {
    args: &'a Args,
    options: &'a LoaderOptions,
    row: &'a Row,
    format: Format,
    dataset: &'a Dataset,
    strategy: Strategy,
    workers: usize,
}

impl Setting<'_> {
    /// The requests in flight the cell is named by (the adaptive limit is read after).
    fn concurrency(&self) -> usize {
        match self.strategy {
            Strategy::Sequential => self.workers,
            Strategy::Threads => self.args.threads,
            Strategy::Async => self.args.max_in_flight.unwrap_or(0),
        }
    }

    fn loader(&self, store: DynStorage) -> DataLoaderBuilder {
        let threads = if self.strategy == Strategy::Sequential {
            self.workers
        } else {
            self.args.threads
        };
        DataLoader::builder(store, self.dataset.clone())
            .options(self.options.clone())
            .fetch(fetch(self.strategy, self.args.max_in_flight, threads))
            .shuffle(self.format != Format::Files)
            .shard_order(if self.format.global() {
                ShardOrder::Global
            } else {
                ShardOrder::Local
            })
            .transform(Pipeline::imagenet_eval())
    }

    /// The cell measured (and with `--cache`, its cold and warm epochs), each followed by
    /// a ceiling measurement.
    fn measure(
        &self,
        store: &DynStorage,
        root: &Path,
        probe: &CeilingProbe,
        ceilings: &mut Vec<f64>,
    ) -> Result<Vec<Cell>> {
        let (args, row, concurrency) = (self.args, self.row, self.concurrency());
        // One measured window of `loader`, the store's requests counted by `requests`.
        let measured = |loader, requests| -> Result<Cell> {
            let mut cell = measure(
                loader,
                &row.name,
                row.rtt,
                self.strategy,
                concurrency,
                args,
                requests,
                !args.json,
            )?;
            cell.format = self.format;
            Ok(cell)
        };
        let cell = measured(self.loader(Arc::clone(store)).build()?, None)?;
        ceilings.push(probe.measure()?);
        let mut cells = vec![cell];
        if !(args.cache && row.rtt.is_some() && self.strategy == Strategy::Async) {
            return Ok(cells);
        }
        let warmup = warmup_for(args.warmup, row.rtt);
        let dir = root.join(".bench-cache");
        let _ = std::fs::remove_dir_all(&dir);
        let counted = Arc::clone(store).with_metrics();
        let requests = counted.metrics();
        let loader = self
            .loader(counted.into_dyn())
            .cache(CacheConfig {
                dir: Some(dir.clone()),
                // The disk tier alone: epoch two from local disk.
                memory_bytes: 0,
                disk_bytes: u64::MAX / 2,
                ..CacheConfig::default()
            })
            .build()?;
        let (mut cold, loader) =
            cold_epoch(loader, &row.name, row.rtt, concurrency, &requests, warmup)?;
        cold.format = self.format;
        cells.push(cold);
        ceilings.push(probe.measure()?);
        let mut warm = measured(loader, Some(&requests))?;
        warm.cache = Some("warm");
        cells.push(warm);
        ceilings.push(probe.measure()?);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(cells)
    }
}
