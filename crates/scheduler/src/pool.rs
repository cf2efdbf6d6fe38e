//! A fixed pool of named threads for blocking work, joined on shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads named `{prefix}-{n}` that run jobs in FIFO order. Written here rather than
/// using rayon because the loader must join every thread it starts when it is dropped,
/// and rayon's pools detach theirs.
pub(crate) struct Pool {
    handle: PoolHandle,
    threads: Vec<JoinHandle<()>>,
}

/// A cheap, clonable way to queue jobs on a [`Pool`].
#[derive(Clone)]
pub(crate) struct PoolHandle {
    jobs: Sender<Job>,
    threads: usize,
    closed: Arc<AtomicBool>,
}

impl PoolHandle {
    /// The pool's threads.
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// Queue a job; after shutdown it is dropped unrun.
    pub(crate) fn execute(&self, job: impl FnOnce() + Send + 'static) {
        if !self.closed.load(Ordering::Acquire) {
            let _ = self.jobs.send(Box::new(job));
        }
    }
}

impl Pool {
    pub(crate) fn new(prefix: &str, size: usize) -> std::io::Result<Self> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        let closed = Arc::new(AtomicBool::new(false));
        let size = size.max(1);
        let threads = (0..size)
            .map(|n| {
                let (queue, closed): (Receiver<Job>, _) = (queue.clone(), Arc::clone(&closed));
                std::thread::Builder::new()
                    .name(format!("{prefix}-{n}"))
                    .spawn(move || {
                        while !closed.load(Ordering::Acquire) {
                            // A timeout, so a closed pool's idle threads notice and exit.
                            match queue.recv_timeout(Duration::from_millis(50)) {
                                // A job that panics must not take its thread with it.
                                Ok(job) => {
                                    let _ =
                                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                                }
                                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
                            }
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            handle: PoolHandle {
                jobs,
                threads: size,
                closed,
            },
            threads,
        })
    }

    /// A handle to queue jobs with.
    pub(crate) fn handle(&self) -> PoolHandle {
        self.handle.clone()
    }

    /// Stop taking jobs, let running ones finish, join every thread. Queued jobs are
    /// dropped unrun when the pool is.
    pub(crate) fn shutdown(&mut self) {
        self.handle.closed.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
