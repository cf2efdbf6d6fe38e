//! What one cache entry is (a whole object or one aligned block of it), its id, and its
//! file format on disk.

use std::ops::Range;

use bytes::Bytes;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// The id of an entry: a 128-bit hash of the object key and the unit, stable across runs,
/// machines and versions of this crate, so it names the entry's file. A collision is caught
/// by the key and unit stored in the file.
pub(crate) type EntryId = u128;

/// Which bytes of an object an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Unit {
    /// The whole object, as `get` returns it.
    Whole,
    /// Block `n`: bytes `n * block_bytes ..` up to the next block or the end of the object.
    Block(u64),
}

impl Unit {
    fn tag(self) -> (u8, u64) {
        match self {
            Unit::Whole => (0, 0),
            Unit::Block(n) => (1, n),
        }
    }
}

/// The id of `key`'s `unit` in the store named `store` ([`Storage::name`](crate::Storage::name)):
/// two stores with the same keys (buckets, prefixes, mounted datasets) sharing a directory
/// keep entries of their own.
pub(crate) fn entry_id(store: &str, key: &str, unit: Unit) -> EntryId {
    let (tag, n) = unit.tag();
    let mut buf = Vec::with_capacity(store.len() + key.len() + 11);
    buf.extend_from_slice(store.as_bytes());
    buf.push(0xfe);
    buf.extend_from_slice(key.as_bytes());
    // A byte no UTF-8 key holds, so `("a", 1)` and `("a\x01", ..)` cannot meet.
    buf.push(0xff);
    buf.push(tag);
    buf.extend_from_slice(&n.to_le_bytes());
    xxh3_128(&buf)
}

/// The blocks of `block_bytes` that `range` touches.
pub(crate) fn blocks_of(range: &Range<u64>, block_bytes: u64) -> Range<u64> {
    if range.start >= range.end {
        return 0..0;
    }
    range.start / block_bytes..(range.end - 1) / block_bytes + 1
}

/// What an entry was made from: checked against this run's view of the object, so a
/// rewritten object is never served from an entry of its old bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub size: u64,
    pub version: Option<String>,
}

const MAGIC: &[u8; 8] = b"LDRCACH1";

/// An entry's file: magic, checksum, header length, header (key, unit, origin), payload.
/// The checksum (xxh3-64) covers everything after itself, so a torn or flipped file is
/// detected on read, whatever a crash or a disk did to it.
pub(crate) fn encode(key: &str, unit: Unit, origin: &Origin, payload: &[u8]) -> Vec<u8> {
    let mut header = Vec::with_capacity(key.len() + 64);
    put_str(&mut header, key);
    let (tag, n) = unit.tag();
    header.push(tag);
    header.extend_from_slice(&n.to_le_bytes());
    header.extend_from_slice(&origin.size.to_le_bytes());
    match &origin.version {
        Some(v) => {
            header.push(1);
            put_str(&mut header, v);
        }
        None => header.push(0),
    }
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut body = Vec::with_capacity(4 + header.len() + payload.len());
    body.extend_from_slice(&(header.len() as u32).to_le_bytes());
    body.extend_from_slice(&header);
    body.extend_from_slice(payload);
    let mut file = Vec::with_capacity(16 + body.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&xxh3_64(&body).to_le_bytes());
    file.extend_from_slice(&body);
    file
}

#[cfg(test)]
/// The length of the file [`encode`] writes: what the entry costs of the disk budget.
pub(crate) fn file_len(key: &str, origin: &Origin, payload: u64) -> u64 {
    let version = origin.version.as_ref().map_or(0, |v| 4 + v.len());
    let header = 4 + key.len() + 1 + 8 + 8 + 1 + version + 8;
    (8 + 8 + 4 + header) as u64 + payload
}

/// Why a file read back is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// The bytes are not what was written (checksum, length or layout).
    Corrupt(&'static str),
    /// Another object's entry under the same id (a hash collision), or another unit.
    Other,
    /// Made from another version or size of the object.
    Stale,
}

/// The payload of `file` if it is an intact entry of `key`'s `unit` made from `origin`.
pub(crate) fn decode(
    file: Bytes,
    key: &str,
    unit: Unit,
    origin: &Origin,
) -> Result<Bytes, Rejected> {
    if file.len() < 20 || &file[..8] != MAGIC {
        return Err(Rejected::Corrupt("no entry header"));
    }
    let sum = u64::from_le_bytes(
        file[8..16]
            .try_into()
            .map_err(|_| Rejected::Corrupt("short"))?,
    );
    if xxh3_64(&file[16..]) != sum {
        return Err(Rejected::Corrupt("checksum mismatch"));
    }
    let mut r = Reader {
        buf: &file[16..],
        at: 0,
    };
    let header_len = r.u32()? as usize;
    let payload_at = 16 + 4 + header_len;
    let stored_key = r.str()?;
    let tag = r.u8()?;
    let n = r.u64()?;
    let size = r.u64()?;
    let version = match r.u8()? {
        0 => None,
        _ => Some(r.str()?.to_owned()),
    };
    let len = r.u64()?;
    if payload_at as u64 + len != file.len() as u64 || r.at != 4 + header_len {
        return Err(Rejected::Corrupt("length mismatch"));
    }
    if stored_key != key || (tag, n) != unit.tag() {
        return Err(Rejected::Other);
    }
    if size != origin.size || version != origin.version {
        return Err(Rejected::Stale);
    }
    Ok(file.slice(payload_at..))
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Rejected> {
        let end = self.at.checked_add(n).ok_or(Rejected::Corrupt("short"))?;
        let out = self
            .buf
            .get(self.at..end)
            .ok_or(Rejected::Corrupt("short"))?;
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, Rejected> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Rejected> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, Rejected> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<&'a str, Rejected> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| Rejected::Corrupt("key not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            size: 10,
            version: Some("\"etag\"".into()),
        }
    }

    #[test]
    fn an_entry_reads_back_and_every_flipped_byte_is_caught() {
        let file = encode("a/b.jpg", Unit::Block(3), &origin(), b"payload");
        assert_eq!(file.len() as u64, file_len("a/b.jpg", &origin(), 7));
        let got = decode(
            Bytes::from(file.clone()),
            "a/b.jpg",
            Unit::Block(3),
            &origin(),
        );
        assert_eq!(got.as_deref(), Ok(&b"payload"[..]));
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            let got = decode(Bytes::from(bad), "a/b.jpg", Unit::Block(3), &origin());
            assert!(
                matches!(got, Err(Rejected::Corrupt(_))),
                "byte {i}: {got:?}"
            );
        }
        for cut in 0..file.len() {
            let got = decode(
                Bytes::copy_from_slice(&file[..cut]),
                "a/b.jpg",
                Unit::Block(3),
                &origin(),
            );
            assert!(got.is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn another_version_key_or_unit_is_not_served() {
        let file = Bytes::from(encode("k", Unit::Whole, &origin(), b"x"));
        let newer = Origin {
            size: 10,
            version: Some("\"other\"".into()),
        };
        assert_eq!(
            decode(file.clone(), "k", Unit::Whole, &newer),
            Err(Rejected::Stale)
        );
        assert_eq!(
            decode(file.clone(), "j", Unit::Whole, &origin()),
            Err(Rejected::Other)
        );
        assert_eq!(
            decode(file, "k", Unit::Block(0), &origin()),
            Err(Rejected::Other)
        );
    }

    #[test]
    fn blocks_cover_a_range() {
        assert_eq!(blocks_of(&(0..1), 4), 0..1);
        assert_eq!(blocks_of(&(3..5), 4), 0..2);
        assert_eq!(blocks_of(&(4..8), 4), 1..2);
        assert_eq!(blocks_of(&(5..5), 4), 0..0);
        assert_ne!(
            entry_id("s", "a", Unit::Whole),
            entry_id("s", "a", Unit::Block(0))
        );
        assert_ne!(
            entry_id("s", "a", Unit::Whole),
            entry_id("t", "a", Unit::Whole)
        );
    }
}
