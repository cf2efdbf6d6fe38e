//! Writing whole objects, for the tools that write datasets (`loader pack`): the narrow
//! [`Put`] trait, with a local directory and any object_store store behind it. Reading
//! never needs it, so [`Storage`](crate::Storage) stays read-only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ::object_store::path::Path as ObjectPath;
use ::object_store::{ObjectStore, PutMultipartOptions, PutOptions, PutPayload, WriteMultipart};
use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncReadExt;

use crate::backend::local::io_error;
use crate::backend::object_store::map_error;
use crate::{Error, ErrorKind, Result, check_key};

/// Parts of a multipart upload: S3 takes parts of 5 MiB to 5 GiB, at most 10,000 of them
/// (objects up to 160 GiB at this size).
const PART_BYTES: usize = 16 << 20;
/// Parts uploading at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Attempts of one object's upload when the store's answer says another may succeed.
const ATTEMPTS: u32 = 4;

/// Where whole objects are written.
#[async_trait]
pub trait Put: Send + Sync + fmt::Debug {
    /// Where objects go, for messages (credentials redacted).
    fn name(&self) -> &str;

    /// Store `bytes` as `key`: readers see the whole object or the one before it.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<()>;

    /// Store the local file `path` as `key`, whole or not at all: one PUT when small, a
    /// multipart upload (aborted on failure) when larger than a part.
    async fn put_file(&self, key: &str, path: &Path) -> Result<()>;
}

/// A [`Put`] shared by tasks.
pub type DynPut = Arc<dyn Put>;

/// A temporary file in `dir`, to be renamed into place: readable by all as a file written
/// in place would be (`0644` less the umask), where a bare temporary file is the owner's
/// alone, so other users (another rank's account, a reader's) could not read what it
/// becomes.
pub fn temp_file_in(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    builder.tempfile_in(dir)
}

/// Objects as files under a local directory, each written beside its place and renamed
/// there, so a reader never sees half of one.
#[derive(Debug)]
pub struct LocalPut {
    root: PathBuf,
    name: String,
}

impl LocalPut {
    /// Objects under `root`, created if missing.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let name = format!("file://{}", root.display());
        std::fs::create_dir_all(&root)
            .map_err(|e| io_error(&name, "", e).context("cannot create the directory"))?;
        Ok(Self { root, name })
    }

    fn file(&self, key: &str) -> Result<PathBuf> {
        check_key(&self.name, key)?;
        if key
            .split('/')
            .any(|part| part == ".." || part == "." || part.is_empty())
        {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                &self.name,
                key,
                "a key written must be a plain relative path",
            ));
        }
        Ok(self.root.join(key))
    }

    /// `fill` writes the new file at the temporary path it is given, renamed to `key`'s.
    async fn replace(
        &self,
        key: &str,
        fill: impl FnOnce(&Path) -> std::io::Result<()> + Send + 'static,
    ) -> Result<()> {
        let target = self.file(key)?;
        let io = |e: std::io::Error| io_error(&self.name, key, e);
        tokio::task::spawn_blocking(move || {
            let dir = target.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)?;
            let tmp = temp_file_in(dir)?;
            fill(tmp.path())?;
            tmp.as_file().sync_all()?;
            tmp.persist(&target).map_err(|e| e.error)?;
            Ok(())
        })
        .await
        .map_err(|e| io(std::io::Error::other(e)))?
        .map_err(io)
    }
}

#[async_trait]
impl Put for LocalPut {
    fn name(&self) -> &str {
        &self.name
    }

    async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        self.replace(key, move |tmp| std::fs::write(tmp, &bytes))
            .await
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<()> {
        let from = path.to_path_buf();
        self.replace(key, move |tmp| std::fs::copy(&from, tmp).map(drop))
            .await
    }
}

/// Objects through any object_store store (S3, GCS, Azure, memory), retried while the
/// store's answers say another attempt may succeed.
pub struct ObjectStorePut {
    inner: Arc<dyn ObjectStore>,
    name: String,
}

impl fmt::Debug for ObjectStorePut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStorePut")
            .field("name", &self.name)
            .finish()
    }
}

impl ObjectStorePut {
    /// Objects in `inner`, named `name` in messages.
    pub fn new(inner: Arc<dyn ObjectStore>, name: impl Into<String>) -> Self {
        Self {
            inner,
            name: name.into(),
        }
    }

    fn path(&self, key: &str) -> Result<ObjectPath> {
        check_key(&self.name, key)?;
        ObjectPath::parse(key)
            .map_err(|e| Error::new(ErrorKind::InvalidKey, &self.name, key, "").with_source(e))
    }

    /// `attempt` until it succeeds, fails for good, or has been tried [`ATTEMPTS`] times.
    async fn retried<F, Fut>(&self, mut attempt: F) -> Result<()>
    where
        F: FnMut() -> Fut + Send,
        Fut: std::future::Future<Output = Result<()>> + Send,
    {
        let mut tried = 0;
        loop {
            tried += 1;
            match attempt().await {
                Err(e) if tried < ATTEMPTS && e.kind().is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(200 << tried)).await;
                }
                done => return done,
            }
        }
    }

    async fn upload(&self, key: &str, location: &ObjectPath, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| {
            io_error(&self.name, key, e).context("cannot read the file to upload")
        };
        let mut file = tokio::fs::File::open(path).await.map_err(io)?;
        let size = file.metadata().await.map_err(io)?.len();
        if size <= PART_BYTES as u64 {
            let mut bytes = Vec::with_capacity(size as usize);
            file.read_to_end(&mut bytes).await.map_err(io)?;
            self.inner
                .put_opts(location, PutPayload::from(bytes), PutOptions::default())
                .await
                .map_err(|e| map_error(&self.name, key, e))?;
            return Ok(());
        }
        let upload = self
            .inner
            .put_multipart_opts(location, PutMultipartOptions::default())
            .await
            .map_err(|e| map_error(&self.name, key, e))?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut buffer = vec![0u8; 1 << 20];
        let sent: Result<()> = async {
            loop {
                let n = file.read(&mut buffer).await.map_err(io)?;
                if n == 0 {
                    return Ok(());
                }
                parts
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| map_error(&self.name, key, e))?;
                parts.write(&buffer[..n]);
            }
        }
        .await;
        match sent {
            Ok(()) => parts
                .finish()
                .await
                .map(drop)
                .map_err(|e| map_error(&self.name, key, e)),
            Err(e) => {
                // An upload left open is billed until a lifecycle rule ends it.
                let _ = parts.abort().await;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl Put for ObjectStorePut {
    fn name(&self) -> &str {
        &self.name
    }

    async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        let location = self.path(key)?;
        self.retried(|| {
            let (location, bytes) = (location.clone(), bytes.clone());
            async move {
                self.inner
                    .put_opts(&location, PutPayload::from(bytes), PutOptions::default())
                    .await
                    .map(drop)
                    .map_err(|e| map_error(&self.name, key, e))
            }
        })
        .await
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<()> {
        let location = self.path(key)?;
        self.retried(|| self.upload(key, &location, path)).await
    }
}
