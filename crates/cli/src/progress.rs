//! What the commands show while they work: shards being indexed, a dataset being opened.

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::webdataset::{Progress, WebDataset};
use loader_core::{Dataset, DynStorage, Formats, Manifest};

use crate::Result;

/// A bar that shows shards being indexed, and the progress callback that drives it.
pub fn indexing_bar(show: bool) -> (ProgressBar, Progress) {
    let bar = if show {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("indexing shards {bar:30} {pos}/{len}, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let progress: Progress = Arc::new(move |done, total| {
        shown.set_length(total as u64);
        shown.set_position(done as u64);
    });
    (bar, progress)
}

/// The dataset at `url` on `store` (opened at the URL's root), with a progress bar while
/// shards are indexed.
pub fn open_dataset(
    url: &str,
    store: &DynStorage,
    manifest: Option<Manifest<'_>>,
    columns: (Option<&str>, Option<&str>),
    progress: bool,
) -> Result<Dataset> {
    let (bar, indexing) = indexing_bar(progress);
    let formats = Formats::from(WebDataset::new().progress(indexing)).columns(columns.0, columns.1);
    let dataset = Dataset::open_blocking(url, store, manifest, &formats)?;
    bar.finish_and_clear();
    Ok(dataset)
}
