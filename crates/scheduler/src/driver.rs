//! The driver: admits planned items within a bounded window, hands them to the strategy,
//! reassembles batches in order and queues them for the consumer.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::assembly::{Assembly, Pending};
use crate::config::{Config, ErrorPolicy, Order};
use crate::engine::{Output, panic_message};
use crate::item::{BatchPlan, EngineError, RawBatch, SampleInfo};
use crate::strategy::Strategy;
use crate::unit::{KeptChunks, coalesce};
use crate::work::{ItemResult, Job, Results, Shared};

pub(crate) struct Driver<T> {
    shared: Arc<Shared<T>>,
    strategy: Box<dyn Strategy<T>>,
    order: Order,
    policy: ErrorPolicy,
    prefetch: usize,
    coalesce: (u64, u64),
    out: mpsc::Sender<Output<T>>,
    results: mpsc::UnboundedReceiver<Results<T>>,
    /// Item slots: admitted items not yet taken by the consumer, at most.
    window: Arc<Semaphore>,
    /// The largest plan the window has been sized for so far.
    window_for: usize,
    decoded: Option<Decoded<T>>,
}

/// Decoded samples and finished batches not yet handed over, in bytes, against a bound.
pub(crate) struct Decoded<T> {
    weigh: crate::engine::Weigh<T>,
    limit: u64,
    held: Arc<std::sync::atomic::AtomicU64>,
    released: Arc<tokio::sync::Notify>,
    /// Items admitted whose results have not arrived: they will hold about the mean each.
    coming: u64,
    /// Samples weighed so far and their total weight, for the mean.
    weighed: (u64, u64),
}

impl<T> Decoded<T> {
    pub(crate) fn new(weigh: crate::engine::Weigh<T>, limit: u64) -> Self {
        Self {
            weigh,
            limit,
            held: Arc::default(),
            released: Arc::default(),
            coming: 0,
            weighed: (0, 0),
        }
    }

    /// Whether what is held, with what the admitted items will add, reaches the bound:
    /// counting only what has arrived would let the item window admit batches whose samples
    /// then land far over it.
    fn over(&self) -> bool {
        if self.weighed.0 == 0 {
            // Nothing weighed yet, so nothing is known of what a sample holds (a Python
            // transform's may be 64 MiB): one batch at a time until the first arrive.
            return self.coming > 0;
        }
        let mean = self.weighed.1 / self.weighed.0;
        self.held.load(std::sync::atomic::Ordering::Relaxed) + self.coming * mean >= self.limit
    }

    fn admitted(&mut self, items: usize) {
        self.coming += items as u64;
    }

    fn arrived(&mut self, weight: Option<u64>) {
        self.coming = self.coming.saturating_sub(1);
        if let Some(bytes) = weight {
            self.weighed = (self.weighed.0 + 1, self.weighed.1 + bytes);
            self.held
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn share(&self, bytes: u64) -> DecodedShare {
        DecodedShare {
            bytes,
            held: Arc::clone(&self.held),
            released: Arc::clone(&self.released),
        }
    }
}

/// A batch's decoded bytes, counted against the bound until it is dropped.
#[derive(Debug)]
pub(crate) struct DecodedShare {
    bytes: u64,
    held: Arc<std::sync::atomic::AtomicU64>,
    released: Arc<tokio::sync::Notify>,
}

impl Drop for DecodedShare {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::Relaxed);
        self.released.notify_one();
    }
}

impl<T: Send + 'static> Driver<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        strategy: Box<dyn Strategy<T>>,
        config: &Config,
        out: mpsc::Sender<Output<T>>,
        results: mpsc::UnboundedReceiver<Results<T>>,
        decoded: Option<Decoded<T>>,
    ) -> Self {
        Self {
            shared,
            strategy,
            order: config.order,
            policy: config.error_policy,
            prefetch: config.prefetch,
            coalesce: (config.coalesce_gap, config.max_coalesced_bytes),
            out,
            results,
            window: Arc::new(Semaphore::new(0)),
            window_for: 0,
            decoded,
        }
    }

    /// The item window, for an adaptive in-flight limit to widen as it grows.
    pub(crate) fn window(&self) -> Arc<Semaphore> {
        Arc::clone(&self.window)
    }

    /// Items admitted and not yet taken by the consumer, at most: `prefetch` batches, the
    /// batch being assembled, and what the strategy keeps busy. A batch's slots are freed
    /// when the consumer drops it, so this bounds live samples (plus the batch the consumer
    /// made of them); fetched bytes are bounded by the byte budget. While the ready queue
    /// is not full, its share lets fetching run further ahead, which keeps the CPU busy
    /// behind a slow request.
    fn window_size(&self, batch_size: usize) -> usize {
        self.prefetch * batch_size + self.strategy.busy(batch_size)
    }

    /// Grow the window when a plan larger than any before arrives (a resumed epoch's
    /// short tail comes first, a full batch later): sized from the first plan alone, a
    /// larger batch could never gather its items' slots, and the loader would hang.
    fn fit_window(&mut self, plan_len: usize) {
        let plan_len = plan_len.max(1);
        if plan_len > self.window_for {
            let before = match self.window_for {
                0 => 0,
                sized => self.window_size(sized),
            };
            self.window.add_permits(self.window_size(plan_len) - before);
            self.window_for = plan_len;
        }
    }

    pub(crate) async fn run(mut self, plans: impl Iterator<Item = BatchPlan> + Send + 'static) {
        let mut plans = Guarded { inner: Some(plans) }.peekable();
        // A panic of the plan iterator (a sampler's bug): what was planned before it is
        // delivered, then the error.
        let mut planner_panic: Option<String> = None;
        let window = Arc::clone(&self.window);
        let mut tasks = JoinSet::new();
        let mut asm = Assembly::default();
        let mut kept = KeptChunks::default();
        let budget_short = Arc::clone(&self.shared.fetch.budget_short);
        let released = self.decoded.as_ref().map(|d| Arc::clone(&d.released));
        let mut next_seq = 0u64;
        // The plan being admitted and how many of its items are in.
        let mut admitting: Option<(BatchPlan, usize)> = None;

        loop {
            // Over the decoded-bytes bound, no new batch starts; the admitted ones complete
            // (holding back their items could leave a batch waiting for ever).
            let over = admitting.is_none()
                && !asm.pending.is_empty()
                && self.decoded.as_ref().is_some_and(Decoded::over);
            if admitting.is_none() && !over {
                let barrier = self.order == Order::AsCompleted
                    && plans.peek().is_some_and(|next| {
                        next.as_ref().is_ok_and(|next| {
                            asm.pending.back().is_some_and(|p| p.epoch != next.epoch)
                        })
                    });
                let next = if barrier || planner_panic.is_some() {
                    None
                } else {
                    plans.next()
                };
                if let Some(Err(message)) = next {
                    planner_panic = Some(message);
                } else if let Some(Ok(mut plan)) = next {
                    self.fit_window(plan.items.len());
                    coalesce(&mut plan.items, self.coalesce.0, self.coalesce.1);
                    if let Some(decoded) = &mut self.decoded {
                        decoded.admitted(plan.items.len());
                    }
                    asm.pending.push_back(Pending {
                        epoch: plan.epoch,
                        position: plan.position,
                        len: plan.items.len(),
                        last_in_epoch: plan.last_in_epoch,
                    });
                    admitting = Some((plan, 0));
                }
            }
            if admitting.is_none() && asm.pending.is_empty() {
                if let Some(message) = planner_panic.take() {
                    let error = EngineError::Panicked {
                        what: "the sampler or the plan of batches",
                        message,
                    };
                    let _ = self.out.send(Err(error)).await;
                    return;
                }
                if plans.peek().is_none() {
                    return; // everything handed over
                }
            }
            let want = match &admitting {
                Some((plan, _)) if self.strategy.whole_batches() => plan.items.len().max(1) as u32,
                Some(_) => 1,
                None => 0,
            };
            tokio::select! {
                biased;
                Some(results) = self.results.recv() => {
                    for (seq, result) in results {
                        if let Some(decoded) = &mut self.decoded {
                            let weight =
                                result.as_ref().ok().map(|(_, v)| (decoded.weigh)(v) as u64);
                            decoded.arrived(weight);
                        }
                        asm.put(self.order, seq, result);
                    }
                    while let Some((pending, items)) = asm.take_front(self.order) {
                        let (n, position) = (pending.len, pending.position);
                        let permits = asm.take_permits(n);
                        let batch = self.assemble(pending, items, &mut asm.failures).map(|mut batch| {
                            batch.permits = permits;
                            batch
                        });
                        let stop = batch.is_err();
                        // Backpressure: this waits while `prefetch` batches are queued;
                        // fetch tasks and pool jobs go on meanwhile.
                        if self.out.send(batch).await.is_err() || stop {
                            return;
                        }
                        self.shared.fetch.metrics.batch_queued();
                        if let Some(trace) = &self.shared.fetch.trace {
                            trace.batch(position);
                        }
                    }
                }
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    // Fetch tasks (one per admitted run of items) catch their items' panics
                    // and report them as the items' errors; one that escaped would leave
                    // its batches waiting forever.
                    if let Err(e) = joined
                        && e.is_panic()
                    {
                        let error = EngineError::Panicked {
                            what: "a fetch task",
                            message: panic_message(&*e.into_panic()),
                        };
                        let _ = self.out.send(Err(error)).await;
                        return;
                    }
                }
                // A fetch waits for the byte budget: chunks kept for later items give way.
                () = budget_short.notified() => kept.clear(),
                // A batch was handed over or dropped: below the bound again, perhaps.
                () = async { if let Some(r) = &released { r.notified().await } }, if over => {}
                permit = Arc::clone(&window).acquire_many_owned(want), if want > 0 => {
                    let Ok(mut permit) = permit else { return };
                    let Some((plan, at)) = admitting.as_mut() else {
                        asm.permits.push_back(permit);
                        continue;
                    };
                    let n = if self.strategy.whole_batches() {
                        plan.items.len()
                    } else {
                        // The rest of the plan's items the window has room for now, in one
                        // pass of this loop rather than one pass per item.
                        let room = (plan.items.len() - *at - 1).min(window.available_permits());
                        if let Ok(more) = Arc::clone(&window).try_acquire_many_owned(room as u32)
                        {
                            permit.merge(more);
                        }
                        permit.num_permits()
                    };
                    asm.permits.push_back(permit);
                    let jobs: Vec<Job> = (*at..(*at + n).min(plan.items.len()))
                        .map(|i| {
                            let seq = next_seq;
                            next_seq += 1;
                            job(plan, i, seq, &mut kept)
                        })
                        .collect();
                    *at += n;
                    if *at >= plan.items.len() {
                        admitting = None;
                    }
                    self.strategy.launch(&self.shared, jobs, &mut tasks);
                }
            }
        }
    }

    /// Turn a planned batch's results into a batch or an error, by the error policy.
    fn assemble(
        &self,
        plan: Pending,
        items: Vec<ItemResult<T>>,
        failures: &mut (u64, usize),
    ) -> Output<T> {
        let weight: u64 = match &self.decoded {
            Some(d) => items
                .iter()
                .filter_map(|i| i.as_ref().ok())
                .map(|(_, v)| (d.weigh)(v) as u64)
                .sum(),
            None => 0,
        };
        // Counted from arrival; the batch carries its share, or drops it with its samples.
        let share = self.decoded.as_ref().map(|d| d.share(weight));
        let mut samples = Vec::with_capacity(items.len());
        let mut skipped = Vec::new();
        for item in items {
            match item {
                Ok(sample) => {
                    samples.push(sample);
                    self.shared.fetch.metrics.item_done(true);
                }
                Err(e) => {
                    skipped.push(e);
                    self.shared.fetch.metrics.item_done(false);
                }
            }
        }
        if failures.0 != plan.epoch {
            *failures = (plan.epoch, 0);
        }
        if !skipped.is_empty() {
            match self.policy {
                ErrorPolicy::Fail => {
                    return Err(EngineError::Batch {
                        epoch: plan.epoch,
                        position: plan.position,
                        errors: skipped,
                    });
                }
                ErrorPolicy::Skip { max_failures } => {
                    failures.1 += skipped.len();
                    if failures.1 > max_failures {
                        return Err(EngineError::TooManyFailures {
                            epoch: plan.epoch,
                            max_failures,
                            errors: skipped,
                        });
                    }
                }
            }
        }
        Ok(RawBatch {
            epoch: plan.epoch,
            position: plan.position,
            planned: plan.len,
            samples,
            skipped,
            last_in_epoch: plan.last_in_epoch,
            queued_at: Instant::now(),
            permits: Vec::new(),
            decoded: share,
        })
    }
}

/// Item `i` of `plan` as the strategy runs it.
fn job(plan: &BatchPlan, i: usize, seq: u64, kept: &mut KeptChunks) -> Job {
    let item = &plan.items[i];
    let info = SampleInfo {
        index: item.index,
        key: Arc::clone(&item.key),
        range: item.range.clone(),
        name: item.name.clone(),
        label: item.label,
        epoch: plan.epoch,
        position: plan.position + i as u64,
        members: Vec::new(),
    };
    // A fetch's id in the trace: unique among overlapping fetches.
    let trace_id = ((info.epoch << 40) | info.position, info.index);
    Job {
        seq,
        unit: kept.unit_for(item, trace_id),
        members: Arc::clone(&item.members),
        info,
    }
}

/// The plan iterator with its panics caught: a panic becomes one `Err` with its message,
/// after which the iterator is done.
struct Guarded<I> {
    inner: Option<I>,
}

impl<I: Iterator<Item = BatchPlan>> Iterator for Guarded<I> {
    type Item = Result<BatchPlan, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let inner = self.inner.as_mut()?;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.next())) {
            Ok(plan) => plan.map(Ok),
            Err(panic) => {
                self.inner = None;
                Some(Err(panic_message(&*panic)))
            }
        }
    }
}
