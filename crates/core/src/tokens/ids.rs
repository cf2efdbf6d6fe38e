//! Token ids as files store them: integers of one width, read into `i64` and checked
//! against the vocabulary, so a wrong dtype or a damaged file is an error, not a token.

/// How a file stores its token ids: little-endian integers of one width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// `uint8`.
    U8,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `uint16`, what Megatron and LitData pick for vocabularies under 65,536.
    U16,
    /// `uint32`.
    U32,
    /// `uint64` (an id past `i64::MAX` is refused as negative).
    U64,
}

impl TokenType {
    /// Its name as numpy gives it: `uint16`, `int32`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "uint8",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 => "int32",
            Self::I64 => "int64",
            Self::U16 => "uint16",
            Self::U32 => "uint32",
            Self::U64 => "uint64",
        }
    }

    /// The type numpy names `name` (`uint16`, `int32`, ...).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::U8,
            Self::I8,
            Self::I16,
            Self::I32,
            Self::I64,
            Self::U16,
            Self::U32,
            Self::U64,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }

    /// The highest id it stores (as an `i64`: `uint64`'s past `i64::MAX` are refused).
    pub fn max_id(self) -> i64 {
        match self {
            Self::U8 => i64::from(u8::MAX),
            Self::I8 => i64::from(i8::MAX),
            Self::I16 => i64::from(i16::MAX),
            Self::I32 => i64::from(i32::MAX),
            Self::U16 => i64::from(u16::MAX),
            Self::U32 => i64::from(u32::MAX),
            Self::I64 | Self::U64 => i64::MAX,
        }
    }

    /// Bytes a token takes.
    pub fn size(self) -> u64 {
        match self {
            Self::U8 | Self::I8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 => 4,
            Self::I64 | Self::U64 => 8,
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
                Self::U32 => i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                Self::I64 | Self::U64 => {
                    i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                }
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

#[cfg(test)]
mod tests {
    use super::*;

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
