//! The CPU stage and what the engine hands back: the vocabulary every part of the
//! machinery shares, below all of it.

use std::sync::Arc;

use bytes::Bytes;

use crate::item::{EngineError, RawBatch, SampleInfo, StageError};

/// The CPU stage: bytes of one sample to its decoded form. Runs on the engine's threads,
/// never on the async runtime's.
pub type Stage<T> = Arc<dyn Fn(Bytes, &SampleInfo) -> Result<T, StageError> + Send + Sync>;

pub(crate) type Output<T> = Result<RawBatch<T>, EngineError>;

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
