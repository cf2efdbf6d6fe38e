//! Megatron-LM's `.idx` file (the `MMIDIDX` layout of `megatron.core.datasets.indexed_dataset`):
//! a header, then each sequence's length in tokens, each sequence's byte offset in the `.bin`
//! file, and the sequence index where each document starts. Every count is checked against
//! the file's own length before anything is allocated, and every offset against the `.bin`
//! file's size.

use crate::tokens::{Documents, DocumentsError, TokenType};

/// The first bytes of every `.idx` file.
pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

const HEADER: usize = 9 + 8 + 1 + 8 + 8;

/// The token type of Megatron's `DType` code `code`, or what the code is when it is not an
/// integer type.
fn token_type(code: u8) -> Result<TokenType, String> {
    Ok(match code {
        1 => TokenType::U8,
        2 => TokenType::I8,
        3 => TokenType::I16,
        4 => TokenType::I32,
        5 => TokenType::I64,
        8 => TokenType::U16,
        6 | 7 => return Err(format!("dtype code {code} is a float type, not token ids")),
        other => return Err(format!("dtype code {other} is not one of Megatron's (1-8)")),
    })
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
    let dtype = token_type(bytes[17])?;
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
}
