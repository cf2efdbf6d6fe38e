//! The engine: admits planned items within a bounded window, fetches and decodes them by
//! the chosen strategy, reassembles batches in order and queues them for the consumer.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::{FutureExt, Stream};
use loader_storage::DynStorage;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::config::{Config, ErrorPolicy, Fetch, Order};
use crate::item::{
    BatchPlan, EngineError, ItemError, ItemFailure, RawBatch, SampleInfo, StageError,
};
use crate::metrics::Metrics;
use crate::pool::{Pool, PoolHandle};

/// The CPU stage: bytes of one sample to its decoded form. Runs on the engine's threads,
/// never on the async runtime's.
pub type Stage<T> = Arc<dyn Fn(Bytes, &SampleInfo) -> Result<T, StageError> + Send + Sync>;

type ItemResult<T> = Result<(SampleInfo, T), ItemError>;
type Output<T> = Result<RawBatch<T>, EngineError>;

/// Prefix of every thread the engine starts, so tests (and `top`) can find them.
pub const THREAD_PREFIX: &str = "loader-";

/// A running engine. Iterate it with [`Engine::next_blocking`], `.next().await` or as a
/// [`Stream`]. Dropping it cancels in-flight requests and joins every thread it started.
pub struct Engine<T> {
    out: mpsc::Receiver<Output<T>>,
    metrics: Arc<Metrics>,
    driver: tokio::task::AbortHandle,
    /// The runtime thread, when the engine owns its runtime: stopped and joined on drop.
    own_runtime: Option<(oneshot::Sender<()>, std::thread::JoinHandle<()>)>,
    pool: Option<Pool>,
    /// Set on drop: blocking fetches waiting on the runtime give up at once.
    cancel: watch::Sender<bool>,
    /// When a `Stream` consumer first polled for the batch it is still waiting for.
    waiting_since: Option<Instant>,
}

impl<T> std::fmt::Debug for Engine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// Everything an item's work needs, shared by the driver and its tasks.
struct Shared<T> {
    storage: DynStorage,
    stage: Stage<T>,
    metrics: Arc<Metrics>,
    pool: PoolHandle,
    runtime: tokio::runtime::Handle,
    results: mpsc::UnboundedSender<(u64, ItemResult<T>)>,
    cancelled: watch::Receiver<bool>,
    trace: Option<Arc<crate::Trace>>,
}

impl<T: Send + 'static> Engine<T> {
    /// Start loading `plans` (an iterator over batches, across as many epochs as it
    /// yields) from `storage` through `stage`.
    pub fn start(
        storage: DynStorage,
        stage: Stage<T>,
        plans: impl Iterator<Item = BatchPlan> + Send + 'static,
        config: &Config,
    ) -> Result<Self, EngineError> {
        config.validate().map_err(EngineError::Config)?;
        let start_err = |what: &str, e: std::io::Error| EngineError::Start(format!("{what}: {e}"));
        let (pool_name, pool_size, max_in_flight) = match config.fetch {
            Fetch::Async { max_in_flight } => ("decode", config.decode_threads, max_in_flight),
            Fetch::Threads { threads } => ("fetch", threads, threads),
            Fetch::Sequential { workers } => ("worker", workers, workers),
        };
        let metrics = Arc::new(Metrics::new(max_in_flight, pool_size));
        let (own_runtime, runtime) = match &config.runtime {
            Some(handle) => (None, handle.clone()),
            None => {
                let (stop, thread, handle) =
                    own_runtime(Arc::clone(&metrics)).map_err(|e| start_err("runtime", e))?;
                (Some((stop, thread)), handle)
            }
        };
        let pool = Pool::new(&format!("{THREAD_PREFIX}{pool_name}"), pool_size)
            .map_err(|e| start_err("threads", e))?;
        let (out_tx, out) = mpsc::channel(config.prefetch);
        let report = out_tx.clone();
        let (results, results_rx) = mpsc::unbounded_channel();
        let (cancel, cancelled) = watch::channel(false);
        let shared = Arc::new(Shared {
            storage,
            stage,
            metrics: Arc::clone(&metrics),
            pool: pool.handle(),
            runtime: runtime.clone(),
            results,
            cancelled,
            trace: config.trace.clone(),
        });
        let driver = Driver {
            shared,
            fetch: config.fetch,
            order: config.order,
            policy: config.error_policy,
            cpu_threads: pool_size,
            prefetch: config.prefetch,
            fetch_limit: Arc::new(Semaphore::new(max_in_flight)),
            out: out_tx,
            results: results_rx,
            window_for: 0,
        };
        // A panic in the driver (a sampler, a plan iterator, a bug of ours) must reach the
        // consumer as an error: a driver that simply vanished would end the epoch early
        // and look like a normal end.
        let task = runtime.spawn(async move {
            if let Err(panic) = AssertUnwindSafe(driver.run(plans)).catch_unwind().await {
                let error = EngineError::Panicked {
                    what: "planning or assembling batches (the sampler or the engine)",
                    message: panic_message(&*panic),
                };
                let _ = report.send(Err(error)).await;
            }
        });
        Ok(Self {
            out,
            metrics,
            driver: task.abort_handle(),
            own_runtime,
            pool: Some(pool),
            cancel,
            waiting_since: None,
        })
    }

    /// The next batch, blocking the calling thread. `None` when the plans are exhausted
    /// or after an error ended the run.
    pub fn next_blocking(&mut self) -> Option<Output<T>> {
        let waited = Instant::now();
        // futures' executor, not tokio's blocking_recv: this may be called from inside a
        // tokio runtime, where tokio's blocking calls panic.
        let item = futures::executor::block_on(self.out.recv());
        self.taken(item, waited)
    }

    /// The next batch.
    pub async fn next(&mut self) -> Option<Output<T>> {
        let waited = Instant::now();
        let item = self.out.recv().await;
        self.taken(item, waited)
    }

    fn taken(&self, item: Option<Output<T>>, waited: Instant) -> Option<Output<T>> {
        if let Some(Ok(batch)) = &item {
            self.metrics
                .batch_taken(batch.queued_at.elapsed(), waited.elapsed());
        }
        item
    }

    /// The live metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }
}

impl<T: Send + 'static> Stream for Engine<T> {
    type Item = Output<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Output<T>>> {
        let this = self.get_mut();
        let waiting_since = *this.waiting_since.get_or_insert_with(Instant::now);
        let polled = this.out.poll_recv(cx);
        if polled.is_ready() {
            this.waiting_since = None;
            if let Poll::Ready(Some(Ok(batch))) = &polled {
                this.metrics
                    .batch_taken(batch.queued_at.elapsed(), waiting_since.elapsed());
            }
        }
        polled
    }
}

impl<T> Drop for Engine<T> {
    fn drop(&mut self) {
        // Blocking fetches stop waiting; the driver is cancelled, and dropping it drops its
        // JoinSet, which aborts every item task and so every request in flight.
        let _ = self.cancel.send(true);
        self.driver.abort();
        self.out.close();
        // Pool threads first, while the runtime they may be blocked on still runs.
        if let Some(mut pool) = self.pool.take() {
            pool.shutdown();
        }
        if let Some((stop, thread)) = self.own_runtime.take() {
            let _ = stop.send(());
            // The runtime is dropped on its own thread, outside any async context.
            let _ = thread.join();
        }
    }
}

/// How long dropping an engine waits for blocking reads still running on its runtime.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Engine drops in this process that left a blocking read's thread behind.
static DETACHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many dropped engines (process-wide) had to leave a thread behind because a blocking
/// read on it never returned, e.g. on a hung network mount. Every other thread an engine
/// starts is joined when it is dropped.
pub fn detached_on_drop() -> u64 {
    DETACHED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A current-thread runtime on a thread of our own, so a synchronous caller needs no tokio
/// and dropping the engine never drops a runtime inside someone's async context.
fn own_runtime(
    metrics: Arc<Metrics>,
) -> std::io::Result<(
    oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
    tokio::runtime::Handle,
)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(format!("{THREAD_PREFIX}io-blocking"))
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("{THREAD_PREFIX}io"))
        .spawn(move || {
            runtime.block_on(async {
                let _ = stopped.await;
            });
            // Not `drop`: it waits for every blocking-pool thread, and one stuck in a read
            // that never returns (a hung network mount) would hang the loader's drop.
            // Such a thread is left behind, detached, and reported once.
            let started = Instant::now();
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
            if started.elapsed() >= SHUTDOWN_GRACE {
                DETACHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                metrics.detached();
                eprintln!(
                    "loader: a blocking read did not return within {SHUTDOWN_GRACE:?} of the \
                     loader's drop; its thread was detached (it ends when the read does)"
                );
            }
        })?;
    Ok((stop, thread, handle))
}

struct Driver<T> {
    shared: Arc<Shared<T>>,
    fetch: Fetch,
    order: Order,
    policy: ErrorPolicy,
    cpu_threads: usize,
    prefetch: usize,
    fetch_limit: Arc<Semaphore>,
    out: mpsc::Sender<Output<T>>,
    results: mpsc::UnboundedReceiver<(u64, ItemResult<T>)>,
    /// The largest plan the window has been sized for so far.
    window_for: usize,
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

/// What assembly needs to know of a planned batch.
struct Pending {
    epoch: u64,
    position: u64,
    len: usize,
    last_in_epoch: bool,
}

/// The batches admitted and not yet handed over, with their items' results as they come.
struct Assembly<T> {
    pending: VecDeque<Pending>,
    /// Window permits of admitted items, in admission order.
    permits: VecDeque<OwnedSemaphorePermit>,
    /// `Sampler` order: results by sequence number, from `base` on.
    slots: VecDeque<Option<ItemResult<T>>>,
    base: u64,
    /// `AsCompleted` order: results as they arrived.
    arrived: VecDeque<ItemResult<T>>,
    /// (epoch, failures so far in it), for `Skip { max_failures }`.
    failures: (u64, usize),
}

impl<T> Assembly<T> {
    fn put(&mut self, order: Order, seq: u64, result: ItemResult<T>) {
        match order {
            Order::Sampler => {
                let slot = (seq - self.base) as usize;
                if self.slots.len() <= slot {
                    self.slots.resize_with(slot + 1, || None);
                }
                self.slots[slot] = Some(result);
            }
            Order::AsCompleted => self.arrived.push_back(result),
        }
    }

    /// The front batch's results, if all have arrived.
    fn take_front(&mut self, order: Order) -> Option<(Pending, Vec<ItemResult<T>>)> {
        let n = self.pending.front()?.len;
        let items: Vec<ItemResult<T>> = match order {
            Order::Sampler => {
                if self.slots.len() < n || self.slots.iter().take(n).any(Option::is_none) {
                    return None;
                }
                self.base += n as u64;
                self.slots.drain(..n).flatten().collect()
            }
            // Admission never crosses an epoch boundary in this order, so whatever has
            // arrived belongs to the front batch's epoch.
            Order::AsCompleted => {
                if self.arrived.len() < n {
                    return None;
                }
                self.arrived.drain(..n).collect()
            }
        };
        self.pending.pop_front().map(|p| (p, items))
    }

    /// The window slots of the `n` items of the batch being handed over: they travel with
    /// it and are freed when the consumer drops it.
    fn take_permits(&mut self, n: usize) -> Vec<OwnedSemaphorePermit> {
        let mut taken = Vec::new();
        let mut count = 0;
        while count < n {
            let Some(permit) = self.permits.pop_front() else {
                break;
            };
            count += permit.num_permits();
            taken.push(permit);
        }
        taken
    }
}

impl<T: Send + 'static> Driver<T> {
    /// Items admitted and not yet taken by the consumer, at most: `prefetch` batches, the
    /// batch being assembled, and what the strategy keeps busy. A batch's slots are freed
    /// when the consumer drops it, so this bounds live samples (plus the batch the consumer
    /// made of them). While the ready queue is not full, its share lets fetching run
    /// further ahead, which keeps the CPU busy behind a slow request.
    fn window(&self, batch_size: usize) -> usize {
        let queue = self.prefetch * batch_size;
        queue
            + match self.fetch {
                Fetch::Async { max_in_flight } => batch_size + max_in_flight + self.cpu_threads,
                Fetch::Threads { threads } => batch_size + threads,
                Fetch::Sequential { workers } => (workers + 1) * batch_size,
            }
    }

    /// Grow the window when a plan larger than any before arrives (a resumed epoch's
    /// short tail comes first, a full batch later): sized from the first plan alone, a
    /// larger batch could never gather its items' slots, and the loader would hang.
    fn fit_window(&mut self, window: &Semaphore, plan_len: usize) {
        let plan_len = plan_len.max(1);
        if plan_len > self.window_for {
            let before = match self.window_for {
                0 => 0,
                sized => self.window(sized),
            };
            window.add_permits(self.window(plan_len) - before);
            self.window_for = plan_len;
        }
    }

    async fn run(mut self, plans: impl Iterator<Item = BatchPlan> + Send + 'static) {
        let mut plans = Guarded { inner: Some(plans) }.peekable();
        // A panic of the plan iterator (a sampler's bug): what was planned before it is
        // delivered, then the error.
        let mut planner_panic: Option<String> = None;
        let window = Arc::new(Semaphore::new(0));
        let mut tasks = JoinSet::new();
        let mut asm = Assembly {
            pending: VecDeque::new(),
            permits: VecDeque::new(),
            slots: VecDeque::new(),
            base: 0,
            arrived: VecDeque::new(),
            failures: (u64::MAX, 0),
        };
        let mut next_seq = 0u64;
        // The plan being admitted and how many of its items are in.
        let mut admitting: Option<(BatchPlan, usize)> = None;

        loop {
            if admitting.is_none() {
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
                } else if let Some(Ok(plan)) = next {
                    self.fit_window(&window, plan.items.len());
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
            let want = match (&admitting, self.fetch) {
                (Some((plan, _)), Fetch::Sequential { .. }) => plan.items.len().max(1) as u32,
                (Some(_), _) => 1,
                (None, _) => 0,
            };
            tokio::select! {
                biased;
                Some((seq, result)) = self.results.recv() => {
                    asm.put(self.order, seq, result);
                    while let Some((pending, items)) = asm.take_front(self.order) {
                        let (n, position) = (pending.len, pending.position);
                        let permits = asm.take_permits(n);
                        let batch = self.assemble(pending, items, &mut asm.failures).map(|mut batch| {
                            batch.permits = permits;
                            batch
                        });
                        let stop = batch.is_err();
                        // Backpressure: this waits while `prefetch` batches are queued;
                        // item tasks and pool jobs go on meanwhile.
                        if self.out.send(batch).await.is_err() || stop {
                            return;
                        }
                        self.shared.metrics.batch_queued();
                        if let Some(trace) = &self.shared.trace {
                            trace.batch(position);
                        }
                    }
                }
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    // Item tasks catch their own panics and report them as the item's
                    // error; one that escaped would leave its batch waiting forever.
                    if let Err(e) = joined
                        && e.is_panic()
                    {
                        let error = EngineError::Panicked {
                            what: "an item task",
                            message: panic_message(&*e.into_panic()),
                        };
                        let _ = self.out.send(Err(error)).await;
                        return;
                    }
                }
                permit = Arc::clone(&window).acquire_many_owned(want), if want > 0 => {
                    let Ok(permit) = permit else { return };
                    asm.permits.push_back(permit);
                    let Some((plan, at)) = admitting.as_mut() else { continue };
                    if let Fetch::Sequential { .. } = self.fetch {
                        let items: Vec<(u64, SampleInfo)> =
                            (0..plan.items.len()).map(|i| (next_seq + i as u64, info(plan, i))).collect();
                        next_seq += items.len() as u64;
                        admitting = None;
                        let shared = Arc::clone(&self.shared);
                        self.shared.pool.execute(move || {
                            // The vanilla worker: fetch, then decode, one item after another.
                            for (seq, sample) in items {
                                if *shared.cancelled.borrow() {
                                    return;
                                }
                                load_blocking(&shared, seq, sample);
                            }
                        });
                        continue;
                    }
                    let seq = next_seq;
                    next_seq += 1;
                    let sample = info(plan, *at);
                    *at += 1;
                    if *at == plan.items.len() {
                        admitting = None;
                    }
                    let shared = Arc::clone(&self.shared);
                    match self.fetch {
                        Fetch::Async { .. } => {
                            let limit = Arc::clone(&self.fetch_limit);
                            tasks.spawn(fetch_then_decode(shared, limit, seq, sample));
                        }
                        Fetch::Threads { .. } => {
                            let worker = Arc::clone(&shared);
                            shared.pool.execute(move || load_blocking(&worker, seq, sample));
                        }
                        Fetch::Sequential { .. } => {}
                    }
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
        let mut samples = Vec::with_capacity(items.len());
        let mut skipped = Vec::new();
        for item in items {
            match item {
                Ok(sample) => {
                    samples.push(sample);
                    self.shared.metrics.item_done(true);
                }
                Err(e) => {
                    skipped.push(e);
                    self.shared.metrics.item_done(false);
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
        })
    }
}

fn info(plan: &BatchPlan, i: usize) -> SampleInfo {
    let item = &plan.items[i];
    SampleInfo {
        index: item.index,
        key: Arc::clone(&item.key),
        epoch: plan.epoch,
        position: plan.position + i as u64,
    }
}

/// The `Async` strategy's item: the fetch as a future within the in-flight limit, then
/// the CPU stage on the pool.
async fn fetch_then_decode<T: Send + 'static>(
    shared: Arc<Shared<T>>,
    limit: Arc<Semaphore>,
    seq: u64,
    sample: SampleInfo,
) {
    let fetched = {
        // The semaphore is never closed, so this cannot fail while the engine lives.
        let Ok(_slot) = limit.acquire_owned().await else {
            return;
        };
        let _guard = shared.metrics.fetch_started();
        let started = Instant::now();
        let fetched = guarded_get(&shared.storage, &sample.key).await;
        if let Some(trace) = &shared.trace {
            trace.fetch(trace_id(&sample), started, sample.index);
        }
        fetched
    };
    match fetched {
        Ok(bytes) => {
            shared.metrics.fetched(bytes.len());
            let worker = Arc::clone(&shared);
            shared.pool.execute(move || {
                let result = run_stage(&worker, bytes, sample);
                let _ = worker.results.send((seq, result));
            });
        }
        Err(e) => {
            let _ = shared.results.send((
                seq,
                Err(ItemError {
                    info: sample,
                    failure: ItemFailure::Fetch(e),
                }),
            ));
        }
    }
}

/// `storage.get(key)` with a panic of the backend (or of a layer) turned into its error:
/// custom backends will have bugs, and a panic that unwound through the engine would lose
/// the item and leave its batch waiting forever.
async fn guarded_get(storage: &DynStorage, key: &str) -> loader_storage::Result<Bytes> {
    match AssertUnwindSafe(storage.get(key)).catch_unwind().await {
        Ok(fetched) => fetched,
        Err(panic) => Err(loader_storage::Error::new(
            loader_storage::ErrorKind::Other,
            storage.name(),
            key,
            format!("the backend panicked: {}", panic_message(&*panic)),
        )),
    }
}

/// The blocking strategies' item, on a pool thread: fetch, then decode, then report. The
/// item is always reported, even if something in it panics, so its batch completes.
fn load_blocking<T>(shared: &Shared<T>, seq: u64, sample: SampleInfo) {
    let info = sample.clone();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        fetch_blocking(shared, &sample).and_then(|bytes| run_stage(shared, bytes, sample))
    }))
    .unwrap_or_else(|panic| {
        Err(ItemError {
            info,
            failure: ItemFailure::Panic(panic_message(&*panic)),
        })
    });
    let _ = shared.results.send((seq, result));
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// A fetch's id in the trace: unique among overlapping fetches.
fn trace_id(info: &SampleInfo) -> u64 {
    (info.epoch << 40) | info.position
}

/// Fetch on the calling (non-runtime) thread by blocking on the runtime's handle.
fn fetch_blocking<T>(shared: &Shared<T>, info: &SampleInfo) -> Result<Bytes, ItemError> {
    let _guard = shared.metrics.fetch_started();
    let started = Instant::now();
    let mut cancelled = shared.cancelled.clone();
    let fetched = shared.runtime.block_on(async {
        tokio::select! {
            fetched = guarded_get(&shared.storage, &info.key) => Some(fetched),
            // Also when the engine is gone (the sender dropped).
            _ = cancelled.wait_for(|c| *c) => None,
        }
    });
    if let Some(trace) = &shared.trace {
        trace.fetch(trace_id(info), started, info.index);
    }
    match fetched {
        Some(Ok(bytes)) => {
            shared.metrics.fetched(bytes.len());
            Ok(bytes)
        }
        Some(Err(e)) => Err(ItemError {
            info: info.clone(),
            failure: ItemFailure::Fetch(e),
        }),
        None => Err(ItemError {
            info: info.clone(),
            failure: ItemFailure::Cancelled,
        }),
    }
}

/// The CPU stage, timed, with panics caught so one bad sample cannot take the pool down.
fn run_stage<T>(shared: &Shared<T>, bytes: Bytes, info: SampleInfo) -> ItemResult<T> {
    let _guard = shared.metrics.decode_started();
    let (started, index) = (Instant::now(), info.index);
    let stage = &shared.stage;
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| stage(bytes, &info)));
    if let Some(trace) = &shared.trace {
        trace.decode(started, index);
    }
    match outcome {
        Ok(Ok(value)) => Ok((info, value)),
        Ok(Err(e)) => Err(ItemError {
            info,
            failure: ItemFailure::Stage(e),
        }),
        Err(panic) => Err(ItemError {
            info,
            failure: ItemFailure::Panic(panic_message(&*panic)),
        }),
    }
}
