//! Hedged requests: a request slower than a high quantile of recent latencies is sent
//! again, and the first answer wins. With exact ordering one slow GET holds up its whole
//! batch, so the tail of the latency distribution, not its median, sets the wait.
//!
//! Hedges draw on a budget that every first request adds to and every retry the store's
//! layers report takes from, so hedges and retries together stay within it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// When to send a request again, and how many extra requests that may cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hedge {
    /// A request still unanswered after this quantile of recent latencies is sent again.
    pub quantile: f64,
    /// Extra requests (hedges and retries) at most, as a share of the first requests.
    pub budget: f64,
    /// Never hedge sooner than this after the first request.
    pub min_delay: Duration,
}

impl Default for Hedge {
    /// The 95th percentile, at most 5% extra requests, no sooner than 1 ms.
    fn default() -> Self {
        Self {
            quantile: 0.95,
            budget: 0.05,
            min_delay: Duration::from_millis(1),
        }
    }
}

/// Latencies kept for the quantile.
const WINDOW: usize = 1024;
/// Latencies seen before the first hedge: a quantile of fewer says little.
const MIN_SEEN: usize = 64;
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
        if recent.latencies.len() >= MIN_SEEN && recent.since >= RECOMPUTE {
            recent.since = 0;
            let mut sorted: Vec<u32> = recent.latencies.iter().copied().collect();
            let at = ((sorted.len() - 1) as f64 * self.config.quantile.clamp(0.0, 1.0)) as usize;
            let (_, q, _) = sorted.select_nth_unstable(at);
            self.after_us.store(u64::from(*q), Ordering::Relaxed);
        }
    }
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
