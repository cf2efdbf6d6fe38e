//! `loader_ml._native.Loader`: loader-core's DataLoader behind a lock, waited on with the
//! GIL released and Ctrl-C checked between short waits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use loader_core::{DataLoader, Launch, LoaderOptions, LoaderState};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::buffer::HostBuffer;
use crate::build::{self, Stages};
use crate::control::{Control, Waited};
use crate::dataset::PyDataset;
use crate::errors::{self, Failure, Kind};
use crate::{pinned, transform};

/// How long one wait for a batch lasts with the GIL released before Python's signal
/// handlers get a chance to run (Ctrl-C raises within about this long).
const TICK: Duration = Duration::from_millis(50);

/// Every loader option: `(key, default, doc)`, as `LoaderOptions::keys` lists them; the
/// Python package checks its keywords cover them.
#[pyfunction]
pub fn option_keys() -> Vec<(String, String, &'static str)> {
    LoaderOptions::keys()
        .into_iter()
        .map(|k| (k.key, k.default, k.doc))
        .collect()
}

/// This process's rank and world size as its launcher (torchrun, SLURM, MPI) says:
/// `(rank, world_size)`, `(0, 1)` without one; a launcher's contradiction raises.
#[pyfunction]
pub fn launch() -> PyResult<(usize, usize)> {
    let launch = Launch::from_env()
        .map_err(|e| crate::errors::config(format!("rank and world size: {e}")))?;
    Ok((launch.rank, launch.world_size))
}

/// A DataLoader over one [`PyDataset`] or a mixture of several; the Python class
/// `loader_ml.DataLoader` wraps it.
#[pyclass(module = "loader_ml._native", name = "Loader", frozen)]
pub struct PyLoader {
    /// `None` once closed.
    inner: Mutex<Option<Box<dyn Control>>>,
    closed: AtomicBool,
    /// Drives the loader's stream for one tick at a time; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    backend: String,
    samples: usize,
    /// Batches per epoch (`usize::MAX`: an endless epoch), kept here so that `len()` takes
    /// no lock; a resume into another mixture changes it.
    batches: AtomicUsize,
    /// This process's share: (rank, world size).
    ranks: (usize, usize),
    /// Threads of its decode pool (given, or the default share of the node's cores).
    decode_threads: usize,
    /// The process that made the loader: its threads exist there only.
    pid: u32,
    /// The next pass continues where the loader stands (a resume), rather than starting an
    /// epoch as a new `iter()` does.
    pinned: AtomicBool,
    /// A `BaseException` that is not an `Exception` (KeyboardInterrupt, SystemExit) raised
    /// by the Python transform: it stops the loader and is raised as it is.
    fatal: transform::Fatal,
}

impl PyLoader {
    /// Refuse to run in a process forked from the one that made the loader: its threads
    /// (runtime, fetch, decode) do not exist there, so a wait would never end.
    fn check_process(&self) -> PyResult<()> {
        let now = std::process::id();
        if now == self.pid {
            return Ok(());
        }
        Err(errors::config(format!(
            "this loader was made in process {} and is used in process {now}, forked from \
             it; its fetch and decode threads do not exist here, so it cannot run. Make the \
             loader in the process that iterates it: give torch's DataLoader \
             `loader.as_iterable_dataset()` (each worker makes its own loader and reads its \
             share), or iterate the loader directly instead of under torch's DataLoader \
             with num_workers > 0 (it fetches and decodes on threads of its own)",
            self.pid
        )))
    }

    /// The transform's `KeyboardInterrupt` or `SystemExit`, if one was raised: the loader
    /// stops and it is raised again here, whatever `skip_errors` says.
    fn raise_fatal(&self, py: Python<'_>) -> PyResult<()> {
        let Some(err) = self.fatal.take() else {
            return Ok(());
        };
        self.close(py);
        Err(err)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Box<dyn Control>>> {
        // A panic while the lock was held cannot leave the loader half-changed in a way
        // that matters here: its own state is updated only after a batch is complete.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the loader with the GIL released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut dyn Control) -> R + Send,
    ) -> PyResult<R> {
        py.detach(|| self.lock().as_mut().map(|l| f(&mut **l)))
            .ok_or_else(|| PyRuntimeError::new_err("the loader is closed"))
    }

    fn wait(&self) -> Waited {
        if self.closed.load(Ordering::Acquire) {
            return Waited::Closed;
        }
        let mut guard = self.lock();
        let (Some(loader), Some(runtime)) = (guard.as_mut(), self.runtime.as_ref()) else {
            return Waited::Closed;
        };
        loader.next_within(runtime, TICK)
    }
}

#[pymethods]
impl PyLoader {
    /// See `loader_ml.DataLoader` for the settings: `options` holds the loader's options
    /// by key (`LoaderOptions::set`), the transform comes apart. With `decode_fields`,
    /// each sample's members (and its main part when `main_image` is false: it is then not
    /// decoded, and no transform may be given) are decoded by that function on the
    /// decode threads (see `parts::FieldDecoder`), and batches carry what it returned.
    #[new]
    #[pyo3(signature = (
        datasets, *, options, weights = None, transform = None, steps = None,
        transform_fn = None, main_image = true, decode_fields = None, batch_memory = None,
        draft = false,
    ))]
    #[allow(clippy::too_many_arguments)] // Python's keywords, one each
    fn new(
        py: Python<'_>,
        datasets: Vec<PyRef<'_, PyDataset>>,
        options: BTreeMap<String, String>,
        weights: Option<Vec<f64>>,
        transform: Option<String>,
        steps: Option<String>,
        transform_fn: Option<Py<PyAny>>,
        main_image: bool,
        decode_fields: Option<Py<PyAny>>,
        batch_memory: Option<Py<PyAny>>,
        draft: bool,
    ) -> PyResult<Self> {
        let stages = Stages {
            transform,
            steps,
            transform_fn,
            main_image,
            decode_fields,
            draft,
            batch_memory,
            tokens: datasets.iter().any(|d| d.dataset.tokens().is_some()),
        };
        stages.check()?;
        let backend = datasets
            .iter()
            .map(|d| d.store.name().to_owned())
            .collect::<Vec<_>>()
            .join(", ");
        let samples: usize = datasets.iter().map(|d| d.dataset.len()).sum();
        let sources = build::sources(&datasets, weights)?;
        let settings = build::settings(&options)?;
        let (rank, world_size, seed) = (settings.rank, settings.world_size, settings.seed);
        let decode_threads = settings.engine_config().decode_threads;
        let fatal = transform::Fatal::default();
        let builder = DataLoader::mixture(sources).options(settings);
        let loader = stages.build(py, builder, seed, &fatal, &backend)?;
        let batches = loader.batches();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a runtime: {e}")))?;
        Ok(Self {
            inner: Mutex::new(Some(loader)),
            closed: AtomicBool::new(false),
            runtime: Some(runtime),
            backend,
            samples,
            batches: AtomicUsize::new(batches),
            ranks: (rank, world_size),
            decode_threads,
            pid: std::process::id(),
            pinned: AtomicBool::new(false),
            fatal,
        })
    }

    /// Start a pass, as a new `iter()` does: after a finished epoch (whether or not its
    /// end was asked for) the next epoch; part way through one, the rest is dropped and
    /// the next epoch starts (PyTorch's behaviour after a `break`); right after
    /// `load_state_dict`, the resumed epoch goes on. Returns the epoch the pass reads.
    fn begin_pass(&self, py: Python<'_>) -> PyResult<u64> {
        self.check_process()?;
        let pinned = self.pinned.swap(false, Ordering::AcqRel);
        self.with(py, |l| {
            if pinned {
                l.epoch()
            } else {
                l.to_epoch_start()
            }
        })
    }

    /// Reports of skipped samples not handed over with a batch (a batch whose every
    /// sample was skipped is not delivered), as exceptions; taken once.
    fn take_unreported_skips<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let skips = self.with(py, |l| l.take_unreported_skips())?;
        let list = PyList::empty(py);
        for e in &skips {
            list.append(Failure::of_item(e, &self.backend).into_py(py).value(py))?;
        }
        Ok(list)
    }

    /// The next batch of this epoch as `(images, labels, keys, indices, epoch, skipped,
    /// decoded, position, padding, sources, tokens)` (`tokens`: a token batch's other
    /// tensors by name and its `max_seqlen`, `None` for images; `images` is `None` when the main part is not an image;
    /// `decoded` holds each sample's decoded fields, empty without `decode_fields`;
    /// `position`, where the batch starts in its epoch, for `rewind`, is `None` then too), or `None` at the end of the epoch (the next call starts the next one). Waits with
    /// the GIL released; Ctrl-C interrupts the wait.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.check_process()?;
        loop {
            let waited = py.detach(|| self.wait());
            self.raise_fatal(py)?;
            match waited {
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
                    let images = match batch.images {
                        Some(images) => {
                            let owner = pinned::owner(py, &images);
                            Some(Bound::new(py, HostBuffer::owned_by(images, owner))?)
                        }
                        None => None,
                    };

                    let sources: Vec<usize> = self.with(py, |l| {
                        batch
                            .indices
                            .iter()
                            .map(|&i| l.source_of(i).map_or(0, |(s, _)| s))
                            .collect()
                    })?;
                    // A token batch's tensors by name, and its longest segment.
                    let tokens = match batch.tokens {
                        Some((tensors, max_seqlen)) => {
                            let dict = PyDict::new(py);
                            for (name, tensor) in tensors {
                                dict.set_item(name, Bound::new(py, HostBuffer::new(tensor))?)?;
                            }
                            dict.set_item("max_seqlen", max_seqlen)?;
                            Some(dict)
                        }
                        None => None,
                    };
                    let tuple = (
                        images,
                        Bound::new(py, HostBuffer::new(batch.labels))?,
                        keys,
                        batch.indices,
                        batch.epoch,
                        skipped,
                        batch.decoded,
                        batch.position,
                        batch.padding,
                        sources,
                        tokens,
                    )
                        .into_pyobject(py)?;
                    return Ok(Some(tuple));
                }
            }
        }
    }

    /// Batches per epoch (kept beside the loader, so asking takes no lock; a resume into
    /// another mixture updates it); an endless epoch (`cycle_forever`) has no length.
    fn __len__(&self) -> PyResult<usize> {
        let batches = self.batches.load(Ordering::Acquire);
        if batches == usize::MAX {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "this loader's epoch is endless (stop='cycle_forever'), so it has no length; \
                 bound the loop yourself (Lightning: max_steps)",
            ));
        }
        Ok(batches)
    }

    /// Samples in the dataset.
    #[getter]
    fn num_samples(&self) -> usize {
        self.samples
    }

    /// Threads of the decode pool.
    #[getter]
    fn decode_threads(&self) -> usize {
        self.decode_threads
    }

    /// This process's rank among `world_size`.
    #[getter]
    fn rank(&self) -> usize {
        self.ranks.0
    }

    /// Processes sharing each epoch.
    #[getter]
    fn world_size(&self) -> usize {
        self.ranks.1
    }

    /// The epoch the next batch belongs to.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.check_process()?;
        self.with(py, |l| l.epoch())
    }

    /// Read `epoch` next (PyTorch's `sampler.set_epoch`); the epoch the loader is in
    /// keeps its position.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.check_process()?;
        if epoch > 1 << 62 {
            return Err(errors::config(format!(
                "epoch {epoch} is not an epoch a run reaches (at most 2^62)"
            )));
        }
        let pinned = self.pinned.load(Ordering::Acquire);
        let (outcome, keep_pin) = self.with(py, |l| {
            let here = l.epoch() == epoch;
            let at = l.state().map(|s| (s.epoch, s.position));
            let outcome = match at {
                // Right after a resume, the training loop's own `set_epoch` of the resumed
                // epoch continues it.
                _ if pinned && here => Ok(()),
                // Part way through this epoch (a `break`): PyTorch's next `iter()` reads
                // the whole epoch the sampler was set to.
                Ok((e, position)) if here && e == epoch && position != 0 => {
                    l.resume(LoaderState::at(epoch, 0))
                }
                _ => {
                    l.set_epoch(epoch);
                    Ok(())
                }
            };
            (outcome, pinned && here)
        })?;
        if !keep_pin {
            self.pinned.store(false, Ordering::Release);
        }
        outcome.map_err(|e| errors::raise(&e, &self.backend))
    }

    /// Where the run stands, as a dict to checkpoint, the same on every rank after the same
    /// step: `epoch` and `position` (positions of the epoch's global order its steps
    /// consumed), and under `order` what the order was made of (the sources' sizes,
    /// hashes and weights, the stop rule, shuffle, seed, segment and cursors), which a
    /// resume checks.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.check_process()?;
        let state = self
            .with(py, |l| l.state())?
            .map_err(|e| errors::raise(&e, &self.backend))?;
        let json = serde_json::to_string(&state)
            .map_err(|e| PyRuntimeError::new_err(format!("state_dict: {e}")))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Continue from a `state_dict()` of any rank, on any world size and batch size: exactly
    /// the positions not delivered before it. A state of another order (dataset, sampler,
    /// shuffle or seed) is refused; one of other weights or sources too, unless
    /// `new_segment` is set.
    fn load_state_dict(&self, py: Python<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        self.check_process()?;
        let state_dict = state;
        let json: String = py
            .import("json")?
            .call_method1("dumps", (state,))?
            .extract()?;
        let state: LoaderState = serde_json::from_str(&json).map_err(|e| {
            Failure::new(Kind::Config, format!("not a loader state_dict: {e}")).into_py(py)
        })?;
        // A state_dict of an earlier version names the dataset's size only: still checked.
        if state.order.is_none()
            && let Some(n) = state_dict_samples(state_dict)?
            && n != self.samples
        {
            return Err(Failure::new(
                Kind::Config,
                format!(
                    "the state is of a dataset of {n} samples, this loader's has {}",
                    self.samples
                ),
            )
            .into_py(py));
        }
        let batches = self
            .with(py, |l| l.resume(state).map(|()| l.batches()))?
            .map_err(|e| errors::raise(&e, &self.backend))?;
        // A new segment of other weights makes epochs of another length.
        self.batches.store(batches, Ordering::Release);
        self.pinned.store(true, Ordering::Release);
        Ok(())
    }

    /// Go back to `position` of `epoch` (a batch Python could not decode), so the state
    /// names it as not delivered and a resume reads it again; unlike `load_state_dict`, the
    /// next pass starts an epoch, as after a batch the loader itself failed.
    fn rewind(&self, py: Python<'_>, epoch: u64, position: u64) -> PyResult<()> {
        self.check_process()?;
        self.with(py, |l| l.resume(LoaderState::at(epoch, position)))?
            .map_err(|e| errors::raise(&e, &self.backend))
    }

    /// The engine's per-stage summary of the run so far (fetch, decode, waits), or `None`
    /// before the first batch.
    fn summary(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.check_process()?;
        self.with(py, |l| l.metrics().map(|m| m.summary().to_string()))
    }

    /// The cache's counters as a dict (`None` without a cache): this process's, and under
    /// `"node"` the totals of every process sharing its directory.
    fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.check_process()?;
        let Some(cache) = self.with(py, |l| l.cache())? else {
            return Ok(None);
        };
        let (own, node) = py.detach(|| {
            cache.flush();
            (cache.snapshot(), cache.node_snapshot())
        });
        let out = PyDict::new(py);
        out.set_item("hits", own.memory_hits + own.disk_hits)?;
        out.set_item("memory_hits", own.memory_hits)?;
        out.set_item("disk_hits", own.disk_hits)?;
        out.set_item("misses", own.misses)?;
        out.set_item("requests", own.requests)?;
        out.set_item("bytes_from_cache", own.bytes_served)?;
        out.set_item("bytes_fetched", own.bytes_fetched)?;
        out.set_item("evictions", own.memory.evictions + own.disk.evictions)?;
        out.set_item("disk_bytes", own.disk.bytes)?;
        out.set_item("corrupt", own.corrupt)?;
        if let Some(n) = node {
            let node = PyDict::new(py);
            node.set_item("processes", n.processes)?;
            node.set_item("hits", n.hits)?;
            node.set_item("misses", n.misses)?;
            node.set_item("requests", n.requests)?;
            node.set_item("bytes_from_cache", n.bytes_served)?;
            node.set_item("bytes_fetched", n.bytes_fetched)?;
            node.set_item("evictions", n.evictions)?;
            node.set_item("corrupt", n.corrupt)?;
            out.set_item("node", node)?;
        }
        Ok(Some(out))
    }

    /// Stop the loader: in-flight requests are cancelled and its threads joined. A thread
    /// waiting in `next_batch` gets an error instead of a batch.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        if std::process::id() != self.pid {
            // In a forked child the lock may be held by a thread that does not exist here.
            return;
        }
        py.detach(|| drop(self.lock().take()));
    }
}

/// The `num_samples` of a state_dict written before states carried their order.
fn state_dict_samples(state: &Bound<'_, PyDict>) -> PyResult<Option<usize>> {
    state
        .get_item("num_samples")?
        .map(|n| n.extract::<usize>())
        .transpose()
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        let loader = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if std::process::id() != self.pid {
            // A forked child: joining threads that do not exist here would wait for ever,
            // so what the parent's threads own is left to the process's end.
            std::mem::forget(loader);
            std::mem::forget(self.runtime.take());
            return;
        }
        // The engine joins its decode threads, which may be waiting for the GIL to run a
        // Python transform: let go of it while they finish.
        Python::attach(|py| py.detach(move || drop(loader)));
    }
}
