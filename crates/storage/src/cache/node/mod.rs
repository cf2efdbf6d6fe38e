//! The cross-process part of the cache: the directory its processes share.
//!
//! The cache directory's files: entry files, the locks that tell live processes from dead
//! ones, and the scan that starts a run warm. Any number of processes on the host read and
//! write it at once; the ledger (`journal.rs`) keeps them within one budget.
//!
//! Layout: `lock` (held shared by every process using the directory; exclusively, for a
//! moment, by one that finds itself alone and tidies up), `journal` and `journal.lock` (the
//! ledger), `entries/<2 hex>/<32 hex>` (one file per entry, named by its id) and `tmp/`,
//! where each process writes in a folder of its own beside a lock file it holds for life. A
//! file is written whole under `tmp/` and renamed into place, so no reader ever opens a
//! partly written entry; a killed process leaves only its `tmp/` folder, deleted by the next
//! process that finds its lock free.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

pub(super) mod journal;

use super::entry::EntryId;
use journal::Journal;

/// How long a process waits for another that holds the directory to tidy it up.
const TIDY_PATIENCE: Duration = Duration::from_secs(60);

/// The cache directory, as this process uses it.
#[derive(Debug)]
pub(crate) struct Disk {
    root: PathBuf,
    entries: PathBuf,
    /// This process's folder under `tmp/`.
    tmp: PathBuf,
    /// Where the processes' counters are recorded, one file each.
    ranks: PathBuf,
    /// Where a process claims an entry it is fetching, one locked file each.
    claims: PathBuf,
    /// This process's name in `tmp/` and `ranks/`.
    name: String,
    /// Held shared for the life of the cache: a process that gets it exclusively is alone.
    _users: File,
    /// Held for the life of the cache: a process that gets it knows `tmp` is a dead one's.
    _tmp_lock: File,
    serial: AtomicU64,
}

/// This process's claim on an entry it fetches: other processes wanting it wait for its
/// file instead of fetching it too. Let go when dropped (after the entry's file is placed,
/// or the fetch failed, or the entry was not kept).
#[derive(Debug)]
pub(crate) struct Claim {
    path: PathBuf,
    _file: File,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Deleted while still locked, so the folder does not fill with claim files; a
        // process that opened it just before takes the claim on the deleted file, and at
        // worst fetches the entry a second time.
        let _ = fs::remove_file(&self.path);
    }
}

/// An entry file found when the directory was opened.
struct Found {
    id: EntryId,
    len: u64,
    modified: SystemTime,
}

fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

impl Disk {
    /// Open (creating) `root` and its ledger. A process that finds itself the only one
    /// using the directory deletes what killed writers left and writes the ledger anew from
    /// the entry files there (oldest first), so a run starts warm whatever the last one did.
    pub fn open(root: &Path) -> io::Result<(Disk, Journal)> {
        let entries = root.join("entries");
        let tmp_root = root.join("tmp");
        let ranks = root.join("ranks");
        let claims = root.join("claims");
        fs::create_dir_all(&claims)?;
        fs::create_dir_all(&entries)?;
        fs::create_dir_all(&tmp_root)?;
        fs::create_dir_all(&ranks)?;
        let users = open_lock(&root.join("lock"))?;
        let mut journal = Journal::open(root)?;
        match users.try_lock() {
            Ok(()) => {
                for stale in fs::read_dir(&tmp_root)? {
                    let path = stale?.path();
                    let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
                }
                // A new node's run: the counters of the last one's processes go, and the
                // claims and half-written ledgers of processes killed.
                for old in fs::read_dir(&ranks)?.chain(fs::read_dir(&claims)?) {
                    let _ = fs::remove_file(old?.path());
                }
                for item in fs::read_dir(root)?.flatten() {
                    let name = item.file_name();
                    let name = name.to_string_lossy();
                    if name.starts_with("journal.") && name.ends_with(".new") {
                        let _ = fs::remove_file(item.path());
                    }
                }
                let found = scan(&entries)?;
                let Some(mut held) = journal.lock(TIDY_PATIENCE)? else {
                    return Err(io::Error::other("the cache ledger stayed locked"));
                };
                held.rewrite(found.iter().map(|f| (f.id, f.len)))?;
                drop(held);
                // A handle that has read nothing yet, so that the caller follows it all.
                journal = Journal::open(root)?;
            }
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        // Shared from now on, so others know this process is here (a conversion when it
        // was exclusive). An exclusive holder is one tidying up, waited for a while: a loader
        // of an older version held it for its whole run and would stop this one forever.
        let deadline = Instant::now() + TIDY_PATIENCE;
        loop {
            match users.try_lock_shared() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    let pid = fs::read_to_string(root.join("lock")).unwrap_or_default();
                    return Err(io::Error::other(format!(
                        "another process (pid {}) holds the directory for itself, as loaders \
                         before the shared cache did: give this one another directory",
                        pid.trim()
                    )));
                }
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        // Made once the lock is shared: a process tidying up deletes every folder of tmp/.
        // The pid alone may come back (a container's pid 1 after a restart).
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{}-{nanos:08x}", std::process::id());
        let tmp = tmp_root.join(&name);
        // Locked under another name, then renamed: another process's tidy-up takes a
        // `.lock` file it can lock for a dead process's.
        let locking = tmp_root.join(format!("{name}.locking"));
        let tmp_lock = open_lock(&locking)?;
        tmp_lock.lock()?;
        fs::rename(&locking, tmp_root.join(format!("{name}.lock")))?;
        fs::create_dir_all(&tmp)?;
        let disk = Disk {
            root: root.to_path_buf(),
            entries,
            tmp,
            ranks,
            claims,
            name,
            _users: users,
            _tmp_lock: tmp_lock,
            serial: AtomicU64::new(0),
        };
        disk.tidy();
        Ok((disk, journal))
    }

    /// Delete the `tmp/` folders of processes that died (their lock files are free).
    pub fn tidy(&self) {
        let Some(tmp_root) = self.tmp.parent() else {
            return;
        };
        let Ok(listing) = fs::read_dir(tmp_root) else {
            return;
        };
        for item in listing.flatten() {
            let path = item.path();
            if path.extension().is_none_or(|e| e != "lock") || path.with_extension("") == self.tmp {
                continue;
            }
            let Ok(lock) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue;
            };
            if lock.try_lock().is_ok() {
                let _ = fs::remove_dir_all(path.with_extension(""));
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// This process's name among those using the directory.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Record this process's counters for the others (whole, then renamed into place).
    pub fn record(&self, text: &str) {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let partial = self.tmp.join(format!("record.{serial}"));
        if fs::write(&partial, text).is_ok() {
            let _ = fs::rename(&partial, self.ranks.join(&self.name));
        }
    }

    /// Every process's recorded counters, by name.
    pub fn records(&self) -> Vec<(String, String)> {
        let Ok(listing) = fs::read_dir(&self.ranks) else {
            return Vec::new();
        };
        listing
            .flatten()
            .filter_map(|item| {
                let name = item.file_name().into_string().ok()?;
                Some((name, fs::read_to_string(item.path()).ok()?))
            })
            .collect()
    }

    /// Claim entry `id` for a fetch by this process: `None` while another process holds
    /// it (fetching it). The OS lets go of a claim when its process dies, so a dead one's
    /// is taken over at once.
    /// An error: no claim can be made (a full disk, a quota): fetch without one.
    pub fn claim(&self, id: EntryId) -> io::Result<Option<Claim>> {
        let path = self.claims.join(format!("{id:032x}"));
        for _ in 0..3 {
            let file = open_lock(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => return Ok(None),
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
            // Locked a file its holder deleted as this one opened it: not the claim that
            // others see at the path; open it again.
            if same_file(&file, &path) {
                return Ok(Some(Claim { path, _file: file }));
            }
        }
        Ok(None)
    }

    /// The directory, for messages.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where entry `id` lives.
    pub fn path(&self, id: EntryId) -> PathBuf {
        let name = format!("{id:032x}");
        self.entries.join(&name[..2]).join(name)
    }

    /// The bytes of entry `id`'s file; `None` if there is none.
    pub fn read(&self, id: EntryId) -> io::Result<Option<Bytes>> {
        match fs::read(self.path(id)) {
            Ok(bytes) => Ok(Some(Bytes::from(bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write an entry file whole under this process's `tmp/` folder, to be put in place by
    /// [`place`](Self::place) or dropped by [`discard`](Self::discard).
    pub fn stage(&self, id: EntryId, file: &[u8]) -> io::Result<PathBuf> {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let tmp = self.tmp.join(format!("{id:032x}.{serial}"));
        let written = File::create_new(&tmp).and_then(|mut out| out.write_all(file));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(tmp)
    }

    /// Rename a staged file into place as entry `id`.
    pub fn place(&self, staged: &Path, id: EntryId) -> io::Result<()> {
        let path = self.path(id);
        let placed = (|| {
            if let Some(fan) = path.parent() {
                fs::create_dir_all(fan)?;
            }
            fs::rename(staged, &path)
        })();
        if placed.is_err() {
            self.discard(staged);
        }
        placed
    }

    /// Drop a staged file.
    pub fn discard(&self, staged: &Path) {
        let _ = fs::remove_file(staged);
    }

    /// Whether entry `id`'s file is there.
    pub fn exists(&self, id: EntryId) -> bool {
        self.path(id).is_file()
    }

    /// Delete entry `id`'s file, if it is there.
    pub fn delete(&self, id: EntryId) {
        let _ = fs::remove_file(self.path(id));
    }
}

/// Whether `file` is the one at `path` now.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Whether `file` is the one at `path` now.
#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.exists()
}

/// The entry files under `entries`, oldest first.
fn scan(entries: &Path) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for fan in fs::read_dir(entries)? {
        let fan = fan?;
        if !fan.file_type()?.is_dir() {
            continue;
        }
        for file in fs::read_dir(fan.path())? {
            let file = file?;
            let name = file.file_name();
            // Only the names this cache gives: another file would be counted under an id
            // whose path is elsewhere, and never deleted.
            let Some(id) = name
                .to_str()
                .filter(|n| n.len() == 32 && fan.file_name().to_str() == Some(&n[..2]))
                .and_then(|n| u128::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            let meta = file.metadata()?;
            if !meta.is_file() {
                continue;
            }
            found.push(Found {
                id,
                len: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
    }
    found.sort_by_key(|f| f.modified);
    Ok(found)
}
