//! The global order of a run: position `k` of an epoch names a source and one of its samples,
//! whatever the world size, batch size or threads, with random access to any position.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::interleave::Interleave;
use super::source::{SourceEpoch, SourceOrder};
use crate::SamplerError;

/// When an epoch of a mixture ends, in the words of Hugging Face's `interleave_datasets` and
/// LitData's `CombinedStreamingDataset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopRule {
    /// When the first source has been read whole: no sample is read twice in an epoch.
    #[default]
    FirstExhausted,
    /// When every source has been read whole; smaller sources start new source-epochs (a new
    /// permutation, never draws with replacement) in the meantime.
    AllExhausted,
    /// Each sample once: a source read whole leaves the mixture, and the others go on by
    /// their weights until every one has been read whole.
    AllExhaustedWithoutReplacement,
    /// A fixed number of samples per epoch: the sources' reads carry on from one epoch to
    /// the next, each source starting a new source-epoch when it has been read whole.
    SamplesPerEpoch(u64),
    /// One endless epoch; sources start new source-epochs as they are read whole.
    CycleForever,
}

impl StopRule {
    /// Whether the sources' reads carry on across epochs (one stream for the whole run)
    /// rather than start again each epoch.
    pub fn carries_across_epochs(self) -> bool {
        matches!(self, StopRule::SamplesPerEpoch(_))
    }
}

/// Whether a global batch mixes sources or comes from one source at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Batching {
    /// Sources interleaved sample by sample.
    #[default]
    Mixed,
    /// Each global batch from one source (MosaicML's `per_stream`), the batches interleaved
    /// by the weights.
    PerStream,
}

/// Where the current weights and sources took over: a run's first segment starts at epoch 0,
/// position 0; resuming under another mixture starts a new one at the saved position, the
/// sources that stay continuing from their reads (`bases`), new ones from 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Segment {
    /// 0 for the run's first, then one more at each change.
    pub number: u32,
    /// The epoch it started in.
    pub epoch: u64,
    /// The epoch position it started at.
    pub start: u64,
    /// That position in the sources' stream (the same as `start` unless reads carry across
    /// epochs).
    pub stream_start: u64,
    /// Each source's reads in the stream before the segment.
    pub bases: Vec<u64>,
    /// Positions the interleave counts in: 1, or the global batch under per-stream batching.
    pub unit: u64,
}

impl Segment {
    /// The first segment of a run over `sources` sources.
    pub fn first(sources: usize, unit: u64) -> Self {
        Self {
            number: 0,
            epoch: 0,
            start: 0,
            stream_start: 0,
            bases: vec![0; sources],
            unit: unit.max(1),
        }
    }
}

/// The order of a run's samples across one or more sources: per epoch, a deterministic
/// interleave by weight of each source's own order (see [`Interleave`], [`SourceOrder`]),
/// ended by a [`StopRule`], a pure function of the seed, the epoch, the sources and the
/// [`Segment`]. It knows nothing of ranks: [`EpochOrder::rank_batches`] cuts it.
///
/// ```
/// use loader_sampler::{GlobalOrder, SourceKind, SourceOrder, StopRule, Stripe};
/// let a = SourceOrder::new(70, SourceKind::Shuffled, 1).unwrap();
/// let b = SourceOrder::new(10, SourceKind::Shuffled, 2).unwrap();
/// let order = GlobalOrder::new(vec![a, b], vec![7, 3], StopRule::FirstExhausted, 0).unwrap();
/// let epoch = order.epoch(0).unwrap();
/// assert_eq!(epoch.len(), Some(35)); // b's 10 samples are read by position 35
/// // Two ranks of 4 share global batches of 8: between them, each position once.
/// let mut positions: Vec<u64> = (0..2)
///     .flat_map(|rank| epoch.rank_batches(0, Stripe { rank, world: 2, batch_size: 4 }, false))
///     .flat_map(|batch| batch.reads.into_iter().map(|read| read.position))
///     .collect();
/// positions.sort();
/// assert_eq!(positions, (0..35).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone)]
pub struct GlobalOrder {
    sources: Arc<[SourceOrder]>,
    weights: Arc<[u64]>,
    stop: StopRule,
    seed: u64,
    segment: Segment,
}

impl GlobalOrder {
    /// `sources` interleaved by whole-number `weights` (see
    /// [`Interleave::from_weights`] for fractions), ending epochs by `stop`, seeded by `seed`.
    pub fn new(
        sources: Vec<SourceOrder>,
        weights: Vec<u64>,
        stop: StopRule,
        seed: u64,
    ) -> Result<Self, SamplerError> {
        if sources.is_empty() {
            return Err(SamplerError::NoSource);
        }
        if weights.len() != sources.len() {
            return Err(SamplerError::WeightCount {
                weights: weights.len(),
                sources: sources.len(),
            });
        }
        // Checks the weights once, here, rather than at each epoch.
        Interleave::new(&weights)?;
        if stop == StopRule::SamplesPerEpoch(0) {
            return Err(SamplerError::Zero("samples_per_epoch"));
        }
        let segment = Segment::first(sources.len(), 1);
        Ok(Self {
            sources: sources.into(),
            weights: weights.into(),
            stop,
            seed,
            segment,
        })
    }

    /// The same order from `segment` on (a resumed run's, or a new one).
    pub fn with_segment(mut self, segment: Segment) -> Result<Self, SamplerError> {
        if segment.bases.len() != self.sources.len() {
            return Err(SamplerError::SegmentSources {
                segment: segment.bases.len(),
                sources: self.sources.len(),
            });
        }
        if let StopRule::SamplesPerEpoch(n) = self.stop
            && segment.start > n
        {
            return Err(SamplerError::SegmentStart {
                start: segment.start,
                samples: n,
            });
        }
        self.segment = Segment {
            unit: segment.unit.max(1),
            ..segment
        };
        Ok(self)
    }

    /// The segment in force.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// The sources.
    pub fn sources(&self) -> &[SourceOrder] {
        &self.sources
    }

    /// The whole-number weights.
    pub fn weights(&self) -> &[u64] {
        &self.weights
    }

    /// The stop rule.
    pub fn stop(&self) -> StopRule {
        self.stop
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The order of `epoch` (from the segment's start in its own epoch), ready for random
    /// access. An epoch before the segment's (a run set back to an earlier epoch) is read by
    /// the current mixture from its start, as a run of that mixture alone would read it.
    pub fn epoch(&self, epoch: u64) -> Result<EpochOrder, SamplerError> {
        let seg = if epoch < self.segment.epoch {
            Segment::first(self.sources.len(), self.segment.unit)
        } else {
            self.segment.clone()
        };
        let in_segment_epoch = epoch == seg.epoch;
        let first = if in_segment_epoch { seg.start } else { 0 };
        let (stream, shift, start, bases, len) = match self.stop {
            StopRule::SamplesPerEpoch(n) => {
                // One stream for the run, one interleave along it from the segment's start:
                // epoch e's position k is stream position
                // stream_start + (e·n + k) - (segment epoch·n + segment start).
                let at = |e: u64, k: u64| -> Option<u64> { e.checked_mul(n)?.checked_add(k) };
                let (Some(here), Some(there)) = (at(epoch, 0), at(seg.epoch, seg.start)) else {
                    return Err(SamplerError::TooMany {
                        what: "epochs times samples_per_epoch",
                        len: epoch,
                        most: u64::MAX / n,
                        hint: "",
                    });
                };
                let shift = Shift {
                    base: seg.stream_start,
                    from: there,
                    epoch_at: here,
                };
                (0, shift, seg.stream_start, seg.bases.clone(), Some(n))
            }
            _ => {
                let (start, bases) = if in_segment_epoch {
                    (seg.stream_start, seg.bases.clone())
                } else {
                    (0, vec![0; self.sources.len()])
                };
                let shift = Shift {
                    base: start,
                    from: first,
                    epoch_at: 0,
                };
                (epoch, shift, start, bases, None)
            }
        };
        let (phases, end) = self.phases(start, bases.clone(), seg.unit)?;
        let len = match (len, self.stop) {
            (Some(n), _) => Some(n),
            (None, StopRule::CycleForever) => None,
            // The stream ends at `end`; epoch positions are stream positions here.
            (None, _) => Some(end.unwrap_or(u64::MAX).max(first)),
        };
        Ok(EpochOrder {
            inner: Arc::new(EpochInner {
                order: self.clone(),
                epoch,
                stream,
                shift,
                first,
                len,
                phases,
                bases,
            }),
        })
    }

    /// The phases of a stream from `start` with `bases` reads behind each source: one, but
    /// for `AllExhaustedWithoutReplacement`, where each source read whole ends one. Also the
    /// stream position where the epoch ends (none: endless).
    fn phases(
        &self,
        start: u64,
        bases: Vec<u64>,
        unit: u64,
    ) -> Result<(Vec<Phase>, Option<u64>), SamplerError> {
        let len = |i: usize| self.sources[i].len();
        let weighted: Vec<usize> = (0..self.sources.len())
            .filter(|&i| self.weights[i] > 0)
            .collect();
        // Per-stream blocks are counted from the stream's start, so a phase that starts
        // inside a block finishes it with its first source.
        let origin = start;
        let phase =
            |start: u64, active: Vec<usize>, bases: Vec<u64>| -> Result<Phase, SamplerError> {
                let weights: Vec<u64> = active.iter().map(|&i| self.weights[i]).collect();
                Ok(Phase {
                    start,
                    end: None,
                    mix: Interleave::new(&weights)?,
                    active,
                    bases,
                    unit,
                    origin,
                })
            };
        match self.stop {
            StopRule::CycleForever | StopRule::SamplesPerEpoch(_) => {
                Ok((vec![phase(start, weighted, bases)?], None))
            }
            StopRule::FirstExhausted | StopRule::AllExhausted => {
                let mut p = phase(start, weighted, bases)?;
                let ends = p.active.iter().enumerate().map(|(l, &i)| {
                    let left = len(i).saturating_sub(p.bases[i]);
                    match (self.stop, left) {
                        (_, 0) => start,
                        (StopRule::FirstExhausted, _) => p.position_of(l, left),
                        _ => p.position_of(l, left - 1).saturating_add(1),
                    }
                });
                let end = if self.stop == StopRule::FirstExhausted {
                    ends.min()
                } else {
                    ends.max()
                }
                .unwrap_or(start);
                p.end = Some(end);
                Ok((vec![p], Some(end)))
            }
            StopRule::AllExhaustedWithoutReplacement => {
                let mut phases = Vec::new();
                let (mut at, mut reads) = (start, bases);
                loop {
                    let active: Vec<usize> = weighted
                        .iter()
                        .copied()
                        .filter(|&i| reads[i] < len(i))
                        .collect();
                    if active.is_empty() {
                        return Ok((phases, Some(at)));
                    }
                    let mut p = phase(at, active, reads.clone())?;
                    let end = (0..p.active.len())
                        .map(|l| p.position_of(l, len(p.active[l]) - reads[p.active[l]]))
                        .min()
                        .unwrap_or(at);
                    p.end = Some(end);
                    reads = p.reads_at(end);
                    at = end;
                    phases.push(p);
                    if end == u64::MAX {
                        return Ok((phases, Some(at)));
                    }
                }
            }
        }
    }
}

/// Where an epoch's positions are in the stream: `base + (epoch_at + k) - from`.
#[derive(Debug, Clone, Copy)]
struct Shift {
    base: u64,
    from: u64,
    epoch_at: u64,
}

impl Shift {
    fn stream(&self, k: u64) -> u64 {
        self.base
            .saturating_add(self.epoch_at.saturating_add(k).saturating_sub(self.from))
    }
}

/// A stretch of a stream in which the same sources are read by the same interleave.
#[derive(Debug, Clone)]
struct Phase {
    start: u64,
    end: Option<u64>,
    /// The sources read, by their index in the order.
    active: Vec<usize>,
    mix: Interleave,
    /// Every source's reads in the stream before the phase.
    bases: Vec<u64>,
    /// Positions per step of the interleave: 1, or a global batch (per-stream batching).
    unit: u64,
    /// Where the stream's blocks of `unit` positions start; the phase's first block is the
    /// rest of the one it starts in.
    origin: u64,
}

impl Phase {
    /// The interleave step of stream position `at`, counted from the phase's first block.
    fn step(&self, at: u64) -> u64 {
        (at - self.origin) / self.unit - (self.start - self.origin) / self.unit
    }

    /// Positions of the phase's first block before the phase starts.
    fn lead(&self) -> u64 {
        (self.start - self.origin) % self.unit
    }

    /// The active source (by its place in `active`) read at stream position `at`.
    fn source_at(&self, at: u64) -> usize {
        self.mix.source_at(self.step(at))
    }

    /// The stream position of the `r`-th read (from 0) in this phase of active source `l`.
    fn position_of(&self, l: usize, r: u64) -> u64 {
        let r = r + if self.mix.source_at(0) == l {
            self.lead()
        } else {
            0
        };
        let first = (self.start - self.origin) / self.unit;
        self.mix
            .position_of(l, r / self.unit)
            .and_then(|u| u.checked_add(first))
            .and_then(|u| u.checked_mul(self.unit))
            .and_then(|p| p.checked_add(r % self.unit))
            .and_then(|p| p.checked_add(self.origin))
            .unwrap_or(u64::MAX)
    }

    /// Every source's reads in the stream before position `at` (within this phase).
    fn reads_at(&self, at: u64) -> Vec<u64> {
        let at = at.max(self.start);
        let u = self.step(at);
        let block_start =
            (self.origin + (at - self.origin) / self.unit * self.unit).max(self.start);
        let within = at - block_start;
        let first = self.mix.source_at(0);
        let mut reads = self.bases.clone();
        for (l, &i) in self.active.iter().enumerate() {
            let mut n = self.mix.count_before(l, u) * self.unit;
            if u > 0 && first == l {
                n -= self.lead();
            }
            if self.mix.source_at(u) == l {
                n += within;
            }
            reads[i] += n;
        }
        reads
    }
}

/// One read of the order: which source, its how-many-th read of that source, and the
/// sample it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// The source, by its index in the order.
    pub source: usize,
    /// The source's reads in the stream before this one.
    pub read: u64,
    /// The sample of the source it reads.
    pub sample: u64,
    /// Its place in its source-epoch (`read % len`), which decides its rank
    /// ([`SourceOrder::rank_of`]).
    pub slot: u64,
}

#[derive(Debug)]
struct EpochInner {
    order: GlobalOrder,
    epoch: u64,
    /// The stream whose permutations the sources use: the epoch's own, or the run's.
    stream: u64,
    shift: Shift,
    first: u64,
    len: Option<u64>,
    phases: Vec<Phase>,
    /// Each source's reads before the stream's start.
    bases: Vec<u64>,
}

/// One epoch of a [`GlobalOrder`], built for random access and reading on.
#[derive(Debug, Clone)]
pub struct EpochOrder {
    inner: Arc<EpochInner>,
}

impl EpochOrder {
    /// Positions in the epoch; `None` for an endless one.
    pub fn len(&self) -> Option<u64> {
        self.inner.len
    }

    /// Whether the epoch has no position.
    pub fn is_empty(&self) -> bool {
        self.inner.len == Some(0)
    }

    /// The first position this order answers for (its segment's start in the segment's own
    /// epoch, else 0).
    pub fn first(&self) -> u64 {
        self.inner.first
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// Position `k`'s place in the sources' stream (the same as `k` unless reads carry
    /// across epochs): where a new segment starting at `k` starts its stream.
    pub fn stream_position(&self, k: u64) -> u64 {
        self.inner.shift.stream(k.max(self.inner.first))
    }

    /// The reads of position `k` on (from [`first`](Self::first) at the earliest).
    pub fn draws(&self, k: u64) -> Draws {
        let k = k.max(self.inner.first);
        let at = self.inner.shift.stream(k);
        let phase = self.phase_of(at);
        let reads = match self.inner.phases.get(phase) {
            Some(p) => p.reads_at(at),
            None => self
                .inner
                .phases
                .last()
                .and_then(|p| p.end.map(|end| p.reads_at(end)))
                .unwrap_or_else(|| self.inner.bases.clone()),
        };
        Draws {
            epoch: self.clone(),
            position: k,
            at,
            phase,
            reads,
            cache: vec![None; self.inner.order.sources.len()],
        }
    }

    /// The read at position `k` (at or after [`first`](Self::first), before the end).
    pub fn draw(&self, k: u64) -> Option<Draw> {
        self.draws(k).next()
    }

    /// Each source's reads in the stream before position `k`: where a new segment starting
    /// at `k` continues each source.
    pub fn cursors(&self, k: u64) -> Vec<u64> {
        self.draws(k).reads
    }

    fn phase_of(&self, at: u64) -> usize {
        self.inner
            .phases
            .iter()
            .position(|p| p.end.is_none_or(|end| at < end))
            .unwrap_or(self.inner.phases.len())
    }

    /// The sources of the order.
    pub(super) fn sources(&self) -> &[SourceOrder] {
        self.inner.order.sources()
    }
}

/// The reads of an epoch from a position on (see [`EpochOrder::draws`]).
#[derive(Debug)]
pub struct Draws {
    pub(super) epoch: EpochOrder,
    /// The epoch position of the next read.
    position: u64,
    /// Its stream position.
    at: u64,
    phase: usize,
    reads: Vec<u64>,
    /// Each source's current source-epoch.
    cache: Vec<Option<(u64, SourceEpoch)>>,
}

impl Draws {
    /// The epoch position of the next read.
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl Iterator for Draws {
    type Item = Draw;

    fn next(&mut self) -> Option<Draw> {
        let inner = &self.epoch.inner;
        if inner.len.is_some_and(|len| self.position >= len) {
            return None;
        }
        while let Some(p) = inner.phases.get(self.phase)
            && p.end.is_some_and(|end| self.at >= end)
        {
            self.phase += 1;
        }
        let p = inner.phases.get(self.phase)?;
        let source = *p.active.get(p.source_at(self.at))?;
        let read = self.reads[source];
        self.reads[source] += 1;
        self.position += 1;
        self.at += 1;
        let order = &inner.order.sources[source];
        let (number, slot) = (read / order.len(), read % order.len());
        let cached = &mut self.cache[source];
        if cached.as_ref().is_none_or(|(n, _)| *n != number) {
            *cached = Some((number, order.epoch(inner.order.seed, inner.stream, number)));
        }
        let sample = cached.as_ref().map_or(slot, |(_, e)| e.sample(slot));
        Some(Draw {
            source,
            read,
            sample,
            slot,
        })
    }
}
