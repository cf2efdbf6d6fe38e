//! What a dataset format is to the loader: a name, a test of what a URL and its listing
//! hold, and a way to open them as a [`Dataset`]. Each format is one folder of `source/`
//! implementing [`Format`]; the [`registry`](super::registry) holds them, and
//! [`Dataset::open`] asks each in turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use loader_storage::{DynStorage, ObjectMeta, Storage};

use super::error::Result;
use super::extensions::Holds;
use super::index::Dataset;
use crate::options::{LoaderOptions, SourceOptions};

/// Called as a format works through a dataset's files at open: (files done, files in all).
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// How well what a URL names fits a format. The best fit wins; two formats with the same
/// best fit are refused as ambiguous, naming both and `source.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fit {
    /// What a listing is read as when nothing fits better (an ImageFolder).
    Fallback,
    /// The listing holds this format's own files.
    Listed,
    /// The URL names this format's files (`train-{0..9}.tar`, `.../index.json`).
    Named,
}

/// Who a [`Format`] is: declared once, read by the registry, `source.format` and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// Its name, as `source.format` chooses it and errors name it (lowercase, one word).
    pub name: &'static str,
    /// How it is called in a sentence: "WebDataset shards", "an ImageFolder".
    pub described: &'static str,
    /// The `source.*` settings it reads, beyond `source.format`: any other one set is
    /// refused when a dataset of this format is opened.
    pub settings: &'static [&'static str],
}

impl About {
    /// A format called `name`, `described` so in a sentence, reading no setting.
    pub const fn new(name: &'static str, described: &'static str) -> Self {
        Self {
            name,
            described,
            settings: &[],
        }
    }

    /// The same, reading `settings` (`source.` left out: `image_column`).
    pub const fn reads(self, settings: &'static [&'static str]) -> Self {
        Self { settings, ..self }
    }
}

/// A dataset format: ImageFolder, a manifest, WebDataset shards, Parquet files, MDS shards,
/// LitData chunks, or one of a caller's own, added with [`register`](super::register).
///
/// ```
/// use loader_core::source::{About, Fit, Format, Probe};
/// use loader_core::{Dataset, Item};
///
/// /// Every object under the URL is a sample, when a `samples.txt` marks the folder.
/// #[derive(Debug)]
/// struct Marked;
///
/// #[async_trait::async_trait(?Send)]
/// impl Format for Marked {
///     fn about(&self) -> About {
///         About::new("marked", "a marked folder")
///     }
///     async fn detect(&self, probe: &Probe<'_>) -> loader_core::source::Result<Option<Fit>> {
///         let listed = probe.listed().await?;
///         Ok(listed
///             .is_some_and(|l| l.iter().any(|m| m.key == "samples.txt"))
///             .then_some(Fit::Listed))
///     }
///     async fn open(&self, probe: &Probe<'_>) -> loader_core::source::Result<Dataset> {
///         let listed = probe.listed().await?.unwrap_or_default();
///         let items = listed.iter().map(|m| Item::new(m.key.as_str(), -1)).collect();
///         Ok(Dataset::from_items(items, Vec::new()))
///     }
/// }
/// loader_core::source::register(Marked);
/// ```
// `?Send`: opening Parquet files awaits closures over borrowed footers, whose futures
// rustc cannot prove `Send` (rust-lang/rust#102211); an open runs on its own thread
// ([`Dataset::open_blocking`]) or is awaited in place.
#[async_trait(?Send)]
pub trait Format: Send + Sync + std::fmt::Debug + 'static {
    /// Who it is: its name, how a sentence calls it, the settings it reads.
    fn about(&self) -> About;

    /// Whether the settings alone choose it (a manifest's key): then nothing is probed.
    fn chosen_by(&self, _options: &SourceOptions) -> bool {
        false
    }

    /// Whether a URL ending in `name` names a file of this format (`.tar`, `.parquet`,
    /// `index.json`), so the URL is that file and the store its folder.
    fn names(&self, _name: &str) -> bool {
        false
    }

    /// How well what `probe` found fits this format; `None`: not at all.
    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>>;

    /// The dataset `probe` found, read through its store.
    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset>;
}

/// What every format opens a dataset with: the store behind the caller's request stack
/// (timeouts and retries, as sample reads have), the source settings, and who to tell of
/// progress. No format wraps the store in a stack of its own.
#[derive(Clone)]
pub struct SourceContext {
    store: DynStorage,
    options: SourceOptions,
    progress: Option<Progress>,
}

impl std::fmt::Debug for SourceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceContext")
            .field("store", &self.store.name())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SourceContext {
    /// `store` (the store at the dataset's [`store_url`](super::store_url)) behind the
    /// request stack `options` set (`storage.request_timeout`, `storage.max_retries`),
    /// read with `options.source`.
    pub fn new(store: DynStorage, options: &LoaderOptions) -> Self {
        Self {
            store: options.request_stack(store),
            options: options.source.clone(),
            progress: None,
        }
    }

    /// Report progress through `progress` while files are read at open.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The store, behind its request stack.
    pub fn store(&self) -> &DynStorage {
        &self.store
    }

    /// The source settings.
    pub fn options(&self) -> &SourceOptions {
        &self.options
    }
}

/// What a URL names, as formats see it while detecting and opening: the files it names,
/// or else the listing of its store, listed at most once, and small files read at most
/// once (an `index.json` two formats look into).
pub struct Probe<'a> {
    url: &'a str,
    context: &'a SourceContext,
    named: Option<Vec<String>>,
    listed: OnceLock<Vec<ObjectMeta>>,
    holds: OnceLock<Holds>,
    read: Mutex<HashMap<String, Bytes>>,
}

impl<'a> Probe<'a> {
    pub(crate) fn new(
        url: &'a str,
        context: &'a SourceContext,
        named: Option<Vec<String>>,
    ) -> Self {
        Self {
            url,
            context,
            named,
            listed: OnceLock::new(),
            holds: OnceLock::new(),
            read: Mutex::new(HashMap::new()),
        }
    }

    /// The dataset's URL as given (errors show it through [`redact`](loader_storage::redact)).
    pub fn url(&self) -> &str {
        self.url
    }

    /// The store, behind the caller's request stack.
    pub fn store(&self) -> &DynStorage {
        &self.context.store
    }

    /// The source settings.
    pub fn options(&self) -> &SourceOptions {
        &self.context.options
    }

    /// Who to tell of progress, if anyone.
    pub fn progress(&self) -> Option<&Progress> {
        self.context.progress.as_ref()
    }

    /// The keys the URL names (a brace list of shards, a `.parquet` file, an
    /// `index.json`), relative to the store; `None` when it names a prefix.
    pub fn named(&self) -> Option<&[String]> {
        self.named.as_deref()
    }

    /// Every object under the store, in no set order, when the URL names a prefix (listed
    /// on first ask); `None` when it names files.
    pub async fn listed(&self) -> Result<Option<&[ObjectMeta]>> {
        if self.named.is_some() {
            return Ok(None);
        }
        if let Some(listed) = self.listed.get() {
            return Ok(Some(listed));
        }
        let listed = self.store().list_all("").await?;
        Ok(Some(self.listed.get_or_init(|| listed)))
    }

    /// What the listing holds (shards, images, Parquet files, an `index.json`), told once
    /// for every format that asks; `None` when the URL names files.
    pub(crate) async fn holds(&self) -> Result<Option<Holds>> {
        if let Some(holds) = self.holds.get() {
            return Ok(Some(*holds));
        }
        Ok(self
            .listed()
            .await?
            .map(|listed| *self.holds.get_or_init(|| Holds::of(listed))))
    }

    /// The listing, if it was made already.
    pub(crate) fn listed_now(&self) -> Option<&[ObjectMeta]> {
        self.listed.get().map(Vec::as_slice)
    }

    /// The object at `key`, read whole once however often asked: for small files (an
    /// `index.json`, a class list).
    pub async fn read(&self, key: &str) -> Result<Bytes> {
        if let Some(bytes) = self.read.lock().ok().and_then(|r| r.get(key).cloned()) {
            return Ok(bytes);
        }
        let bytes = self.store().get(key).await?;
        if let Ok(mut read) = self.read.lock() {
            read.insert(key.to_owned(), bytes.clone());
        }
        Ok(bytes)
    }
}
