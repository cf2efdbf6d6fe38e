//! The loader engine: fetch strategies, the CPU pool, bounded prefetch and metrics.
//!
//! The crate has a place in the workspace now; its code lands with its own issue.
//!
//! ```
//! assert_eq!(loader_scheduler::NAME, "loader-scheduler");
//! ```

/// The crate's name, so the placeholder has something to show in its example.
pub const NAME: &str = "loader-scheduler";
