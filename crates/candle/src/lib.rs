//! candle trains straight from loader: [`CandleLoader`] yields each batch as
//! [`candle_core::Tensor`]s (images and labels) on a device, and [`to_candle`] makes one
//! batch into them; [`tokens_to_candle`] makes a batch of packed token rows into its
//! tensors. On the CPU the batch's values move into the tensor without a copy.
//!
//! ```
//! use candle_core::{DType, Device};
//! use loader_candle::CandleLoader;
//! use loader_core::{DataLoader, Dataset, Pipeline, from_url};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! loader_testkit::DatasetSpec::tiny(12, 3).write(dir.path())?;
//! let store = from_url(&dir.path().to_string_lossy(), Vec::<(String, String)>::new())?;
//! let dataset = Dataset::image_folder_blocking(&*store)?;
//! let loader = DataLoader::builder(store, dataset)
//!     .batch_size(5)
//!     .shuffle(true)
//!     .transform(Pipeline::imagenet_eval())
//!     .build()?;
//!
//! let mut train = CandleLoader::new(loader, &Device::Cpu);
//! for batch in &mut train {
//!     let batch = batch?;
//!     assert_eq!(batch.images.dims()[1..], [3, 224, 224]);
//!     assert_eq!(batch.labels.dtype(), DType::I64);
//! }
//! // One pass is one epoch, as the loader's; the state is the loader's.
//! assert_eq!(train.state()?.epoch, 1);
//! # Ok(())
//! # }
//! ```
//!
//! Why moving and not sharing: a CPU tensor of candle owns a `Vec`, so the batch's buffer
//! leaves the loader's pool, which allocates a new one for a later batch; copying into
//! candle would allocate as much and copy too. docs/benchmarks.md ("burn and candle") measures
//! what the lost reuse costs per batch.

use candle_core::{Device, Tensor};
use loader_core::tokens::TokenBatch;
use loader_core::{Batch, BatchInfo, DataLoader, HostTensor, HostVec, LoaderState};

/// Why a batch could not be had as candle tensors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loader failed (a storage, decode or state error, with its key and backend).
    #[error(transparent)]
    Loader(#[from] loader_core::Error),
    /// candle refused the tensor (e.g. the device is out of memory).
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

/// A batch as candle tensors, with where each sample came from.
#[derive(Debug)]
pub struct CandleBatch {
    /// `[N, C, H, W]` f32 after a tensor transform; `[N, H, W, C]` u8 without one.
    pub images: Tensor,
    /// `[N]` i64 class indices; f32 `[N, classes]` multi-hot, or `[N]`/`[N, K]` values, for
    /// a multi-label or values manifest.
    pub labels: Tensor,
    /// Where its samples came from, which were skipped, which are padding.
    pub info: BatchInfo,
}

/// `batch` as candle tensors on `device`: moved into them on the CPU, copied to the
/// device's memory elsewhere.
pub fn to_candle(batch: Batch, device: &Device) -> Result<CandleBatch, Error> {
    let parts = batch.into_tensors();
    Ok(CandleBatch {
        images: tensor(parts.images, device)?,
        labels: tensor(parts.labels, device)?,
        info: parts.info,
    })
}

/// A batch of packed token rows as candle tensors, with where each row came from.
#[derive(Debug)]
pub struct CandleTokenBatch {
    /// `[B, L]` i64 ids trained on.
    pub input_ids: Tensor,
    /// `[B, L]` i64: the id each position predicts, or the ignore index.
    pub labels: Tensor,
    /// `[B, L]` i64: each token's place in its document.
    pub position_ids: Tensor,
    /// `[B, L]` i64: each token's document (-1 for padding).
    pub document_ids: Tensor,
    /// `[S + 1]` u32: where each document segment starts in the flattened batch, as
    /// candle-flash-attn's varlen kernels take `seqlens_q`.
    pub cu_seqlens: Tensor,
    /// The longest segment.
    pub max_seqlen: usize,
    /// Where its rows came from, which were skipped, which are padding.
    pub info: BatchInfo,
}

/// `batch` as candle tensors on `device` (the per-token fields moved on the CPU;
/// `cu_seqlens`, int32 in the batch, as u32, candle having no int32).
pub fn tokens_to_candle(batch: TokenBatch, device: &Device) -> Result<CandleTokenBatch, Error> {
    let cu = batch.cu_seqlens.as_i32().unwrap_or_default();
    let cu: Vec<u32> = cu.iter().map(|&c| c.max(0) as u32).collect();
    Ok(CandleTokenBatch {
        cu_seqlens: {
            let n = cu.len();
            Tensor::from_vec(cu, n, device)?
        },
        input_ids: tensor(batch.input_ids, device)?,
        labels: tensor(batch.labels, device)?,
        position_ids: tensor(batch.position_ids, device)?,
        document_ids: tensor(batch.document_ids, device)?,
        max_seqlen: batch.max_seqlen,
        info: batch.info,
    })
}

/// A host tensor as a candle tensor of its element type and shape.
pub fn tensor(host: HostTensor, device: &Device) -> Result<Tensor, Error> {
    let (shape, dtype) = (host.shape().to_vec(), host.dtype());
    Ok(match host.into_vec() {
        HostVec::F32(values) => Tensor::from_vec(values, shape, device)?,
        HostVec::U8(values) => Tensor::from_vec(values, shape, device)?,
        HostVec::I64(values) => Tensor::from_vec(values, shape, device)?,
        _ => {
            return Err(
                candle_core::Error::Msg(format!("no candle type for {dtype} values")).into(),
            );
        }
    })
}

/// A loader whose batches are candle tensors on a device: a blocking `Iterator` of
/// [`CandleBatch`]es with the loader's semantics (one pass is one epoch; `state()` and
/// `resume()` continue an epoch exactly).
#[derive(Debug)]
pub struct CandleLoader {
    loader: DataLoader,
    device: Device,
}

impl CandleLoader {
    /// Batches of `loader` on `device`.
    pub fn new(loader: DataLoader, device: &Device) -> Self {
        Self {
            loader,
            device: device.clone(),
        }
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        self.loader.len()
    }

    /// Whether an epoch has no batch (never, for a built loader).
    pub fn is_empty(&self) -> bool {
        self.loader.is_empty()
    }

    /// The state to checkpoint; see [`DataLoader::state`].
    pub fn state(&self) -> Result<LoaderState, Error> {
        Ok(self.loader.state()?)
    }

    /// Continue from a saved state; see [`DataLoader::resume`].
    pub fn resume(&mut self, state: LoaderState) -> Result<(), Error> {
        Ok(self.loader.resume(state)?)
    }

    /// The epoch the next pass reads; see [`DataLoader::set_epoch`].
    pub fn set_epoch(&mut self, epoch: u64) {
        self.loader.set_epoch(epoch);
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.loader.epoch()
    }

    /// The device the batches are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The loader (its metrics, summary or cache).
    pub fn loader(&self) -> &DataLoader {
        &self.loader
    }

    /// The loader, to change (e.g. `to_epoch_start`).
    pub fn loader_mut(&mut self) -> &mut DataLoader {
        &mut self.loader
    }

    /// The loader back.
    pub fn into_inner(self) -> DataLoader {
        self.loader
    }
}

impl Iterator for CandleLoader {
    type Item = Result<CandleBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let Some(next) = self.loader.next() else {
            // A last batch whose every sample was skipped is not delivered: its reports
            // are said here, not lost (`loader().take_unreported_skips()` takes them first).
            for e in self.loader.take_unreported_skips() {
                tracing::warn!("skipped (the epoch's last batch had no sample left): {e}");
            }
            return None;
        };
        let batch = match next {
            Ok(batch) => batch,
            Err(e) => return Some(Err(e.into())),
        };
        Some(to_candle(batch, &self.device))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.loader.size_hint()
    }
}
