//! What a cache knows, behind one lock: the announced plan, both tiers' book-keeping, the
//! entries waiting for the writer, and this run's view of the objects.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::announced::Announced;
use super::entry::{EntryId, Origin};
use super::metrics::{CacheSnapshot, Counters, TierSnapshot};
use super::node::journal::{Record, Replay};
use super::policy::CachePolicy;
use super::tier::Tier;

/// Lock `m`, going on after a panic elsewhere (the state stays consistent between calls).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct State {
    /// This process's announced reads: the memory tier keeps by them.
    pub plan: Announced,
    /// The reads of every process sharing the directory: the disk tier keeps by them.
    pub node_plan: Announced,
    pub memory: Tier<Bytes>,
    pub memory_stats: TierStats,
    /// The directory's entries as its ledger says, whoever wrote them.
    pub disk: Tier<()>,
    pub disk_stats: TierStats,
    /// Entries fetched and waiting for the writer: served from here meanwhile.
    pub queued: HashMap<EntryId, Bytes>,
    /// Entry files found bad and queued for deletion: not read again until deleted.
    pub deleting: HashSet<EntryId>,
    /// Entry files found bad, until the writer writes them again: counted once however many
    /// readers (racing with the deletion) find them so.
    pub found_bad: HashSet<EntryId>,
    /// How many times the writer wrote each entry this run: a reader that found a file bad
    /// drops and counts it only when no write replaced it since the read.
    pub rewrites: HashMap<EntryId, u64>,
    /// Objects as this run sees them.
    pub known: HashMap<String, Origin>,
    /// Objects whose ranged reads are not checked against their version: their store's
    /// answers to GET name another version than its HEAD does for the same object.
    pub unchecked: HashSet<String>,
    /// False without a directory, and after a failed write.
    pub disk_writes: bool,
    pub pending_write_bytes: u64,
}

#[derive(Default)]
pub(crate) struct TierStats {
    pub peak: u64,
    pub evictions: u64,
    pub rejected: u64,
}

impl State {
    pub fn new(memory_bytes: u64, disk_bytes: u64, policy: CachePolicy) -> Self {
        State {
            plan: Announced::default(),
            node_plan: Announced::shared(),
            memory: Tier::new(memory_bytes, policy),
            memory_stats: TierStats::default(),
            disk: Tier::new(disk_bytes, policy),
            disk_stats: TierStats::default(),
            queued: HashMap::new(),
            deleting: HashSet::new(),
            found_bad: HashSet::new(),
            rewrites: HashMap::new(),
            known: HashMap::new(),
            unchecked: HashSet::new(),
            disk_writes: false,
            pending_write_bytes: 0,
        }
    }

    /// The counters and the tiers as they are now.
    pub fn snapshot(&self, c: &Counters) -> CacheSnapshot {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let tier = |used: u64, budget: u64, len: usize, stats: &TierStats| TierSnapshot {
            budget,
            bytes: used,
            peak_bytes: stats.peak,
            entries: len as u64,
            evictions: stats.evictions,
            rejected: stats.rejected,
        };
        CacheSnapshot {
            memory_hits: get(&c.memory_hits),
            disk_hits: get(&c.disk_hits),
            misses: get(&c.misses),
            bytes_served: get(&c.bytes_served),
            bytes_fetched: get(&c.bytes_fetched),
            requests: get(&c.requests),
            validations: get(&c.validations),
            corrupt: get(&c.corrupt),
            stale: get(&c.stale),
            write_errors: get(&c.write_errors),
            dropped_writes: get(&c.dropped_writes),
            memory: tier(
                self.memory.used(),
                self.memory.budget(),
                self.memory.len(),
                &self.memory_stats,
            ),
            disk: tier(
                self.disk.used(),
                self.disk.budget(),
                self.disk.len(),
                &self.disk_stats,
            ),
        }
    }

    /// Follow the ledger: entries other processes (or this one, earlier) added and removed.
    pub fn follow(&mut self, replay: Replay) {
        let records = match replay {
            Replay::Since(records) => records,
            Replay::Anew(records) => {
                self.disk.clear();
                records
            }
        };
        for record in records {
            match record {
                Record::Add { id, len } => self.disk.insert(id, len, (), &mut self.node_plan),
                Record::Remove { id } => {
                    self.disk.remove(id);
                }
            }
        }
        self.disk_stats.peak = self.disk_stats.peak.max(self.disk.used());
    }
}
