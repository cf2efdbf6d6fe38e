//! Per-stage timings and gauges, and a summary that names the bottleneck.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use loader_storage::ErrorKind;
use loader_storage::tally::RequestTally;

use crate::control::LimitReason;

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
    pub(crate) tally: std::sync::Arc<RequestTally>,
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

/// Timings of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageSummary {
    /// Events timed.
    pub count: u64,
    /// Their total time.
    pub total: Duration,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Longest.
    pub max: Duration,
}

/// A point-in-time report of an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Time since the engine started.
    pub elapsed: Duration,
    /// Items fetched and processed (loaded or skipped), including those of batches still
    /// waiting for the consumer, which may belong to the next epoch.
    pub items: u64,
    /// Items of the batches the consumer took.
    pub delivered: u64,
    /// Items that failed.
    pub failures: u64,
    /// Bytes fetched.
    pub bytes: u64,
    /// Latency of the requests the store answered (or failed).
    pub fetch: StageSummary,
    /// Requests a cache layer answered without asking the store, and their latency.
    pub cached: StageSummary,
    /// CPU stage time per item.
    pub decode: StageSummary,
    /// How long finished batches waited in the ready queue for the consumer.
    pub queue_wait: StageSummary,
    /// How long the consumer waited for each batch.
    pub consumer_wait: StageSummary,
    /// Mean requests in flight seen by a starting fetch.
    pub mean_in_flight: f64,
    /// Most requests in flight at once.
    pub peak_in_flight: usize,
    /// The fetch concurrency limit: fixed, or the adaptive limit's cap.
    pub max_in_flight: usize,
    /// The in-flight limit now (equal to `max_in_flight` when fixed).
    pub in_flight_limit: usize,
    /// Whether the engine sets the in-flight limit itself (`Fetch::Adaptive`).
    pub adaptive: bool,
    /// Why the limit last changed.
    pub limit_reason: LimitReason,
    /// How often the limit changed.
    pub limit_changes: u64,
    /// The highest the limit was.
    pub limit_peak: usize,
    /// Throttling answers (429, 503 SlowDown), retried by a layer or not.
    pub throttled: u64,
    /// Attempts a retry layer repeated for other failures.
    pub retried: u64,
    /// Requests sent again because they were slow (`Config::hedge`).
    pub hedges_sent: u64,
    /// Hedges whose answer came first.
    pub hedges_won: u64,
    /// Of the hedges, those sent because the request had stalled (many times the p99),
    /// outside the budget.
    pub stalls_hedged: u64,
    /// Threads doing CPU work.
    pub cpu_threads: usize,
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
            tally: std::sync::Arc::default(),
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

    /// Requests ended so far.
    pub(crate) fn fetches_done(&self) -> u64 {
        self.fetches_done.load(Ordering::Relaxed)
    }

    /// Throttling answers so far: retried by a layer, or the request's last.
    pub(crate) fn throttled(&self) -> u64 {
        self.tally.throttled() + self.throttled_last.load(Ordering::Relaxed)
    }

    /// The store's failures so far: attempts retried, and requests failed with a retryable
    /// kind of error.
    pub(crate) fn store_errors(&self) -> u64 {
        self.tally.retried() + self.fetch_errors.load(Ordering::Relaxed)
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
            mean_in_flight: match fetch.count + cached.count {
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
            retried: self.tally.retried(),
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

impl Summary {
    /// Items per second over the engine's life.
    pub fn items_per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Fraction of the CPU threads' time spent in the CPU stage.
    pub fn cpu_busy(&self) -> f64 {
        self.decode.total.as_secs_f64()
            / (self.elapsed.as_secs_f64() * self.cpu_threads.max(1) as f64).max(1e-9)
    }

    /// One line naming the stage that limits throughput, from the measurements.
    pub fn bottleneck(&self) -> String {
        let busy = self.cpu_busy();
        // The loader limits the run only if the consumer waits for it: when batches waited
        // in the queue longer in all than the consumer waited for batches, and the consumer
        // spent little of the run waiting, the consumer sets the pace, whatever the stages'
        // own numbers (a quiet loader's in-flight requests look like a saturated limit).
        let consumer_waited = self.consumer_wait.total.as_secs_f64();
        if self.consumer_wait.count > 0
            && self.queue_wait.total.as_secs_f64() > consumer_waited
            && consumer_waited < 0.1 * self.elapsed.as_secs_f64()
        {
            return format!(
                "bottleneck: the consumer — batches waited {:.1} s in all in the queue (p50 {:.1} ms) while the consumer waited {:.2} s in all; the loader keeps up",
                self.queue_wait.total.as_secs_f64(),
                ms(self.queue_wait.p50),
                consumer_waited
            );
        }
        if busy > 0.85 {
            return format!(
                "bottleneck: CPU — the {} CPU threads are {:.0}% busy decoding ({:.2} ms per item); add threads or cores",
                self.cpu_threads,
                busy * 100.0,
                ms(self.decode.total) / self.decode.count.max(1) as f64
            );
        }
        if self.in_flight_limit > 0 && self.mean_in_flight >= 0.8 * self.in_flight_limit as f64 {
            let advice = match (self.adaptive, self.throttled > 0) {
                (true, true) => format!(
                    "the store throttled {} times; the adaptive limit ({}) backs off",
                    self.throttled, self.limit_reason
                ),
                (true, false) if self.in_flight_limit >= self.max_in_flight => {
                    "the adaptive limit is at its cap; raise the cap".to_string()
                }
                (true, false) if self.limit_reason == LimitReason::OpenFiles => {
                    format!("the adaptive limit is held {}", self.limit_reason)
                }
                (true, false) => format!("the adaptive limit is growing ({})", self.limit_reason),
                (false, _) => "raise the in-flight limit".to_string(),
            };
            return format!(
                "bottleneck: storage — {:.0} requests in flight on average (limit {}) at p50 {:.1} ms; {advice}",
                self.mean_in_flight,
                self.in_flight_limit,
                ms(self.fetch.p50)
            );
        }
        if self.fetch.p50 > Duration::from_millis(5) {
            return format!(
                "bottleneck: storage latency — p50 {:.1} ms, p99 {:.1} ms per fetch, {:.0} in flight on average, CPU {:.0}% busy",
                ms(self.fetch.p50),
                ms(self.fetch.p99),
                self.mean_in_flight,
                busy * 100.0
            );
        }
        format!(
            "bottleneck: the engine's coordination — fast fetches (p50 {:.2} ms) and idle CPU threads ({:.0}% busy): per-item overhead dominates",
            ms(self.fetch.p50),
            busy * 100.0
        )
    }
}

/// User + system CPU time of this whole process so far (Linux; `None` elsewhere): CPU
/// per image is what decides throughput on a few shared cores, so reports show it.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces;
    // utime and stime are the 12th and 13th of them, in clock ticks (100 per second).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} items delivered, {} more processed ahead ({} failed) in {:.1} s: {:.0} items/s, \
             {:.1} MB/s",
            self.delivered,
            self.items.saturating_sub(self.delivered),
            self.failures,
            self.elapsed.as_secs_f64(),
            self.items_per_sec(),
            self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
        )?;
        let stage = |f: &mut fmt::Formatter<'_>, name: &str, s: &StageSummary| {
            writeln!(
                f,
                "  {name:<14} p50 {:>8.2} ms  p90 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  (n={})",
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max),
                s.count
            )
        };
        stage(f, "fetch", &self.fetch)?;
        if self.cached.count > 0 {
            stage(f, "cache hit", &self.cached)?;
        }
        stage(f, "decode", &self.decode)?;
        stage(f, "queue wait", &self.queue_wait)?;
        stage(f, "consumer wait", &self.consumer_wait)?;
        let limit = if self.adaptive {
            format!(
                "limit {} (adaptive, cap {}; {} changes, last: {})",
                self.in_flight_limit, self.max_in_flight, self.limit_changes, self.limit_reason
            )
        } else {
            format!("limit {}", self.max_in_flight)
        };
        writeln!(
            f,
            "  in flight: mean {:.1}, peak {}, {limit}; CPU threads {} ({:.0}% busy)",
            self.mean_in_flight,
            self.peak_in_flight,
            self.cpu_threads,
            self.cpu_busy() * 100.0
        )?;
        if self.hedges_sent > 0 {
            writeln!(
                f,
                "  hedged: {} requests sent again ({:.1}% of fetches; {} of them stalled), {} \
                 answered first",
                self.hedges_sent,
                100.0 * self.hedges_sent as f64 / self.fetch.count.max(1) as f64,
                self.stalls_hedged,
                self.hedges_won
            )?;
        }
        if self.throttled + self.retried > 0 {
            writeln!(
                f,
                "  store trouble: {} throttling answers, {} other retries",
                self.throttled, self.retried
            )?;
        }
        write!(f, "{}", self.bottleneck())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        let stage = |ms: u64, n: u64| StageSummary {
            count: n,
            total: Duration::from_millis(ms * n),
            p50: Duration::from_millis(ms),
            p90: Duration::from_millis(ms),
            p99: Duration::from_millis(ms),
            max: Duration::from_millis(ms),
        };
        Summary {
            elapsed: Duration::from_secs(10),
            items: 1000,
            delivered: 1000,
            failures: 0,
            bytes: 100_000_000,
            fetch: stage(50, 1000),
            cached: stage(0, 0),
            decode: stage(4, 1000),
            queue_wait: stage(0, 16),
            consumer_wait: stage(30, 16),
            mean_in_flight: 10.0,
            peak_in_flight: 20,
            max_in_flight: 128,
            in_flight_limit: 128,
            adaptive: false,
            limit_reason: LimitReason::Start,
            limit_changes: 0,
            limit_peak: 128,
            throttled: 0,
            retried: 0,
            hedges_sent: 0,
            hedges_won: 0,
            stalls_hedged: 0,
            cpu_threads: 2,
        }
    }

    #[test]
    fn names_the_stage_the_numbers_point_at() {
        // 1000 items x 4 ms over 10 s on 2 threads: 20% busy, fetches at 50 ms.
        assert!(
            summary().bottleneck().contains("storage latency"),
            "{}",
            summary().bottleneck()
        );
        let cpu = Summary {
            decode: StageSummary {
                total: Duration::from_secs(19),
                ..summary().decode
            },
            ..summary()
        };
        assert!(cpu.bottleneck().contains("CPU"), "{}", cpu.bottleneck());
        let limit = Summary {
            mean_in_flight: 120.0,
            ..summary()
        };
        assert!(
            limit.bottleneck().contains("raise the in-flight limit"),
            "{}",
            limit.bottleneck()
        );
        let consumer = Summary {
            consumer_wait: StageSummary {
                p50: Duration::ZERO,
                total: Duration::from_millis(30),
                ..summary().consumer_wait
            },
            queue_wait: StageSummary {
                p50: Duration::from_millis(80),
                total: Duration::from_millis(1280),
                ..summary().queue_wait
            },
            ..summary()
        };
        assert!(
            consumer.bottleneck().contains("the consumer"),
            "{}",
            consumer.bottleneck()
        );
        // Issue 25, defect 10: batches waited 34 s in the queue for a slow consumer, whose
        // few waits were over 1 ms each, while the idle loader's requests sat at the limit:
        // this was called "storage".
        let slow_consumer = Summary {
            elapsed: Duration::from_secs(40),
            consumer_wait: StageSummary {
                p50: Duration::from_millis(2),
                total: Duration::from_millis(150),
                ..summary().consumer_wait
            },
            queue_wait: StageSummary {
                p50: Duration::from_secs(2),
                total: Duration::from_secs(34),
                ..summary().queue_wait
            },
            mean_in_flight: 120.0,
            ..summary()
        };
        assert!(
            slow_consumer.bottleneck().contains("the consumer"),
            "{}",
            slow_consumer.bottleneck()
        );
        let fast = Summary {
            fetch: StageSummary {
                p50: Duration::from_micros(50),
                ..summary().fetch
            },
            ..summary()
        };
        assert!(
            fast.bottleneck().contains("coordination"),
            "{}",
            fast.bottleneck()
        );
    }
}

#[cfg(test)]
mod cpu_tests {
    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = super::process_cpu_time().expect("Linux /proc");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(150) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = super::process_cpu_time().expect("Linux /proc");
        assert!(after > before, "{before:?} -> {after:?}");
    }
}
