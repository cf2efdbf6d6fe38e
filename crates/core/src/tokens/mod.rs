//! Token streams for language models: ids as files store them (`ids`), a token file cut
//! into fixed-length blocks (`blocks`; `file` ties a file's ids, documents and blocks
//! together; `files` runs a dataset's files on as one run of blocks), a block made into the
//! row a model trains on (`pack`), rows collated into a batch (`batch`).
//!
//! A block is `L + 1` consecutive tokens of one file, the last shared with the next block
//! (labels are the inputs shifted by one); a document longer than a block goes on in the
//! next, never dropped. Block `i` is found from the documents' lengths by binary search,
//! and is one byte range of its file, so a block is a sample like any other: a token
//! [`Dataset`](crate::Dataset) computes it when asked
//! ([`Dataset::from_tokens`](crate::Dataset::from_tokens)), the global order reads blocks,
//! mixes sources by weight (every block holds `L` tokens, so weights in blocks are weights
//! in tokens) and resumes exactly once on any world size without replaying a token; the
//! builder's [`tokens`](crate::DataLoaderBuilder::tokens) packs them into batches.
//!
//! ```
//! use loader_core::tokens::{Blocking, Documents, Packing};
//!
//! // Two documents, 3 and 9 tokens, in rows of 5.
//! let documents = Documents::from_lengths([3, 9]).unwrap();
//! let blocking = Blocking::new(5, true).unwrap();
//! let block = blocking.block(&documents, 0);
//! let tokens: Vec<i64> = block.tokens.clone().map(|t| t as i64).collect();
//! let row = Packing::new().row(&tokens, &block, 0);
//! assert_eq!(row.input_ids, [0, 1, 2, 3, 4]);
//! assert_eq!(row.labels, [1, 2, 3, 4, 5]);
//! assert_eq!(row.position_ids, [0, 1, 2, 0, 1]);
//! assert_eq!(row.cu_seqlens, [0, 3, 5]);
//! ```

mod batch;
mod blocks;
mod file;
mod files;
mod ids;
mod pack;

pub use batch::{TokenBatch, collate};
pub use blocks::{Block, Blocking, BlockingError, Documents, DocumentsError};
pub use file::{Encoded, Placement, TokenFile, block_record};
pub use files::{CHUNK_BYTES, TokenFiles, TokenFilesError};
pub use ids::TokenType;
pub use pack::{Packing, Row};
