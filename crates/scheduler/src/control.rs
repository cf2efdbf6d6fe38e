//! The adaptive in-flight limit: a closed loop that sets how many requests are in flight
//! from what the engine measures, so no one has to guess rate x latency.
//!
//! It starts at 128. Every 50 ms tick the controller looks at what the engine saw since the
//! last one. Requests that waited for a slot while the CPU stage had room (its threads less
//! than 85% busy, smoothed over about four ticks, or nothing queued for them) mean the limit
//! holds the run back: it grows by the requests answered in the tick, which doubles it per
//! round trip as TCP's slow start does, and jumps (at most x4 a tick) to what Little's law
//! says keeps the CPU fed, the stage's capacity x the mean time a request holds its slot x
//! 1.5, when that is higher; past that figure it grows by a quarter as fast. Throttling
//! answers or rising errors cut it to 70%, at most once per round trip to the store (its
//! latency measured without the answers a cache gave) while they go on, and growth waits for
//! half a second of quiet; after a cut it grows by a quarter as fast, probing gently. A limit
//! used less than half for five seconds is lowered to twice the use, so memory follows the
//! need. It never leaves `[MIN_LIMIT, bound]`, the bound being the cap, the byte budget
//! over the mean request, and half the process's open-files limit: every request in flight
//! holds a socket, and past that limit connects fail with EMFILE (a default `ulimit -n` of
//! 1,024 is below what 500 ms of latency needs; the summary says so when it binds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::limit::LimitReason;
use crate::metrics::Metrics;
use crate::slots::Slots;
use crate::trace::Trace;

/// The limit a run starts with.
pub(crate) const START_LIMIT: usize = 128;
/// The lowest limit: a few requests always go on.
pub(crate) const MIN_LIMIT: usize = 4;
/// Ticks between two cuts at most: a cut waits for a round trip (the answers to requests
/// sent before it still arrive), estimated by Little's law, within 2 to 20 ticks.
const CUT_TICKS: (f64, f64) = (2.0, 20.0);
/// Ticks without throttling or errors before the limit grows again.
const QUIET_TICKS: u32 = 10;
/// Ticks of little use before the limit is lowered to the use.
const UNUSED_TICKS: u32 = 100;
/// Items waiting for a CPU thread, per thread, under which the CPU stage has room anyway.
const BACKLOG_PER_THREAD: usize = 2;
/// Requests in flight beyond what Little's law says feeds the CPU, for the spread of latency.
const HEADROOM: f64 = 1.5;
/// Smoothed busy share of the CPU threads over which more fetches would only queue.
const CPU_FULL: f64 = 0.85;
/// Weight of a tick in the smoothed CPU share, answers and latency (about four ticks of
/// memory): bursts of answers, which arrive a round trip after bursts of requests, must not
/// read as a full CPU.
const SMOOTHING: f64 = 0.25;

/// What the engine saw during one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Tick {
    /// Requests completed, answered or failed.
    pub(crate) completed: u64,
    /// Requests that found every slot taken and waited.
    pub(crate) waited: u64,
    /// Throttling answers, retried or not.
    pub(crate) throttled: u64,
    /// Retries of other failures, and requests that failed.
    pub(crate) errors: u64,
    /// Requests in flight at the tick's end.
    pub(crate) in_flight: usize,
    /// Fetched items waiting for a CPU thread at the tick's end.
    pub(crate) cpu_backlog: usize,
    /// Share of the CPU threads' time spent in the stage during the tick, in [0, 1].
    pub(crate) cpu_busy: f64,
    /// Requests the CPU stage could take per tick at full speed (its threads over its mean
    /// time per item, over the items per request); 0 while unknown.
    pub(crate) cpu_capacity: f64,
    /// Mean latency of the requests the store answered during the tick, in ticks; 0 if
    /// none was. A cache's answers are left out: they say nothing of the store.
    pub(crate) latency: f64,
    /// Mean time the requests answered during the tick held their slot, cache hits
    /// included, in ticks: what Little's law wants, as hits take slots too, if briefly.
    pub(crate) hold: f64,
    /// Bytes per request, on average so far (0 before the first answer).
    pub(crate) mean_bytes: u64,
}

/// The closed loop; pure state, driven by [`Controller::tick`].
#[derive(Debug)]
pub(crate) struct Controller {
    limit: usize,
    cap: usize,
    max_bytes: u64,
    cpu_threads: usize,
    slow_start: bool,
    /// Ticks since the last cut, and since the last throttling or error.
    since_cut: u32,
    quiet: u32,
    /// The CPU threads' busy share, requests completed per tick and their latency in
    /// ticks, smoothed.
    cpu_busy: f64,
    done: f64,
    latency: f64,
    hold: f64,
    unused: u32,
    used: usize,
    /// Half the process's open-files limit, when it has one.
    open_files: Option<usize>,
}

impl Controller {
    /// A loop under `cap` requests and `max_bytes` of fetched bytes, before `cpu_threads`.
    pub(crate) fn new(cap: usize, max_bytes: u64, cpu_threads: usize) -> Self {
        Self {
            limit: start_limit(cap, None),
            cap: cap.max(1),
            max_bytes,
            cpu_threads: cpu_threads.max(1),
            slow_start: true,
            since_cut: u32::MAX,
            quiet: QUIET_TICKS,
            cpu_busy: 0.0,
            done: 0.0,
            latency: 0.0,
            hold: 0.0,
            unused: 0,
            used: 0,
            open_files: None,
        }
    }

    /// Also never above `limit` requests, for the open files they hold (see
    /// [`open_files_bound`]).
    pub(crate) fn with_open_files(mut self, limit: Option<usize>) -> Self {
        self.open_files = limit.map(|limit| limit.max(MIN_LIMIT));
        self.limit = start_limit(self.cap, limit);
        self
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The highest limit allowed now, and what sets it: the cap, the byte budget over the
    /// mean request, or the open files.
    fn bound(&self, mean_bytes: u64) -> (usize, LimitReason) {
        let by_bytes = match mean_bytes {
            0 => usize::MAX,
            mean => usize::try_from(self.max_bytes / mean).unwrap_or(usize::MAX),
        };
        let bound = self.cap.min(by_bytes).max(MIN_LIMIT.min(self.cap));
        match self.open_files {
            Some(files) if files < bound => (files, LimitReason::OpenFiles),
            _ => (bound, LimitReason::Bound),
        }
    }

    /// Take one tick's observations; the new limit and why, if it changed.
    pub(crate) fn tick(&mut self, t: Tick) -> Option<(usize, LimitReason)> {
        let (bound, bound_reason) = self.bound(t.mean_bytes);
        self.cpu_busy += SMOOTHING * (t.cpu_busy.clamp(0.0, 1.0) - self.cpu_busy);
        self.since_cut = self.since_cut.saturating_add(1);
        self.done += SMOOTHING * (t.completed as f64 - self.done);
        smooth(&mut self.latency, t.latency);
        smooth(&mut self.hold, t.hold);
        let erring = t.completed >= 20 && t.errors * 20 > t.completed;
        if t.throttled > 0 || erring {
            self.quiet = 0;
            self.slow_start = false;
            // The answers to requests sent before a cut still arrive for a round trip to the
            // store: cut again only if the trouble outlasts that. Before the store's latency
            // is known, Little's law on what is in flight estimates it.
            let round_trip = if self.latency > 0.0 {
                self.latency
            } else {
                t.in_flight as f64 / self.done.max(1e-3)
            }
            .clamp(CUT_TICKS.0, CUT_TICKS.1);
            if f64::from(self.since_cut) < round_trip {
                return None;
            }
            self.since_cut = 0;
            let reason = if t.throttled > 0 {
                LimitReason::Throttled
            } else {
                LimitReason::Errors
            };
            return self.set((self.limit * 7 / 10).min(bound), reason);
        }
        self.quiet = self.quiet.saturating_add(1);
        if self.limit > bound {
            return self.set(bound, bound_reason);
        }
        let cpu_has_room =
            self.cpu_busy < CPU_FULL || t.cpu_backlog < BACKLOG_PER_THREAD * self.cpu_threads;
        if t.waited > 0 && cpu_has_room {
            self.unused = 0;
            if self.limit >= bound || self.quiet < QUIET_TICKS {
                return None;
            }
            let done = usize::try_from(t.completed)
                .unwrap_or(usize::MAX)
                .min(self.limit);
            // Little's law on what was measured: the CPU's rate times the time a request
            // holds its slot is what keeps it fed. Below that, straight there (at most x4 a tick) rather than by
            // doublings, which at 500 ms take seconds; above it, only gently, as after a cut.
            let needed = (t.cpu_capacity > 0.0 && self.hold > 0.0)
                .then_some((HEADROOM * t.cpu_capacity * self.hold) as usize);
            let fast = self.slow_start && needed.is_none_or(|n| self.limit < n);
            let step = if fast { done } else { done / 4 }.max(1);
            let mut next = self.limit.saturating_add(step);
            if let Some(needed) = needed.filter(|_| self.slow_start) {
                next = next.max(needed.min(self.limit.saturating_mul(4)));
            }
            return if next >= bound {
                self.set(bound, bound_reason)
            } else {
                self.set(next, LimitReason::Starved)
            };
        }
        if t.in_flight * 2 < self.limit && self.limit > START_LIMIT {
            self.used = if self.unused == 0 {
                t.in_flight
            } else {
                self.used.max(t.in_flight)
            };
            self.unused += 1;
            if self.unused >= UNUSED_TICKS {
                self.unused = 0;
                let lowered = (2 * self.used).max(START_LIMIT);
                return self.set(lowered, LimitReason::Unused);
            }
        } else {
            self.unused = 0;
        }
        None
    }

    fn set(&mut self, limit: usize, reason: LimitReason) -> Option<(usize, LimitReason)> {
        let limit = limit.max(MIN_LIMIT.min(self.cap));
        if limit == self.limit {
            return None;
        }
        self.limit = limit;
        Some((limit, reason))
    }
}

/// How often the loop looks: a few times per round trip of a remote store.
const TICK: Duration = Duration::from_millis(50);

/// Fold a tick's mean into a smoothed one; a tick without answers (0) leaves it.
fn smooth(smoothed: &mut f64, tick: f64) {
    if tick > 0.0 {
        *smoothed = if *smoothed == 0.0 {
            tick
        } else {
            *smoothed + SMOOTHING * (tick - *smoothed)
        };
    }
}

/// The limit a run starts with: [`START_LIMIT`], under the cap and the open-files bound.
/// The strategy sizes the slots and the item window with it, the controller starts from it.
pub(crate) fn start_limit(cap: usize, open_files: Option<usize>) -> usize {
    let files = open_files.map_or(usize::MAX, |files| files.max(MIN_LIMIT));
    START_LIMIT.min(cap).min(files).max(1)
}

/// Half this process's soft limit of open files (`ulimit -n`): the most requests the
/// adaptive limit lets fly, the rest being the process's own (the training framework, the
/// cache's files, a Python interpreter). `None` where there is no finite limit.
pub(crate) fn open_files_bound() -> Option<usize> {
    loader_storage::open_files_limit().map(|soft| usize::try_from(soft / 2).unwrap_or(usize::MAX))
}

/// Counters the loop takes differences of.
#[derive(Clone, Copy)]
struct Seen {
    done: u64,
    waited: u64,
    throttled: u64,
    errors: u64,
    cpu_us: u64,
    cpu_runs: u64,
    fetch_us: (u64, u64),
    cached_us: (u64, u64),
    at: Instant,
}

impl Seen {
    fn read(slots: &Slots, metrics: &Metrics) -> Self {
        Self {
            done: metrics.fetches_done(),
            waited: slots.waited(),
            throttled: metrics.throttled(),
            errors: metrics.store_errors(),
            cpu_us: metrics.cpu_time_us(),
            cpu_runs: metrics.cpu_runs(),
            fetch_us: metrics.fetch_time_us(),
            cached_us: metrics.cached_time_us(),
            at: Instant::now(),
        }
    }
}

/// The loop, on the engine's runtime until the engine is dropped: every tick, what the
/// engine saw goes to the controller, and its limit to the slots, the item window (which
/// follows the limit, so items admitted ahead of the CPU shrink with it), the metrics and
/// the trace.
pub(crate) async fn run(
    mut controller: Controller,
    slots: Arc<Slots>,
    window: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    trace: Option<Arc<Trace>>,
    cpu_threads: usize,
) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Seen::read(&slots, &metrics);
    // The window's share of the limit, and the permits still to take back from it: they
    // travel with batches, so a lowering is collected as they return.
    let mut window_share = controller.limit();
    let mut window_owed = 0usize;
    if let Some(trace) = &trace {
        trace.limit(controller.limit());
    }
    loop {
        interval.tick().await;
        let now = Seen::read(&slots, &metrics);
        // The CPU threads' time in the tick, for their busy share.
        let thread_us = now.at.saturating_duration_since(last.at).as_secs_f64()
            * 1e6
            * cpu_threads.max(1) as f64;
        let tick_us = TICK.as_secs_f64() * 1e6;
        // The stage's mean time per item so far, and the items each request feeds.
        let stage_us = now.cpu_us as f64 / now.cpu_runs.max(1) as f64;
        let items_per_request = now.cpu_runs as f64 / now.done.max(1) as f64;
        let capacity = if now.cpu_runs == 0 {
            0.0
        } else {
            tick_us * cpu_threads.max(1) as f64 / stage_us.max(1.0) / items_per_request.max(1e-3)
        };
        // Mean time per request over the tick, in ticks, of (time, count) running totals.
        let mean = |now: (u64, u64), last: (u64, u64)| match now.1.saturating_sub(last.1) {
            0 => (0.0, 0),
            n => (now.0.saturating_sub(last.0) as f64 / n as f64 / tick_us, n),
        };
        let (latency, by_store) = mean(now.fetch_us, last.fetch_us);
        let (hit, by_cache) = mean(now.cached_us, last.cached_us);
        let hold = match by_store + by_cache {
            0 => 0.0,
            n => (latency * by_store as f64 + hit * by_cache as f64) / n as f64,
        };
        let tick = Tick {
            completed: now.done.saturating_sub(last.done),
            waited: now.waited.saturating_sub(last.waited),
            throttled: now.throttled.saturating_sub(last.throttled),
            errors: now.errors.saturating_sub(last.errors),
            in_flight: metrics.in_flight(),
            cpu_backlog: metrics.awaiting_cpu(),
            cpu_busy: now.cpu_us.saturating_sub(last.cpu_us) as f64 / thread_us.max(1.0),
            cpu_capacity: capacity,
            latency,
            hold,
            mean_bytes: metrics.bytes_fetched().checked_div(now.done).unwrap_or(0),
        };
        last = now;
        if window_owed > 0 {
            window_owed -= window.forget_permits(window_owed);
        }
        if let Some((limit, reason)) = controller.tick(tick) {
            slots.resize(limit);
            if limit > window_share {
                let grow = limit - window_share;
                let paid = grow.min(window_owed);
                window_owed -= paid;
                window.add_permits(grow - paid);
            } else {
                let shrink = window_share - limit;
                window_owed += shrink - window.forget_permits(shrink);
            }
            window_share = limit;
            metrics.limit_set(limit, reason);
            if let Some(trace) = &trace {
                trace.limit(limit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with a round trip of `rtt` ticks (a third of the answers a tick early, a
    /// third a tick late), before a CPU stage that takes at most `cpu_rate` items per tick,
    /// and optionally throttling above `throttle_at` requests per tick (a bucket of two
    /// ticks' worth): the loop's view of a run, one tick at a time, without a clock.
    struct Sim {
        rtt: usize,
        cpu_rate: u64,
        throttle_at: Option<u64>,
        tokens: u64,
        /// Answers due in 0, 1, 2, ... ticks.
        due: std::collections::VecDeque<u64>,
        backlog: u64,
    }

    impl Sim {
        fn new(rtt: usize, cpu_rate: u64) -> Self {
            Self {
                rtt: rtt.max(2),
                cpu_rate,
                throttle_at: None,
                tokens: 0,
                due: std::collections::VecDeque::new(),
                backlog: 0,
            }
        }

        /// One tick at `limit`: the items the CPU took, and what the controller sees.
        fn step(&mut self, limit: usize) -> (u64, Tick) {
            let completed = self.due.pop_front().unwrap_or(0);
            let in_flight: u64 = self.due.iter().sum();
            let throttled = match self.throttle_at {
                Some(rate) => {
                    self.tokens = (self.tokens + rate).min(2 * rate);
                    let passed = completed.min(self.tokens);
                    self.tokens -= passed;
                    completed - passed
                }
                None => 0,
            };
            self.backlog += completed - throttled;
            let taken = self.backlog.min(self.cpu_rate);
            self.backlog -= taken;
            // Items admitted (in flight or waiting for the CPU) are bounded by a window of a
            // few ticks of CPU work beyond the limit, as the engine's item window is.
            let room = (4 * self.cpu_rate + limit as u64).saturating_sub(in_flight + self.backlog);
            let free = (limit as u64).saturating_sub(in_flight);
            let send = free.min(room);
            if self.due.len() < self.rtt + 1 {
                self.due.resize(self.rtt + 1, 0);
            }
            let third = send / 3;
            self.due[self.rtt - 2] += third;
            self.due[self.rtt - 1] += third;
            self.due[self.rtt] += send - 2 * third;
            let tick = Tick {
                completed,
                waited: u64::from(room > free),
                throttled,
                errors: 0,
                in_flight: (in_flight + send) as usize,
                cpu_backlog: self.backlog as usize,
                cpu_busy: taken as f64 / self.cpu_rate as f64,
                cpu_capacity: self.cpu_rate as f64,
                latency: if completed > 0 { self.rtt as f64 } else { 0.0 },
                hold: if completed > 0 { self.rtt as f64 } else { 0.0 },
                mean_bytes: 100_000,
            };
            (taken, tick)
        }
    }

    fn run(sim: &mut Sim, c: &mut Controller, ticks: usize) -> Vec<(usize, u64)> {
        (0..ticks)
            .map(|_| {
                let (taken, tick) = sim.step(c.limit());
                c.tick(tick);
                (c.limit(), taken)
            })
            .collect()
    }

    #[test]
    fn grows_until_the_cpu_is_fed_and_stays_there() {
        // 10 ticks of latency, 200 items per tick of CPU: about 2,000 in flight feed it.
        let mut sim = Sim::new(10, 200);
        let mut c = Controller::new(100_000, 1 << 40, 8);
        let trace = run(&mut sim, &mut c, 800);
        // Slow start overshoots (the CPU's answer comes a round trip late); the unused
        // share is given back, down to about twice the use.
        let (limit, _) = trace[799];
        assert!((2_000..=5_000).contains(&limit), "limit {limit}");
        let fed = trace[600..]
            .iter()
            .filter(|(_, taken)| *taken == 200)
            .count();
        assert!(fed >= 190, "the CPU was fed in {fed} of the last 200 ticks");
        let band = trace[600..].iter().map(|(l, _)| *l);
        let (lo, hi) = (band.clone().min().unwrap_or(0), band.max().unwrap_or(0));
        assert!(hi <= lo * 11 / 10, "no oscillation beyond 10%: {lo}..{hi}");
    }

    #[test]
    fn start_up_takes_a_few_round_trips() {
        let mut sim = Sim::new(10, 1_000);
        let mut c = Controller::new(100_000, 1 << 40, 8);
        let trace = run(&mut sim, &mut c, 200);
        // 10,000 needed from 128: about 6 doublings of 10 ticks each.
        let reached = trace.iter().position(|(l, _)| *l >= 10_000);
        assert!(reached.is_some_and(|t| t <= 120), "reached at {reached:?}");
    }

    #[test]
    fn follows_a_jump_in_latency() {
        let mut sim = Sim::new(2, 500);
        let mut c = Controller::new(100_000, 1 << 40, 8);
        let before = run(&mut sim, &mut c, 200);
        assert!(before[199].0 <= 5_000, "{}", before[199].0);
        sim.rtt = 20; // ten times the latency
        let after = run(&mut sim, &mut c, 300);
        let recovered = after.iter().position(|(l, _)| *l >= 10_000);
        assert!(
            recovered.is_some_and(|t| t <= 100),
            "recovered at {recovered:?}"
        );
    }

    #[test]
    fn never_passes_the_cap_or_the_byte_budget() {
        let mut sim = Sim::new(10, 10_000);
        let mut capped = Controller::new(500, 1 << 40, 8);
        assert!(
            run(&mut sim, &mut capped, 300)
                .iter()
                .all(|(l, _)| *l <= 500)
        );
        let mut sim = Sim::new(10, 10_000);
        // 100 MB over 100 KB requests: 1,000.
        let mut by_bytes = Controller::new(100_000, 100_000_000, 8);
        let trace = run(&mut sim, &mut by_bytes, 300);
        assert!(trace.iter().all(|(l, _)| *l <= 1_000));
        assert_eq!(trace[299].0, 1_000);
    }

    #[test]
    fn never_passes_half_the_open_files_limit_and_says_so() {
        // 10 ticks of latency and a CPU that would take 10,000 in flight; a process allowed
        // 1,024 open files (a common default) gets 512 requests at most, and the reason.
        let mut sim = Sim::new(10, 1_000);
        let mut c = Controller::new(100_000, 1 << 40, 8).with_open_files(Some(512));
        let mut reasons = Vec::new();
        for _ in 0..300 {
            let (_, tick) = sim.step(c.limit());
            if let Some((_, reason)) = c.tick(tick) {
                reasons.push(reason);
            }
            assert!(c.limit() <= 512, "limit {}", c.limit());
        }
        assert_eq!(c.limit(), 512);
        assert_eq!(reasons.last(), Some(&LimitReason::OpenFiles));
        // A limit under the start is honoured from the start.
        assert_eq!(
            Controller::new(100_000, 1 << 40, 8)
                .with_open_files(Some(50))
                .limit(),
            50
        );
    }

    #[test]
    fn backs_off_under_throttling_and_holds_a_band_below_it() {
        // The store takes 300 requests per tick; 10 ticks of latency: 3,000 in flight is
        // its limit, and the CPU would take far more.
        let mut sim = Sim::new(10, 10_000);
        sim.throttle_at = Some(300);
        let mut c = Controller::new(100_000, 1 << 40, 8);
        let trace = run(&mut sim, &mut c, 2_000);
        let late = trace[1_000..].iter().map(|(l, _)| *l);
        let (lo, hi) = (late.clone().min().unwrap_or(0), late.max().unwrap_or(0));
        // Between 40% and 120% of what the store takes (3,000 in flight).
        assert!(lo >= 1_200 && hi <= 3_600, "band {lo}..{hi}");
        let fed: u64 = trace[1_000..].iter().map(|(_, t)| *t).sum();
        assert!(fed >= 1_000 * 300 * 6 / 10, "{fed} items in 1,000 ticks");
    }

    #[test]
    fn lowers_an_unused_limit() {
        let mut sim = Sim::new(10, 1_000);
        let mut c = Controller::new(100_000, 1 << 40, 8);
        run(&mut sim, &mut c, 200);
        let high = c.limit();
        sim.cpu_rate = 50; // the consumer slows down
        let trace = run(&mut sim, &mut c, 600);
        assert!(trace[599].0 < high / 4, "{} from {high}", trace[599].0);
        assert!(
            trace[599].0 >= 500,
            "still enough for 50 x 10: {}",
            trace[599].0
        );
    }

    #[test]
    fn a_caches_quick_answers_do_not_hasten_the_next_cut() {
        // The store's round trip is 10 ticks, but most answers are a cache's, within the
        // tick: counted with them, the round trip would look like the shortest allowed.
        let mut c = Controller::new(100_000, 1 << 40, 8);
        let tick = Tick {
            completed: 1_000,
            throttled: 5,
            in_flight: 200,
            cpu_busy: 0.5,
            cpu_capacity: 1_000.0,
            latency: 10.0,
            hold: 1.0,
            mean_bytes: 1_000,
            ..Tick::default()
        };
        let cuts = (0..10).filter(|_| c.tick(tick).is_some()).count();
        assert_eq!(cuts, 1, "one cut per round trip of the store");
        assert_eq!(c.limit(), START_LIMIT * 7 / 10);
    }
}
