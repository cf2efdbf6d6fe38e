//! Per-stage timings and gauges, and a summary that names the bottleneck.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use loader_storage::ErrorKind;
use loader_storage::Served;

use crate::limit::LimitReason;
use crate::summary::{StageSummary, Summary};

/// Live counters of an engine, shared with whoever reports them.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    config_in_flight: usize,
    config_cpu_threads: usize,
    fetch: Timer,
    /// Requests a cache layer answered without the store, timed apart so that `fetch` is
    /// the store's latency, which the controller and the hedger go by.
    cached: Timer,
    decode: Timer,
    queue_wait: Timer,
    consumer_wait: Timer,
    bytes: AtomicU64,
    items: AtomicU64,
    delivered: AtomicU64,
    failures: AtomicU64,
    in_flight: AtomicUsize,
    in_flight_peak: AtomicUsize,
    decoding: AtomicUsize,
    ready_batches: AtomicUsize,
    /// Sum over fetches of the in-flight count at their start, to report the mean.
    in_flight_sum: AtomicU64,
    /// Requests started: what `in_flight_sum` is a sum over (not those ended, which leaves
    /// the requests still in flight at a summary out of the count and inflates the mean).
    fetches_started: AtomicU64,
    /// Set when the engine's drop had to leave a blocking read's thread behind.
    detached: AtomicBool,
    /// The in-flight limit now, whether it adapts, and why it last changed.
    limit: AtomicUsize,
    adaptive: bool,
    limit_reason: Mutex<LimitReason>,
    limit_changes: AtomicU64,
    limit_peak: AtomicUsize,
    /// Requests answered or failed, and those that failed as the store's trouble (throttled,
    /// transient, timed out), for the controller.
    fetches_done: AtomicU64,
    fetch_errors: AtomicU64,
    throttled_last: AtomicU64,
    /// Fetched items waiting for a CPU thread.
    awaiting_cpu: AtomicUsize,
    hedges_sent: AtomicU64,
    hedges_won: AtomicU64,
    stalls_hedged: AtomicU64,
    hedges_in_flight: AtomicUsize,
    /// What the store's layers saw and hid (retries, throttling answers they retried).
    /// Throttling answers and other failures that the store's retry layers repeated, as
    /// requests' results ([`Served`]) report them.
    layer_throttled: AtomicU64,
    layer_retried: AtomicU64,
}

/// A latency histogram (microseconds, 2 significant digits) and a running total.
#[derive(Debug)]
struct Timer {
    hist: Mutex<Histogram<u64>>,
    total_us: AtomicU64,
    count: AtomicU64,
}

impl Timer {
    fn new() -> Self {
        Self {
            hist: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("constant bounds are valid"),
            ),
            total_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        self.total_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.hist
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .saturating_record(us);
    }

    fn totals(&self) -> (u64, u64) {
        (
            self.total_us.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
        )
    }

    fn summary(&self) -> StageSummary {
        let hist = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        let at = |q| Duration::from_micros(hist.value_at_quantile(q));
        StageSummary {
            count: hist.len(),
            total: Duration::from_micros(self.total_us.load(Ordering::Relaxed)),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: Duration::from_micros(hist.max()),
        }
    }
}

impl Metrics {
    /// Metrics of an engine starting with `max_in_flight` requests in flight at most,
    /// `adaptive` if the limit adapts (up to `cap`), and `cpu_threads`.
    pub(crate) fn new(
        max_in_flight: usize,
        adaptive_cap: Option<usize>,
        cpu_threads: usize,
    ) -> Self {
        Self {
            started: Instant::now(),
            config_in_flight: adaptive_cap.unwrap_or(max_in_flight),
            config_cpu_threads: cpu_threads,
            fetch: Timer::new(),
            cached: Timer::new(),
            decode: Timer::new(),
            queue_wait: Timer::new(),
            consumer_wait: Timer::new(),
            bytes: AtomicU64::new(0),
            items: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            in_flight_peak: AtomicUsize::new(0),
            decoding: AtomicUsize::new(0),
            ready_batches: AtomicUsize::new(0),
            in_flight_sum: AtomicU64::new(0),
            fetches_started: AtomicU64::new(0),
            detached: AtomicBool::new(false),
            limit: AtomicUsize::new(max_in_flight),
            adaptive: adaptive_cap.is_some(),
            limit_reason: Mutex::new(LimitReason::Start),
            limit_changes: AtomicU64::new(0),
            limit_peak: AtomicUsize::new(max_in_flight),
            fetches_done: AtomicU64::new(0),
            fetch_errors: AtomicU64::new(0),
            throttled_last: AtomicU64::new(0),
            awaiting_cpu: AtomicUsize::new(0),
            hedges_sent: AtomicU64::new(0),
            hedges_won: AtomicU64::new(0),
            stalls_hedged: AtomicU64::new(0),
            hedges_in_flight: AtomicUsize::new(0),
            layer_throttled: AtomicU64::new(0),
            layer_retried: AtomicU64::new(0),
        }
    }

    /// A request ended, failed with `error` if it did.
    pub(crate) fn fetch_finished(&self, error: Option<ErrorKind>) {
        self.fetches_done.fetch_add(1, Ordering::Relaxed);
        match error {
            Some(ErrorKind::Throttled) => {
                self.throttled_last.fetch_add(1, Ordering::Relaxed);
            }
            Some(kind) if kind.is_retryable() => {
                self.fetch_errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// What a request met on its way, as its result (or error) tells.
    pub(crate) fn served(&self, served: Served) {
        self.layer_throttled
            .fetch_add(u64::from(served.throttled), Ordering::Relaxed);
        self.layer_retried
            .fetch_add(u64::from(served.retries), Ordering::Relaxed);
    }

    /// Attempts the store's retry layers repeated for failures other than throttling.
    pub(crate) fn retried(&self) -> u64 {
        self.layer_retried.load(Ordering::Relaxed)
    }

    /// Requests ended so far.
    pub(crate) fn fetches_done(&self) -> u64 {
        self.fetches_done.load(Ordering::Relaxed)
    }

    /// Throttling answers so far: retried by a layer, or the request's last.
    pub(crate) fn throttled(&self) -> u64 {
        self.layer_throttled.load(Ordering::Relaxed) + self.throttled_last.load(Ordering::Relaxed)
    }

    /// The store's failures so far: attempts retried, and requests failed with a retryable
    /// kind of error.
    pub(crate) fn store_errors(&self) -> u64 {
        self.retried() + self.fetch_errors.load(Ordering::Relaxed)
    }

    /// `items` fetched items were queued for the CPU stage.
    pub(crate) fn cpu_queued(&self, items: usize) {
        self.awaiting_cpu.fetch_add(items, Ordering::Relaxed);
    }

    /// Fetched items waiting for a CPU thread now.
    pub fn awaiting_cpu(&self) -> usize {
        self.awaiting_cpu.load(Ordering::Relaxed)
    }

    pub(crate) fn limit_set(&self, limit: usize, reason: LimitReason) {
        self.limit.store(limit, Ordering::Relaxed);
        *self.limit_reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
        self.limit_changes.fetch_add(1, Ordering::Relaxed);
        self.limit_peak.fetch_max(limit, Ordering::Relaxed);
    }

    /// The in-flight limit now: fixed, or where the controller set it.
    pub fn in_flight_limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// One more request in flight; how many are now.
    fn took_off(&self) -> usize {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_peak.fetch_max(now, Ordering::Relaxed);
        now
    }

    pub(crate) fn fetch_started(&self) -> InFlight<'_> {
        let now = self.took_off();
        self.in_flight_sum.fetch_add(now as u64, Ordering::Relaxed);
        self.fetches_started.fetch_add(1, Ordering::Relaxed);
        InFlight {
            metrics: self,
            started: Instant::now(),
            cached: AtomicBool::new(false),
        }
    }

    /// A hedge is in flight until the guard drops; its latency is not a fetch's.
    pub(crate) fn hedge_started(&self) -> HedgeInFlight<'_> {
        self.hedges_sent.fetch_add(1, Ordering::Relaxed);
        self.hedges_in_flight.fetch_add(1, Ordering::Relaxed);
        self.took_off();
        HedgeInFlight { metrics: self }
    }

    /// Hedges in flight now.
    pub(crate) fn hedges_in_flight(&self) -> usize {
        self.hedges_in_flight.load(Ordering::Relaxed)
    }

    /// A stalled request is about to be sent again.
    pub(crate) fn stall_hedged(&self) {
        self.stalls_hedged.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hedge_won(&self) {
        self.hedges_won.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fetched(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Time spent in the CPU stage so far, over all threads, in microseconds.
    pub(crate) fn cpu_time_us(&self) -> u64 {
        self.decode.total_us.load(Ordering::Relaxed)
    }

    /// CPU stage runs so far.
    pub(crate) fn cpu_runs(&self) -> u64 {
        self.decode.count.load(Ordering::Relaxed)
    }

    /// Time spent in requests the store answered so far, and their count: the store's
    /// recent latency.
    pub(crate) fn fetch_time_us(&self) -> (u64, u64) {
        self.fetch.totals()
    }

    /// The same for requests a cache answered without the store.
    pub(crate) fn cached_time_us(&self) -> (u64, u64) {
        self.cached.totals()
    }

    /// Bytes fetched so far.
    pub(crate) fn bytes_fetched(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn decode_started(&self) -> Decoding<'_> {
        self.decoding.fetch_add(1, Ordering::Relaxed);
        // Items that never went through the queue (blocking strategies) leave it at 0.
        let _ = self
            .awaiting_cpu
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        Decoding {
            metrics: self,
            started: Instant::now(),
        }
    }

    pub(crate) fn item_done(&self, ok: bool) {
        self.items.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn batch_queued(&self) {
        self.ready_batches.fetch_add(1, Ordering::Relaxed);
    }

    /// The consumer took a batch of `items` (loaded and skipped) that had waited `queued`
    /// in the ready queue, after waiting `waited` for it.
    pub fn batch_taken(&self, queued: Duration, waited: Duration, items: usize) {
        self.ready_batches.fetch_sub(1, Ordering::Relaxed);
        self.delivered.fetch_add(items as u64, Ordering::Relaxed);
        self.queue_wait.record(queued);
        self.consumer_wait.record(waited);
    }

    /// Whether dropping the engine left a thread behind, detached, because a blocking read
    /// on it never returned (a hung network mount); see `detached_on_drop`.
    pub fn detached_on_drop(&self) -> bool {
        self.detached.load(Ordering::Relaxed)
    }

    pub(crate) fn detached(&self) {
        self.detached.store(true, Ordering::Relaxed);
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Items in the CPU stage now.
    pub fn decoding(&self) -> usize {
        self.decoding.load(Ordering::Relaxed)
    }

    /// Finished batches waiting for the consumer now.
    pub fn ready_batches(&self) -> usize {
        self.ready_batches.load(Ordering::Relaxed)
    }

    /// Everything so far.
    pub fn summary(&self) -> Summary {
        let fetch = self.fetch.summary();
        let cached = self.cached.summary();
        Summary {
            elapsed: self.started.elapsed(),
            items: self.items.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            fetch,
            cached,
            decode: self.decode.summary(),
            queue_wait: self.queue_wait.summary(),
            consumer_wait: self.consumer_wait.summary(),
            mean_in_flight: match self.fetches_started.load(Ordering::Relaxed) {
                0 => 0.0,
                n => self.in_flight_sum.load(Ordering::Relaxed) as f64 / n as f64,
            },
            peak_in_flight: self.in_flight_peak.load(Ordering::Relaxed),
            max_in_flight: self.config_in_flight,
            in_flight_limit: self.in_flight_limit(),
            adaptive: self.adaptive,
            limit_reason: *self.limit_reason.lock().unwrap_or_else(|p| p.into_inner()),
            limit_changes: self.limit_changes.load(Ordering::Relaxed),
            limit_peak: self.limit_peak.load(Ordering::Relaxed),
            throttled: self.throttled(),
            retried: self.retried(),
            hedges_sent: self.hedges_sent.load(Ordering::Relaxed),
            hedges_won: self.hedges_won.load(Ordering::Relaxed),
            stalls_hedged: self.stalls_hedged.load(Ordering::Relaxed),
            cpu_threads: self.config_cpu_threads,
        }
    }
}

/// Counts a fetch as in flight until dropped (also when its task is cancelled).
pub(crate) struct InFlight<'a> {
    metrics: &'a Metrics,
    started: Instant,
    cached: AtomicBool,
}

impl InFlight<'_> {
    /// When the fetch started: one clock read serves the metrics, the hedge and the trace.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// A cache answered this fetch without the store: it is not timed as the store's.
    pub(crate) fn served_by_cache(&self) {
        self.cached.store(true, Ordering::Relaxed);
    }

    /// Whether a cache answered it.
    pub(crate) fn cached(&self) -> bool {
        self.cached.load(Ordering::Relaxed)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        let timer = if self.cached() {
            &self.metrics.cached
        } else {
            &self.metrics.fetch
        };
        timer.record(self.started.elapsed());
    }
}

/// Counts a hedge as in flight until dropped (also when it loses and is cancelled).
pub(crate) struct HedgeInFlight<'a> {
    metrics: &'a Metrics,
}

impl Drop for HedgeInFlight<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics
            .hedges_in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts an item as in the CPU stage until dropped.
pub(crate) struct Decoding<'a> {
    metrics: &'a Metrics,
    started: Instant,
}

impl Decoding<'_> {
    /// When the stage started: one clock read serves the metrics and the trace.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }
}

impl Drop for Decoding<'_> {
    fn drop(&mut self) {
        self.metrics.decoding.fetch_sub(1, Ordering::Relaxed);
        self.metrics.decode.record(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_in_flight_counts_the_requests_still_in_flight_and_never_passes_the_peak() {
        // Three requests start (1, then 2, then 3 in flight as each starts); one ends before
        // the summary. The mean of what each start saw is 2; dividing by the requests ended
        // gave 6, twice the peak.
        let metrics = Metrics::new(8, None, 1);
        let first = metrics.fetch_started();
        let second = metrics.fetch_started();
        let third = metrics.fetch_started();
        drop(first);
        let summary = metrics.summary();
        assert_eq!(summary.peak_in_flight, 3);
        assert!(
            (summary.mean_in_flight - 2.0).abs() < 1e-9,
            "{}",
            summary.mean_in_flight
        );
        drop((second, third));
        assert!(metrics.summary().mean_in_flight <= metrics.summary().peak_in_flight as f64);
    }
}
