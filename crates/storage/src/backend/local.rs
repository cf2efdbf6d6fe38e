//! Local file system: a directory tree read with blocking I/O on tokio's blocking pool.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::{
    DEFAULT_MAX_READ_BYTES, Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage,
    check_key, check_prefix, too_large,
};

/// A directory on local disk. Keys never reach outside it: `..` and absolute keys are
/// refused, and so, by default, is a symlink whose target lies outside the root. Only
/// regular files are read: a FIFO, socket or device named by a key is refused before a
/// byte is read, so it cannot block a thread.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    name: String,
    allow_external_symlinks: bool,
    max_read_bytes: u64,
}

impl LocalStore {
    /// The whole of `key`, within the read limit.
    async fn read_whole(&self, key: &str) -> Result<Bytes> {
        self.blocking(key, |store, key| {
            let (file, len) = open_file(store, key)?;
            let max = store.max_read_bytes;
            if len > max {
                return Err(too_large(&store.name, key, len, max));
            }
            // The size is only the metadata's word (the file may be growing or shrinking):
            // reserve at most a bounded amount up front, and never read past the limit.
            let mut buf = Vec::with_capacity(usize::try_from(len.min(64 << 20)).unwrap_or(0));
            file.take(max.saturating_add(1))
                .read_to_end(&mut buf)
                .map_err(|e| io_error(&store.name, key, e))?;
            if buf.len() as u64 > max {
                return Err(too_large(&store.name, key, buf.len() as u64, max));
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    /// A range of `key`; with `version`, refused as [`ErrorKind::Changed`] when the open
    /// file's modification time is another (the bytes are read from that open file, so a
    /// file replaced by a rename meanwhile cannot mix into them).
    async fn read_range(
        &self,
        key: &str,
        range: Range<u64>,
        version: Option<String>,
    ) -> Result<Bytes> {
        if range.start > range.end {
            return Err(invalid_range(&self.name, key, &range));
        }
        self.blocking(key, move |store, key| {
            let (mut file, len) = open_file(store, key)?;
            if let Some(want) = &version {
                let now = file.metadata().ok().as_ref().and_then(mtime);
                if now.as_deref() != Some(want.as_str()) {
                    return Err(Error::new(
                        ErrorKind::Changed,
                        &store.name,
                        key,
                        format!(
                            "the file changed since it was listed (version {want:?}, now {now:?})"
                        ),
                    ));
                }
            }
            if range.start > len {
                return Err(Error::new(
                    ErrorKind::Other,
                    &store.name,
                    key,
                    format!(
                        "range starts at {} but the object has {len} bytes",
                        range.start
                    ),
                ));
            }
            let end = range.end.min(len);
            if end - range.start > store.max_read_bytes {
                return Err(too_large(
                    &store.name,
                    key,
                    end - range.start,
                    store.max_read_bytes,
                ));
            }
            let want = usize::try_from(end - range.start)
                .map_err(|_| invalid_range(&store.name, key, &range))?;
            let mut buf = vec![0; want];
            file.seek(SeekFrom::Start(range.start))
                .and_then(|_| file.read_exact(&mut buf))
                .map_err(|e| io_error(&store.name, key, e))?;
            Ok(Bytes::from(buf))
        })
        .await
    }

    /// A store over the directory `root`, which must exist.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let given = root.as_ref();
        let name = format!("file://{}", given.display());
        let root = given.canonicalize().map_err(|e| {
            io_error(&name, "", e).context("cannot open the store's root directory")
        })?;
        if !root.is_dir() {
            return Err(Error::new(
                ErrorKind::NotFound,
                name,
                "",
                "the store's root is not a directory",
            ));
        }
        Ok(Self {
            name: format!("file://{}", root.display()),
            root,
            allow_external_symlinks: false,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        })
    }

    /// The most bytes one read (a whole object or a range) may return; larger ones are
    /// refused with an error naming the key and size before anything is allocated.
    /// Default [`DEFAULT_MAX_READ_BYTES`].
    pub fn max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
    }

    /// Follow symlinks that lead outside the root (ImageNet trees are often symlink farms).
    /// Off by default, so a key can never read a file the root does not contain.
    pub fn allow_external_symlinks(mut self, allow: bool) -> Self {
        self.allow_external_symlinks = allow;
        self
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path of `key`, checked to stay inside the root unless external symlinks are allowed.
    /// Blocking: it touches the file system.
    fn resolve(&self, key: &str) -> Result<PathBuf> {
        check_key(&self.name, key)?;
        let path = self.root.join(key);
        if self.allow_external_symlinks {
            return Ok(path);
        }
        let real = path
            .canonicalize()
            .map_err(|e| io_error(&self.name, key, e))?;
        if !real.starts_with(&self.root) {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                &self.name,
                key,
                "a symlink leads outside the store's root; allow it with \
                 `allow_external_symlinks` if the tree is a symlink farm",
            ));
        }
        Ok(real)
    }

    /// Run blocking file work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        key: &str,
        work: impl FnOnce(&Self, &str) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        let owned = key.to_owned();
        tokio::task::spawn_blocking(move || work(&this, &owned))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Other,
                    &self.name,
                    key,
                    "the blocking read task failed",
                )
                .with_source(e)
            })?
    }
}

/// Map an I/O error to our kinds: a missing file is NotFound, a refused one PermissionDenied.
pub(crate) fn io_error(backend: &str, key: &str, err: std::io::Error) -> Error {
    use std::io::ErrorKind as Io;
    let kind = match err.kind() {
        Io::NotFound | Io::NotADirectory | Io::IsADirectory => ErrorKind::NotFound,
        Io::PermissionDenied => ErrorKind::PermissionDenied,
        Io::Interrupted | Io::WouldBlock => ErrorKind::Transient,
        Io::TimedOut => ErrorKind::Timeout,
        Io::InvalidInput | Io::InvalidFilename => ErrorKind::InvalidKey,
        _ => ErrorKind::Other,
    };
    Error::new(kind, backend, key, "").with_source(err)
}

/// Open `key` for reading, refusing anything but a regular file. Opened non-blocking and
/// checked on the open descriptor, so a FIFO (whose plain open waits for a writer forever)
/// or a file swapped for one between a check and the open is refused, never waited on;
/// for regular files the flag changes nothing.
fn open_file(store: &LocalStore, key: &str) -> Result<(File, u64)> {
    let path = store.resolve(key)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(&path)
        .map_err(|e| io_error(&store.name, key, e))?;
    let meta = file.metadata().map_err(|e| io_error(&store.name, key, e))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        };
        return Err(Error::new(
            ErrorKind::NotFound,
            &store.name,
            key,
            format!("not a regular file ({what}); only regular files are read"),
        ));
    }
    Ok((file, meta.len()))
}

#[async_trait]
impl Storage for LocalStore {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let bytes = match (options.range, options.if_match) {
            (Some(range), version) => self.read_range(key, range, version).await?,
            (None, None) => self.read_whole(key).await?,
            (None, Some(_)) => return Err(super::whole_if_match(&self.name, key)),
        };
        Ok(GetResult::new(bytes))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.blocking(key, |store, key| {
            let (file, size) = open_file(store, key)?;
            Ok(ObjectMeta {
                key: key.to_owned(),
                size,
                version: file.metadata().ok().as_ref().and_then(mtime),
            })
        })
        .await
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let prefix = match check_prefix(&self.name, prefix) {
            Ok(prefix) => prefix.to_owned(),
            Err(e) => return futures::stream::once(async { Err(e) }).boxed(),
        };
        // A bounded channel fed by a blocking thread: a million-file tree streams in
        // constant memory, and the walk stops when the receiver is dropped.
        let (tx, mut rx) = tokio::sync::mpsc::channel(256);
        let store = self.clone();
        tokio::task::spawn_blocking(move || walk(&store, &prefix, &tx));
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
    }
}

fn invalid_range(backend: &str, key: &str, range: &Range<u64>) -> Error {
    Error::new(
        ErrorKind::Other,
        backend,
        key,
        format!("invalid byte range {range:?}"),
    )
}

/// Walk the tree under `prefix` in file-name order, sending each regular file's metadata.
fn walk(store: &LocalStore, prefix: &str, tx: &tokio::sync::mpsc::Sender<Result<ObjectMeta>>) {
    let start = store.root.join(prefix);
    if std::fs::symlink_metadata(&start).is_err() {
        return; // an empty listing, as object stores give for an unknown prefix
    }
    // The same rule as reads: a prefix that is (or passes through) a symlink leading out of
    // the root lists nothing of what lies outside, unless external symlinks are allowed.
    if !store.allow_external_symlinks {
        match start.canonicalize() {
            Ok(real) if real.starts_with(&store.root) => {}
            Ok(_) => {
                let _ = tx.blocking_send(Err(Error::new(
                    ErrorKind::PermissionDenied,
                    &store.name,
                    prefix,
                    "the prefix is a symlink leading outside the store's root; allow it \
                     with `allow_external_symlinks` if the tree is a symlink farm",
                )));
                return;
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(io_error(&store.name, prefix, e)));
                return;
            }
        }
    }
    let walker = walkdir::WalkDir::new(&start)
        .follow_links(store.allow_external_symlinks)
        .sort_by_file_name();
    for entry in walker {
        let item = match entry {
            Ok(entry) => match list_entry(store, &entry) {
                Some(item) => item,
                None => continue,
            },
            Err(e) => {
                let key = e
                    .path()
                    .and_then(|p| p.strip_prefix(&store.root).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Err(Error::new(ErrorKind::Other, &store.name, key, "cannot list").with_source(e))
            }
        };
        if tx.blocking_send(item).is_err() {
            return;
        }
    }
}

/// The listing entry for a walked path: `None` for directories, an error for names that
/// are not UTF-8 and for symlinks that lead outside the root (so nothing is dropped silently).
fn list_entry(store: &LocalStore, entry: &walkdir::DirEntry) -> Option<Result<ObjectMeta>> {
    let rel = entry.path().strip_prefix(&store.root).ok()?;
    let Some(key) = rel
        .to_str()
        .map(|k| k.replace(std::path::MAIN_SEPARATOR, "/"))
    else {
        return Some(Err(Error::new(
            ErrorKind::InvalidKey,
            &store.name,
            rel.to_string_lossy(),
            "the file name is not valid UTF-8",
        )));
    };
    let file_type = entry.file_type();
    if file_type.is_dir() {
        return None;
    }
    if file_type.is_symlink() {
        // Not followed (external symlinks are not allowed): list it only if it is a file
        // inside the root, exactly as `get` would read it.
        return match store
            .resolve(&key)
            .and_then(|p| std::fs::metadata(&p).map_err(|e| io_error(&store.name, &key, e)))
        {
            Ok(meta) if meta.is_file() => Some(Ok(ObjectMeta {
                key,
                size: meta.len(),
                version: mtime(&meta),
            })),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        };
    }
    match entry.metadata() {
        Ok(meta) if meta.is_file() => Some(Ok(ObjectMeta {
            key,
            size: meta.len(),
            version: mtime(&meta),
        })),
        Ok(_) => None,
        Err(e) => Some(Err(Error::new(
            ErrorKind::Other,
            &store.name,
            key,
            "cannot stat",
        )
        .with_source(e))),
    }
}

/// A local file's version: its modification time in nanoseconds, which a rewrite changes.
fn mtime(meta: &std::fs::Metadata) -> Option<String> {
    let t = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!("mtime:{}", t.as_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn symlink_outside_root_is_refused_unless_allowed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s3cr3t").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("inside"), b"ok").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("link"))
            .unwrap();
        std::os::unix::fs::symlink(root.path().join("inside"), root.path().join("alias")).unwrap();

        let store = LocalStore::new(root.path()).unwrap();
        let err = store.get("link").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
        assert!(err.to_string().contains("allow_external_symlinks"), "{err}");
        // A symlink that stays inside the root is fine.
        assert_eq!(store.get("alias").await.unwrap().as_ref(), b"ok");

        let keys: Vec<_> = store.list("").collect().await;
        assert_eq!(keys.len(), 3);
        assert!(
            keys.iter()
                .any(|k| k.as_ref().is_err_and(|e| e.key() == "link"))
        );

        let store = store.allow_external_symlinks(true);
        assert_eq!(store.get("link").await.unwrap().as_ref(), b"s3cr3t");
    }

    #[tokio::test]
    async fn directories_are_not_objects() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("dir")).unwrap();
        let store = LocalStore::new(root.path()).unwrap();
        assert_eq!(
            store.get("dir").await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            store.head("dir").await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }

    #[tokio::test]
    async fn a_symlinked_directory_out_of_the_root_is_refused_too() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s3cr3t").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("escape")).unwrap();
        let store = LocalStore::new(root.path()).unwrap();
        let err = store.get("escape/secret").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
        assert!(store.get_range("escape/secret", 0..2).await.is_err());
        assert!(store.head("escape/secret").await.is_err());
        let listed: Vec<_> = store.list("").collect().await;
        assert!(
            listed.iter().all(|k| k.as_ref().is_err()),
            "the outside file was listed: {listed:?}"
        );
    }

    // Defect 8: `list("escape")` listed the files of the directory the symlink led to.
    #[tokio::test]
    async fn listing_a_symlinked_prefix_out_of_the_root_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join("sub")).unwrap();
        std::fs::write(outside.path().join("sub/secret.jpg"), b"s3cr3t").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("inside")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("escape")).unwrap();
        std::os::unix::fs::symlink(root.path().join("inside"), root.path().join("alias")).unwrap();
        std::fs::write(root.path().join("inside/ok.jpg"), b"ok").unwrap();
        let store = LocalStore::new(root.path()).unwrap();
        for prefix in ["escape", "escape/sub"] {
            let listed: Vec<_> = store.list(prefix).collect().await;
            assert!(
                listed.iter().all(|k| k.as_ref().is_err()),
                "{prefix}: the outside files were listed: {listed:?}"
            );
            let err = listed[0].as_ref().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
            assert!(!err.to_string().contains("secret.jpg"), "{err}");
        }
        // A symlinked prefix inside the root lists what `get` reads through it.
        let listed: Vec<_> = store.list("alias").collect().await;
        let keys: Vec<_> = listed.into_iter().map(|k| k.unwrap().key).collect();
        assert_eq!(keys, ["alias/ok.jpg"]);
        let store = store.allow_external_symlinks(true);
        let listed: Vec<_> = store.list("escape").collect().await;
        assert_eq!(listed.len(), 1, "{listed:?}");
    }

    // Defect 10: the size in a file's metadata was allocated before a byte was read.
    #[tokio::test]
    async fn a_huge_sparse_file_is_refused_by_size_before_any_allocation() {
        let root = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(root.path().join("huge.jpg")).unwrap();
        file.set_len(300 << 30).unwrap(); // sparse: takes no disk
        std::fs::write(root.path().join("small.jpg"), vec![1u8; 2000]).unwrap();
        let store = LocalStore::new(root.path()).unwrap();
        let err = store.get("huge.jpg").await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"huge.jpg\"")
                && text.contains("322122547200")
                && text.contains("limit"),
            "{text}"
        );
        assert_eq!(store.head("huge.jpg").await.unwrap().size, 300 << 30);
        // A range of it is fine: shards are read in ranges.
        assert_eq!(store.get_range("huge.jpg", 5..10).await.unwrap().len(), 5);
        let store = store.max_read_bytes(1000);
        assert!(store.get("small.jpg").await.is_err());
        let err = store.get_range("small.jpg", 0..1500).await.unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
        assert_eq!(
            store.get_range("small.jpg", 0..1000).await.unwrap().len(),
            1000
        );
    }

    #[tokio::test]
    async fn a_file_name_that_is_not_utf8_is_a_listing_error_not_a_silent_gap() {
        use std::os::unix::ffi::OsStrExt;
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("good.jpg"), b"ok").unwrap();
        let name = std::ffi::OsStr::from_bytes(b"bad\xff\xfe.jpg");
        std::fs::write(root.path().join(name), b"x").unwrap();
        let store = LocalStore::new(root.path()).unwrap();
        let listed: Vec<_> = store.list("").collect().await;
        assert_eq!(listed.len(), 2, "{listed:?}");
        let err = listed
            .iter()
            .find_map(|k| k.as_ref().err())
            .expect("the bad name is reported");
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        assert!(err.to_string().contains("UTF-8"), "{err}");
        assert!(err.to_string().contains(store.name()), "{err}");
    }

    #[test]
    fn missing_root_is_a_clear_error() {
        let err = LocalStore::new("/definitely/not/here").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.to_string().contains("/definitely/not/here"), "{err}");
    }
}
