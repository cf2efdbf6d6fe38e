//! Hedged requests: a request slower than a high quantile of recent latencies is sent
//! again, and the first answer wins. With exact ordering one slow GET holds up its whole
//! batch, so the tail of the latency distribution, not its median, sets the wait.
//!
//! Hedges draw on a budget that every first request adds to and every retry the store's
//! layers report takes from, so hedges and retries together stay within it.
//!
//! A **stall** is not tail: a request unanswered after many times the recent 99th
//! percentile (a response black-holed by the network, a dead connection) is sent again
//! whatever the budget's state, and also before the quantile is known, so it costs about
//! that long instead of the attempt timeout. A request goes out at most three times (a
//! hedge, then one more if both stall), not while the store throttles (a request backing
//! off after 503 SlowDown is not lost), and stall hedges in flight are bounded.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use loader_storage::Error;

use crate::metrics::{InFlight, Metrics};

/// When to send a request again, and how many extra requests that may cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hedge {
    /// A request still unanswered after this quantile of recent latencies is sent again.
    pub quantile: f64,
    /// Extra requests (hedges and retries) at most, as a share of the first requests.
    pub budget: f64,
    /// Never hedge sooner than this after the first request.
    pub min_delay: Duration,
    /// A request unanswered after this many times the recent 99th percentile is a stall,
    /// sent again outside the budget (0: never).
    pub stall_factor: f64,
    /// A request is never a stall sooner than this; until 16 latencies are known, a
    /// request is a stall after `stall_factor` times this.
    pub min_stall: Duration,
}

impl Default for Hedge {
    /// The 95th percentile, at most 5% extra requests, no sooner than 1 ms; stalls after
    /// 8 times the p99, and never sooner than 1 s.
    fn default() -> Self {
        Self {
            quantile: 0.95,
            budget: 0.05,
            min_delay: Duration::from_millis(1),
            stall_factor: 8.0,
            min_stall: Duration::from_secs(1),
        }
    }
}

impl Hedge {
    /// Refuse settings that would hedge everything at once or overflow a duration.
    pub fn validate(&self) -> Result<(), String> {
        let share = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        if !share(self.quantile) {
            return Err(format!("quantile {} is not between 0 and 1", self.quantile));
        }
        if !share(self.budget) {
            return Err(format!("budget {} is not between 0 and 1", self.budget));
        }
        if !(self.stall_factor.is_finite() && (0.0..=1000.0).contains(&self.stall_factor)) {
            return Err(format!(
                "stall_factor {} is not between 0 (off) and 1000",
                self.stall_factor
            ));
        }
        if self.stall_factor > 0.0 && self.min_stall < Duration::from_millis(10) {
            return Err(format!(
                "min_stall {:?} is under 10 ms: every request would be sent again at once",
                self.min_stall
            ));
        }
        if self.min_stall > Duration::from_secs(3600) || self.min_delay > Duration::from_secs(3600)
        {
            return Err("min_stall and min_delay must be under an hour".into());
        }
        Ok(())
    }

    /// Stalls only: no request is sent again for being in the tail, only a stalled one
    /// ([`Hedge::stall_factor`]), once per stall (twice if the first repeat stalls too). The engine's default: it costs a request
    /// per lost response and rescues each from the attempt timeout (an epoch of 2,000
    /// objects with 2% of responses black-holed: 3 s instead of 90, docs/benchmarks.md).
    pub fn stalls_only() -> Self {
        Self {
            budget: 0.0,
            ..Self::default()
        }
    }
}

/// Latencies kept for the quantile.
const WINDOW: usize = 1024;
/// Latencies seen before the first hedge: a quantile of fewer says little.
const MIN_SEEN: usize = 64;
/// Latencies seen before the stall threshold follows them: a stall is many times their
/// 99th percentile, so a rough one will do.
const MIN_SEEN_STALL: usize = 16;
/// The quantile is recomputed after this many new latencies.
const RECOMPUTE: usize = 64;
/// The budget counts thousandths of a request, so shares add up exactly.
const MILLI: u64 = 1000;
/// Budget saved at most, in requests: a quiet hour must not buy a burst of hedges.
const MAX_SAVED: u64 = 100 * MILLI;

/// The hedging state of one engine.
#[derive(Debug)]
pub(crate) struct Hedger {
    config: Hedge,
    recent: Mutex<Recent>,
    /// The current delay before a hedge, in microseconds; 0 while too few are seen.
    after_us: AtomicU64,
    /// The recent 99th percentile, in microseconds; 0 while too few are seen.
    p99_us: AtomicU64,
    budget: Mutex<Budget>,
}

#[derive(Debug, Default)]
struct Recent {
    latencies: VecDeque<u32>,
    since: usize,
}

#[derive(Debug, Default)]
struct Budget {
    saved: u64,
    /// Retries the store's layers reported so far, already charged.
    retries_charged: u64,
}

impl Hedger {
    pub(crate) fn new(config: Hedge) -> Self {
        Self {
            config,
            recent: Mutex::default(),
            after_us: AtomicU64::new(0),
            p99_us: AtomicU64::new(0),
            budget: Mutex::default(),
        }
    }

    /// How long to wait for an answer before hedging; `None` until enough is known.
    pub(crate) fn delay(&self) -> Option<Duration> {
        match self.after_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us).max(self.config.min_delay)),
        }
    }

    /// How long a request may go unanswered before it is a stall, sent again outside the
    /// budget; `None` when stalls are not rescued.
    pub(crate) fn stall_after(&self) -> Option<Duration> {
        let factor = self.config.stall_factor;
        if !(factor.is_finite() && factor > 0.0) {
            return None;
        }
        let base = match self.p99_us.load(Ordering::Relaxed) {
            0 => self.config.min_stall,
            us => Duration::from_micros(us),
        };
        Some(base.mul_f64(factor).max(self.config.min_stall))
    }

    /// How long a stall that may not be sent again now (the store throttles, or enough
    /// hedges are out) waits before it is looked at again.
    pub(crate) fn pause(&self) -> Duration {
        self.config.min_stall.max(Duration::from_millis(10))
    }

    /// How long a request waiting for its stall threshold sleeps before looking at it again:
    /// the threshold while it is known (it moves slowly), `min_stall` while it is a guess.
    pub(crate) fn recheck(&self) -> Duration {
        match self.p99_us.load(Ordering::Relaxed) {
            0 => self.config.min_stall.max(Duration::from_millis(10)),
            _ => Duration::MAX,
        }
    }

    /// A first request was sent: it adds its share to the budget.
    pub(crate) fn sent(&self) {
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        let share = (self.config.budget.clamp(0.0, 1.0) * MILLI as f64).round() as u64;
        budget.saved = (budget.saved + share).min(MAX_SAVED);
    }

    /// Take one extra request from the budget, after charging the `retries` reported so far;
    /// false if it is spent.
    pub(crate) fn spend(&self, retries: u64) -> bool {
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        let new = retries.saturating_sub(budget.retries_charged);
        budget.retries_charged = budget.retries_charged.max(retries);
        budget.saved = budget.saved.saturating_sub(new.saturating_mul(MILLI));
        if budget.saved >= MILLI {
            budget.saved -= MILLI;
            true
        } else {
            false
        }
    }

    /// A request was answered after `latency`.
    pub(crate) fn answered(&self, latency: Duration) {
        let us = u32::try_from(latency.as_micros())
            .unwrap_or(u32::MAX)
            .max(1);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.latencies.len() == WINDOW {
            recent.latencies.pop_front();
        }
        recent.latencies.push_back(us);
        recent.since += 1;
        let seen = recent.latencies.len();
        let due = if seen < MIN_SEEN {
            seen >= MIN_SEEN_STALL && recent.since >= MIN_SEEN_STALL
        } else {
            recent.since >= RECOMPUTE || seen == MIN_SEEN
        };
        if !due {
            return;
        }
        recent.since = 0;
        let mut sorted: Vec<u32> = recent.latencies.iter().copied().collect();
        let mut quantile = |q: f64| {
            let at = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)) as usize;
            u64::from(*sorted.select_nth_unstable(at).1)
        };
        self.p99_us.store(quantile(0.99), Ordering::Relaxed);
        if seen >= MIN_SEEN {
            let q = quantile(self.config.quantile);
            self.after_us.store(q, Ordering::Relaxed);
        }
    }
}

/// Racing requests.
impl Hedger {
    /// Race up to three requests for the same bytes; `request(repeat)` sends one (`repeat`
    /// for a hedge), `none_sent` is the error should none have been sent.
    pub(crate) async fn race<F, Fut>(
        &self,
        metrics: &Metrics,
        fetch: &InFlight<'_>,
        request: F,
        none_sent: impl FnOnce() -> Error,
    ) -> Result<Bytes, Error>
    where
        F: Fn(bool) -> Fut + Sync,
        Fut: Future<Output = Result<Bytes, Error>> + Send,
    {
        use futures::stream::{FuturesUnordered, StreamExt};
        use std::time::Instant;

        self.sent();
        let throttled = metrics.throttled();
        // Up to three requests for the same bytes: the first; a hedge when it is in the tail
        // (after the quantile, within the budget; looked at once) or has stalled (many
        // times the p99, whatever the budget, unless the store throttles); and one more
        // if both stall. The first answer wins; dropping the others cancels them. Until a hedge
        // goes out only the first is polled, with a timer: the common case allocates
        // nothing more.
        let first = request(false);
        tokio::pin!(first);
        // When each request went out (no allocation: at most three).
        let mut times = [fetch.started(); 3];
        let mut count = 1;
        let mut tail_looked = false;
        // The first request alone until a hedge is due.
        loop {
            match self.next_hedge(metrics, &times[..count], throttled, &mut tail_looked) {
                Next::Send => break,
                Next::Look => continue,
                Next::Wait(wait) => tokio::select! {
                    answer = first.as_mut() => {
                        return self.won(metrics, fetch, &times[..1], answer.map(|b| (0, b)));
                    }
                    () = tokio::time::sleep(wait) => {}
                },
            }
        }
        // Then all of them, until one answers.
        let mut requests = FuturesUnordered::new();
        requests.push(async move { (0usize, first.await) }.boxed());
        let mut first_error: Option<Error> = None;
        let mut send = true;
        let result = loop {
            if std::mem::take(&mut send) && count < times.len() {
                let tag = count;
                times[tag] = Instant::now();
                count += 1;
                let hedge = request(true);
                requests.push(
                    async move {
                        let _in_flight = metrics.hedge_started();
                        (tag, hedge.await)
                    }
                    .boxed(),
                );
            }
            let wait = match self.next_hedge(metrics, &times[..count], throttled, &mut tail_looked)
            {
                Next::Send => {
                    send = true;
                    continue;
                }
                Next::Look => continue,
                Next::Wait(wait) => wait,
            };
            tokio::select! {
                answered = requests.next() => match answered {
                    Some((tag, Ok(bytes))) => break Ok((tag, bytes)),
                    Some((_, Err(e))) => {
                        // The first error is the one reported if every request fails.
                        let e = first_error.get_or_insert(e);
                        if requests.is_empty() {
                            break Err(e.clone());
                        }
                    }
                    None => break Err(match first_error.take() {
                        Some(e) => e,
                        None => none_sent(),
                    }),
                },
                () = tokio::time::sleep(wait) => {}
            }
        };
        drop(requests);
        self.won(metrics, fetch, &times[..count], result)
    }

    /// The race's answer: the bytes, with the winner's own latency for the hedger.
    fn won(
        &self,
        metrics: &Metrics,
        fetch: &InFlight<'_>,
        sent: &[std::time::Instant],
        result: Result<(usize, Bytes), Error>,
    ) -> Result<Bytes, Error> {
        result.map(|(tag, bytes)| {
            if tag > 0 {
                metrics.hedge_won();
            }
            // A rescued stall's wait is not a latency of the store: counted, it would raise
            // the p99 and with it the next stall's threshold, round after round. The
            // winning request's own time is.
            if !fetch.cached()
                && let Some(at) = sent.get(tag)
            {
                self.answered(at.elapsed());
            }
            bytes
        })
    }

    /// What the race does next, given when its requests went out: send one more now, look
    /// again at once (a tail hedge the budget refused), or wait this long for an answer.
    fn next_hedge(
        &self,
        metrics: &Metrics,
        sent: &[std::time::Instant],
        throttled: u64,
        tail_looked: &mut bool,
    ) -> Next {
        let Some(&last) = sent.last() else {
            return Next::Wait(std::time::Duration::MAX);
        };
        let tail = if *tail_looked || sent.len() > 1 {
            None
        } else {
            self.delay()
        };
        let stall = if sent.len() < 3 {
            self.stall_after()
        } else {
            None
        };
        let (at, is_stall) = match (tail, stall) {
            (Some(t), Some(s)) if s <= t => (s, true),
            (Some(t), _) => (t, false),
            (None, Some(s)) => (s, true),
            (None, None) => return Next::Wait(std::time::Duration::MAX),
        };
        let elapsed = last.elapsed();
        if elapsed < at {
            // While nothing is known the stall threshold is a guess that the first answers
            // will lower: look again soon.
            let wait = at - elapsed;
            return Next::Wait(if is_stall {
                wait.min(self.recheck())
            } else {
                wait
            });
        }
        if is_stall {
            // A store that throttles keeps requests waiting in backoff, not lost: more of
            // them would only add to its load. And a burst of stalls (a hung mount, a
            // network cut) sends a bounded number again at a time.
            let cap = (metrics.in_flight_limit() / 8).max(MIN_STALL_HEDGES);
            if metrics.throttled() > throttled || metrics.hedges_in_flight() >= cap {
                return Next::Wait(self.pause());
            }
            // Not tail: a lost response or a dead connection.
            metrics.stall_hedged();
            return Next::Send;
        }
        *tail_looked = true;
        let retries = metrics.retried() + metrics.throttled();
        if self.spend(retries) {
            Next::Send
        } else {
            Next::Look
        }
    }
}

/// Stall hedges in flight allowed at least (more under a high in-flight limit: an eighth).
const MIN_STALL_HEDGES: usize = 64;

/// What a race of requests does next.
enum Next {
    /// Send one more request now.
    Send,
    /// Look again at once.
    Look,
    /// Wait this long for an answer, then look again.
    Wait(std::time::Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hedges_after_the_quantile_once_enough_is_seen() {
        let h = Hedger::new(Hedge::default());
        for ms in 0..63 {
            h.answered(Duration::from_millis(ms));
        }
        assert_eq!(h.delay(), None, "63 latencies are too few");
        h.answered(Duration::from_millis(63));
        // The 95th percentile of 0..64 ms.
        assert_eq!(h.delay(), Some(Duration::from_millis(59)));
    }

    #[test]
    fn a_stall_is_many_times_the_p99_and_known_before_the_quantile() {
        let h = Hedger::new(Hedge::default());
        // Nothing known: 8 times the floor of 1 s.
        assert_eq!(h.stall_after(), Some(Duration::from_secs(8)));
        for _ in 0..16 {
            h.answered(Duration::from_millis(200));
        }
        assert_eq!(h.delay(), None, "too few for the tail quantile");
        assert_eq!(h.stall_after(), Some(Duration::from_millis(1600)));
        let fast = Hedger::new(Hedge::default());
        for _ in 0..64 {
            fast.answered(Duration::from_millis(2));
        }
        assert_eq!(
            fast.stall_after(),
            Some(Duration::from_secs(1)),
            "the floor"
        );
        let off = Hedger::new(Hedge {
            stall_factor: 0.0,
            ..Hedge::default()
        });
        assert_eq!(off.stall_after(), None);
    }

    #[test]
    fn settings_that_would_hedge_everything_are_refused() {
        assert!(Hedge::default().validate().is_ok());
        assert!(Hedge::stalls_only().validate().is_ok());
        for bad in [
            Hedge {
                stall_factor: f64::INFINITY,
                ..Hedge::default()
            },
            Hedge {
                stall_factor: 1e12,
                ..Hedge::default()
            },
            Hedge {
                min_stall: Duration::ZERO,
                ..Hedge::default()
            },
            Hedge {
                quantile: 1.5,
                ..Hedge::default()
            },
            Hedge {
                budget: -0.1,
                ..Hedge::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_budget_is_a_share_of_first_requests_and_retries_draw_on_it() {
        let h = Hedger::new(Hedge::default());
        for _ in 0..100 {
            h.sent();
        }
        // 100 first requests at 5%: five extra requests in all.
        assert!(h.spend(0) && h.spend(0));
        assert!(h.spend(2), "two retries and this one: five");
        assert!(!h.spend(2), "spent");
        for _ in 0..20 {
            h.sent();
        }
        assert!(h.spend(2));
        assert!(!h.spend(2));
    }
}
