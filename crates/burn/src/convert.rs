//! A loader batch made into burn tensors on a device.

use burn_core::data::dataset::DatasetError;
use burn_tensor::{AllocationProperty, Bytes, DType, Device, Int, Tensor, TensorData};
use loader_core::{Batch, BatchInfo, HostTensor};

use crate::error::Error;

/// Turns a loader [`Batch`] into what the training step takes, on `device`: burn's
/// `Batcher` for a whole batch. Closures `Fn(Batch, &Device) -> Result<O, DatasetError>`
/// are converters too.
pub trait Convert<O>: Send + Sync {
    /// The batch as `O` on `device`.
    fn convert(&self, batch: Batch, device: &Device) -> Result<O, DatasetError>;
}

impl<O, F> Convert<O> for F
where
    F: Fn(Batch, &Device) -> Result<O, DatasetError> + Send + Sync,
{
    fn convert(&self, batch: Batch, device: &Device) -> Result<O, DatasetError> {
        self(batch, device)
    }
}

/// An image classification batch as burn tensors, with where each sample came from.
#[derive(Debug)]
pub struct ImageBatch {
    /// `[N, C, H, W]` floats after a tensor transform; `[N, H, W, C]` (values 0-255) for
    /// decoded images without one.
    pub images: Tensor<4>,
    /// `[N]` class indices.
    pub targets: Tensor<1, Int>,
    /// Where its samples came from, which were skipped, which are padding.
    pub info: BatchInfo,
}

/// The default converter: a batch as an [`ImageBatch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Images;

impl Convert<ImageBatch> for Images {
    fn convert(&self, batch: Batch, device: &Device) -> Result<ImageBatch, DatasetError> {
        let parts = batch.into_tensors();
        Ok(ImageBatch {
            images: images_tensor(parts.images, device)?,
            targets: targets_tensor(parts.labels, device)?,
            info: parts.info,
        })
    }
}

/// The tensor's values as burn data, sharing its memory: the buffer goes back to the
/// loader once burn drops the last tensor made from them.
fn data(tensor: HostTensor) -> Result<TensorData, DatasetError> {
    let dtype = match tensor.dtype() {
        loader_core::DType::U8 => DType::U8,
        loader_core::DType::F32 => DType::F32,
        loader_core::DType::I64 => DType::I64,
        other => return Err(DatasetError::new(Error::DType(other))),
    };
    let shape = tensor.shape().to_vec();
    let shared = bytes::Bytes::from_owner(tensor);
    Ok(TensorData::from_bytes(
        Bytes::from_shared(shared, AllocationProperty::Native),
        shape,
        dtype,
    ))
}

/// Images as a burn float tensor on `device`: burn's flex CPU backend takes the batch's
/// buffer as it is (f32 images); other backends copy it to their memory, and u8 images
/// are converted to floats.
pub fn images_tensor(images: HostTensor, device: &Device) -> Result<Tensor<4>, DatasetError> {
    Ok(Tensor::from_data(data(of_rank(images, 4)?)?, device))
}

/// Labels as a burn int tensor on `device`, in the device's int type. Labels that are not
/// class indices (multi-hot or values, f32) are refused, not truncated to integers.
pub fn targets_tensor(labels: HostTensor, device: &Device) -> Result<Tensor<1, Int>, DatasetError> {
    if labels.dtype() != loader_core::DType::I64 {
        return Err(DatasetError::new(Error::NotClasses {
            dtype: labels.dtype(),
            shape: labels.shape().to_vec(),
        }));
    }
    Ok(Tensor::from_data(data(of_rank(labels, 1)?)?, device))
}

/// A float tensor of `D` dimensions on `device`: e.g. multi-hot `[N, classes]` or values
/// `[N]`/`[N, K]` labels of a multi-label or values manifest.
pub fn float_tensor<const D: usize>(
    values: HostTensor,
    device: &Device,
) -> Result<Tensor<D>, DatasetError> {
    Ok(Tensor::from_data(data(of_rank(values, D)?)?, device))
}

/// The tensor if it has `rank` dimensions. The collate makes 4-D images and 1-D labels; a
/// hand-made batch of another shape is an error here, where burn would panic.
fn of_rank(tensor: HostTensor, rank: usize) -> Result<HostTensor, DatasetError> {
    if tensor.shape().len() == rank {
        Ok(tensor)
    } else {
        Err(DatasetError::new(Error::Rank {
            rank,
            shape: tensor.shape().to_vec(),
        }))
    }
}
