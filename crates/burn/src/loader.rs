//! burn's `DataLoader` trait over a loader.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use burn_core::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn_core::data::dataset::DatasetError;
use burn_tensor::Device;
use loader_core::{DataLoaderBuilder, LoaderState};

use crate::convert::{Convert, ImageBatch, Images};
use crate::error::Error;

/// How to build the loader: the adapter calls it once, and again for each
/// [`to_device`](DataLoader::to_device) and [`slice`](DataLoader::slice), whose loaders
/// are loaders of their own.
pub type Recipe = Arc<dyn Fn() -> DataLoaderBuilder + Send + Sync>;

/// A loader as burn's [`DataLoader`]: each [`iter()`](DataLoader::iter) is one epoch
/// (after a partly read one, the next epoch starts at its beginning, as in burn and
/// PyTorch); batches are made into `O` by a [`Convert`]er on the device given.
///
/// One iterator at a time: a second `iter()` while one is alive yields [`Error::Busy`]
/// instead of waiting for it (which, on one thread, would never end).
pub struct BurnLoader<O = ImageBatch> {
    recipe: Recipe,
    convert: Arc<dyn Convert<O>>,
    device: Device,
    /// The dataset indices read, for a slice.
    range: Option<Range<usize>>,
    /// Samples per epoch.
    items: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    loader: Result<loader_core::DataLoader, Arc<loader_core::Error>>,
    /// `resume` was called: the next epoch continues from its state.
    resumed: bool,
}

impl BurnLoader<ImageBatch> {
    /// A loader of [`ImageBatch`]es on `device`.
    pub fn images(
        recipe: impl Fn() -> DataLoaderBuilder + Send + Sync + 'static,
        device: &Device,
    ) -> Result<Self, Error> {
        Self::new(recipe, Images, device)
    }
}

impl<O> BurnLoader<O> {
    /// A loader that builds its loader with `recipe` and makes each batch into `O` with
    /// `convert` on `device`. The loader is built here, so a wrong setting or an
    /// unreadable store is an error now rather than in the first epoch.
    pub fn new(
        recipe: impl Fn() -> DataLoaderBuilder + Send + Sync + 'static,
        convert: impl Convert<O> + 'static,
        device: &Device,
    ) -> Result<Self, Error> {
        let recipe: Recipe = Arc::new(recipe);
        let loader = build(&recipe, None)?;
        Ok(Self::from_parts(
            recipe,
            Arc::new(convert),
            device.clone(),
            None,
            Ok(loader),
        ))
    }

    fn from_parts(
        recipe: Recipe,
        convert: Arc<dyn Convert<O>>,
        device: Device,
        range: Option<Range<usize>>,
        loader: Result<loader_core::DataLoader, Arc<loader_core::Error>>,
    ) -> Self {
        let items = match (&loader, &range) {
            (Ok(loader), _) => loader.samples_per_epoch(),
            (Err(_), Some(range)) => range.len(),
            (Err(_), None) => 0,
        };
        Self {
            recipe,
            convert,
            device,
            range,
            items,
            inner: Mutex::new(Inner {
                loader,
                resumed: false,
            }),
        }
    }

    /// Another loader of `range` (all when `None`) on `device`, from the same recipe.
    fn rebuilt(&self, range: Option<Range<usize>>, device: &Device) -> Self {
        let loader = build(&self.recipe, range.clone()).map_err(Arc::new);
        Self::from_parts(
            Arc::clone(&self.recipe),
            Arc::clone(&self.convert),
            device.clone(),
            range,
            loader,
        )
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, Error> {
        match self.inner.try_lock() {
            Ok(inner) => Ok(inner),
            // A converter that panicked left no half-made state behind in the loader.
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(Error::Busy),
        }
    }

    /// Run `f` on the underlying loader (its metrics, summary or cache), between epochs.
    pub fn with_loader_mut<R>(
        &self,
        f: impl FnOnce(&mut loader_core::DataLoader) -> R,
    ) -> Result<R, Error> {
        let mut inner = self.lock()?;
        match &mut inner.loader {
            Ok(loader) => Ok(f(loader)),
            Err(e) => Err(Error::NotBuilt(Arc::clone(e))),
        }
    }

    /// The state to checkpoint, between epochs or after an iterator was dropped: resuming
    /// from it continues exactly where this loader stopped.
    pub fn state(&self) -> Result<LoaderState, Error> {
        self.with_loader_mut(|loader| loader.state())?
            .map_err(Error::from)
    }

    /// Continue from a saved state: the next `iter()` delivers the rest of its epoch (all
    /// of it, from a state taken at an epoch's end), and later ones the epochs after it.
    pub fn resume(&self, state: LoaderState) -> Result<(), Error> {
        let mut inner = self.lock()?;
        match &mut inner.loader {
            Ok(loader) => loader.resume(state)?,
            Err(e) => return Err(Error::NotBuilt(Arc::clone(e))),
        }
        inner.resumed = true;
        Ok(())
    }

    /// The device the batches are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// The recipe's loader, of the dataset indices in `range` (all when `None`).
fn build(
    recipe: &Recipe,
    range: Option<Range<usize>>,
) -> Result<loader_core::DataLoader, loader_core::Error> {
    match range {
        Some(range) => recipe().subset(range).build(),
        None => recipe().build(),
    }
}

impl<O> std::fmt::Debug for BurnLoader<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurnLoader")
            .field("device", &self.device)
            .field("range", &self.range)
            .field("items", &self.items)
            .finish_non_exhaustive()
    }
}

impl<O: 'static> DataLoader<O> for BurnLoader<O> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<O> + 'a> {
        let mut inner = match self.lock() {
            Ok(inner) => inner,
            Err(e) => return Box::new(Failed::new(DatasetError::new(e), self.items)),
        };
        let resumed = std::mem::take(&mut inner.resumed);
        let processed = match &mut inner.loader {
            Ok(loader) => {
                if !resumed {
                    loader.to_epoch_start();
                }
                loader.state().map_or(0, |s| s.position as usize)
            }
            Err(e) => {
                let e = DatasetError::new(Error::NotBuilt(Arc::clone(e)));
                return Box::new(Failed::new(e, self.items));
            }
        };
        Box::new(Epoch {
            inner,
            owner: self,
            processed,
        })
    }

    fn num_items(&self) -> usize {
        self.items
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        Arc::new(self.rebuilt(self.range.clone(), device))
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        // Relative to this loader's items, as burn's own slices nest.
        let base = self.range.clone().unwrap_or(0..self.items);
        let range = base.start.saturating_add(start)..base.start.saturating_add(end);
        Arc::new(self.rebuilt(Some(range), &self.device))
    }
}

/// One epoch of a [`BurnLoader`].
struct Epoch<'a, O> {
    inner: MutexGuard<'a, Inner>,
    owner: &'a BurnLoader<O>,
    processed: usize,
}

impl<O> Iterator for Epoch<'_, O> {
    type Item = Result<O, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        let loader = self.inner.loader.as_mut().ok()?;
        let Some(next) = loader.next() else {
            // A last batch whose every sample was skipped is not delivered, and burn's
            // batches have no place for its reports: they are said here, not lost.
            let skipped = loader.take_unreported_skips();
            self.processed += skipped.len();
            for e in &skipped {
                tracing::warn!("skipped (the epoch's last batch had no sample left): {e}");
            }
            return None;
        };
        match next {
            Ok(batch) => {
                self.processed += batch.len() + batch.info.skipped.len();
                Some(self.owner.convert.convert(batch, &self.owner.device))
            }
            // The loader ends the pass after a failed batch; its state points at that batch.
            Err(e) => Some(Err(DatasetError::new(e))),
        }
    }
}

impl<O> DataLoaderIterator<O> for Epoch<'_, O> {
    fn progress(&self) -> Progress {
        Progress::new(
            self.processed.min(self.owner.items),
            self.owner.items,
            Some("items".to_string()),
        )
    }
}

/// An epoch that is one error.
struct Failed<O> {
    error: Option<DatasetError>,
    items: usize,
    output: std::marker::PhantomData<fn() -> O>,
}

impl<O> Failed<O> {
    fn new(error: DatasetError, items: usize) -> Self {
        Self {
            error: Some(error),
            items,
            output: std::marker::PhantomData,
        }
    }
}

impl<O> Iterator for Failed<O> {
    type Item = Result<O, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.error.take().map(Err)
    }
}

impl<O> DataLoaderIterator<O> for Failed<O> {
    fn progress(&self) -> Progress {
        Progress::new(0, self.items, Some("items".to_string()))
    }
}
