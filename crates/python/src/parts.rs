//! Samples of any kind: the main part through the image stage (or handed on as bytes when
//! it is not an image), and every other field decoded by the Python front end's decoder on
//! the decode threads, batched into one delivery.

use std::sync::Arc;

use bytes::Bytes;
use loader_core::{Batch, RawBatch, Sample, SampleInfo, StageError, labels_tensor, sample_bytes};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::control::Delivered;
use crate::transform::{Fatal, call_python};

/// What the image stage of a loader is: bytes of the main part to a decoded sample.
pub type ImageStage = Arc<dyn Fn(Bytes, &SampleInfo) -> Result<Sample, StageError> + Send + Sync>;

/// One sample's parts: its image when the main part is one, and the tuple the Python
/// decoder made of its other fields.
pub struct Parts {
    image: Option<Sample>,
    decoded: Py<PyAny>,
    /// The bytes the decoded values hold, as the decoder measured them.
    bytes: usize,
}

/// A Python function of a sample's raw fields (`list[bytes]`, in field order: the main
/// part's first when it is not an image) and its key, returning `(values, nbytes)`: the
/// decoded values as a tuple and the bytes they hold. It runs on the decode threads.
pub struct FieldDecoder {
    /// The function.
    pub function: Py<PyAny>,
    /// Where its `KeyboardInterrupt` or `SystemExit` goes.
    pub fatal: Fatal,
}

/// The CPU stage of a loader of parts: `image` decodes the main part when it is an image
/// (`None`: it is handed to `fields` as bytes); the members are decoded by `fields` on this
/// thread, so a failure is the sample's (`skip_errors` covers it) and decoding runs beside
/// training.
pub fn stage(
    image: Option<ImageStage>,
    fields: FieldDecoder,
) -> impl Fn(Bytes, &SampleInfo) -> Result<Parts, StageError> + Send + Sync + 'static {
    move |bytes: Bytes, info: &SampleInfo| {
        let mut raw = Vec::with_capacity(info.members.len() + 1);
        let image = match &image {
            Some(decode) => Some(decode(bytes, info)?),
            None => {
                raw.push(bytes);
                None
            }
        };
        raw.extend(info.members.iter().map(|(_, b)| b.clone()));
        let key = info.name.as_deref().unwrap_or(&info.key);
        let (decoded, bytes) = call_python(&fields.fatal, |py| {
            let parts: Vec<Bound<'_, PyBytes>> = raw.iter().map(|b| PyBytes::new(py, b)).collect();
            let (values, bytes): (Py<PyAny>, usize) =
                fields.function.call1(py, (parts, key))?.extract(py)?;
            Ok((values, bytes))
        })?;
        Ok(Parts {
            image,
            decoded,
            bytes,
        })
    }
}

/// What a sample's parts hold, for the decoded-bytes bound: pixels and decoded values.
pub fn weight(parts: &Parts) -> usize {
    parts.image.as_ref().map_or(0, sample_bytes) + parts.bytes
}

/// The collate of parts: images stacked by `images` (the default collate, into the loader's
/// memory or a lender's), each sample's decoded values beside them.
pub fn collate_parts(
    images: impl Fn(RawBatch<Sample>) -> loader_core::Result<Batch> + Send + Sync + 'static,
) -> impl Fn(RawBatch<Parts>) -> loader_core::Result<Delivered> + Send + Sync + 'static {
    move |raw| collate_batch(raw, &images)
}

fn collate_batch(
    raw: RawBatch<Parts>,
    collate: &dyn Fn(RawBatch<Sample>) -> loader_core::Result<Batch>,
) -> loader_core::Result<Delivered> {
    let position = Some(raw.position);
    let padding = raw.padding;
    let mut decoded = Vec::with_capacity(raw.samples.len());
    if raw.samples.iter().any(|(_, p)| p.image.is_some()) {
        // All or none have one (the loader decides); an empty sample would fail the
        // collate's shape check, naming it, rather than pass unnoticed.
        let images = raw.map(|_, parts| {
            decoded.push(parts.decoded);
            parts.image.unwrap_or_else(empty)
        });
        let batch = collate(images)?;
        return Ok(Delivered {
            decoded,
            position,
            padding,
            ..Delivered::from(batch)
        });
    }
    let RawBatch {
        epoch,
        samples,
        skipped,
        ..
    } = raw;
    let n = samples.len();
    let labels = labels_tensor(samples.iter().map(|(info, _)| info))?;
    let (mut keys, mut indices) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (info, parts) in samples {
        decoded.push(parts.decoded);
        indices.push(info.index);
        keys.push(info.name.unwrap_or(info.key));
    }
    Ok(Delivered {
        images: None,
        labels,
        keys,
        indices,
        epoch,
        skipped,
        decoded,
        position,
        padding,
        tokens: None,
    })
}

fn empty() -> Sample {
    Sample {
        shape: [0; 3],
        data: loader_core::decoder::SampleData::U8(Vec::new()),
    }
}
