//! A point-in-time report of an engine, and the line that names its bottleneck.

use std::fmt;
use std::time::Duration;

use crate::limit::LimitReason;

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
