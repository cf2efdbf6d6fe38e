#![allow(clippy::unwrap_used)]
//! loader's batches as candle tensors, on the test kit's S3 server (a real socket): values
//! equal to the loader's own batches, moved rather than copied, one epoch per pass with
//! every sample exactly once, resume, errors surfaced, parts disjoint and covering.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use candle_core::{DType, Device, Storage};
use loader_candle::{CandleLoader, Error, to_candle};
use loader_core::storage::ErrorKind;
use loader_core::{
    BatchData, DataLoader, DataLoaderBuilder, Dataset, DynStorage, LoaderState, Pipeline,
};
use loader_testkit::{Bucket, DatasetSpec, HookedStore, watchdog};

const IMAGES: usize = 30;

/// The tiny dataset in a bucket of its own, and the dataset listed from it.
fn fixture() -> (Bucket, Dataset) {
    let bucket = Bucket::new(&DatasetSpec::tiny(IMAGES, 3)).unwrap();
    let dataset = Dataset::image_folder_blocking(&*bucket.store).unwrap();
    (bucket, dataset)
}

/// Batches of 7 (the last short), shuffled with seed 3, 16 px tensors.
fn builder(store: &DynStorage, dataset: &Dataset) -> DataLoaderBuilder {
    let small = Pipeline::builder()
        .resize(16)
        .center_crop(16)
        .to_tensor_normalized(&[0.0; 3], &[1.0; 3])
        .build()
        .unwrap();
    DataLoader::builder(Arc::clone(store), dataset.clone())
        .batch_size(7)
        .shuffle(true)
        .seed(3)
        .transform(small)
}

fn candle(store: &DynStorage, dataset: &Dataset) -> CandleLoader {
    CandleLoader::new(builder(store, dataset).build().unwrap(), &Device::Cpu)
}

fn pass(loader: &mut CandleLoader) -> Vec<u64> {
    loader.flat_map(|b| b.unwrap().info.indices).collect()
}

#[test]
fn batches_equal_the_loaders_own_in_shape_type_and_value() {
    let (f, dataset) = fixture();
    let mut own = builder(&f.store, &dataset).build().unwrap();
    let mut ours = candle(&f.store, &dataset);
    let mut batches = 0;
    for (ours, theirs) in (&mut ours).zip(&mut own) {
        let (ours, theirs) = (ours.unwrap(), theirs.unwrap());
        assert_eq!(ours.images.dims(), &theirs.shape[..]);
        assert_eq!(
            (ours.images.dtype(), ours.labels.dtype()),
            (DType::F32, DType::I64)
        );
        let pixels = ours.images.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(pixels, theirs.as_f32().unwrap());
        assert_eq!(
            ours.labels.to_vec1::<i64>().unwrap(),
            theirs.labels.as_i64().unwrap()
        );
        assert_eq!(
            (ours.info.indices, ours.info.keys),
            (theirs.info.indices, theirs.info.keys)
        );
        batches += 1;
    }
    assert_eq!(batches, IMAGES.div_ceil(7));
}

#[test]
fn the_values_move_into_candle_without_a_copy() {
    let (f, dataset) = fixture();
    let mut loader = builder(&f.store, &dataset).build().unwrap();
    let batch = loader.next().unwrap().unwrap();
    let at = match &batch.data {
        BatchData::F32(v) => v.as_ptr() as usize,
        BatchData::U8(v) => v.as_ptr() as usize,
    };
    let tensors = to_candle(batch, &Device::Cpu).unwrap();
    let (storage, layout) = tensors.images.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        panic!("not a CPU tensor")
    };
    let values = cpu.as_slice::<f32>().unwrap();
    assert_eq!(layout.start_offset(), 0);
    assert_eq!(values.as_ptr() as usize, at, "copied on the way in");
}

#[test]
fn each_pass_is_one_epoch_with_every_sample_exactly_once() {
    let (f, dataset) = fixture();
    let mut loader = candle(&f.store, &dataset);
    let all: Vec<u64> = (0..IMAGES as u64).collect();
    let mut orders = Vec::new();
    for epoch in 0..3 {
        assert_eq!(loader.epoch(), epoch);
        let seen = pass(&mut loader);
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all, "epoch {epoch} repeated or lost a sample");
        orders.push(seen);
    }
    assert_ne!(orders[0], orders[1], "the epochs were not shuffled afresh");
}

#[test]
fn a_checkpoint_resumes_the_epoch_where_it_stopped() {
    let (f, dataset) = fixture();
    let whole = pass(&mut candle(&f.store, &dataset));
    let mut loader = candle(&f.store, &dataset);
    let first: Vec<u64> = loader
        .by_ref()
        .take(2)
        .flat_map(|b| b.unwrap().info.indices)
        .collect();
    let state = loader.state().unwrap();
    assert_eq!(at(state.clone()), (0, 14));
    let mut restarted = candle(&f.store, &dataset);
    restarted.resume(state).unwrap();
    let rest = pass(&mut restarted);
    assert_eq!(
        [first, rest].concat(),
        whole,
        "resumed other samples than the rest"
    );
}

#[test]
fn a_storage_error_reaches_the_caller_as_an_error() {
    let (f, dataset) = fixture();
    let broken = dataset.get(4).unwrap().key.to_string();
    let store: DynStorage = Arc::new(HookedStore::new(Arc::clone(&f.store), {
        let broken = broken.clone();
        move |key| {
            (key == broken).then(|| {
                Err(loader_core::storage::Error::new(
                    ErrorKind::PermissionDenied,
                    "s3://data",
                    key,
                    "access denied by the bucket policy",
                ))
            })
        }
    }));
    let dataset = dataset.clone();
    let errors = watchdog::within(
        Duration::from_secs(60),
        "an epoch with a denied key",
        move || {
            candle(&store, &dataset)
                .filter_map(Result::err)
                .collect::<Vec<_>>()
        },
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(errors[0], Error::Loader(_)), "{:?}", errors[0]);
    let message = errors[0].to_string();
    assert!(message.contains(&broken), "the key is not named: {message}");
    assert!(message.contains("access denied"), "{message}");
}

#[test]
fn subsets_are_disjoint_and_cover_the_dataset() {
    let (f, dataset) = fixture();
    let mut seen = BTreeSet::new();
    for range in [0..10, 10..25, 25..30] {
        let loader = builder(&f.store, &dataset)
            .subset(range.clone())
            .build()
            .unwrap();
        let mut part = CandleLoader::new(loader, &Device::Cpu);
        let mine = pass(&mut part);
        assert_eq!(mine.len(), range.len());
        for index in mine {
            assert!(
                range.contains(&(index as usize)),
                "{index} is outside {range:?}"
            );
            assert!(seen.insert(index), "sample {index} is in two parts");
        }
    }
    assert_eq!(seen, (0..IMAGES as u64).collect());
}

/// A state's epoch and position, without its order stamp.
fn at(state: LoaderState) -> (u64, u64) {
    (state.epoch, state.position)
}

/// Packed token rows of megatron-core's fixture as candle tensors: ids, labels, positions
/// and documents `[B, L]` i64 equal to the batch's, `cu_seqlens` u32 ending at `B·L`.
#[test]
fn token_rows_become_candle_tensors() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/megatron");
    let dir = tempfile::tempdir().unwrap();
    for ext in ["idx", "bin"] {
        let name = format!("u16.{ext}");
        std::fs::copy(fixtures.join(&name), dir.path().join(&name)).unwrap();
    }
    let mut options = loader_core::LoaderOptions::default();
    options.set("source.block_size", "16").unwrap();
    let url = dir.path().to_string_lossy().into_owned();
    let (store, dataset) =
        loader_core::open_with(&url, Vec::<(String, String)>::new(), &options).unwrap();
    let loader = DataLoader::builder(store, dataset)
        .batch_size(4)
        .tokens(loader_core::tokens::Packing::new())
        .unwrap()
        .build()
        .unwrap();
    let mut rows = 0;
    for batch in loader {
        let batch = batch.unwrap();
        let want = batch.input_ids.as_i64().unwrap().to_vec();
        let b = batch.info.indices.len();
        let t = loader_candle::tokens_to_candle(batch, &Device::Cpu).unwrap();
        assert_eq!(t.input_ids.dims(), [b, 16]);
        assert_eq!(t.labels.dtype(), DType::I64);
        assert_eq!(
            t.input_ids.flatten_all().unwrap().to_vec1::<i64>().unwrap(),
            want
        );
        let cu = t.cu_seqlens.to_vec1::<u32>().unwrap();
        assert_eq!((cu[0], cu[cu.len() - 1]), (0, 16 * b as u32));
        rows += b;
    }
    assert_eq!(rows, (1342 - 1) / 16);
}
