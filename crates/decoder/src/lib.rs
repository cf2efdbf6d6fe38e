//! JPEG and PNG decode and image transforms for loader.
//!
//! The crate has a place in the workspace now; its code lands with its own issue.
//!
//! ```
//! assert_eq!(loader_decoder::NAME, "loader-decoder");
//! ```

/// The crate's name, so the placeholder has something to show in its example.
pub const NAME: &str = "loader-decoder";
