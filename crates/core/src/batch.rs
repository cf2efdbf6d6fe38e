//! A batch: one contiguous buffer plus its shape and labels, and where its samples came
//! from ([`BatchInfo`], the one record every form of a batch carries: [`Batch`],
//! [`BatchTensors`], burn's and candle's); and the same taken apart into tensors for a
//! foreign owner.

use std::sync::{Arc, Mutex};

use loader_decoder::{Sample, SampleData};
use loader_scheduler::{ItemError, RawBatch};

use crate::Result;
use crate::buffer::{Buffer, BufferPool};
use crate::error::CollateError;
use crate::export::{HostTensor, Values};
use crate::labels::labels_tensor;
use crate::memory::BatchMemory;

/// The values of a batch, in one contiguous buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchData {
    /// f32 tensors, `[N, C, H, W]`.
    F32(Buffer<f32>),
    /// u8 images, `[N, H, W, C]`.
    U8(Buffer<u8>),
}

/// One batch of samples, ready to hand to a model without another copy.
#[derive(Debug)]
pub struct Batch {
    /// The values.
    pub data: BatchData,
    /// `[N, C, H, W]` for f32 tensors, `[N, H, W, C]` for u8 images.
    pub shape: [usize; 4],
    /// The samples' labels: i64 `[N]` class indices (-1 where the source gives none), or
    /// f32 multi-hot `[N, classes]`, values `[N]` or `[N, K]`, as [`labels_tensor`] makes
    /// them from the dataset's kind of label.
    pub labels: HostTensor,
    /// Where its samples came from, which were skipped, which are padding.
    pub info: BatchInfo,
}

/// Where a batch's samples came from: what every form of a batch carries beside its values
/// (a [`Batch`], its [`BatchTensors`], burn's and candle's batches).
#[derive(Debug, Default)]
pub struct BatchInfo {
    /// Dataset index of each sample.
    pub indices: Vec<u64>,
    /// Each sample's key: its object's, or its name within a shard (WebDataset's key).
    pub keys: Vec<Arc<str>>,
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Samples that failed and were skipped (under `ErrorPolicy::Skip`), with their errors:
    /// this batch's, and those of batches before it that had no sample left.
    pub skipped: Vec<ItemError>,
    /// How many samples at the end repeat samples other ranks read: only in an epoch's last
    /// global batch when it holds fewer samples than there are ranks, so that every rank
    /// still takes a step (mask them out of the loss to count each sample once).
    pub padding: usize,
}

impl Batch {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.shape[0]
    }

    /// Whether it holds no sample (never for a loader's batches: one whose every sample
    /// was skipped is not delivered, see `DataLoader::take_unreported_skips`).
    pub fn is_empty(&self) -> bool {
        self.shape[0] == 0
    }

    /// The f32 values, if this is a tensor batch.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            BatchData::F32(v) => Some(v),
            BatchData::U8(_) => None,
        }
    }

    /// The u8 values, if this is an image batch.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            BatchData::U8(v) => Some(v),
            BatchData::F32(_) => None,
        }
    }

    /// A zero-copy `ndarray` view of an f32 batch, `[N, C, H, W]`.
    #[cfg(feature = "ndarray")]
    pub fn ndarray_f32(&self) -> Option<ndarray::ArrayView4<'_, f32>> {
        let [n, c, h, w] = self.shape;
        ndarray::ArrayView4::from_shape((n, c, h, w), self.as_f32()?).ok()
    }

    /// A zero-copy `ndarray` view of a u8 batch, `[N, H, W, C]`.
    #[cfg(feature = "ndarray")]
    pub fn ndarray_u8(&self) -> Option<ndarray::ArrayView4<'_, u8>> {
        let [n, h, w, c] = self.shape;
        ndarray::ArrayView4::from_shape((n, h, w, c), self.as_u8()?).ok()
    }
}

/// The default collate: stack equally shaped samples into one buffer. Samples of
/// different shapes cannot share a buffer; the error names the first odd one's key.
/// (A [`DataLoader`](crate::DataLoader) collates the same way into buffers it reuses.)
pub fn collate(raw: RawBatch<Sample>) -> Result<Batch> {
    collate_into(raw, &BufferPool::default())
}

/// [`collate`] into memory `memory` lends (e.g. torch's pinned allocator): the batch's
/// values are written there once, and the block goes back to its lender when the batch is
/// dropped.
pub fn collate_in(raw: RawBatch<Sample>, memory: Arc<dyn BatchMemory>) -> Result<Batch> {
    collate_into(
        raw,
        &BufferPool::lent_by(Arc::new(Mutex::new(Some(memory)))),
    )
}

/// [`collate`] into a buffer of `pool`, to which the batch's buffer returns when dropped;
/// the samples' buffers go to `pool` at once, for the decode threads.
pub(crate) fn collate_into(raw: RawBatch<Sample>, pool: &BufferPool) -> Result<Batch> {
    let n = raw.samples.len();
    let shape = raw.samples.first().map(|(_, s)| s.shape);
    let len = n * shape.map_or(0, |[a, b, c]| a * b * c);
    let is_u8 = matches!(raw.samples.first(), Some((_, s)) if matches!(s.data, SampleData::U8(_)));
    let labels = labels_tensor(raw.samples.iter().map(|(info, _)| info))?;
    let mut indices = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    let (mut f32s, mut u8s) = if is_u8 {
        (None, Some(pool.u8s(len).map_err(CollateError::Memory)?))
    } else {
        (Some(pool.f32s(len).map_err(CollateError::Memory)?), None)
    };
    for (info, sample) in raw.samples {
        if Some(sample.shape) != shape {
            return Err(CollateError::Shape {
                sample: info.to_string(),
                shape: sample.shape,
                first: shape.unwrap_or_default(),
            }
            .into());
        }
        match (sample.data, &mut f32s, &mut u8s) {
            (SampleData::F32(v), Some(batch), _) => {
                batch.push(&v).map_err(CollateError::Memory)?;
                pool.f32_samples.put(v);
            }
            (SampleData::U8(v), _, Some(batch)) => {
                batch.push(&v).map_err(CollateError::Memory)?;
                pool.u8_samples.put(v);
            }
            _ => {
                return Err(CollateError::MixedOutput {
                    sample: info.to_string(),
                }
                .into());
            }
        }
        indices.push(info.index);
        keys.push(info.name.unwrap_or(info.key));
    }
    let [a, b, c] = shape.unwrap_or_default();
    let data = match (f32s, u8s) {
        (_, Some(u8s)) => BatchData::U8(u8s.finish()),
        (Some(f32s), None) => BatchData::F32(f32s.finish()),
        (None, None) => BatchData::F32(Buffer::from(Vec::new())),
    };
    Ok(Batch {
        data,
        shape: [n, a, b, c],
        labels,
        info: BatchInfo {
            indices,
            keys,
            epoch: raw.epoch,
            skipped: raw.skipped,
            padding: raw.padding,
        },
    })
}

/// A [`Batch`] taken apart for a foreign owner: images and labels as [`HostTensor`]s, the
/// rest as it was.
#[derive(Debug)]
pub struct BatchTensors {
    /// `[N, C, H, W]` f32 tensors or `[N, H, W, C]` u8 images, as the batch held them.
    pub images: HostTensor,
    /// The labels: i64 `[N]` classes, or f32 as [`Batch::labels`] says.
    pub labels: HostTensor,
    /// Where its samples came from, as the batch said.
    pub info: BatchInfo,
}

impl Batch {
    /// The batch as [`HostTensor`]s, without copying its values; its buffer still goes back
    /// to the loader when the images tensor is dropped.
    pub fn into_tensors(self) -> BatchTensors {
        let values = match self.data {
            BatchData::F32(v) => Values::F32(v),
            BatchData::U8(v) => Values::U8(v),
        };
        let images = HostTensor::shaped_or_flat(values, self.shape.to_vec());
        BatchTensors {
            images,
            labels: self.labels,
            info: self.info,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::export::DType;

    #[test]
    fn a_batch_hands_over_its_buffer_and_labels() {
        let values: Vec<u8> = (0..2 * 2 * 2 * 3).map(|v| v as u8).collect();
        let at = values.as_ptr();
        let batch = Batch {
            data: BatchData::U8(Buffer::from(values)),
            shape: [2, 2, 2, 3],
            labels: HostTensor::i64(Buffer::from(vec![4, 9]), vec![2]).unwrap(),
            info: BatchInfo {
                indices: vec![10, 11],
                keys: vec!["a".into(), "b".into()],
                epoch: 3,
                ..BatchInfo::default()
            },
        };
        let mut t = batch.into_tensors();
        assert_eq!(t.images.as_bytes().as_ptr(), at, "no copy");
        assert_eq!(t.images.as_bytes_mut().as_ptr(), at);
        assert_eq!(
            (t.images.shape(), t.images.dtype()),
            (&[2, 2, 2, 3][..], DType::U8)
        );
        assert_eq!(t.labels.as_i64(), Some(&[4i64, 9][..]));
        assert_eq!((t.labels.shape(), t.info.epoch), (&[2][..], 3));
    }
}
