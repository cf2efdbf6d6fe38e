//! Reading objects from wherever a dataset lives: local disk, S3, HTTP, GCS, Azure, memory.
//!
//! One small object-safe trait, [`Storage`], with a backend per module in [`backend`] and
//! behaviour added by wrapping a store in a [`layer`] (cache, retry, timeout, concurrency
//! limit, simulated latency, fault injection, metrics), as `object_store`'s `ThrottledStore` does.
//! A backend implements one read, [`Storage::get_opts`] ([`GetOptions`] in, [`GetResult`]
//! out); layers report what a read met in its result ([`Served`]: a cache's answer,
//! retries, throttling), so a caller that adapts to the store reads it there, and tell an
//! [`Observer`] given in the options of each such fact as it happens (a throttled answer
//! before the backoff), for a caller that must react while the read is still under way
//! (proved by `the_engine_hears_of_throttling_while_the_request_still_backs_off`). A layer
//! passes the options on to the store it wraps.
//!
//! ```
//! use loader_storage::{from_url, Storage, StorageExt, layer::RetryConfig};
//! use std::time::Duration;
//!
//! # fn main() -> loader_storage::Result<()> {
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::create_dir(dir.path().join("cat")).unwrap();
//! std::fs::write(dir.path().join("cat/1.jpg"), b"not really a jpeg").unwrap();
//!
//! // `s3://bucket/prefix`, `http://host/prefix`, `memory://` and `file:///dir` work alike.
//! let url = format!("file://{}", dir.path().display());
//! let store = from_url(&url, [("allow_external_symlinks", "false")])?
//!     .with_timeout(Duration::from_secs(10))
//!     .with_retry(RetryConfig::default());
//!
//! assert_eq!(store.get("cat/1.jpg").await?.as_ref(), b"not really a jpeg");
//! assert_eq!(store.get_range("cat/1.jpg", 4..10).await?.as_ref(), b"really");
//! assert_eq!(store.head("cat/1.jpg").await?.size, 17);
//! let err = store.get("../outside").await.unwrap_err();
//! assert_eq!(err.kind(), loader_storage::ErrorKind::InvalidKey);
//! # Ok(()) })
//! # }
//! ```
//!
//! # Rooms
//!
//! The trait and its vocabulary here and in `get` (a read's options, result and what it
//! met), `error`, `key` (key checks), `redact` (credentials out of messages); `backend/`
//! (local, object_store, opendal) and `url` (a store from a URL); `layer/` (retry,
//! timeout, limit, latency, faults, throttle, metrics), each wrapping any store; `cache/`
//! (the node-wide cache, a sub-system of its own, also a layer: its entrance, the handle,
//! shared lookups, fetches, tiers and policies, and `node/`, the directory its processes
//! share, with the ledger `journal`); `mount`
//! (several stores as one, each at a name); `open_files` (the process's open-files limit,
//! which bounds sockets).
//!
//! Plain HTTP servers cannot list a prefix: `list` on an `http://` store asks the server
//! with WebDAV `PROPFIND` (what `object_store` does) and returns an
//! [`ErrorKind::Unsupported`] error when the server does not answer it, as most static file
//! servers, including the test kit's, do not. HTTP datasets therefore use a manifest.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

pub mod backend;
pub mod cache;
mod error;
mod get;
mod key;
pub mod layer;
mod mount;
mod open_files;
mod redact;
mod url;
pub mod write;

pub use error::{Error, ErrorKind, Result};
pub use get::{GetOptions, GetResult, Observer, Served};
pub use key::{MAX_KEY_LEN, check_key, check_prefix, key_problem};
pub use mount::MountStore;
pub use open_files::{open_files_limit, raise_open_files_limit};
pub use redact::{redact, redact_urls};
pub use url::{from_url, put_to_url};

/// The default limit of one read (a whole object or one range): 1 GiB. A larger object is
/// refused with an error naming its key and size before anything is allocated, so a sparse
/// 300 GB file or a lying `Content-Length` cannot exhaust memory; multi-GB shards are read
/// in ranges, each under the limit. Backends take a `max_read_bytes` setting.
pub const DEFAULT_MAX_READ_BYTES: u64 = 1 << 30;

/// The error for a read over its size limit.
pub(crate) fn too_large(backend: &str, key: &str, size: u64, max: u64) -> Error {
    Error::new(
        ErrorKind::Other,
        backend,
        key,
        format!(
            "the read would return {size} bytes, over the limit of {max} bytes per read \
             (max_read_bytes); read it in ranges or raise the limit"
        ),
    )
}

/// What a listing or a head request tells about an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectMeta {
    /// The object's key, relative to the store's root.
    pub key: String,
    /// The object's size in bytes.
    pub size: u64,
    /// What changes when the object is rewritten, where the backend says: the ETag (or
    /// version) on object stores, the modification time on local disk. An index or cache
    /// built from the object is stale when its size or version differs.
    pub version: Option<String>,
}

impl ObjectMeta {
    /// An object of `size` bytes with no version.
    pub fn new(key: impl Into<String>, size: u64) -> Self {
        Self {
            key: key.into(),
            size,
            version: None,
        }
    }
}

/// A read-only view of objects under one root, addressed by `/`-separated keys.
///
/// Object-safe: a loader holds an `Arc<dyn Storage>`. Implement it to plug in a custom
/// backend; every method reports failures as an [`Error`] that names the key and
/// [`Storage::name`]. `Debug` and `name` must never show a credential.
#[async_trait]
pub trait Storage: Send + Sync + fmt::Debug {
    /// The backend as a person would name it in an error, e.g. `s3://bucket/prefix`.
    fn name(&self) -> &str;

    /// The read `options` ask for: the whole object or a range, of any version or of one.
    /// Layers fill the result's [`Served`] on the way back (and an error's). The one read
    /// method to implement; [`get`](Storage::get) and the others are made of it.
    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult>;

    /// The whole object.
    async fn get(&self, key: &str) -> Result<Bytes> {
        Ok(self.get_opts(key, GetOptions::default()).await?.bytes)
    }

    /// The bytes `range.start..range.end` of the object; a range that runs past the end is
    /// cut at the end, as HTTP range requests are.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        Ok(self.get_opts(key, GetOptions::range(range)).await?.bytes)
    }

    /// [`get_range`](Storage::get_range) of the object as it is at `version` (the
    /// [`ObjectMeta::version`] a listing or `head` gave), or an error of kind
    /// [`ErrorKind::Changed`] when the bytes would come from another version: a reader
    /// that assembles an object from ranges read at different times (a cache) must not mix
    /// two versions of it. See [`GetOptions::if_match`] for which backends can tell.
    async fn get_range_if(&self, key: &str, range: Range<u64>, version: &str) -> Result<Bytes> {
        let options = GetOptions::range(range).if_match(version);
        Ok(self.get_opts(key, options).await?.bytes)
    }

    /// The object's size without reading it.
    async fn head(&self, key: &str) -> Result<ObjectMeta>;

    /// Every object below `prefix` (a directory-like path; empty for the whole store), in
    /// no guaranteed order. Errors arrive as items of the stream.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>>;

    /// Every object below `prefix`, collected: what a dataset's listing reads. A layer
    /// that can restart a listing broken mid-way (the retry layer) does so here, which a
    /// stream's consumer cannot.
    async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        use futures::TryStreamExt;
        self.list(prefix).try_collect().await
    }
}

/// A shared, type-erased store: what loaders and datasets hold.
pub type DynStorage = Arc<dyn Storage>;

macro_rules! forward_storage {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: Storage + ?Sized> Storage for $ty {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
                (**self).get_opts(key, options).await
            }
            async fn head(&self, key: &str) -> Result<ObjectMeta> {
                (**self).head(key).await
            }
            fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
                (**self).list(prefix)
            }
            async fn list_all(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
                (**self).list_all(prefix).await
            }
        }
    )*};
}

forward_storage!(Arc<S>, Box<S>, &S);

/// Wrap any store in a layer with a method call: `store.with_retry(..).with_timeout(..)`.
pub trait StorageExt: Storage + Sized {
    /// Retry transient failures with exponential backoff and jitter.
    fn with_retry(self, config: layer::RetryConfig) -> layer::RetryStore<Self> {
        layer::RetryStore::new(self, config)
    }

    /// Fail any request that takes longer than `timeout` with [`ErrorKind::Timeout`].
    fn with_timeout(self, timeout: std::time::Duration) -> layer::TimeoutStore<Self> {
        layer::TimeoutStore::new(self, timeout)
    }

    /// Allow at most `max` requests at a time.
    fn with_concurrency_limit(self, max: usize) -> layer::LimitStore<Self> {
        layer::LimitStore::new(self, max)
    }

    /// Delay every request by a seeded draw from `latency`, to imitate remote storage.
    fn with_latency(self, latency: layer::Latency, seed: u64) -> layer::LatencyStore<Self> {
        layer::LatencyStore::new(self, latency, seed)
    }

    /// Answer reads above `per_second` with "503 SlowDown", as S3 does per prefix, for tests.
    fn with_throttle(self, per_second: f64) -> layer::ThrottleStore<Self> {
        layer::ThrottleStore::new(self, per_second)
    }

    /// Fail a seeded fraction of requests, for tests.
    fn with_faults(self, faults: layer::FaultConfig) -> layer::FaultStore<Self> {
        layer::FaultStore::new(self, faults)
    }

    /// Keep what is read within byte budgets in memory and on disk; see
    /// [`layer::CacheStore`]. Fails if the cache directory cannot be opened.
    fn with_cache(
        self,
        config: layer::CacheConfig,
    ) -> std::result::Result<layer::CacheStore<Self>, layer::CacheError>
    where
        Self: 'static,
    {
        layer::CacheStore::new(self, config)
    }

    /// Count requests, bytes and latency.
    fn with_metrics(self) -> layer::MetricsStore<Self> {
        layer::MetricsStore::new(self)
    }

    /// Erase the type, for a loader or dataset that holds any store.
    fn into_dyn(self) -> DynStorage
    where
        Self: 'static,
    {
        Arc::new(self)
    }
}

impl<S: Storage + Sized> StorageExt for S {}
