//! What runs on the decode threads: a pipeline built from a transform spec, or decoding
//! followed by the user's Python callable.

use bytes::Bytes;
use loader_core::decoder::SampleData;
use loader_core::decoder::{Filter, IMAGENET_MEAN, IMAGENET_STD, Transform};
use loader_core::{Buffer, HostTensor, Pipeline, Sample, SampleInfo, SampleKey, StageError};
use pyo3::buffer::PyBuffer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyException, PyTypeError};

use crate::errors;
use pyo3::prelude::*;

use crate::buffer::HostBuffer;

/// One step of a spec, as the Python side hands it over: torchvision's class name and its
/// numeric arguments.
pub type Step = (String, Vec<f64>);

/// The pipeline a spec names: `imagenet_eval`, `imagenet_train`, torchvision-named steps,
/// or (no spec) decoding alone, to u8 HWC.
pub fn pipeline(named: Option<&str>, steps: Option<Vec<Step>>, seed: u64) -> PyResult<Pipeline> {
    match (named, steps) {
        (Some(_), Some(_)) => Err(errors::config("give a transform name or steps, not both")),
        (Some("imagenet_eval"), None) => Ok(Pipeline::imagenet_eval()),
        (Some("imagenet_train"), None) => Ok(Pipeline::imagenet_train(seed)),
        (Some(other), None) => Err(errors::config(format!(
            "unknown transform {other:?}: give \"imagenet_eval\", \"imagenet_train\", a list of \
             torchvision-named steps, a callable, or None"
        ))),
        (None, steps) => {
            let mut builder = Pipeline::builder().seed(seed);
            let mut order = Order::default();
            for (name, args) in steps.unwrap_or_default() {
                order.check(&name)?;
                builder = step(builder, &name, &args)?;
            }
            builder
                .build()
                .map_err(|e| errors::config(format!("transform: {e}")))
        }
    }
}

/// Where a spec is in torchvision's order: the steps on the image, then `ToTensor`, then
/// `Normalize`. A spec out of that order is refused, never run as some other pipeline (a
/// `Normalize` before `ToTensor` was once silently dropped).
#[derive(Default)]
struct Order {
    tensor: bool,
    normalized: bool,
}

impl Order {
    fn check(&mut self, name: &str) -> PyResult<()> {
        match name {
            "ToTensor" if self.tensor => Err(errors::config(
                "ToTensor twice: the second would get a tensor (torchvision raises too)",
            )),
            "ToTensor" => {
                self.tensor = true;
                Ok(())
            }
            "Normalize" | "ImageNetNormalize" if !self.tensor => Err(errors::config(format!(
                "{name} before ToTensor: Normalize takes a float tensor (torchvision raises \
                 too); put ToTensor first"
            ))),
            "Normalize" | "ImageNetNormalize" if self.normalized => Err(errors::config(
                "Normalize twice: the native pipeline normalizes once; fold the two into one",
            )),
            "Normalize" | "ImageNetNormalize" => {
                self.normalized = true;
                Ok(())
            }
            _ if self.tensor => Err(errors::config(format!(
                "{name} after ToTensor: native steps run on the uint8 image, before ToTensor \
                 (torchvision would run it on the float tensor, with other pixels); put it \
                 before ToTensor, or pass the pipeline as a callable"
            ))),
            _ => Ok(()),
        }
    }
}

fn step(
    builder: loader_core::decoder::PipelineBuilder,
    name: &str,
    args: &[f64],
) -> PyResult<loader_core::decoder::PipelineBuilder> {
    let bad =
        |expected: &str| errors::config(format!("{name}{args:?}: expected {name}({expected})"));
    let size = |i: usize| -> PyResult<usize> {
        let v = *args.get(i).ok_or_else(|| bad("size"))?;
        if v < 1.0 || v.fract() != 0.0 || v > 1e6 {
            return Err(bad("size, a positive whole number of pixels"));
        }
        Ok(v as usize)
    };
    let pair = || -> PyResult<(usize, usize)> {
        match args.len() {
            1 => Ok((size(0)?, size(0)?)),
            2 => Ok((size(0)?, size(1)?)),
            _ => Err(bad("size or (height, width)")),
        }
    };
    Ok(match name {
        "Resize" if args.len() == 1 => builder.resize(size(0)?),
        "Resize" => return Err(bad("size: the shorter side")),
        "CenterCrop" => {
            let (height, width) = pair()?;
            builder.then(Transform::CenterCrop { height, width })
        }
        // Size, or (height, width), optionally followed by scale and ratio bounds.
        "RandomResizedCrop" => {
            let (height, width, scale, ratio) = match *args {
                [_] => (size(0)?, size(0)?, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)),
                [_, _] => (size(0)?, size(1)?, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)),
                [_, _, s0, s1, r0, r1] => (size(0)?, size(1)?, (s0, s1), (r0, r1)),
                _ => return Err(bad("size or (height, width), then scale and ratio bounds")),
            };
            builder.then(Transform::RandomResizedCrop {
                height,
                width,
                scale,
                ratio,
                filter: Filter::Bilinear,
            })
        }
        "RandomHorizontalFlip" => match args {
            [] => builder.random_horizontal_flip(0.5),
            [p] if (0.0..=1.0).contains(p) => builder.random_horizontal_flip(*p),
            _ => return Err(bad("p between 0 and 1")),
        },
        "ToTensor" if args.is_empty() => builder.to_tensor_normalized(&[0.0; 3], &[1.0; 3]),
        "Normalize" if !args.is_empty() && args.len().is_multiple_of(2) => {
            let (mean, std) = args.split_at(args.len() / 2);
            let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
            builder.to_tensor_normalized(&f(mean), &f(std))
        }
        "Normalize" => return Err(bad("mean, std: one value each per channel")),
        "ImageNetNormalize" => builder.to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD),
        _ => {
            return Err(errors::config(format!(
                "unknown transform step {name:?}; known: Resize, CenterCrop, RandomResizedCrop, \
                 RandomHorizontalFlip, ToTensor, Normalize"
            )));
        }
    })
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
        if FINALIZING.load(Ordering::Acquire) {
            // Taking the GIL while the interpreter finalizes ends the thread by a forced
            // unwind through Rust frames, which aborts the process.
            return Err("the Python interpreter is shutting down".into());
        }
        Python::attach(|py| {
            call(py, &callable, image).map_err(|err| {
                if !err.is_instance_of::<PyException>(py) {
                    // KeyboardInterrupt, SystemExit: not a failed sample to skip.
                    fatal.set(err.clone_ref(py));
                }
                StageError::from(err)
            })
        })
    }
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
