//! Layers: stores that wrap a store and add one behaviour each, composable in any order.
//!
//! A usual stack for remote storage, outermost first: cache → metrics → retry → timeout →
//! limit → backend, so a timed-out attempt is retried and the metrics see what the caller saw.
//! [`StorageExt`](crate::StorageExt) builds them with method calls.

mod faults;
mod latency;
mod limit;
mod metrics;
mod retry;
mod throttle;
mod timeout;

// The cache is a sub-system of its own (`crate::cache`); as a layer, it is here too.
pub use crate::cache::{
    Cache, CacheConfig, CacheError, CachePolicy, CacheSnapshot, CacheStore, DEFAULT_BLOCK_BYTES,
    NodeSnapshot, TierSnapshot,
};
pub use faults::{FaultConfig, FaultStore};
pub use latency::{Latency, LatencyStore};
pub use limit::LimitStore;
pub use metrics::{LatencySummary, MetricsSnapshot, MetricsStore, StorageMetrics};
pub use retry::{RetryConfig, RetryStats, RetryStore};
pub use throttle::ThrottleStore;
pub use timeout::TimeoutStore;
