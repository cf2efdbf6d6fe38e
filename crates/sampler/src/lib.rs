//! Index samplers for loader: the order in which a dataset's items are read in an epoch.
//!
//! The crate has a place in the workspace now; its code lands with its own issue.
//!
//! ```
//! assert_eq!(loader_sampler::NAME, "loader-sampler");
//! ```

/// The crate's name, so the placeholder has something to show in its example.
pub const NAME: &str = "loader-sampler";
