//! `pin_memory=True`: batches written straight into tensors torch's pinned allocator made,
//! rather than copied into pinned memory after the collate as torch's DataLoader does.
//!
//! The tensor torch allocated is what the user receives (viewed in the batch's type and
//! shape), so torch's caching host allocator keeps tracking it: a `non_blocking` copy to a
//! GPU records its event on the block, and the block is reused only once that copy is done
//! and the last view is gone. Pinning the loader's own buffers in place (`cudaHostRegister`)
//! would skip that tracking, and a buffer could be overwritten while a copy still reads it.

// The lent block is a tensor's memory, reached through its address.
#![allow(unsafe_code)]

use std::any::Any;

use loader_core::{BatchMemory, HostTensor, LentBlock, MemoryError};
use pyo3::prelude::*;

use crate::transform::{Fatal, call_python};

/// Who is asked for the memory, as errors name it.
const LENDER: &str = "torch's pinned allocator (pin_memory=True)";

/// A function of a byte count returning a new contiguous `uint8` host tensor of at least that
/// many bytes (`torch.empty(n, dtype=torch.uint8, device="cpu", pin_memory=True)`), which it
/// keeps no reference to. It is called under the loader's lock, so it should be a C function
/// (a `functools.partial` of `torch.empty`): a Python one lets signal handlers run there.
pub struct TorchMemory {
    /// The function.
    pub allocate: Py<PyAny>,
    /// Where a `KeyboardInterrupt` raised while it runs goes.
    pub fatal: Fatal,
}

/// A tensor torch lent for one batch.
pub struct TorchBlock {
    tensor: Py<PyAny>,
    address: usize,
    len: usize,
}

/// The tensor torch lent for `tensor`'s memory, if it did.
pub fn owner(py: Python<'_>, tensor: &HostTensor) -> Option<Py<PyAny>> {
    let block: &dyn Any = tensor.lent()?;
    block
        .downcast_ref::<TorchBlock>()
        .map(|b| b.tensor.clone_ref(py))
}

impl BatchMemory for TorchMemory {
    fn block(&self, bytes: usize) -> Result<Box<dyn LentBlock>, MemoryError> {
        let refused = |source| MemoryError::Refused {
            lender: LENDER.into(),
            bytes,
            source,
        };
        let (tensor, address, len) = call_python(&self.fatal, |py| {
            let tensor = self.allocate.call1(py, (bytes,))?;
            let t = tensor.bind(py);
            let contiguous: bool = t.call_method0("is_contiguous")?.extract()?;
            let element: usize = t.call_method0("element_size")?.extract()?;
            let device: String = t.getattr("device")?.getattr("type")?.extract()?;
            if !contiguous || element != 1 || device != "cpu" {
                // A device tensor's address written from the CPU would be undefined
                // behaviour, not an error.
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "the allocator must return a contiguous uint8 tensor in host memory, not \
                     one of {element}-byte elements on {device}"
                )));
            }
            let address: usize = t.call_method0("data_ptr")?.extract()?;
            let len: usize = t.call_method0("numel")?.extract()?;
            Ok((tensor, address, len))
        })
        .map_err(refused)?;
        if len < bytes {
            return Err(MemoryError::TooSmall { bytes, got: len });
        }
        if address == 0 && len > 0 {
            return Err(refused(
                "the allocator returned a tensor without memory".into(),
            ));
        }
        Ok(Box::new(TorchBlock {
            tensor,
            address,
            len,
        }))
    }
}

impl LentBlock for TorchBlock {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `address` is the start of `len` bytes of a contiguous tensor that `tensor`
        // keeps alive. The loader reads and writes them only while collating, before the
        // tensor reaches any Python code (no other reference to it exists until then), and
        // afterwards only takes the address; so nothing resizes or frees the storage while
        // these borrows live.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`; `&mut self` makes this the only borrow of the block.
        unsafe { std::slice::from_raw_parts_mut(self.address as *mut u8, self.len) }
    }
}
