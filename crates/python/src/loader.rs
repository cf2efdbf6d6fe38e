//! `loader_ml._native.Loader`: loader-core's DataLoader behind a lock, waited on with the
//! GIL released and Ctrl-C checked between short waits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use loader_core::storage::layer::{CacheConfig, CachePolicy, RetryConfig};
use loader_core::{
    DataLoader, DistributedSampler, ErrorPolicy, Fetch, LoaderState, ShardOrder, collate,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::buffer::HostBuffer;
use crate::dataset::PyDataset;
use crate::errors::{self, Failure, Kind};
use crate::transform::{self, Step};

/// How long one wait for a batch lasts with the GIL released before Python's signal
/// handlers get a chance to run (Ctrl-C raises within about this long).
const TICK: Duration = Duration::from_millis(50);

/// A DataLoader over a [`PyDataset`]; the Python class `loader_ml.DataLoader` wraps it.
#[pyclass(module = "loader_ml._native", name = "Loader", frozen)]
pub struct PyLoader {
    /// `None` once closed.
    inner: Mutex<Option<DataLoader>>,
    closed: AtomicBool,
    /// Drives the loader's stream for one tick at a time.
    runtime: tokio::runtime::Runtime,
    backend: String,
    samples: usize,
}

/// What one wait ended with.
enum Waited {
    Batch(loader_core::BatchTensors),
    Failed(loader_core::Error),
    EndOfEpoch,
    Waiting,
    Closed,
}

impl PyLoader {
    fn lock(&self) -> MutexGuard<'_, Option<DataLoader>> {
        // A panic while the lock was held cannot leave the loader half-changed in a way
        // that matters here: its own state is updated only after a batch is complete.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the loader with the GIL released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DataLoader) -> R + Send,
    ) -> PyResult<R> {
        py.detach(|| self.lock().as_mut().map(f))
            .ok_or_else(|| PyRuntimeError::new_err("the loader is closed"))
    }

    fn wait(&self) -> Waited {
        if self.closed.load(Ordering::Acquire) {
            return Waited::Closed;
        }
        let mut guard = self.lock();
        let Some(loader) = guard.as_mut() else {
            return Waited::Closed;
        };
        match self
            .runtime
            .block_on(async { tokio::time::timeout(TICK, StreamExt::next(loader)).await })
        {
            Ok(Some(Ok(batch))) => Waited::Batch(batch.into_tensors()),
            Ok(Some(Err(e))) => Waited::Failed(e),
            Ok(None) => Waited::EndOfEpoch,
            Err(_) => Waited::Waiting,
        }
    }
}

#[pymethods]
impl PyLoader {
    /// See `loader_ml.DataLoader` for the settings.
    #[new]
    #[pyo3(signature = (
        dataset, *, batch_size = 1, shuffle = false, seed = 0, drop_last = false,
        transform = None, steps = None, transform_fn = None, num_workers = None,
        max_in_flight = None, prefetch_factor = None, rank = None, world_size = None,
        skip_errors = None, shard_order = "local", shuffle_buffer = None, cache_dir = None,
        cache_size = None, cache_memory = None, cache_policy = "future", epochs = None,
        request_timeout = None, max_retries = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: &PyDataset,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
        transform: Option<String>,
        steps: Option<Vec<Step>>,
        transform_fn: Option<Py<PyAny>>,
        num_workers: Option<usize>,
        max_in_flight: Option<usize>,
        prefetch_factor: Option<usize>,
        rank: Option<usize>,
        world_size: Option<usize>,
        skip_errors: Option<usize>,
        shard_order: &str,
        shuffle_buffer: Option<usize>,
        cache_dir: Option<PathBuf>,
        cache_size: Option<u64>,
        cache_memory: Option<u64>,
        cache_policy: &str,
        epochs: Option<u64>,
        request_timeout: Option<f64>,
        max_retries: Option<u32>,
    ) -> PyResult<Self> {
        let backend = dataset.store.name().to_owned();
        let config = |e: String| errors::config(e);
        let (rank, world_size) = match (rank, world_size) {
            (Some(r), Some(w)) => (r, w),
            (None, None) => {
                let env = DistributedSampler::from_env(dataset.dataset.len())
                    .and_then(|b| b.build())
                    .map_err(|e| config(format!("rank and world size: {e}")))?;
                (env.rank(), env.world_size())
            }
            _ => {
                return Err(config(
                    "give rank and world_size together, or neither".into(),
                ));
            }
        };
        let shard_order = match shard_order {
            "local" => ShardOrder::Local,
            "global" => ShardOrder::Global,
            other => return Err(config(format!("shard_order {other:?}: local or global"))),
        };
        let mut builder = DataLoader::builder(dataset.store.clone(), dataset.dataset.clone())
            .batch_size(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .drop_last(drop_last)
            .shard_order(shard_order)
            .error_policy(skip_errors.map_or(ErrorPolicy::Fail, |max_failures| {
                ErrorPolicy::Skip { max_failures }
            }));
        if world_size > 1 {
            builder = builder.distributed(rank, world_size);
        }
        if let Some(threads) = num_workers {
            // PyTorch's 0 means "in the main process": here, one decode thread.
            builder = builder.decode_threads(threads.max(1));
        }
        if let Some(max_in_flight) = max_in_flight {
            builder = builder.fetch(Fetch::Async { max_in_flight });
        }
        if let Some(batches) = prefetch_factor {
            builder = builder.prefetch(batches.max(1));
        }
        if let Some(samples) = shuffle_buffer {
            builder = builder.shuffle_buffer(samples);
        }
        if let Some(epochs) = epochs {
            builder = builder.epochs(epochs);
        }
        if let Some(seconds) = request_timeout {
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(config(format!(
                    "request_timeout {seconds}: seconds above 0"
                )));
            }
            builder = builder.request_timeout(Some(Duration::from_secs_f64(seconds)));
        }
        if let Some(retries) = max_retries {
            builder = builder.retry(Some(RetryConfig {
                max_attempts: retries.saturating_add(1),
                ..RetryConfig::default()
            }));
        }
        if cache_dir.is_some() || cache_memory.is_some_and(|m| m > 0) {
            let defaults = CacheConfig::default();
            let policy: CachePolicy = cache_policy.parse().map_err(config)?;
            builder = builder.cache(CacheConfig {
                dir: cache_dir,
                memory_bytes: cache_memory.unwrap_or(defaults.memory_bytes),
                disk_bytes: cache_size.unwrap_or(defaults.disk_bytes),
                policy,
                ..defaults
            });
        }
        let pipeline = transform::pipeline(transform.as_deref(), steps, seed)?;
        let builder = match transform_fn {
            Some(callable) => {
                if transform.is_some() {
                    return Err(PyValueError::new_err(
                        "give transform as a name, steps or a callable, one of them",
                    ));
                }
                builder.map(transform::python_stage(callable, pipeline), collate)
            }
            None => builder.transform(pipeline),
        };
        let loader = py
            .detach(|| builder.build())
            .map_err(|e| errors::raise(&e, &backend))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a runtime: {e}")))?;
        Ok(Self {
            inner: Mutex::new(Some(loader)),
            closed: AtomicBool::new(false),
            runtime,
            backend,
            samples: dataset.dataset.len(),
        })
    }

    /// The next batch of this epoch as `(images, labels, keys, indices, epoch, skipped)`,
    /// or `None` at the end of the epoch (the next call starts the next one). Waits with
    /// the GIL released; Ctrl-C interrupts the wait.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        loop {
            match py.detach(|| self.wait()) {
                Waited::Waiting => py.check_signals()?,
                Waited::EndOfEpoch => return Ok(None),
                Waited::Closed => return Err(PyRuntimeError::new_err("the loader is closed")),
                Waited::Failed(e) => return Err(errors::raise(&e, &self.backend)),
                Waited::Batch(batch) => {
                    let skipped = PyList::empty(py);
                    for e in &batch.skipped {
                        skipped.append(Failure::of_item(e, &self.backend).into_py(py).value(py))?;
                    }
                    let keys: Vec<&str> = batch.keys.iter().map(|k| &**k).collect();
                    let tuple = (
                        Bound::new(py, HostBuffer::new(batch.images))?,
                        Bound::new(py, HostBuffer::new(batch.labels))?,
                        keys,
                        batch.indices,
                        batch.epoch,
                        skipped,
                    )
                        .into_pyobject(py)?;
                    return Ok(Some(tuple));
                }
            }
        }
    }

    /// Batches per epoch.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |l| l.len())
    }

    /// Samples in the dataset.
    #[getter]
    fn num_samples(&self) -> usize {
        self.samples
    }

    /// The epoch the next batch belongs to.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |l| l.epoch())
    }

    /// Read `epoch` next (PyTorch's `sampler.set_epoch`); the epoch the loader is in
    /// keeps its position.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.with(py, |l| l.set_epoch(epoch))
    }

    /// Where the loader stands, as a dict to checkpoint: `epoch` and `position` (samples
    /// of the epoch delivered), with the dataset's size to check a resume against.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self
            .with(py, |l| l.state())?
            .map_err(|e| errors::raise(&e, &self.backend))?;
        let dict = PyDict::new(py);
        dict.set_item("epoch", state.epoch)?;
        dict.set_item("position", state.position)?;
        dict.set_item("num_samples", self.samples)?;
        Ok(dict)
    }

    /// Continue from a `state_dict()`: exactly the samples not delivered before it.
    fn load_state_dict(&self, py: Python<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let get = |name: &str| -> PyResult<u64> {
            state
                .get_item(name)?
                .ok_or_else(|| {
                    Failure::new(Kind::Config, format!("state_dict has no {name:?}")).into_py(py)
                })?
                .extract()
        };
        let (epoch, position) = (get("epoch")?, get("position")?);
        if let Some(n) = state.get_item("num_samples")? {
            let n: usize = n.extract()?;
            if n != self.samples {
                return Err(Failure::new(
                    Kind::Config,
                    format!(
                        "the state is of a dataset of {n} samples, this loader's has {}",
                        self.samples
                    ),
                )
                .into_py(py));
            }
        }
        self.with(py, |l| l.resume(LoaderState { epoch, position }))?
            .map_err(|e| errors::raise(&e, &self.backend))
    }

    /// The engine's per-stage summary of the run so far (fetch, decode, waits), or `None`
    /// before the first batch.
    fn summary(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |l| l.metrics().map(|m| m.summary().to_string()))
    }

    /// Stop the loader: in-flight requests are cancelled and its threads joined. A thread
    /// waiting in `next_batch` gets an error instead of a batch.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        py.detach(|| drop(self.lock().take()));
    }
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        let loader = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // The engine joins its decode threads, which may be waiting for the GIL to run a
        // Python transform: let go of it while they finish.
        Python::attach(|py| py.detach(move || drop(loader)));
    }
}
