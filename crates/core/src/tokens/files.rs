//! A token dataset's files read as one run of blocks: what a token format opens, and what
//! a token [`Dataset`](crate::Dataset) holds instead of one record per sample, so a corpus
//! of billions of tokens costs the loader its documents' lengths, not a record per block.

use std::ops::Range;
use std::sync::Arc;

use super::blocks::Blocking;
use super::file::{Placement, TokenFile};
use super::ids::TokenType;
use super::pack::{Packing, Row};

/// About how many bytes of whole blocks a token file's chunk holds: what the shard-local
/// order reads with one request (as it reads shards' chunks).
pub const CHUNK_BYTES: u64 = 4 << 20;

/// Why files cannot be read as one token dataset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFilesError {
    /// No file, or files with no block.
    #[error("no block of {len} tokens in its files")]
    Empty {
        /// The block length.
        len: u64,
    },
    /// Files cut or stored unlike the first (two corpora of other tokenizers, say).
    #[error("{key:?} {problem}, unlike {first:?}")]
    Unlike {
        /// The first file.
        first: Arc<str>,
        /// The file that differs.
        key: Arc<str>,
        /// How it differs.
        problem: String,
    },
    /// A file whose documents are placed over one another, or with no place given.
    #[error("{key:?}: {problem}")]
    Placement {
        /// The file.
        key: Arc<str>,
        /// What is wrong.
        problem: String,
    },
    /// More blocks than an index of this machine holds.
    #[error("{blocks} blocks: more than this machine can index")]
    TooMany {
        /// The blocks the files hold.
        blocks: u64,
    },
}

/// Files of one token dataset, each cut into blocks on its own (a block never spans two
/// files), read as one run: block `i` of the dataset is block `i - start` of the file whose
/// blocks hold it. Every file stores its ids alike and makes rows of one length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFiles {
    files: Vec<(Arc<str>, TokenFile)>,
    /// Each file's first block in the dataset, then the dataset's blocks.
    starts: Vec<u64>,
}

impl TokenFiles {
    /// `files` (each with the key of the object it is) in dataset order; refused when one
    /// stores ids or makes rows unlike the first, or none gives a block.
    pub fn new(files: Vec<(Arc<str>, TokenFile)>) -> Result<Self, TokenFilesError> {
        let Some((first_key, first)) = files.first() else {
            return Err(TokenFilesError::Empty { len: 0 });
        };
        for (key, file) in &files[1..] {
            let problem = if file.dtype != first.dtype {
                format!(
                    "stores ids as {}, not {}",
                    file.dtype.name(),
                    first.dtype.name()
                )
            } else if file.blocking.row_len() != first.blocking.row_len() {
                format!(
                    "is cut in rows of {} tokens, not {}",
                    file.blocking.row_len(),
                    first.blocking.row_len()
                )
            } else if file.vocab != first.vocab {
                "has another vocabulary size".to_owned()
            } else {
                continue;
            };
            return Err(TokenFilesError::Unlike {
                first: Arc::clone(first_key),
                key: Arc::clone(key),
                problem,
            });
        }
        for (key, file) in &files {
            placement_problem(file).map_err(|problem| TokenFilesError::Placement {
                key: Arc::clone(key),
                problem,
            })?;
        }
        let mut starts = Vec::with_capacity(files.len() + 1);
        let mut total = 0u64;
        for (_, file) in &files {
            starts.push(total);
            total += file.blocks();
        }
        starts.push(total);
        if total == 0 {
            return Err(TokenFilesError::Empty {
                len: first.blocking.row_len(),
            });
        }
        if usize::try_from(total).is_err() {
            return Err(TokenFilesError::TooMany { blocks: total });
        }
        Ok(Self { files, starts })
    }

    /// [`TokenFiles::new`], each file's documents numbered after the last file's: a
    /// document id names one document of the whole dataset.
    pub fn numbered(mut files: Vec<(Arc<str>, TokenFile)>) -> Result<Self, TokenFilesError> {
        let mut first = 0u64;
        for (_, file) in &mut files {
            file.first_document = first;
            first += file.document_count();
        }
        Self::new(files)
    }

    /// The blocks of every file.
    pub fn blocks(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The files, each with its key, in dataset order.
    pub fn files(&self) -> &[(Arc<str>, TokenFile)] {
        &self.files
    }

    /// How the first file is cut: every file's rows are as long (whether blocks overlap, or
    /// a tail is kept, is each file's own).
    pub fn blocking(&self) -> Blocking {
        self.files[0].1.blocking
    }

    /// How every file stores its ids.
    pub fn dtype(&self) -> TokenType {
        self.files[0].1.dtype
    }

    /// Which file holds block `i` of the dataset (by its place in [`TokenFiles::files`]),
    /// and the block's index in it.
    pub fn locate(&self, i: u64) -> Option<(usize, u64)> {
        if i >= self.blocks() {
            return None;
        }
        // The last file starting at or before `i`: files with no block start where the
        // next does, and are passed over.
        let at = self.starts.partition_point(|&s| s <= i) - 1;
        Some((at, i - self.starts[at]))
    }

    /// File `f`'s first block in the dataset.
    pub fn first_block(&self, f: usize) -> u64 {
        self.starts.get(f).copied().unwrap_or(0)
    }

    /// The file holding block `i` of the dataset, its key, and the block's index in it.
    pub(crate) fn find(&self, i: u64) -> Option<(&Arc<str>, &TokenFile, u64)> {
        let (at, block) = self.locate(i)?;
        let (key, file) = &self.files[at];
        Some((key, file, block))
    }

    /// Block `i`'s object and the bytes of it its fetch reads.
    pub fn range(&self, i: u64) -> Option<(Arc<str>, Range<u64>)> {
        let (key, file, block) = self.find(i)?;
        Some((Arc::clone(key), file.byte_range(block)))
    }

    /// The row block `i`'s fetched `bytes` make; a problem names the object and what is
    /// wrong with the bytes.
    pub fn row(&self, i: u64, bytes: &[u8], packing: &Packing) -> Result<Row, String> {
        let (key, file, block) = self
            .find(i)
            .ok_or_else(|| format!("block {i} is past the {} blocks", self.blocks()))?;
        file.row(block, bytes, packing)
            .map_err(|problem| format!("{key:?}: {problem}"))
    }

    /// The same files with each key `key` gives (a mixture's mount).
    pub(crate) fn rekeyed(&self, key: impl Fn(&str) -> Arc<str>) -> Self {
        Self {
            files: self
                .files
                .iter()
                .map(|(k, file)| (key(k), file.clone()))
                .collect(),
            starts: self.starts.clone(),
        }
    }

    /// `parts` one after another: a mixture's sources, each of its own first document.
    pub(crate) fn concat(parts: &[&TokenFiles]) -> Result<Self, TokenFilesError> {
        Self::new(parts.iter().flat_map(|p| p.files.iter().cloned()).collect())
    }
}

/// What is wrong with where `file` says its documents lie: a document with no place, or
/// one starting before the last one's tokens end (which a block's gathering would read
/// twice, or out of order).
fn placement_problem(file: &TokenFile) -> Result<(), String> {
    let Placement::Each(starts) = &file.placement else {
        return Ok(());
    };
    if starts.len() != file.documents.len() {
        return Err(format!(
            "{} documents but {} places",
            file.documents.len(),
            starts.len()
        ));
    }
    let size = file.dtype.size();
    let mut free = 0u64;
    for (d, &start) in starts.iter().enumerate() {
        let len = file.documents.ends()[d] - file.documents.start(d);
        if start < free {
            return Err(format!(
                "document {d} starts at byte {start}, before the last one ends ({free})"
            ));
        }
        free = len
            .checked_mul(size)
            .and_then(|n| n.checked_add(start))
            .ok_or_else(|| format!("document {d} ends past 2^64 bytes"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{Documents, Placement};

    fn file(lengths: &[u64]) -> TokenFile {
        TokenFile {
            dtype: TokenType::U16,
            documents: Documents::from_lengths(lengths.iter().copied()).unwrap(),
            placement: Placement::From(0),
            blocking: Blocking::new(4, false).unwrap(),
            vocab: None,
            first_document: 0,
        }
    }

    #[test]
    fn blocks_run_on_through_the_files_each_cut_on_its_own() {
        // 9, 2 (no block of 4 + 1) and 13 tokens: 2, 0 and 3 blocks.
        let files = TokenFiles::new(vec![
            ("a".into(), file(&[9])),
            ("b".into(), file(&[2])),
            ("c".into(), file(&[6, 7])),
        ])
        .unwrap();
        assert_eq!(files.blocks(), 5);
        let ranges: Vec<_> = (0..6).map(|i| files.range(i)).collect();
        assert_eq!(
            ranges,
            [
                Some(("a".into(), 0..10)),
                Some(("a".into(), 8..18)),
                Some(("c".into(), 0..10)),
                Some(("c".into(), 8..18)),
                Some(("c".into(), 16..26)),
                None,
            ]
        );
    }

    #[test]
    fn files_stored_or_cut_unlike_the_first_are_refused() {
        let mut other = file(&[9]);
        other.dtype = TokenType::I32;
        let err = TokenFiles::new(vec![("a".into(), file(&[9])), ("b".into(), other)]);
        assert!(
            matches!(&err, Err(TokenFilesError::Unlike { key, .. }) if &**key == "b"),
            "{err:?}"
        );
        assert!(matches!(
            TokenFiles::new(vec![("a".into(), file(&[3]))]),
            Err(TokenFilesError::Empty { len: 4 })
        ));
        // Documents of 3 u16 tokens each at bytes 0 and 4: the second over the first.
        let mut over = file(&[3, 3]);
        over.placement = Placement::Each(vec![0, 4].into());
        let err = TokenFiles::new(vec![("a".into(), over.clone())]).unwrap_err();
        assert!(
            err.to_string().contains("before the last one ends (6)"),
            "{err}"
        );
        over.placement = Placement::Each(vec![0].into());
        let err = TokenFiles::new(vec![("a".into(), over)]).unwrap_err();
        assert!(
            err.to_string().contains("2 documents but 1 places"),
            "{err}"
        );
    }
}
