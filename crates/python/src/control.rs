//! What the Python front end asks of a loader, whatever its sample and batch types: one
//! object-safe trait, so `PyLoader` holds a loader of images or of parts alike, and the
//! batch both deliver.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use loader_core::tokens::TokenBatch;
use loader_core::{Batch, DataLoader, HostTensor, ItemError, LoaderState, Metrics};
use pyo3::prelude::*;

/// One batch as the Python front end takes it over, from a loader of images or of parts.
pub struct Delivered {
    /// `[N, ...]` images, when the main part is an image.
    pub images: Option<HostTensor>,
    /// The labels as `labels_tensor` makes them: i64 `[N]` classes (-1 where a source has
    /// none), or f32 multi-hot or values.
    pub labels: HostTensor,
    /// Each sample's key.
    pub keys: Vec<Arc<str>>,
    /// Each sample's dataset index.
    pub indices: Vec<u64>,
    /// The epoch.
    pub epoch: u64,
    /// Samples skipped under `skip_errors`.
    pub skipped: Vec<ItemError>,
    /// Each sample's other fields, as the Python decoder returned them (loaders of parts).
    pub decoded: Vec<Py<PyAny>>,
    /// Where the batch starts in its epoch, for a loader of parts: Python batches the
    /// decoded fields after the loader has moved past it, and rewinds here when that fails.
    pub position: Option<u64>,
    /// Samples at the end that repeat other ranks' (see `BatchInfo::padding`).
    pub padding: usize,
    /// A token batch's tensors beside its labels (`input_ids`, `position_ids`,
    /// `document_ids`, `cu_seqlens`) and its longest segment; `None` for other batches.
    pub tokens: Option<(Vec<(&'static str, HostTensor)>, usize)>,
}

impl From<TokenBatch> for Delivered {
    fn from(batch: TokenBatch) -> Self {
        let tensors = vec![
            ("input_ids", batch.input_ids),
            ("position_ids", batch.position_ids),
            ("document_ids", batch.document_ids),
            ("cu_seqlens", batch.cu_seqlens),
        ];
        Self {
            images: None,
            labels: batch.labels,
            keys: batch.info.keys,
            indices: batch.info.indices,
            epoch: batch.info.epoch,
            skipped: batch.info.skipped,
            decoded: Vec::new(),
            position: None,
            padding: batch.info.padding,
            tokens: Some((tensors, batch.max_seqlen)),
        }
    }
}

impl From<Batch> for Delivered {
    fn from(batch: Batch) -> Self {
        let t = batch.into_tensors();
        Self {
            images: Some(t.images),
            labels: t.labels,
            keys: t.info.keys,
            indices: t.info.indices,
            epoch: t.info.epoch,
            skipped: t.info.skipped,
            decoded: Vec::new(),
            position: None,
            padding: t.info.padding,
            tokens: None,
        }
    }
}

/// What one wait for a batch ended with.
pub enum Waited {
    /// A batch.
    Batch(Delivered),
    /// The batch failed.
    Failed(loader_core::Error),
    /// The epoch is over.
    EndOfEpoch,
    /// Nothing yet: wait again (after letting Python's signal handlers run).
    Waiting,
    /// The loader is closed.
    Closed,
}

/// A loader as `PyLoader` drives it.
pub trait Control: Send {
    /// Wait for the next batch for at most `tick`.
    fn next_within(&mut self, runtime: &tokio::runtime::Runtime, tick: Duration) -> Waited;
    /// Batches per epoch, see [`DataLoader::len`].
    fn batches(&self) -> usize;
    /// See [`DataLoader::epoch`].
    fn epoch(&self) -> u64;
    /// See [`DataLoader::set_epoch`].
    fn set_epoch(&mut self, epoch: u64);
    /// See [`DataLoader::to_epoch_start`].
    fn to_epoch_start(&mut self) -> u64;
    /// See [`DataLoader::state`].
    fn state(&self) -> loader_core::Result<LoaderState>;
    /// See [`DataLoader::resume`].
    fn resume(&mut self, state: LoaderState) -> loader_core::Result<()>;
    /// See [`DataLoader::take_unreported_skips`].
    fn take_unreported_skips(&mut self) -> Vec<ItemError>;
    /// See [`DataLoader::metrics`].
    fn metrics(&self) -> Option<Arc<Metrics>>;
    /// See [`DataLoader::source_of`].
    fn source_of(&self, index: u64) -> Option<(usize, usize)>;
    /// See [`DataLoader::cache`].
    fn cache(&self) -> Option<loader_core::storage::layer::Cache>;
}

impl<T, B> Control for DataLoader<T, B>
where
    T: Send + 'static,
    B: Into<Delivered> + Send + 'static,
    DataLoader<T, B>: Send,
{
    fn next_within(&mut self, runtime: &tokio::runtime::Runtime, tick: Duration) -> Waited {
        match runtime.block_on(async { tokio::time::timeout(tick, StreamExt::next(self)).await }) {
            Ok(Some(Ok(batch))) => Waited::Batch(batch.into()),
            Ok(Some(Err(e))) => Waited::Failed(e),
            Ok(None) => Waited::EndOfEpoch,
            Err(_) => Waited::Waiting,
        }
    }
    fn batches(&self) -> usize {
        DataLoader::len(self)
    }
    fn epoch(&self) -> u64 {
        DataLoader::epoch(self)
    }
    fn set_epoch(&mut self, epoch: u64) {
        DataLoader::set_epoch(self, epoch);
    }
    fn to_epoch_start(&mut self) -> u64 {
        DataLoader::to_epoch_start(self)
    }
    fn state(&self) -> loader_core::Result<LoaderState> {
        DataLoader::state(self)
    }
    fn resume(&mut self, state: LoaderState) -> loader_core::Result<()> {
        DataLoader::resume(self, state)
    }
    fn take_unreported_skips(&mut self) -> Vec<ItemError> {
        DataLoader::take_unreported_skips(self)
    }
    fn metrics(&self) -> Option<Arc<Metrics>> {
        DataLoader::metrics(self)
    }
    fn source_of(&self, index: u64) -> Option<(usize, usize)> {
        DataLoader::source_of(self, index)
    }
    fn cache(&self) -> Option<loader_core::storage::layer::Cache> {
        DataLoader::cache(self).cloned()
    }
}
