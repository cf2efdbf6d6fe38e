//! The cache directory: entry files, the lock that makes one process its owner, the scan
//! that starts a run warm, and the one writer thread that keeps the disk within budget.
//!
//! Layout: `lock`, `entries/<2 hex>/<32 hex>` (one file per entry, named by its id) and
//! `tmp/` for files being written. A file is written whole under `tmp/` and renamed into
//! place, so no reader ever opens a partly written entry; a crash leaves only `tmp/`
//! files, which the next owner deletes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::SystemTime;

use bytes::Bytes;

use super::entry::{EntryId, Origin, Unit, encode};

/// The cache directory of this process.
#[derive(Debug)]
pub(crate) struct Disk {
    root: PathBuf,
    entries: PathBuf,
    tmp: PathBuf,
    /// Held for the life of the process's cache when it owns the directory; the OS lets go
    /// of it when the process dies, however it dies.
    _lock: Option<File>,
    serial: AtomicU64,
}

/// An entry file found when the directory was opened.
pub(crate) struct Found {
    pub id: EntryId,
    pub len: u64,
    pub modified: SystemTime,
}

impl Disk {
    /// Open (creating) `root`. `Ok((disk, Some(found)))` when this process owns it, with the
    /// entries a previous run left; `Ok((disk, None))` when another process does, so this
    /// one only reads.
    pub fn open(root: &Path) -> io::Result<(Disk, Option<Vec<Found>>)> {
        let entries = root.join("entries");
        let tmp = root.join("tmp");
        fs::create_dir_all(&entries)?;
        fs::create_dir_all(&tmp)?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join("lock"))?;
        let owner = match lock.try_lock() {
            Ok(()) => true,
            Err(fs::TryLockError::WouldBlock) => false,
            Err(fs::TryLockError::Error(e)) => return Err(e),
        };
        if owner {
            // Who owns it, for the message another process prints.
            lock.set_len(0)?;
            write!(&lock, "{}", std::process::id())?;
        } else {
            let pid = fs::read_to_string(root.join("lock")).unwrap_or_default();
            tracing::warn!(
                "the cache directory {} is in use by another process (pid {}): this one \
                 reads its entries but writes none; give each process (rank) a directory of \
                 its own to cache what it reads",
                root.display(),
                pid.trim()
            );
        }
        let disk = Disk {
            root: root.to_path_buf(),
            entries,
            tmp,
            _lock: owner.then_some(lock),
            serial: AtomicU64::new(0),
        };
        if !owner {
            return Ok((disk, None));
        }
        // Files a crashed writer left: never servable, never counted.
        for stale in fs::read_dir(&disk.tmp)? {
            let _ = fs::remove_file(stale?.path());
        }
        let found = disk.scan()?;
        Ok((disk, Some(found)))
    }

    /// The directory, for messages.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this process owns the directory (writes and evicts).
    pub fn owns(&self) -> bool {
        self._lock.is_some()
    }

    fn scan(&self) -> io::Result<Vec<Found>> {
        let mut found = Vec::new();
        for fan in fs::read_dir(&self.entries)? {
            let fan = fan?;
            if !fan.file_type()?.is_dir() {
                continue;
            }
            for file in fs::read_dir(fan.path())? {
                let file = file?;
                let name = file.file_name();
                let Some(id) = name.to_str().and_then(|n| u128::from_str_radix(n, 16).ok()) else {
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

    /// Write an entry file: whole under `tmp/`, then renamed into place.
    fn write(&self, id: EntryId, file: &[u8]) -> io::Result<()> {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .tmp
            .join(format!("{id:032x}.{}.{serial}", std::process::id()));
        let written = (|| {
            let mut out = File::create_new(&tmp)?;
            out.write_all(file)?;
            let path = self.path(id);
            if let Some(fan) = path.parent() {
                fs::create_dir_all(fan)?;
            }
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Delete entry `id`'s file, if it is there.
    pub fn delete(&self, id: EntryId) {
        let _ = fs::remove_file(self.path(id));
    }
}

/// What the writer thread does, in order: deletions made room for the writes queued after
/// them, so the files on disk never exceed the budget.
pub(crate) enum Job {
    Write {
        id: EntryId,
        key: String,
        unit: Unit,
        origin: Origin,
        payload: Bytes,
    },
    Delete(EntryId),
    /// Answer once everything queued before is done.
    Flush(mpsc::SyncSender<()>),
}

/// The owner's writer: one thread, so writes and deletions land in the order the budget
/// was booked in, and the async runtime never waits on the disk.
pub(crate) struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Start the thread; `done` hears how each write went.
    pub fn start(
        disk: std::sync::Arc<Disk>,
        done: impl Fn(EntryId, u64, io::Result<()>) + Send + 'static,
    ) -> io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("loader-cache-writer".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Delete(id) => disk.delete(id),
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                        Job::Write {
                            id,
                            key,
                            unit,
                            origin,
                            payload,
                        } => {
                            let file = encode(&key, unit, &origin, &payload);
                            done(id, payload.len() as u64, disk.write(id, &file));
                        }
                    }
                }
            })?;
        Ok(Writer {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Block until everything queued so far is on disk.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.send(Job::Flush(tx)) {
            let _ = rx.recv();
        }
    }

    /// Queue a job; false if the thread is gone.
    pub fn send(&self, job: Job) -> bool {
        self.jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }
}

impl Drop for Writer {
    /// Finish what is queued, so the next run finds it: a process that ends right after
    /// its last epoch still leaves a warm cache.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
