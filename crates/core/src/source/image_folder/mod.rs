//! torchvision's ImageFolder: classes are the top-level folders of a listing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use loader_storage::{ObjectMeta, Storage};

use super::blocking::block_on_own_thread;
use super::error::{Result, SourceError};
use super::extensions::image_extension;
use super::format::{About, Fit, Format, Probe};
use super::index::Dataset;
use super::index::Item;

/// torchvision's ImageFolder as a [`Format`]: what a listing is when nothing fits better,
/// and what it is when it holds images.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageFolder;

#[async_trait(?Send)]
impl Format for ImageFolder {
    fn about(&self) -> About {
        // What each file is to the stage (Python's decoders read them): the files
        // themselves are the samples.
        About::new("imagefolder", "an ImageFolder").reads(&["fields"])
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        let Some(holds) = probe.holds().await? else {
            return Ok(None);
        };
        // Images beside shards are the shards' previews, not the dataset.
        Ok(Some(if holds.images && !holds.shards {
            Fit::Listed
        } else {
            Fit::Fallback
        }))
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let Some(listed) = probe.listed().await? else {
            return Err(SourceError::Invalid(format!(
                "an ImageFolder is a folder: give the URL of {}'s folder, not files in it",
                loader_storage::redact(probe.url())
            )));
        };
        Dataset::image_folder_in(listed, probe.store().name())
    }
}

impl Dataset {
    /// torchvision's ImageFolder over a store that can list: classes are the sorted names
    /// of the top-level folders, files directly under the root are ignored, only image
    /// extensions count (case-insensitively), a class without images is an error, and
    /// samples are sorted by key within a class. The store is listed as given: behind a
    /// retry layer, a transient failure of the listing restarts it.
    pub async fn image_folder(store: &dyn Storage) -> Result<Self> {
        Self::image_folder_in(&store.list_all("").await?, store.name())
    }

    /// [`Dataset::image_folder`] from a listing already made (of the store named
    /// `store`), e.g. by a caller that also looked for shards in it.
    pub fn image_folder_of(listed: Vec<ObjectMeta>, store: &str) -> Result<Self> {
        Self::image_folder_in(&listed, store)
    }

    /// [`Dataset::image_folder_of`] over a listing held elsewhere (a probe's): only the
    /// images are copied out of it.
    pub(crate) fn image_folder_in(listed: &[ObjectMeta], store: &str) -> Result<Self> {
        let mut folders: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut objects = Vec::new();
        for meta in listed {
            let Some((class, _)) = meta.key.split_once('/') else {
                continue;
            };
            let entry = folders.entry(class.to_owned()).or_default();
            if image_extension(&meta.key).is_some() {
                entry.push(meta.key.clone());
                objects.push(meta.clone());
            }
        }
        if folders.is_empty() {
            return Err(SourceError::NoClassFolders {
                store: store.into(),
            });
        }
        let empty: Vec<&str> = folders
            .iter()
            .filter(|(_, keys)| keys.is_empty())
            .map(|(c, _)| c.as_str())
            .collect();
        if !empty.is_empty() {
            return Err(SourceError::EmptyClasses {
                folders: empty.join(", "),
                store: store.into(),
            });
        }
        let mut items = Vec::new();
        let mut classes = Vec::new();
        for (label, (class, mut keys)) in folders.into_iter().enumerate() {
            keys.sort();
            items.extend(keys.into_iter().map(|key| Item::new(key, label as i64)));
            classes.push(class);
        }
        Ok(Self::from_items(items, classes).with_objects(objects))
    }

    /// [`Dataset::image_folder`] for synchronous callers: runs on a short-lived runtime of
    /// its own thread, so it works with or without a surrounding tokio runtime.
    pub fn image_folder_blocking(store: &dyn Storage) -> Result<Self> {
        block_on_own_thread(|| Self::image_folder(store))
    }
}
