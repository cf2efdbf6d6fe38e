//! What the engine is told about chunks: for each read of a rank's batches, whether it reads
//! its chunk whole (when the rank reads at least half of the chunk's samples in the reads
//! ahead, or the sample shares its stored span with others; else the sample alone, a ranged request the
//! engine may coalesce), and which read of a chunk is its last for a while, so the engine
//! lets the chunk go.

use std::collections::{HashMap, VecDeque};

use loader_scheduler::{BatchPlan, Chunk, WorkItem};

use crate::{Dataset, Item};

/// One rank's part of one batch, before it becomes the engine's plan.
pub(super) struct Cut {
    pub(super) epoch: u64,
    /// The epoch position the batch starts at (its global batch's, when ranks share one).
    pub(super) start: u64,
    /// The position after it: the state once it is delivered.
    pub(super) end: u64,
    pub(super) last: bool,
    /// Reads at the end that repeat other ranks' samples.
    pub(super) padding: usize,
    pub(super) reads: Vec<CutRead>,
}

/// One read of a cut.
#[derive(Clone, Copy)]
pub(super) struct CutRead {
    /// Its dataset index.
    pub(super) index: usize,
    /// Whether it may be read with its chunk.
    pub(super) chunkable: bool,
    /// Its epoch position, when the cut's reads are not consecutive positions.
    pub(super) position: Option<u64>,
}

/// The engine's plans of one epoch's cuts, looking `horizon` reads ahead.
pub(super) struct Chunked {
    dataset: Dataset,
    cuts: Box<dyn Iterator<Item = Cut> + Send>,
    horizon: usize,
    ahead: VecDeque<Cut>,
    /// Reads of each chunk among the cuts ahead.
    counts: HashMap<u32, usize>,
    buffered: usize,
    /// Open chunks, and whether each is read whole.
    open: HashMap<u32, bool>,
    done: bool,
}

impl Chunked {
    pub(super) fn new(
        dataset: Dataset,
        cuts: Box<dyn Iterator<Item = Cut> + Send>,
        horizon: usize,
    ) -> Self {
        Self {
            dataset,
            cuts,
            horizon,
            ahead: VecDeque::new(),
            counts: HashMap::new(),
            buffered: 0,
            open: HashMap::new(),
            done: false,
        }
    }

    /// Read cuts ahead until the front one has `horizon` reads after it, or the epoch has
    /// no more.
    fn fill(&mut self) {
        while !self.done
            && self.buffered < self.horizon + self.ahead.front().map_or(0, |c| c.reads.len())
        {
            match self.cuts.next() {
                Some(cut) => {
                    for read in &cut.reads {
                        if read.chunkable
                            && let Some((id, _)) = self.dataset.chunk(read.index)
                        {
                            *self.counts.entry(id).or_default() += 1;
                        }
                    }
                    self.buffered += cut.reads.len();
                    self.done = cut.last;
                    self.ahead.push_back(cut);
                }
                None => self.done = true,
            }
        }
    }
}

impl Iterator for Chunked {
    type Item = BatchPlan;

    fn next(&mut self) -> Option<BatchPlan> {
        self.fill();
        let cut = self.ahead.pop_front()?;
        self.buffered -= cut.reads.len();
        let items =
            cut.reads
                .iter()
                .map(|read| {
                    let index = read.index;
                    // An index past the dataset reads as an invalid key, reported per item.
                    let mut item = self
                        .dataset
                        .get(index)
                        .map(Item::into_work)
                        .unwrap_or_default();
                    item.index = index as u64;
                    item.position = read.position;
                    if read.chunkable
                        && let Some((id, range)) = self.dataset.chunk(index)
                    {
                        let left = self.counts.get(&id).copied().unwrap_or(1);
                        // A sample stored encoded (a Parquet page's row) is read with its whole
                        // chunk anyway: keeping the chunk for the reads ahead can only save GETs.
                        let encoded = item.record.is_some();
                        let whole = *self.open.entry(id).or_insert_with(|| {
                            encoded || 2 * left >= self.dataset.chunk_samples(id)
                        });
                        let left = left.saturating_sub(1);
                        if left == 0 {
                            self.counts.remove(&id);
                            self.open.remove(&id);
                        } else {
                            self.counts.insert(id, left);
                        }
                        if whole {
                            item.chunk = Some(Chunk {
                                range,
                                last_use: left == 0,
                            });
                        }
                    }
                    item
                })
                .collect::<Vec<WorkItem>>();
        let mut plan = BatchPlan::new(cut.epoch, cut.start, items, cut.last);
        plan.covers = cut.end - cut.start;
        plan.padding = cut.padding;
        Some(plan)
    }
}
