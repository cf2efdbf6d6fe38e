//! The directory's ledger: which entry files it holds and their sizes, as every process that
//! writes to the directory agreed, so that all of them keep one byte budget.
//!
//! An append-only file of fixed-size records (`Add id len`, `Remove id`), each with its own
//! checksum, changed only under an OS lock on `journal.lock` (released by the kernel when its
//! holder dies, however it dies). A holder appends its records before it renames or after it
//! deletes the files they describe, so the files of the directory are always among the
//! entries the ledger counts: a process killed between the two leaves an entry counted with no
//! file (a miss, healed by the next reader that fetches it), never a file the budget does not
//! count. A record torn by a kill is cut off by the next holder. The file is rewritten from
//! the live entries when it has grown to several times their number; the others notice by its
//! inode and read it again from its start.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;

use super::super::entry::EntryId;

const RECORD: usize = 32;
const ADD: u8 = 1;
const REMOVE: u8 = 2;

/// A change to the directory's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record {
    /// Entry `id`'s file, of `len` bytes, is (or is about to be) in the directory.
    Add { id: EntryId, len: u64 },
    /// Entry `id`'s file is gone.
    Remove { id: EntryId },
}

impl Record {
    fn encode(self) -> [u8; RECORD] {
        let mut out = [0u8; RECORD];
        let (op, id, len) = match self {
            Record::Add { id, len } => (ADD, id, len),
            Record::Remove { id } => (REMOVE, id, 0),
        };
        out[0] = op;
        out[8..24].copy_from_slice(&id.to_le_bytes());
        out[24..32].copy_from_slice(&len.to_le_bytes());
        let check = xxh3_64(&out[8..]) as u32 ^ u32::from(op);
        out[4..8].copy_from_slice(&check.to_le_bytes());
        out
    }

    fn decode(raw: &[u8]) -> Option<Record> {
        let raw: &[u8; RECORD] = raw.try_into().ok()?;
        let check = u32::from_le_bytes(raw[4..8].try_into().ok()?);
        if check != xxh3_64(&raw[8..]) as u32 ^ u32::from(raw[0]) || raw[1..4] != [0, 0, 0] {
            return None;
        }
        let id = u128::from_le_bytes(raw[8..24].try_into().ok()?);
        let len = u64::from_le_bytes(raw[24..32].try_into().ok()?);
        match raw[0] {
            ADD => Some(Record::Add { id, len }),
            REMOVE => Some(Record::Remove { id }),
            _ => None,
        }
    }
}

/// What tells one file at a path from another put there since.
#[cfg(unix)]
fn file_id(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

/// What tells one file at a path from another put there since.
#[cfg(not(unix))]
fn file_id(meta: &fs::Metadata) -> u64 {
    meta.created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the ledger says happened since this process last read it.
#[derive(Debug)]
pub(crate) enum Replay {
    /// These records follow the ones read before.
    Since(Vec<Record>),
    /// The ledger was rewritten: these records are all of it, and what was read before is
    /// forgotten.
    Anew(Vec<Record>),
}

/// This process's handle on the ledger.
#[derive(Debug)]
pub(crate) struct Journal {
    root: PathBuf,
    lock: File,
    file: Option<File>,
    /// The inode of `file`: another one at the path means it was rewritten.
    inode: u64,
    /// Bytes of `file` read (or written) by this process.
    read: u64,
}

/// The ledger's lock, held: the directory's entries may be changed.
pub(crate) struct Held<'a> {
    journal: &'a mut Journal,
}

impl Journal {
    /// The ledger of the cache directory `root` (created if missing).
    pub fn open(root: &Path) -> io::Result<Journal> {
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join("journal.lock"))?;
        Ok(Journal {
            root: root.to_path_buf(),
            lock,
            file: None,
            inode: 0,
            read: 0,
        })
    }

    /// Take the lock, waiting at most `patience` for another process to let it go: a
    /// process stopped while holding it must not stop this one. `None` if it is still held.
    pub fn lock(&mut self, patience: Duration) -> io::Result<Option<Held<'_>>> {
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_micros(50);
        loop {
            match self.lock.try_lock() {
                Ok(()) => return Ok(Some(Held { journal: self })),
                Err(fs::TryLockError::WouldBlock) => {}
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

impl Held<'_> {
    fn path(&self) -> PathBuf {
        self.journal.root.join("journal")
    }

    /// The records added since this process last read the ledger (all of them after a
    /// rewrite), cutting off a record a killed process left half written.
    pub fn replay(&mut self) -> io::Result<Replay> {
        let j = &mut *self.journal;
        let path = j.root.join("journal");
        let mut anew = false;
        let current = match fs::metadata(&path) {
            Ok(meta) => Some(file_id(&meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if j.file.is_none() || current != Some(j.inode) {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&path)?;
            j.inode = file_id(&file.metadata()?);
            anew = j.file.is_some() || j.read > 0;
            j.file = Some(file);
            j.read = 0;
        }
        let Some(file) = j.file.as_mut() else {
            return Ok(Replay::Since(Vec::new()));
        };
        file.seek(SeekFrom::Start(j.read))?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        let mut records = Vec::with_capacity(raw.len() / RECORD);
        let mut good = 0usize;
        for chunk in raw.chunks(RECORD) {
            match Record::decode(chunk) {
                Some(record) => {
                    records.push(record);
                    good += RECORD;
                }
                None => break,
            }
        }
        if good < raw.len() {
            // Only a holder of the lock writes, and it holds it no longer: what does not
            // parse is a dead writer's torn record (or damage), never one being written.
            file.set_len(j.read + good as u64)?;
        }
        j.read += good as u64;
        Ok(if anew {
            Replay::Anew(records)
        } else {
            Replay::Since(records)
        })
    }

    /// Add `records` after those read (call [`replay`](Self::replay) first).
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let j = &mut *self.journal;
        let Some(file) = j.file.as_mut() else {
            return Err(io::Error::other(
                "the cache ledger was not read before a write",
            ));
        };
        let mut raw = Vec::with_capacity(records.len() * RECORD);
        for record in records {
            raw.extend_from_slice(&record.encode());
        }
        file.write_all(&raw)?;
        j.read += raw.len() as u64;
        Ok(())
    }

    /// Records in the ledger now.
    pub fn records(&self) -> u64 {
        self.journal.read / RECORD as u64
    }

    /// Write the ledger anew as `live` (a rewrite the other processes read from its start):
    /// whole beside it, then renamed over it.
    pub fn rewrite(&mut self, live: impl IntoIterator<Item = (EntryId, u64)>) -> io::Result<()> {
        let path = self.path();
        let fresh = self
            .journal
            .root
            .join(format!("journal.{}.new", std::process::id()));
        let mut raw = Vec::new();
        for (id, len) in live {
            raw.extend_from_slice(&Record::Add { id, len }.encode());
        }
        let written = (|| {
            let mut out = File::create(&fresh)?;
            out.write_all(&raw)?;
            fs::rename(&fresh, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&fresh);
        }
        written?;
        let j = &mut *self.journal;
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        j.inode = file_id(&file.metadata()?);
        j.file = Some(file);
        j.read = raw.len() as u64;
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let _ = self.journal.lock.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(replay: Replay) -> (bool, Vec<Record>) {
        match replay {
            Replay::Since(r) => (false, r),
            Replay::Anew(r) => (true, r),
        }
    }

    #[test]
    fn two_handles_agree_and_a_torn_record_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Journal::open(dir.path()).unwrap();
        let mut b = Journal::open(dir.path()).unwrap();
        {
            let mut held = a.lock(Duration::ZERO).unwrap().unwrap();
            assert_eq!(records(held.replay().unwrap()), (false, vec![]));
            held.append(&[Record::Add { id: 7, len: 100 }]).unwrap();
            // The lock excludes the other handle (an open file of its own, as a process).
            assert!(b.lock(Duration::from_millis(5)).unwrap().is_none());
        }
        // A killed writer's half record.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join("journal"))
            .unwrap();
        f.write_all(&Record::Remove { id: 7 }.encode()[..20])
            .unwrap();
        let mut held = b.lock(Duration::ZERO).unwrap().unwrap();
        assert_eq!(
            records(held.replay().unwrap()),
            (false, vec![Record::Add { id: 7, len: 100 }])
        );
        held.append(&[Record::Remove { id: 7 }]).unwrap();
        held.rewrite([(9, 5)]).unwrap();
        drop(held);
        let mut held = a.lock(Duration::ZERO).unwrap().unwrap();
        assert_eq!(
            records(held.replay().unwrap()),
            (true, vec![Record::Add { id: 9, len: 5 }])
        );
        assert_eq!(held.records(), 1);
    }

    #[test]
    fn a_flipped_record_is_not_read() {
        let mut raw = Record::Add { id: 1, len: 2 }.encode();
        raw[30] ^= 1;
        assert_eq!(Record::decode(&raw), None);
    }
}
