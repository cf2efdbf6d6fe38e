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

mod announced;
mod config;
mod entry;
mod fetch;
mod handle;
mod metrics;
mod node;
mod policy;
mod shared;
mod state;
mod tier;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::future::{self, BoxFuture, FutureExt};
use futures::stream::{BoxStream, StreamExt};

use crate::{Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Served, Storage};
use entry::{EntryId, Origin, Rejected, Unit, blocks_of, decode, entry_id};
use metrics::Counters;
use node::{Claim, Disk};
use state::{State, lock};
use tier::Admission;
use writer::{Job, Writer};

pub use config::{CacheConfig, CacheError};
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
