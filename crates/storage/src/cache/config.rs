//! What a cache is asked to be (its tiers, budgets and policy), and why one cannot be.

use std::path::PathBuf;

use super::{CachePolicy, DEFAULT_BLOCK_BYTES};

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
