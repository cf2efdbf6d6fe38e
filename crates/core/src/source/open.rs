//! A dataset found from its URL alone, as `loader run URL` and the Python binding take it.

use loader_storage::DynStorage;
use loader_storage::layer::{RetryConfig, RetryStore};

use super::error::{Result, SourceError};
use super::index::Dataset;
use super::manifest::Manifest;
use super::mds::{INDEX, Mds, is_mds_index};
use super::parquet::{Parquet, is_parquet};
use super::webdataset::{
    WebDataset, compressed_among, compressed_problem, is_shard_url, shards_of, split_url,
};

/// How each format a URL may name is read: its shards' settings, its Parquet columns.
#[derive(Debug, Clone, Default)]
pub struct Formats {
    /// WebDataset shards.
    pub webdataset: WebDataset,
    /// Parquet files.
    pub parquet: Parquet,
    /// MDS shards.
    pub mds: Mds,
}

impl Formats {
    /// Every format with its image and label columns named so (Parquet's and MDS's), when
    /// given: `Some("")` for the label means none.
    pub fn columns(mut self, image: Option<&str>, label: Option<&str>) -> Self {
        if let Some(name) = image {
            self.parquet = self.parquet.image_column(name);
            self.mds = self.mds.image_column(name);
        }
        if let Some(name) = label {
            self.parquet = self.parquet.label_column(name);
            self.mds = self.mds.label_column(name);
        }
        self
    }
}

impl From<WebDataset> for Formats {
    fn from(webdataset: WebDataset) -> Self {
        Self {
            webdataset,
            ..Self::default()
        }
    }
}

/// The URL of the store a dataset URL lives on, to give [`from_url`](crate::from_url): a
/// shard, Parquet file or MDS index URL's directory (`s3://b/train-{0..9}.tar` and
/// `s3://b/data/train-0.parquet` are on `s3://b` and `s3://b/data`), any other URL itself.
pub fn store_url(url: &str) -> Result<String> {
    if let Some(dir) = url
        .strip_suffix("/index.json")
        .filter(|_| is_mds_index(url))
    {
        return Ok(dir.to_owned());
    }
    if is_shard_url(url) {
        Ok(split_url(url)?.0)
    } else {
        Ok(url.to_owned())
    }
}

impl Dataset {
    /// The dataset at `url` on `store` (opened at [`store_url`]`(url)`): the MDS dataset an
    /// `index.json` URL names, the shards or Parquet files a URL names (`.tar`,
    /// `.parquet`, or a brace list of them), the
    /// manifest `manifest` under it (a key, or a [`Manifest`] that says how its labels are
    /// read), or else whatever one listing finds: the `.tar` shards at the top, else the
    /// `.parquet` files there, else an MDS `index.json` there, else an ImageFolder. Each format is read with its settings
    /// in `formats`. The listing's sizes and versions serve any of them, so no file needs
    /// a HEAD.
    pub async fn open(
        url: &str,
        store: &DynStorage,
        manifest: Option<Manifest<'_>>,
        formats: &Formats,
    ) -> Result<Dataset> {
        if let Some(m) = manifest {
            return Dataset::manifest_as(&**store, m.key, m.labels, m.classes).await;
        }
        if is_mds_index(url) {
            return formats.mds.load(store, INDEX).await;
        }
        if is_shard_url(url) {
            let files = split_url(url)?.1.unwrap_or_default();
            if !files.is_empty() && files.iter().all(|f| is_parquet(f)) {
                return formats.parquet.load(store, &files).await;
            }
            return formats.webdataset.load(store, &files).await;
        }
        let listed = RetryStore::new(&**store, RetryConfig::default())
            .list_all("")
            .await?;
        let shards = shards_of(&listed);
        let mut parquet: Vec<_> = listed
            .iter()
            .filter(|m| is_parquet(&m.key))
            .cloned()
            .collect();
        if shards.is_empty() && !parquet.is_empty() {
            parquet.sort();
            return formats.parquet.load_metas(store, parquet).await;
        }
        if shards.is_empty() && listed.iter().any(|m| m.key == INDEX) {
            return formats.mds.load(store, INDEX).await;
        }
        if shards.is_empty() {
            if let Some(suffix) = compressed_among(&listed) {
                return Err(SourceError::List(
                    store.name().to_owned(),
                    compressed_problem(suffix),
                ));
            }
            Dataset::image_folder_of(listed, store.name())
        } else {
            formats.webdataset.load_metas(store, shards).await
        }
    }

    /// [`Dataset::open`] for synchronous callers.
    pub fn open_blocking(
        url: &str,
        store: &DynStorage,
        manifest: Option<Manifest<'_>>,
        formats: &Formats,
    ) -> Result<Dataset> {
        super::blocking::block_on_own_thread(|| Dataset::open(url, store, manifest, formats))
    }
}
