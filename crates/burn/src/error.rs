//! What the adapter can report: the loader's own errors and what burn cannot hold.

use std::sync::Arc;

/// Why the adapter could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loader refused (its settings, or reading the store).
    #[error(transparent)]
    Loader(#[from] loader_core::Error),
    /// This loader, made by `slice` or `to_device`, could not be built; its `iter()`
    /// yields the same error.
    #[error("the loader of this slice or device could not be built: {0}")]
    NotBuilt(#[source] Arc<loader_core::Error>),
    /// The batch holds values of a type burn has no element type for.
    #[error("no burn element type for {0} values")]
    DType(loader_core::DType),
    /// A batch's tensor has another number of dimensions than burn's tensor type.
    #[error("a {rank}-D tensor was expected, the batch holds shape {shape:?}")]
    Rank {
        /// Dimensions expected.
        rank: usize,
        /// The shape the batch holds.
        shape: Vec<usize>,
    },
    /// The labels are not class indices (multi-label or values), so they cannot be an
    /// `ImageBatch`'s int targets.
    #[error(
        "the labels are {dtype} values of shape {shape:?} (a multi-label or values manifest), not class indices: ImageBatch's targets are class indices; convert batches with a Convert of your own that reads them with float_tensor"
    )]
    NotClasses {
        /// Their element type.
        dtype: loader_core::DType,
        /// Their shape.
        shape: Vec<usize>,
    },
    /// An iterator of this loader is still alive.
    #[error(
        "an iterator of this loader is still alive: drop it before starting another epoch or taking the state"
    )]
    Busy,
}
