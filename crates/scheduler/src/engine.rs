//! The engine: admits planned items within a bounded window, fetches and decodes them by
//! the chosen strategy, reassembles batches in order and queues them for the consumer.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::{FutureExt, Stream};
use loader_storage::DynStorage;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::control::{self, Controller};
use crate::decoded::{Decoded, Weigh};
use crate::driver::Driver;
use crate::item::{BatchPlan, EngineError};
use crate::metrics::Metrics;
use crate::pool::Pool;
use crate::stage::{Output, Stage, panic_message};
use crate::strategy::strategy;
use crate::unit::FetchContext;
use crate::work::Shared;

/// Prefix of every thread the engine starts, so tests (and `top`) can find them.
pub const THREAD_PREFIX: &str = "loader-";

/// A running engine. Iterate it with [`Engine::next_blocking`], `.next().await` or as a
/// [`Stream`]. Dropping it cancels in-flight requests and joins every thread it started.
pub struct Engine<T> {
    out: mpsc::Receiver<Output<T>>,
    metrics: Arc<Metrics>,
    driver: tokio::task::AbortHandle,
    /// The adaptive in-flight limit's loop, if the limit adapts.
    control: Option<tokio::task::AbortHandle>,
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

impl<T: Send + 'static> Engine<T> {
    /// Start loading `plans` (an iterator over batches, across as many epochs as it
    /// yields) from `storage` through `stage`.
    pub fn start(
        storage: DynStorage,
        stage: Stage<T>,
        plans: impl Iterator<Item = BatchPlan> + Send + 'static,
        config: &Config,
    ) -> Result<Self, EngineError> {
        Self::start_weighed(storage, stage, None, plans, config)
    }

    /// [`Engine::start`] with `weigh` telling the bytes a decoded sample holds, so
    /// [`Config::max_decoded_bytes`] bounds decoded samples and finished batches in bytes.
    pub fn start_weighed(
        storage: DynStorage,
        stage: Stage<T>,
        weigh: Option<Weigh<T>>,
        plans: impl Iterator<Item = BatchPlan> + Send + 'static,
        config: &Config,
    ) -> Result<Self, EngineError> {
        config.validate().map_err(EngineError::Config)?;
        let start_err = |what, source| EngineError::Start { what, source };
        let open_files = crate::control::open_files_bound();
        let strategy = strategy::<T>(config.fetch, config.decode_threads, open_files);
        let (pool_name, pool_size) = strategy.pool();
        let max_in_flight = strategy.max_in_flight();
        let adaptive_cap = strategy.adaptive_cap();
        let metrics = Arc::new(Metrics::new(max_in_flight, adaptive_cap, pool_size));
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
            fetch: FetchContext::new(
                storage,
                Arc::clone(&metrics),
                max_in_flight,
                strategy.budgeted().then_some(config.max_buffered_bytes),
                config.trace.clone(),
                config.hedge,
            ),
            stage,
            pool: pool.handle(),
            runtime: runtime.clone(),
            results,
            cancelled,
        });
        let decoded = weigh.map(|weigh| Decoded::new(weigh, config.max_decoded_bytes));
        let slots = Arc::clone(&shared.fetch.slots);
        let driver = Driver::new(shared, strategy, config, out_tx, results_rx, decoded);
        let control = adaptive_cap.map(|cap| {
            let controller = Controller::new(cap, config.max_buffered_bytes, pool_size)
                .with_open_files(open_files);
            let task = control::run(
                controller,
                slots,
                driver.window(),
                Arc::clone(&metrics),
                config.trace.clone(),
                pool_size,
            );
            runtime.spawn(task).abort_handle()
        });
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
            control,
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
                .batch_taken(batch.queued_at.elapsed(), waited.elapsed(), batch.planned);
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
                this.metrics.batch_taken(
                    batch.queued_at.elapsed(),
                    waiting_since.elapsed(),
                    batch.planned,
                );
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
        if let Some(control) = &self.control {
            control.abort();
        }
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
                tracing::warn!(
                    "a blocking read did not return within {SHUTDOWN_GRACE:?} of the \
                     loader's drop; its thread was detached (it ends when the read does)"
                );
            }
        })?;
    Ok((stop, thread, handle))
}
