//! The sizes a Parquet page header claims, read before the page is decoded.
//!
//! The parquet crate decompresses a page into a buffer of the size its header claims, so a
//! hostile header is an allocation: a 32 KiB zstd page may claim 1 GiB (or 2 GiB, the most an
//! `i32` says) and be inflated in full before the lie shows. Each page of a fetch unit is
//! checked here first, against its column chunk's total and a ceiling. The header is Thrift's
//! compact protocol; the parquet crate keeps its reader to itself, and the `thrift` crate
//! allocates a binary field's claimed length before reading it (the same hole), so this reads
//! the few bytes it needs from the slice: fields 2 and 3, every other field skipped within the
//! bytes at hand, nothing allocated.

use parquet::file::metadata::ColumnChunkMetaData;

/// What a page header says of its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PageSizes {
    /// The header's own length in bytes.
    pub(super) header: usize,
    /// The page's bytes after its header, as stored.
    pub(super) compressed: usize,
    /// The page's bytes once decompressed.
    pub(super) uncompressed: usize,
}

/// Deeper nesting than a page header has (its statistics are two levels down) is refused.
const MAX_DEPTH: u32 = 16;

/// The most one page may claim decompressed: far more than any writer's pages (pyarrow's
/// are about 1 MiB; a page holds one value at least), and a ceiling when a footer lies too.
pub(super) const MAX_PAGE: usize = 512 << 20;

/// Checks a unit's pages (see [`check`]) against the footer's total for their column chunk
/// and [`MAX_PAGE`].
pub(super) fn check_chunk(bytes: &[u8], chunk: &ColumnChunkMetaData) -> Result<(), String> {
    let total = usize::try_from(chunk.uncompressed_size()).map_err(|_| {
        format!(
            "the footer gives the column chunk {} bytes decompressed",
            chunk.uncompressed_size()
        )
    })?;
    check(bytes, total, MAX_PAGE)
}

/// The sizes of the page whose header starts `bytes`.
pub(super) fn read(bytes: &[u8]) -> Result<PageSizes, String> {
    let mut reader = Reader { bytes, at: 0 };
    let (mut compressed, mut uncompressed) = (None, None);
    reader.fields(0, &mut |reader, id, kind| match (id, kind) {
        (2, I32) => {
            uncompressed = Some(reader.i32()?);
            Ok(())
        }
        (3, I32) => {
            compressed = Some(reader.i32()?);
            Ok(())
        }
        _ => reader.skip(kind, 1),
    })?;
    let size = |value: Option<i32>, what: &str| {
        let value = value.ok_or_else(|| format!("a page header without its {what} size"))?;
        usize::try_from(value).map_err(|_| format!("a page header claims a {what} size of {value}"))
    };
    Ok(PageSizes {
        header: reader.at,
        compressed: size(compressed, "compressed")?,
        uncompressed: size(uncompressed, "uncompressed")?,
    })
}

/// Checks every page header of `bytes` (whole pages, back to back): no page claims more than
/// `ceiling` bytes decompressed, nor all of them together (headers counted, as a footer counts
/// them) more than `total`, and each page's stored bytes lie within `bytes`.
pub(super) fn check(bytes: &[u8], total: usize, ceiling: usize) -> Result<(), String> {
    let (mut at, mut sum) = (0usize, 0usize);
    while at < bytes.len() {
        let page =
            read(&bytes[at..]).map_err(|e| format!("the page at byte {at} of the unit: {e}"))?;
        if page.uncompressed > ceiling {
            return Err(format!(
                "the page at byte {at} of the unit claims {} bytes decompressed, more than the \
                 {ceiling} bytes a page may take here: the file is damaged or hostile",
                page.uncompressed
            ));
        }
        // The footer's total counts each page's header with its decompressed bytes.
        sum = sum
            .saturating_add(page.header)
            .saturating_add(page.uncompressed);
        if sum > total {
            return Err(format!(
                "its pages claim more than the {total} bytes decompressed the footer gives the \
                 column chunk (the page at byte {at} reaches {sum}): the file is damaged or \
                 hostile"
            ));
        }
        at = at
            .checked_add(page.header)
            .and_then(|a| a.checked_add(page.compressed))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| {
                format!("the page at byte {at} of the unit claims more bytes than the unit holds")
            })?;
    }
    Ok(())
}

// Compact protocol types.
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("the header is cut short")?;
        self.at += 1;
        Ok(b)
    }

    fn advance(&mut self, n: u64) -> Result<(), String> {
        let n = usize::try_from(n).map_err(|_| "a field's length does not fit")?;
        self.at = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or("the header is cut short")?;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than ten bytes".to_owned())
    }

    fn i32(&mut self) -> Result<i32, String> {
        let raw = self.varint()?;
        let value = (raw >> 1) as i64 ^ -((raw & 1) as i64);
        i32::try_from(value).map_err(|_| format!("{value} is not an i32"))
    }

    /// A struct's fields, each handed to `field` (which reads or skips its value).
    fn fields(
        &mut self,
        depth: u32,
        field: &mut dyn FnMut(&mut Self, i16, u8) -> Result<(), String>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("the header nests deeper than a page header does".to_owned());
        }
        let mut last = 0i16;
        loop {
            let head = self.byte()?;
            if head == 0 {
                return Ok(());
            }
            let (delta, kind) = (head >> 4, head & 0x0f);
            let id = if delta == 0 {
                i16::try_from(self.i32()?).map_err(|_| "a field id out of range")?
            } else {
                last.checked_add(i16::from(delta))
                    .ok_or("a field id out of range")?
            };
            last = id;
            field(self, id, kind)?;
        }
    }

    /// Skips a value of `kind` (a boolean field's value is its type).
    fn skip(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("the header nests deeper than a page header does".to_owned());
        }
        match kind {
            TRUE | FALSE => Ok(()),
            BYTE => self.advance(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.advance(8),
            BINARY => {
                let len = self.varint()?;
                self.advance(len)
            }
            LIST | SET => {
                let head = self.byte()?;
                let (short, element) = (head >> 4, head & 0x0f);
                let count = if short == 15 {
                    self.varint()?
                } else {
                    u64::from(short)
                };
                self.elements(count, element, depth)
            }
            MAP => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                for _ in 0..count {
                    self.element(kinds >> 4, depth)?;
                    self.element(kinds & 0x0f, depth)?;
                }
                Ok(())
            }
            STRUCT => self.fields(depth + 1, &mut |reader, _, kind| {
                reader.skip(kind, depth + 1)
            }),
            other => Err(format!("a field of unknown type {other}")),
        }
    }

    fn elements(&mut self, count: u64, kind: u8, depth: u32) -> Result<(), String> {
        // Each element takes a byte at least: a count past what is left is a lie.
        if count > (self.bytes.len() - self.at) as u64 {
            return Err("a list longer than the header".to_owned());
        }
        (0..count).try_for_each(|_| self.element(kind, depth))
    }

    /// A list's or map's element: booleans take a byte there.
    fn element(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        if self.at >= self.bytes.len() {
            return Err("the header is cut short".to_owned());
        }
        match kind {
            TRUE | FALSE => self.advance(1),
            _ => self.skip(kind, depth + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data page header as parquet-format writes it: type 0, sizes, a CRC, a nested
    /// data page header with statistics holding binary min and max.
    fn header(uncompressed: i32, compressed: i32) -> Vec<u8> {
        fn zigzag(v: i64) -> Vec<u8> {
            let mut u = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (u & 0x7f) as u8;
                u >>= 7;
                if u == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        }
        let mut h = vec![0x15];
        h.extend(zigzag(0)); // type
        h.push(0x15);
        h.extend(zigzag(uncompressed.into()));
        h.push(0x15);
        h.extend(zigzag(compressed.into()));
        h.push(0x15);
        h.extend(zigzag(-12345)); // crc
        h.push(0x1c); // field 5, struct: data_page_header
        h.push(0x15);
        h.extend(zigzag(3)); // num_values
        h.push(0x15);
        h.extend(zigzag(0)); // encoding
        h.push(0x15);
        h.extend(zigzag(3));
        h.push(0x15);
        h.extend(zigzag(3));
        h.push(0x1c); // field 5, struct: statistics
        h.extend([0x58, 2, b'a', b'b', 0x18, 1, b'z']); // field 5 and 6, binary
        h.push(0x11); // field 7, bool true
        h.extend([0x19, 0x25, 2, 4]); // field 8, list of 2 i32
        h.push(0);
        h.push(0);
        h.push(0);
        h
    }

    #[test]
    fn a_headers_sizes_are_read_past_the_fields_it_skips() {
        let h = header(1 << 20, 40);
        let sizes = read(&h).unwrap();
        assert_eq!(
            sizes,
            PageSizes {
                header: h.len(),
                compressed: 40,
                uncompressed: 1 << 20
            }
        );
    }

    #[test]
    fn a_page_claiming_more_than_its_chunk_or_the_ceiling_is_refused_before_decoding() {
        let mut unit = header(100, 4);
        unit.extend([0; 4]);
        let second = unit.clone();
        unit.extend(&second);
        let whole = 2 * (header(100, 4).len() + 100);
        assert!(check(&unit, whole, 1 << 20).is_ok());
        assert!(
            check(&unit, whole - 1, 1 << 20)
                .unwrap_err()
                .contains("footer gives")
        );
        let mut bomb = header(1 << 30, 4);
        bomb.extend([0; 4]);
        assert!(
            check(&bomb, usize::MAX, 512 << 20)
                .unwrap_err()
                .contains("claims 1073741824")
        );
        let mut long = header(10, 400);
        long.extend([0; 4]);
        assert!(
            check(&long, 100, 100)
                .unwrap_err()
                .contains("more bytes than the unit")
        );
    }

    #[test]
    fn any_bytes_are_sizes_or_an_error_never_a_panic() {
        let h = header(77, 9);
        for cut in 0..h.len() {
            assert!(read(&h[..cut]).is_err(), "cut at {cut}");
        }
        let mut state = 7u64;
        for _ in 0..20_000 {
            let len = (state % 64) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let _ = read(&bytes);
            let _ = check(&bytes, 1 << 20, 1 << 20);
        }
        // A list claiming a billion elements in a short header is refused, not walked; lists
        // nested past any page header's depth are refused, not recursed into.
        assert!(read(&[0x19, 0xf5, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0]).is_err());
        let mut deep = vec![0x19];
        deep.extend(std::iter::repeat_n(0x19, 100_000));
        assert!(read(&deep).unwrap_err().contains("deeper"));
    }
}
