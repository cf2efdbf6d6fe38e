//! One token file as blocks: how it stores its ids, its documents, how it is cut. What a
//! token format hands the loader for each file, and what turns a block's fetched bytes
//! into a row.

use std::ops::Range;

use super::blocks::{Block, Blocking, Documents};
use super::ids::TokenType;
use super::pack::{Packing, Row};

/// A token file: its ids' type, its documents, where its tokens start in it and how it is
/// cut into blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    /// How the file stores its ids.
    pub dtype: TokenType,
    /// Its documents, in storage order.
    pub documents: Documents,
    /// The byte where its first token starts (0 for Megatron's `.bin`; a chunk's header
    /// length for formats that have one).
    pub offset: u64,
    /// How it is cut.
    pub blocking: Blocking,
    /// Ids at or past this are refused (a wrong dtype or damage, not a token).
    pub vocab: Option<u64>,
    /// The index of its first document in its source, so document ids are the source's.
    pub first_document: u64,
}

impl TokenFile {
    /// How many blocks it gives.
    pub fn blocks(&self) -> u64 {
        self.blocking.blocks(self.documents.tokens())
    }

    /// Block `i` (`i` < [`TokenFile::blocks`]).
    pub fn block(&self, i: u64) -> Block {
        self.blocking.block(&self.documents, i)
    }

    /// The bytes of the file block `i` reads: what its fetch asks for.
    pub fn byte_range(&self, i: u64) -> Range<u64> {
        let tokens = self.block(i).tokens;
        let size = self.dtype.size();
        self.offset + tokens.start * size..self.offset + tokens.end * size
    }

    /// The row block `i`'s fetched `bytes` make; a problem says what is wrong with them.
    pub fn row(&self, i: u64, bytes: &[u8], packing: &Packing) -> Result<Row, String> {
        let block = self.block(i);
        let want = (block.tokens.end - block.tokens.start) * self.dtype.size();
        if bytes.len() as u64 != want {
            return Err(format!(
                "block {i} is {} bytes, not the {want} its tokens {:?} take",
                bytes.len(),
                block.tokens
            ));
        }
        let ids = self.dtype.ids(bytes, self.vocab)?;
        let first = self.first_document + block.first_document as u64;
        Ok(packing.row(&ids, &block, first as i64))
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
            offset: 8,
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
}
