//! The native half of the Python package `loader_ml` (distribution `loader-ml`): loader's
//! DataLoader for PyTorch users, yielding torch tensors or numpy arrays that share the
//! batch's memory.
//!
//! Built by maturin (`pip install ./crates/python`), it is a Python extension, not a Rust
//! library: the API is Python's, documented in `python/loader_ml` (docstrings and `.pyi`
//! stubs). What a training script writes:
//!
//! ```python
//! import loader_ml
//!
//! loader = loader_ml.DataLoader(
//!     "s3://bucket/train", batch_size=64, shuffle=True, transform="imagenet_train",
//!     storage_options={"aws_region": "us-east-1"},
//! )
//! for epoch in range(3):
//!     loader.set_epoch(epoch)
//!     for images, labels in loader:  # torch tensors, [64, 3, 224, 224] and [64]
//!         ...
//! ```
//!
//! The pieces: [`buffer`] hands a batch's memory to Python through the buffer protocol,
//! [`dataset`] and [`loader`] wrap loader-core's types, [`build`] turns the loader's
//! arguments into one (every check of them in one place), [`transform`] turns a transform
//! spec or a Python callable into the CPU stage, [`errors`] maps errors onto the package's
//! exception classes. Every call that waits or works releases the GIL.

pub mod buffer;
pub mod build;
pub mod control;
pub mod dataset;
pub mod errors;
pub mod loader;
pub mod parts;
pub mod pinned;
pub mod transform;

use pyo3::prelude::*;

/// The extension module, `loader_ml._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The library's warnings (a cache write that failed, a detached thread)
    // on stderr, unless the embedding program installed a subscriber of its own.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .without_time()
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
    m.add_class::<buffer::HostBuffer>()?;
    m.add_class::<dataset::PyDataset>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_function(wrap_pyfunction!(loader::option_keys, m)?)?;
    m.add_function(wrap_pyfunction!(loader::launch, m)?)?;
    m.add_function(wrap_pyfunction!(transform::transform_steps, m)?)?;
    m.add_function(wrap_pyfunction!(transform::image_suffixes, m)?)?;
    m.add_function(wrap_pyfunction!(transform::_shutting_down, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
