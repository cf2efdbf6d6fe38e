//! The formats [`Dataset::open`](super::Dataset::open) knows: the seven built in, then any a
//! caller [`register`]s, in one process-wide list (as the `image` crate's decoding hooks
//! are), so every front end (the CLI, Python, a caller's own code) reads the same ones.

use std::sync::{Arc, OnceLock, RwLock};

use super::format::Format;
use super::image_folder::ImageFolder;
use super::litdata::LitData;
use super::manifest::Manifest;
use super::mds::Mds;
use super::megatron::Megatron;
use super::parquet::Parquet;
use super::webdataset::WebDataset;

fn formats() -> &'static RwLock<Vec<Arc<dyn Format>>> {
    static FORMATS: OnceLock<RwLock<Vec<Arc<dyn Format>>>> = OnceLock::new();
    FORMATS.get_or_init(|| {
        RwLock::new(vec![
            Arc::new(Manifest),
            Arc::new(WebDataset::new()),
            Arc::new(Parquet::new()),
            Arc::new(Mds::new()),
            Arc::new(LitData::new()),
            Arc::new(Megatron),
            Arc::new(ImageFolder),
        ])
    })
}

/// Add `format` to those every [`Dataset::open`](super::Dataset::open) of this process
/// asks; one of the same name is replaced (a configured [`WebDataset`] for the default
/// one, say).
pub fn register(format: impl Format) {
    let format: Arc<dyn Format> = Arc::new(format);
    let mut formats = formats().write().unwrap_or_else(|e| e.into_inner());
    match formats
        .iter_mut()
        .find(|f| f.about().name == format.about().name)
    {
        Some(slot) => *slot = format,
        None => formats.push(format),
    }
}

/// The formats known now, in the order they are asked.
pub fn registered() -> Vec<Arc<dyn Format>> {
    formats().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The known formats' names, for messages: `imagefolder, manifest, ...`.
pub(crate) fn names(formats: &[Arc<dyn Format>]) -> String {
    formats
        .iter()
        .map(|f| f.about().name)
        .collect::<Vec<_>>()
        .join(", ")
}
