//! Megatron-LM's indexed datasets (`.bin` + `.idx`, the `MMIDIDX` layout): [`load`] reads
//! the `.idx` file once into a [`TokenFile`], whose blocks are then each one ranged GET of
//! the `.bin` file ([`TokenFile::byte_range`]). Sequences lie back to back in the `.bin`
//! file, so a block is one byte range whatever documents it crosses; the documents'
//! boundaries come from the `.idx` file. Not yet a registered format: the loader does not
//! open one by its URL.

mod index;

use loader_storage::{DynStorage, Storage};

use super::error::{Result, SourceError};
use crate::tokens::{Blocking, TokenFile};

pub use index::{MAGIC, MegatronIndex, parse as parse_index};

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
    let (idx, bin) = (format!("{prefix}.idx"), format!("{prefix}.bin"));
    let (bytes, meta) = futures::try_join!(store.get(&idx), store.head(&bin))?;
    let index = parse_index(&bytes, meta.size).map_err(|problem| SourceError::Megatron {
        file: idx,
        store: store.name().to_owned(),
        problem,
    })?;
    Ok(TokenFile {
        dtype: index.dtype,
        documents: index.documents,
        offset: 0,
        blocking,
        vocab,
        first_document: 0,
    })
}
