//! What can be wrong with a shard.

/// A shard that cannot be read as WebDataset samples: names the shard, where in it, and what.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The tar structure is broken (truncated, a bad header checksum, a bad size field).
    #[error("shard {shard:?} on {store}: at byte {offset}: {problem}")]
    Corrupt {
        /// The shard's key.
        shard: String,
        /// Its store.
        store: String,
        /// Where the problem starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A sample breaks WebDataset's rules (no image member, a repeated suffix, a bad label).
    #[error("shard {shard:?} on {store}: sample {key:?} at byte {offset}: {problem}")]
    Sample {
        /// The shard's key.
        shard: String,
        /// Its store.
        store: String,
        /// The sample's key.
        key: String,
        /// Where its first member's header starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// The shard list or URL cannot be understood.
    #[error("shard list {0:?}: {1}")]
    List(String, String),
}
