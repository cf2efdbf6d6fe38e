//! The DataLoader: PyTorch's names, an epoch per pass, exact resume. Built by
//! [`DataLoaderBuilder`](crate::DataLoaderBuilder); what it reads is planned in `plan`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use loader_decoder::Sample;
use loader_sampler::SamplerState;
use loader_scheduler::{Config, Engine, Metrics, Order};
use loader_storage::DynStorage;
use loader_storage::layer::Cache;

use crate::batch::Batch;
use crate::error::StateError;
use crate::plan::Planner;
use crate::stage::Stages;
use crate::state::{LoaderState, OrderStamp};
use crate::{Dataset, Result};

mod delivery;

use delivery::Handled;

/// Loads batches of a [`Dataset`] from a store: a blocking `Iterator` and an async
/// `Stream` of `Result<B>`. One pass is one epoch; passing again reads the next one.
pub struct DataLoader<T = Sample, B = Batch> {
    storage: DynStorage,
    /// The sampler, the dataset and what the engine and the cache are told.
    planner: Planner,
    stages: Stages<T, B>,
    config: Config,
    /// What has been delivered: the state to resume from.
    state: SamplerState,
    engine: Option<Engine<T>>,
    /// The last batch of an epoch went out: the next call ends the pass.
    end_of_pass: bool,
    /// A failed batch ended the pass: the next pass starts the next epoch.
    skip_to_next_epoch: bool,
    metrics: Option<Arc<Metrics>>,
    /// Skipped samples of batches that had nothing else, reported with the next batch.
    carried_skips: Vec<loader_scheduler::ItemError>,
}

impl<T, B> std::fmt::Debug for DataLoader<T, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("storage", &self.storage.name())
            .field("samples", &self.planner.dataset.len())
            .field("batches", &self.planner.len())
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, B> DataLoader<T, B> {
    /// A loader over `storage` (with its layers) reading as `planner` plans.
    pub(crate) fn new(
        storage: DynStorage,
        planner: Planner,
        stages: Stages<T, B>,
        config: Config,
    ) -> Self {
        Self {
            storage,
            planner,
            stages,
            config,
            state: SamplerState::default(),
            engine: None,
            end_of_pass: false,
            skip_to_next_epoch: false,
            metrics: None,
            carried_skips: Vec::new(),
        }
    }

    /// Batches per epoch of this rank (every rank has as many); `usize::MAX` for the
    /// endless epoch of `cycle_forever`.
    pub fn len(&self) -> usize {
        self.planner.len()
    }

    /// Whether an epoch has no batch (never, for a built loader).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.planner.dataset
    }

    /// The epoch the next pass reads, as PyTorch's `sampler.set_epoch`. Setting the epoch
    /// the loader is already in keeps its position (and what it prefetched): after
    /// `resume(state)`, the training loop's `set_epoch(state.epoch)` continues the epoch
    /// instead of reading its first samples again. Another epoch starts at its beginning.
    pub fn set_epoch(&mut self, epoch: u64) {
        let next = self.next_state();
        if next.epoch != epoch {
            self.restart(start_of(epoch));
        } else if next.position == 0 {
            // The last batch went out but the consumer stopped without asking past it (it
            // took `len()` batches): the pass it starts now reads this epoch, not nothing.
            self.end_of_pass = false;
        }
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.next_state().epoch
    }

    /// Make the next pass a whole epoch, as PyTorch's DataLoader is when iterated again
    /// after a `break`: part way through an epoch, its rest is dropped and the pass reads
    /// the next epoch; between epochs (the last batch delivered, or none yet) nothing
    /// changes, and what was prefetched is kept. Returns the epoch the next pass reads.
    pub fn to_epoch_start(&mut self) -> u64 {
        let next = self.next_state();
        if next.position != 0 {
            self.restart(start_of(next.epoch + 1));
        } else {
            // The last batch went out and the pass has yet to end: the engine, running
            // ahead, already holds the next epoch's batches.
            self.end_of_pass = false;
        }
        self.next_state().epoch
    }

    /// Samples this rank reads in an epoch: its whole batches and its share of the last,
    /// short one rounded up (for a sampler given to the loader, the sampler's length), counting
    /// those of a last batch that `drop_last` drops; `usize::MAX` for an endless epoch.
    pub fn samples_per_epoch(&self) -> usize {
        self.planner.rank_samples(self.next_state().epoch)
    }

    /// Positions of the epoch's order, all ranks' samples together (a caller's sampler: its
    /// length); `None` for an endless epoch.
    pub fn epoch_positions(&self) -> Result<Option<u64>> {
        self.planner.epoch_positions(self.next_state().epoch)
    }

    /// Which source (of those given to [`mixture`](DataLoader::mixture), in their order) a
    /// batch's dataset index belongs to, and its index within that source's dataset.
    pub fn source_of(&self, index: u64) -> Option<(usize, usize)> {
        self.planner.source_of(usize::try_from(index).ok()?)
    }

    /// The dataset indices this rank reads in `epoch`, from its start, in the order a pass
    /// delivers them when nothing fails (an epoch's last batch's padding included): to
    /// inspect an order, or check one in a test. Lazy: an endless epoch yields for ever.
    pub fn planned(&self, epoch: u64) -> impl Iterator<Item = u64> + Send + use<T, B> {
        self.planner.planned(epoch)
    }

    /// The state to checkpoint: the position in the epoch's global order that the
    /// delivered batches reached (the same on every rank after the same step), and what
    /// that order is made of. Resuming from it, on any world size and batch size, delivers
    /// exactly the positions not delivered yet, and then the same epochs as without the
    /// interruption. A batch that failed under `Fail` was not delivered, so it is fetched
    /// again. Refused under `AsCompleted` order, whose batches follow no position.
    pub fn state(&self) -> Result<LoaderState> {
        if self.config.order == Order::AsCompleted {
            return Err(StateError::AsCompleted.into());
        }
        Ok(LoaderState {
            epoch: self.state.epoch,
            position: self.state.position,
            order: Some(self.planner.stamp(self.state)),
        })
    }

    /// Continue from a saved state, whatever world size and batch size it was saved on. A
    /// state saved under another order (another dataset, sampler, shuffle, seed or
    /// arrangement of the sources' samples) is refused, naming both sides: its position
    /// would name other samples here. One saved under other weights or sources is refused
    /// too unless `mixture.new_segment` is set, which starts a new segment at its position
    /// (each source in both continues where it stood, a new one from its start).
    pub fn resume(&mut self, state: LoaderState) -> Result<()> {
        self.planner.adopt(&state)?;
        self.restart(SamplerState {
            epoch: state.epoch,
            position: state.position,
        });
        Ok(())
    }

    /// What this loader's positions mean at its current state; a state carries it, and
    /// [`resume`](Self::resume) compares it.
    pub fn order_stamp(&self) -> OrderStamp {
        self.planner.stamp(self.state)
    }

    /// Reports of skipped samples not yet handed over with a batch: a batch whose every
    /// sample was skipped is not delivered (an empty batch would fail far from the cause),
    /// and its reports go with the next batch. At the end of a pass, what this returns
    /// would otherwise wait for the next epoch's first batch; taking it here hands it over
    /// now instead (and only here).
    pub fn take_unreported_skips(&mut self) -> Vec<loader_scheduler::ItemError> {
        std::mem::take(&mut self.carried_skips)
    }

    /// The cache's handle, when [`cache`](DataLoaderBuilder::cache) was set: its
    /// [`snapshot`](Cache::snapshot) counts hits, misses, bytes and evictions.
    pub fn cache(&self) -> Option<&Cache> {
        self.planner.cache.as_ref()
    }

    /// The running engine's metrics (fetch, decode, queue and consumer timings).
    pub fn metrics(&self) -> Option<Arc<Metrics>> {
        self.metrics.clone()
    }

    /// Where the next pass starts, taking a pending skip to the next epoch into account.
    fn next_state(&self) -> SamplerState {
        if self.skip_to_next_epoch {
            start_of(self.state.epoch + 1)
        } else {
            self.state
        }
    }

    fn restart(&mut self, state: SamplerState) {
        self.engine = None;
        self.state = state;
        self.end_of_pass = false;
        self.skip_to_next_epoch = false;
    }

    /// What a pass yields before asking the engine: `Some` when it ends (or fails to start)
    /// without another batch.
    fn before_batch(&mut self) -> Option<Option<Result<B>>> {
        if std::mem::take(&mut self.end_of_pass) {
            return Some(None);
        }
        match self.ensure_engine() {
            Err(e) => Some(Some(Err(e))),
            Ok(false) => Some(None),
            Ok(true) => None,
        }
    }

    /// Start the engine if none runs. `Ok(false)`: the epoch has nothing left, so this pass
    /// is empty and the state moves to the next epoch (the engine, which runs on across
    /// epochs, would otherwise deliver the next epoch within this pass).
    fn ensure_engine(&mut self) -> Result<bool> {
        if self.skip_to_next_epoch {
            let next = self.next_state();
            self.restart(next);
        }
        if self.engine.is_none() {
            // An epoch whose order cannot be made (its positions overflow) is an error, not
            // an empty pass.
            self.planner.check_epoch(self.state.epoch)?;
        }
        if self.engine.is_none() && self.planner.nothing_left(self.state) {
            self.state = start_of(self.state.epoch + 1);
            return Ok(false);
        }
        if self.engine.is_none() {
            let engine = Engine::start_weighed(
                Arc::clone(&self.storage),
                Arc::clone(&self.stages.stage),
                self.stages.weigh.clone(),
                self.planner.plans(self.state),
                &self.config,
            )?;
            self.metrics = Some(engine.metrics());
            self.engine = Some(engine);
        }
        Ok(true)
    }
}

/// The start of `epoch`.
fn start_of(epoch: u64) -> SamplerState {
    SamplerState { epoch, position: 0 }
}

impl<T: Send + 'static, B> Iterator for DataLoader<T, B> {
    type Item = Result<B>;

    fn next(&mut self) -> Option<Result<B>> {
        if let Some(out) = self.before_batch() {
            return out;
        }
        loop {
            let raw = self.engine.as_mut()?.next_blocking();
            if let Handled::Out(out) = self.handle(raw) {
                return out;
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.len()))
    }
}

impl<T: Send + 'static, B> Stream for DataLoader<T, B> {
    type Item = Result<B>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<B>>> {
        let this = self.get_mut();
        if let Some(out) = this.before_batch() {
            return Poll::Ready(out);
        }
        loop {
            let Some(engine) = this.engine.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(engine).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(raw) => {
                    if let Handled::Out(out) = this.handle(raw) {
                        return Poll::Ready(out);
                    }
                }
            }
        }
    }
}
