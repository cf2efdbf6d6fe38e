//! A byte-budgeted cache of what a store returns, in memory and on local disk, so epoch two
//! reads from the node instead of the network.
//!
//! - **Entries** are whole objects (for `get`) and aligned blocks of
//!   [`CacheConfig::block_bytes`] (for `get_range`): a ranged read is cut into the blocks it
//!   touches, so reads in another order, or coalesced differently, still hit. Missing blocks
//!   of one read are fetched with one request.
//! - **Validated once per run**: an entry remembers the size and version (ETag, or mtime on
//!   local disk) of the object it was made from, and is served only if this run's view of
//!   the object matches. That view comes from the listings and HEADs that pass through the
//!   cache and from [`Cache::learn`] (a dataset's index); an object known from neither is
//!   asked about with one HEAD, once per run. A hit costs no request, and says so in its
//!   result ([`Served::cached`](crate::Served)) so that a caller does not take its latency
//!   for the store's.
//! - **Single flight**: concurrent reads of one entry make one request.
//! - **Crash-safe**: a file is written under `tmp/` and renamed into place, and carries a
//!   checksum verified on every read; a corrupt or stale file is dropped and fetched again.
//! - **One directory per node**: any number of processes (the ranks of a node) read and
//!   write one directory within one byte budget, agreed through a ledger changed under an
//!   OS lock (see `journal.rs`); each keeps its own memory tier. Its disk holds at most the
//!   budget plus the one file each process is writing.
//! - **Eviction** by a [`CachePolicy`]; [`CachePolicy::Future`] is fed the upcoming reads
//!   with [`Cache::announce`] (the `DataLoader` does it from its sampler's order).
//! - **Disk trouble** (a full disk, a read-only directory) is reported once on stderr and
//!   in [`CacheSnapshot::write_errors`]; the cache goes on without its disk tier.
//!
//! Put the cache outside the retry and timeout layers: a hit makes no request, and a
//! miss's request is retried below it.

mod disk;
mod entry;
mod journal;
mod metrics;
mod plan;
mod policy;
mod state;
mod tier;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::future::{self, BoxFuture, FutureExt};
use futures::stream::{BoxStream, StreamExt};

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Served, Storage};
use disk::{Claim, Disk};
use entry::{EntryId, Origin, Rejected, Unit, blocks_of, decode, entry_id};
use metrics::Counters;
use state::{State, lock};
use tier::Admission;
use writer::{Job, Writer};

pub use metrics::{CacheSnapshot, NodeSnapshot, TierSnapshot};
pub use policy::CachePolicy;

/// Default [`CacheConfig::block_bytes`]: 1 MiB. A shard's 4 MiB read spans a few blocks,
/// and a block shared by two reads is fetched once; a small ranged sample costs at most a
/// block of extra bytes on its first read, not an extra request.
pub const DEFAULT_BLOCK_BYTES: u64 = 1 << 20;

/// Entries waiting for the writer may hold this many bytes; past it a new entry is not
/// written (memory stays bounded when the disk is slower than the network).
const MAX_PENDING_WRITE_BYTES: u64 = 256 << 20;

/// Reads of an object that changed under them, made again at most this many times.
const CHANGED_ATTEMPTS: usize = 3;

/// Announced reads are added to the plan this many at a time, releasing the lock between.
const ANNOUNCE_SLICE: usize = 4096;

/// How long a read waits for another process's fetch of an entry (its claim) before it
/// fetches the entry itself: past it, a second request costs less than a stalled read.
const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// How much to cache, where, and by which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The directory of the disk tier; `None` for memory only.
    pub dir: Option<PathBuf>,
    /// The memory tier's budget in bytes (0: none).
    pub memory_bytes: u64,
    /// The disk tier's budget in bytes, counting whole entry files.
    pub disk_bytes: u64,
    /// How a full tier chooses what to keep.
    pub policy: CachePolicy,
    /// The unit of ranged reads.
    pub block_bytes: u64,
}

impl Default for CacheConfig {
    /// Memory only, 256 MiB, future-aware; 16 GiB of disk once a `dir` is set.
    fn default() -> Self {
        Self {
            dir: None,
            memory_bytes: 256 << 20,
            disk_bytes: 16 << 30,
            policy: CachePolicy::default(),
            block_bytes: DEFAULT_BLOCK_BYTES,
        }
    }
}

/// Why a cache could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The directory could not be created, locked or read.
    #[error("cache directory {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `block_bytes` is 0.
    #[error("cache block size must be at least 1 byte")]
    BlockSize,
}

/// A store that keeps what it reads from `inner` within byte budgets. See the module docs.
pub struct CacheStore<S> {
    inner: Arc<S>,
    cache: Cache,
}

/// The handle of a cache: announce upcoming reads, tell it what a listing said, read its
/// counters. Cheap to clone; it stays valid after the store is moved into a loader.
#[derive(Clone)]
pub struct Cache {
    shared: Arc<Shared>,
}

struct Shared {
    backend: String,
    block_bytes: u64,
    state: Arc<Mutex<State>>,
    counters: Arc<Counters>,
    disk: Option<Arc<Disk>>,
    writer: Option<Writer>,
    /// Reads of entries under way, by entry: a later reader of one waits on it.
    flights: Mutex<HashMap<EntryId, Flight>>,
    /// HEADs under way, by key.
    heads: Mutex<HashMap<String, HeadFlight>>,
    /// Entries this process claimed in the directory and is fetching.
    claims: Mutex<HashMap<EntryId, Claim>>,
}

/// A flight's bytes and what its request met.
type Fetch = future::Shared<BoxFuture<'static, Result<(Bytes, Served)>>>;
type HeadFlight = future::Shared<BoxFuture<'static, Result<ObjectMeta>>>;

/// A request under way and where its bytes start in the object.
#[derive(Clone)]
struct Flight {
    start: u64,
    fetch: Fetch,
}

/// `unit`'s bytes within a response that starts at byte `start` of the object.
fn unit_in(response: &Bytes, start: u64, unit: Unit, block: u64) -> Bytes {
    match unit {
        Unit::Whole => response.clone(),
        Unit::Block(n) => {
            let len = response.len() as u64;
            let from = (n * block).saturating_sub(start).min(len);
            response.slice(from as usize..(from + block).min(len) as usize)
        }
    }
}

/// The error for a store that panicked while reading `key`.
fn panicked(backend: &str, key: &str, panic: &(dyn std::any::Any + Send)) -> Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    Error::new(
        ErrorKind::Other,
        backend,
        key,
        format!("the store panicked: {message}"),
    )
}

impl<S: Storage + 'static> CacheStore<S> {
    /// Wrap `inner`. With a `dir`, opens it (creating it) beside the other processes that
    /// use it; the first one there deletes what killed writers left and starts warm with the
    /// entries found, each letting go (oldest first) of what its budget no longer holds.
    pub fn new(inner: S, config: CacheConfig) -> std::result::Result<Self, CacheError> {
        if config.block_bytes == 0 {
            return Err(CacheError::BlockSize);
        }
        let disk_bytes = if config.dir.is_some() {
            config.disk_bytes
        } else {
            0
        };
        let state = Arc::new(Mutex::new(State::new(
            config.memory_bytes,
            disk_bytes,
            config.policy,
        )));
        let counters = Arc::new(Counters::default());
        let (mut disk, mut writer) = (None, None);
        if let Some(dir) = &config.dir {
            let failed = |source| CacheError::Dir {
                dir: dir.clone(),
                source,
            };
            let (opened, journal) = Disk::open(dir).map_err(failed)?;
            let opened = Arc::new(opened);
            writer = Some(
                Writer::start(
                    Arc::clone(&opened),
                    journal,
                    Arc::clone(&state),
                    Arc::clone(&counters),
                )
                .map_err(failed)?,
            );
            disk = Some(opened);
        }
        Ok(Self {
            cache: Cache {
                shared: Arc::new(Shared {
                    backend: inner.name().to_owned(),
                    block_bytes: config.block_bytes,
                    state,
                    counters,
                    disk,
                    writer,
                    flights: Mutex::new(HashMap::new()),
                    heads: Mutex::new(HashMap::new()),
                    claims: Mutex::new(HashMap::new()),
                }),
            },
            inner: Arc::new(inner),
        })
    }
}

impl<S> CacheStore<S> {
    /// The handle: announce reads, learn objects, read counters.
    pub fn cache(&self) -> Cache {
        self.cache.clone()
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("backend", &self.shared.backend)
            .field(
                "dir",
                &self.shared.disk.as_ref().map(|d| d.root().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl<S: fmt::Debug> fmt::Debug for CacheStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheStore")
            .field("inner", &self.inner)
            .field("cache", &self.cache)
            .finish()
    }
}

impl Cache {
    /// Announce this process's next reads, in order: `(key, None)` for a whole object,
    /// `(key, Some(range))` for a range. [`CachePolicy::Future`] keeps what is needed soonest.
    pub fn announce<'a>(&self, reads: impl IntoIterator<Item = (&'a str, Option<Range<u64>>)>) {
        self.announce_node(reads.into_iter().map(|(key, range)| (key, range, true)));
    }

    /// Announce the next reads of every process that shares the cache's directory (the
    /// ranks of a node), in the order the node makes them: `(key, range, here)`, `here`
    /// when this process makes the read. The disk tier keeps by the node's reads, the
    /// memory tier (this process's own) by this process's.
    pub fn announce_node<'a>(
        &self,
        reads: impl IntoIterator<Item = (&'a str, Option<Range<u64>>, bool)>,
    ) {
        let (block, store) = (self.shared.block_bytes, self.shared.backend.as_str());
        let ids = reads.into_iter().flat_map(|(key, range, here)| {
            let units: Box<dyn Iterator<Item = Unit>> = match range {
                None => Box::new(std::iter::once(Unit::Whole)),
                Some(range) => Box::new(blocks_of(&range, block).map(Unit::Block)),
            };
            units.map(move |unit| (entry_id(store, key, unit), here))
        });
        // Hashed outside the lock and added a slice at a time: an epoch of a million reads
        // must not hold up the reads being served meanwhile.
        let mut ids = ids.peekable();
        while ids.peek().is_some() {
            let slice: Vec<(EntryId, bool)> = ids.by_ref().take(ANNOUNCE_SLICE).collect();
            let mut state = lock(&self.shared.state);
            let state = &mut *state;
            for (id, here) in slice {
                if here {
                    state.plan.push(id);
                    state.memory.announced(id, &mut state.plan);
                }
                state.node_plan.push(id);
                state.disk.announced(id, &mut state.node_plan);
            }
        }
    }

    /// Forget the announced reads (the reader starts over from another position).
    pub fn forget_plan(&self) {
        let mut state = lock(&self.shared.state);
        state.plan.reset();
        state.node_plan.reset();
    }

    /// What this run knows of these objects (from a listing or an index): entries made
    /// from another size or version are not served, and no HEAD is made for them.
    pub fn learn(&self, objects: impl IntoIterator<Item = ObjectMeta>) {
        let mut state = lock(&self.shared.state);
        for meta in objects {
            state.known.insert(
                meta.key,
                Origin {
                    size: meta.size,
                    version: meta.version,
                },
            );
        }
    }

    /// Block until the entries queued for the disk are written (a process that owns the
    /// directory; otherwise returns at once). Dropping the store does it too.
    pub fn flush(&self) {
        if let Some(writer) = &self.shared.writer {
            writer.flush();
        }
    }

    /// The counters as they are now.
    pub fn snapshot(&self) -> CacheSnapshot {
        lock(&self.shared.state).snapshot(&self.shared.counters)
    }

    /// The totals of every process that shares this cache's directory (the ranks of a
    /// node), this one's as they are now and the others' as they last recorded them;
    /// `None` without a directory.
    pub fn node_snapshot(&self) -> Option<NodeSnapshot> {
        let disk = self.shared.disk.as_ref()?;
        let mine = NodeSnapshot::of(&self.snapshot());
        // Recorded first, so a rank that ends after this one counts it as it ends.
        disk.record(&mine.to_text());
        let mut total = NodeSnapshot::default();
        let mut counted_mine = false;
        for (name, text) in disk.records() {
            if name == disk.name() {
                counted_mine = true;
                total.add_text(&mine.to_text());
            } else {
                total.add_text(&text);
            }
        }
        if !counted_mine {
            total.add_text(&mine.to_text());
        }
        Some(total)
    }

    /// Whether entries outlive this process, so they must be checked against the object.
    fn validates(&self) -> bool {
        self.shared.disk.is_some()
    }
}

/// The claims one read took in the directory: let go when it is dropped (the read done,
/// failed or cancelled), except those a flight of this process is fetching (its end lets
/// them go, or hands them to the writer).
struct Claimed {
    shared: Arc<Shared>,
    ids: Vec<EntryId>,
}

impl Claimed {
    /// Claim `id` for this read; true if this process holds it now (this read, another read's
    /// flight, or no claim to be had: a full disk), false if another process does.
    fn take(&mut self, disk: &Disk, id: EntryId) -> bool {
        // Flights before claims, everywhere both are held.
        let flights = lock(&self.shared.flights);
        let mut claims = lock(&self.shared.claims);
        if claims.contains_key(&id) || flights.contains_key(&id) {
            return true;
        }
        match disk.claim(id) {
            Ok(Some(claim)) => {
                claims.insert(id, claim);
                self.ids.push(id);
                true
            }
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// Let go of this read's claims not taken on by a flight.
    fn release(&mut self) {
        let flights = lock(&self.shared.flights);
        let mut claims = lock(&self.shared.claims);
        for id in self.ids.drain(..) {
            if !flights.contains_key(&id) {
                claims.remove(&id);
            }
        }
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        self.release();
    }
}

/// Where the bytes of one unit of a read come from.
enum Source {
    Have(Bytes),
    /// In the writer's queue (its file not yet written): a disk hit when read.
    Queued(Bytes),
    Disk,
    Fetch,
}

/// How [`CacheStore::fetch`] gets one unit: from a request under way, from a tier that got
/// it meanwhile, or from its file.
enum Wait {
    Flight(Flight),
    /// Found in a tier since the caller looked: in memory (`false`) or the writer's
    /// queue (`true`).
    Have(Bytes, bool),
    Disk,
}

/// `units` (sorted, as a read's are) cut into runs that one request each can fetch: blocks
/// that follow each other, and a whole object alone.
fn runs(units: &[(EntryId, Unit)]) -> Vec<&[(EntryId, Unit)]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=units.len() {
        let joined = i < units.len()
            && matches!((units[i - 1].1, units[i].1), (Unit::Block(a), Unit::Block(b)) if b == a + 1);
        if !joined {
            runs.push(&units[start..i]);
            start = i;
        }
    }
    runs
}

impl Shared {
    /// Look `ids` up, as reads: hits from memory (or the writer's queue), the rest marked
    /// for the disk or the store.
    fn look_up(&self, ids: &[EntryId]) -> Vec<Source> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let dir = self.disk.is_some();
        ids.iter()
            .map(|&id| {
                state.plan.read(id);
                state.node_plan.read(id);
                if let Some(bytes) = state.memory.read(id, &mut state.plan) {
                    Counters::add(&self.counters.memory_hits, 1);
                    return Source::Have(bytes.clone());
                }
                // Told to the rule whoever wrote it; looked for by name even when the ledger
                // was not followed since another process wrote it.
                state.disk.read(id, &mut state.node_plan);
                if let Some(bytes) = state.queued.get(&id) {
                    Counters::add(&self.counters.disk_hits, 1);
                    return Source::Have(bytes.clone());
                }
                // A file found bad is not read again until the writer replaced it.
                if dir && !state.deleting.contains(&id) {
                    Source::Disk
                } else {
                    Source::Fetch
                }
            })
            .collect()
    }

    /// Which of `ids` a tier holds now: a look, not a read (no hit counted, the rule and
    /// the plan untouched).
    fn peek(&self, ids: &[EntryId]) -> Vec<Source> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        ids.iter()
            .map(|&id| {
                if let Some(bytes) = state.memory.peek_mut(id) {
                    return Source::Have(bytes.clone());
                }
                if let Some(bytes) = state.queued.get(&id) {
                    return Source::Queued(bytes.clone());
                }
                if state.disk.contains(id)
                    && !state.deleting.contains(&id)
                    && self.disk.as_ref().is_some_and(|d| d.exists(id))
                {
                    Source::Disk
                } else {
                    Source::Fetch
                }
            })
            .collect()
    }

    /// Read entries from their files, off the runtime; `None` where the file is missing,
    /// corrupt or stale (then it is dropped).
    async fn read_disk(
        self: &Arc<Self>,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<Origin>,
    ) -> Vec<Option<Bytes>> {
        let Some(disk) = self.disk.clone() else {
            return vec![None; units.len()];
        };
        let (key_owned, wanted) = (key.to_owned(), units.clone());
        let origin_of = origin.clone();
        // Which write of each entry this read sees: a bad file found after a newer write
        // replaced it is that write's good file's predecessor, not the entry's state.
        let seen: Vec<u64> = {
            let state = lock(&self.state);
            units
                .iter()
                .map(|(id, _)| state.rewrites.get(id).copied().unwrap_or(0))
                .collect()
        };
        let read = tokio::task::spawn_blocking(move || {
            wanted
                .iter()
                .map(|&(id, unit)| {
                    // A file there but unreadable (permissions, a bad sector) is bad too:
                    // taken for missing, it would be chosen again and again.
                    let file = match disk.read(id) {
                        Ok(file) => file?,
                        Err(_) => return Some(Err(Rejected::Other)),
                    };
                    Some(match &origin_of {
                        Some(origin) => decode(file, &key_owned, unit, origin),
                        None => Err(Rejected::Stale),
                    })
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|_| vec![None; units.len()]);
        let mut out = Vec::with_capacity(units.len());
        let mut dropped = Vec::new();
        for (((id, _), result), seen) in units.iter().zip(read).zip(seen) {
            match result {
                Some(Ok(payload)) => {
                    Counters::add(&self.counters.disk_hits, 1);
                    out.push(Some(payload));
                }
                Some(Err(why)) => {
                    let counter = match why {
                        Rejected::Stale => &self.counters.stale,
                        Rejected::Corrupt(_) | Rejected::Other => &self.counters.corrupt,
                    };
                    dropped.push((*id, Some(counter), seen));
                    out.push(None);
                }
                None => {
                    dropped.push((*id, None, seen));
                    out.push(None);
                }
            }
        }
        if !dropped.is_empty() {
            let mut state = lock(&self.state);
            for (id, counter, seen) in dropped {
                if state.rewrites.get(&id).copied().unwrap_or(0) != seen {
                    // Written again since this read: the file there now is not the one
                    // found bad, neither counted nor deleted.
                    continue;
                }
                // Readers racing on one bad file each find it bad; the one that drops it
                // counts it, so the counter counts files, not readers. A missing file is
                // another process's eviction, or a write a kill cut short: fetched again,
                // and written again if the ledger still counts it.
                let Some(counter) = counter else { continue };
                if state.found_bad.insert(id) {
                    Counters::add(counter, 1);
                }
                if state.deleting.insert(id)
                    && !self
                        .writer
                        .as_ref()
                        .is_some_and(|w| w.send(Job::Delete(id)))
                {
                    state.deleting.remove(&id);
                }
            }
        }
        // Served from disk: worth keeping in memory if the memory tier's rule says so.
        for ((id, _), payload) in units.iter().zip(&out) {
            if let Some(payload) = payload {
                self.keep_in_memory(*id, payload, false);
            }
        }
        out
    }

    /// Drop every entry of `key` (an object of `size` bytes): it was rewritten, and blocks
    /// of the old version must not meet blocks of the new one in a read. Disk entries carry
    /// their version and would be refused anyway; they go too, to free their space.
    fn forget_object(&self, key: &str, size: u64) {
        let units = std::iter::once(Unit::Whole)
            .chain(blocks_of(&(0..size), self.block_bytes).map(Unit::Block));
        let mut flights = lock(&self.flights);
        let mut state = lock(&self.state);
        for unit in units {
            let id = entry_id(&self.backend, key, unit);
            // A fetch under way for the old version is not joined by the reads of the new.
            flights.remove(&id);
            state.memory.remove(id);
            state.queued.remove(&id);
            if state.disk.contains(id)
                && let Some(w) = &self.writer
            {
                w.send(Job::Delete(id));
            }
        }
    }

    /// Keep `bytes` in memory if the rule takes them. `copy`: they are a slice of a larger
    /// response, which a kept entry must not pin; copied only once the tier may take them.
    fn keep_in_memory(&self, id: EntryId, bytes: &Bytes, copy: bool) {
        let mut state = lock(&self.state);
        let state = &mut *state;
        if state.memory.budget() == 0
            || state.memory.contains(id)
            || bytes.len() as u64 > state.memory.budget()
        {
            return;
        }
        let bytes = if copy {
            Bytes::copy_from_slice(bytes)
        } else {
            bytes.clone()
        };
        match state
            .memory
            .admit(id, bytes.len() as u64, bytes, &mut state.plan)
        {
            Admission::Taken(evicted) => {
                state.memory_stats.evictions += evicted.len() as u64;
                state.memory_stats.peak = state.memory_stats.peak.max(state.memory.used());
            }
            Admission::Refused => state.memory_stats.rejected += 1,
        }
    }

    /// A fetched unit: into memory, and to the disk tier's writer (which lets go of it,
    /// and of the response it is a slice of, once written).
    fn store(&self, key: &str, unit: Unit, origin: Option<&Origin>, bytes: Bytes, slice: bool) {
        let id = entry_id(&self.backend, key, unit);
        self.keep_in_memory(id, &bytes, slice);
        self.queue_write(id, key, unit, origin, bytes);
        // Not queued (no directory, writes off, the writer behind): the claim goes now.
        lock(&self.claims).remove(&id);
    }

    /// Hand a fetched unit to the writer, with this process's claim on it.
    fn queue_write(
        &self,
        id: EntryId,
        key: &str,
        unit: Unit,
        origin: Option<&Origin>,
        bytes: Bytes,
    ) {
        let (Some(origin), Some(writer)) = (origin, &self.writer) else {
            return;
        };
        let mut state = lock(&self.state);
        let state = &mut *state;
        if !state.disk_writes || state.queued.contains_key(&id) {
            return;
        }
        let payload = bytes.len() as u64;
        if state.pending_write_bytes + payload > MAX_PENDING_WRITE_BYTES {
            Counters::add(&self.counters.dropped_writes, 1);
            return;
        }
        // Booked in the ledger by the writer, which follows what the other processes did
        // first (this process's view may be half a second old), and which writes only what
        // the rule takes: a refusal costs no write.
        state.pending_write_bytes += payload;
        state.queued.insert(id, bytes.clone());
        let claim = lock(&self.claims).remove(&id);
        let queued = writer.send(Job::Write {
            id,
            key: key.to_owned(),
            unit,
            origin: origin.clone(),
            payload: bytes,
            claim,
        });
        if !queued {
            state.queued.remove(&id);
            state.pending_write_bytes -= payload;
        }
    }
}

impl<S: Storage + 'static> CacheStore<S> {
    fn shared(&self) -> &Arc<Shared> {
        &self.cache.shared
    }

    /// This run's view of `key` when entries must be validated: known, or asked for once;
    /// and whether this read waited for the store's answer to a HEAD.
    async fn origin(&self, key: &str) -> Result<(Option<Origin>, bool)> {
        if let Some(origin) = lock(&self.shared().state).known.get(key) {
            return Ok((Some(origin.clone()), false));
        }
        // Memory entries live as long as this run: an object known from no listing is
        // not worth a HEAD for them (its blocks are then read unchecked).
        if !self.cache.validates() {
            return Ok((None, false));
        }
        let head = {
            let mut heads = lock(&self.shared().heads);
            heads
                .entry(key.to_owned())
                .or_insert_with(|| {
                    let (inner, key) = (Arc::clone(&self.inner), key.to_owned());
                    let counters = Arc::clone(&self.shared().counters);
                    async move {
                        Counters::add(&counters.validations, 1);
                        AssertUnwindSafe(inner.head(&key))
                            .catch_unwind()
                            .await
                            .unwrap_or_else(|panic| Err(panicked(inner.name(), &key, &*panic)))
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        let meta = head.await;
        lock(&self.shared().heads).remove(key);
        let meta = meta?;
        let origin = Origin {
            size: meta.size,
            version: meta.version,
        };
        lock(&self.shared().state)
            .known
            .insert(key.to_owned(), origin.clone());
        Ok((Some(origin), true))
    }

    /// Claim `units` for this process's fetch; for those another process claimed, wait
    /// (at most [`CLAIM_PATIENCE`]) for its file, and read the file. The bytes found, the
    /// units left to fetch, and this read's claims (let go when dropped, whatever becomes of
    /// the read, unless a flight of this process took them on). A read that must wait holds
    /// no claim meanwhile: two processes each holding what the other waits for would stall.
    async fn await_claims(
        &self,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<&Origin>,
    ) -> (HashMap<EntryId, Bytes>, Vec<(EntryId, Unit)>, Claimed) {
        let mut claimed = Claimed {
            shared: Arc::clone(self.shared()),
            ids: Vec::new(),
        };
        let Some(disk) = self.shared().disk.clone() else {
            return (HashMap::new(), units, claimed);
        };
        let waiting: Vec<(EntryId, Unit)> = units
            .iter()
            .copied()
            .filter(|&(id, _)| !claimed.take(&disk, id))
            .collect();
        if waiting.is_empty() {
            return (HashMap::new(), units, claimed);
        }
        claimed.release();
        let deadline = tokio::time::Instant::now() + CLAIM_PATIENCE;
        let mut pause = std::time::Duration::from_millis(1);
        let (mut waiting, mut ready) = (waiting, Vec::new());
        while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
            waiting.retain(|&(id, unit)| {
                if disk.exists(id) {
                    ready.push((id, unit));
                    return false;
                }
                // Let go without a file (not kept, failed, its process died): fetched here.
                !matches!(disk.claim(id), Ok(Some(_)) | Err(_))
            });
        }
        let mut found = HashMap::new();
        if !ready.is_empty() {
            let bytes = self
                .shared()
                .read_disk(key, ready.clone(), origin.cloned())
                .await;
            for ((id, _), bytes) in ready.iter().zip(bytes) {
                if let Some(bytes) = bytes {
                    found.insert(*id, bytes);
                }
            }
        }
        let rest: Vec<(EntryId, Unit)> = units
            .into_iter()
            .filter(|(id, _)| !found.contains_key(id))
            .collect();
        for &(id, _) in &rest {
            claimed.take(&disk, id);
        }
        (found, rest, claimed)
    }

    /// The bytes of `units` of `key` that neither tier had when looked up: each run of
    /// consecutive units no other reader is fetching by one request, the others from the
    /// flight that fetches them, or from a tier if their flight landed meanwhile.
    async fn fetch(
        &self,
        key: &str,
        units: &[(EntryId, Unit)],
        origin: Option<&Origin>,
        read: &GetOptions,
    ) -> Result<(Vec<Bytes>, Served)> {
        let block = self.shared().block_bytes;
        // A hedge is sent because the request under way seems lost: joining that one's
        // flight would wait for it. It fetches on its own, and lets later readers join it.
        // What this read's own requests met (not those of flights it joins: theirs are
        // reported by the reads that sent them).
        let mut served = Served::default();
        let mut mine: Vec<EntryId> = Vec::new();
        let waits: Vec<Wait> = {
            let mut flights = lock(&self.shared().flights);
            let free: Vec<usize> = (0..units.len())
                .filter(|&i| read.repeat || !flights.contains_key(&units[i].0))
                .collect();
            // A flight stores its entries before it leaves the map: one that landed since
            // the caller looked is in a tier now, and is not fetched again.
            let ids: Vec<EntryId> = free.iter().map(|&i| units[i].0).collect();
            let mut held: HashMap<usize, Source> =
                free.iter().copied().zip(self.shared().peek(&ids)).collect();
            let own: Vec<(EntryId, Unit)> = free
                .iter()
                .filter(|i| matches!(held.get(i), Some(Source::Fetch)))
                .map(|&i| units[i])
                .collect();
            for run in runs(&own) {
                let (Some(&(first_id, first)), Some(&(_, last))) = (run.first(), run.last()) else {
                    continue;
                };
                mine.push(first_id);
                let start = match first {
                    Unit::Whole => 0,
                    Unit::Block(n) => n * block,
                };
                let fetch = self.fetch_span(key, (first, last), run, origin, read);
                for &(id, _) in run {
                    flights.insert(
                        id,
                        Flight {
                            start,
                            fetch: fetch.clone(),
                        },
                    );
                }
            }
            (0..units.len())
                .map(|i| match flights.get(&units[i].0) {
                    Some(flight) => Wait::Flight(flight.clone()),
                    None => match held.remove(&i) {
                        Some(Source::Have(bytes)) => Wait::Have(bytes, false),
                        Some(Source::Queued(bytes)) => Wait::Have(bytes, true),
                        _ => Wait::Disk,
                    },
                })
                .collect()
        };
        let on_disk: Vec<(EntryId, Unit)> = units
            .iter()
            .zip(&waits)
            .filter(|(_, w)| matches!(w, Wait::Disk))
            .map(|(u, _)| *u)
            .collect();
        let mut from_disk = if on_disk.is_empty() {
            Vec::new()
        } else {
            self.shared().read_disk(key, on_disk, origin.cloned()).await
        }
        .into_iter();
        let mut out: Vec<Option<Bytes>> = Vec::with_capacity(units.len());
        let mut again = Vec::new();
        // Each unit the caller missed is counted once, here, where its bytes are found: a
        // store's answer (its own request or a joined one) is a miss, a tier's a hit
        // (`read_disk` counts its own; one it could not read is counted by the fetch
        // below). Counted at the look instead, an entry another process placed in the
        // meantime was a miss and then a disk hit: two reads for one.
        let counters = &self.shared().counters;
        for (i, (&(_, unit), wait)) in units.iter().zip(waits).enumerate() {
            out.push(match wait {
                Wait::Flight(flight) => {
                    Counters::add(&counters.misses, 1);
                    // A joined flight's facts (and its failure's) are its owner's to report.
                    let own = mine.contains(&units[i].0);
                    let (bytes, met) = flight.fetch.await.map_err(|e| {
                        if own {
                            e
                        } else {
                            e.with_served(Served::default())
                        }
                    })?;
                    if own {
                        served = served.merge(met);
                    }
                    Some(unit_in(&bytes, flight.start, unit, block))
                }
                Wait::Have(bytes, queued) => {
                    let tier = if queued {
                        &counters.disk_hits
                    } else {
                        &counters.memory_hits
                    };
                    Counters::add(tier, 1);
                    Some(bytes)
                }
                Wait::Disk => from_disk.next().flatten(),
            });
            if out[i].is_none() {
                again.push(i);
            }
        }
        // Files dropped as corrupt or stale since: fetched after all.
        if !again.is_empty() {
            let missing: Vec<(EntryId, Unit)> = again.iter().map(|&i| units[i]).collect();
            let (fetched, met) = Box::pin(self.fetch(key, &missing, origin, read)).await?;
            served = served.merge(met);
            for (i, bytes) in again.into_iter().zip(fetched) {
                out[i] = Some(bytes);
            }
        }
        let bytes = out.into_iter().map(Option::unwrap_or_default).collect();
        Ok((bytes, served))
    }

    /// One request for units `first..=last` of `key` that fills the cache with `own` when
    /// it lands, whoever is awaiting it then.
    fn fetch_span(
        &self,
        key: &str,
        (first, last): (Unit, Unit),
        own: &[(EntryId, Unit)],
        origin: Option<&Origin>,
        read: &GetOptions,
    ) -> Fetch {
        // Weak: the flight map holds this future, and must not keep the cache alive.
        let (inner, weak) = (Arc::clone(&self.inner), Arc::downgrade(self.shared()));
        let counters = Arc::clone(&self.shared().counters);
        let (key, own, origin) = (key.to_owned(), own.to_vec(), origin.cloned());
        let block = self.shared().block_bytes;
        let checked = !lock(&self.shared().state).unchecked.contains(&key);
        // The flight's request tells the observer of the read that sent it; readers who
        // join the flight learn only its answer.
        let observer = read.observer.clone();
        async move {
            let request = async {
                match (first, last) {
                    (Unit::Block(a), Unit::Block(b)) => {
                        let mut end = (b + 1) * block;
                        if let Some(o) = &origin {
                            end = end.min(o.size);
                        }
                        // Of the version the entries are kept for, or an error: blocks
                        // of two versions must never make one read.
                        let mut options = GetOptions::range(a * block..end);
                        match origin.as_ref().and_then(|o| o.version.as_deref()) {
                            Some(version) if checked => options = options.if_match(version),
                            _ => {}
                        }
                        options.observer = observer;
                        inner.get_opts(&key, options).await
                    }
                    _ => {
                        let options = GetOptions {
                            observer,
                            ..GetOptions::default()
                        };
                        inner.get_opts(&key, options).await
                    }
                }
                .map(|answer| (answer.bytes, answer.served))
            };
            // A store that panics fails this read, not every later reader of the entry.
            let result = AssertUnwindSafe(request)
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(panicked(inner.name(), &key, &*panic)));
            Counters::add(&counters.requests, 1);
            let Some(shared) = weak.upgrade() else {
                return result;
            };
            // Fetched for a version the cache has since let go (the object changed while
            // this was under way): answered, but not kept beside the new version's blocks.
            let current = origin.as_ref().is_none_or(|o| {
                lock(&shared.state)
                    .known
                    .get(&key)
                    .is_none_or(|known| known.version == o.version)
            });
            if let Ok((bytes, _)) = &result
                && current
            {
                Counters::add(&shared.counters.bytes_fetched, bytes.len() as u64);
                let start = match first {
                    Unit::Block(a) => a * block,
                    Unit::Whole => 0,
                };
                for &(_, unit) in &own {
                    let piece = unit_in(bytes, start, unit, block);
                    // An entry the object's size does not account for is from a rewrite
                    // since the listing: answer with it, but do not keep it.
                    let expected = origin.as_ref().map(|o| match unit {
                        Unit::Whole => o.size,
                        Unit::Block(n) => o.size.saturating_sub(n * block).min(block),
                    });
                    if expected.is_some_and(|e| e != piece.len() as u64) {
                        continue;
                    }
                    shared.store(&key, unit, origin.as_ref(), piece, own.len() > 1);
                }
            }
            let mut flights = lock(&shared.flights);
            for (id, _) in &own {
                flights.remove(id);
            }
            drop(flights);
            // Claims of entries not handed to the writer (a failed read, a rewrite): let go.
            let mut claims = lock(&shared.claims);
            for (id, _) in &own {
                claims.remove(id);
            }
            drop(claims);
            result
        }
        .boxed()
        .shared()
    }

    /// Serve `units` of `key`: memory, then disk, then one request for the rest. `asked`:
    /// the read already waited for the store (a HEAD), so it is not the cache's alone.
    async fn serve(
        &self,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<Origin>,
        asked: bool,
        read: &GetOptions,
    ) -> Result<(Vec<Bytes>, Served)> {
        let ids: Vec<EntryId> = units.iter().map(|(id, _)| *id).collect();
        let sources = self.shared().look_up(&ids);
        let mut parts: Vec<Option<Bytes>> = Vec::with_capacity(units.len());
        let mut on_disk = Vec::new();
        for (i, source) in sources.into_iter().enumerate() {
            match source {
                Source::Have(bytes) | Source::Queued(bytes) => parts.push(Some(bytes)),
                Source::Disk => {
                    on_disk.push(i);
                    parts.push(None);
                }
                Source::Fetch => parts.push(None),
            }
        }
        if !on_disk.is_empty() {
            let wanted = on_disk.iter().map(|&i| units[i]).collect();
            let read = self.shared().read_disk(key, wanted, origin.clone()).await;
            for (i, bytes) in on_disk.into_iter().zip(read) {
                parts[i] = bytes;
            }
        }
        let missing: Vec<(EntryId, Unit)> = units
            .iter()
            .zip(&parts)
            .filter(|(_, p)| p.is_none())
            .map(|(u, _)| *u)
            .collect();
        // Entries another process of the node is fetching: their files, once there.
        let mut claimed = None;
        let missing = if missing.is_empty() || read.repeat {
            missing
        } else {
            let (mut found, rest, held) = self.await_claims(key, missing, origin.as_ref()).await;
            claimed = Some(held);
            for (i, part) in parts.iter_mut().enumerate() {
                if part.is_none()
                    && let Some(bytes) = found.remove(&units[i].0)
                {
                    *part = Some(bytes);
                }
            }
            rest
        };
        let counters = &self.shared().counters;
        let served: u64 = parts.iter().flatten().map(|b| b.len() as u64).sum();
        Counters::add(&counters.bytes_served, served);
        let mut served = Served::default();
        if !missing.is_empty() {
            let fetched = self.fetch(key, &missing, origin.as_ref(), read).await;
            // Claims of entries whose fetch is over (kept or not) go; those of a flight
            // still under way go with it.
            drop(claimed);
            let (fetched, met) = fetched?;
            served = met;
            let mut fetched = fetched.into_iter();
            for part in parts.iter_mut().filter(|p| p.is_none()) {
                *part = fetched.next();
            }
        } else if !asked {
            // The caller must not take this read's latency for the store's.
            served.cached = true;
        }
        let bytes = parts.into_iter().map(Option::unwrap_or_default).collect();
        Ok((bytes, served))
    }
}

#[async_trait]
impl<S: Storage + 'static> Storage for CacheStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// A version asked for (`if_match`) is not passed on: the cache checks versions itself,
    /// against what listings, HEADs and [`Cache::learn`] told it, and asks the store for
    /// the version it keeps entries of.
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let Some(range) = options.range.clone() else {
            let (origin, asked) = self.origin(key).await?;
            let unit = (
                entry_id(&self.shared().backend, key, Unit::Whole),
                Unit::Whole,
            );
            let (mut parts, served) = self.serve(key, vec![unit], origin, asked, &options).await?;
            return Ok(GetResult {
                bytes: parts.pop().unwrap_or_default(),
                meta: None,
                served,
            });
        };
        let (mut origin, mut asked) = self.origin(key).await?;
        // Rewritten since it was listed: its entries of the old version go, and the read is
        // made again of the version the store has now, whole. A few times at most: an
        // object rewritten without pause is an error, not a loop.
        for _ in 0..CHANGED_ATTEMPTS {
            match self
                .read_range(key, range.clone(), origin.clone(), asked, &options)
                .await
            {
                Err(e) if e.kind() == ErrorKind::Changed => {
                    let fresh = self.adopt_new_version(key, origin.as_ref()).await?;
                    if origin.as_ref().map(|o| &o.version) == Some(&fresh.version) {
                        // The store's HEAD still names the version its GET denied: it
                        // names versions differently (a gateway's weak ETags, say). Read
                        // this object unchecked from now on rather than never.
                        lock(&self.shared().state).unchecked.insert(key.to_owned());
                    }
                    (origin, asked) = (Some(fresh), true);
                }
                other => return other,
            }
        }
        self.read_range(key, range, origin, asked, &options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let meta = self.inner.head(key).await?;
        self.cache.learn([meta.clone()]);
        Ok(meta)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let cache = self.cache.clone();
        self.inner
            .list(prefix)
            .inspect(move |item| {
                if let Ok(meta) = item {
                    cache.learn([meta.clone()]);
                }
            })
            .boxed()
    }
}

impl<S: Storage + 'static> CacheStore<S> {
    /// `key` changed under a read made for `stale`: unless another reader already did,
    /// drop its entries and learn its new size and version with one HEAD.
    async fn adopt_new_version(&self, key: &str, stale: Option<&Origin>) -> Result<Origin> {
        {
            let state = lock(&self.shared().state);
            if let Some(known) = state.known.get(key)
                && Some(known) != stale
            {
                return Ok(known.clone());
            }
        }
        if let Some(stale) = stale {
            self.shared().forget_object(key, stale.size);
        }
        Counters::add(&self.shared().counters.validations, 1);
        let meta = self.inner.head(key).await?;
        let origin = Origin {
            size: meta.size,
            version: meta.version,
        };
        lock(&self.shared().state)
            .known
            .insert(key.to_owned(), origin.clone());
        Ok(origin)
    }

    /// A ranged read served from the tiers and the store, for `origin`.
    async fn read_range(
        &self,
        key: &str,
        range: Range<u64>,
        origin: Option<Origin>,
        asked: bool,
        read: &GetOptions,
    ) -> Result<GetResult> {
        let end = origin.as_ref().map_or(range.end, |o| range.end.min(o.size));
        if range.start >= end {
            // Empty, or past the end: the store answers as it does.
            return self
                .inner
                .get_opts(
                    key,
                    GetOptions {
                        range: Some(range),
                        if_match: None,
                        ..read.clone()
                    },
                )
                .await;
        }
        let block = self.shared().block_bytes;
        let blocks = blocks_of(&(range.start..end), block);
        let first = blocks.start;
        let units: Vec<(EntryId, Unit)> = blocks
            .map(|n| {
                (
                    entry_id(&self.shared().backend, key, Unit::Block(n)),
                    Unit::Block(n),
                )
            })
            .collect();
        let (parts, served) = self.serve(key, units, origin, asked, read).await?;
        // Cut the read out of its blocks: zero-copy when it lies within one.
        let mut pieces = Vec::with_capacity(parts.len());
        for (k, part) in parts.into_iter().enumerate() {
            let at = (first + k as u64) * block;
            let from = range.start.saturating_sub(at).min(part.len() as u64) as usize;
            let to = (end - at).min(part.len() as u64) as usize;
            if from < to {
                pieces.push(part.slice(from..to));
            }
        }
        let bytes = match pieces.len() {
            0 => Bytes::new(),
            1 => pieces.pop().unwrap_or_default(),
            _ => {
                let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
                for p in pieces {
                    out.extend_from_slice(&p);
                }
                out.freeze()
            }
        };
        Ok(GetResult {
            bytes,
            meta: None,
            served,
        })
    }
}
