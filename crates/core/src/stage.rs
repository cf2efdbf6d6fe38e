//! A loader's CPU stage and collate: the native image pipeline's, sharing buffers, or
//! any other given to the builder.

use std::sync::Arc;

use bytes::Bytes;
use loader_decoder::{Output, Pipeline, Sample, SampleData, SampleKey};
use loader_scheduler::{RawBatch, SampleInfo, Stage, StageError, Weigh};

use crate::Result;
use crate::batch::{Batch, BatchInfo, collate_into};
use crate::buffer::{BufferPool, Lender};
use crate::error::CollateError;
use crate::tokens::{Packing, Row, TokenBatch, TokenFiles};

/// Turns the CPU stage's outputs for one batch into the batch type a caller wants; each
/// sample's label, key and members ride with it in its `SampleInfo`.
pub type Collate<T, B> = Arc<dyn Fn(RawBatch<T>) -> Result<B> + Send + Sync>;

/// A loader's CPU stage, what weighs its outputs, and the collate that batches them.
pub(crate) struct Stages<T, B> {
    pub(crate) stage: Stage<T>,
    pub(crate) weigh: Option<Weigh<T>>,
    pub(crate) collate: Collate<T, B>,
}

/// The CPU stage of `pipeline` and the default collate, sharing buffers: the collate hands
/// each sample's buffer back for the stage to write a later sample into, and each dropped
/// batch hands its buffer back for a later batch.
///
/// Batches go into the memory `lender` holds when the loader is built, if any.
pub(crate) fn pipeline_stage(
    pipeline: Pipeline,
    lender: Lender,
) -> (Stage<Sample>, Collate<Sample, Batch>) {
    let pool = Arc::new(BufferPool::lent_by(lender));
    let shared = Arc::clone(&pool);
    let stage = move |bytes: Bytes, info: &SampleInfo| -> std::result::Result<Sample, StageError> {
        let reuse = match pipeline.output() {
            Output::F32Chw { .. } => SampleData::F32(shared.f32_samples.take(0)),
            Output::U8Hwc | Output::U8Chw => SampleData::U8(shared.u8_samples.take(0)),
        };
        let key = SampleKey {
            epoch: info.epoch,
            index: info.index,
        };
        Ok(pipeline.run_reusing(&bytes, key, reuse)?)
    };
    let collate = move |raw| collate_into(raw, &pool);
    (Arc::new(stage), Arc::new(collate))
}

/// The bytes a decoded image holds, for the decoded-bytes bound.
pub(crate) fn sample_weight() -> Weigh<Sample> {
    Arc::new(sample_bytes)
}

/// The bytes `sample`'s pixels hold: what a [`weigh`](DataLoaderBuilder::weigh) of a stage
/// that makes [`Sample`]s gives.
pub fn sample_bytes(sample: &Sample) -> usize {
    match &sample.data {
        SampleData::F32(v) => v.len() * 4,
        SampleData::U8(v) => v.len(),
    }
}

/// The CPU stage that packs each block of `files` into a row, and the collate that stacks
/// rows into a [`TokenBatch`]. A block is found by its dataset index, so the stage needs
/// nothing but the fetched bytes.
pub(crate) fn token_stage(
    files: Arc<TokenFiles>,
    packing: Packing,
) -> (Stage<Row>, Weigh<Row>, Collate<Row, TokenBatch>) {
    let stage = move |bytes: Bytes, info: &SampleInfo| -> std::result::Result<Row, StageError> {
        Ok(files.row(info.index, &bytes, &packing)?)
    };
    // Five fields of i64 a token, as the row holds them.
    let weigh = |row: &Row| row.input_ids.len() * 5 * 8;
    let collate = |raw: RawBatch<Row>| -> Result<TokenBatch> {
        let mut info = BatchInfo {
            epoch: raw.epoch,
            skipped: raw.skipped,
            padding: raw.padding,
            ..BatchInfo::default()
        };
        let mut rows = Vec::with_capacity(raw.samples.len());
        for (sample, row) in raw.samples {
            info.indices.push(sample.index);
            info.keys.push(sample.name.unwrap_or(sample.key));
            rows.push(row);
        }
        crate::tokens::collate(&rows, info).map_err(|e| CollateError::Other(Box::new(e)).into())
    };
    (Arc::new(stage), Arc::new(weigh), Arc::new(collate))
}
