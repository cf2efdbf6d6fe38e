//! Memory another owner lends for a batch's values, so a batch is written once, where it
//! must end up: torch's pinned allocator for `pin_memory=True`, where a copy into pinned
//! memory after the collate would cost a second pass over every batch.
//!
//! The owner keeps its own pool (torch's caching host allocator reuses freed pinned
//! blocks once the copies that read them have finished); a lent block goes back to it when
//! the batch's last holder drops it.

use std::any::Any;

/// Where a batch's values are written instead of the loader's own reused buffers.
pub trait BatchMemory: Send + Sync {
    /// A block of at least `bytes` bytes for one batch, aligned for the values' type (4
    /// bytes covers `u8` and `f32` batches). Called on the thread that collates, once per
    /// batch.
    fn block(&self, bytes: usize) -> Result<Box<dyn LentBlock>, MemoryError>;
}

/// One lent block: its bytes, written by the collate before anyone else reads them.
/// [`Any`] lets the lender find its own block again in a delivered batch
/// ([`HostTensor::lent`](crate::HostTensor::lent)).
pub trait LentBlock: Any + Send + Sync {
    /// The whole block.
    fn bytes(&self) -> &[u8];
    /// The whole block, to write into.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A lender could not give a block, or gave one that cannot hold the batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The lender refused (out of pinned memory, no device...).
    #[error("{lender} could not lend {bytes} bytes: {source}")]
    Refused {
        /// Who was asked, e.g. "torch's pinned allocator".
        lender: String,
        /// What was asked for.
        bytes: usize,
        /// Why not.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The block is smaller than asked.
    #[error("a lent block of {got} bytes cannot hold a batch of {bytes}")]
    TooSmall {
        /// What was asked for.
        bytes: usize,
        /// What came.
        got: usize,
    },
    /// The block is not aligned for the batch's values.
    #[error("a lent block at {address:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// Where it starts.
        address: usize,
        /// The alignment the values need.
        align: usize,
    },
}

/// `block` as a checked home for `len` values of `T`.
pub(crate) fn check<T>(block: &dyn LentBlock, len: usize) -> Result<(), MemoryError> {
    let bytes = len.saturating_mul(size_of::<T>());
    let got = block.bytes().len();
    if got < bytes {
        return Err(MemoryError::TooSmall { bytes, got });
    }
    let address = block.bytes().as_ptr() as usize;
    let align = align_of::<T>();
    // An empty slice's address is a dangling 1: nothing is read through it.
    if bytes > 0 && !address.is_multiple_of(align) {
        return Err(MemoryError::Misaligned { address, align });
    }
    Ok(())
}
