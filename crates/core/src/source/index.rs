//! The sample index every source builds: where each sample's bytes are, what it carries,
//! and how shards lay samples out.

use std::ops::Range;
use std::sync::Arc;

use loader_scheduler::Label;
pub use loader_scheduler::Member;
use loader_storage::ObjectMeta;

use super::error::{Result, SourceError};
use crate::tokens::{Placement, TokenFiles};

/// The class names, one per line in index order, beside a dataset's shards (as `loader
/// pack` writes them).
pub const CLASSES_FILE: &str = "classes.txt";

/// The record `loader pack` keeps beside the shards it writes: its settings, its shards,
/// whether it is complete.
pub const PACK_FILE: &str = "pack.json";

/// One sample of a dataset: where its bytes are, and what it carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Item {
    /// The object holding it.
    pub key: Arc<str>,
    /// Its bytes within the object; `None` for the whole object.
    pub range: Option<Range<u64>>,
    /// Its label: a class, several, numbers, or none.
    pub label: Label,
    /// Its name within the object when the object holds many samples (WebDataset's key).
    pub name: Option<Arc<str>>,
    /// Its other parts stored beside it (WebDataset's `.cls`, `.json`, ...), handed to the
    /// CPU stage in `SampleInfo::members`.
    pub members: Arc<[Member]>,
    /// When `range` holds it encoded (a Parquet page): how the range decodes, and which
    /// record is this sample. `None`: `range` is its bytes.
    pub record: Option<loader_scheduler::RecordOf>,
}

impl Item {
    /// A sample that is a whole object.
    pub fn new(key: impl Into<Arc<str>>, label: impl Into<Label>) -> Self {
        Self {
            key: key.into(),
            label: label.into(),
            ..Self::default()
        }
    }

    /// A sample that is `range` of an object (e.g. from a manifest's offset and length).
    pub fn ranged(key: impl Into<Arc<str>>, range: Range<u64>, label: impl Into<Label>) -> Self {
        Self {
            range: Some(range),
            ..Self::new(key, label)
        }
    }
}

/// Where one shard's samples are in a dataset: its object, and the index ranges of its
/// chunks (neighbouring samples read with one request), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLayout {
    /// The shard's object.
    pub key: Arc<str>,
    /// Its samples' dataset indices, chunk by chunk.
    pub chunks: Vec<Range<usize>>,
}

impl ShardLayout {
    /// A shard whose samples, dataset indices from `first`, lie at `ranges` in order:
    /// neighbours grouped into chunks of at most about `bytes` (one sample at least).
    pub(crate) fn by_runs(key: Arc<str>, ranges: &[Range<u64>], first: usize, bytes: u64) -> Self {
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < ranges.len() {
            let mut end = start + 1;
            while end < ranges.len() && ranges[end].end.saturating_sub(ranges[start].start) <= bytes
            {
                end += 1;
            }
            chunks.push(first + start..first + end);
            start = end;
        }
        Self { key, chunks }
    }
}

/// The samples of a dataset, by index, and the class names when labels are classes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dataset {
    samples: Samples,
    classes: Arc<[String]>,
    shards: Arc<[ShardLayout]>,
    /// For sharded datasets: each item's chunk id, and each chunk's byte range and samples.
    chunk_of: Arc<[u32]>,
    chunk_spans: Arc<[Range<u64>]>,
    chunk_sizes: Arc<[u32]>,
    /// The objects read, as a listing or an index described them (size, version).
    objects: Arc<[ObjectMeta]>,
    /// Its source gives no labels (each sample's is -1).
    unlabelled: bool,
}

/// How a dataset holds its samples: a record each, or computed when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Samples {
    /// One record per sample, as listings and indexes give them.
    Listed(Arc<[Item]>),
    /// Blocks of token files: sample `i` is block `i`, its bytes found from the files'
    /// document lengths when asked (a corpus of 10^10 tokens would otherwise take a
    /// record per block). Each file `f` is a shard whose chunks are runs of
    /// `per_chunk[f]` blocks (all of them for a file read whole), chunk ids from
    /// `bases[f]`: found by arithmetic, not a table.
    Tokens {
        files: Arc<TokenFiles>,
        per_chunk: Arc<[u64]>,
        bases: Arc<[u32]>,
    },
}

impl Default for Samples {
    fn default() -> Self {
        Self::Listed(Arc::default())
    }
}

impl Dataset {
    /// From explicit items; `classes` may be empty when labels are plain integers.
    pub fn from_items(items: Vec<Item>, classes: Vec<String>) -> Self {
        Self {
            samples: Samples::Listed(items.into()),
            classes: classes.into(),
            ..Self::default()
        }
    }

    /// A dataset stored in shards: `items` laid out shard by shard as `shards` describe
    /// them, so a shard-local order can read each chunk with one request.
    pub fn from_shards(
        items: Vec<Item>,
        classes: Vec<String>,
        shards: Vec<ShardLayout>,
    ) -> Result<Self> {
        let mut chunk_of = vec![u32::MAX; items.len()];
        let mut placed = vec![false; items.len()];
        let mut spans = Vec::new();
        let mut sizes: Vec<u32> = Vec::new();
        for shard in &shards {
            // The shard's last chunk with a span, to join a piece of the same span to it.
            let mut last: Option<u32> = None;
            for chunk in &shard.chunks {
                // A sample stored outside its shard (a Parquet row whose image is another
                // object) is a chunk of its own, read whole: ordered with its shard, with
                // no span to share.
                if let (1, Some(item)) = (chunk.len(), items.get(chunk.start))
                    && item.key != shard.key
                    && item.span().is_none()
                    && item.record.is_none()
                    && !std::mem::replace(&mut placed[chunk.start], true)
                {
                    continue;
                }
                let id = u32::try_from(spans.len())
                    .map_err(|_| SourceError::Invalid("more than 2^32 chunks".into()))?;
                let mut span: Option<Range<u64>> = None;
                for i in chunk.clone() {
                    let item = items.get(i).filter(|it| it.key == shard.key);
                    let once = placed.get(i).is_some_and(|p| !p);
                    let (Some(item), true) = (item, once) else {
                        return Err(SourceError::Invalid(format!(
                            "sample {i} is not a sample of shard {:?} once",
                            shard.key
                        )));
                    };
                    let Some(s) = item.span() else {
                        return Err(SourceError::Invalid(format!(
                            "sample {i} of shard {:?} has no byte range",
                            shard.key
                        )));
                    };
                    chunk_of[i] = id;
                    placed[i] = true;
                    span = Some(match span {
                        Some(a) => a.start.min(s.start)..a.end.max(s.end),
                        None => s,
                    });
                }
                let span = span.unwrap_or(0..0);
                // A page split by rows read as objects of their own is one chunk again: the
                // engine keeps it until its last row, not its first piece's.
                if let Some(prev) = last
                    && spans.get(prev as usize) == Some(&span)
                {
                    for i in chunk.clone() {
                        chunk_of[i] = prev;
                    }
                    let size = &mut sizes[prev as usize];
                    *size = size.saturating_add(u32::try_from(chunk.len()).unwrap_or(u32::MAX));
                    continue;
                }
                spans.push(span);
                sizes.push(u32::try_from(chunk.len()).unwrap_or(u32::MAX));
                last = Some(id);
            }
        }
        Ok(Self {
            samples: Samples::Listed(items.into()),
            classes: classes.into(),
            shards: shards.into(),
            chunk_of: chunk_of.into(),
            chunk_spans: spans.into(),
            chunk_sizes: sizes.into(),
            objects: Arc::default(),
            unlabelled: false,
        })
    }

    /// The same dataset, knowing its objects as a listing or an index described them: a
    /// cache checks its entries against their sizes and versions instead of asking the
    /// store. Sources built from a listing or shard indexes set it.
    pub fn with_objects(mut self, objects: Vec<ObjectMeta>) -> Self {
        self.objects = objects.into();
        self
    }

    /// The same dataset, marked as one whose source gives no labels (each sample's label
    /// is -1), so a front end can refuse to hand out labels it does not have.
    pub fn without_labels(mut self) -> Self {
        self.unlabelled = true;
        self
    }

    /// The same dataset with `classes` as its class names (a `classes.txt` beside shards
    /// whose `.cls` are indices): refused when a sample's class is not one of them.
    pub fn with_classes(mut self, classes: Vec<String>) -> Result<Self> {
        if let Some(item) = self.records().unwrap_or_default().iter().find(|i| {
            matches!(i.label, Label::Class(c) if usize::try_from(c).map_or(true, |c| c >= classes.len()))
        }) {
            return Err(SourceError::Invalid(format!(
                "{} lists {} classes, but sample {:?} of {:?} is of class {:?}",
                CLASSES_FILE,
                classes.len(),
                item.name.as_deref().unwrap_or(""),
                item.key,
                item.label
            )));
        }
        self.classes = classes.into();
        Ok(self)
    }

    /// Whether its source gives labels (a folder's classes, a manifest's label column,
    /// shards' `.cls`), rather than none.
    pub fn has_labels(&self) -> bool {
        !self.unlabelled
    }

    /// The objects as the source saw them (empty for a manifest, which says nothing of them).
    pub fn objects(&self) -> &[ObjectMeta] {
        &self.objects
    }

    /// Its shards, when it is stored in shards (empty otherwise).
    pub fn shards(&self) -> &[ShardLayout] {
        &self.shards
    }

    /// The chunk sample `index` is read with: its id and byte range.
    pub(crate) fn chunk(&self, index: usize) -> Option<(u32, Range<u64>)> {
        let id = match &self.samples {
            Samples::Listed(_) => *self.chunk_of.get(index)?,
            Samples::Tokens {
                files,
                per_chunk,
                bases,
            } => {
                let (f, block) = files.locate(index as u64)?;
                bases.get(f)? + u32::try_from(block / per_chunk.get(f)?).ok()?
            }
        };
        Some((id, self.chunk_spans.get(id as usize)?.clone()))
    }

    /// Samples in chunk `id`.
    pub(crate) fn chunk_samples(&self, id: u32) -> usize {
        self.chunk_sizes.get(id as usize).map_or(0, |&n| n as usize)
    }

    /// From `(key, label)` pairs.
    pub fn from_pairs<K: Into<Arc<str>>>(pairs: impl IntoIterator<Item = (K, i64)>) -> Self {
        Self::from_items(
            pairs
                .into_iter()
                .map(|(key, label)| Item::new(key, label))
                .collect(),
            Vec::new(),
        )
    }

    /// The blocks of token `files` as samples, unlabelled: each block one ranged read of
    /// its file, computed when asked. Each file is a shard read in chunks of about 4 MiB of
    /// whole blocks, so the shard-local order reads a chunk's blocks with one request.
    pub fn from_tokens(files: TokenFiles) -> Result<Self> {
        let chunk_bytes = crate::tokens::CHUNK_BYTES;
        let (_, first) = &files.files()[0];
        let block_bytes = (first.blocking.row_len() + 1) * first.dtype.size();
        let (mut shards, mut spans, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        let mut bases = Vec::with_capacity(files.files().len());
        let mut per_chunks = Vec::with_capacity(files.files().len());
        for (f, (key, file)) in files.files().iter().enumerate() {
            bases.push(
                u32::try_from(spans.len())
                    .map_err(|_| SourceError::Invalid("more than 2^32 chunks".into()))?,
            );
            let (start, blocks) = (files.first_block(f), file.blocks());
            // An encoded file is read whole, once for all its blocks: one chunk.
            let per_chunk = match file.placement {
                Placement::Encoded(_) => blocks.max(1),
                _ => (chunk_bytes / block_bytes).max(1),
            };
            if u32::try_from(per_chunk).is_err() {
                return Err(SourceError::Invalid(format!(
                    "{key:?}: {blocks} blocks read whole, more than a chunk counts"
                )));
            }
            per_chunks.push(per_chunk);
            let mut chunks = Vec::new();
            for b in (0..blocks).step_by(per_chunk as usize) {
                let end = (b + per_chunk).min(blocks);
                spans.push(file.byte_range(b).start..file.byte_range(end - 1).end);
                sizes.push((end - b) as u32);
                chunks.push((start + b) as usize..(start + end) as usize);
            }
            shards.push(ShardLayout {
                key: Arc::clone(key),
                chunks,
            });
        }
        Ok(Self {
            samples: Samples::Tokens {
                files: Arc::new(files),
                per_chunk: per_chunks.into(),
                bases: bases.into(),
            },
            shards: shards.into(),
            chunk_spans: spans.into(),
            chunk_sizes: sizes.into(),
            unlabelled: true,
            ..Self::default()
        })
    }

    /// Its token files, when its samples are blocks of tokens.
    pub fn tokens(&self) -> Option<&Arc<TokenFiles>> {
        match &self.samples {
            Samples::Tokens { files, .. } => Some(files),
            Samples::Listed(_) => None,
        }
    }

    /// Samples in the dataset.
    pub fn len(&self) -> usize {
        match &self.samples {
            Samples::Listed(items) => items.len(),
            // `TokenFiles::new` refused more blocks than a `usize` counts.
            Samples::Tokens { files, .. } => usize::try_from(files.blocks()).unwrap_or(usize::MAX),
        }
    }

    /// Whether it has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sample `index`.
    pub fn get(&self, index: usize) -> Option<Item> {
        match &self.samples {
            Samples::Listed(items) => items.get(index).cloned(),
            Samples::Tokens { files, .. } => {
                let (key, file, block) = files.find(index as u64)?;
                let mut item = Item::ranged(Arc::clone(key), file.byte_range(block), Label::None);
                if let Placement::Encoded(encoded) = &file.placement {
                    item.record = Some(loader_scheduler::RecordOf {
                        records: Arc::clone(&encoded.records),
                        slot: u32::try_from(block).ok()?,
                        shared: true,
                    });
                }
                Some(item)
            }
        }
    }

    /// Its samples' records, borrowed, when it keeps one per sample (`None` for token
    /// blocks, made when asked): for whole-dataset passes that need not copy them.
    pub(crate) fn records(&self) -> Option<&[Item]> {
        match &self.samples {
            Samples::Listed(items) => Some(items),
            Samples::Tokens { .. } => None,
        }
    }

    /// Every sample, in index order.
    pub fn iter(&self) -> impl Iterator<Item = Item> + '_ {
        (0..self.len()).map_while(|i| self.get(i))
    }

    /// Class names, indexed by label (empty for integer-labelled manifests).
    pub fn classes(&self) -> &[String] {
        &self.classes
    }
}

impl Item {
    /// The bytes the sample and its members occupy together in their object; `None` for a
    /// whole object.
    pub fn span(&self) -> Option<Range<u64>> {
        loader_scheduler::span_of(self.range.as_ref(), &self.members)
    }

    /// The engine's description of `item` (without its chunk, which depends on the order),
    /// taking its fields: [`Dataset::get`] made the item for it.
    pub(crate) fn into_work(self) -> loader_scheduler::WorkItem {
        loader_scheduler::WorkItem {
            index: 0,
            key: self.key,
            range: self.range,
            label: self.label,
            name: self.name,
            members: self.members,
            chunk: None,
            position: None,
            record: self.record,
        }
    }
}

/// What `keys` of `store` are (size, version), by a HEAD each, `at_once` at a time, through
/// the caller's stack: the objects a dataset named by key rather than by a listing reads.
pub(super) async fn heads(
    store: &loader_storage::DynStorage,
    keys: &[String],
    at_once: usize,
) -> Result<Vec<ObjectMeta>> {
    use futures::{StreamExt, TryStreamExt};
    use loader_storage::Storage;
    futures::stream::iter(keys.iter().cloned())
        .map(|k| {
            let store = std::sync::Arc::clone(store);
            async move { store.head(&k).await }
        })
        .buffered(at_once.max(1))
        .try_collect()
        .await
        .map_err(SourceError::from)
}

#[cfg(test)]
mod tests {
    use super::{Dataset, Item, ShardLayout};
    use crate::tokens::{Blocking, Documents, Placement, TokenFile, TokenFiles, TokenType};
    use std::sync::Arc;

    #[test]
    fn token_files_are_shards_of_chunks_found_by_arithmetic() {
        // Blocks of 2^20 + 1 uint16 tokens (just over 2 MiB): one a chunk of 4 MiB.
        let len = 1 << 20;
        let file = |tokens: u64| TokenFile {
            dtype: TokenType::U16,
            documents: Documents::from_lengths([tokens]).unwrap(),
            placement: Placement::From(0),
            blocking: Blocking::new(len, false).unwrap(),
            vocab: None,
            first_document: 0,
        };
        let files = TokenFiles::new(vec![
            ("a".into(), file(3 * len + 1)),
            ("b".into(), file(2 * len + 1)),
        ])
        .unwrap();
        let data = Dataset::from_tokens(files).unwrap();
        assert_eq!(data.len(), 5);
        let chunks: Vec<_> = data.shards().iter().map(|s| s.chunks.clone()).collect();
        assert_eq!(chunks, [vec![0..1, 1..2, 2..3], vec![3..4, 4..5]]);
        // Block 4 is file b's second: chunk 3 + 1, its bytes the block's.
        let (id, span) = data.chunk(4).unwrap();
        assert_eq!(id, 4);
        assert_eq!(span, data.get(4).unwrap().range.unwrap());
        assert_eq!(data.chunk_samples(id), 1);
        assert!(data.chunk(5).is_none());
    }

    fn page(key: &str, range: std::ops::Range<u64>) -> Item {
        Item::ranged(key, range, 0)
    }

    #[test]
    fn a_sample_of_another_object_is_a_chunk_of_its_own_and_a_split_span_one_chunk() {
        let shard: Arc<str> = "a.parquet".into();
        // A page's rows around a row read as another object, whole.
        let items = vec![
            page("a.parquet", 0..10),
            Item::new("img/1.jpg", 0),
            page("a.parquet", 0..10),
        ];
        let layout = ShardLayout {
            key: Arc::clone(&shard),
            chunks: vec![0..1, 1..2, 2..3],
        };
        let data = Dataset::from_shards(items.clone(), Vec::new(), vec![layout]).unwrap();
        let (first, _) = data.chunk(0).unwrap();
        assert_eq!(
            data.chunk(2).unwrap().0,
            first,
            "the page's two pieces are one chunk"
        );
        assert_eq!(data.chunk_samples(first), 2);
        assert!(
            data.chunk(1).is_none(),
            "the other object is read whole, in no chunk"
        );
        // Listed twice, or a whole object of the shard's own key: refused.
        for (chunks, items) in [
            (vec![0..1, 1..2, 1..2, 2..3], items.clone()),
            (
                vec![0..1, 1..2, 2..3],
                vec![
                    page("a.parquet", 0..10),
                    Item::new("a.parquet", 0),
                    page("a.parquet", 0..10),
                ],
            ),
        ] {
            let layout = ShardLayout {
                key: Arc::clone(&shard),
                chunks,
            };
            assert!(Dataset::from_shards(items, Vec::new(), vec![layout]).is_err());
        }
    }
}
