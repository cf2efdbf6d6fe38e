//! A dataset found from its URL alone, as `loader run URL` and the Python binding take it.

use std::collections::BTreeSet;

use loader_storage::layer::{RetryConfig, RetryStore};
use loader_storage::{DynStorage, Storage};

use super::error::{Result, SourceError};
use super::extensions::image_extension;
use super::index::{CLASSES_FILE, Dataset, PACK_FILE};
use super::litdata::{LitData, is_litdata_index};
use super::manifest::Manifest;
use super::mds::{INDEX, Mds, is_mds_index};
use super::parquet::{Parquet, is_parquet};
use super::record_files::get_whole;
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
    /// LitData chunks.
    pub litdata: LitData,
}

impl Formats {
    /// Every format with its image and label columns named so (Parquet's, MDS's and
    /// LitData's), when given: `Some("")` for the label means none.
    pub fn columns(mut self, image: Option<&str>, label: Option<&str>) -> Self {
        if let Some(name) = image {
            self.parquet = self.parquet.image_column(name);
            self.mds = self.mds.image_column(name);
            self.litdata = self.litdata.image_column(name);
        }
        if let Some(name) = label {
            self.parquet = self.parquet.label_column(name);
            self.mds = self.mds.label_column(name);
            self.litdata = self.litdata.label_column(name);
        }
        self
    }
}

impl Formats {
    /// The MDS or LitData dataset whose `index.json` is at the top of `store`: which of
    /// the two its contents say.
    async fn index_json(&self, store: &DynStorage) -> Result<Dataset> {
        let text = get_whole(store, INDEX).await?;
        if is_litdata_index(&text) {
            self.litdata.load_index(store, INDEX, &text).await
        } else {
            self.mds.load_index(store, INDEX, &text).await
        }
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
    /// The dataset at `url` on `store` (opened at [`store_url`]`(url)`): the MDS or LitData dataset an
    /// `index.json` URL names, the shards or Parquet files a URL names (`.tar`,
    /// `.parquet`, or a brace list of them), the
    /// manifest `manifest` under it (a key, or a [`Manifest`] that says how its labels are
    /// read), or else whatever one listing finds: `.tar` shards, else (when it lists no
    /// image files) the `.parquet` files of one folder or a top-level MDS or LitData `index.json`,
    /// else an ImageFolder. Each format is read with its settings in `formats`; columns
    /// named for a dataset of another format are refused. The listing's sizes and versions
    /// serve any of them, so no file needs a HEAD.
    pub async fn open(
        url: &str,
        store: &DynStorage,
        manifest: Option<Manifest<'_>>,
        formats: &Formats,
    ) -> Result<Dataset> {
        // Columns name a Parquet, MDS or LitData dataset's parts: for any other, refused rather
        // than ignored.
        let columns_for = |what: &str| -> Result<()> {
            if formats.parquet.names_columns()
                || formats.mds.names_columns()
                || formats.litdata.names_columns()
            {
                return Err(SourceError::Invalid(format!(
                    "image and label columns are read from Parquet files, MDS shards and \
                     LitData chunks, but {} is {what}: leave the columns out",
                    loader_storage::redact(url)
                )));
            }
            Ok(())
        };
        // WebDataset's fields name members of shards: a table's samples have columns.
        let fields_for = |what: &str| -> Result<()> {
            if formats.webdataset.names_fields() {
                return Err(SourceError::Invalid(format!(
                    "fields name the members of WebDataset shards, but {} is {what}: choose \
                     its image and label columns with image_column and label_column instead",
                    loader_storage::redact(url)
                )));
            }
            Ok(())
        };
        if let Some(m) = manifest {
            columns_for("read through a manifest")?;
            return Dataset::manifest_as(&**store, m.key, m.labels, m.classes).await;
        }
        if is_mds_index(url) {
            fields_for("an MDS or LitData dataset")?;
            return formats.index_json(store).await;
        }
        if is_shard_url(url) {
            let files = split_url(url)?.1.unwrap_or_default();
            if !files.is_empty() && files.iter().all(|f| is_parquet(f)) {
                fields_for("Parquet files")?;
                return formats.parquet.load(store, &files).await;
            }
            columns_for("WebDataset shards")?;
            return formats.webdataset.load(store, &files).await;
        }
        let listed = RetryStore::new(&**store, RetryConfig::default())
            .list_all("")
            .await?;
        let shards = shards_of(&listed);
        if listed.iter().any(|m| m.key == PACK_FILE) {
            unfinished_pack(store).await?;
        }
        // Image files make an ImageFolder, whatever else lies beside them (a `datasets`
        // imagefolder's metadata.parquet).
        let images = listed.iter().any(|m| image_extension(&m.key).is_some());
        let mut parquet: Vec<_> = listed
            .iter()
            .filter(|m| is_parquet(&m.key))
            .cloned()
            .collect();
        if shards.is_empty() && !images && !parquet.is_empty() {
            let folders: BTreeSet<&str> = parquet
                .iter()
                .map(|m| m.key.rsplit_once('/').map_or("", |(dir, _)| dir))
                .collect();
            if folders.len() > 1 {
                // A Hub repository's train/ and validation/ read as one dataset would mix
                // the splits.
                let shown: Vec<String> = folders.iter().take(4).map(|f| format!("{f}/")).collect();
                return Err(SourceError::List(
                    store.name().to_owned(),
                    format!(
                        "Parquet files in {} folders ({}{}): give the URL of one split's \
                         folder, or a brace list of its files",
                        folders.len(),
                        shown.join(", "),
                        if folders.len() > 4 { ", ..." } else { "" }
                    ),
                ));
            }
            parquet.sort();
            fields_for("Parquet files")?;
            return formats.parquet.load_metas(store, parquet).await;
        }
        if shards.is_empty() && !images && listed.iter().any(|m| m.key == INDEX) {
            fields_for("an MDS or LitData dataset")?;
            return formats.index_json(store).await;
        }
        if shards.is_empty() {
            if let Some(suffix) = compressed_among(&listed) {
                return Err(SourceError::List(
                    store.name().to_owned(),
                    compressed_problem(suffix),
                ));
            }
            columns_for("an ImageFolder")?;
            Dataset::image_folder_of(listed, store.name())
        } else {
            columns_for("WebDataset shards")?;
            let dataset = formats.webdataset.load_metas(store, shards).await?;
            // The class names `loader pack` writes beside the shards it packs.
            if listed.iter().any(|m| m.key == CLASSES_FILE)
                && dataset.classes().is_empty()
                && dataset.has_labels()
            {
                let text = get_whole(store, CLASSES_FILE).await?;
                let classes = String::from_utf8_lossy(&text)
                    .lines()
                    .map(str::to_owned)
                    .collect();
                return dataset
                    .with_classes(classes)
                    .map_err(|e| SourceError::List(store.name().to_owned(), e.to_string()));
            }
            Ok(dataset)
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

/// Refuses the pack `loader pack` left unfinished in `store` (its `pack.json` says so):
/// read as it is, it would be a dataset of the samples packed so far, silently.
async fn unfinished_pack(store: &DynStorage) -> Result<()> {
    let text = get_whole(store, PACK_FILE).await?;
    let Ok(record) = serde_json::from_slice::<serde_json::Value>(&text) else {
        // Someone else's pack.json: not ours to judge.
        return Ok(());
    };
    if record.get("complete") == Some(&serde_json::Value::Bool(false)) {
        let samples = record
            .pointer("/settings/samples")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_default();
        let done = record
            .get("shards")
            .and_then(serde_json::Value::as_array)
            .and_then(|s| s.last())
            .and_then(|s| s.get("end"))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_default();
        return Err(SourceError::List(
            store.name().to_owned(),
            format!(
                "an unfinished pack ({PACK_FILE} records {done} of {samples} samples): run \
                 the same loader pack again to finish it"
            ),
        ));
    }
    Ok(())
}
