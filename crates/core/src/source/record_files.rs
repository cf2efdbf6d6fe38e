//! Datasets an `index.json` describes, whose files hold their samples stored encoded (MDS
//! shards, LitData chunks): [`IndexedFiles`] is the reader both are (its settings, `load`,
//! its [`Format`]), each told apart by its [`FileKind`]; each file, read at open into its
//! samples' spans and slots, becomes items, chunks and an object of one [`Dataset`].

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use loader_scheduler::{Label, RecordOf, Records};
use loader_storage::{DynStorage, ObjectMeta, Storage};

use super::blocking::block_on_own_thread;
use super::columns::ColumnNames;
use super::error::{Result, SourceError};
use super::extensions::{INDEX, is_index};
use super::format::{About, Fit, Format, Probe};
use super::index::{Dataset, Item, ShardLayout};
use crate::tokens::Blocking;

/// How a dataset an `index.json` describes becomes a [`Dataset`]: which columns (MDS) or
/// leaves (LitData) hold the images and labels, and the runs raw files are read in.
/// [`Mds`](super::mds::Mds) and [`LitData`](super::litdata::LitData) are its two kinds.
#[derive(Debug)]
pub struct IndexedFiles<K> {
    pub(crate) columns: ColumnNames,
    pub(crate) chunk_bytes: u64,
    /// How files of tokens are cut (`source.block_size`), and the vocabulary ids must be
    /// under; `None` when no block size is set.
    pub(crate) tokens: Option<(Blocking, Option<u64>)>,
    kind: PhantomData<fn() -> K>,
}

/// What tells one kind of indexed files from another: how it is named and recognised, and
/// how its index becomes a dataset.
#[async_trait(?Send)]
pub trait FileKind: std::fmt::Debug + Send + Sync + 'static {
    /// The format's name, description and settings.
    const ABOUT: About;
    /// How errors name it: "MDS", "LitData".
    const NAMED: &'static str;

    /// Whether the bytes of an `index.json` describe files of this kind.
    fn is_kind(text: &[u8]) -> bool;

    /// The dataset of `index`, whose bytes are `text`, read with `files`' settings.
    async fn load_index(
        files: &IndexedFiles<Self>,
        store: &DynStorage,
        index: &str,
        text: &[u8],
    ) -> Result<Dataset>
    where
        Self: Sized;
}

// By hand: a derive would ask the kind, a marker, to be `Clone` too.
impl<K> Clone for IndexedFiles<K> {
    fn clone(&self) -> Self {
        Self {
            columns: self.columns.clone(),
            chunk_bytes: self.chunk_bytes,
            tokens: self.tokens,
            kind: PhantomData,
        }
    }
}

impl<K> Default for IndexedFiles<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> IndexedFiles<K> {
    /// Images from the first column (or leaf) named `image`, `img`, `jpg`, `jpeg`, `png` or
    /// `webp` (or LitData's one leaf of image bytes), labels from `label`, `cls` or `class`
    /// when present; raw files read in runs of 4 MiB in shard-local order.
    pub fn new() -> Self {
        Self {
            columns: ColumnNames::default(),
            chunk_bytes: super::webdataset::DEFAULT_CHUNK_BYTES,
            tokens: None,
            kind: PhantomData,
        }
    }

    /// Files of token ids (LitData's `TokensLoader` chunks) read in blocks cut by
    /// `blocking`, ids at or past `vocab` refused.
    pub fn tokens(mut self, blocking: Blocking, vocab: Option<u64>) -> Self {
        self.tokens = Some((blocking, vocab));
        self
    }

    /// The column holding the images (MDS: encoded `jpeg`, `png` or `bytes`; LitData: a
    /// leaf stored `jpeg`, `bytes` or `image:...`, a dict's key or a tuple's position `"0"`).
    pub fn image_column(mut self, name: impl Into<String>) -> Self {
        self.columns.image = Some(name.into());
        self
    }

    /// The column holding the labels (an integer); `""` for none.
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.columns.label = Some(name.into());
        self
    }
}

impl<K: FileKind> IndexedFiles<K> {
    /// The dataset `index` (a key of `store`, `index.json` or `split/index.json`) describes.
    pub async fn load(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        let text = get_whole(store, index).await?;
        K::load_index(self, store, index, &text).await
    }

    /// [`IndexedFiles::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, index: &str) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, index))
    }
}

#[async_trait(?Send)]
impl<K: FileKind> Format for IndexedFiles<K> {
    fn about(&self) -> About {
        K::ABOUT
    }

    fn names(&self, name: &str) -> bool {
        is_index(name)
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        index_fit(probe, K::is_kind).await
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let (key, text) = index_of(probe, K::NAMED).await?;
        let mut files = self.clone();
        files.columns = files.columns.with_options(probe.options());
        let options = probe.options();
        if let Some(blocking) = options
            .blocking()
            .map_err(|e| SourceError::Invalid(e.to_string()))?
        {
            files.tokens = Some((blocking, options.vocab_size));
        }
        K::load_index(&files, probe.store(), &key, &text).await
    }
}

/// Why a file could not be read at open.
pub(crate) enum FileError {
    Storage(loader_storage::Error),
    /// What is wrong with it.
    Invalid(String),
}

impl From<String> for FileError {
    fn from(problem: String) -> Self {
        Self::Invalid(problem)
    }
}

impl From<&str> for FileError {
    fn from(problem: &str) -> Self {
        Self::Invalid(problem.into())
    }
}

impl FileError {
    /// The source's error: a storage one as it is, a problem through `problem` (which
    /// names the file, the store and the format).
    pub(crate) fn into_source(self, problem: impl FnOnce(String) -> SourceError) -> SourceError {
        match self {
            Self::Storage(e) => SourceError::Storage(e),
            Self::Invalid(p) => problem(p),
        }
    }
}

/// Files read at open at once: their tables are small reads, each a round trip.
const OPEN_AT_ONCE: usize = 8;

/// A small file (an `index.json`, a class list) whole, through the caller's stack.
pub(crate) async fn get_whole(store: &DynStorage, key: &str) -> Result<Bytes> {
    Ok(store.get(key).await?)
}

/// How well an `index.json` a probe finds fits the format whose contents `ours` tells
/// (MDS and LitData both describe their files in one).
pub(crate) async fn index_fit(
    probe: &Probe<'_>,
    ours: impl Fn(&[u8]) -> bool,
) -> Result<Option<Fit>> {
    Ok(index_json(probe)
        .await?
        .filter(|(_, _, text)| ours(text))
        .map(|(fit, _, _)| fit))
}

/// The key and bytes of the `index.json` a probe finds, or an error saying there is no
/// `what` index (`MDS`, `LitData`).
pub(crate) async fn index_of(probe: &Probe<'_>, what: &str) -> Result<(String, Bytes)> {
    match index_json(probe).await? {
        Some((_, key, text)) => Ok((key, text)),
        None => Err(SourceError::Invalid(format!(
            "no {what} index.json at {}",
            loader_storage::redact(probe.url())
        ))),
    }
}

/// The `index.json` a probe finds, with how it fits and its bytes: the one the URL names,
/// or the one at the top of its listing. MDS and LitData both describe their files in
/// one; which of them it is, its contents say.
pub(crate) async fn index_json(probe: &Probe<'_>) -> Result<Option<(Fit, String, Bytes)>> {
    let (fit, key) = match probe.named() {
        Some([key]) if is_index(key) => (Fit::Named, key.clone()),
        Some(_) => return Ok(None),
        None => {
            // An `index.json` beside shards, images or Parquet files is theirs.
            let holds = probe.holds().await?.unwrap_or_default();
            if !holds.index || holds.shards || holds.images || holds.parquet {
                return Ok(None);
            }
            (Fit::Listed, INDEX.to_owned())
        }
    };
    let text = probe.read(&key).await?;
    Ok(Some((fit, key, text)))
}

/// A file an index lists is named relative to the index's folder, and lies inside it: no
/// `..`, `.`, empty or absolute part, no backslash. (The store refuses such keys too, but
/// without naming the index that listed them.)
pub(crate) fn check_listed_name(name: &str) -> std::result::Result<(), String> {
    let outside = name.is_empty()
        || name.starts_with('/')
        || name.contains('\\')
        || name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if outside {
        return Err(format!(
            "it lists the file {name:?}, which is not a name inside the index's folder \
             (no '..', '.', empty or absolute parts)"
        ));
    }
    Ok(())
}

/// The files an index at key `index` lists, named relative to its folder by `name`, each
/// read by `open` given its key, [`OPEN_AT_ONCE`] at a time, in the index's order.
pub(crate) async fn open_files<T, R, Fut>(
    index: &str,
    files: Vec<T>,
    name: impl Fn(&T) -> &str,
    mut open: impl FnMut(String, T) -> Fut,
) -> Result<Vec<R>>
where
    Fut: std::future::Future<Output = Result<R>>,
{
    let dir = index.rsplit_once('/').map_or("", |(d, _)| d);
    futures::stream::iter(files)
        .map(|file| {
            let key = if dir.is_empty() {
                name(&file).to_owned()
            } else {
                format!("{dir}/{}", name(&file))
            };
            open(key, file)
        })
        .buffered(OPEN_AT_ONCE)
        .try_collect()
        .await
}

/// One file's samples as read at open.
pub(crate) struct RecordFile {
    pub(crate) key: String,
    /// The file's size.
    pub(crate) size: u64,
    /// How its spans decode: one for the whole file.
    pub(crate) records: Arc<dyn Records>,
    /// Each sample's span, and its slot among the span's records.
    pub(crate) samples: Vec<(Range<u64>, u32)>,
    /// Whether spans hold several samples (a zstd frame or file): each span is then one
    /// chunk, fetched and decoded once; else neighbours are read in runs of `run_bytes`.
    pub(crate) shared: bool,
}

/// The dataset of `files`, in order: a sample is named `"{noun} {i}"` by its place in its
/// file; without `labelled` its samples carry none.
pub(crate) fn dataset_of(
    files: Vec<RecordFile>,
    run_bytes: u64,
    noun: &str,
    labelled: bool,
) -> Result<Dataset> {
    let mut items = Vec::new();
    let mut layouts = Vec::with_capacity(files.len());
    let mut objects = Vec::with_capacity(files.len());
    for file in files {
        let key: Arc<str> = file.key.into();
        objects.push(ObjectMeta {
            key: key.to_string(),
            size: file.size,
            version: None,
        });
        let first = items.len();
        for (i, (range, slot)) in file.samples.iter().enumerate() {
            items.push(Item {
                key: Arc::clone(&key),
                range: Some(range.clone()),
                // Labels are stored with the samples, read with them.
                label: Label::None,
                name: Some(format!("{noun} {i}").into()),
                members: Arc::default(),
                record: Some(RecordOf {
                    records: Arc::clone(&file.records),
                    slot: *slot,
                    shared: file.shared,
                }),
            });
        }
        layouts.push(if file.shared {
            let mut chunks: Vec<Range<usize>> = Vec::new();
            for (i, (range, _)) in file.samples.iter().enumerate() {
                match chunks.last_mut() {
                    Some(c) if file.samples[c.start - first].0 == *range => c.end = first + i + 1,
                    _ => chunks.push(first + i..first + i + 1),
                }
            }
            ShardLayout { key, chunks }
        } else {
            let spans: Vec<Range<u64>> = file.samples.into_iter().map(|(r, _)| r).collect();
            ShardLayout::by_runs(key, &spans, first, run_bytes)
        });
    }
    let dataset = Dataset::from_shards(items, Vec::new(), layouts)?.with_objects(objects);
    Ok(if labelled {
        dataset
    } else {
        dataset.without_labels()
    })
}
