#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The format registry and the source context, as a caller outside the crate uses them: a
//! format of one's own added with one trait impl and its registration, chosen by what a URL
//! holds or by `source.format`; ambiguity and unknown names refused; a format's index reads
//! (a Parquet footer) going through the caller's request stack (`storage.max_retries`,
//! `storage.request_timeout`), not a stack of the format's own.

mod common;
use common::refused;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use loader_core::source::{self, About, Fit, Format, Probe};
use loader_core::storage::{GetOptions, GetResult, ObjectMeta, Result as StorageResult};
use loader_core::{
    DataLoader, Dataset, DynStorage, Item, LoaderOptions, RawBatch, SampleInfo, SourceContext,
    Storage, from_url,
};
use loader_testkit::watchdog::{HANG_LIMIT, within};

/// A toy format: a `samples.toy` file lists `key label` lines of objects beside it.
#[derive(Debug)]
struct Toy;

const TOY: &str = "samples.toy";

#[async_trait(?Send)]
impl Format for Toy {
    fn about(&self) -> About {
        About::new("toy", "a toy dataset")
    }

    fn names(&self, name: &str) -> bool {
        name.ends_with(".toy")
    }

    async fn detect(&self, probe: &Probe<'_>) -> source::Result<Option<Fit>> {
        if let Some(keys) = probe.named() {
            return Ok(keys.iter().all(|k| self.names(k)).then_some(Fit::Named));
        }
        let listed = probe.listed().await?.unwrap_or_default();
        Ok(listed.iter().any(|m| m.key == TOY).then_some(Fit::Listed))
    }

    async fn open(&self, probe: &Probe<'_>) -> source::Result<Dataset> {
        let key = probe.named().and_then(|k| k.first().cloned());
        let text = probe.read(key.as_deref().unwrap_or(TOY)).await?;
        let items = String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(key, label)| Item::new(key, label.trim().parse::<i64>().unwrap_or(-1)))
            .collect();
        Ok(Dataset::from_items(items, Vec::new()))
    }
}

fn local(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

fn context(store: DynStorage, settings: &[(&str, &str)]) -> SourceContext {
    let mut options = LoaderOptions::default();
    for (key, value) in settings {
        options.set(key, value).unwrap();
    }
    SourceContext::new(store, &options)
}

fn toy_folder(dir: &Path) {
    std::fs::write(dir.join(TOY), "a.bin 0\nb.bin 1\nc.bin 1\n").unwrap();
    for (name, bytes) in [("a.bin", "aa"), ("b.bin", "bbb"), ("c.bin", "c")] {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn a_format_of_ones_own_is_read_through_the_registry() {
    source::register(Toy);
    let dir = tempfile::tempdir().unwrap();
    toy_folder(dir.path());
    let store = local(dir.path());
    // Found by what the folder holds.
    let dataset = Dataset::open_blocking("", &context(store.clone(), &[])).unwrap();
    assert_eq!(dataset.len(), 3);
    assert_eq!(dataset.get(1).unwrap().key.as_ref(), "b.bin");
    // Named by its URL: the store is the file's folder.
    let url = dir.path().join(TOY).to_string_lossy().into_owned();
    assert_eq!(
        loader_core::store_url(&url).unwrap(),
        dir.path().to_string_lossy()
    );
    let named = Dataset::open_blocking(&url, &context(local(dir.path()), &[])).unwrap();
    assert_eq!(named, dataset);
    // And loaded like any other: the samples' bytes in order.
    let loader = DataLoader::builder(store, dataset)
        .batch_size(3)
        .map(
            |bytes: bytes::Bytes, info: &SampleInfo| Ok((info.index, bytes.len())),
            |raw: RawBatch<(u64, usize)>| {
                Ok(raw.samples.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
            },
        )
        .build()
        .unwrap();
    let read: Vec<(u64, usize)> = loader.flat_map(|b| b.unwrap()).collect();
    assert_eq!(read, [(0, 2), (1, 3), (2, 1)]);
}

#[test]
fn an_ambiguous_layout_is_refused_naming_what_fits_and_the_setting_that_chooses() {
    source::register(Toy);
    let dir = tempfile::tempdir().unwrap();
    loader_testkit::DatasetSpec::tiny(4, 2)
        .write(dir.path())
        .unwrap();
    toy_folder(dir.path());
    let store = local(dir.path());
    refused(
        Dataset::open_blocking("", &context(store.clone(), &[])),
        &["ImageFolder", "toy", "source.format", "imagefolder"],
    );
    let toy = Dataset::open_blocking("", &context(store.clone(), &[("source.format", "toy")]));
    assert_eq!(toy.unwrap().len(), 3);
    let folder = Dataset::open_blocking(
        "",
        &context(store.clone(), &[("source.format", "imagefolder")]),
    );
    assert_eq!(folder.unwrap().len(), 4);
    refused(
        Dataset::open_blocking("", &context(store.clone(), &[("source.format", "tarball")])),
        &["\"tarball\"", "webdataset", "toy"],
    );
    // A setting the format found does not read is refused, naming the formats that do.
    refused(
        Dataset::open_blocking(
            "",
            &context(
                store,
                &[("source.format", "toy"), ("source.image_column", "img")],
            ),
        ),
        &["source.image_column", "parquet, mds, litdata"],
    );
}

/// A store whose ranged reads of `.parquet` files (the footer an open reads) first fail
/// `failures` times with a transient error, then stall `stalls` times for a minute.
#[derive(Debug)]
struct Troubled {
    inner: DynStorage,
    failures: AtomicUsize,
    stalls: AtomicUsize,
    footer_reads: AtomicUsize,
}

impl Troubled {
    fn new(inner: DynStorage, failures: usize, stalls: usize) -> Arc<Self> {
        Arc::new(Self {
            inner,
            failures: AtomicUsize::new(failures),
            stalls: AtomicUsize::new(stalls),
            footer_reads: AtomicUsize::new(0),
        })
    }
}

fn take(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl Storage for Troubled {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn get_opts(&self, key: &str, options: GetOptions) -> StorageResult<GetResult> {
        if key.ends_with(".parquet") && options.range.is_some() {
            self.footer_reads.fetch_add(1, Ordering::SeqCst);
            if take(&self.failures) {
                return Err(loader_core::storage::Error::new(
                    loader_core::storage::ErrorKind::Transient,
                    self.name(),
                    key,
                    "503 SlowDown",
                ));
            }
            if take(&self.stalls) {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
        self.inner.get_opts(key, options).await
    }
    async fn head(&self, key: &str) -> StorageResult<ObjectMeta> {
        self.inner.head(key).await
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, StorageResult<ObjectMeta>> {
        self.inner.list(prefix)
    }
}

#[test]
fn a_parquet_footer_is_read_through_the_callers_retries_and_timeout() {
    // What an open reads is not cached here: every open reads the footer again.
    source::register(loader_core::parquet::Parquet::new().cache_dir(None));
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/parquet/pa-snappy-plain.parquet"),
        dir.path().join("train.parquet"),
    )
    .unwrap();
    let open = |store: Arc<Troubled>, settings: &[(&str, &str)]| {
        let store = store as DynStorage;
        Dataset::open_blocking("", &context(store, settings))
    };
    // Two transient failures: ridden out by default, fatal with fewer retries.
    let flaky = Troubled::new(local(dir.path()), 2, 0);
    assert_eq!(open(Arc::clone(&flaky), &[]).unwrap().len(), 40);
    assert!(flaky.footer_reads.load(Ordering::SeqCst) >= 3);
    let flaky = Troubled::new(local(dir.path()), 2, 0);
    refused(
        open(Arc::clone(&flaky), &[("storage.max_retries", "1")]),
        &["503 SlowDown", "train.parquet"],
    );
    assert_eq!(
        flaky.footer_reads.load(Ordering::SeqCst),
        2,
        "one retry, no more"
    );
    // A stalled footer read: abandoned at the request timeout and repeated.
    let stalled = Troubled::new(local(dir.path()), 0, 1);
    let settings = [("storage.request_timeout", "0.3")];
    let dataset = within(HANG_LIMIT, "a stalled footer read", move || {
        open(stalled, &settings)
    })
    .unwrap();
    assert_eq!(dataset.len(), 40);
}

#[test]
fn a_listing_is_read_as_it_always_was_shards_first_then_images_then_tables() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/parquet/pa-snappy-plain.parquet");
    let open =
        |name: &str| Dataset::open_blocking("", &context(local(&dir.path().join(name)), &[]));
    // Shards beside their Parquet metadata (img2dataset), a preview image and an
    // index.json: the shards.
    let shards = dir.path().join("shards");
    loader_testkit::DatasetSpec::tiny(6, 2)
        .write_shards(&shards, 2)
        .unwrap();
    std::fs::copy(&parquet, shards.join("00000.parquet")).unwrap();
    std::fs::write(shards.join("preview.jpg"), b"not read").unwrap();
    std::fs::write(shards.join("index.json"), b"{}").unwrap();
    let read = open("shards").unwrap();
    assert_eq!((read.len(), read.shards().len()), (6, 2));
    // Images beside a metadata.parquet and an index.json: an ImageFolder.
    let folder = dir.path().join("folder");
    loader_testkit::DatasetSpec::tiny(4, 2)
        .write(&folder)
        .unwrap();
    std::fs::copy(&parquet, folder.join("metadata.parquet")).unwrap();
    std::fs::write(folder.join("index.json"), b"{}").unwrap();
    assert_eq!(open("folder").unwrap().classes().len(), 2);
    // Parquet files beside an index.json (LitData's index of them): the Parquet files.
    let tables = dir.path().join("tables");
    std::fs::create_dir_all(&tables).unwrap();
    std::fs::copy(&parquet, tables.join("train.parquet")).unwrap();
    std::fs::write(tables.join("index.json"), b"{}").unwrap();
    assert_eq!(open("tables").unwrap().len(), 40);
}
