//! The three fetch strategies, each a type of its own: how many threads it starts, how much
//! it keeps busy, and how it runs the items it is given.

use std::sync::Arc;

use tokio::task::JoinSet;

use crate::config::Fetch;
use crate::work::{Job, Shared, fetch_then_decode, load_blocking};

/// How a strategy runs admitted items.
pub(crate) trait Strategy<T>: Send + Sync {
    /// The name and size of its thread pool.
    fn pool(&self) -> (&'static str, usize);
    /// Requests in flight at most, at the start.
    fn max_in_flight(&self) -> usize;
    /// The cap of an adaptive limit; `None` when the limit is fixed.
    fn adaptive_cap(&self) -> Option<usize> {
        None
    }
    /// Items it keeps busy at once beside the ready queue, for batches of `batch_size`.
    fn busy(&self, batch_size: usize) -> usize;
    /// Whether it takes a whole batch per admission (a vanilla worker) rather than an item.
    fn whole_batches(&self) -> bool {
        false
    }
    /// Whether its fetches wait for the byte budget (only where waiting blocks no thread).
    fn budgeted(&self) -> bool {
        false
    }
    /// Start the work of admitted `jobs`.
    fn launch(&self, shared: &Arc<Shared<T>>, jobs: Vec<Job>, tasks: &mut JoinSet<()>);
}

/// The strategy `fetch` names.
/// An adaptive limit starts under `open_files` too ([`crate::control::open_files_bound`]).
pub(crate) fn strategy<T: Send + 'static>(
    fetch: Fetch,
    decode_threads: usize,
    open_files: Option<usize>,
) -> Box<dyn Strategy<T>> {
    match fetch {
        Fetch::Sequential { workers } => Box::new(Sequential { workers }),
        Fetch::Threads { threads } => Box::new(Threads { threads }),
        Fetch::Async { max_in_flight } => Box::new(Async {
            max_in_flight,
            decode_threads,
            cap: None,
        }),
        Fetch::Adaptive { max_in_flight } => Box::new(Async {
            max_in_flight: crate::control::start_limit(max_in_flight, open_files),
            decode_threads,
            cap: Some(max_in_flight),
        }),
    }
}

/// PyTorch's vanilla workers: each takes a batch and fetches, then decodes, item after item.
struct Sequential {
    workers: usize,
}

impl<T: Send + 'static> Strategy<T> for Sequential {
    fn pool(&self) -> (&'static str, usize) {
        ("worker", self.workers)
    }
    fn max_in_flight(&self) -> usize {
        self.workers
    }
    fn busy(&self, batch_size: usize) -> usize {
        (self.workers + 1) * batch_size
    }
    fn whole_batches(&self) -> bool {
        true
    }
    fn launch(&self, shared: &Arc<Shared<T>>, jobs: Vec<Job>, _tasks: &mut JoinSet<()>) {
        let worker = Arc::clone(shared);
        shared.pool.execute(move || {
            for job in jobs {
                if *worker.cancelled.borrow() {
                    return;
                }
                load_blocking(&worker, job);
            }
        });
    }
}

/// The paper's threaded fetcher: blocking threads, each fetching then decoding one item.
struct Threads {
    threads: usize,
}

impl<T: Send + 'static> Strategy<T> for Threads {
    fn pool(&self) -> (&'static str, usize) {
        ("fetch", self.threads)
    }
    fn max_in_flight(&self) -> usize {
        self.threads
    }
    fn busy(&self, batch_size: usize) -> usize {
        batch_size + self.threads
    }
    fn launch(&self, shared: &Arc<Shared<T>>, jobs: Vec<Job>, _tasks: &mut JoinSet<()>) {
        for job in jobs {
            let worker = Arc::clone(shared);
            shared.pool.execute(move || load_blocking(&worker, job));
        }
    }
}

/// Fetches as futures on the runtime within the in-flight limit, CPU work on the pool.
struct Async {
    max_in_flight: usize,
    decode_threads: usize,
    /// Set when the limit adapts, up to this.
    cap: Option<usize>,
}

impl<T: Send + 'static> Strategy<T> for Async {
    fn pool(&self) -> (&'static str, usize) {
        ("decode", self.decode_threads)
    }
    fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
    fn adaptive_cap(&self) -> Option<usize> {
        self.cap
    }
    // An adaptive limit's growth widens the window as it goes (the controller's task).
    fn busy(&self, batch_size: usize) -> usize {
        batch_size + self.max_in_flight + self.decode_threads
    }
    fn budgeted(&self) -> bool {
        true
    }
    fn launch(&self, shared: &Arc<Shared<T>>, jobs: Vec<Job>, tasks: &mut JoinSet<()>) {
        tasks.spawn(fetch_then_decode(Arc::clone(shared), jobs));
    }
}
