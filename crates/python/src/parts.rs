//! Samples of any kind: the main part through the image stage (or kept as bytes when it is
//! not an image) and the selected members' bytes beside it, batched into one delivery that
//! Python decodes field by field.

use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::transform::{Fatal, call_python};
use loader_core::{
    Batch, Buffer, HostTensor, ItemError, RawBatch, Sample, SampleInfo, SourceError, StageError,
    collate, sample_bytes,
};

/// What the image stage of a loader is: bytes of the main part to a decoded sample.
pub type ImageStage = Arc<dyn Fn(Bytes, &SampleInfo) -> Result<Sample, StageError> + Send + Sync>;

/// One sample's parts: its image when the main part is one, and its other fields in
/// field order (the main part's first when it is not an image), as bytes or, with a Python
/// decoder, as the tuple it made of them.
pub struct Parts {
    image: Option<Sample>,
    raw: Vec<Bytes>,
    decoded: Option<Py<PyAny>>,
    /// What the raw bytes weighed, kept once they are decoded.
    bytes: usize,
}

/// A Python function of a sample's raw fields (`list[bytes]`) and its key that returns
/// their decoded values, run on the decode threads.
pub struct FieldDecoder {
    /// The function.
    pub function: Py<PyAny>,
    /// Where its `KeyboardInterrupt` or `SystemExit` goes.
    pub fatal: Fatal,
}

/// One batch as the Python front end takes it over.
pub struct Delivered {
    /// `[N, ...]` images, when the main part is an image.
    pub images: Option<HostTensor>,
    /// `[N]` i64 labels (the dataset's; -1 where a source has none).
    pub labels: HostTensor,
    /// Each sample's key.
    pub keys: Vec<Arc<str>>,
    /// Each sample's dataset index.
    pub indices: Vec<u64>,
    /// The epoch.
    pub epoch: u64,
    /// Samples skipped under `skip_errors`.
    pub skipped: Vec<ItemError>,
    /// The raw fields' bytes, `columns[field][sample]` (without a Python decoder).
    pub columns: Vec<Vec<Bytes>>,
    /// Each sample's decoded fields, as the Python decoder returned them.
    pub decoded: Vec<Py<PyAny>>,
    /// Where the batch starts in its epoch, for a loader of parts: Python decodes its
    /// fields after the loader has moved past it, and rewinds to here when that fails.
    pub position: Option<u64>,
}

impl From<Batch> for Delivered {
    fn from(batch: Batch) -> Self {
        let t = batch.into_tensors();
        Self {
            images: Some(t.images),
            labels: t.labels,
            keys: t.keys,
            indices: t.indices,
            epoch: t.epoch,
            skipped: t.skipped,
            columns: Vec::new(),
            decoded: Vec::new(),
            position: None,
        }
    }
}

/// The CPU stage of a loader of parts: `image` decodes the main part when it is an image
/// (`None`: it is kept as bytes); the members ride along as the fetch cut them, or are
/// decoded by `fields` on this thread, so a failure is the sample's (and `skip_errors`
/// covers it) and decoding runs beside training.
pub fn stage(
    image: Option<ImageStage>,
    fields: Option<FieldDecoder>,
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
        let bytes = raw.iter().map(Bytes::len).sum();
        let Some(fields) = &fields else {
            return Ok(Parts {
                image,
                raw,
                decoded: None,
                bytes,
            });
        };
        let key = info.name.as_deref().unwrap_or(&info.key);
        let decoded = call_python(&fields.fatal, |py| {
            let parts: Vec<Bound<'_, PyBytes>> = raw.iter().map(|b| PyBytes::new(py, b)).collect();
            fields.function.call1(py, (parts, key))
        })?;
        Ok(Parts {
            image,
            raw: Vec::new(),
            decoded: Some(decoded),
            bytes,
        })
    }
}

/// What a sample's parts hold, for the decoded-bytes bound: pixels, and the raw fields'
/// bytes (a measure of what they decode to).
pub fn weight(parts: &Parts) -> usize {
    parts.image.as_ref().map_or(0, sample_bytes) + parts.bytes
}

/// A batch of parts: images stacked as the default collate stacks them, each raw field
/// a column of bytes.
pub fn collate_parts(raw: RawBatch<Parts>) -> loader_core::Result<Delivered> {
    let width = raw.samples.first().map_or(0, |(_, p)| p.raw.len());
    let mut columns: Vec<Vec<Bytes>> = vec![Vec::with_capacity(raw.samples.len()); width];
    let has_images = raw.samples.iter().any(|(_, p)| p.image.is_some());
    let position = Some(raw.position);
    // Every sample of a loader has the same fields (a missing one is refused when the
    // shards are indexed), so the columns line up.
    let mut decoded = Vec::with_capacity(raw.samples.len());
    let mut take = |parts: Parts| {
        for (column, bytes) in columns.iter_mut().zip(parts.raw) {
            column.push(bytes);
        }
        decoded.extend(parts.decoded);
        parts.image
    };
    if has_images {
        // All or none have one (the loader decides); an empty sample would fail the
        // collate's shape check, naming it, rather than pass unnoticed.
        let images = raw.map(|_, parts| take(parts).unwrap_or_else(empty));
        let batch = collate(images)?;
        return Ok(Delivered {
            columns,
            decoded,
            position,
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
    let (mut labels, mut keys, mut indices) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (info, parts) in samples {
        take(parts);
        labels.push(info.label);
        indices.push(info.index);
        keys.push(info.name.unwrap_or(info.key));
    }
    let labels = HostTensor::i64(Buffer::from(labels), vec![n])
        .map_err(|e| loader_core::Error::Dataset(SourceError::Invalid(e.to_string())))?;
    Ok(Delivered {
        images: None,
        labels,
        keys,
        indices,
        epoch,
        skipped,
        columns,
        decoded,
        position,
    })
}

fn empty() -> Sample {
    Sample {
        shape: [0; 3],
        data: loader_core::decoder::SampleData::U8(Vec::new()),
    }
}
