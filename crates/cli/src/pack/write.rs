//! The pack's writing: samples appended to the shard being written, a shard closed and
//! published once it holds `--shard-size`, `pack.json` recorded after each, progress shown.

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::{DataLoader, PACK_FILE, RawBatch};

use super::parquet_shard::ParquetShard;
use super::shard::{Format, Packable, ShardFile};
use super::tar_shard::TarShard;
use super::{Args, Packed, Skipped, finish, record, shards};
use crate::Result;

use super::destination::Destination;

/// A pack being written.
pub(super) struct Writer<'a> {
    args: &'a Args,
    dst: &'a Destination,
    packed: Packed,
    labelled: bool,
    shard: Option<Box<dyn ShardFile>>,
    /// Shards written by this run.
    written: usize,
    /// Samples left out, recorded with the shard whose span holds them.
    pending: Vec<Skipped>,
    bar: ProgressBar,
}

impl<'a> Writer<'a> {
    pub(super) fn new(
        args: &'a Args,
        dst: &'a Destination,
        packed: Packed,
        labelled: bool,
    ) -> Self {
        let bar = ProgressBar::new(packed.settings.samples);
        bar.set_style(
            ProgressStyle::with_template(
                "packing {bar:30} {pos}/{len} samples, {per_sec}, {msg} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_position(packed.shards.last().map_or(0, |s| s.end));
        Self {
            args,
            dst,
            packed,
            labelled,
            shard: None,
            written: 0,
            pending: Vec::new(),
            bar,
        }
    }

    /// Every sample `loader` reads, then the last shard, and the pack recorded complete.
    pub(super) fn write_all(
        &mut self,
        mut loader: DataLoader<Packable, RawBatch<Packable>>,
    ) -> Result {
        for batch in &mut loader {
            let raw = batch?;
            self.pending
                .extend(raw.skipped.iter().map(|failed| Skipped {
                    index: failed.info.index,
                    key: failed.info.key.to_string(),
                    error: failed.to_string(),
                }));
            for (info, sample) in &raw.samples {
                self.append(info.index, sample)?;
            }
            self.bar.set_position(raw.position + raw.covers);
            self.bar
                .set_message(format!("{} shards", self.packed.shards.len()));
        }
        let total = self.packed.settings.samples;
        if let Some(last) = self.shard.take() {
            let done = finish(last, self.dst, total, self.args.format)?;
            self.packed.shards.push(done);
        }
        self.packed.skipped.append(&mut self.pending);
        self.packed.complete = true;
        record(self.dst, &self.packed)?;
        self.bar.finish_and_clear();
        Ok(())
    }

    /// `sample` (source index `index`) appended to the shard being written, which is
    /// closed once full.
    fn append(&mut self, index: u64, sample: &Packable) -> Result {
        let writer = match &mut self.shard {
            Some(w) => w,
            None => {
                let (number, staging) = (self.packed.shards.len(), self.dst.staging());
                let created: Box<dyn ShardFile> = match self.args.format {
                    Format::Webdataset => Box::new(TarShard::create(staging, number, index)?),
                    Format::Parquet => Box::new(ParquetShard::create(
                        staging,
                        number,
                        index,
                        self.labelled,
                        &self.packed.settings.classes,
                    )?),
                };
                self.shard.insert(created)
            }
        };
        writer.append(sample)?;
        if writer.bytes() < self.args.shard_size {
            return Ok(());
        }
        if let Some(done) = self.shard.take() {
            self.close(done, index + 1)?;
        }
        if self
            .args
            .stop_after_shards
            .is_some_and(|n| self.written >= n)
        {
            self.bar.abandon_with_message("stopped");
            return Err(format!(
                "stopped after {} shards, as asked: run again to go on",
                self.written
            )
            .into());
        }
        Ok(())
    }

    /// A full shard published and recorded, with the samples left out before `end`.
    fn close(&mut self, done: Box<dyn ShardFile>, end: u64) -> Result {
        let packed = &mut self.packed;
        packed
            .shards
            .push(finish(done, self.dst, end, self.args.format)?);
        let (before, after) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|s| s.index < end);
        packed.skipped.extend::<Vec<Skipped>>(before);
        self.pending = after;
        record(self.dst, packed)?;
        self.written += 1;
        if self.bar.is_hidden() {
            // No terminal (a batch job's log): a line per shard instead.
            eprintln!(
                "packed {end} of {} samples, {}",
                packed.settings.samples,
                shards(packed.shards.len())
            );
        }
        Ok(())
    }

    /// What was packed, said once.
    pub(super) fn report(&self) {
        let packed = &self.packed;
        let samples: u64 = packed.shards.iter().map(|s| s.samples).sum();
        let bytes: u64 = packed.shards.iter().map(|s| s.bytes).sum();
        eprintln!(
            "packed {samples} samples ({}) into {} in {}{}",
            bytesize::ByteSize(bytes),
            shards(packed.shards.len()),
            self.dst.name(),
            if packed.skipped.is_empty() {
                String::new()
            } else {
                format!("; {} left out, listed in {PACK_FILE}", packed.skipped.len())
            }
        );
    }
}
