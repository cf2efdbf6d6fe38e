//! A block's tokens made into the row a language model trains on: inputs, labels shifted by
//! one, positions that restart with each document, and the documents' boundaries as
//! flash-attention's varlen kernels take them.

use super::blocks::Block;

/// How blocks are made into rows (each as long as its block says: one length, the
/// [`Blocking`](super::Blocking)'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// What pads a short block's inputs.
    pub pad_id: i64,
    /// The label of a position that is not trained on (PyTorch's cross-entropy skips it).
    pub ignore_index: i64,
    /// Do not train a document's last token to predict the next document's first.
    pub mask_boundaries: bool,
    /// The id that ends a document, for corpora whose documents are stored run together
    /// (pre-packed rows, LitData items of several documents): a document also starts after
    /// each one, and document ids then number each row's documents from 0 (a document's
    /// place in its source is not known without reading the source from its start).
    pub end_of_document: Option<i64>,
}

impl Packing {
    /// Rows padded with 0, ignored labels -100, boundaries trained on (as Megatron-LM's
    /// GPT samples and LitData's token blocks are).
    pub fn new() -> Self {
        Self {
            pad_id: 0,
            ignore_index: -100,
            mask_boundaries: false,
            end_of_document: None,
        }
    }
}

impl Default for Packing {
    fn default() -> Self {
        Self::new()
    }
}

/// One packed row, `L` of each per-token field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// The tokens trained on.
    pub input_ids: Vec<i64>,
    /// The token each position predicts (the input shifted by one), or the ignore index.
    pub labels: Vec<i64>,
    /// Each token's place in its document, restarting at 0 where a document starts (and
    /// at the row's start, for a document that began in the block before).
    pub position_ids: Vec<i64>,
    /// The document each token belongs to (its index in the file, plus the file's first
    /// document's index in the source); with [`Packing::end_of_document`], its place among
    /// the row's documents, from 0.
    pub document_ids: Vec<i64>,
    /// Where each document of the row starts, then `L`: `cu_seqlens` for one row. Padding,
    /// when the row has some, is a last segment of its own, trained on nowhere.
    pub cu_seqlens: Vec<i32>,
}

impl Packing {
    /// The row `tokens` make: the block's tokens, `len + 1` of them (fewer for a tail), with
    /// its documents as `block` says (and as [`Packing::end_of_document`] splits them).
    /// `first_document` numbers the block's first document in the source.
    pub fn row(&self, tokens: &[i64], block: &Block, first_document: i64) -> Row {
        let l = block.len;
        let real = tokens.len().saturating_sub(1).min(l);
        let mut starts: Vec<usize> = block.starts.iter().map(|&s| s as usize).collect();
        let first_document = match self.end_of_document {
            None => first_document,
            Some(end) => {
                let ends = tokens[..real]
                    .iter()
                    .enumerate()
                    .filter(|&(_, &t)| t == end);
                starts.extend(ends.map(|(j, _)| j + 1));
                starts.sort_unstable();
                starts.dedup();
                0
            }
        };
        let mut row = Row {
            input_ids: Vec::with_capacity(l),
            labels: Vec::with_capacity(l),
            position_ids: Vec::with_capacity(l),
            document_ids: Vec::with_capacity(l),
            cu_seqlens: Vec::with_capacity(block.starts.len() + 3),
        };
        row.cu_seqlens.push(0);
        let mut starts = starts.into_iter().peekable();
        let (mut document, mut segment_start) = (first_document, 0usize);
        for j in 0..real {
            if starts.peek() == Some(&j) {
                starts.next();
                document += 1;
                segment_start = j;
                row.cu_seqlens.push(j as i32);
            }
            // The label is the next token; where the next token opens another document,
            // it is not this one's to predict when boundaries are masked.
            let next_opens = starts.peek() == Some(&(j + 1));
            row.input_ids.push(tokens[j]);
            row.labels.push(if self.mask_boundaries && next_opens {
                self.ignore_index
            } else {
                tokens[j + 1]
            });
            row.position_ids.push((j - segment_start) as i64);
            row.document_ids.push(document);
        }
        if real < l {
            row.cu_seqlens.push(real as i32);
            row.input_ids.resize(l, self.pad_id);
            row.labels.resize(l, self.ignore_index);
            row.position_ids.extend(0..(l - real) as i64);
            row.document_ids.resize(l, -1);
        }
        row.cu_seqlens.push(l as i32);
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::blocks::{Blocking, Documents};

    fn rows(lengths: &[u64], len: u64, packing: Packing) -> Vec<Row> {
        let docs = Documents::from_lengths(lengths.iter().copied()).unwrap();
        // Token t of the file is 100 + t, so every position is easy to check.
        let blocking = Blocking::new(len, true).unwrap();
        (0..blocking.blocks(docs.tokens()))
            .map(|i| {
                let block = blocking.block(&docs, i);
                let tokens: Vec<i64> = block.tokens.clone().map(|t| 100 + t as i64).collect();
                packing.row(&tokens, &block, block.first_document as i64)
            })
            .collect()
    }

    #[test]
    fn labels_shift_positions_restart_and_boundaries_are_cu_seqlens() {
        // Documents 0..3 and 3..12, rows of 5.
        let r = rows(&[3, 9], 5, Packing::new());
        assert_eq!(r[0].input_ids, [100, 101, 102, 103, 104]);
        assert_eq!(r[0].labels, [101, 102, 103, 104, 105]);
        assert_eq!(r[0].position_ids, [0, 1, 2, 0, 1]);
        assert_eq!(r[0].document_ids, [0, 0, 0, 1, 1]);
        assert_eq!(r[0].cu_seqlens, [0, 3, 5]);
        // The long document goes on: positions restart with the row.
        assert_eq!(r[1].input_ids, [105, 106, 107, 108, 109]);
        assert_eq!(r[1].position_ids, [0, 1, 2, 3, 4]);
        assert_eq!(r[1].cu_seqlens, [0, 5]);
    }

    #[test]
    fn masked_boundaries_do_not_predict_the_next_document() {
        let masked = Packing {
            mask_boundaries: true,
            ..Packing::new()
        };
        let r = rows(&[3, 9], 5, masked);
        assert_eq!(r[0].labels, [101, 102, -100, 104, 105]);
    }

    #[test]
    fn an_end_of_document_id_splits_documents_stored_run_together() {
        // One stored document of 12 tokens, 100..112, and 102 ends a document.
        let split = Packing {
            end_of_document: Some(102),
            mask_boundaries: true,
            ..Packing::new()
        };
        let r = rows(&[12], 5, split);
        // Row 0 reads 100..106: 102 ends a document, 105 (its label) is the next's.
        assert_eq!(r[0].position_ids, [0, 1, 2, 0, 1]);
        assert_eq!(r[0].document_ids, [0, 0, 0, 1, 1]);
        assert_eq!(r[0].cu_seqlens, [0, 3, 5]);
        assert_eq!(r[0].labels, [101, 102, -100, 104, 105]);
        // A stored boundary and an end id at the same place make one start.
        let both = Packing {
            end_of_document: Some(102),
            ..Packing::new()
        };
        let r = rows(&[3, 9], 5, both);
        assert_eq!(r[0].cu_seqlens, [0, 3, 5]);
        assert_eq!(r[0].document_ids, [0, 0, 0, 1, 1]);
    }

    #[test]
    fn a_kept_tail_is_padded_and_its_padding_is_a_segment_never_trained_on() {
        // 12 tokens, rows of 5: 0..6, 5..11, then the tail 10..12 (one position).
        let r = rows(&[12], 5, Packing::new());
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].input_ids, [110, 0, 0, 0, 0]);
        assert_eq!(r[2].labels, [111, -100, -100, -100, -100]);
        assert_eq!(r[2].position_ids, [0, 0, 1, 2, 3]);
        assert_eq!(r[2].document_ids, [0, -1, -1, -1, -1]);
        assert_eq!(r[2].cu_seqlens, [0, 1, 5]);
    }

    #[test]
    fn every_token_is_an_input_once_and_a_label_once() {
        let lengths = [4u64, 1, 17, 2, 9];
        let total: u64 = lengths.iter().sum();
        for len in 1..10 {
            let r = rows(&lengths, len, Packing::new());
            let inputs: Vec<i64> = r
                .iter()
                .flat_map(|row| row.input_ids.iter().zip(&row.document_ids))
                .filter(|(_, d)| **d >= 0)
                .map(|(t, _)| *t)
                .collect();
            assert_eq!(
                inputs,
                (100..100 + total as i64 - 1).collect::<Vec<_>>(),
                "L={len}"
            );
            let labels: Vec<i64> = r
                .iter()
                .flat_map(|row| row.labels.iter().copied())
                .filter(|&t| t != -100)
                .collect();
            assert_eq!(
                labels,
                (101..100 + total as i64).collect::<Vec<_>>(),
                "L={len}"
            );
        }
    }
}
