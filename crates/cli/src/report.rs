//! The benchmark's results: a table, report.md, results.json and an SVG plot.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::{Result, Strategy};

/// How the benchmark's dataset is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One object per image, read in order.
    Files,
    /// WebDataset shards, shuffled in shard-local order.
    ShardsLocal,
    /// WebDataset shards, one global permutation.
    ShardsGlobal,
    /// Parquet files in Hugging Face's layout with an offset index, file-local order: a
    /// GET per page.
    ParquetLocal,
    /// The same files, one global permutation: a GET per sample's page.
    ParquetGlobal,
    /// Parquet files without an offset index (pyarrow's default), file-local order: a GET
    /// per row group's image column chunk.
    ParquetNoIndex,
    /// Raw MDS shards (MosaicML Streaming), shard-local order: a GET per 4 MiB chunk.
    Mds,
    /// The `files` row's images packed by `loader pack --resize 256` (shorter side 256
    /// px, JPEG quality 90) into WebDataset shards of 4 MiB, shard-local order.
    #[value(name = "packed-256")]
    #[serde(rename = "packed-256")]
    Packed256,
}

impl Format {
    /// The bucket holding this format's data.
    pub fn bucket(self) -> &'static str {
        match self {
            Format::Files => "bench",
            Format::ShardsLocal | Format::ShardsGlobal => "shards",
            Format::ParquetLocal | Format::ParquetGlobal => "parquet",
            Format::ParquetNoIndex => "parquet-noindex",
            Format::Mds => "mds",
            Format::Packed256 => "packed-256",
        }
    }

    /// Whether the format reads its samples in one global permutation.
    pub fn global(self) -> bool {
        matches!(self, Format::ShardsGlobal | Format::ParquetGlobal)
    }

    /// Whether its data is Parquet files.
    pub fn parquet(self) -> bool {
        matches!(
            self,
            Format::ParquetLocal | Format::ParquetGlobal | Format::ParquetNoIndex
        )
    }
}

/// One measured cell: a storage row and a strategy.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// The storage row, e.g. "S3, RTT 50 ms".
    pub row: String,
    /// The added round-trip time, `None` for local disk.
    pub rtt_ms: Option<u64>,
    /// The fetch strategy.
    pub strategy: Strategy,
    /// Its concurrency: workers, threads or requests in flight.
    pub concurrency: usize,
    /// Images delivered.
    pub images: usize,
    /// Wall time.
    pub seconds: f64,
    /// Images per second.
    pub images_per_sec: f64,
    /// Megabytes fetched per second.
    pub mb_per_sec: f64,
    /// CPU time of the whole process (loader and in-process server) per image.
    pub cpu_ms_per_image: f64,
    /// Median time the consumer waited for a batch.
    pub wait_p50_ms: f64,
    /// 99th percentile of the consumer's wait for a batch.
    pub wait_p99_ms: f64,
    /// The engine's bottleneck line.
    pub bottleneck: String,
    /// How the dataset was stored.
    pub format: Format,
    /// Storage requests per image delivered.
    pub gets_per_image: f64,
    /// Peak resident memory of the process (loader and in-process server) during the cell.
    pub peak_rss_mb: Option<f64>,
    /// With `--cache`: `cold` for the first epoch through an empty cache, `warm` after it.
    pub cache: Option<&'static str>,
}

/// A cell with the ratios that need the other cells.
#[derive(Debug, Clone, Serialize)]
pub struct Derived {
    /// The measurements.
    #[serde(flatten)]
    pub cell: Cell,
    /// Images/s over `sequential`'s in the same row.
    pub speedup_over_sequential: Option<f64>,
    /// Images/s over the same strategy's at 0 ms RTT.
    pub latency_hiding: Option<f64>,
    /// Images/s over the same strategy's on local disk.
    pub vs_local: Option<f64>,
    /// The evaluation pipeline alone on one core, images/s: the mean of the runs just
    /// before and just after this cell, the unit of its efficiency.
    pub one_core_images_per_sec: f64,
    /// Images/s over cores x the one-core pipeline's images/s beside this cell.
    pub efficiency: f64,
}

/// Everything one `loader bench` run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The command line.
    pub command: String,
    /// Cores of the machine.
    pub cores: usize,
    /// Batch size.
    pub batch_size: usize,
    /// The evaluation pipeline alone on one core, images/s: the median of the
    /// measurements below, for the plot's ceiling line.
    pub one_core_pipeline_images_per_sec: f64,
    /// Each measurement of it, before the first cell and after each.
    pub one_core_pipeline_runs: Vec<f64>,
    /// The cells, with ratios.
    pub cells: Vec<Derived>,
    /// The ImageNet pipelines on one core by JPEG decoder and mode, measured once before
    /// the first cell.
    pub decoders: Vec<DecoderRate>,
}

/// One pipeline with one JPEG decoder (and mode) on one core.
#[derive(Debug, Clone, Serialize)]
pub struct DecoderRate {
    /// `imagenet_eval` or `imagenet_train`.
    pub pipeline: String,
    /// `libjpeg-turbo`, `zune`, or `libjpeg-turbo draft` (DCT-scaled decode).
    pub decoder: String,
    /// Images/s.
    pub images_per_sec: f64,
}

impl Report {
    /// Compute the ratios. `ceilings` holds the one-core runs in order: one before the
    /// first cell and one after each, so cell `i` sits between runs `i` and `i + 1`.
    pub fn new(
        cells: Vec<Cell>,
        ceilings: Vec<f64>,
        cores: usize,
        batch_size: usize,
        command: String,
    ) -> Self {
        let rate = |row: &str, format: Format, strategy: Strategy| {
            cells
                .iter()
                .find(|c| c.row == row && c.strategy == strategy && c.format == format)
                .map(|c| c.images_per_sec)
        };
        let at_zero = |format: Format, strategy: Strategy| {
            cells
                .iter()
                .find(|c| {
                    c.rtt_ms == Some(0)
                        && c.cache.is_none()
                        && c.strategy == strategy
                        && c.format == format
                })
                .map(|c| c.images_per_sec)
        };
        let local = |format: Format, strategy: Strategy| {
            cells
                .iter()
                .find(|c| c.rtt_ms.is_none() && c.strategy == strategy && c.format == format)
                .map(|c| c.images_per_sec)
        };
        let ceiling = median(&ceilings);
        let beside = |i: usize| match (ceilings.get(i), ceilings.get(i + 1)) {
            (Some(before), Some(after)) => (before + after) / 2.0,
            _ => ceiling,
        };
        let derived = cells
            .iter()
            .enumerate()
            .map(|(i, c)| Derived {
                speedup_over_sequential: rate(&c.row, c.format, Strategy::Sequential)
                    .map(|s| c.images_per_sec / s.max(1e-9)),
                latency_hiding: c
                    .rtt_ms
                    .and(at_zero(c.format, c.strategy))
                    .map(|z| c.images_per_sec / z.max(1e-9)),
                vs_local: c
                    .rtt_ms
                    .and(local(c.format, c.strategy))
                    .map(|l| c.images_per_sec / l.max(1e-9)),
                one_core_images_per_sec: beside(i),
                efficiency: c.images_per_sec / (cores as f64 * beside(i)).max(1e-9),
                cell: c.clone(),
            })
            .collect();
        Self {
            command,
            cores,
            batch_size,
            one_core_pipeline_images_per_sec: ceiling,
            one_core_pipeline_runs: ceilings,
            cells: derived,
            decoders: Vec::new(),
        }
    }

    /// The results as a Markdown table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let runs = &self.one_core_pipeline_runs;
        let (low, high) = runs
            .iter()
            .fold((f64::INFINITY, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
        let _ = writeln!(
            out,
            "CPU ceiling: the evaluation pipeline alone runs at {:.0} images/s on one core (median of {} runs, one before the first cell and one after each: {low:.0}-{high:.0}); {} cores, batch {}. Each cell's efficiency is img/s over cores x the mean of the two runs beside it (the 1-core column).\n",
            self.one_core_pipeline_images_per_sec,
            runs.len(),
            self.cores,
            self.batch_size
        );
        if !self.decoders.is_empty() {
            let mut line = String::from("Decode and transform on one core, by JPEG decoder:");
            for pipeline in ["imagenet_eval", "imagenet_train"] {
                let rates: Vec<String> = self
                    .decoders
                    .iter()
                    .filter(|r| r.pipeline == pipeline)
                    .map(|r| format!("{} {:.0}", r.decoder, r.images_per_sec))
                    .collect();
                let _ = write!(line, " {pipeline}: {};", rates.join(", "));
            }
            line.pop();
            let _ = writeln!(
                out,
                "{line} images/s (draft changes pixels; docs/python.md, \"Decode modes\").\n"
            );
        }
        let _ = writeln!(
            out,
            "| storage | format | strategy | img/s | MB/s | GET/img | CPU ms/img | peak RSS MB | wait p50 ms | wait p99 ms | vs sequential | latency hiding | vs local disk | 1-core img/s | efficiency |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let ratio = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}x"));
        for d in &self.cells {
            let c = &d.cell;
            let _ = writeln!(
                out,
                "| {}{} | {} | {} ({}) | {:.0} | {:.1} | {:.3} | {:.2} | {} | {:.1} | {:.1} | {} | {} | {} | {:.0} | {:.0}% |",
                c.row,
                c.cache.map_or(String::new(), |t| format!(", {t} cache")),
                serde_json::to_value(c.format)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                format!("{:?}", c.strategy).to_lowercase(),
                c.concurrency,
                c.images_per_sec,
                c.mb_per_sec,
                c.gets_per_image,
                c.cpu_ms_per_image,
                c.peak_rss_mb.map_or("–".to_owned(), |m| format!("{m:.0}")),
                c.wait_p50_ms,
                c.wait_p99_ms,
                ratio(d.speedup_over_sequential),
                ratio(d.latency_hiding),
                ratio(d.vs_local),
                d.one_core_images_per_sec,
                d.efficiency * 100.0
            );
        }
        out
    }

    /// Write report.md, results.json and plot.svg into `dir`.
    pub fn write(&self, dir: &Path) -> Result {
        std::fs::create_dir_all(dir)?;
        let mut md = String::from("# loader bench\n\n");
        let _ = writeln!(md, "`{}`\n", self.command);
        md.push_str(&self.table());
        md.push_str("\n![images/s against storage latency](plot.svg)\n\n## Bottlenecks\n\n");
        for d in &self.cells {
            let _ = writeln!(
                md,
                "- {} / {:?}: {}",
                d.cell.row, d.cell.strategy, d.cell.bottleneck
            );
        }
        std::fs::write(dir.join("report.md"), md)?;
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)?,
        )?;
        self.plot(&dir.join("plot.svg"))?;
        Ok(())
    }

    /// Images/s against RTT, one line per strategy, with the CPU ceiling for reference.
    fn plot(&self, path: &Path) -> Result {
        let points = |s: Strategy| -> Vec<(f64, f64)> {
            self.cells
                .iter()
                .filter(|d| d.cell.strategy == s && d.cell.cache.is_none())
                .filter_map(|d| d.cell.rtt_ms.map(|r| (r as f64, d.cell.images_per_sec)))
                .collect()
        };
        let ceiling = self.cores as f64 * self.one_core_pipeline_images_per_sec;
        let max_x = self
            .cells
            .iter()
            .filter_map(|d| d.cell.rtt_ms)
            .max()
            .unwrap_or(100)
            .max(1) as f64;
        let max_y = self
            .cells
            .iter()
            .map(|d| d.cell.images_per_sec)
            .fold(ceiling, f64::max)
            * 1.1;
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "images/s against storage round-trip time",
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x * 1.05, 0.0..max_y)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("RTT (ms)")
            .y_desc("images/s")
            .draw()
            .map_err(|e| e.to_string())?;
        let colours = [
            (Strategy::Sequential, RED),
            (Strategy::Threads, BLUE),
            (Strategy::Async, GREEN),
        ];
        for (strategy, colour) in colours {
            let line = points(strategy);
            if line.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!("{strategy:?}").to_lowercase())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
            chart
                .draw_series(line.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, ceiling), (max_x * 1.05, ceiling)],
                BLACK.mix(0.4),
            ))
            .map_err(|e| e.to_string())?
            .label("CPU ceiling (cores x one-core pipeline)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The middle value (the mean of the two middle ones for an even count); 0 for none.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_no_runs() {
        assert_eq!(median(&[390.0, 310.0, 420.0]), 390.0);
        assert_eq!(median(&[400.0, 300.0, 350.0, 380.0]), 365.0);
        assert_eq!(median(&[]), 0.0);
    }
}
