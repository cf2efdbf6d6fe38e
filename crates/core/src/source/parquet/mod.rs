//! Parquet files as a dataset, the layout of Hugging Face's image datasets among others:
//! an image column (binary, or `datasets`' struct of `bytes` and `path`) and an optional
//! label column (integers, `ClassLabel` names from the file's metadata, or class-name
//! strings). A sample is a row; the engine reads the image column a page at a time (one
//! ranged GET per page, the page decoded once for all its rows), never whole row groups,
//! when the file has an offset index.
//!
//! Opening reads each file's footer and offset index (one GET from its end, usually), its
//! label column and any member columns (`members`), and keeps what it read in the local
//! cache directory for the next open of the same file (`cache`); images are read as samples
//! are loaded. A row whose image is only a path is read as the object it names (`paths`).
//!
//! Files whose rows hold token ids (`input_ids`) are a token dataset (`tokens`): each row a
//! document, read in blocks of `source.block_size` tokens. `memory` reads a file held in
//! memory as the loader would, for fuzzing.

mod cache;
mod columns;
mod footer;
mod members;
mod memory;
mod page_header;
mod pages;
mod paths;
mod tokens;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use loader_scheduler::{Label, RecordOf};
use loader_storage::{DynStorage, ObjectMeta, Storage};
use parquet::file::metadata::ParquetMetaData;

use super::blocking::block_on_own_thread;
use super::columns::ColumnNames;
use super::error::{Result, SourceError};
use super::format::{About, Fit, Format, Probe};
use super::index::{Dataset, Item, ShardLayout};
use columns::{Columns, LabelValues, Value};
use footer::FooterError;
use pages::{Cut, ImageColumn};

/// Whether what an open reads of a file is kept in the cache for the next open: its footer
/// and small columns are, images (read to tell path rows from embedded ones) are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    Yes,
    No,
}

/// A file being opened: what its errors name, and how its spans are read.
struct Opening<'a, F> {
    /// The store's name.
    store: &'a str,
    meta: &'a ObjectMeta,
    fetch: &'a F,
}

impl<F, Fut> Opening<'_, F>
where
    F: Fn(std::ops::Range<u64>, Keep) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, FooterError>>,
{
    /// What is wrong with the file.
    fn problem(&self, problem: String) -> SourceError {
        SourceError::Parquet {
            file: self.meta.key.clone(),
            store: self.store.to_owned(),
            problem,
        }
    }

    /// Why a span could not be read: the store's error, or the file's.
    fn failed(&self, e: FooterError) -> SourceError {
        failed(e, |p| self.problem(p))
    }

    /// Leaf `column`'s chunk in row group `rg`, whole, checked against the file.
    async fn chunk(
        &self,
        footer: &ParquetMetaData,
        rg: usize,
        column: usize,
        keep: Keep,
    ) -> Result<bytes::Bytes> {
        let range = footer::chunk_span(footer.row_group(rg).column(column), self.meta.size)
            .map_err(|e| self.problem(format!("row group {rg}: {e}")))?;
        (self.fetch)(range, keep).await.map_err(|e| self.failed(e))
    }
}

pub use super::extensions::is_parquet;
pub use write::{ImageRow, ImageWriter, features, writer_properties};

/// How Parquet files become a [`Dataset`]: which columns hold the images and labels.
#[derive(Debug, Clone)]
pub struct Parquet {
    columns: ColumnNames,
    members: Vec<String>,
    concurrency: usize,
    cache_dir: Option<PathBuf>,
}

impl Default for Parquet {
    fn default() -> Self {
        Self::new()
    }
}

/// One file as opened: its metadata, columns, units and label values.
struct Opened {
    meta: ObjectMeta,
    footer: Arc<ParquetMetaData>,
    columns: Columns,
    units: Vec<pages::Unit>,
    cut: Cut,
    /// Every row's label value, row group by row group.
    labels: Vec<Value>,
    /// Row of the file each row group starts at.
    group_starts: Vec<u64>,
    /// Rows whose image is another object (a path, no bytes): its key, by row of the file.
    external: BTreeMap<u64, String>,
    /// Row groups that mix both kinds of row, whose image column was read at open.
    mixed: usize,
    /// The member columns' values, by row of the file.
    members: Vec<(Arc<str>, Vec<Option<bytes::Bytes>>)>,
}

impl Parquet {
    /// Images from the first column named `image`, `img`, `jpg`, `jpeg`, `png` or `webp`
    /// (or its `bytes` field), labels from `label` or `cls` when present; 8 files opened
    /// at a time, what they read at open cached under
    /// [`default_cache_dir`](crate::webdataset::default_cache_dir).
    pub fn new() -> Self {
        Self {
            columns: ColumnNames::default(),
            members: Vec::new(),
            concurrency: 8,
            cache_dir: super::local_cache::default_cache_dir(),
        }
    }

    /// Where what opening a file reads (footer, offset index, label column) is kept for
    /// the next open of the same file, by size and version; `None`: read at every open.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// The column holding the images: binary, or a struct with a binary `bytes` field.
    pub fn image_column(mut self, name: impl Into<String>) -> Self {
        self.columns.image = Some(name.into());
        self
    }

    /// Other columns handed to the CPU stage as each sample's members
    /// (`SampleInfo::members`, by column name): binary and string values as stored, numbers
    /// and booleans as text; a null is no member. Read when the files are opened and held
    /// for the run (at most 1 GiB in all), for columns of one value per row.
    pub fn member_columns<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.members = names.into_iter().map(Into::into).collect();
        self
    }

    /// The column holding the labels (integers or class-name strings); `""` for none, so
    /// every sample is unlabelled.
    pub fn label_column(mut self, name: impl Into<String>) -> Self {
        self.columns.label = Some(name.into());
        self
    }

    /// The dataset in `files` (keys of `store`, each a Parquet file), in that order.
    pub async fn load(&self, store: &DynStorage, files: &[String]) -> Result<Dataset> {
        let metas = super::index::heads(store, files, self.concurrency * 4).await?;
        self.load_metas(store, metas).await
    }

    /// [`Parquet::load`] for synchronous callers.
    pub fn load_blocking(&self, store: &DynStorage, files: &[String]) -> Result<Dataset> {
        block_on_own_thread(|| self.load(store, files))
    }

    /// The dataset in the files `metas` describe (size and version, from a listing or
    /// HEAD), in that order.
    pub async fn load_metas(&self, store: &DynStorage, metas: Vec<ObjectMeta>) -> Result<Dataset> {
        if metas.is_empty() {
            return Err(SourceError::Invalid(format!(
                "no Parquet files to read on {}",
                store.name()
            )));
        }
        let held = &AtomicU64::new(0);
        let opened: Vec<Opened> = futures::stream::iter(metas)
            .map(|meta| async move { self.open_file(&**store, store.name(), meta, held).await })
            .buffered(self.concurrency)
            .try_collect()
            .await?;
        dataset(store.name(), opened)
    }

    /// [`Parquet::load_metas`] for synchronous callers.
    pub fn load_metas_blocking(
        &self,
        store: &DynStorage,
        metas: Vec<ObjectMeta>,
    ) -> Result<Dataset> {
        block_on_own_thread(|| self.load_metas(store, metas))
    }

    async fn open_file(
        &self,
        store: &dyn Storage,
        name: &str,
        meta: ObjectMeta,
        members_held: &AtomicU64,
    ) -> Result<Opened> {
        let cached = self.cached_spans(name, &meta).await;
        let (key, version) = (meta.key.clone(), meta.version.clone());
        let fetch = |range: std::ops::Range<u64>, keep: Keep| {
            read_span(
                store,
                &key,
                version.as_deref(),
                cached.as_deref(),
                range,
                keep,
            )
        };
        let opened = self.open_with(name, meta, fetch, members_held).await?;
        // Paths are read beside the file, where `datasets` wrote them relative to where it
        // ran: a first row whose image is not there says so now, not at the first batch.
        if let Some((row, key)) = opened.external.iter().next() {
            match store.head(key).await {
                Err(e) if e.kind() == loader_storage::ErrorKind::NotFound => {
                    return Err(SourceError::Parquet {
                        file: opened.meta.key.clone(),
                        store: name.to_owned(),
                        problem: format!(
                            "row {row}: its image's path, read beside the file, is {key:?}, \
                             which is not on the store: relative paths are read from the \
                             Parquet file's folder (write them relative to it, or embed the \
                             images)"
                        ),
                    });
                }
                Err(e) => return Err(SourceError::Storage(e)),
                Ok(_) => {}
            }
        }
        save_spans(cached).await;
        Ok(opened)
    }

    /// What the last open of the file `meta` describes kept in the cache directory (its
    /// footer, small columns), if there is one. Cache files are read on the blocking pool:
    /// files are opened concurrently on the runtime, which a blocking read would stall.
    async fn cached_spans(&self, name: &str, meta: &ObjectMeta) -> Option<Arc<cache::Spans>> {
        let dir = self.cache_dir.clone()?;
        let (name, meta) = (name.to_owned(), meta.clone());
        tokio::task::spawn_blocking(move || cache::Spans::load(&dir, &name, &meta))
            .await
            .ok()
            .flatten()
            .map(Arc::new)
    }

    /// Opens the file `meta` describes, on the store called `name`, reading its spans
    /// with `fetch`; `members_held` counts the member bytes held for the whole dataset.
    async fn open_with<F, Fut>(
        &self,
        name: &str,
        meta: ObjectMeta,
        fetch: F,
        members_held: &AtomicU64,
    ) -> Result<Opened>
    where
        F: Fn(std::ops::Range<u64>, Keep) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, FooterError>>,
    {
        let file = Opening {
            store: name,
            meta: &meta,
            fetch: &fetch,
        };
        let problem = |problem| file.problem(problem);
        let footer = footer::read_metadata(meta.size, |range| fetch(range, Keep::Yes))
            .await
            .map_err(|e| file.failed(e))?;
        let schema = footer.file_metadata().schema_descr();
        let columns = columns::choose(
            schema,
            self.columns.image.as_deref(),
            self.columns.label.as_deref(),
        )
        .map_err(
            |p| match tokens::choose(schema, self.columns.tokens.as_deref()) {
                // Token ids and no images: the user has a token dataset.
                Ok(_) if self.columns.image.is_none() => problem(format!(
                    "its rows hold token ids ({p}): they are read in blocks of tokens; set \
                 source.block_size to the tokens a row trains on (Python: block_size=, \
                 loader run: --block-size)"
                )),
                _ => problem(p),
            },
        )?;
        let (units, cut) = pages::units(&footer, columns.image, meta.size).map_err(problem)?;
        let mut group_starts = Vec::with_capacity(footer.num_row_groups());
        let mut rows = 0u64;
        for (rg, group) in footer.row_groups().iter().enumerate() {
            group_starts.push(rows);
            let n = u64::try_from(group.num_rows())
                .map_err(|_| problem(format!("row group {rg} has a negative row count")))?;
            rows = rows.saturating_add(n);
        }
        // A row of an image dataset takes at least a byte: a footer claiming more rows
        // than the file has bytes is not trusted with an item per row.
        if rows > meta.size {
            return Err(problem(format!(
                "its footer claims {rows} rows in a file of {} bytes",
                meta.size
            )));
        }
        let mut labels = Vec::new();
        if let Some((label, _)) = columns.label {
            let (file, footer) = (&file, &footer);
            // The label column is small: each row group's chunk in one GET, a few at a time.
            let read: Vec<Vec<Value>> =
                futures::stream::iter(footer.row_groups().iter().enumerate())
                    .map(|(rg, group)| async move {
                        let bytes = file.chunk(footer, rg, label, Keep::Yes).await?;
                        columns::read_values(file.meta.size, group, label, bytes).map_err(|cause| {
                            file.problem(format!("row group {rg}, label column: {cause}"))
                        })
                    })
                    .buffered(4)
                    .try_collect()
                    .await?;
            labels = read.concat();
        }
        let (external, mixed) =
            match paths::path_leaf(footer.file_metadata().schema_descr(), columns.image) {
                Some(leaf) => {
                    external_rows(&file, &footer, columns.image, leaf, &group_starts).await?
                }
                None => (BTreeMap::new(), 0),
            };
        if !self.members.is_empty() && !external.is_empty() {
            return Err(problem(format!(
                "member columns are not handed with rows whose image is a path (row {} \
                 and {} more): leave out the member columns, or embed the images",
                external.keys().next().copied().unwrap_or_default(),
                external.len() - 1
            )));
        }
        let members = self
            .read_members(&file, &footer, &columns, members_held)
            .await?;
        Ok(Opened {
            members,
            external,
            mixed,
            footer: Arc::new(footer),
            meta,
            columns,
            units,
            cut,
            labels,
            group_starts,
        })
    }

    /// The member columns' values in the file `meta` describes, row group by row group.
    async fn read_members<F, Fut>(
        &self,
        file: &Opening<'_, F>,
        footer: &ParquetMetaData,
        columns: &Columns,
        held: &AtomicU64,
    ) -> Result<Vec<(Arc<str>, Vec<Option<bytes::Bytes>>)>>
    where
        F: Fn(std::ops::Range<u64>, Keep) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, FooterError>>,
    {
        if self.members.is_empty() {
            return Ok(Vec::new());
        }
        let problem = |problem| file.problem(problem);
        let schema = footer.file_metadata().schema_descr();
        let mut taken = vec![columns.image];
        taken.extend(columns.label.map(|(leaf, _)| leaf));
        taken.extend(paths::path_leaf(schema, columns.image));
        let leaves = members::choose(schema, &self.members, &taken).map_err(problem)?;
        let mut out = Vec::with_capacity(leaves.len());
        for (column, leaf) in self.members.iter().zip(leaves) {
            let mut values = Vec::new();
            for (rg, group) in footer.row_groups().iter().enumerate() {
                let bytes = file.chunk(footer, rg, leaf, Keep::Yes).await?;
                let read = members::read(file.meta.size, group, leaf, bytes).map_err(|cause| {
                    problem(format!("row group {rg}, member column {column:?}: {cause}"))
                })?;
                // A value's bytes and what holding it costs, a null's too.
                let cost: u64 = read
                    .iter()
                    .map(|v| v.as_ref().map_or(0, |b| b.len()) as u64 + 32)
                    .sum();
                if held.fetch_add(cost, Ordering::Relaxed) + cost > members::MAX_MEMBER_BYTES {
                    return Err(problem(format!(
                        "the dataset's member columns hold more than {} MiB, held in memory \
                         for the run: name fewer or smaller columns",
                        members::MAX_MEMBER_BYTES >> 20
                    )));
                }
                values.extend(read);
            }
            out.push((Arc::from(column.as_str()), values));
        }
        Ok(out)
    }
}

/// The span `range` of the file at `key`: from the cache when it holds it, else from the
/// store (at `version`), then kept for the next open when `keep` says so.
async fn read_span(
    store: &dyn Storage,
    key: &str,
    version: Option<&str>,
    cached: Option<&cache::Spans>,
    range: std::ops::Range<u64>,
    keep: Keep,
) -> std::result::Result<bytes::Bytes, FooterError> {
    if let Some(bytes) = cached.and_then(|c| c.get(&range)) {
        return Ok(bytes);
    }
    let bytes = footer::get(store, key, range.clone(), version).await?;
    if let (Some(c), Keep::Yes) = (cached, keep) {
        c.put(range, bytes.clone());
    }
    Ok(bytes)
}

/// Writes what an open kept to the cache directory, on the blocking pool.
async fn save_spans(cached: Option<Arc<cache::Spans>>) {
    if let Some(c) = cached {
        let _ = tokio::task::spawn_blocking(move || c.save()).await;
    }
}

/// Why a span could not be read: the store's error, or the file's (`problem` names it).
fn failed(e: FooterError, problem: impl Fn(String) -> SourceError) -> SourceError {
    match e {
        FooterError::Storage(e) => SourceError::Storage(e),
        FooterError::Parquet(e) => problem(e.to_string()),
    }
}

/// The classes of the files' labels: Hugging Face's `ClassLabel` names (the same in every
/// file), the sorted names of string labels, or none for plain integers.
fn classes(store: &str, files: &[Opened]) -> Result<(Vec<String>, Option<LabelValues>)> {
    let kinds: BTreeSet<_> = files
        .iter()
        .map(|f| f.columns.label.map(|(_, k)| k))
        .collect();
    if kinds.len() > 1 {
        return Err(SourceError::Invalid(format!(
            "the Parquet files on {store} do not agree on their label column: some have \
             integers, some class names, some none"
        )));
    }
    let kind = kinds.into_iter().next().flatten();
    match kind {
        None => Ok((Vec::new(), None)),
        Some(LabelValues::Integer) => {
            let mut names: Option<(&str, Vec<String>)> = None;
            for f in files {
                let column = f.columns.label_name.as_deref().unwrap_or_default();
                let found = columns::class_label_names(&f.footer, column);
                match (&names, found) {
                    (None, Some(n)) => names = Some((&f.meta.key, n)),
                    (Some((first, n)), Some(m)) if *n != m => {
                        return Err(SourceError::Invalid(format!(
                            "Parquet files {first:?} and {:?} on {store} name different classes",
                            f.meta.key
                        )));
                    }
                    _ => {}
                }
            }
            Ok((names.map(|(_, n)| n).unwrap_or_default(), kind))
        }
        Some(LabelValues::Name) => {
            let names: BTreeSet<&str> = files
                .iter()
                .flat_map(|f| f.labels.iter())
                .filter_map(|v| match v {
                    Value::Name(n) => Some(n.as_str()),
                    _ => None,
                })
                .collect();
            Ok((names.into_iter().map(str::to_owned).collect(), kind))
        }
    }
}

/// A row's name, unique in the dataset (what a batch's keys show): its file and its row
/// there (a path row's key is its image's, so the name is what says where it was listed).
fn row_name(file: &str, row: u64) -> Arc<str> {
    format!("{file} row {row}").into()
}

fn dataset(store: &str, files: Vec<Opened>) -> Result<Dataset> {
    let (classes, kind) = classes(store, &files)?;
    let index: std::collections::HashMap<&str, i64> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as i64))
        .collect();
    let mut items = Vec::new();
    let mut shards = Vec::with_capacity(files.len());
    let mut whole_chunks = Vec::new();
    for file in &files {
        let key: Arc<str> = file.meta.key.as_str().into();
        let column = Arc::new(ImageColumn::new(
            Arc::clone(&file.footer),
            file.columns.image,
            file.meta.size,
            file.units.clone(),
            pages::RowMembers {
                group_starts: file.group_starts.clone(),
                columns: file.members.clone(),
            },
        ));
        let records: Arc<dyn loader_scheduler::Records> = column;
        if file.cut == Cut::ColumnChunks {
            whole_chunks.push(file.meta.key.clone());
        }
        let mut chunks = Vec::with_capacity(file.units.len());
        for unit in &file.units {
            let mut first = items.len();
            for row in unit.rows.clone() {
                let in_file = file.group_starts[unit.row_group] + row;
                let label = match (kind, file.labels.get(in_file as usize)) {
                    (None, _) => Label::None,
                    (_, None | Some(Value::Null)) => Label::None,
                    (_, Some(Value::Name(n))) => {
                        Label::Class(index.get(n.as_str()).copied().unwrap_or(-1))
                    }
                    (_, Some(Value::Int(v))) => {
                        if !classes.is_empty() && (*v < -1 || *v >= classes.len() as i64) {
                            return Err(SourceError::Parquet {
                                file: file.meta.key.clone(),
                                store: store.to_owned(),
                                problem: format!(
                                    "row {in_file}: label {v} is not one of the file's {} \
                                     classes",
                                    classes.len()
                                ),
                            });
                        }
                        // Hugging Face's ClassLabel stores -1 for "no label".
                        if *v == -1 && !classes.is_empty() {
                            Label::None
                        } else {
                            Label::Class(*v)
                        }
                    }
                };
                let name = Some(row_name(&file.meta.key, in_file));
                if let Some(path) = file.external.get(&in_file) {
                    // Its own chunk, read whole: the page's rows around it stay chunks of
                    // the page.
                    if items.len() > first {
                        chunks.push(first..items.len());
                    }
                    items.push(Item {
                        key: path.as_str().into(),
                        label,
                        name,
                        ..Item::default()
                    });
                    chunks.push(items.len() - 1..items.len());
                    first = items.len();
                    continue;
                }
                items.push(Item {
                    key: Arc::clone(&key),
                    range: Some(unit.range.clone()),
                    label,
                    name,
                    members: Arc::default(),
                    record: Some(RecordOf {
                        records: Arc::clone(&records),
                        slot: u32::try_from(row - unit.rows.start).map_err(|_| {
                            SourceError::Invalid("a page of more than 2^32 rows".into())
                        })?,
                        shared: true,
                    }),
                });
            }
            if items.len() > first {
                chunks.push(first..items.len());
            }
        }
        shards.push(ShardLayout {
            key: Arc::clone(&key),
            chunks,
        });
    }
    if !whole_chunks.is_empty() {
        tracing::warn!(
            "{} of {} Parquet files on {store} have no offset index (e.g. {:?}): their images \
             are read a row group's column chunk at a time, not a page at a time; rewrite \
             them with an offset index (pyarrow: write_page_index=True) for page-sized reads",
            whole_chunks.len(),
            files.len(),
            whole_chunks[0]
        );
    }
    let mixed: usize = files.iter().map(|f| f.mixed).sum();
    if mixed > 0 {
        tracing::warn!(
            "{mixed} row groups of the Parquet files on {store} mix rows with embedded images \
             and rows with only a path: their image column was read whole at open to tell \
             which is which; embed every image (or none) for reads of the footer alone"
        );
    }
    let objects = files.iter().map(|f| f.meta.clone()).collect();
    let dataset = Dataset::from_shards(items, classes, shards)?.with_objects(objects);
    Ok(if kind.is_none() {
        dataset.without_labels()
    } else {
        dataset
    })
}

/// The rows of a file whose image is another object: Hugging Face's struct with a null
/// `bytes` and a `path`, by row of the file, resolved to keys of the store called `name`;
/// and how many row groups mix them with embedded images. Reads a row group's path column
/// when the image column's statistics do not say it has no nulls, and its image column
/// too when they do not say every row is null.
async fn external_rows<F, Fut>(
    file: &Opening<'_, F>,
    footer: &ParquetMetaData,
    image: usize,
    path: usize,
    group_starts: &[u64],
) -> Result<(BTreeMap<u64, String>, usize)>
where
    F: Fn(std::ops::Range<u64>, Keep) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, FooterError>>,
{
    let (meta, problem) = (file.meta, |problem| file.problem(problem));
    let root = paths::Root::of(file.store);
    let (mut external, mut mixed) = (BTreeMap::new(), 0);
    for (rg, group) in footer.row_groups().iter().enumerate() {
        let rows = u64::try_from(group.num_rows()).unwrap_or(0);
        let nulls = group
            .column(image)
            .statistics()
            .and_then(|s| s.null_count_opt());
        // Without a null count (a writer that keeps no statistics) the images are taken
        // to be embedded, as they nearly always are: telling would cost reading the image
        // column at open. A null image is then an error naming its row, when it is read.
        if rows == 0 || nulls.is_none_or(|n| n == 0) {
            continue;
        }
        let (paths, whole_nulls) = columns::read_paths(
            meta.size,
            group,
            path,
            file.chunk(footer, rg, path, Keep::Yes).await?,
        )
        .map_err(|cause| problem(format!("row group {rg}, image paths: {cause}")))?;
        // A row whose whole image struct is null has a null image too: when such rows are
        // all the nulls, no row is a path alone (a null image is an error when read).
        if nulls.is_some_and(|n| n <= whole_nulls) || paths.iter().all(Option::is_none) {
            continue;
        }
        let missing = if nulls == Some(rows) {
            vec![true; paths.len()]
        } else {
            // Not kept in the cache: a share of the images, read once to tell.
            columns::read_nulls(
                meta.size,
                group,
                image,
                file.chunk(footer, rg, image, Keep::No).await?,
            )
            .map_err(|cause| problem(format!("row group {rg}, image column: {cause}")))?
        };
        let before = external.len();
        for (row, (path, missing)) in paths.iter().zip(&missing).enumerate() {
            if let (Some(path), true) = (path, missing) {
                let in_file = group_starts[rg] + row as u64;
                let key = root
                    .resolve(&meta.key, path)
                    .map_err(|cause| problem(format!("row {in_file}: {cause}")))?;
                external.insert(in_file, key);
            }
        }
        if external.len() > before && external.len() - before < missing.len() {
            mixed += 1;
        }
    }
    Ok((external, mixed))
}

#[async_trait(?Send)]
impl Format for Parquet {
    fn about(&self) -> About {
        About::new("parquet", "Parquet files").reads(&[
            "image_column",
            "label_column",
            "member_columns",
            "token_column",
            "block_size",
            "keep_tail",
            "vocab_size",
        ])
    }

    fn names(&self, name: &str) -> bool {
        is_parquet(name)
    }

    async fn detect(&self, probe: &Probe<'_>) -> Result<Option<Fit>> {
        if let Some(keys) = probe.named() {
            return Ok(
                (!keys.is_empty() && keys.iter().all(|k| is_parquet(k))).then_some(Fit::Named)
            );
        }
        let holds = probe.holds().await?.unwrap_or_default();
        // Parquet beside images is a `datasets` imagefolder's metadata.parquet, not the
        // dataset; beside shards, their metadata (img2dataset writes both).
        Ok((holds.parquet && !holds.images && !holds.shards).then_some(Fit::Listed))
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let options = probe.options();
        let mut files = self.clone();
        files.columns = files.columns.with_options(options);
        if !options.member_columns.is_empty() {
            files.members.clone_from(&options.member_columns);
        }
        let store = probe.store();
        let blocking = options
            .blocking()
            .map_err(|e| SourceError::Invalid(e.to_string()))?;
        let Some(listed) = probe.listed().await? else {
            let named = probe.named().unwrap_or_default();
            return match blocking {
                Some(blocking) => {
                    let metas = super::index::heads(store, named, files.concurrency * 4).await?;
                    files
                        .load_tokens(store, metas, blocking, options.vocab_size)
                        .await
                }
                None => files.load(store, named).await,
            };
        };
        let mut metas: Vec<ObjectMeta> = listed
            .iter()
            .filter(|m| is_parquet(&m.key))
            .cloned()
            .collect();
        let folders: BTreeSet<&str> = metas
            .iter()
            .map(|m| m.key.rsplit_once('/').map_or("", |(dir, _)| dir))
            .collect();
        if folders.len() > 1 {
            // A Hub repository's train/ and validation/ read as one dataset would mix the
            // splits.
            let shown: Vec<String> = folders.iter().take(4).map(|f| format!("{f}/")).collect();
            return Err(SourceError::List(
                store.name().to_owned(),
                format!(
                    "Parquet files in {} folders ({}{}): give the URL of one split's folder, \
                     or a brace list of its files",
                    folders.len(),
                    shown.join(", "),
                    if folders.len() > 4 { ", ..." } else { "" }
                ),
            ));
        }
        metas.sort();
        match blocking {
            Some(blocking) => {
                files
                    .load_tokens(store, metas, blocking, options.vocab_size)
                    .await
            }
            None => files.load_metas(store, metas).await,
        }
    }
}
