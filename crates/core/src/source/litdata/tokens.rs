//! LitData chunks written for `TokensLoader`: each chunk is its items' ids back to back
//! after a table of their offsets, so each item (what `optimize`'s function yielded, a
//! document as tokenizing scripts write them) is a document, and a chunk a token file whose
//! tokens start after its table. Blocks share no token and never span two chunks, as
//! `TokensLoader(block_size=L + 1)` cuts them.

use std::sync::Arc;

use loader_storage::Storage;

use super::index::ChunkInfo;
use crate::source::record_files::FileError;
use crate::tokens::{Blocking, Documents, Placement, TokenFile, TokenType};

/// The token file `chunk` (at `key`) is: its table read by one ranged GET and checked
/// against what `index.json` says of the chunk (its items, tokens and bytes).
pub(super) async fn token_file(
    store: &dyn Storage,
    key: &str,
    chunk: &ChunkInfo,
    dtype: TokenType,
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<(Arc<str>, TokenFile), FileError> {
    let items = chunk.chunk_size;
    // The item count, then `items + 1` offsets: u32 each.
    let table = items
        .checked_add(2)
        .and_then(|n| n.checked_mul(4))
        .unwrap_or(u64::MAX);
    if table > chunk.chunk_bytes {
        return Err(FileError::Invalid(format!(
            "index.json says {items} items in {} bytes: their table alone takes {table}",
            chunk.chunk_bytes
        )));
    }
    let bytes = store
        .get_range(key, 0..table)
        .await
        .map_err(FileError::Storage)?;
    let documents = documents(&bytes, chunk, dtype).map_err(FileError::Invalid)?;
    let file = TokenFile {
        dtype,
        documents,
        placement: Placement::From(table),
        blocking,
        vocab,
        first_document: 0,
    };
    Ok((Arc::from(key), file))
}

/// The documents a chunk's table (`bytes`, its first `(items + 2) * 4`) describes.
fn documents(bytes: &[u8], chunk: &ChunkInfo, dtype: TokenType) -> Result<Documents, String> {
    let table = bytes.len() as u64;
    let u32_at = |i: usize| -> u64 {
        let b = &bytes[i * 4..i * 4 + 4];
        u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if bytes.len() < 8 || u32_at(0) != chunk.chunk_size {
        return Err(format!(
            "its table holds {} items where index.json says {}",
            if bytes.len() < 4 { 0 } else { u32_at(0) },
            chunk.chunk_size
        ));
    }
    let offsets: Vec<u64> = (1..bytes.len() / 4).map(u32_at).collect();
    let size = dtype.size();
    let mut lengths = Vec::with_capacity(offsets.len().saturating_sub(1));
    for (i, pair) in offsets.windows(2).enumerate() {
        let (start, end) = (pair[0], pair[1]);
        if end < start || (end - start) % size != 0 {
            return Err(format!(
                "item {i} spans bytes {start}..{end}: not whole {size}-byte tokens"
            ));
        }
        lengths.push((end - start) / size);
    }
    let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
    if first != table || last > chunk.chunk_bytes {
        return Err(format!(
            "its items span bytes {first}..{last}, not from the table's end ({table}) to \
             within the chunk's {} bytes",
            chunk.chunk_bytes
        ));
    }
    let tokens: u64 = lengths.iter().sum();
    if chunk.dim.is_some_and(|dim| dim != tokens) {
        return Err(format!(
            "its items hold {tokens} tokens where index.json says {}",
            chunk.dim.unwrap_or(0)
        ));
    }
    Documents::from_lengths(lengths).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(items: u64, bytes: u64, dim: u64) -> ChunkInfo {
        ChunkInfo {
            chunk_bytes: bytes,
            chunk_size: items,
            dim: Some(dim),
            filename: "chunk-0-0.bin".into(),
        }
    }

    fn table(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn a_chunks_table_gives_its_documents_and_lies_are_refused() {
        // Two items of 3 and 2 uint16 tokens after a 16-byte table.
        let good = table(&[2, 16, 22, 26]);
        let docs = documents(&good, &chunk(2, 26, 5), TokenType::U16).unwrap();
        assert_eq!(docs, Documents::from_lengths([3, 2]).unwrap());
        for (words, info, needle) in [
            (&[3, 16, 22, 26][..], chunk(2, 26, 5), "holds 3 items"),
            (&[2, 16, 21, 26], chunk(2, 26, 5), "not whole 2-byte tokens"),
            (&[2, 16, 22, 20], chunk(2, 26, 5), "not whole"),
            (
                &[2, 16, 22, 40],
                chunk(2, 26, 5),
                "within the chunk's 26 bytes",
            ),
            (
                &[2, 12, 22, 26],
                chunk(2, 26, 5),
                "not from the table's end",
            ),
            (&[2, 16, 22, 26], chunk(2, 26, 9), "index.json says 9"),
            (&[2, 16, 16, 26], chunk(2, 26, 5), "document 0 is empty"),
        ] {
            let err = documents(&table(words), &info, TokenType::U16).unwrap_err();
            assert!(err.contains(needle), "{words:?}: {err}");
        }
    }
}
