//! Writing LitData chunks for `TokensLoader` as `litdata.optimize` writes them from one
//! worker: each document an item (its ids as a headerless numpy array), items gathered into
//! a chunk until the next would take it past `chunk_size` tokens, each chunk its item count,
//! `count + 1` offsets and the items, and `index.json` listing the chunks with the config
//! LitData's reader reads.

use std::path::{Path, PathBuf};

use crate::source::error::WriteError;
use crate::tokens::TokenType;

/// Token chunks being written into a local directory.
pub struct TokenChunkWriter {
    dir: PathBuf,
    dtype: TokenType,
    /// Tokens a chunk holds at most (LitData's `chunk_size` for `TokensLoader`), a lone
    /// longer document aside.
    chunk_tokens: u64,
    items: Vec<Vec<u8>>,
    tokens: u64,
    chunks: Vec<serde_json::Value>,
}

impl TokenChunkWriter {
    /// Chunks of ids stored as `dtype`, each of at most `chunk_tokens` tokens, under `dir`.
    pub fn create(dir: &Path, dtype: TokenType, chunk_tokens: u64) -> Result<Self, WriteError> {
        if chunk_tokens == 0 {
            return Err(WriteError::Sample("chunks of 0 tokens".into()));
        }
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            dtype,
            chunk_tokens,
            items: Vec::new(),
            tokens: 0,
            chunks: Vec::new(),
        })
    }

    /// Appends a document; an empty one, or an id its type cannot hold, is refused.
    pub fn add_document(&mut self, ids: &[i64]) -> Result<(), WriteError> {
        if ids.is_empty() {
            return Err(WriteError::Sample("an empty document".into()));
        }
        let size = self.dtype.size() as usize;
        let mut item = Vec::with_capacity(ids.len() * size);
        for &id in ids {
            if id < 0 || id > self.dtype.max_id() {
                return Err(WriteError::Sample(format!(
                    "id {id} does not fit {}",
                    self.dtype.name()
                )));
            }
            item.extend_from_slice(&id.to_le_bytes()[..size]);
        }
        let n = ids.len() as u64;
        if !self.items.is_empty() && self.tokens + n > self.chunk_tokens {
            self.flush()?;
        }
        self.items.push(item);
        self.tokens += n;
        Ok(())
    }

    /// Writes the last chunk and `index.json`.
    pub fn finish(mut self) -> Result<(), WriteError> {
        self.flush()?;
        // litdata's own names for numpy's types (its `_NUMPY_DTYPES_MAPPING`).
        let code = match self.dtype {
            TokenType::I8 => 0,
            TokenType::I16 => 1,
            TokenType::I32 => 2,
            TokenType::I64 => 3,
            TokenType::U8 => 4,
            TokenType::U16 => 5,
            TokenType::U32 => 6,
            TokenType::U64 => 7,
        };
        let index = serde_json::json!({
            "chunks": self.chunks,
            "config": {
                "chunk_bytes": null,
                "chunk_size": self.chunk_tokens,
                "compression": null,
                "compression_batch_size": null,
                "compression_level": null,
                "data_format": [format!("no_header_numpy:{code}")],
                "data_spec": "[1, {\"type\": null, \"context\": null, \"children_spec\": []}]",
                "encryption": null,
                "ipc_compression": null,
                "item_loader": "TokensLoader",
                "types": "json",
            },
        });
        std::fs::write(self.dir.join("index.json"), serde_json::to_vec(&index)?)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), WriteError> {
        if self.items.is_empty() {
            return Ok(());
        }
        let word = |n: usize| {
            u32::try_from(n).map_err(|_| WriteError::Sample("a chunk past 4 GiB".into()))
        };
        let n = self.items.len();
        let mut out = Vec::new();
        out.extend_from_slice(&word(n)?.to_le_bytes());
        let mut at = 4 * (n + 2);
        out.extend_from_slice(&word(at)?.to_le_bytes());
        for item in &self.items {
            at += item.len();
            out.extend_from_slice(&word(at)?.to_le_bytes());
        }
        for item in self.items.drain(..) {
            out.extend_from_slice(&item);
        }
        let name = format!("chunk-0-{}.bin", self.chunks.len());
        std::fs::write(self.dir.join(&name), &out)?;
        self.chunks.push(serde_json::json!({
            "chunk_bytes": out.len(),
            "chunk_size": n,
            "dim": self.tokens,
            "filename": name,
        }));
        self.tokens = 0;
        Ok(())
    }
}
