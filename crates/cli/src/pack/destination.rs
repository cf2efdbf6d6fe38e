//! Where a pack goes: a local directory, written in place, or any store [`Put`] writes to
//! (S3; GCS and Azure in builds with the storage crate's features), each shard staged on
//! local disk and uploaded whole once it is. Either
//! way a shard is published before its sidecar index, and both before `pack.json` names
//! them, so what the record names is always there.

use std::path::{Path, PathBuf};

use loader_core::storage::ErrorKind;
use loader_core::storage::write::DynPut;
use loader_core::webdataset::{SIDECAR_SUFFIX, ShardIndex, WebDataset, write_atomically};
use loader_core::{DynStorage, Storage, from_url};

use crate::Result;

/// A pack's destination.
pub struct Destination {
    kind: Kind,
    /// Reads the staged shards to index them, and drives the uploads.
    runtime: tokio::runtime::Runtime,
}

enum Kind {
    /// Shards written in `dir` under a `.partial` name, renamed when whole.
    Local { dir: PathBuf },
    /// Shards staged in `staging`, then uploaded through `put`; `read` reads the record.
    Remote {
        url: String,
        put: DynPut,
        read: DynStorage,
        staging: tempfile::TempDir,
    },
}

/// Whether `url` names a store rather than a local directory.
pub fn is_remote(url: &str) -> bool {
    url.contains("://") && !url.starts_with("file://")
}

impl Destination {
    /// The directory or store `dst` names; `options` are a remote store's.
    pub fn open(dst: &str, options: &[(String, String)]) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        if dst.starts_with("memory://") {
            return Err("memory:// keeps nothing after the pack: give a directory or s3://".into());
        }
        let kind = if is_remote(dst) {
            Kind::Remote {
                url: loader_core::storage::redact(dst),
                put: loader_core::storage::put_to_url(dst, options.iter().cloned())?,
                read: from_url(dst, options.iter().cloned())?,
                staging: tempfile::Builder::new().prefix("loader-pack").tempdir()?,
            }
        } else {
            let dir = PathBuf::from(dst.strip_prefix("file://").unwrap_or(dst));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Kind::Local { dir }
        };
        Ok(Self { kind, runtime })
    }

    /// The destination, for messages.
    pub fn name(&self) -> String {
        match &self.kind {
            Kind::Local { dir } => dir.display().to_string(),
            Kind::Remote { url, .. } => url.clone(),
        }
    }

    /// Where shards are written before they are published.
    pub fn staging(&self) -> &Path {
        match &self.kind {
            Kind::Local { dir } => dir,
            Kind::Remote { staging, .. } => staging.path(),
        }
    }

    /// The object `key`, if there is one.
    pub fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match &self.kind {
            Kind::Local { dir } => match std::fs::read(dir.join(key)) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("cannot read {}: {e}", dir.join(key).display()).into()),
            },
            Kind::Remote { read, .. } => match self.runtime.block_on(read.get(key)) {
                Ok(bytes) => Ok(Some(bytes.to_vec())),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Writes `key` whole: readers see the old object or the new one.
    pub fn write(&self, key: &str, bytes: Vec<u8>) -> Result {
        match &self.kind {
            Kind::Local { dir } => write_atomically(&dir.join(key), &bytes)?,
            Kind::Remote { put, .. } => self.runtime.block_on(put.put(key, bytes.into()))?,
        }
        Ok(())
    }

    /// Removes what a stopped run left: a local shard half written, a record or sidecar
    /// cut off before its rename (`.tmpXXXXXX`).
    pub fn clean(&self) -> Result {
        if let Kind::Local { dir } = &self.kind {
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let shard = name.starts_with("shard-")
                    && (name.ends_with(".tar.partial") || name.ends_with(".parquet.partial"));
                // A temporary file's name: `.tmp` and six random characters.
                let temporary = name.starts_with(".tmp") && name.len() == 10;
                if shard || temporary {
                    std::fs::remove_file(entry.path())?;
                }
            }
        }
        Ok(())
    }

    /// Publishes the whole shard staged at `partial` as `name`, then (`sidecar`: a
    /// WebDataset shard) its sidecar index.
    pub fn publish(&self, partial: &Path, name: &str, sidecar: bool) -> Result {
        let staged = self.staging().join(name);
        std::fs::rename(partial, &staged)?;
        let written = std::fs::metadata(&staged)?.len();
        let mut index = if sidecar {
            Some(self.index(name)?)
        } else {
            None
        };
        match &self.kind {
            Kind::Local { dir } => {
                if let Some(index) = index {
                    write_atomically(
                        &dir.join(format!("{name}{SIDECAR_SUFFIX}")),
                        &index.to_json(),
                    )?;
                }
            }
            Kind::Remote { put, read, .. } => self.runtime.block_on(async {
                put.put_file(name, &staged).await?;
                // The sidecar holds the uploaded object's version, as a reader will see it.
                let meta = read.head(name).await?;
                if meta.size != written {
                    return Err(format!(
                        "{name} was uploaded as {} bytes; {written} were written",
                        meta.size
                    )
                    .into());
                }
                if let Some(index) = &mut index {
                    index.version = meta.version;
                    put.put(&format!("{name}{SIDECAR_SUFFIX}"), index.to_json().into())
                        .await?;
                }
                std::fs::remove_file(&staged)?;
                Ok::<_, Box<dyn std::error::Error>>(())
            })?,
        }
        Ok(())
    }

    /// The index of the staged shard `name`, built by the loader's own indexer.
    fn index(&self, name: &str) -> Result<ShardIndex> {
        let store = from_url(
            &self.staging().to_string_lossy(),
            Vec::<(String, String)>::new(),
        )?;
        let wds = WebDataset::new().sidecars(false).cache_dir(None);
        let mut indexes = self.runtime.block_on(async {
            let meta = store.head(name).await?;
            wds.indexes(&store, vec![meta]).await
        })?;
        indexes
            .pop()
            .ok_or_else(|| format!("{name}: no index").into())
    }
}
