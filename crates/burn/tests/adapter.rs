#![allow(clippy::unwrap_used)]
//! burn's DataLoader over loader, on the test kit's S3 server (a real socket): values equal
//! to the loader's own batches, one epoch per `iter()` with every sample exactly once,
//! errors surfaced, slices disjoint and covering.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use burn_core::data::dataloader::DataLoader as _;
use burn_core::data::dataloader::split::split_dataloader;
use burn_tensor::{DType, Device};
use loader_burn::{BurnLoader, Error, ImageBatch, float_tensor, images_tensor, targets_tensor};
use loader_core::storage::ErrorKind;
use loader_core::{BatchData, DataLoader, Dataset, DynStorage, LoaderState, Pipeline};
use loader_testkit::{Bucket, DatasetSpec, HookedStore, watchdog};

const IMAGES: usize = 30;

/// The tiny dataset in a bucket of its own, and the dataset listed from it.
fn fixture() -> (Bucket, Dataset) {
    let bucket = Bucket::new(&DatasetSpec::tiny(IMAGES, 3)).unwrap();
    let dataset = Dataset::image_folder_blocking(&*bucket.store).unwrap();
    (bucket, dataset)
}

fn small() -> Pipeline {
    Pipeline::builder()
        .resize(16)
        .center_crop(16)
        .to_tensor_normalized(&[0.0; 3], &[1.0; 3])
        .build()
        .unwrap()
}

/// The recipe the tests share: batches of 7 (the last short), shuffled with seed 3.
fn recipe(
    store: DynStorage,
    dataset: Dataset,
) -> impl Fn() -> loader_core::DataLoaderBuilder + Send + Sync + 'static {
    move || {
        DataLoader::builder(Arc::clone(&store), dataset.clone())
            .batch_size(7)
            .shuffle(true)
            .seed(3)
            .transform(small())
    }
}

fn indices(batches: impl Iterator<Item = ImageBatch>) -> Vec<u64> {
    batches.flat_map(|b| b.info.indices).collect()
}

#[test]
fn batches_equal_the_loaders_own_in_shape_type_and_value() {
    let (f, dataset) = fixture();
    let recipe = recipe(Arc::clone(&f.store), dataset.clone());
    let mut own = recipe().build().unwrap();
    let burn = BurnLoader::images(recipe, &Device::default()).unwrap();
    let mut batches = 0;
    for (ours, theirs) in burn.iter().zip(&mut own) {
        let (ours, theirs) = (ours.unwrap(), theirs.unwrap());
        assert_eq!(ours.images.dims().to_vec(), theirs.shape.to_vec());
        assert_eq!(ours.images.dtype(), DType::F32);
        let pixels = ours.images.into_data();
        assert_eq!(pixels.as_slice::<f32>().unwrap(), theirs.as_f32().unwrap());
        assert_eq!(ours.targets.dims(), [theirs.len()]);
        let labels = ours.targets.into_data().convert::<i64>();
        assert_eq!(
            labels.as_slice::<i64>().unwrap(),
            theirs.labels.as_i64().unwrap()
        );
        assert_eq!(
            (ours.info.indices, ours.info.keys),
            (theirs.info.indices, theirs.info.keys)
        );
        assert_eq!(ours.info.epoch, 0);
        batches += 1;
    }
    assert_eq!(batches, IMAGES.div_ceil(7));
}

#[test]
fn the_images_reach_burn_without_a_copy_and_their_buffer_comes_back() {
    let (f, dataset) = fixture();
    let address = |data: &BatchData| match data {
        BatchData::F32(v) => v.as_ptr() as usize,
        BatchData::U8(v) => v.as_ptr() as usize,
    };
    // The flex device, and autodiff over it as training uses.
    for device in [Device::default(), Device::default().autodiff()] {
        let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
            .batch_size(6)
            .transform(small())
            .build()
            .unwrap();
        let first = loader.next().unwrap().unwrap();
        let at = address(&first.data);
        let images = images_tensor(first.into_tensors().images, &device).unwrap();
        // The flex backend keeps the bytes it was given, and gives the same bytes back
        // from a tensor no other holds.
        let held = images.into_data();
        assert_eq!(
            held.as_bytes().as_ptr() as usize,
            at,
            "copied on the way in to {device:?}"
        );
        let second = loader.next().unwrap().unwrap();
        assert_ne!(
            address(&second.data),
            at,
            "a held tensor's memory was reused"
        );
        drop(second);
        drop(held);
        let third = loader.next().unwrap().unwrap();
        assert_eq!(
            address(&third.data),
            at,
            "burn's dropped tensor's buffer was not reused"
        );
    }
}

#[test]
fn each_iter_is_one_epoch_with_every_sample_exactly_once() {
    let (f, dataset) = fixture();
    let burn = BurnLoader::images(
        recipe(Arc::clone(&f.store), dataset.clone()),
        &Device::default(),
    )
    .unwrap();
    assert_eq!(burn.num_items(), IMAGES);
    let all: Vec<u64> = (0..IMAGES as u64).collect();
    let mut orders = Vec::new();
    for epoch in 0..3u64 {
        let mut iter = burn.iter();
        let mut seen = Vec::new();
        for batch in &mut iter {
            let batch = batch.unwrap();
            assert_eq!(batch.info.epoch, epoch);
            seen.extend(batch.info.indices);
        }
        let progress = iter.progress();
        assert_eq!(
            (progress.items_processed, progress.items_total),
            (IMAGES, IMAGES)
        );
        drop(iter);
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all, "epoch {epoch} repeated or lost a sample");
        orders.push(seen);
    }
    assert_ne!(orders[0], orders[1], "the epochs were not shuffled afresh");

    // An epoch left after one batch is not finished by the next `iter()`, which reads a
    // whole new epoch, as burn's own loader and PyTorch's do.
    let mut iter = burn.iter();
    let part = iter.next().unwrap().unwrap();
    assert_eq!(part.info.epoch, 3);
    drop(iter);
    let next: Vec<ImageBatch> = burn.iter().map(Result::unwrap).collect();
    assert!(next.iter().all(|b| b.info.epoch == 4));
    let mut sorted = indices(next.into_iter());
    sorted.sort_unstable();
    assert_eq!(sorted, all);
}

#[test]
fn a_checkpoint_resumes_the_epoch_where_it_stopped() {
    let (f, dataset) = fixture();
    let loader = || {
        BurnLoader::images(
            recipe(Arc::clone(&f.store), dataset.clone()),
            &Device::default(),
        )
        .unwrap()
    };
    let whole = indices(loader().iter().map(Result::unwrap));
    let burn = loader();
    let mut iter = burn.iter();
    let first = indices(iter.by_ref().take(2).map(Result::unwrap));
    drop(iter);
    let state = burn.state().unwrap();
    assert_eq!(at(state.clone()), (0, 14));

    let restarted = loader();
    restarted.resume(state).unwrap();
    let rest = indices(restarted.iter().map(Result::unwrap));
    assert_eq!(
        [first, rest].concat(),
        whole,
        "resumed other samples than the rest"
    );
    assert_eq!(at(restarted.state().unwrap()), (1, 0));
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
            let burn = BurnLoader::images(recipe(store, dataset), &Device::default()).unwrap();
            let epoch: Vec<_> = burn.iter().collect();
            epoch
                .into_iter()
                .filter_map(Result::err)
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        },
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&broken),
        "the key is not named: {}",
        errors[0]
    );
    assert!(errors[0].contains("access denied"), "{}", errors[0]);
}

#[test]
fn a_second_iterator_is_refused_not_waited_for() {
    let (f, dataset) = fixture();
    let (store, dataset) = (Arc::clone(&f.store), dataset.clone());
    watchdog::no_hang("two iterators of one loader", move || {
        let burn = BurnLoader::images(recipe(store, dataset), &Device::default()).unwrap();
        let mut first = burn.iter();
        assert!(first.next().unwrap().is_ok());
        let second: Vec<_> = burn.iter().collect();
        assert_eq!(second.len(), 1);
        let error = second.into_iter().next().unwrap().unwrap_err();
        assert!(error.to_string().contains("still alive"), "{error}");
        assert!(matches!(burn.state(), Err(Error::Busy)));
        assert!(
            first.next().unwrap().is_ok(),
            "the first iterator was disturbed"
        );
    });
}

#[test]
fn slices_are_disjoint_and_cover_the_dataset() {
    let (f, dataset) = fixture();
    let burn = BurnLoader::images(
        recipe(Arc::clone(&f.store), dataset.clone()),
        &Device::default(),
    )
    .unwrap();
    // As burn splits a loader across devices.
    let devices = vec![Device::default(); 3];
    let parts = split_dataloader(Arc::new(burn), &devices);
    assert_eq!(
        parts.iter().map(|p| p.num_items()).collect::<Vec<_>>(),
        [10, 10, 10]
    );
    let mut seen = BTreeSet::new();
    for part in &parts {
        let mut mine = Vec::new();
        for batch in part.iter() {
            mine.extend(batch.unwrap().info.indices);
        }
        assert_eq!(mine.len(), 10);
        for index in mine {
            assert!(seen.insert(index), "sample {index} is in two slices");
        }
    }
    assert_eq!(seen, (0..IMAGES as u64).collect());

    // A slice of a slice is relative to it, as burn's are; one past the data is an error.
    let nested = parts[1].slice(2, 5);
    let inside: BTreeSet<u64> = nested
        .iter()
        .flat_map(|b| b.unwrap().info.indices)
        .collect();
    assert_eq!(inside, (12..15).collect());
    let beyond = parts[2].slice(5, 20);
    let error = beyond.iter().next().unwrap().unwrap_err();
    assert!(error.to_string().contains("subset 25..40"), "{error}");
}

#[test]
fn to_device_makes_the_batches_on_that_device_from_a_loader_of_its_own() {
    let (f, dataset) = fixture();
    let burn = BurnLoader::images(
        recipe(Arc::clone(&f.store), dataset.clone()),
        &Device::default(),
    )
    .unwrap();
    let autodiff = Device::default().autodiff();
    let moved = burn.to_device(&autodiff);
    assert_eq!(moved.num_items(), IMAGES);
    let mut seen = Vec::new();
    for batch in moved.iter() {
        let batch = batch.unwrap();
        assert_eq!(batch.images.device(), autodiff);
        assert_eq!(batch.targets.device(), autodiff);
        seen.extend(batch.info.indices);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..IMAGES as u64).collect::<Vec<_>>());
    // The original is untouched: its first epoch is still to come.
    assert_eq!(at(burn.state().unwrap()), (0, 0));
}

/// A state's epoch and position, without its order stamp.
fn at(state: LoaderState) -> (u64, u64) {
    (state.epoch, state.position)
}

/// Multi-hot or values labels (f32) are refused as ImageBatch's int targets, not truncated
/// to integers; `float_tensor` takes them as they are.
#[test]
fn float_labels_are_refused_as_class_targets_and_read_as_floats() {
    let device = Device::default();
    let labels = || {
        loader_core::HostTensor::f32(
            loader_core::Buffer::from(vec![0.0f32, 1.0, 1.0, 0.5]),
            vec![2, 2],
        )
        .unwrap()
    };
    let err = targets_tensor(labels(), &device).unwrap_err().to_string();
    assert!(
        err.contains("the labels are float32 values of shape [2, 2]")
            && err.contains("float_tensor"),
        "{err}"
    );
    let floats = float_tensor::<2>(labels(), &device).unwrap();
    assert_eq!(
        floats.into_data().as_slice::<f32>().unwrap(),
        [0.0, 1.0, 1.0, 0.5]
    );
}
