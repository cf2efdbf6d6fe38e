//! WebDataset tar shards: shard lists, the tar index, grouping members into samples.

mod error;

pub use error::ShardError;
