//! A batch's memory, lent to Python through the buffer protocol: `numpy.asarray(buf)` and
//! `torch.from_numpy` view it in place, and it returns to its loader when the last array
//! or tensor that views it is gone.

// The buffer protocol is a C struct filled through raw pointers.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::ptr;

use loader_core::{DType, HostTensor};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A C-contiguous array owned by Rust, exported to Python without a copy.
#[pyclass(module = "loader_ml._native", name = "HostBuffer", frozen)]
pub struct HostBuffer {
    /// Owns the memory. Its values are not read again once `ptr` was taken from it: from
    /// then on the memory belongs to whoever holds a view.
    _tensor: HostTensor,
    ptr: usize,
    nbytes: isize,
    itemsize: isize,
    format: &'static CStr,
    dtype: &'static str,
    shape: Vec<isize>,
    strides: Vec<isize>,
    /// The Python object whose memory this is, when one lent it (see `owner`).
    owner: Option<Py<PyAny>>,
}

impl HostBuffer {
    /// Lend `tensor`'s memory: its address is taken once, here, and holds while the buffer
    /// (and so every view of it) lives.
    pub fn new(tensor: HostTensor) -> Self {
        Self::owned_by(tensor, None)
    }

    /// Lend `tensor`'s memory, which `owner` (a Python object) lent to the loader.
    pub fn owned_by(mut tensor: HostTensor, owner: Option<Py<PyAny>>) -> Self {
        let dtype = tensor.dtype();
        let (format, itemsize, name): (&'static CStr, usize, &'static str) = match dtype {
            DType::U8 => (c"B", 1, "uint8"),
            DType::F32 => (c"f", 4, "float32"),
            DType::I64 => (c"q", 8, "int64"),
            DType::I32 => (c"i", 4, "int32"),
            // A type this binding does not know yet: its bytes, flat.
            _ => (c"B", 1, "uint8"),
        };
        let (shape, strides) = if itemsize == dtype.size() {
            (tensor.shape().to_vec(), tensor.strides())
        } else {
            (vec![tensor.as_bytes().len()], vec![1])
        };
        let bytes = tensor.as_bytes_mut();
        let (ptr, nbytes) = (bytes.as_mut_ptr() as usize, bytes.len() as isize);
        Self {
            _tensor: tensor,
            ptr,
            nbytes,
            itemsize: itemsize as isize,
            format,
            dtype: name,
            shape: shape.into_iter().map(|d| d as isize).collect(),
            strides: strides.into_iter().map(|s| s as isize).collect(),
            owner,
        }
    }
}

#[pymethods]
impl HostBuffer {
    /// The shape, outermost first.
    #[getter]
    fn shape(&self) -> Vec<isize> {
        self.shape.clone()
    }

    /// The element type's numpy name: `uint8`, `float32` or `int64`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype
    }

    /// Bytes held.
    #[getter]
    fn nbytes(&self) -> isize {
        self.nbytes
    }

    /// The tensor whose memory this is, when torch lent it (`pin_memory=True`): the batch
    /// is handed over as a view of that tensor, so torch keeps tracking the block (a
    /// `non_blocking` copy's event on it). `None` for the loader's own memory.
    #[getter]
    fn owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.owner.as_ref().map(|o| o.clone_ref(py))
    }

    /// The memory's address: an array or tensor viewing this buffer without a copy reports
    /// the same (`array.ctypes.data`, `tensor.data_ptr()`).
    #[getter]
    fn data_ptr(&self) -> usize {
        self.ptr
    }

    fn __repr__(&self) -> String {
        format!("HostBuffer(shape={:?}, dtype={})", self.shape, self.dtype)
    }

    /// The buffer protocol: a writable, C-contiguous view of the memory, which keeps this
    /// object (and so the memory) alive until the view is released.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("the buffer view is null"));
        }
        let this = slf.get();
        let wants = |flag: c_int| flags & flag == flag;
        if wants(ffi::PyBUF_F_CONTIGUOUS) && this.shape.iter().filter(|&&d| d > 1).count() > 1 {
            return Err(PyBufferError::new_err(
                "a batch is C-contiguous; a Fortran-contiguous view needs a copy",
            ));
        }
        // SAFETY: `view` is a valid, writable Py_buffer (checked non-null above) that the
        // caller owns. `buf`, `shape` and `strides` point into this object, which the view
        // keeps alive through `obj` (a new reference) and which never moves or mutates
        // them; `format` is a static string.
        unsafe {
            (*view).buf = this.ptr as *mut c_void;
            (*view).len = this.nbytes;
            (*view).readonly = 0;
            (*view).itemsize = this.itemsize;
            (*view).format = if wants(ffi::PyBUF_FORMAT) {
                this.format.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            if wants(ffi::PyBUF_ND) {
                (*view).ndim = this.shape.len() as c_int;
                (*view).shape = this.shape.as_ptr().cast_mut();
            } else {
                // A plain byte buffer, as the protocol defines one without a shape.
                (*view).ndim = 1;
                (*view).shape = ptr::null_mut();
            }
            (*view).strides = if wants(ffi::PyBUF_STRIDES) {
                this.strides.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }
}
