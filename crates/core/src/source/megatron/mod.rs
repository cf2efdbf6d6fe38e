//! Megatron-LM's indexed datasets (`.bin` + `.idx`, the `MMIDIDX` layout): [`load`] reads
//! the `.idx` file once into a [`TokenFile`], whose blocks are then each one ranged GET of
//! the `.bin` file ([`TokenFile::byte_range`]). Sequences lie back to back in the `.bin`
//! file, so a block is one byte range whatever documents it crosses; the documents'
//! boundaries come from the `.idx` file.
//!
//! Registered as `megatron`: a URL naming a folder of `.idx`/`.bin` pairs (every pair one
//! file of the dataset, in key order) or one `.idx` or `.bin` file, read in blocks of
//! `source.block_size` tokens.

mod index;
mod write;

use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use loader_storage::{DynStorage, ObjectMeta, Storage};

use super::error::{Result, SourceError};
use super::format::{About, Fit, Format, Probe};
use super::index::Dataset;
use crate::tokens::{Blocking, Placement, TokenFile, TokenFiles};

pub use index::{MAGIC, MegatronIndex, parse as parse_index};
pub use write::MegatronWriter;

/// Megatron-LM's dataset `prefix` (`prefix.idx` and `prefix.bin`) as a token file cut by
/// `blocking`, ids at or past `vocab` refused: the `.idx` file read whole (bounded by the
/// store's largest read), the `.bin` file's size from a HEAD. An error names the file, the
/// store and what is wrong.
pub async fn load(
    store: &DynStorage,
    prefix: &str,
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<TokenFile> {
    Ok(load_with_meta(store, prefix, blocking, vocab).await?.0)
}

/// [`load`], with what the HEAD of the `.bin` file said of it.
async fn load_with_meta(
    store: &DynStorage,
    prefix: &str,
    blocking: Blocking,
    vocab: Option<u64>,
) -> Result<(TokenFile, ObjectMeta)> {
    let (idx, bin) = (format!("{prefix}.idx"), format!("{prefix}.bin"));
    let (bytes, meta) = futures::try_join!(store.get(&idx), store.head(&bin))?;
    let index = parse_index(&bytes, meta.size).map_err(|problem| SourceError::Megatron {
        file: idx,
        store: store.name().to_owned(),
        problem,
    })?;
    let file = TokenFile {
        dtype: index.dtype,
        documents: index.documents,
        placement: Placement::From(0),
        blocking,
        vocab,
        first_document: 0,
    };
    Ok((file, meta))
}

/// Index files read at once while a dataset of many files opens.
const INDEXES_AT_ONCE: usize = 16;

/// Megatron-LM's indexed datasets as a [`Format`]: every `.idx` file with its `.bin` file
/// beside it is one token file of the dataset.
#[derive(Debug, Clone, Copy, Default)]
pub struct Megatron;

impl Megatron {
    /// The prefixes (keys without `.idx`/`.bin`) of the pairs `keys` hold, in key order.
    fn prefixes<'k>(keys: impl Iterator<Item = &'k str>) -> Vec<String> {
        let keys: std::collections::BTreeSet<&str> = keys.collect();
        keys.iter()
            .filter_map(|k| k.strip_suffix(".idx"))
            .filter(|p| keys.contains(format!("{p}.bin").as_str()))
            .map(str::to_owned)
            .collect()
    }

    /// The prefixes the URL names (its files, a pair each) or its listing holds.
    async fn found(probe: &Probe<'_>) -> Result<Vec<String>> {
        if let Some(named) = probe.named() {
            // Each pair once, in key order, however the URL lists its files.
            let prefixes: std::collections::BTreeSet<&str> = named
                .iter()
                .filter_map(|k| k.strip_suffix(".idx").or_else(|| k.strip_suffix(".bin")))
                .collect();
            return Ok(prefixes.into_iter().map(str::to_owned).collect());
        }
        let listed = probe.listed().await?.unwrap_or_default();
        Ok(Self::prefixes(listed.iter().map(|m| m.key.as_str())))
    }
}

#[async_trait(?Send)]
impl Format for Megatron {
    fn about(&self) -> About {
        About::new("megatron", "a Megatron-LM indexed dataset").reads(&[
            "block_size",
            "keep_tail",
            "vocab_size",
        ])
    }

    fn names(&self, name: &str) -> bool {
        name.ends_with(".idx") || name.ends_with(".bin")
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        if let Some(named) = probe.named() {
            let ours = !named.is_empty() && named.iter().all(|k| self.names(k));
            return Ok(ours.then_some(Fit::Named));
        }
        Ok((!Self::found(probe).await?.is_empty()).then_some(Fit::Listed))
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let options = probe.options();
        let blocking = options
            .blocking()
            .map_err(|e| SourceError::Invalid(e.to_string()))?
            .ok_or_else(|| {
                SourceError::Invalid(format!(
                    "{} is read in blocks of tokens: set source.block_size to the tokens a \
                     row trains on (Python: block_size=, loader run: --block-size)",
                    self.about().described
                ))
            })?;
        let store = probe.store();
        let prefixes = Self::found(probe).await?;
        let vocab = options.vocab_size;
        let loaded: Vec<(TokenFile, ObjectMeta)> = futures::stream::iter(&prefixes)
            .map(|prefix| load_with_meta(store, prefix, blocking, vocab))
            .buffered(INDEXES_AT_ONCE)
            .try_collect()
            .await?;
        let (files, objects): (Vec<_>, Vec<_>) = loaded
            .into_iter()
            .map(|(file, meta)| ((Arc::<str>::from(meta.key.as_str()), file), meta))
            .unzip();
        let files = TokenFiles::numbered(files).map_err(|e| SourceError::Megatron {
            file: prefixes
                .first()
                .map_or_else(String::new, |p| format!("{p}.idx")),
            store: store.name().to_owned(),
            problem: e.to_string(),
        })?;
        Ok(Dataset::from_tokens(files)?.with_objects(objects))
    }
}
