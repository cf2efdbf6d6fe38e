//! WebDataset tar shards as a dataset: shard lists (brace ranges or a prefix of `.tar`
//! files), the shard index, and WebDataset's grouping of members into samples.
//!
//! ```
//! use loader_core::webdataset::WebDataset;
//! use loader_core::{DataLoader, from_url};
//!
//! # fn main() -> loader_core::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! loader_testkit::DatasetSpec::tiny(12, 3).write_shards(dir.path(), 2).unwrap();
//! let url = format!("{}/shard-{{000000..000001}}.tar", dir.path().display());
//! let (store, dataset) = WebDataset::new().load_url_blocking(&url, Vec::<(String, String)>::new())?;
//! assert_eq!(dataset.len(), 12);
//! assert_eq!(dataset.shards().len(), 2);
//!
//! let loader = DataLoader::builder(store, dataset).batch_size(4).shuffle(true).build()?;
//! let mut labels = 0;
//! for batch in loader {
//!     labels += batch?.labels.len();
//! }
//! assert_eq!(labels, 12);
//! # Ok(())
//! # }
//! ```

mod group;
mod index;
mod tar;
mod write;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use loader_storage::{DynStorage, ErrorKind, ObjectMeta, Storage};

pub use crate::source::local_cache::{default_cache_dir, write_atomically};
pub use crate::source::url::expand as expand_braces;
pub use group::IndexedSample;
pub use index::{INDEX_FORMAT, SIDECAR_SUFFIX, ShardIndex};
pub use write::ShardWriter;

use super::blocking::block_on_own_thread;
use super::error::{Result, SourceError};
use super::extensions::{compressed_tar, is_parquet, is_tar};
use super::format::{About, Fit, Format, Probe};
use super::index::{CLASSES_FILE, Dataset};
pub use crate::source::format::Progress;
use loader_scheduler::Label;

use super::index::{Item, Member, ShardLayout};

/// Where a sample's label comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelSource {
    /// An integer in the member with this suffix (WebDataset's `.cls`).
    Integer(String),
    /// A class name in the member with this suffix, mapped through `classes`.
    ClassName {
        /// The suffix, e.g. `txt`.
        suffix: String,
        /// The class names; a sample's label is its name's index.
        classes: Vec<String>,
    },
    /// No label: every sample is labelled -1.
    None,
}

/// How WebDataset shards become a [`Dataset`].
#[derive(Clone)]
pub struct WebDataset {
    image_suffixes: Vec<String>,
    /// The members a sample carries beside its main one, each field's alternatives;
    /// `None`: every other member.
    members: Option<Vec<Vec<String>>>,
    label: LabelSource,
    chunk_bytes: u64,
    cache_dir: Option<PathBuf>,
    sidecars: bool,
    concurrency: usize,
    scan_block: u64,
    progress: Option<Progress>,
}

impl std::fmt::Debug for WebDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebDataset")
            .field("image_suffixes", &self.image_suffixes)
            .field("members", &self.members)
            .field("label", &self.label)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl Default for WebDataset {
    fn default() -> Self {
        Self::new()
    }
}

/// Default of [`WebDataset::chunk_bytes`]: large enough that a request's round trip is a
/// small part of its transfer, small enough that a shuffle buffer of a few chunks is cheap.
pub const DEFAULT_CHUNK_BYTES: u64 = 4 << 20;

impl WebDataset {
    /// Images from `.jpg`, `.jpeg` or `.png`, labels from `.cls`, 4 MiB chunks, indexes
    /// cached under [`default_cache_dir`], 8 shards indexed at a time.
    pub fn new() -> Self {
        Self {
            image_suffixes: ["jpg", "jpeg", "png"].map(String::from).to_vec(),
            members: None,
            label: LabelSource::Integer("cls".into()),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            cache_dir: default_cache_dir(),
            sidecars: true,
            concurrency: 8,
            scan_block: 8 << 20,
            progress: None,
        }
    }

    /// The suffixes of the image member, tried in this order (exact, lowercase), e.g.
    /// `["input.jpg"]` for members named `0001.input.jpg`.
    pub fn image_suffixes<S: Into<String>>(
        mut self,
        suffixes: impl IntoIterator<Item = S>,
    ) -> Self {
        self.image_suffixes = suffixes.into_iter().map(Into::into).collect();
        self
    }

    /// A sample's parts as WebDataset's `to_tuple` names them: each field a member suffix
    /// (`"json"`) or alternatives (`"jpg;png"`, the first found is taken). The first
    /// field's member is the sample's main bytes (what the image pipeline decodes, or any
    /// bytes a stage of one's own reads); the others, and only they, ride beside it as
    /// its members, in field order. A sample without a member for every field is an error
    /// naming it, when the shards are indexed, not a sample silently dropped. No label is
    /// read unless [`label`](Self::label) says where from.
    ///
    /// ```
    /// # use loader_core::webdataset::WebDataset;
    /// let audio = WebDataset::new().fields(["flac;wav", "json"]);
    /// ```
    pub fn fields<S: AsRef<str>>(mut self, fields: impl IntoIterator<Item = S>) -> Self {
        let mut fields = fields.into_iter().map(|f| {
            f.as_ref()
                .split(';')
                .map(|s| s.trim().to_lowercase())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        });
        self.image_suffixes = fields.next().unwrap_or_default();
        self.members = Some(fields.collect());
        self.label = LabelSource::None;
        self
    }

    /// Where labels come from (default: the integer in `.cls`).
    pub fn label(mut self, label: LabelSource) -> Self {
        self.label = label;
        self
    }

    /// Samples read together in one request in shard-local order, at least this many bytes
    /// (a sample larger than it is a chunk of its own).
    pub fn chunk_bytes(mut self, bytes: u64) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Keep built indexes in `dir` (`None`: nowhere, every run scans the shards).
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Whether to look for sidecar indexes next to the shards (default yes).
    pub fn sidecars(mut self, use_them: bool) -> Self {
        self.sidecars = use_them;
        self
    }

    /// Shards indexed at the same time.
    pub fn concurrency(mut self, shards: usize) -> Self {
        self.concurrency = shards.max(1);
        self
    }

    /// Report indexing progress.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The dataset in the shards named by `url`: a brace list or one `.tar`
    /// (`s3://bucket/train-{000000..000127}.tar`), or a prefix holding `.tar` files.
    pub async fn load_url(
        &self,
        url: &str,
        options: impl IntoIterator<Item = (impl AsRef<str>, impl Into<String>)>,
    ) -> Result<(DynStorage, Dataset)> {
        let (store, metas) = self.resolve_url(url, options).await?;
        let stacked = crate::LoaderOptions::default().request_stack(Arc::clone(&store));
        let dataset = self.load_metas(&stacked, metas).await?;
        Ok((store, dataset))
    }

    /// [`WebDataset::load_url`] for synchronous callers.
    pub fn load_url_blocking(
        &self,
        url: &str,
        options: impl IntoIterator<Item = (impl AsRef<str>, impl Into<String>)> + Send,
    ) -> Result<(DynStorage, Dataset)> {
        block_on_own_thread(|| self.load_url(url, options))
    }

    /// The dataset in `shards` (keys of `store`).
    pub async fn load(&self, store: &DynStorage, shards: &[String]) -> Result<Dataset> {
        let metas = self.heads(store, shards).await?;
        self.load_metas(store, metas).await
    }

    /// [`WebDataset::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, shards: &[String]) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, shards))
    }

    async fn heads(&self, store: &DynStorage, keys: &[String]) -> Result<Vec<ObjectMeta>> {
        super::index::heads(store, keys, self.concurrency * 4).await
    }

    /// The dataset in the shards `metas` describe (size and version, from a listing or
    /// HEAD), in that order.
    pub async fn load_metas(&self, store: &DynStorage, metas: Vec<ObjectMeta>) -> Result<Dataset> {
        let indexes = self.indexes(store, metas).await?;
        self.dataset(store.name(), indexes)
    }

    /// [`WebDataset::load_metas`] for synchronous callers.
    pub fn load_metas_blocking(
        &self,
        store: &DynStorage,
        metas: Vec<ObjectMeta>,
    ) -> Result<Dataset> {
        block_on_own_thread(|| self.load_metas(store, metas))
    }

    /// The index of every shard `metas` describe, in that order, [`WebDataset::concurrency`]
    /// at a time, reporting progress.
    pub async fn indexes(
        &self,
        store: &DynStorage,
        metas: Vec<ObjectMeta>,
    ) -> Result<Vec<ShardIndex>> {
        let total = metas.len();
        let done = &std::sync::atomic::AtomicUsize::new(0);
        let cancel = &Arc::new(AtomicBool::new(false));
        let mut indexes = futures::stream::iter(metas)
            .map(|meta| async move {
                if cancel.load(Ordering::Acquire) {
                    return None;
                }
                let index = self.index_cancellable(store, &meta, cancel).await;
                if index.is_err() {
                    // At once: the stream yields in order, after the scans before this one.
                    cancel.store(true, Ordering::Release);
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(progress) = &self.progress {
                    progress(n, total);
                }
                Some(index)
            })
            .buffered(self.concurrency);
        // On the first failure the other scans are told to stop and are waited for: a scan
        // runs on a blocking thread that reads through the caller's runtime, and returning
        // (so that a caller may drop that runtime) while one still reads would panic it.
        let mut out = Vec::with_capacity(total);
        let mut failed = None;
        while let Some(index) = indexes.next().await {
            match index {
                Some(Ok(index)) => out.push(index),
                Some(Err(e)) => {
                    cancel.store(true, Ordering::Release);
                    failed.get_or_insert(e);
                }
                None => {}
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The shards `url` names (see [`WebDataset::load_url`]): the store at its root and
    /// each shard's size and version.
    pub async fn resolve_url(
        &self,
        url: &str,
        options: impl IntoIterator<Item = (impl AsRef<str>, impl Into<String>)>,
    ) -> Result<(DynStorage, Vec<ObjectMeta>)> {
        let (root, shards) = split_url(url)?;
        let store = loader_storage::from_url(&root, options)?;
        // Read behind the default request stack; the store is handed back bare, for a
        // loader that puts it behind its own.
        let stacked = crate::LoaderOptions::default().request_stack(Arc::clone(&store));
        let metas = self.resolve(&stacked, shards).await?;
        Ok((store, metas))
    }

    /// The metadata of `shards` on `store`, or of every `.tar` on it when `None`.
    pub async fn resolve(
        &self,
        store: &DynStorage,
        shards: Option<Vec<String>>,
    ) -> Result<Vec<ObjectMeta>> {
        match shards {
            Some(keys) => self.heads(store, &keys).await,
            None => list_shards(&**store, "").await,
        }
    }

    /// The index of the shard `meta` describes: its sidecar, else the cached one, else
    /// built by scanning the shard (and then cached). A stale one is never used.
    pub async fn index(&self, store: &DynStorage, meta: &ObjectMeta) -> Result<ShardIndex> {
        self.index_cancellable(store, meta, &Arc::new(AtomicBool::new(false)))
            .await
    }

    /// [`WebDataset::index`], whose scan stops at its next block once `cancel` is set.
    async fn index_cancellable(
        &self,
        store: &DynStorage,
        meta: &ObjectMeta,
        cancel: &Arc<AtomicBool>,
    ) -> Result<ShardIndex> {
        if meta.size == 0 {
            // Before any index: one cached from an earlier run would call it a shard of
            // no samples.
            return Err(SourceError::Corrupt {
                shard: meta.key.clone(),
                store: store.name().to_owned(),
                offset: 0,
                problem: "the shard is empty (0 bytes), as a failed upload leaves it".into(),
            });
        }
        if self.sidecars {
            let sidecar = format!("{}{SIDECAR_SUFFIX}", meta.key);
            match store.get(&sidecar).await {
                Ok(bytes) => {
                    if let Some(index) = ShardIndex::parse(&bytes).filter(|i| i.is_fresh_for(meta))
                    {
                        return Ok(index);
                    }
                }
                // No sidecar is the common case; an unreadable one is rebuilt locally.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(_) => {}
            }
        }
        let cached = self
            .cache_dir
            .as_ref()
            .map(|dir| index::cache_path(dir, store.name(), &meta.key));
        // File reads and writes on the blocking pool: shards are indexed concurrently on
        // the runtime, which a blocking read would stall.
        if let Some(path) = cached.clone()
            && let Ok(Some(index)) =
                tokio::task::spawn_blocking(move || index::read_cached(&path)).await
            && index.is_fresh_for(meta)
        {
            return Ok(index);
        }
        let index = self.scan_cancellable(store, meta, cancel).await?;
        if let Some(path) = cached {
            let json = index.to_json();
            // A cache that cannot be written (a read-only home) costs the next run a scan,
            // nothing else.
            let _ = tokio::task::spawn_blocking(move || write_atomically(&path, &json)).await;
        }
        Ok(index)
    }

    /// Build a shard's index by reading its headers (the whole shard, in large blocks).
    pub async fn scan(&self, store: &DynStorage, meta: &ObjectMeta) -> Result<ShardIndex> {
        self.scan_cancellable(store, meta, &Arc::new(AtomicBool::new(false)))
            .await
    }

    async fn scan_cancellable(
        &self,
        store: &DynStorage,
        meta: &ObjectMeta,
        cancel: &Arc<AtomicBool>,
    ) -> Result<ShardIndex> {
        let cancel = Arc::clone(cancel);
        let (store, key, size, block) = (
            Arc::clone(store),
            meta.key.clone(),
            meta.size,
            self.scan_block,
        );
        let runtime = tokio::runtime::Handle::current();
        let shard_error = |offset, problem| SourceError::Corrupt {
            shard: meta.key.clone(),
            store: store.name().to_owned(),
            offset,
            problem,
        };
        let scanned = {
            let (store, key) = (Arc::clone(&store), key.clone());
            tokio::task::spawn_blocking(move || {
                tar::scan_object(&*store, &key, size, block, &runtime, &cancel)
            })
            .await
        };
        let members = match scanned {
            Ok(Ok(members)) => members,
            Ok(Err(tar::ScanError::Storage(e))) => return Err(e.into()),
            Ok(Err(tar::ScanError::Corrupt { offset, problem })) => {
                return Err(shard_error(offset, problem));
            }
            Err(_) => return Err(SourceError::Panicked),
        };
        let samples = group::group(members).map_err(|e| SourceError::Sample {
            shard: key.clone(),
            store: store.name().to_owned(),
            key: e.key,
            offset: e.offset,
            problem: e.problem,
        })?;
        Ok(ShardIndex {
            format: INDEX_FORMAT.into(),
            shard: key,
            size,
            version: meta.version.clone(),
            samples,
        })
    }

    /// Items, labels and chunks from the shards' indexes.
    fn dataset(&self, store: &str, indexes: Vec<ShardIndex>) -> Result<Dataset> {
        if self.image_suffixes.is_empty() || self.members.iter().flatten().any(Vec::is_empty) {
            return Err(SourceError::Invalid(
                "a WebDataset field names no member suffix (give e.g. \"jpg;png\" or \"json\")"
                    .into(),
            ));
        }
        let mut items = Vec::new();
        let mut layouts = Vec::with_capacity(indexes.len());
        for index in &indexes {
            let key: Arc<str> = index.shard.as_str().into();
            let first = items.len();
            for sample in &index.samples {
                items.push(self.item(store, &key, sample)?);
            }
            layouts.push(ShardLayout {
                key,
                chunks: self.chunks(&items[first..], first),
            });
        }
        let classes = match &self.label {
            LabelSource::ClassName { classes, .. } => classes.clone(),
            _ => Vec::new(),
        };
        let objects = indexes
            .iter()
            .map(|index| ObjectMeta {
                key: index.shard.clone(),
                size: index.size,
                version: index.version.clone(),
            })
            .collect();
        let dataset = Dataset::from_shards(items, classes, layouts)?.with_objects(objects);
        Ok(match self.label {
            LabelSource::None => dataset.without_labels(),
            _ => dataset,
        })
    }

    /// Consecutive samples in runs of at least `chunk_bytes`.
    fn chunks(&self, items: &[Item], first: usize) -> Vec<std::ops::Range<usize>> {
        let mut chunks = Vec::new();
        let mut start = 0;
        let mut from = None;
        for (i, item) in items.iter().enumerate() {
            let span = item.span().unwrap_or(0..0);
            let begin = *from.get_or_insert(span.start);
            if span.end.saturating_sub(begin) >= self.chunk_bytes {
                chunks.push(first + start..first + i + 1);
                start = i + 1;
                from = None;
            }
        }
        if start < items.len() {
            chunks.push(first + start..first + items.len());
        }
        chunks
    }

    fn item(&self, store: &str, shard: &Arc<str>, sample: &IndexedSample) -> Result<Item> {
        let bad = |problem: String| -> SourceError {
            SourceError::Sample {
                shard: shard.to_string(),
                store: store.to_owned(),
                key: sample.key.clone(),
                offset: sample.offset,
                problem,
            }
        };
        let suffixes = || {
            sample
                .members
                .iter()
                .map(|(s, _, _)| format!(".{s}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let image = self
            .image_suffixes
            .iter()
            .find_map(|want| sample.members.iter().position(|(s, _, _)| s == want))
            .ok_or_else(|| {
                let what = if self.members.is_some() {
                    "main"
                } else {
                    "image"
                };
                bad(format!(
                    "no {what} member (looked for .{}); it has {}",
                    self.image_suffixes.join(", ."),
                    suffixes()
                ))
            })?;
        let text = |suffix: &str| {
            let has = sample.members.iter().any(|(s, _, _)| s == suffix);
            match sample.texts.iter().find(|(s, _)| s == suffix) {
                Some((_, t)) => Ok(t.trim()),
                None if has => Err(bad(format!(
                    "its .{suffix} member is not short UTF-8 text, so it cannot be a label"
                ))),
                None => Err(bad(format!(
                    "no .{suffix} member for its label; it has {}",
                    suffixes()
                ))),
            }
        };
        let label = match &self.label {
            LabelSource::None => Label::None,
            LabelSource::Integer(suffix) => {
                let t = text(suffix)?;
                Label::Class(t.parse::<i64>().map_err(|_| {
                    bad(format!("its .{suffix} member holds {t:?}, not an integer"))
                })?)
            }
            LabelSource::ClassName { suffix, classes } => {
                let t = text(suffix)?;
                Label::Class(classes.iter().position(|c| c == t).ok_or_else(|| {
                    bad(format!(
                        "class {t:?} is not one of the {} classes given",
                        classes.len()
                    ))
                })? as i64)
            }
        };
        let (_, data, size) = &sample.members[image];
        let member = |(s, d, n): &(String, u64, u64)| Member {
            name: s.as_str().into(),
            range: *d..d + n,
        };
        let members: Vec<Member> = match &self.members {
            None => sample
                .members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != image)
                .map(|(_, m)| member(m))
                .collect(),
            Some(fields) => fields
                .iter()
                .map(|field| {
                    field
                        .iter()
                        .find_map(|want| sample.members.iter().find(|(s, _, _)| s == want))
                        .map(member)
                        .ok_or_else(|| {
                            bad(format!(
                                "no .{} member; it has {}",
                                field.join(" or ."),
                                suffixes()
                            ))
                        })
                })
                .collect::<Result<_>>()?,
        };
        Ok(Item {
            key: Arc::clone(shard),
            range: Some(*data..data + size),
            label,
            name: Some(sample.key.as_str().into()),
            members: members.into(),
            record: None,
        })
    }
}

/// The samples of a tar shard held in memory (`name` names it in errors): its members
/// grouped as [`WebDataset`] groups them, with their offsets in `bytes`.
pub fn index_tar(name: &str, bytes: &[u8]) -> Result<Vec<IndexedSample>> {
    let size = bytes.len() as u64;
    let mut fetch = |start: u64, end: u64| {
        Ok(bytes::Bytes::copy_from_slice(
            &bytes[start as usize..(end.min(size)) as usize],
        ))
    };
    let mut reader = tar::BlockReader::new(&mut fetch, size, 1 << 20);
    let members = tar::scan(&mut reader, size).map_err(|e| match e {
        tar::ScanError::Corrupt { offset, problem } => SourceError::Corrupt {
            shard: name.to_owned(),
            store: "memory".into(),
            offset,
            problem,
        },
        tar::ScanError::Storage(e) => SourceError::Corrupt {
            shard: name.to_owned(),
            store: "memory".into(),
            offset: 0,
            problem: e.to_string(),
        },
    })?;
    group::group(members).map_err(|e| SourceError::Sample {
        shard: name.to_owned(),
        store: "memory".into(),
        key: e.key,
        offset: e.offset,
        problem: e.problem,
    })
}

/// Split a shard URL into the store's root and the shard keys, or `None` for "every
/// `.tar` under the root". Braces may stand anywhere after the last `/` before the first
/// brace: `s3://b/train-{000..009}.tar`, `/data/{a,b}/x.tar`.
pub fn split_url(url: &str) -> Result<(String, Option<Vec<String>>)> {
    let (root, keys) = super::url::split_named(url, |name| {
        is_tar(name) || compressed_tar(name).is_some() || is_parquet(name)
    })?;
    refuse_compressed(url, keys.iter().flatten())?;
    Ok((root, keys))
}

/// Refuses compressed shards named by `url`: samples are byte ranges of a shard, which a
/// compressed stream does not have.
fn refuse_compressed<'a>(url: &str, keys: impl IntoIterator<Item = &'a String>) -> Result<()> {
    match keys.into_iter().find_map(|k| compressed_tar(k)) {
        Some(suffix) => Err(SourceError::List(
            loader_storage::redact(url),
            compressed_problem(suffix),
        )),
        None => Ok(()),
    }
}

pub(crate) fn compressed_problem(suffix: &str) -> String {
    format!(
        "{suffix} shards are compressed, and loader reads samples by byte ranges, which a \
         compressed stream does not allow; decompress them into .tar shards (e.g. `gunzip -k`, \
         `zstd -d`): they stay WebDataset shards"
    )
}

/// The `.tar` objects under `prefix`, sorted by key.
pub async fn list_shards(store: &dyn Storage, prefix: &str) -> Result<Vec<ObjectMeta>> {
    let listed = store.list_all(prefix).await?;
    let shards = shards_of(&listed);
    if shards.is_empty() {
        return Err(no_shards(&format!("{}/{prefix}", store.name()), &listed));
    }
    Ok(shards)
}

/// Why a listing holds no shards to read: compressed ones, or none at all.
fn no_shards(listed_at: &str, listed: &[ObjectMeta]) -> SourceError {
    let problem = match compressed_among(listed) {
        Some(suffix) => compressed_problem(suffix),
        None => "no .tar files there".into(),
    };
    SourceError::List(listed_at.to_owned(), problem)
}

/// The compressed-tar suffix of the first such object of a listing: a listing of
/// compressed shards is not an ImageFolder nor a set of shards to read.
pub(crate) fn compressed_among(listed: &[ObjectMeta]) -> Option<&'static str> {
    listed.iter().find_map(|m| compressed_tar(&m.key))
}

/// The `.tar` objects of a listing, sorted by key.
pub fn shards_of(listed: &[ObjectMeta]) -> Vec<ObjectMeta> {
    let mut shards: Vec<ObjectMeta> = listed.iter().filter(|m| is_tar(&m.key)).cloned().collect();
    shards.sort();
    shards
}

#[async_trait(?Send)]
impl Format for WebDataset {
    fn about(&self) -> About {
        About::new("webdataset", "WebDataset shards").reads(&["fields"])
    }

    fn names(&self, name: &str) -> bool {
        is_tar(name) || compressed_tar(name).is_some()
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        if let Some(keys) = probe.named() {
            // A brace list of no known suffix is read as shards, as it always was, unless
            // a format names its files.
            return Ok(if keys.iter().any(|k| self.names(k)) {
                Some(Fit::Named)
            } else {
                (!keys.iter().all(|k| is_parquet(k))).then_some(Fit::Fallback)
            });
        }
        let holds = probe.holds().await?.unwrap_or_default();
        // Compressed shards are ours to refuse, when nothing else there is a dataset.
        let ours =
            holds.shards || (holds.compressed && !holds.images && !holds.parquet && !holds.index);
        Ok(ours.then_some(Fit::Listed))
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let mut shards = self.clone();
        if let Some(fields) = &probe.options().fields {
            shards = shards.fields(fields);
        }
        if let Some(progress) = probe.progress() {
            shards = shards.progress(Arc::clone(progress));
        }
        let store = probe.store();
        let Some(listed) = probe.listed().await? else {
            let keys = probe.named().unwrap_or_default();
            refuse_compressed(probe.url(), keys)?;
            return shards.load(store, keys).await;
        };
        let metas = shards_of(listed);
        if metas.is_empty() {
            return Err(no_shards(store.name(), listed));
        }
        let dataset = shards.load_metas(store, metas).await?;
        // The class names `loader pack` writes beside the shards it packs.
        if listed.iter().any(|m| m.key == CLASSES_FILE)
            && dataset.classes().is_empty()
            && dataset.has_labels()
        {
            let text = probe.read(CLASSES_FILE).await?;
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
