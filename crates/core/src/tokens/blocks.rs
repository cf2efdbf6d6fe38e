//! A token file cut into fixed-length blocks: which tokens each block reads and where its
//! documents start, found by binary search so that block `i` of any file is known without
//! reading the blocks before it (a resume at token 10^10 replays nothing).

use std::ops::Range;

/// How a file's tokens are cut into blocks: `L` tokens a row trains on, and whether the
/// file's last tokens, fewer than a block, are kept as a short block (padded when packed)
/// or dropped. Block `i` reads tokens `i·L .. i·L + L + 1`: one more than it trains on, for
/// the labels shifted by one, so the last token of a block is the first of the next (as
/// Megatron-LM's GPT samples are cut); or, [`disjoint`](Blocking::disjoint), sharing no
/// token, as LitData's `TokensLoader` cuts its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    len: u64,
    keep_tail: bool,
    disjoint: bool,
}

/// A block length that cannot cut a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a block of {0} tokens: give between 1 and {max}", max = Blocking::MAX)]
pub struct BlockingError(pub u64);

/// The documents of one token file in storage order, as the cumulative token count at each
/// document's end: what every block's boundaries are read from. Shared, not copied, by its
/// clones (a mixture's, the stage's): a corpus's table can be tens of megabytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Documents {
    ends: std::sync::Arc<[u64]>,
}

/// A document list that cannot describe a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentsError {
    /// A document holds no token.
    #[error("document {0} is empty")]
    Empty(usize),
    /// The lengths add up past what a file can hold.
    #[error("the documents' lengths add up past 2^64 tokens")]
    Overflow,
}

impl Documents {
    /// The documents of `lengths` tokens each, in order. An empty document is refused: it
    /// has no token to carry its boundary.
    pub fn from_lengths(lengths: impl IntoIterator<Item = u64>) -> Result<Self, DocumentsError> {
        let mut total = 0u64;
        let ends = lengths
            .into_iter()
            .enumerate()
            .map(|(i, len)| {
                if len == 0 {
                    return Err(DocumentsError::Empty(i));
                }
                total = total.checked_add(len).ok_or(DocumentsError::Overflow)?;
                Ok(total)
            })
            .collect::<Result<Vec<u64>, _>>()?;
        Ok(Self { ends: ends.into() })
    }

    /// Documents ended by each `end_of_document` token of `tokens` (the token belongs to
    /// the document it ends); tokens after the last one are a document of their own. For
    /// formats that store one flat stream.
    pub fn split_at<T: Copy + PartialEq>(tokens: &[T], end_of_document: T) -> Self {
        let mut ends: Vec<u64> = tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == end_of_document)
            .map(|(i, _)| i as u64 + 1)
            .collect();
        if ends.last() != Some(&(tokens.len() as u64)) && !tokens.is_empty() {
            ends.push(tokens.len() as u64);
        }
        Self { ends: ends.into() }
    }

    /// How many documents.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The token count at each document's end, in order.
    pub fn ends(&self) -> &[u64] {
        &self.ends
    }

    /// Tokens in all.
    pub fn tokens(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The document that holds token `t` (`t` < [`Documents::tokens`]).
    pub fn document_of(&self, t: u64) -> usize {
        self.ends.partition_point(|&end| end <= t)
    }

    /// Where document `d` starts.
    pub fn start(&self, d: usize) -> u64 {
        if d == 0 { 0 } else { self.ends[d - 1] }
    }
}

/// One block of a file: the tokens it reads and the documents they belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The file's tokens the block reads: `len + 1` of them, fewer for a kept tail.
    pub tokens: Range<u64>,
    /// The first document it reads from (its index in the file).
    pub first_document: usize,
    /// Where, within the block, each later document starts (positions > 0, increasing).
    pub starts: Vec<u32>,
    /// The length of the row it makes (`L`), whatever the tokens it reads.
    pub len: usize,
}

impl Blocking {
    /// The longest block: a document's start within a block is a `u32`, as `cu_seqlens` is
    /// an `int32`.
    pub const MAX: u64 = i32::MAX as u64 - 1;

    /// Blocks of `len` tokens, the tail kept or dropped; a length of 0, or past
    /// [`Blocking::MAX`], is refused.
    pub fn new(len: u64, keep_tail: bool) -> Result<Self, BlockingError> {
        if len == 0 || len > Self::MAX {
            return Err(BlockingError(len));
        }
        Ok(Self {
            len,
            keep_tail,
            disjoint: false,
        })
    }

    /// The same rows from blocks that share no token: block `i` reads tokens
    /// `i·(L+1) .. i·(L+1) + L + 1`, as LitData's `TokensLoader(block_size=L + 1)` reads
    /// them (the last token of a block is a label only).
    pub fn disjoint(self) -> Self {
        Self {
            disjoint: true,
            ..self
        }
    }

    /// Whether blocks share no token.
    pub fn is_disjoint(&self) -> bool {
        self.disjoint
    }

    /// Tokens from one block's start to the next's.
    fn stride(&self) -> u64 {
        self.len + u64::from(self.disjoint)
    }

    /// Tokens a row trains on (`L`).
    pub fn row_len(&self) -> u64 {
        self.len
    }

    /// Whether a file's last tokens, fewer than a block, make a short block.
    pub fn keep_tail(&self) -> bool {
        self.keep_tail
    }

    /// How many blocks a file of `tokens` tokens gives.
    pub fn blocks(&self, tokens: u64) -> u64 {
        // Every block but a tail needs `len + 1` tokens from its start; a tail, two (a
        // token and its label).
        let full = match tokens.checked_sub(self.len + 1) {
            Some(past) => past / self.stride() + 1,
            None => 0,
        };
        let rest = tokens - full * self.stride();
        full + u64::from(self.keep_tail && rest >= 2)
    }

    /// Block `i` of `documents` (`i` < [`Blocking::blocks`]), in O(log documents).
    pub fn block(&self, documents: &Documents, i: u64) -> Block {
        let start = i * self.stride();
        let end = (start + self.len + 1).min(documents.tokens());
        let first_document = documents.document_of(start);
        let mut starts = Vec::new();
        let mut d = first_document + 1;
        while d < documents.len() && documents.start(d) < end {
            starts.push((documents.start(d) - start) as u32);
            d += 1;
        }
        Block {
            tokens: start..end,
            first_document,
            starts,
            len: self.len as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(lengths: &[u64]) -> Documents {
        Documents::from_lengths(lengths.iter().copied()).unwrap()
    }

    #[test]
    fn blocks_overlap_by_the_label_token_and_the_tail_is_kept_or_dropped() {
        // 10 tokens, L = 4: blocks read 0..5, 4..9, and the tail 8..10.
        let d = docs(&[10]);
        let keep = Blocking::new(4, true).unwrap();
        let drop = Blocking::new(4, false).unwrap();
        assert_eq!((keep.blocks(10), drop.blocks(10)), (3, 2));
        let ranges: Vec<_> = (0..3).map(|i| keep.block(&d, i).tokens).collect();
        assert_eq!(ranges, [0..5, 4..9, 8..10]);
        // 9 tokens fill two blocks exactly: no tail.
        assert_eq!((keep.blocks(9), drop.blocks(9)), (2, 2));
        assert_eq!(keep.blocks(1), 0, "one token trains on nothing");
    }

    #[test]
    fn disjoint_blocks_share_no_token() {
        // 12 tokens, L = 3: blocks read 0..4, 4..8, 8..12; 14 tokens leave a tail 12..14.
        let keep = Blocking::new(3, true).unwrap().disjoint();
        let drop = Blocking::new(3, false).unwrap().disjoint();
        assert_eq!((keep.blocks(12), drop.blocks(12)), (3, 3));
        let ranges: Vec<_> = (0..3).map(|i| keep.block(&docs(&[12]), i).tokens).collect();
        assert_eq!(ranges, [0..4, 4..8, 8..12]);
        assert_eq!((keep.blocks(14), drop.blocks(14)), (4, 3));
        assert_eq!(keep.block(&docs(&[14]), 3).tokens, 12..14);
        // 13 tokens: the last alone trains on nothing.
        assert_eq!(keep.blocks(13), 3);
    }

    #[test]
    fn a_length_that_cannot_cut_a_file_is_refused() {
        assert_eq!(Blocking::new(0, true), Err(BlockingError(0)));
        let err = Blocking::new(Blocking::MAX + 1, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("give between 1 and"), "{err}");
        assert_eq!(
            Blocking::new(Blocking::MAX, true).unwrap().row_len(),
            Blocking::MAX
        );
    }

    #[test]
    fn a_blocks_documents_are_found_by_search_and_a_long_one_continues() {
        // Documents of 3, 9 and 2 tokens: 0..3, 3..12, 12..14.
        let d = docs(&[3, 9, 2]);
        let b = Blocking::new(5, true).unwrap();
        assert_eq!(b.blocks(14), 3);
        let first = b.block(&d, 0);
        assert_eq!(
            (first.tokens, first.first_document, first.starts),
            (0..6, 0, vec![3])
        );
        // The long document goes on in the next block, from its start.
        let second = b.block(&d, 1);
        assert_eq!(
            (second.tokens, second.first_document, second.starts),
            (5..11, 1, vec![])
        );
        let third = b.block(&d, 2);
        assert_eq!(
            (third.tokens, third.first_document, third.starts),
            (10..14, 1, vec![2])
        );
    }

    #[test]
    fn every_token_is_trained_on_once_across_the_blocks() {
        for lengths in [vec![1u64, 1, 1], vec![7], vec![2, 30, 1, 5], vec![100, 3]] {
            let d = docs(&lengths);
            for len in 1..12 {
                let b = Blocking::new(len, true).unwrap();
                let mut next = 0;
                for i in 0..b.blocks(d.tokens()) {
                    let block = b.block(&d, i);
                    assert_eq!(block.tokens.start, next, "{lengths:?} L={len} block {i}");
                    next = block.tokens.end - 1;
                }
                assert_eq!(next, d.tokens().saturating_sub(1), "{lengths:?} L={len}");
            }
        }
    }

    #[test]
    fn far_blocks_need_no_replay() {
        // 10^10 tokens in documents of 1,000: block 10^9 - 1 is found at once.
        let d = Documents::from_lengths(std::iter::repeat_n(1_000, 10_000_000)).unwrap();
        let b = Blocking::new(10, false).unwrap();
        assert_eq!(b.blocks(d.tokens()), 999_999_999);
        let last = b.block(&d, 999_999_998);
        assert_eq!(last.tokens, 9_999_999_980..9_999_999_991);
        assert_eq!(last.first_document, 9_999_999);
        assert!(last.starts.is_empty());
    }

    #[test]
    fn a_flat_stream_splits_after_each_end_of_document() {
        let d = Documents::split_at(&[5u32, 6, 0, 7, 0, 8, 9], 0);
        assert_eq!(*d.ends, [3, 5, 7]);
        assert_eq!(*Documents::split_at(&[1u32, 0], 0).ends, [2]);
        assert!(Documents::split_at::<u32>(&[], 0).is_empty());
        assert_eq!(
            Documents::from_lengths([3, 0]),
            Err(DocumentsError::Empty(1))
        );
    }
}
