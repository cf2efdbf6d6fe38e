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
