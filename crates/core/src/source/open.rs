//! A dataset found from its URL alone, as `loader run URL` and the Python binding take it.

use loader_storage::DynStorage;
use loader_storage::layer::{RetryConfig, RetryStore};

use super::error::{Result, SourceError};
use super::index::Dataset;
use super::manifest::Manifest;
use super::webdataset::{
    WebDataset, compressed_among, compressed_problem, is_shard_url, shards_of, split_url,
};

/// The URL of the store a dataset URL lives on, to give [`from_url`](crate::from_url): a
/// shard URL's directory (`s3://b/train-{0..9}.tar` is on `s3://b`), any other URL itself.
pub fn store_url(url: &str) -> Result<String> {
    if is_shard_url(url) {
        Ok(split_url(url)?.0)
    } else {
        Ok(url.to_owned())
    }
}

impl Dataset {
    /// The dataset at `url` on `store` (opened at [`store_url`]`(url)`): the shards a shard
    /// URL names, the manifest `manifest` under it (a key, or a [`Manifest`] that says how
    /// its labels are read), or else whatever one listing finds: the
    /// `.tar` shards at the top (read with `webdataset`'s settings) or an ImageFolder. The
    /// listing's sizes and versions serve either, so no shard needs a HEAD.
    pub async fn open(
        url: &str,
        store: &DynStorage,
        manifest: Option<Manifest<'_>>,
        webdataset: &WebDataset,
    ) -> Result<Dataset> {
        if let Some(m) = manifest {
            return Dataset::manifest_as(&**store, m.key, m.labels, m.classes).await;
        }
        if is_shard_url(url) {
            let shards = split_url(url)?.1.unwrap_or_default();
            return webdataset.load(store, &shards).await;
        }
        let listed = RetryStore::new(&**store, RetryConfig::default())
            .list_all("")
            .await?;
        let shards = shards_of(&listed);
        if shards.is_empty() {
            if let Some(suffix) = compressed_among(&listed) {
                return Err(SourceError::List(
                    store.name().to_owned(),
                    compressed_problem(suffix),
                ));
            }
            Dataset::image_folder_of(listed, store.name())
        } else {
            webdataset.load_metas(store, shards).await
        }
    }

    /// [`Dataset::open`] for synchronous callers.
    pub fn open_blocking(
        url: &str,
        store: &DynStorage,
        manifest: Option<Manifest<'_>>,
        webdataset: &WebDataset,
    ) -> Result<Dataset> {
        super::blocking::block_on_own_thread(|| Dataset::open(url, store, manifest, webdataset))
    }
}
