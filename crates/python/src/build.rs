//! From Python's arguments to a running loader: the settings (`options` by key, ranks from
//! the launcher unless given), the sources of a mixture, and the stage (native pipeline,
//! Python callable, or a decoder of fields), every argument check in [`Stages::check`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use loader_core::{
    BatchMemory, DataLoader, DataLoaderBuilder, DecodeOptions, Launch, LoaderOptions, Pipeline,
    SampleInfo, SampleKey, Source, collate, collate_in, sample_bytes,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::control::Control;
use crate::dataset::PyDataset;
use crate::errors;
use crate::{parts, pinned, transform};

/// The loader's options: `options` by key, the launcher's rank and world size unless both
/// are given (one without the other is refused).
pub fn settings(options: &BTreeMap<String, String>) -> PyResult<LoaderOptions> {
    let mut settings = LoaderOptions::default();
    for (key, value) in options {
        settings
            .set(key, value)
            .map_err(|e| errors::config(e.to_string()))?;
    }
    match (
        options.contains_key("rank"),
        options.contains_key("world_size"),
    ) {
        (true, true) => {}
        (false, false) => {
            let launch = Launch::from_env()
                .map_err(|e| errors::config(format!("rank and world size: {e}")))?;
            (settings.rank, settings.world_size) = (launch.rank, launch.world_size);
        }
        _ => {
            return Err(errors::config(
                "give rank and world_size together, or neither",
            ));
        }
    }
    Ok(settings)
}

/// The datasets as a mixture's sources, one weight each (equal when none are given).
pub fn sources(
    datasets: &[PyRef<'_, PyDataset>],
    weights: Option<Vec<f64>>,
) -> PyResult<Vec<Source>> {
    if datasets.is_empty() {
        return Err(errors::config("give a dataset, or several to mix"));
    }
    let weights = weights.unwrap_or_else(|| vec![1.0; datasets.len()]);
    if weights.len() != datasets.len() {
        return Err(errors::config(format!(
            "{} weights for {} datasets: give one weight per dataset",
            weights.len(),
            datasets.len()
        )));
    }
    Ok(datasets
        .iter()
        .zip(weights)
        .map(|(d, w)| Source::new(d.store.clone(), d.dataset.clone()).weight(w))
        .collect())
}

/// What runs on each sample, as Python asked for it.
pub struct Stages {
    /// A native transform by name.
    pub transform: Option<String>,
    /// Native transform steps.
    pub steps: Option<String>,
    /// A Python callable run on each decoded image.
    pub transform_fn: Option<Py<PyAny>>,
    /// Whether each sample's main part is an image.
    pub main_image: bool,
    /// A Python function decoding each sample's other fields.
    pub decode_fields: Option<Py<PyAny>>,
    /// Decode JPEGs at the scale the native resize needs.
    pub draft: bool,
    /// Torch's pinned allocator, for `pin_memory=True`.
    pub batch_memory: Option<Py<PyAny>>,
    /// The datasets are token blocks: rows packed natively, nothing else runs.
    pub tokens: bool,
}

impl Stages {
    /// Every check of how the arguments go together, before anything is built.
    pub fn check(&self) -> PyResult<()> {
        if self.tokens {
            let given = [
                (
                    "transform",
                    self.transform.is_some() || self.steps.is_some(),
                ),
                ("transform", self.transform_fn.is_some()),
                ("fields", self.decode_fields.is_some() || !self.main_image),
                ("draft", self.draft),
                ("batch_memory", self.batch_memory.is_some()),
            ];
            if let Some((name, _)) = given.iter().find(|(_, given)| *given) {
                return Err(errors::config(format!(
                    "{name}= applies to images; a token dataset's blocks are packed into \
                     rows natively (input_ids, labels, position_ids, cu_seqlens): leave it out"
                )));
            }
        }
        if self.transform_fn.is_some() && self.transform.is_some() {
            return Err(PyValueError::new_err(
                "give transform as a name, steps or a callable, one of them",
            ));
        }
        let native = self.transform.is_some() || self.steps.is_some();
        if !self.main_image && self.decode_fields.is_none() {
            return Err(errors::config(
                "samples whose main part is not an image need a decoder of their fields",
            ));
        }
        if !self.main_image && (native || self.transform_fn.is_some()) {
            return Err(errors::config(
                "a transform runs on images: the main field of these samples is not one",
            ));
        }
        if self.draft && !native {
            return Err(errors::config(
                "draft=True lets JPEGs decode at the scale a native Resize or \
                 RandomResizedCrop needs: give one as the transform (a Python callable \
                 receives full-size images)",
            ));
        }
        Ok(())
    }

    /// The native pipeline, its random transforms seeded by `seed`.
    fn pipeline(&self, seed: u64) -> PyResult<Pipeline> {
        let pipeline = transform::pipeline(self.transform.as_deref(), self.steps.as_deref(), seed)?;
        Ok(if self.draft {
            pipeline.with_decode_options(DecodeOptions {
                draft: true,
                ..*pipeline.decode_options()
            })
        } else {
            pipeline
        })
    }

    /// The loader of `builder`'s mixture with these stages, built with the GIL released.
    pub fn build(
        self,
        py: Python<'_>,
        builder: DataLoaderBuilder,
        seed: u64,
        fatal: &transform::Fatal,
        backend: &str,
    ) -> PyResult<Box<dyn Control>> {
        if self.tokens {
            let packing = builder.current_options().packing.packing();
            let builder = builder
                .tokens(packing)
                .map_err(|e| errors::raise(&e, backend))?;
            return boxed(py, builder, backend);
        }
        let pipeline = self.pipeline(seed)?;
        // `pin_memory=True`: batches written into tensors torch's pinned allocator lends.
        let memory = self.batch_memory.map(|allocate| {
            Arc::new(pinned::TorchMemory {
                allocate,
                fatal: fatal.clone(),
            }) as Arc<dyn BatchMemory>
        });
        let collate_images = {
            let memory = memory.clone();
            move |raw| match &memory {
                Some(memory) => collate_in(raw, Arc::clone(memory)),
                None => collate(raw),
            }
        };
        if let Some(function) = self.decode_fields {
            let image: Option<parts::ImageStage> = match (self.main_image, self.transform_fn) {
                (false, _) => None,
                (true, Some(callable)) => Some(Arc::new(transform::python_stage(
                    callable,
                    pipeline,
                    fatal.clone(),
                ))),
                (true, None) => Some(Arc::new(move |bytes: Bytes, info: &SampleInfo| {
                    let key = SampleKey {
                        epoch: info.epoch,
                        index: info.index,
                    };
                    Ok(pipeline.run(&bytes, key)?)
                })),
            };
            let fields = parts::FieldDecoder {
                function,
                fatal: fatal.clone(),
            };
            let builder = builder
                .map(
                    parts::stage(image, fields),
                    parts::collate_parts(collate_images),
                )
                .weigh(parts::weight);
            boxed(py, builder, backend)
        } else if let Some(callable) = self.transform_fn {
            let stage = transform::python_stage(callable, pipeline, fatal.clone());
            // Weighed as the native pipeline's samples are, so `max_decoded_bytes`
            // bounds what the callable returns too.
            let builder = builder.map(stage, collate_images).weigh(sample_bytes);
            boxed(py, builder, backend)
        } else {
            let builder = builder.transform(pipeline);
            let builder = match memory {
                Some(memory) => builder.batch_memory(memory),
                None => builder,
            };
            boxed(py, builder, backend)
        }
    }
}

/// A built loader behind the one trait `PyLoader` drives, built with the GIL released.
fn boxed<T, B>(
    py: Python<'_>,
    builder: DataLoaderBuilder<T, B>,
    backend: &str,
) -> PyResult<Box<dyn Control>>
where
    T: Send + 'static,
    DataLoaderBuilder<T, B>: Send,
    DataLoader<T, B>: Control + 'static,
{
    let loader = py
        .detach(|| builder.build())
        .map_err(|e| errors::raise(&e, backend))?;
    Ok(Box::new(loader))
}
