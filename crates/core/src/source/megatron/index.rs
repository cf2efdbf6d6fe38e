//! Megatron-LM's `.idx` file (the `MMIDIDX` layout of `megatron.core.datasets.indexed_dataset`):
//! a header, then each sequence's length in tokens, each sequence's byte offset in the `.bin`
//! file, and the sequence index where each document starts. Every count is checked against
//! the file's own length before anything is allocated, and every offset against the `.bin`
//! file's size.

use crate::tokens::{Documents, DocumentsError};

/// The first bytes of every `.idx` file.
pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

const HEADER: usize = 9 + 8 + 1 + 8 + 8;

/// How a `.bin` file stores its tokens (Megatron's `DType` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// Code 1.
    U8,
    /// Code 2.
    I8,
    /// Code 3.
    I16,
    /// Code 4.
    I32,
    /// Code 5.
    I64,
    /// Code 8, what Megatron picks for vocabularies under 65,500.
    U16,
}

impl TokenType {
    /// The type of code `code`, or what the code is when it is not an integer type.
    fn of_code(code: u8) -> Result<Self, String> {
        Ok(match code {
            1 => Self::U8,
            2 => Self::I8,
            3 => Self::I16,
            4 => Self::I32,
            5 => Self::I64,
            8 => Self::U16,
            6 | 7 => return Err(format!("dtype code {code} is a float type, not token ids")),
            other => return Err(format!("dtype code {other} is not one of Megatron's (1-8)")),
        })
    }

    /// Bytes a token takes.
    pub fn size(self) -> u64 {
        match self {
            Self::U8 | Self::I8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 => 4,
            Self::I64 => 8,
        }
    }

    /// Tokens of `bytes` (little-endian) as ids, refused when one is negative or at or past
    /// `vocab` (when given): a wrong dtype or a damaged file, not a token.
    pub fn ids(self, bytes: &[u8], vocab: Option<u64>) -> Result<Vec<i64>, String> {
        let size = self.size() as usize;
        if !bytes.len().is_multiple_of(size) {
            return Err(format!(
                "{} bytes are not whole {size}-byte tokens",
                bytes.len()
            ));
        }
        let ids: Vec<i64> = bytes
            .chunks_exact(size)
            .map(|b| match self {
                Self::U8 => i64::from(b[0]),
                Self::I8 => i64::from(b[0] as i8),
                Self::I16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
                Self::U16 => i64::from(u16::from_le_bytes([b[0], b[1]])),
                Self::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                Self::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            })
            .collect();
        if let Some((at, id)) = ids
            .iter()
            .enumerate()
            .find(|&(_, &id)| id < 0 || vocab.is_some_and(|v| id as u64 >= v))
        {
            return Err(match vocab {
                Some(v) => format!("token {at} is {id}, outside the vocabulary of {v}"),
                None => format!("token {at} is {id}, a negative id"),
            });
        }
        Ok(ids)
    }
}

/// What a `.idx` file says of its `.bin` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MegatronIndex {
    /// How tokens are stored.
    pub dtype: TokenType,
    /// The documents, each the tokens of its sequences, in storage order.
    pub documents: Documents,
}

/// Reads a little-endian integer at `at`, the file's length already checked.
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The index `bytes` hold, for a `.bin` file of `bin_size` bytes; a problem names the field.
pub fn parse(bytes: &[u8], bin_size: u64) -> Result<MegatronIndex, String> {
    if bytes.len() < HEADER || &bytes[..9] != MAGIC {
        return Err("not a Megatron index: no MMIDIDX header".into());
    }
    let version = u64_at(bytes, 9);
    if version != 1 {
        return Err(format!(
            "index version {version}; this reader knows version 1"
        ));
    }
    let dtype = TokenType::of_code(bytes[17])?;
    let sequences = u64_at(bytes, 18);
    let document_entries = u64_at(bytes, 26);
    // The tables' sizes, from the counts, must fit the file: 4 + 8 bytes a sequence, 8 an
    // entry of the document table (and optionally 1 a sequence, for multimodal modes).
    let tables = sequences
        .checked_mul(12)
        .and_then(|s| {
            document_entries
                .checked_mul(8)
                .and_then(|d| s.checked_add(d))
        })
        .filter(|&t| t <= (bytes.len() - HEADER) as u64)
        .ok_or_else(|| {
            format!(
                "the header claims {sequences} sequences and {document_entries} document \
                 entries, more than the file's {} bytes hold",
                bytes.len()
            )
        })?;
    let extra = (bytes.len() - HEADER) as u64 - tables;
    if extra != 0 && extra != sequences {
        return Err(format!(
            "{extra} bytes after the tables, which end the file"
        ));
    }
    let s = sequences as usize;
    let lengths_at = HEADER;
    let pointers_at = lengths_at + 4 * s;
    let documents_at = pointers_at + 8 * s;
    let length = |i: usize| {
        let at = lengths_at + 4 * i;
        u64::from(u32::from_le_bytes([
            bytes[at],
            bytes[at + 1],
            bytes[at + 2],
            bytes[at + 3],
        ]))
    };
    // Sequences lie back to back from the start of the `.bin` file, within it: a block is
    // then one byte range, whatever documents it crosses.
    let mut next = 0u64;
    for i in 0..s {
        let pointer = u64_at(bytes, pointers_at + 8 * i);
        if pointer != next {
            return Err(format!(
                "sequence {i} starts at byte {pointer}, not right after the one before ({next})"
            ));
        }
        let len = length(i);
        if len == 0 {
            return Err(format!("sequence {i} is empty"));
        }
        next = len
            .checked_mul(dtype.size())
            .and_then(|b| pointer.checked_add(b))
            .filter(|&end| end <= bin_size)
            .ok_or_else(|| format!("sequence {i} ends past the .bin file's {bin_size} bytes"))?;
    }
    if next != bin_size {
        return Err(format!(
            "the sequences hold {next} bytes, the .bin file {bin_size}"
        ));
    }
    // The document table: 0, then where each document ends, ending at the last sequence.
    let entries = document_entries as usize;
    let entry = |k: usize| u64_at(bytes, documents_at + 8 * k);
    if entries == 0 || entry(0) != 0 || entry(entries - 1) != sequences {
        return Err(format!(
            "the document table must run from 0 to the {sequences} sequences"
        ));
    }
    let mut lengths = Vec::with_capacity(entries - 1);
    let mut sequence = 0usize;
    for k in 1..entries {
        let end = entry(k);
        if end < sequence as u64 || end > sequences {
            return Err(format!(
                "document {} runs from sequence {sequence} to {end}, outside 0..{sequences}",
                k - 1
            ));
        }
        let tokens: u64 = (sequence..end as usize).map(length).sum();
        lengths.push(tokens);
        sequence = end as usize;
    }
    let documents = Documents::from_lengths(lengths).map_err(|e| match e {
        DocumentsError::Empty(d) => format!("document {d} holds no sequence"),
        other => other.to_string(),
    })?;
    Ok(MegatronIndex { dtype, documents })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index as Megatron's `_IndexWriter` writes it.
    fn index(dtype: u8, lengths: &[u32], documents: &[u64]) -> Vec<u8> {
        let size = match dtype {
            1 | 2 => 1,
            3 | 8 => 2,
            4 => 4,
            _ => 8,
        };
        let mut out = MAGIC.to_vec();
        out.extend(1u64.to_le_bytes());
        out.push(dtype);
        out.extend((lengths.len() as u64).to_le_bytes());
        out.extend((documents.len() as u64).to_le_bytes());
        for l in lengths {
            out.extend(l.to_le_bytes());
        }
        let mut at = 0u64;
        for l in lengths {
            out.extend(at.to_le_bytes());
            at += u64::from(*l) * size;
        }
        for d in documents {
            out.extend(d.to_le_bytes());
        }
        out
    }

    #[test]
    fn documents_are_their_sequences_tokens() {
        // Three sequences; documents [0, 2) and [2, 3).
        let idx = parse(&index(8, &[3, 4, 5], &[0, 2, 3]), 24).unwrap();
        assert_eq!(idx.dtype, TokenType::U16);
        assert_eq!(idx.documents, Documents::from_lengths([7, 5]).unwrap());
    }

    #[test]
    fn every_lie_is_refused_naming_the_field() {
        let good = index(8, &[3, 4], &[0, 1, 2]);
        let refused = |bytes: &[u8], bin: u64, words: &str| {
            let err = parse(bytes, bin).unwrap_err();
            assert!(err.contains(words), "{words}: {err}");
        };
        refused(b"MMIDID", 14, "no MMIDIDX header");
        refused(&good, 13, "past the .bin file");
        refused(&good, 15, "the .bin file 15");
        refused(&index(7, &[3, 4], &[0, 1, 2]), 28, "float type");
        refused(&index(8, &[3, 0], &[0, 1, 2]), 6, "sequence 1 is empty");
        refused(&index(8, &[3, 4], &[1, 2]), 14, "document table");
        refused(
            &index(8, &[3, 4], &[0, 1, 1, 2]),
            14,
            "document 1 holds no sequence",
        );
        // A count that claims more than the file holds, allocated for nothing.
        let mut huge = good.clone();
        huge[18..26].copy_from_slice(&(1u64 << 60).to_le_bytes());
        refused(&huge, 14, "more than the file's");
        let mut version = good.clone();
        version[9] = 2;
        refused(&version, 14, "version 2");
        // A pointer that skips bytes.
        let mut gap = good.clone();
        let second = HEADER + 8 + 8;
        gap[second..second + 8].copy_from_slice(&8u64.to_le_bytes());
        refused(&gap, 16, "not right after");
    }

    #[test]
    fn ids_are_read_in_their_type_and_checked_against_the_vocabulary() {
        let bytes: Vec<u8> = [1u16, 7, 65535]
            .iter()
            .flat_map(|t| t.to_le_bytes())
            .collect();
        assert_eq!(TokenType::U16.ids(&bytes, None).unwrap(), [1, 7, 65535]);
        let err = TokenType::U16.ids(&bytes, Some(50_000)).unwrap_err();
        assert!(err.contains("token 2 is 65535"), "{err}");
        let negative: Vec<u8> = (-3i32).to_le_bytes().to_vec();
        assert!(TokenType::I32.ids(&negative, None).is_err());
        assert!(TokenType::I32.ids(&[0, 0, 0], None).is_err());
    }
}
