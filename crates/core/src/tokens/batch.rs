//! Packed rows collated into the batch a language model trains on, its tensors ready to
//! hand over without a copy ([`HostTensor`]).

use super::pack::Row;
use crate::batch::BatchInfo;
use crate::export::{HostTensor, ShapeError};

/// A batch of packed rows: `[B, L]` tensors of `int64`, and the documents' boundaries over
/// the batch flattened to `B·L` tokens, as flash-attention's varlen kernels take them.
#[derive(Debug)]
pub struct TokenBatch {
    /// The tokens trained on, `[B, L]`.
    pub input_ids: HostTensor,
    /// The token each position predicts, or the ignore index, `[B, L]`.
    pub labels: HostTensor,
    /// Each token's place in its document, `[B, L]`.
    pub position_ids: HostTensor,
    /// The document each token belongs to (-1 for padding), `[B, L]`.
    pub document_ids: HostTensor,
    /// Where each document segment starts in the flattened batch, then `B·L`: `[S + 1]`
    /// `int32` (a document that spans two rows is two segments: rows do not attend to each
    /// other).
    pub cu_seqlens: HostTensor,
    /// The longest segment, which the varlen kernels take beside `cu_seqlens`.
    pub max_seqlen: usize,
    /// Which samples the rows are, and what was skipped.
    pub info: BatchInfo,
}

impl TokenBatch {
    /// The tokens its rows train on: padding rows (repeats of other ranks' blocks) and a
    /// kept tail's padding (document id -1) left out.
    pub fn tokens(&self) -> u64 {
        let rows = self.info.indices.len().saturating_sub(self.info.padding);
        let len = self.input_ids.shape().get(1).copied().unwrap_or(0);
        let documents = self.document_ids.as_i64().unwrap_or_default();
        documents
            .get(..rows * len)
            .map_or(0, |d| d.iter().filter(|&&d| d >= 0).count() as u64)
    }
}

/// Rows of one length collated into a [`TokenBatch`]; rows of different lengths are refused.
pub fn collate(rows: &[Row], info: BatchInfo) -> Result<TokenBatch, ShapeError> {
    let l = rows.first().map_or(0, |r| r.input_ids.len());
    let shape = vec![rows.len(), l];
    // One allocation a field, at its final size (a flat_map's collect grows by doubling).
    let field = |get: fn(&Row) -> &[i64]| -> Result<HostTensor, ShapeError> {
        let mut values = Vec::with_capacity(rows.len() * l);
        for row in rows {
            values.extend_from_slice(get(row));
        }
        HostTensor::i64(values.into(), shape.clone())
    };
    let mut cu_seqlens = vec![0i32];
    let mut max_seqlen = 0;
    for (b, row) in rows.iter().enumerate() {
        let base = (b * l) as i32;
        for pair in row.cu_seqlens.windows(2) {
            max_seqlen = max_seqlen.max((pair[1] - pair[0]) as usize);
            cu_seqlens.push(base + pair[1]);
        }
    }
    let segments = cu_seqlens.len();
    Ok(TokenBatch {
        input_ids: field(|r| &r.input_ids)?,
        labels: field(|r| &r.labels)?,
        position_ids: field(|r| &r.position_ids)?,
        document_ids: field(|r| &r.document_ids)?,
        cu_seqlens: HostTensor::i32(cu_seqlens.into(), vec![segments])?,
        max_seqlen,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{Blocking, Documents, Packing};

    #[test]
    fn rows_stack_into_tensors_and_boundaries_flatten_over_the_batch() {
        let docs = Documents::from_lengths([3, 9]).unwrap();
        let blocking = Blocking::new(5, true).unwrap();
        let rows: Vec<Row> = (0..2)
            .map(|i| {
                let block = blocking.block(&docs, i);
                let tokens: Vec<i64> = block.tokens.clone().map(|t| t as i64).collect();
                Packing::new().row(&tokens, &block, 0)
            })
            .collect();
        let batch = collate(&rows, BatchInfo::default()).unwrap();
        assert_eq!(batch.input_ids.shape(), [2, 5]);
        assert_eq!(batch.input_ids.as_i64().unwrap()[5..], [5, 6, 7, 8, 9]);
        // Row 0: [0, 3, 5]; row 1: one segment of 5 → 5..10 in the flattened batch.
        assert_eq!(batch.cu_seqlens.as_i32().unwrap(), [0, 3, 5, 10]);
        assert_eq!(batch.max_seqlen, 5);
        // A row of another length is refused.
        let mut short = rows.clone();
        short[1].input_ids.pop();
        assert!(collate(&short, BatchInfo::default()).is_err());
    }
}
