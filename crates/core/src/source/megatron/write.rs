//! Megatron-LM's indexed datasets written as megatron-core's `IndexedDatasetBuilder` writes
//! them with one sequence per document: the ids back to back in `prefix.bin`, then
//! `prefix.idx` (the `MMIDIDX` header, each sequence's length and byte offset, and the
//! document table) once every document is in. For `loader tokenize` and examples; the
//! reader is [`load`](super::load).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::index::MAGIC;
use crate::source::WriteError;
use crate::tokens::TokenType;

/// Megatron's `DType` code of `dtype`, for the types it has.
fn code(dtype: TokenType) -> Option<u8> {
    Some(match dtype {
        TokenType::U8 => 1,
        TokenType::I8 => 2,
        TokenType::I16 => 3,
        TokenType::I32 => 4,
        TokenType::I64 => 5,
        TokenType::U16 => 8,
        TokenType::U32 | TokenType::U64 => return None,
    })
}

/// A Megatron-LM indexed dataset being written: documents added one at a time, the index
/// written by [`MegatronWriter::finish`] (a dataset not finished has no `.idx` file, so no
/// reader takes it for whole).
#[derive(Debug)]
pub struct MegatronWriter {
    bin: BufWriter<File>,
    idx: PathBuf,
    dtype: TokenType,
    code: u8,
    /// Each document's tokens, one sequence each.
    sizes: Vec<u32>,
}

impl MegatronWriter {
    /// Start `prefix.bin` (the index will be `prefix.idx`), ids stored as `dtype`: one of
    /// Megatron's types (not `uint32` or `uint64`).
    pub fn create(prefix: &Path, dtype: TokenType) -> Result<Self, WriteError> {
        let code = code(dtype).ok_or_else(|| {
            WriteError::Sample(format!(
                "Megatron-LM stores no {} ids: choose uint16 (vocabularies under 65,536) or \
                 int32",
                dtype.name()
            ))
        })?;
        let with = |ext: &str| {
            let mut path = prefix.as_os_str().to_owned();
            path.push(ext);
            PathBuf::from(path)
        };
        Ok(Self {
            bin: BufWriter::new(File::create(with(".bin"))?),
            idx: with(".idx"),
            dtype,
            code,
            sizes: Vec::new(),
        })
    }

    /// Append a document of `ids`; an empty one, or an id its type cannot hold, is refused.
    pub fn add_document(&mut self, ids: &[i64]) -> Result<(), WriteError> {
        let document = self.sizes.len();
        if ids.is_empty() {
            return Err(WriteError::Sample(format!(
                "document {document} has no token: Megatron-LM has no empty documents"
            )));
        }
        let len = u32::try_from(ids.len())
            .ok()
            .filter(|&n| n <= i32::MAX as u32)
            .ok_or_else(|| {
                WriteError::Sample(format!(
                    "document {document} has {} tokens: more than a sequence's int32 length",
                    ids.len()
                ))
            })?;
        let mut bytes = Vec::with_capacity(ids.len() * self.dtype.size() as usize);
        for &id in ids {
            let fits = |max: i64, min: i64| (min..=max).contains(&id);
            let ok = match self.dtype {
                TokenType::U8 => fits(u8::MAX.into(), 0),
                TokenType::I8 => fits(i8::MAX.into(), i8::MIN.into()),
                TokenType::I16 => fits(i16::MAX.into(), i16::MIN.into()),
                TokenType::U16 => fits(u16::MAX.into(), 0),
                TokenType::I32 => fits(i32::MAX.into(), i32::MIN.into()),
                TokenType::I64 | TokenType::U32 | TokenType::U64 => true,
            };
            if !ok {
                return Err(WriteError::Sample(format!(
                    "document {document}: id {id} does not fit {}",
                    self.dtype.name()
                )));
            }
            let le = id.to_le_bytes();
            bytes.extend_from_slice(&le[..self.dtype.size() as usize]);
        }
        self.bin.write_all(&bytes)?;
        self.sizes.push(len);
        Ok(())
    }

    /// Documents added so far.
    pub fn documents(&self) -> usize {
        self.sizes.len()
    }

    /// Flush the `.bin` file and write the `.idx` file beside it.
    pub fn finish(mut self) -> Result<(), WriteError> {
        self.bin.flush()?;
        let n = self.sizes.len() as u64;
        let mut idx = BufWriter::new(File::create(&self.idx)?);
        idx.write_all(MAGIC)?;
        idx.write_all(&1u64.to_le_bytes())?;
        idx.write_all(&[self.code])?;
        idx.write_all(&n.to_le_bytes())?;
        idx.write_all(&(n + 1).to_le_bytes())?;
        for &size in &self.sizes {
            idx.write_all(&(size as i32).to_le_bytes())?;
        }
        let mut pointer = 0i64;
        for &size in &self.sizes {
            idx.write_all(&pointer.to_le_bytes())?;
            pointer += i64::from(size) * self.dtype.size() as i64;
        }
        for d in 0..=n {
            idx.write_all(&(d as i64).to_le_bytes())?;
        }
        idx.flush()?;
        Ok(())
    }
}
