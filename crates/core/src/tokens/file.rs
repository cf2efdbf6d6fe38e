//! One token file as blocks: how it stores its ids, its documents, how it is cut. What a
//! token format hands the loader for each file, and what turns a block's fetched bytes
//! into a row.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::Records;

use super::blocks::{Block, Blocking, Documents};
use super::ids::TokenType;
use super::pack::{Packing, Row};

/// Where a file's tokens lie in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Back to back from this byte: 0 for Megatron's `.bin`, a LitData chunk's table length.
    From(u64),
    /// Each document's from its own byte, by document (MDS samples, whose headers and other
    /// columns lie between them): increasing, each after the last document's tokens.
    Each(Arc<[u64]>),
    /// Encoded in one span, read whole and decoded once for all its blocks.
    Encoded(Encoded),
}

/// A file whose ids are encoded in one span (a Parquet column chunk's compressed pages):
/// every block reads the span, which the engine fetches and decodes once, by `records`,
/// into one record per block ([`block_record`]). Its documents' lengths come with the
/// decoded ids, so until then the file's `documents` is one run of all its tokens.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The bytes holding the ids.
    pub span: Range<u64>,
    /// What decodes the span into the blocks' records, in block order.
    pub records: Arc<dyn Records>,
    /// The documents it holds.
    pub documents: u64,
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        self.span == other.span
            && Arc::ptr_eq(&self.records, &other.records)
            && self.documents == other.documents
    }
}

impl Eq for Encoded {}

/// A decoded block as its record holds it: the block's first document (in its file), the
/// starts of the later ones, then its ids in the file's type.
pub fn block_record(block: &Block, ids: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(12 + 4 * block.starts.len() + ids.len());
    out.extend_from_slice(&(block.first_document as u64).to_le_bytes());
    out.extend_from_slice(&(block.starts.len() as u32).to_le_bytes());
    block
        .starts
        .iter()
        .for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
    out.extend_from_slice(ids);
    Bytes::from(out)
}

/// A [`block_record`] read back: the block (its tokens counted from 0) and its ids' bytes.
fn read_block_record(bytes: &[u8], len: usize, size: u64) -> Result<(Block, &[u8]), String> {
    let word = |at: usize, n: usize| bytes.get(at..at + n).ok_or("a block record cut short");
    let first = u64::from_le_bytes(word(0, 8)?.try_into().map_err(|_| "record")?);
    let count = u32::from_le_bytes(word(8, 4)?.try_into().map_err(|_| "record")?) as usize;
    let head = count
        .checked_mul(4)
        .and_then(|n| n.checked_add(12))
        .filter(|&n| n <= bytes.len())
        .ok_or("a block record cut short")?;
    let starts = bytes[12..head]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let ids = &bytes[head..];
    let tokens = ids.len() as u64 / size;
    let block = Block {
        tokens: 0..tokens,
        first_document: usize::try_from(first).map_err(|e| e.to_string())?,
        starts,
        len,
    };
    Ok((block, ids))
}

/// A token file: its ids' type, its documents, where its tokens lie in it and how it is
/// cut into blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    /// How the file stores its ids.
    pub dtype: TokenType,
    /// Its documents, in storage order.
    pub documents: Documents,
    /// Where its tokens lie.
    pub placement: Placement,
    /// How it is cut.
    pub blocking: Blocking,
    /// Ids at or past this are refused (a wrong dtype or damage, not a token).
    pub vocab: Option<u64>,
    /// The index of its first document in its source, so document ids are the source's.
    pub first_document: u64,
}

impl TokenFile {
    /// How many documents it holds.
    pub fn document_count(&self) -> u64 {
        match &self.placement {
            Placement::Encoded(encoded) => encoded.documents,
            _ => self.documents.len() as u64,
        }
    }

    /// How many blocks it gives.
    pub fn blocks(&self) -> u64 {
        self.blocking.blocks(self.documents.tokens())
    }

    /// Block `i` (`i` < [`TokenFile::blocks`]).
    pub fn block(&self, i: u64) -> Block {
        self.blocking.block(&self.documents, i)
    }

    /// The byte token `t` of document `d` starts at.
    fn byte_of(&self, d: usize, t: u64) -> u64 {
        let size = self.dtype.size();
        match &self.placement {
            Placement::From(offset) => offset + t * size,
            Placement::Each(starts) => starts[d] + (t - self.documents.start(d)) * size,
            Placement::Encoded(encoded) => encoded.span.start,
        }
    }

    /// The bytes of the file block `i` reads: what its fetch asks for (with what lies
    /// between its documents' tokens, when anything does).
    pub fn byte_range(&self, i: u64) -> Range<u64> {
        if let Placement::Encoded(encoded) = &self.placement {
            return encoded.span.clone();
        }
        let tokens = self.block(i).tokens;
        let last = tokens.end - 1;
        let start = self.byte_of(self.documents.document_of(tokens.start), tokens.start);
        start..self.byte_of(self.documents.document_of(last), last) + self.dtype.size()
    }

    /// The row block `i`'s fetched `bytes` make; a problem says what is wrong with them.
    pub fn row(&self, i: u64, bytes: &[u8], packing: &Packing) -> Result<Row, String> {
        if let Placement::Encoded(_) = &self.placement {
            let len = self.blocking.row_len() as usize;
            let (block, ids) = read_block_record(bytes, len, self.dtype.size())?;
            let ids = self.dtype.ids(ids, self.vocab)?;
            let first = self.first_document + block.first_document as u64;
            return Ok(packing.row(&ids, &block, first as i64));
        }
        let block = self.block(i);
        let range = self.byte_range(i);
        if bytes.len() as u64 != range.end - range.start {
            return Err(format!(
                "block {i} is {} bytes, not the {} its tokens {:?} take",
                bytes.len(),
                range.end - range.start,
                block.tokens
            ));
        }
        let ids = match &self.placement {
            Placement::Each(_) => self
                .dtype
                .ids(&self.gathered(&block, range.start, bytes), self.vocab)?,
            _ => self.dtype.ids(bytes, self.vocab)?,
        };
        let first = self.first_document + block.first_document as u64;
        Ok(packing.row(&ids, &block, first as i64))
    }

    /// A block's tokens out of its fetched `bytes` (from byte `at` of the file), each
    /// document's piece cut from between the bytes around it.
    fn gathered(&self, block: &Block, at: u64, bytes: &[u8]) -> Vec<u8> {
        let size = self.dtype.size();
        let mut out = Vec::with_capacity(((block.tokens.end - block.tokens.start) * size) as usize);
        let mut t = block.tokens.start;
        let mut d = block.first_document;
        while t < block.tokens.end {
            let end = self.documents.ends()[d].min(block.tokens.end);
            let from = (self.byte_of(d, t) - at) as usize;
            out.extend_from_slice(&bytes[from..from + ((end - t) * size) as usize]);
            (t, d) = (end, d + 1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocks_bytes_are_its_tokens_and_become_its_row() {
        let file = TokenFile {
            dtype: TokenType::U16,
            documents: Documents::from_lengths([3, 9]).unwrap(),
            placement: Placement::From(8),
            blocking: Blocking::new(5, true).unwrap(),
            vocab: Some(100),
            first_document: 10,
        };
        assert_eq!(file.blocks(), 3);
        // Tokens 5..11, two bytes each, after an 8-byte header.
        assert_eq!(file.byte_range(1), 18..30);
        let bytes: Vec<u8> = (5u16..11).flat_map(|t| t.to_le_bytes()).collect();
        let row = file.row(1, &bytes, &Packing::new()).unwrap();
        assert_eq!(row.input_ids, [5, 6, 7, 8, 9]);
        assert_eq!(row.document_ids, [11; 5]);
        let err = file.row(1, &bytes[2..], &Packing::new()).unwrap_err();
        assert!(err.contains("block 1 is 10 bytes, not the 12"), "{err}");
        let past: Vec<u8> = (95u16..101).flat_map(|t| t.to_le_bytes()).collect();
        let err = file.row(1, &past, &Packing::new()).unwrap_err();
        assert!(err.contains("outside the vocabulary of 100"), "{err}");
    }

    #[test]
    fn a_block_of_documents_placed_apart_reads_each_ones_tokens_and_skips_between() {
        // Documents of 3 and 4 u16 tokens at bytes 10 and 20: bytes 16..20 lie between.
        let file = TokenFile {
            dtype: TokenType::U16,
            documents: Documents::from_lengths([3, 4]).unwrap(),
            placement: Placement::Each(vec![10, 20].into()),
            blocking: Blocking::new(4, false).unwrap(),
            vocab: None,
            first_document: 0,
        };
        // Block 0: tokens 0..5, i.e. document 0 whole and document 1's first two.
        assert_eq!(file.byte_range(0), 10..24);
        let mut bytes: Vec<u8> = [1u16, 2, 3].iter().flat_map(|t| t.to_le_bytes()).collect();
        bytes.extend([0xEE; 4]);
        bytes.extend([4u16, 5].iter().flat_map(|t| t.to_le_bytes()));
        let row = file.row(0, &bytes, &Packing::new()).unwrap();
        assert_eq!(row.input_ids, [1, 2, 3, 4]);
        assert_eq!(row.labels, [2, 3, 4, 5]);
        assert_eq!(row.position_ids, [0, 1, 2, 0]);
    }
}
