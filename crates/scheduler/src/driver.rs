//! The driver: admits planned items within a bounded window, hands them to the strategy,
//! reassembles batches in order and queues them for the consumer.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::assembly::{Assembly, EpochFailures, Pending};
use crate::coalesce::coalesce;
use crate::config::{Config, ErrorPolicy, Order};
use crate::decoded::Decoded;
use crate::item::{BatchPlan, EngineError, RawBatch, SampleInfo};
use crate::kept::KeptChunks;
use crate::stage::{Output, panic_message};
use crate::strategy::Strategy;
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
        let mut run = Run {
            plans: Guarded { inner: Some(plans) }.peekable(),
            planner_panic: None,
            tasks: JoinSet::new(),
            asm: Assembly::default(),
            kept: KeptChunks::default(),
            next_seq: 0,
            admitting: None,
        };
        let window = Arc::clone(&self.window);
        let budget_short = Arc::clone(&self.shared.fetch.budget_short);
        let released = self.decoded.as_ref().map(|d| Arc::clone(&d.released));
        loop {
            let over = self.over_bound(&run);
            if run.admitting.is_none() && !over {
                self.next_plan(&mut run);
            }
            if run.admitting.is_none() && run.asm.pending.is_empty() {
                if let Some(message) = run.planner_panic.take() {
                    let error = EngineError::Panicked {
                        what: "the sampler or the plan of batches",
                        message,
                    };
                    let _ = self.out.send(Err(error)).await;
                    return;
                }
                if run.plans.peek().is_none() {
                    return; // everything handed over
                }
            }
            let want = match &run.admitting {
                Some((plan, _)) if self.strategy.whole_batches() => plan.items.len().max(1) as u32,
                Some(_) => 1,
                None => 0,
            };
            let flow = tokio::select! {
                biased;
                Some(results) = self.results.recv() => self.deliver(&mut run, results).await,
                Some(joined) = run.tasks.join_next(), if !run.tasks.is_empty() => {
                    self.task_ended(joined).await
                }
                // A fetch waits for the byte budget: chunks kept for later items give way.
                () = budget_short.notified() => {
                    run.kept.clear();
                    Flow::Go
                }
                // A batch was handed over or dropped: below the bound again, perhaps.
                () = async { if let Some(r) = &released { r.notified().await } }, if over => {
                    Flow::Go
                }
                permit = Arc::clone(&window).acquire_many_owned(want), if want > 0 => {
                    match permit {
                        Ok(permit) => self.admit(&mut run, permit),
                        Err(_) => Flow::Stop,
                    }
                }
            };
            if let Flow::Stop = flow {
                return;
            }
        }
    }

    /// Over the decoded-bytes bound, no new batch starts; the admitted ones complete
    /// (holding back their items could leave a batch waiting for ever).
    fn over_bound<P: Iterator<Item = BatchPlan>>(&self, run: &Run<T, P>) -> bool {
        run.admitting.is_none()
            && !run.asm.pending.is_empty()
            && self.decoded.as_ref().is_some_and(Decoded::over)
    }

    /// Take the next plan to admit, unless an `AsCompleted` epoch must first finish or the
    /// planner has panicked.
    fn next_plan<P: Iterator<Item = BatchPlan>>(&mut self, run: &mut Run<T, P>) {
        let asm = &run.asm;
        let barrier = self.order == Order::AsCompleted
            && run.plans.peek().is_some_and(|next| {
                next.as_ref()
                    .is_ok_and(|next| asm.pending.back().is_some_and(|p| p.epoch != next.epoch))
            });
        if barrier || run.planner_panic.is_some() {
            return;
        }
        match run.plans.next() {
            Some(Err(message)) => run.planner_panic = Some(message),
            Some(Ok(mut plan)) => {
                self.fit_window(plan.items.len());
                coalesce(&mut plan.items, self.coalesce.0, self.coalesce.1);
                if let Some(decoded) = &mut self.decoded {
                    decoded.admitted(plan.items.len());
                }
                run.asm.pending.push_back(Pending {
                    epoch: plan.epoch,
                    position: plan.position,
                    len: plan.items.len(),
                    last_in_epoch: plan.last_in_epoch,
                    covers: plan.covers,
                    padding: plan.padding,
                });
                run.admitting = Some((plan, 0));
            }
            None => {}
        }
    }

    /// Put arrived results in place and hand over every batch they complete, in order.
    async fn deliver<P: Iterator<Item = BatchPlan>>(
        &mut self,
        run: &mut Run<T, P>,
        results: Results<T>,
    ) -> Flow {
        for (seq, result) in results {
            if let Some(decoded) = &mut self.decoded {
                let weight = result.as_ref().ok().map(|(_, v)| (decoded.weigh)(v) as u64);
                decoded.arrived(weight);
            }
            run.asm.put(self.order, seq, result);
        }
        while let Some((pending, items)) = run.asm.take_front(self.order) {
            let (n, position) = (pending.len, pending.position);
            let permits = run.asm.take_permits(n);
            let batch = self
                .assemble(pending, items, &mut run.asm.failures)
                .map(|mut batch| {
                    batch.permits = permits;
                    batch
                });
            let stop = batch.is_err();
            // Backpressure: this waits while `prefetch` batches are queued; fetch tasks and
            // pool jobs go on meanwhile.
            if self.out.send(batch).await.is_err() || stop {
                return Flow::Stop;
            }
            self.shared.fetch.metrics.batch_queued();
            if let Some(trace) = &self.shared.fetch.trace {
                trace.batch(position);
            }
        }
        Flow::Go
    }

    /// A fetch task ended. They catch their items' panics and report them as the items'
    /// errors; one that escaped would leave its batches waiting forever.
    async fn task_ended(&self, joined: Result<(), tokio::task::JoinError>) -> Flow {
        match joined {
            Err(e) if e.is_panic() => {
                let error = EngineError::Panicked {
                    what: "a fetch task",
                    message: panic_message(&*e.into_panic()),
                };
                let _ = self.out.send(Err(error)).await;
                Flow::Stop
            }
            _ => Flow::Go,
        }
    }

    /// The window had room: admit as many of the plan's items as it has room for now, in
    /// one pass rather than one per item, and launch them.
    fn admit<P: Iterator<Item = BatchPlan>>(
        &mut self,
        run: &mut Run<T, P>,
        mut permit: OwnedSemaphorePermit,
    ) -> Flow {
        let Some((plan, at)) = run.admitting.as_mut() else {
            run.asm.permits.push_back(permit);
            return Flow::Go;
        };
        let n = if self.strategy.whole_batches() {
            plan.items.len()
        } else {
            let room = (plan.items.len() - *at - 1).min(self.window.available_permits());
            if let Ok(more) = Arc::clone(&self.window).try_acquire_many_owned(room as u32) {
                permit.merge(more);
            }
            permit.num_permits()
        };
        run.asm.permits.push_back(permit);
        let jobs: Vec<Job> = (*at..(*at + n).min(plan.items.len()))
            .map(|i| {
                let seq = run.next_seq;
                run.next_seq += 1;
                job(plan, i, seq, &mut run.kept)
            })
            .collect();
        *at += n;
        if *at >= plan.items.len() {
            run.admitting = None;
        }
        self.strategy.launch(&self.shared, jobs, &mut run.tasks);
        Flow::Go
    }

    /// Turn a planned batch's results into a batch or an error, by the error policy.
    fn assemble(
        &self,
        plan: Pending,
        items: Vec<ItemResult<T>>,
        failures: &mut EpochFailures,
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
        // Padding items are the plan's last; those that loaded are the batch's last.
        let first_padding = items.len().saturating_sub(plan.padding);
        let mut padding = 0;
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Ok(sample) => {
                    padding += usize::from(i >= first_padding);
                    samples.push(sample);
                    self.shared.fetch.metrics.item_done(true);
                }
                // Padding repeats a sample another rank reads, and reports when it fails.
                Err(_) if i >= first_padding => self.shared.fetch.metrics.item_done(false),
                Err(e) => {
                    skipped.push(e);
                    self.shared.fetch.metrics.item_done(false);
                }
            }
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
                    if failures.add(plan.epoch, skipped.len()) > max_failures {
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
            covers: plan.covers,
            padding,
            samples,
            skipped,
            last_in_epoch: plan.last_in_epoch,
            queued_at: Instant::now(),
            permits: Vec::new(),
            decoded: share,
        })
    }
}

/// The driver loop's state: the plans, what is being admitted, assembled, kept and run.
struct Run<T, P: Iterator<Item = BatchPlan>> {
    plans: std::iter::Peekable<Guarded<P>>,
    /// A panic of the plan iterator (a sampler's bug): what was planned before it is
    /// delivered, then the error.
    planner_panic: Option<String>,
    tasks: JoinSet<()>,
    asm: Assembly<T>,
    /// Chunks fetched for later items of the plan.
    kept: KeptChunks,
    next_seq: u64,
    /// The plan being admitted and how many of its items are in.
    admitting: Option<(BatchPlan, usize)>,
}

/// Whether the driver loop goes on.
enum Flow {
    Go,
    Stop,
}

/// Item `i` of `plan` as the strategy runs it.
fn job(plan: &BatchPlan, i: usize, seq: u64, kept: &mut KeptChunks) -> Job {
    let item = &plan.items[i];
    let info = SampleInfo {
        index: item.index,
        key: Arc::clone(&item.key),
        range: item.range.clone(),
        name: item.name.clone(),
        label: item.label.clone(),
        epoch: plan.epoch,
        position: item.position.unwrap_or(plan.position + i as u64),
        members: Vec::new(),
    };
    // A fetch's id in the trace: unique among overlapping fetches.
    let trace_id = ((info.epoch << 40) | info.position, info.index);
    Job {
        seq,
        unit: kept.unit_for(item, trace_id),
        members: Arc::clone(&item.members),
        record: item.record.clone(),
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
