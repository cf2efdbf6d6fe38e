//! A Parquet file held in memory, read as the loader reads one (its images, or its token
//! blocks): what the fuzz target and a check of a file without a store call.

use std::sync::atomic::AtomicU64;

use loader_storage::ObjectMeta;

use super::footer::{self, FooterError};
use super::{Keep, Parquet, dataset, failed, tokens};
use crate::source::error::{Result, SourceError};
use crate::source::index::Dataset;

impl Parquet {
    /// A Parquet file held in memory, read as the loader reads it: the dataset it opens
    /// as (or why it does not), then each row's image bytes (or why not), decoded page by
    /// page as the engine decodes them. For fuzzing and for checking a file without a store.
    pub fn read_in_memory(
        &self,
        name: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<(Dataset, Vec<std::result::Result<bytes::Bytes, String>>)> {
        let bytes: bytes::Bytes = bytes.into();
        let size = bytes.len() as u64;
        let meta = ObjectMeta {
            key: name.to_owned(),
            size,
            version: None,
        };
        let fetch = in_memory(&bytes);
        let held = AtomicU64::new(0);
        let opened = futures::executor::block_on(self.open_with("memory", meta, &fetch, &held))?;
        let dataset = dataset("memory", vec![opened])?;
        let rows = records_in_memory(&dataset, &bytes, name);
        Ok((dataset, rows))
    }

    /// A Parquet file of token lists held in memory, read as the loader reads one: the
    /// dataset its `blocking` cuts (or why not), then each block's row (or why not), each
    /// row group decoded once as the engine decodes it. For fuzzing.
    pub fn read_tokens_in_memory(
        &self,
        name: &str,
        bytes: impl Into<bytes::Bytes>,
        blocking: crate::tokens::Blocking,
    ) -> Result<(
        Dataset,
        Vec<std::result::Result<crate::tokens::Row, String>>,
    )> {
        let bytes: bytes::Bytes = bytes.into();
        let size = bytes.len() as u64;
        let fetch = in_memory(&bytes);
        let problem = |problem: String| SourceError::Parquet {
            file: name.to_owned(),
            store: "memory".to_owned(),
            problem,
        };
        let footer =
            futures::executor::block_on(footer::read_metadata(size, |r| fetch(r, Keep::No)))
                .map_err(|e| failed(e, problem))?;
        let files = tokens::open_file(
            name,
            footer,
            size,
            self.columns.tokens.as_deref(),
            blocking,
            None,
        )
        .map_err(problem)?;
        let files = crate::tokens::TokenFiles::numbered(files)
            .map_err(|e| SourceError::Invalid(e.to_string()))?;
        let dataset = Dataset::from_tokens(files)?;
        let files = dataset
            .tokens()
            .cloned()
            .ok_or(SourceError::Invalid("no tokens".into()))?;
        let packing = crate::tokens::Packing::new();
        let rows = records_in_memory(&dataset, &bytes, name)
            .into_iter()
            .enumerate()
            .map(|(i, record)| record.and_then(|b| files.row(i as u64, &b, &packing)))
            .collect();
        Ok((dataset, rows))
    }
}

/// Each sample's record bytes of `dataset`, a file `bytes` held in memory, its spans
/// decoded as the engine decodes them: once for the run of samples that share one.
fn records_in_memory(
    dataset: &Dataset,
    bytes: &bytes::Bytes,
    name: &str,
) -> Vec<std::result::Result<bytes::Bytes, String>> {
    let fetch = in_memory(bytes);
    let mut out = Vec::with_capacity(dataset.len());
    let mut decoded: Option<(std::ops::Range<u64>, Vec<loader_scheduler::Record>)> = None;
    for item in dataset.iter() {
        let (Some(range), Some(of)) = (&item.range, &item.record) else {
            out.push(Err("a sample without its span".to_owned()));
            continue;
        };
        if decoded.as_ref().is_none_or(|(r, _)| r != range) {
            let records = fetch(range.clone(), Keep::No)
                .into_inner()
                .map_err(|_| "the span is past the file's end".to_owned())
                .and_then(|span| of.records.decode(name, range, span));
            match records {
                Ok(r) => decoded = Some((range.clone(), r)),
                Err(e) => {
                    decoded = None;
                    out.push(Err(e));
                    continue;
                }
            }
        }
        let record = decoded
            .as_ref()
            .and_then(|(_, r)| r.get(of.slot as usize))
            .and_then(|r| r.bytes.clone());
        out.push(record.ok_or_else(|| "no value".to_owned()));
    }
    out
}

/// Spans of a file held in memory, fetched as a store's would be: a span outside it is an
/// error.
fn in_memory(
    bytes: &bytes::Bytes,
) -> impl Fn(
    std::ops::Range<u64>,
    Keep,
) -> std::future::Ready<std::result::Result<bytes::Bytes, FooterError>>
+ '_ {
    move |range, _| {
        let size = bytes.len();
        let got = usize::try_from(range.start)
            .ok()
            .zip(usize::try_from(range.end).ok())
            .filter(|(a, b)| a <= b && *b <= size)
            .map(|(a, b)| bytes.slice(a..b))
            .ok_or_else(|| {
                FooterError::Parquet(parquet::errors::ParquetError::EOF(format!(
                    "bytes {}..{} are outside the file of {size} bytes",
                    range.start, range.end
                )))
            });
        std::future::ready(got)
    }
}
