//! What the commands show while they work: shards being indexed, a dataset being opened.

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use loader_core::source::Progress;
use loader_core::{Dataset, DynStorage, LoaderOptions, SourceContext};

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

/// The dataset at `url` on `store` (opened at the URL's root) as `options` say (its
/// `source.*` settings, read behind its request stack), with a progress bar while shards
/// are indexed.
pub fn open_dataset(
    url: &str,
    store: &DynStorage,
    options: &LoaderOptions,
    progress: bool,
) -> Result<Dataset> {
    let (bar, indexing) = indexing_bar(progress);
    let context = SourceContext::new(store.clone(), options).progress(indexing);
    let dataset = Dataset::open_blocking(url, &context)?;
    bar.finish_and_clear();
    Ok(dataset)
}
