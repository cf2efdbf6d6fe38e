//! A dataset found from its URL alone, as `loader run URL` and the Python binding take it:
//! the registered formats are asked what the URL names, the one that fits best opens it.

use std::sync::Arc;

use super::error::{Result, SourceError};
use loader_storage::Storage;

use super::format::{Format, Probe, SourceContext};
use super::index::{Dataset, PACK_FILE};
use super::registry::{names, registered};
use super::url::split_named;

impl Dataset {
    /// The dataset at `url`, read through `context` (its store opened at
    /// [`store_url`](super::store_url)`(url)`). The format is the one `source.format`
    /// names, or the one its settings choose (`source.manifest`), or else the one that
    /// fits what the URL names best: shards, Parquet files or an `index.json` a URL names;
    /// else, in its listing, `.tar` shards, an ImageFolder's images, the `.parquet` files of
    /// one folder, an MDS or LitData `index.json`. Two formats fitting equally are refused,
    /// as is a setting the format found does not read, naming what does.
    pub async fn open(url: &str, context: &SourceContext) -> Result<Dataset> {
        // One snapshot of the registry for the whole open.
        let formats = registered();
        let named = split(url, &formats)?.1;
        let probe = Probe::new(url, context, named);
        let format = choose(&probe, &formats).await?;
        check_settings(&probe, &*format, &formats)?;
        // A prefix is listed before a chosen format reads it (a manifest's is not: a
        // manifest exists to spare the listing), so a half-written pack is never read.
        let listed = match probe.named() {
            None if !format.chosen_by(probe.options()) => probe.listed().await?,
            _ => probe.listed_now(),
        };
        if listed.is_some_and(|l| l.iter().any(|m| m.key == PACK_FILE)) {
            unfinished_pack(&probe).await?;
        }
        format.open(&probe).await
    }

    /// [`Dataset::open`] for synchronous callers.
    pub fn open_blocking(url: &str, context: &SourceContext) -> Result<Dataset> {
        super::blocking::block_on_own_thread(|| Dataset::open(url, context))
    }
}

/// The store and the dataset at `url` (any dataset `loader run` reads), opened with the
/// default options and no store options: what a program that reads one URL starts with.
///
/// ```
/// # fn main() -> loader_core::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// loader_testkit::DatasetSpec::tiny(8, 2).write(dir.path()).unwrap();
/// let (store, dataset) = loader_core::open(&dir.path().to_string_lossy())?;
/// assert_eq!((dataset.len(), dataset.classes().len()), (8, 2));
/// # drop(store);
/// # Ok(())
/// # }
/// ```
pub fn open(url: &str) -> Result<(loader_storage::DynStorage, Dataset)> {
    open_with(
        url,
        Vec::<(String, String)>::new(),
        &crate::LoaderOptions::default(),
    )
}

/// [`open`] with store options (`aws_region`, `aws_endpoint`, ...) and the loader's options
/// (its `source.*` settings, and the retries and timeouts of the reads at open).
pub fn open_with<K: AsRef<str>, V: Into<String>>(
    url: &str,
    storage_options: impl IntoIterator<Item = (K, V)>,
    options: &crate::LoaderOptions,
) -> Result<(loader_storage::DynStorage, Dataset)> {
    let store = loader_storage::from_url(&store_url(url)?, storage_options)?;
    let dataset = Dataset::open_blocking(url, &SourceContext::new(store.clone(), options))?;
    Ok((store, dataset))
}

/// The format `source.format` names, or the settings choose, or else that fits best.
async fn choose(probe: &Probe<'_>, formats: &[Arc<dyn Format>]) -> Result<Arc<dyn Format>> {
    let options = probe.options();
    if let Some(name) = &options.format {
        let name = name.trim().to_ascii_lowercase();
        return formats
            .iter()
            .find(|f| f.about().name.eq_ignore_ascii_case(&name))
            .cloned()
            .ok_or_else(|| SourceError::UnknownFormat {
                name,
                known: names(formats),
            });
    }
    if let Some(format) = formats.iter().find(|f| f.chosen_by(options)) {
        return Ok(Arc::clone(format));
    }
    let mut fits = Vec::new();
    for format in formats {
        if let Some(fit) = format.detect(probe).await? {
            fits.push((fit, format));
        }
    }
    let layout = |found: String| SourceError::Layout {
        url: loader_storage::redact(probe.url()),
        found,
        known: names(formats),
    };
    let Some(best) = fits.iter().map(|(fit, _)| *fit).max() else {
        return Err(layout(match probe.named() {
            Some(keys) => format!(
                "no format reads {}{}",
                keys.iter().take(4).cloned().collect::<Vec<_>>().join(", "),
                if keys.len() > 4 { ", ..." } else { "" }
            ),
            None => "no format reads what it holds".into(),
        }));
    };
    let top: Vec<&Arc<dyn Format>> = fits
        .iter()
        .filter(|(fit, _)| *fit == best)
        .map(|(_, f)| *f)
        .collect();
    match top.as_slice() {
        [one] => Ok(Arc::clone(one)),
        many => Err(layout(format!(
            "it could be {}",
            many.iter()
                .map(|f| format!("{} ({})", f.about().described, f.about().name))
                .collect::<Vec<_>>()
                .join(" or ")
        ))),
    }
}

/// Refuses a source setting that `format` does not read: set for another format, it
/// would be silently ignored.
fn check_settings(
    probe: &Probe<'_>,
    format: &dyn Format,
    formats: &[Arc<dyn Format>],
) -> Result<()> {
    for key in probe.options().chosen() {
        let setting = key.trim_start_matches("source.");
        if setting == "format" || format.about().settings.contains(&setting) {
            continue;
        }
        let readers: Vec<&str> = formats
            .iter()
            .filter(|f| f.about().settings.contains(&setting))
            .map(|f| f.about().name)
            .collect();
        return Err(SourceError::Unread {
            key,
            readers: if readers.is_empty() {
                "no format".into()
            } else {
                readers.join(", ")
            },
            url: loader_storage::redact(probe.url()),
            format: format.about().described.into(),
        });
    }
    Ok(())
}

/// Refuses the pack `loader pack` left unfinished (its `pack.json` says so): read as it
/// is, it would be a dataset of the samples packed so far, silently.
async fn unfinished_pack(probe: &Probe<'_>) -> Result<()> {
    let text = probe.read(PACK_FILE).await?;
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
            probe.store().name().to_owned(),
            format!(
                "an unfinished pack ({PACK_FILE} records {done} of {samples} samples): run \
                 the same loader pack again to finish it"
            ),
        ));
    }
    Ok(())
}

/// The store's root and the keys `url` names, by what `formats` name.
fn split(url: &str, formats: &[Arc<dyn Format>]) -> Result<(String, Option<Vec<String>>)> {
    split_named(url, |name| formats.iter().any(|f| f.names(name)))
}

/// The URL of the store a dataset URL lives on, to give [`from_url`](crate::from_url): a
/// URL of files a format names (a shard, a Parquet file, an `index.json`, a brace list)
/// is on its directory (`s3://b/train-{0..9}.tar` and `s3://b/data/train-0.parquet` are
/// on `s3://b` and `s3://b/data`), any other URL is itself.
pub fn store_url(url: &str) -> Result<String> {
    Ok(match split(url, &registered())? {
        (root, Some(_)) => root,
        // As given: how a prefix is spelled is the caller's (a pack records it).
        (_, None) => url.to_owned(),
    })
}
