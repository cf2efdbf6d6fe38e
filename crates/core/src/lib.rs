//! The loader facade that ML stacks depend on: datasets, the data loader, batches.
//!
//! The crate has a place in the workspace now; its code lands with its own issue.
//!
//! ```
//! assert_eq!(loader_core::NAME, "loader-core");
//! ```

/// The crate's name, so the placeholder has something to show in its example.
pub const NAME: &str = "loader-core";
