//! A shard's index: its samples' members and where they are, kept so later runs (and every
//! rank on a node) start without reading the shards again.
//!
//! Kept in three places, tried in order: a sidecar `<shard>.idx.json` next to the shard
//! (written by `loader index`, uploaded with the shards), a local cache directory, and
//! else built by scanning the shard. An index names the shard's size and version (ETag or
//! modification time): when either differs from the shard's, it is stale and rebuilt.

use std::path::{Path, PathBuf};

use loader_storage::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::group::IndexedSample;

/// The format tag of an index file; a file with another one is not ours (or too new).
pub const INDEX_FORMAT: &str = "loader-webdataset-index/1";

/// The suffix of a sidecar index next to its shard: `train-000.tar.idx.json`.
pub const SIDECAR_SUFFIX: &str = ".idx.json";

/// The index of one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// [`INDEX_FORMAT`].
    pub format: String,
    /// The shard's key.
    pub shard: String,
    /// Its size when indexed.
    pub size: u64,
    /// Its version (ETag, mtime) when indexed, if the store has one.
    pub version: Option<String>,
    /// Its samples, in order.
    pub samples: Vec<IndexedSample>,
}

impl ShardIndex {
    /// Whether this index describes the shard as `meta` describes it now: same size and
    /// same version. Without a version on both sides freshness cannot be told (a shard
    /// rewritten at the same size would keep its old labels), so the index is not fresh
    /// and the shard is scanned again.
    pub fn is_fresh_for(&self, meta: &ObjectMeta) -> bool {
        // ETags compared without quotes or weak mark: indexes written before versions were
        // kept so still match their shard.
        let bare = |v: &str| v.trim_start_matches("W/").trim_matches('"').to_owned();
        self.format == INDEX_FORMAT
            && self.size == meta.size
            && matches!((&self.version, &meta.version), (Some(a), Some(b)) if bare(a) == bare(b))
    }

    /// Parse an index file; `None` if it is not one of ours.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Self>(bytes)
            .ok()
            .filter(|i| i.format == INDEX_FORMAT)
    }

    /// The index as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // Plain data: serialising it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Where the cached index of `shard` on the store named `store` lives under `dir`.
pub(crate) fn cache_path(dir: &Path, store: &str, shard: &str) -> PathBuf {
    crate::source::local_cache::cache_path(dir, "webdataset-index", store, shard, "json")
}

/// Read a cached index, if there is a readable one.
pub(crate) fn read_cached(path: &Path) -> Option<ShardIndex> {
    ShardIndex::parse(&std::fs::read(path).ok()?)
}
