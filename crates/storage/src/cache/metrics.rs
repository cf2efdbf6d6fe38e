//! What the cache did: hits per tier, misses, bytes each way, evictions and refusals.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of a cache, shared with whoever reports them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub misses: AtomicU64,
    pub bytes_served: AtomicU64,
    pub bytes_fetched: AtomicU64,
    pub requests: AtomicU64,
    pub validations: AtomicU64,
    pub corrupt: AtomicU64,
    pub stale: AtomicU64,
    pub write_errors: AtomicU64,
    pub dropped_writes: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One tier's state and what its rule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TierSnapshot {
    /// Its budget in bytes.
    pub budget: u64,
    /// Bytes it holds now (for the disk: the entry files' lengths).
    pub bytes: u64,
    /// The most it held at once.
    pub peak_bytes: u64,
    /// Entries it holds now.
    pub entries: u64,
    /// Entries let go to make room.
    pub evictions: u64,
    /// Entries it did not take: too large, or needed later than everything held.
    pub rejected: u64,
}

/// A point-in-time copy of a cache's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSnapshot {
    /// Reads served from memory (an entry is a whole object or one block of a range).
    pub memory_hits: u64,
    /// Reads served from the disk.
    pub disk_hits: u64,
    /// Reads the store answered.
    pub misses: u64,
    /// Bytes served from the cache.
    pub bytes_served: u64,
    /// Bytes fetched from the store.
    pub bytes_fetched: u64,
    /// Reads made to the store (one may fill several entries).
    pub requests: u64,
    /// HEAD requests made to learn an object's size and version (once per object and run,
    /// only for objects no listing or index told the cache about).
    pub validations: u64,
    /// Entry files that failed their checksum or layout, dropped and fetched again.
    pub corrupt: u64,
    /// Entries made from another version of their object, dropped and fetched again.
    pub stale: u64,
    /// Failed writes of entry files; after the first, the disk tier takes no more.
    pub write_errors: u64,
    /// Entries not written because the writer was too far behind.
    pub dropped_writes: u64,
    /// The memory tier.
    pub memory: TierSnapshot,
    /// The disk tier (all zero without one).
    pub disk: TierSnapshot,
}

impl CacheSnapshot {
    /// Hits over all reads, 0 when nothing was read.
    pub fn hit_rate(&self) -> f64 {
        let hits = self.memory_hits + self.disk_hits;
        let all = hits + self.misses;
        if all == 0 {
            0.0
        } else {
            hits as f64 / all as f64
        }
    }
}

impl fmt::Display for CacheSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "hit rate {:.1}% ({} memory, {} disk, {} misses), {:.1} MB from cache, {:.1} MB \
             fetched in {} requests; memory {:.1}/{:.1} MB ({} evicted, {} refused)",
            self.hit_rate() * 100.0,
            self.memory_hits,
            self.disk_hits,
            self.misses,
            mb(self.bytes_served),
            mb(self.bytes_fetched),
            self.requests,
            mb(self.memory.bytes),
            mb(self.memory.budget),
            self.memory.evictions,
            self.memory.rejected,
        )?;
        if self.disk.budget > 0 {
            write!(
                f,
                ", disk {:.1}/{:.1} MB ({} evicted, {} refused)",
                mb(self.disk.bytes),
                mb(self.disk.budget),
                self.disk.evictions,
                self.disk.rejected,
            )?;
        }
        for (n, what) in [
            (self.validations, "validation requests"),
            (self.corrupt, "corrupt entries"),
            (self.stale, "stale entries"),
            (self.write_errors, "write errors"),
            (self.dropped_writes, "dropped writes"),
        ] {
            if n > 0 {
                write!(f, ", {n} {what}")?;
            }
        }
        Ok(())
    }
}

/// What all the processes sharing a cache directory (the ranks of a node) did, as each last
/// recorded it (every half second, and when it ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeSnapshot {
    /// Processes that recorded their counters since the directory was last opened by a
    /// process alone in it.
    pub processes: u64,
    /// Reads served from the cache (either tier).
    pub hits: u64,
    /// Reads the store answered.
    pub misses: u64,
    /// Bytes served from the cache.
    pub bytes_served: u64,
    /// Bytes fetched from the store.
    pub bytes_fetched: u64,
    /// Reads made to the store.
    pub requests: u64,
    /// Disk entries let go to make room.
    pub evictions: u64,
    /// Entry files found corrupt.
    pub corrupt: u64,
}

impl NodeSnapshot {
    /// The fields, in the order a process's record holds them.
    pub(crate) fn fields(&mut self) -> [(&'static str, &mut u64); 7] {
        [
            ("hits", &mut self.hits),
            ("misses", &mut self.misses),
            ("bytes_served", &mut self.bytes_served),
            ("bytes_fetched", &mut self.bytes_fetched),
            ("requests", &mut self.requests),
            ("evictions", &mut self.evictions),
            ("corrupt", &mut self.corrupt),
        ]
    }

    /// One process's record, from its snapshot.
    pub(crate) fn of(snap: &CacheSnapshot) -> NodeSnapshot {
        NodeSnapshot {
            processes: 1,
            hits: snap.memory_hits + snap.disk_hits,
            misses: snap.misses,
            bytes_served: snap.bytes_served,
            bytes_fetched: snap.bytes_fetched,
            requests: snap.requests,
            evictions: snap.disk.evictions,
            corrupt: snap.corrupt,
        }
    }

    /// The record as text: a `name value` line per field.
    pub(crate) fn to_text(mut self) -> String {
        self.fields()
            .into_iter()
            .map(|(name, value)| format!("{name} {value}\n"))
            .collect()
    }

    /// Add a record read back (`None` if it does not parse: one being replaced, say).
    pub(crate) fn add_text(&mut self, text: &str) -> Option<()> {
        let mut record = NodeSnapshot::default();
        for (line, (name, value)) in text.lines().zip(record.fields()) {
            let (n, v) = line.split_once(' ')?;
            if n != name {
                return None;
            }
            *value = v.parse().ok()?;
        }
        self.processes += 1;
        for ((_, total), (_, value)) in self.fields().into_iter().zip(record.fields()) {
            *total = total.saturating_add(*value);
        }
        Some(())
    }

    /// Hits over all reads, 0 when nothing was read.
    pub fn hit_rate(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

impl fmt::Display for NodeSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} processes: hit rate {:.1}% ({} hits, {} misses), {:.1} MB from cache, {:.1} MB \
             fetched in {} requests, {} evicted",
            self.processes,
            self.hit_rate() * 100.0,
            self.hits,
            self.misses,
            self.bytes_served as f64 / 1e6,
            self.bytes_fetched as f64 / 1e6,
            self.requests,
            self.evictions,
        )?;
        if self.corrupt > 0 {
            write!(f, ", {} corrupt entries", self.corrupt)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_adds_up() {
        let one = NodeSnapshot {
            processes: 1,
            hits: 3,
            misses: 4,
            bytes_served: 5,
            bytes_fetched: 6,
            requests: 7,
            evictions: 8,
            corrupt: 9,
        };
        let mut total = NodeSnapshot::default();
        total.add_text(&one.to_text()).unwrap();
        total.add_text(&one.to_text()).unwrap();
        assert_eq!(total.processes, 2);
        assert_eq!((total.hits, total.corrupt), (6, 18));
        assert!(total.add_text("hits x").is_none());
    }
}
