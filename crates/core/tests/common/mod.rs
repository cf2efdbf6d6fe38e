//! What the suites of datasets written by other tools (Parquet, MDS, LitData) share:
//! every sample read and described, a fixture copied to a store, damaged and read through
//! the whole loader under the watchdog.
#![allow(dead_code)] // each suite uses its part

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use loader_core::decoder::{DecodeOptions, decode};
use loader_core::{
    DataLoader, DataLoaderBuilder, Dataset, DynStorage, ErrorPolicy, Fetch, Pipeline, RawBatch,
    SampleInfo, ShardOrder, from_url,
};
use loader_testkit::DelayProxy;
use loader_testkit::watchdog::{HANG_LIMIT, within};

/// A sample as delivered, as the suites compare it with what the writing tool recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    /// Its index in the dataset.
    pub index: u64,
    /// Its class, -1 without one.
    pub label: i64,
    /// The image's length in bytes.
    pub len: u64,
    /// The image's bytes summed, modulo 2^32.
    pub sum: u64,
    /// The decoded pixels summed, modulo 2^32, when the reader decodes.
    pub pixels: Option<u64>,
    /// The `caption` member, when the sample has one.
    pub caption: Option<String>,
}

fn byte_sum(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&x| u64::from(x)).sum::<u64>() % (1 << 32)
}

/// A loader over `dataset` whose batches are the samples as [`Seen`], decoded when `decode`.
pub fn reader(
    store: DynStorage,
    dataset: Dataset,
    decode_images: bool,
) -> DataLoaderBuilder<Seen, Vec<Seen>> {
    DataLoader::builder(store, dataset).map(
        move |bytes: Bytes, info: &SampleInfo| {
            let pixels = if decode_images {
                Some(byte_sum(&decode(&bytes, &DecodeOptions::default())?.data))
            } else {
                None
            };
            let caption = info
                .member("caption")
                .map(|b| String::from_utf8(b.to_vec()).unwrap());
            Ok(Seen {
                index: info.index,
                label: info.label.class().unwrap_or(-1),
                len: bytes.len() as u64,
                sum: byte_sum(&bytes),
                pixels,
                caption,
            })
        },
        |raw: RawBatch<Seen>| Ok(raw.samples.into_iter().map(|(_, s)| s).collect()),
    )
}

/// Every sample of the loader's next epoch, in index order.
pub fn one_pass(loader: &mut DataLoader<Seen, Vec<Seen>>) -> Vec<Seen> {
    let mut seen: Vec<Seen> = loader.flat_map(|b| b.unwrap()).collect();
    seen.sort();
    seen
}

/// One shuffled epoch (batches of 7, `seed`) read with each way of fetching, tasks and
/// threads, and handed to `check` with the fetch's name.
pub fn with_each_fetch(
    store: &DynStorage,
    dataset: &Dataset,
    decode_images: bool,
    seed: u64,
    check: impl Fn(&str, &[Seen]),
) {
    for fetch in [
        Fetch::Async { max_in_flight: 8 },
        Fetch::Threads { threads: 3 },
    ] {
        let mut loader = reader(Arc::clone(store), dataset.clone(), decode_images)
            .batch_size(7)
            .shuffle(true)
            .seed(seed)
            .fetch(fetch)
            .build()
            .unwrap();
        check(&format!("{fetch:?}"), &one_pass(&mut loader));
    }
}

/// One shuffled epoch (batches of 8) read in each shard order through `proxy`, handed to
/// `check` with the order and the GETs the proxy counted while it was read.
pub fn with_each_order(
    store: &DynStorage,
    dataset: &Dataset,
    proxy: &DelayProxy,
    decode_images: bool,
    check: impl Fn(ShardOrder, &[Seen], u64),
) {
    for order in [ShardOrder::Local, ShardOrder::Global] {
        let before = proxy.stats().gets;
        let mut loader = reader(Arc::clone(store), dataset.clone(), decode_images)
            .batch_size(8)
            .shuffle(true)
            .shard_order(order)
            .epochs(1)
            .build()
            .unwrap();
        let seen = one_pass(&mut loader);
        check(order, &seen, proxy.stats().gets - before);
    }
}

/// Decode to 16 x 16 pixels: the real pipeline, so damaged images fail where a user would
/// meet them, at the least cost.
pub fn thumbnails() -> Pipeline {
    Pipeline::builder()
        .resize(16)
        .center_crop(16)
        .build()
        .unwrap()
}

/// A change that flips the bits of `mask` in byte `at` of `file` (which must be in it: a
/// fixture grown shorter than the sweep fails rather than passing undamaged).
pub fn flip(file: &'static str, at: usize, mask: u8) -> impl FnOnce(&Path) + Send + 'static {
    move |dir: &Path| {
        let path = dir.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        let len = bytes.len();
        let byte = bytes
            .get_mut(at)
            .unwrap_or_else(|| panic!("{file} has {len} bytes, none at {at}"));
        *byte ^= mask;
        std::fs::write(path, bytes).unwrap();
    }
}

/// A change that cuts `file` to `keep(its length)` bytes.
pub fn cut(file: &'static str, keep: fn(usize) -> usize) -> impl FnOnce(&Path) + Send + 'static {
    move |dir: &Path| {
        let path = dir.join(file);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(path, &bytes[..keep(bytes.len())]).unwrap();
    }
}

/// The message of the error `result` must be, checked to name every one of `words`.
pub fn refused<T: std::fmt::Debug, E: std::fmt::Display>(
    result: Result<T, E>,
    words: &[&str],
) -> String {
    let err = match result {
        Ok(got) => panic!("refused, naming {words:?}, but it gave {got:?}"),
        Err(e) => e.to_string(),
    };
    for word in words {
        assert!(err.contains(word), "{word:?} is not in: {err}");
    }
    err
}

/// Copies `from` (files and folders) into `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// The local store of `dir`.
pub fn local(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

/// What reading every sample of a damaged dataset gave: samples loaded, and the errors of
/// those skipped.
pub type Outcome = (usize, Vec<String>);

/// A copy of the dataset in `fixture` with `change` made to it, opened by `open` and every
/// sample read with each failure skipped, under the watchdog: the open's error, or what
/// the samples became.
pub fn damaged(
    fixture: &Path,
    change: impl FnOnce(&Path) + Send + 'static,
    open: impl FnOnce(&DynStorage) -> Result<Dataset, String> + Send + 'static,
    what: &str,
) -> Result<Outcome, String> {
    let fixture = fixture.to_path_buf();
    within(HANG_LIMIT, what, move || {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&fixture, dir.path());
        change(dir.path());
        let store = local(dir.path());
        let dataset = open(&store)?;
        let mut l = DataLoader::builder(store, dataset)
            .map(
                |bytes: Bytes, _: &SampleInfo| Ok(bytes.len()),
                |raw: RawBatch<usize>| {
                    let errors: Vec<String> = raw.skipped.iter().map(|e| e.to_string()).collect();
                    Ok((raw.samples.len(), errors))
                },
            )
            .batch_size(4)
            .epochs(1)
            .error_policy(ErrorPolicy::Skip {
                max_failures: usize::MAX,
            })
            .build()
            .unwrap();
        let mut out: Outcome = (0, Vec::new());
        for batch in l.by_ref() {
            let (n, errors) = batch.map_err(|e| e.to_string())?;
            out.0 += n;
            out.1.extend(errors);
        }
        // A batch whose every sample failed is not delivered: its reports are here.
        out.1
            .extend(l.take_unreported_skips().iter().map(|e| e.to_string()));
        Ok(out)
    })
}
