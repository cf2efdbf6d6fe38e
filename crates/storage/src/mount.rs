//! Several stores as one: each mounted at a name, read as `name/key`. A loader over a
//! mixture of datasets in different stores reads them all through one store (and one cache,
//! whose entries then never collide between two datasets' equal keys).

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::{DynStorage, Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage};

/// Stores mounted at names: key `name/rest` is key `rest` of the store mounted at `name`.
/// Errors are the mounted store's, naming its own key and backend.
///
/// ```
/// # fn main() -> loader_storage::Result<()> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// use loader_storage::{MountStore, Storage, from_url};
/// let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
/// std::fs::write(a.path().join("x.txt"), b"from a").unwrap();
/// std::fs::write(b.path().join("x.txt"), b"from b").unwrap();
/// let open = |d: &tempfile::TempDir| from_url(&d.path().display().to_string(), [("", ""); 0]);
/// let both = MountStore::new(vec![("0".into(), open(&a)?), ("1".into(), open(&b)?)])?;
/// assert_eq!(both.get("1/x.txt").await?.as_ref(), b"from b");
/// # Ok(()) })
/// # }
/// ```
#[derive(Debug)]
pub struct MountStore {
    mounts: Vec<(String, DynStorage)>,
    name: String,
}

impl MountStore {
    /// `stores` at their names (no `/` in a name, each name once).
    pub fn new(stores: Vec<(String, DynStorage)>) -> Result<Self> {
        let name = format!(
            "mounts({})",
            stores
                .iter()
                .map(|(n, s)| format!("{n}: {}", s.name()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (i, (mount, _)) in stores.iter().enumerate() {
            if mount.is_empty()
                || mount.contains('/')
                || stores[..i].iter().any(|(other, _)| other == mount)
            {
                return Err(Error::new(
                    ErrorKind::InvalidKey,
                    &name,
                    mount,
                    "a mount's name must be unique, non-empty and without '/'",
                ));
            }
        }
        Ok(Self {
            mounts: stores,
            name,
        })
    }

    /// The key of `key` in the store mounted at `mount`.
    pub fn key(mount: &str, key: &str) -> String {
        format!("{mount}/{key}")
    }

    fn route<'k>(&self, key: &'k str) -> Result<(&DynStorage, &'k str)> {
        let (mount, rest) = key.split_once('/').unwrap_or((key, ""));
        self.mounts
            .iter()
            .find(|(name, _)| name == mount)
            .map(|(_, store)| (store, rest))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidKey,
                    &self.name,
                    key,
                    format!("no store is mounted at {mount:?}"),
                )
            })
    }
}

#[async_trait]
impl Storage for MountStore {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let (store, rest) = self.route(key)?;
        store.get_opts(rest, options).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let (store, rest) = self.route(key)?;
        let mut meta = store.head(rest).await?;
        meta.key = key.to_owned();
        Ok(meta)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let streams = self.mounts.iter().filter_map(move |(mount, store)| {
            let inner = match prefix.split_once('/') {
                Some((m, rest)) if m == mount => rest,
                None if prefix.is_empty() => "",
                None if prefix == mount => "",
                _ => return None,
            };
            let mount = Arc::<str>::from(mount.as_str());
            Some(store.list(inner).map(move |item| {
                item.map(|mut meta| {
                    meta.key = MountStore::key(&mount, &meta.key);
                    meta
                })
            }))
        });
        futures::stream::iter(streams).flatten().boxed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::TryStreamExt;

    #[tokio::test]
    async fn routes_reads_heads_and_listings_by_name() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir(a.path().join("d")).unwrap();
        std::fs::write(a.path().join("d/k"), b"aa").unwrap();
        std::fs::write(b.path().join("k"), b"bbb").unwrap();
        let open = |d: &tempfile::TempDir| {
            crate::from_url(&d.path().display().to_string(), [("", ""); 0]).unwrap()
        };
        let m = MountStore::new(vec![("0".into(), open(&a)), ("1".into(), open(&b))]).unwrap();
        assert_eq!(m.get("0/d/k").await.unwrap().as_ref(), b"aa");
        assert_eq!(
            m.head("1/k").await.unwrap(),
            ObjectMeta {
                key: "1/k".into(),
                size: 3,
                ..m.head("1/k").await.unwrap()
            }
        );
        let mut all: Vec<String> = m.list("").map_ok(|o| o.key).try_collect().await.unwrap();
        all.sort();
        assert_eq!(all, ["0/d/k", "1/k"]);
        let one: Vec<String> = m.list("0/d").map_ok(|o| o.key).try_collect().await.unwrap();
        assert_eq!(one, ["0/d/k"]);
        let err = m.get("2/k").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        let err = m.get("1/missing").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(MountStore::new(vec![("a/b".into(), open(&a))]).is_err());
    }
}
