//! What runs on the decode threads: a pipeline built from a transform spec, or decoding
//! followed by the user's Python callable.

use bytes::Bytes;
use loader_core::decoder::SampleData;
use loader_core::decoder::{TRANSFORM_STEPS, TransformSpec};
use loader_core::{Buffer, HostTensor, Pipeline, Sample, SampleInfo, SampleKey, StageError};
use pyo3::buffer::PyBuffer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyException, PyTypeError};

use crate::errors;
use pyo3::prelude::*;

use crate::buffer::HostBuffer;

/// The pipeline a spec names: `imagenet_eval`, `imagenet_train`, steps (a JSON list of
/// `TransformSpec`s, torchvision's names as tags), or (neither) decoding alone, to u8 HWC.
pub fn pipeline(named: Option<&str>, steps: Option<&str>, seed: u64) -> PyResult<Pipeline> {
    match (named, steps) {
        (Some(_), Some(_)) => Err(errors::config("give a transform name or steps, not both")),
        (Some("imagenet_eval"), None) => Ok(Pipeline::imagenet_eval()),
        (Some("imagenet_train"), None) => Ok(Pipeline::imagenet_train(seed)),
        (Some(other), None) => Err(errors::config(format!(
            "unknown transform {other:?}: give \"imagenet_eval\", \"imagenet_train\", a list of \
             torchvision-named steps, a callable, or None"
        ))),
        (None, steps) => {
            let values: Vec<serde_json::Value> = match steps {
                Some(json) => serde_json::from_str(json)
                    .map_err(|e| errors::config(format!("transform steps: {e}")))?,
                None => Vec::new(),
            };
            // One at a time, so an error names the step it is about.
            let steps = values
                .into_iter()
                .enumerate()
                .map(|(i, value)| {
                    let shown = value.to_string();
                    serde_json::from_value::<TransformSpec>(value)
                        .map_err(|e| errors::config(format!("transform step {i} {shown}: {e}")))
                })
                .collect::<PyResult<Vec<_>>>()?;
            TransformSpec::pipeline(&steps, seed)
                .map_err(|e| errors::config(format!("transform: {e}")))
        }
    }
}

/// The file extensions the native decoder reads (lowercase): the image suffixes of
/// `loader_ml.fields`.
#[pyfunction]
pub fn image_suffixes() -> Vec<&'static str> {
    loader_core::decoder::Format::EXTENSIONS
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

/// The steps a spec may name, each with its fields in torchvision's positional order.
#[pyfunction]
pub fn transform_steps() -> Vec<(&'static str, Vec<&'static str>)> {
    TRANSFORM_STEPS
        .iter()
        .map(|(name, fields)| (*name, fields.to_vec()))
        .collect()
}

/// The CPU stage for a Python `transform`: decode to u8 HWC with `decode`, then call
/// `callable` with the image as a numpy array (viewing the decoded pixels, no copy), taking
/// the GIL for the call. It must return an array-like of 3 dimensions: uint8 stays uint8,
/// floats become float32. Its exception fails the sample (skipped or raised, per
/// `skip_errors`), chained as the cause of the loader's error.
pub fn python_stage(
    callable: Py<PyAny>,
    decode: Pipeline,
    fatal: Fatal,
) -> impl Fn(Bytes, &SampleInfo) -> Result<Sample, StageError> + Send + Sync + 'static {
    move |bytes: Bytes, info: &SampleInfo| {
        let key = SampleKey {
            epoch: info.epoch,
            index: info.index,
        };
        let decoded = decode.run(&bytes, key)?;
        let SampleData::U8(pixels) = decoded.data else {
            return Err("the decode step made floats, not pixels".into());
        };
        let image = HostTensor::u8(Buffer::from(pixels), decoded.shape.to_vec())?;
        call_python(&fatal, |py| call(py, &callable, image))
    }
}

/// Run `f` with the GIL on a decode thread: its exception fails the sample (skipped or
/// raised, per `skip_errors`), except a `KeyboardInterrupt` or `SystemExit`, which stops
/// the loader through `fatal`.
pub fn call_python<R>(
    fatal: &Fatal,
    f: impl FnOnce(Python<'_>) -> PyResult<R>,
) -> Result<R, StageError> {
    if FINALIZING.load(Ordering::Acquire) {
        // Taking the GIL while the interpreter finalizes ends the thread by a forced
        // unwind through Rust frames, which aborts the process.
        return Err("the Python interpreter is shutting down".into());
    }
    Python::attach(|py| {
        f(py).map_err(|err| {
            if !err.is_instance_of::<PyException>(py) {
                // KeyboardInterrupt, SystemExit: not a failed sample to skip.
                fatal.set(err.clone_ref(py));
            }
            StageError::from(err)
        })
    })
}

/// Set by `loader_ml` at interpreter exit (an `atexit` hook, before finalization), so
/// decode threads stop calling into Python.
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// `loader_ml._native._shutting_down()`: the interpreter is exiting; Python transforms
/// are no longer called (their samples fail) while the hook closes the live loaders.
#[pyfunction]
pub fn _shutting_down() {
    FINALIZING.store(true, Ordering::Release);
}

/// A `BaseException` that is not an `Exception`, raised by a Python transform on a decode
/// thread, waiting to be raised in the thread that iterates.
#[derive(Clone, Default)]
pub struct Fatal(Arc<Mutex<Option<PyErr>>>);

impl Fatal {
    fn set(&self, err: PyErr) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(err);
    }

    /// The exception, once.
    pub fn take(&self) -> Option<PyErr> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

fn call(py: Python<'_>, callable: &Py<PyAny>, image: HostTensor) -> PyResult<Sample> {
    let numpy = py.import("numpy")?;
    let array = numpy.call_method1("asarray", (Bound::new(py, HostBuffer::new(image))?,))?;
    let out = callable.call1(py, (array,))?;
    let out = numpy.call_method1("ascontiguousarray", (out,))?;
    let kind: String = out.getattr("dtype")?.getattr("kind")?.extract()?;
    let name: String = out.getattr("dtype")?.getattr("name")?.extract()?;
    let shape: Vec<usize> = out.getattr("shape")?.extract()?;
    let [a, b, c] = shape[..] else {
        return Err(errors::config(format!(
            "the transform returned an array of shape {shape:?}; a sample must have 3 \
             dimensions (HWC or CHW)"
        )));
    };
    let data = match (name.as_str(), kind.as_str()) {
        ("uint8", _) => SampleData::U8(PyBuffer::<u8>::get(&out)?.to_vec(py)?),
        (_, "f") => {
            let out = out.call_method1("astype", ("float32",))?;
            SampleData::F32(PyBuffer::<f32>::get(&out)?.to_vec(py)?)
        }
        _ => {
            return Err(PyTypeError::new_err(format!(
                "the transform returned {name} values; return uint8 or floating-point ones"
            )));
        }
    };
    Ok(Sample {
        shape: [a, b, c],
        data,
    })
}
