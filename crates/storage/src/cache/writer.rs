//! The thread that changes the cache directory for this process: it writes each fetched
//! entry under `tmp/`, books it in the ledger (letting go of what the rule says to make
//! room, whichever process wrote it), and renames it into place, so the async runtime never
//! waits on the disk or on another process.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

use super::entry::{EntryId, Origin, Unit, encode};
use super::metrics::{Counters, NodeSnapshot};
use super::node::journal::{Held, Journal, Record};
use super::node::{Claim, Disk};
use super::state::{State, lock};
use super::tier::Admission;

/// How long a write waits for another process to let go of the ledger before it is
/// dropped: a process stopped (SIGSTOP, a debugger) while holding it must not stop this one.
const LEDGER_PATIENCE: Duration = Duration::from_secs(2);

/// How often an idle writer reads what the other processes did, so that this one's rule
/// ranks their entries too.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// The ledger is written anew when it holds this many times more records than entries.
const COMPACT_RATIO: u64 = 4;

/// What the writer thread does, in order.
pub(crate) enum Job {
    Write {
        id: EntryId,
        key: String,
        unit: Unit,
        origin: Origin,
        payload: Bytes,
        /// Let go once the file is in place (or not kept).
        claim: Option<Claim>,
    },
    /// A file found corrupt or stale.
    Delete(EntryId),
    /// Answer once everything queued before is done.
    Flush(mpsc::SyncSender<()>),
}

/// The writer: one thread, so that this process's changes land in the order they were made.
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// What the thread works with.
struct Books {
    disk: Arc<Disk>,
    journal: Journal,
    state: Arc<Mutex<State>>,
    counters: Arc<Counters>,
    warned: AtomicBool,
    /// The last wait for the ledger ran out: the next ones do not wait, until one gets it
    /// (a queue of writes behind a stopped process must not each wait in turn).
    stalled: bool,
    /// The counters last recorded for the node's totals.
    recorded: Option<String>,
}

impl Writer {
    /// Follow the directory's ledger into `state` (letting go of what this budget does not
    /// hold), then start the thread.
    pub fn start(
        disk: Arc<Disk>,
        journal: Journal,
        state: Arc<Mutex<State>>,
        counters: Arc<Counters>,
    ) -> io::Result<Writer> {
        let mut books = Books {
            disk,
            journal,
            state,
            counters,
            warned: AtomicBool::new(false),
            stalled: false,
            recorded: None,
        };
        books.start()?;
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("loader-cache-writer".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(FOLLOW_EVERY) {
                        Ok(job) => books.run(job),
                        Err(RecvTimeoutError::Timeout) => {
                            books.follow();
                            books.record();
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                books.record();
            })?;
        Ok(Writer {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Block until everything queued so far is done.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.send(Job::Flush(tx)) {
            let _ = rx.recv();
        }
    }

    /// Queue a job; false if the thread is gone.
    pub fn send(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }
}

impl Drop for Writer {
    /// Finish what is queued, so the next run finds it: a process that ends right after
    /// its last epoch still leaves a warm cache.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Books {
    /// The ledger as it is, followed into the state; within this budget.
    fn start(&mut self) -> io::Result<()> {
        let Some(mut held) = self.journal.lock(LEDGER_PATIENCE * 15)? else {
            return Err(io::Error::other(
                "another process has held the cache's ledger (journal.lock) for 30 s",
            ));
        };
        let replay = held.replay()?;
        let mut state = lock(&self.state);
        let state = &mut *state;
        state.follow(replay);
        let over = state.disk.over_budget(&mut state.node_plan);
        for &id in &over {
            self.disk.delete(id);
            state.disk.remove(id);
        }
        let removed: Vec<Record> = over.into_iter().map(|id| Record::Remove { id }).collect();
        held.append(&removed)?;
        state.disk_stats.peak = state.disk.used();
        state.disk_writes = true;
        Ok(())
    }

    /// Record this process's counters for the node's totals.
    fn record(&mut self) {
        let snapshot = lock(&self.state).snapshot(&self.counters);
        let text = NodeSnapshot::of(&snapshot).to_text();
        // An idle process does not rewrite the same record every half second.
        if self.recorded.as_deref() != Some(text.as_str()) {
            self.disk.record(&text);
            self.recorded = Some(text);
        }
    }

    /// Read what the others did, if the ledger is free now.
    fn follow(&mut self) {
        if let Ok(Some(mut held)) = self.journal.lock(Duration::ZERO)
            && let Ok(replay) = held.replay()
        {
            lock(&self.state).follow(replay);
        }
    }

    fn run(&mut self, job: Job) {
        match job {
            Job::Flush(done) => {
                let _ = done.send(());
            }
            Job::Delete(id) => self.delete(id),
            Job::Write {
                id,
                key,
                unit,
                origin,
                payload,
                claim,
            } => {
                let len = payload.len() as u64;
                let result = self.write(id, &encode(&key, unit, &origin, &payload));
                drop(claim);
                let mut state = lock(&self.state);
                state.queued.remove(&id);
                // Replaced (or let go): a bad file of it, if there was one, is gone.
                state.found_bad.remove(&id);
                *state.rewrites.entry(id).or_default() += 1;
                state.pending_write_bytes = state.pending_write_bytes.saturating_sub(len);
                if let Err(e) = result {
                    Counters::add(&self.counters.write_errors, 1);
                    if std::mem::replace(&mut state.disk_writes, false) {
                        tracing::warn!(
                            "the cache could not write to {} ({e}); going on without adding \
                             to the disk cache",
                            self.disk.root().display()
                        );
                    }
                }
            }
        }
    }

    /// Book `file` as entry `id` in the ledger (letting go of what the rule says to make
    /// room), write it under `tmp/`, and put it in place if the ledger still counts it then
    /// (another process may have let it go meanwhile). Dropped if the rule does not take it
    /// or its file is there already. The directory holds at most the budget: an entry's
    /// bytes are booked before it is written.
    fn write(&mut self, id: EntryId, file: &[u8]) -> io::Result<()> {
        let (disk, books) = (Arc::clone(&self.disk), Arc::clone(&self.state));
        let len = file.len() as u64;
        {
            let Some(mut held) = self.lock()? else {
                return Ok(());
            };
            let replay = held.replay()?;
            let (stale_size, admitted) = {
                let mut state = lock(&books);
                let state = &mut *state;
                state.follow(replay);
                // Counted at another length (an object rewritten since a kill left its
                // entry counted without a file): booked anew at this one.
                let stale_size = state.disk.size_of(id).is_some_and(|counted| counted != len);
                if stale_size {
                    state.disk.remove(id);
                }
                let admitted = if state.disk.contains(id) {
                    None
                } else {
                    match state.disk.admit(id, len, (), &mut state.node_plan) {
                        Admission::Taken(evicted) => {
                            state.disk_stats.evictions += evicted.len() as u64;
                            state.disk_stats.peak = state.disk_stats.peak.max(state.disk.used());
                            Some(Ok(evicted.into_iter().map(|(v, ())| v).collect::<Vec<_>>()))
                        }
                        Admission::Refused => {
                            state.disk_stats.rejected += 1;
                            Some(Err(()))
                        }
                    }
                };
                (stale_size, admitted)
            };
            match admitted {
                // Booked by another process (or by this one, and its file lost to a kill):
                // written again only if its file is missing.
                None if disk.exists(id) => return Ok(()),
                None => {}
                Some(Err(())) => {
                    if stale_size {
                        disk.delete(id);
                        held.append(&[Record::Remove { id }])?;
                    }
                    return Ok(());
                }
                Some(Ok(victims)) => {
                    // Files go before their records: a kill between leaves entries counted
                    // without files, never files the budget does not count.
                    let mut records: Vec<Record> = victims
                        .iter()
                        .map(|&victim| {
                            disk.delete(victim);
                            Record::Remove { id: victim }
                        })
                        .collect();
                    if stale_size {
                        disk.delete(id);
                        records.push(Record::Remove { id });
                    }
                    records.push(Record::Add { id, len });
                    held.append(&records)?;
                    compact(&books, &mut held)?;
                }
            }
        }
        let staged = match disk.stage(id, file) {
            Ok(staged) => staged,
            Err(e) => {
                self.delete(id);
                return Err(e);
            }
        };
        let mut held = match self.lock() {
            Ok(Some(held)) => held,
            other => {
                disk.discard(&staged);
                return other.map(|_| ());
            }
        };
        let replay = match held.replay() {
            Ok(replay) => replay,
            Err(e) => {
                disk.discard(&staged);
                return Err(e);
            }
        };
        let counted = {
            let mut state = lock(&books);
            state.follow(replay);
            state.disk.contains(id)
        };
        if counted {
            // Under the lock: no other process lets it go between the look and the rename.
            let placed = disk.place(&staged, id);
            drop(held);
            placed.inspect_err(|_| self.delete(id))
        } else {
            disk.discard(&staged);
            Ok(())
        }
    }

    /// The ledger's lock, or `None` (the write dropped, said once) when another process
    /// holds it too long.
    fn lock(&mut self) -> io::Result<Option<Held<'_>>> {
        let Self {
            journal,
            counters,
            warned,
            disk,
            stalled,
            ..
        } = self;
        let patience = if *stalled {
            Duration::ZERO
        } else {
            LEDGER_PATIENCE
        };
        let held = journal.lock(patience)?;
        *stalled = held.is_none();
        if held.is_none() {
            Counters::add(&counters.dropped_writes, 1);
            if !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "another process has held the ledger of the cache directory {} for {:?}: \
                     entries are not written meanwhile",
                    disk.root().display(),
                    LEDGER_PATIENCE
                );
            }
        }
        Ok(held)
    }

    /// A file found corrupt or stale, or one that could not be written: deleted, and the
    /// ledger told.
    fn delete(&mut self, id: EntryId) {
        let (disk, books) = (Arc::clone(&self.disk), Arc::clone(&self.state));
        // Under the lock: unlinked outside it, the file another process puts in place
        // meanwhile would go uncounted once the record of this deletion came.
        if let Ok(Some(mut held)) = self.lock()
            && let Ok(replay) = held.replay()
        {
            let mut state = lock(&books);
            state.follow(replay);
            disk.delete(id);
            if state.disk.remove(id).is_some() {
                let _ = held.append(&[Record::Remove { id }]);
            }
        }
        lock(&books).deleting.remove(&id);
    }
}

/// Write the ledger anew when it has grown to several times the entries it describes.
fn compact(state: &Mutex<State>, held: &mut Held<'_>) -> io::Result<()> {
    let live: Vec<(EntryId, u64)> = {
        let state = lock(state);
        if held.records() <= COMPACT_RATIO * (state.disk.len() as u64 + 1024) {
            return Ok(());
        }
        state.disk.entries().collect()
    };
    held.rewrite(live)
}
