#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! End to end through the in-process S3 server: order, labels, strategies, errors, resume.

mod common;
use common::refused;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use loader_core::sampler::{BatchSampler, RandomSampler};
use loader_core::storage::layer::FaultConfig;
use loader_core::{
    BatchMemory, DataLoader, Dataset, DynStorage, Error, ErrorPolicy, Fetch, LabelKind, LentBlock,
    LoaderState, MemoryError, Order, Pipeline, StorageExt, from_url,
};
use loader_testkit::watchdog::within;
use loader_testkit::{Bucket, DatasetSpec, S3Server};
use proptest::prelude::*;

const IMAGES: usize = 40;
const HANG_LIMIT: Duration = Duration::from_secs(30);

/// The tiny dataset in a bucket of its own, and the dataset listed from it.
fn fixture() -> (Bucket, Dataset) {
    let bucket = Bucket::new(&DatasetSpec::tiny(IMAGES, 4).with_seed(5)).unwrap();
    let dataset = Dataset::image_folder_blocking(&*bucket.store).unwrap();
    (bucket, dataset)
}

fn small() -> Pipeline {
    Pipeline::builder()
        .resize(32)
        .center_crop(32)
        .to_tensor_normalized(
            &loader_core::decoder::IMAGENET_MEAN,
            &loader_core::decoder::IMAGENET_STD,
        )
        .build()
        .unwrap()
}

fn strategies() -> [Fetch; 3] {
    [
        Fetch::Sequential { workers: 2 },
        Fetch::Threads { threads: 4 },
        Fetch::Async { max_in_flight: 16 },
    ]
}

/// (epoch, index, label, first value) of every delivered sample, for `epochs` passes.
fn run(loader: &mut DataLoader, epochs: usize) -> Vec<(u64, u64, i64, u32)> {
    let mut out = Vec::new();
    for _ in 0..epochs {
        for batch in &mut *loader {
            let batch = batch.unwrap();
            let per = batch.shape[1..].iter().product::<usize>();
            let values = batch.as_f32().unwrap();
            assert_eq!(values.len(), batch.len() * per);
            for (i, (&index, &label)) in batch
                .info
                .indices
                .iter()
                .zip(batch.labels.as_i64().unwrap())
                .enumerate()
            {
                out.push((batch.info.epoch, index, label, values[i * per].to_bits()));
            }
        }
    }
    out
}

#[test]
fn every_strategy_delivers_each_sampled_index_once_in_order_with_its_label() {
    let (f, dataset) = fixture();
    assert_eq!(dataset.len(), IMAGES);
    assert_eq!(dataset.classes().len(), 4);
    let mut runs = Vec::new();
    for fetch in strategies() {
        let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
            .batch_size(6)
            .shuffle(true)
            .seed(11)
            .fetch(fetch)
            .decode_threads(2)
            .transform(small())
            .build()
            .unwrap();
        assert_eq!(loader.len(), 7);
        let plans: Vec<Vec<u64>> = (0..2).map(|e| loader.planned(e).collect()).collect();
        for order in &plans {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..IMAGES as u64).collect::<Vec<_>>());
        }
        assert_ne!(plans[0], plans[1], "each epoch its own permutation");
        let delivered = run(&mut loader, 2);
        for epoch in 0..2u64 {
            let order = plans[epoch as usize].clone();
            let got: Vec<u64> = delivered
                .iter()
                .filter(|d| d.0 == epoch)
                .map(|d| d.1)
                .collect();
            assert_eq!(
                got, order,
                "{fetch:?}, epoch {epoch}: not the sampler's order"
            );
        }
        for &(_, index, label, _) in &delivered {
            let item = dataset.get(index as usize).unwrap();
            assert_eq!(item.label, label);
            assert!(
                item.key.starts_with(&format!("class_{label:03}/")),
                "{}",
                item.key
            );
        }
        runs.push(delivered);
    }
    assert!(
        runs.windows(2).all(|w| w[0] == w[1]),
        "strategies delivered different samples"
    );
}

#[test]
fn reused_batch_buffers_hold_the_same_values_as_fresh_ones() {
    let (f, dataset) = fixture();
    let build = || {
        DataLoader::builder(Arc::clone(&f.store), dataset.clone())
            .batch_size(6)
            .transform(small())
            .build()
            .unwrap()
    };
    // Every batch kept alive: none can reuse another's buffer.
    let held: Vec<_> = build().map(Result::unwrap).collect();
    assert_eq!(held.len(), 7);
    // Each batch dropped before the next: the loader writes into the dropped buffers.
    let mut reusing = build();
    for (i, batch) in reusing.by_ref().enumerate() {
        let batch = batch.unwrap();
        assert_eq!(batch.shape, held[i].shape);
        assert_eq!(batch.info.indices, held[i].info.indices);
        assert!(batch.as_f32() == held[i].as_f32(), "batch {i} differs");
    }
    // A batch may outlive its loader.
    let mut loader = build();
    let first = loader.next().unwrap().unwrap();
    drop(loader);
    assert!(first.as_f32() == held[0].as_f32());
}

#[test]
fn a_batch_handed_over_as_tensors_keeps_its_values_and_returns_its_buffer() {
    let (f, dataset) = fixture();
    let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(6)
        .transform(small())
        .build()
        .unwrap();
    let batch = loader.next().unwrap().unwrap();
    let (values, labels, at) = (
        batch.as_f32().unwrap().to_vec(),
        batch.labels.as_i64().unwrap().to_vec(),
        { batch.as_f32().unwrap().as_ptr() as usize },
    );
    let tensors = batch.into_tensors();
    assert_eq!(
        tensors.images.as_bytes().as_ptr() as usize,
        at,
        "handed over, not copied"
    );
    assert_eq!(tensors.images.as_f32().unwrap(), &values[..]);
    assert_eq!(tensors.labels.as_i64().unwrap(), &labels[..]);
    let [n, c, h, w] = [6, 3, 32, 32];
    assert_eq!(tensors.images.shape(), &[n, c, h, w]);
    assert_eq!(
        tensors.images.strides(),
        [c * h * w * 4, h * w * 4, w * 4, 4]
    );
    // A held tensor is never written into; a dropped one's buffer takes a later batch.
    let second = loader.next().unwrap().unwrap();
    assert_ne!(second.as_f32().unwrap().as_ptr() as usize, at);
    assert_eq!(tensors.images.as_f32().unwrap(), &values[..]);
    drop(second);
    drop(tensors); // the last buffer handed back is the first taken
    let third = loader.next().unwrap().unwrap();
    assert_eq!(
        third.as_f32().unwrap().as_ptr() as usize,
        at,
        "the dropped tensor's buffer was not reused"
    );
}

/// Blocks of a `Vec<u32>` (aligned for f32), counted as lent and as given back; refuses
/// the `refuse`-th request.
struct Lender {
    lent: std::sync::atomic::AtomicUsize,
    back: Arc<std::sync::atomic::AtomicUsize>,
    refuse: Option<usize>,
}

struct Block(Vec<u32>, Arc<std::sync::atomic::AtomicUsize>);

impl LentBlock for Block {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl BatchMemory for Lender {
    fn block(&self, bytes: usize) -> Result<Box<dyn LentBlock>, MemoryError> {
        let n = self.lent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if Some(n) == self.refuse {
            return Err(MemoryError::Refused {
                lender: "the test's lender".into(),
                bytes,
                source: "out of pinned memory".into(),
            });
        }
        Ok(Box::new(Block(
            vec![0; bytes.div_ceil(4)],
            Arc::clone(&self.back),
        )))
    }
}

#[test]
fn batches_are_written_into_lent_memory_and_given_back_to_its_lender() {
    let (f, dataset) = fixture();
    let own: Vec<_> = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(6)
        .transform(small())
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for lend_first in [true, false] {
        let back = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lender = Arc::new(Lender {
            lent: Default::default(),
            back: Arc::clone(&back),
            refuse: None,
        });
        let builder = DataLoader::builder(Arc::clone(&f.store), dataset.clone()).batch_size(6);
        let builder = if lend_first {
            builder.batch_memory(lender.clone()).transform(small())
        } else {
            builder.transform(small()).batch_memory(lender.clone())
        };
        let lent: Vec<_> = within(HANG_LIMIT, "an epoch into lent memory", move || {
            builder
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        });
        assert_eq!(
            lender.lent.load(std::sync::atomic::Ordering::SeqCst),
            own.len()
        );
        for (i, (batch, own)) in lent.iter().zip(&own).enumerate() {
            assert_eq!(batch.info.indices, own.info.indices);
            assert!(batch.as_f32() == own.as_f32(), "batch {i} differs");
        }
        let tensors: Vec<_> = lent.into_iter().map(|b| b.into_tensors()).collect();
        assert!(
            tensors.iter().all(|t| t.images.lent().is_some_and(|b| {
                let any: &dyn std::any::Any = b;
                any.is::<Block>()
            })),
            "the lender finds its own blocks in the batches"
        );
        assert_eq!(
            back.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "held: not given back"
        );
        drop(tensors);
        assert_eq!(back.load(std::sync::atomic::Ordering::SeqCst), own.len());
    }

    // A lender that refuses fails its batch with the cause; the state points at that
    // batch, so a resume reads it again.
    let lender = Arc::new(Lender {
        lent: Default::default(),
        back: Default::default(),
        refuse: Some(1),
    });
    let builder = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(6)
        .transform(small())
        .batch_memory(lender);
    let (first, err, state) = within(HANG_LIMIT, "a refusing lender", move || {
        let mut loader = builder.build().unwrap();
        let first = loader.next().unwrap().unwrap();
        let err = loader.next().unwrap().unwrap_err();
        (first.info.indices, err.to_string(), loader.state().unwrap())
    });
    assert_eq!(first, own[0].info.indices);
    assert!(
        err.contains("the test's lender could not lend") && err.contains("out of pinned memory"),
        "{err}"
    );
    assert_eq!(
        at(state).1,
        6,
        "the refused batch is not counted as delivered"
    );
}

#[test]
fn skip_delivers_or_reports_every_index_exactly_once() {
    let (f, dataset) = fixture();
    let faulty =
        Arc::new(Arc::clone(&f.store).with_faults(FaultConfig::transient(0.15, 21))) as DynStorage;
    let mut loader = DataLoader::builder(faulty, dataset.clone())
        .batch_size(8)
        .retry(None) // so faults reach the error policy
        .error_policy(ErrorPolicy::Skip {
            max_failures: IMAGES,
        })
        .transform(small())
        .build()
        .unwrap();
    let mut seen = Vec::new();
    let mut skipped = 0;
    for batch in &mut loader {
        let batch = batch.unwrap();
        seen.extend(batch.info.indices.iter().copied());
        for e in &batch.info.skipped {
            assert!(e.to_string().contains(&*e.info.key), "{e}");
            seen.push(e.info.index);
            skipped += 1;
        }
    }
    assert!(skipped > 0, "no fault was injected");
    seen.sort_unstable();
    assert_eq!(seen, (0..IMAGES as u64).collect::<Vec<_>>());
}

#[test]
fn a_failed_batch_ends_the_pass_names_the_key_and_is_fetched_again_on_resume() {
    let (f, _) = fixture();
    let missing = Dataset::from_pairs([
        ("class_000/img_000000.jpg", 0),
        ("class_000/nope.jpg", 0),
        ("class_001/img_000001.jpg", 1),
    ]);
    let mut loader = DataLoader::builder(Arc::clone(&f.store), missing.clone())
        .batch_size(1)
        .transform(small())
        .build()
        .unwrap();
    let first: Vec<_> = (&mut loader).collect();
    assert_eq!(first.len(), 2, "the pass ends at the failed batch");
    let err = first[1].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("class_000/nope.jpg") && err.contains("not found"),
        "{err}"
    );
    let at_failure = loader.state().unwrap();
    assert_eq!(at(at_failure.clone()), (0, 1));
    // The next pass is the next epoch: the loader stays usable.
    assert_eq!(loader.epoch(), 1);
    // Resuming at the failure fetches that batch again.
    loader.resume(at_failure).unwrap();
    let again = loader.next().unwrap();
    assert!(again.unwrap_err().to_string().contains("nope.jpg"));
    drop(f.server);
}

#[test]
fn dropping_mid_epoch_returns() {
    let (f, dataset) = fixture();
    for fetch in strategies() {
        let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
            .batch_size(4)
            .fetch(fetch)
            .transform(small())
            .build()
            .unwrap();
        loader.next().unwrap().unwrap();
        within(
            HANG_LIMIT,
            &format!("{fetch:?}: drop mid-epoch"),
            move || drop(loader),
        );
    }
}

#[test]
fn nonsense_settings_are_errors() {
    let (f, dataset) = fixture();
    let build = |b: loader_core::DataLoaderBuilder| b.build().map(|_| ()).unwrap_err().to_string();
    let base = || DataLoader::builder(Arc::clone(&f.store), dataset.clone());
    assert!(build(base().batch_size(0)).contains("batch_size"));
    assert!(build(base().prefetch(0)).contains("prefetch"));
    assert!(
        build(
            base()
                .shuffle(true)
                .sampler(RandomSampler::new(IMAGES, 1).unwrap())
        )
        .contains("not both")
    );
    assert!(build(base().batch_size(100).drop_last(true)).contains("no batch"));
    assert!(
        build(DataLoader::builder(
            Arc::clone(&f.store),
            Dataset::default()
        ))
        .contains("empty")
    );
}

#[test]
fn as_completed_refuses_state() {
    let (f, dataset) = fixture();
    let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .order(Order::AsCompleted)
        .batch_size(8)
        .transform(small())
        .build()
        .unwrap();
    let all: HashSet<u64> = (&mut loader)
        .flat_map(|b| b.unwrap().info.indices)
        .collect();
    assert_eq!(all.len(), IMAGES);
    assert!(matches!(loader.state(), Err(Error::State(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loader_is_a_stream_too() {
    use futures::StreamExt;
    let (f, dataset) = tokio::task::spawn_blocking(fixture).await.unwrap();
    let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(10)
        .runtime(tokio::runtime::Handle::current())
        .transform(small())
        .build()
        .unwrap();
    let mut count = 0;
    while let Some(batch) = StreamExt::next(&mut loader).await {
        count += batch.unwrap().len();
    }
    assert_eq!(count, IMAGES);
    drop(loader);
    tokio::task::spawn_blocking(move || drop(f)).await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn resume_equals_the_uninterrupted_run(cut in 0usize..9, shuffle: bool, strategy in 0usize..3, rank in 0usize..2) {
        let dir = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(30, 3).write(dir.path()).unwrap();
        let store = from_url(&dir.path().to_string_lossy(), Vec::<(String, String)>::new()).unwrap();
        let dataset = Dataset::image_folder_blocking(&*store).unwrap();
        let make = || {
            let builder = DataLoader::builder(Arc::clone(&store), dataset.clone())
                .batch_size(4)
                .fetch(strategies()[strategy])
                .decode_threads(2)
                .transform(small());
            let sampler = loader_core::DistributedSampler::new(30, rank, 2).shuffle(shuffle).seed(3).build().unwrap();
            builder.sampler(sampler).build().unwrap()
        };
        let mut whole = make();
        let expected = run(&mut whole, 2);

        let mut first = make();
        let mut got = Vec::new();
        for batch in (&mut first).take(cut) {
            let batch = batch.unwrap();
            let per = batch.shape[1..].iter().product::<usize>();
            for (i, (&index, &label)) in batch.info.indices.iter().zip(batch.labels.as_i64().unwrap()).enumerate() {
                got.push((batch.info.epoch, index, label, batch.as_f32().unwrap()[i * per].to_bits()));
            }
        }
        let saved = serde_json::to_string(&first.state().unwrap()).unwrap();
        drop(first);
        let mut second = make();
        second.resume(serde_json::from_str(&saved).unwrap()).unwrap();
        // Finish the interrupted epoch (if it was not finished), then one more.
        let epochs_left = if got.len() == 15 { 1 } else { 2 };
        got.extend(run(&mut second, epochs_left));
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn batch_sampler_and_loader_agree_on_length() {
    let (f, dataset) = fixture();
    let loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(7)
        .drop_last(true)
        .build()
        .unwrap();
    let sampler = RandomSampler::new(IMAGES, 0).unwrap();
    assert_eq!(loader.len(), BatchSampler::new(sampler, 7, true).len());
}

#[test]
fn samples_of_different_sizes_cannot_share_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = DatasetSpec::tiny(4, 1);
    spec.width = (40, 80); // sizes vary per image
    spec.write(dir.path()).unwrap();
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let dataset = Dataset::image_folder_blocking(&*store).unwrap();
    // The default transform only decodes, so sizes differ.
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(4)
        .build()
        .unwrap();
    let err = loader.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("key \"class_000/img_00000"), "{err}");
    assert!(err.contains("fixed-size crop"), "{err}");
}

#[test]
fn image_folder_follows_torchvision() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (path, bytes) in [
        ("b_dogs/2.JPG", &b"x"[..]),
        ("b_dogs/1.jpeg", b"x"),
        ("b_dogs/notes.txt", b"x"),
        ("a_cats/nested/3.png", b"x"),
        ("README.jpg", b"x"), // directly under the root: ignored
    ] {
        std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
        std::fs::write(root.join(path), bytes).unwrap();
    }
    let store = from_url(&root.to_string_lossy(), Vec::<(String, String)>::new()).unwrap();
    let dataset = Dataset::image_folder_blocking(&*store).unwrap();
    assert_eq!(dataset.classes(), ["a_cats", "b_dogs"]);
    let items: Vec<(String, i64)> = dataset
        .iter()
        .map(|i| (i.key.to_string(), i.label.class().unwrap_or(-1)))
        .collect();
    assert_eq!(
        items,
        [
            ("a_cats/nested/3.png".into(), 0),
            ("b_dogs/1.jpeg".into(), 1),
            ("b_dogs/2.JPG".into(), 1)
        ]
    );

    std::fs::create_dir_all(root.join("c_empty")).unwrap();
    std::fs::write(root.join("c_empty/readme.md"), b"x").unwrap();
    refused(Dataset::image_folder_blocking(&*store), &["c_empty"]);
}

/// A manifest with offset and length columns: samples packed in one file, each read (and
/// coalesced with its neighbours) as its own byte range, in every strategy.
#[test]
fn a_manifest_with_offsets_reads_samples_packed_in_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut packed = Vec::new();
    let mut manifest = String::from("key,label,offset,length\n");
    for i in 0..40u64 {
        let text = format!("sample {i} ").repeat(1 + i as usize % 5);
        manifest.push_str(&format!(
            "pack.bin,{},{},{}\n",
            i % 4,
            packed.len(),
            text.len()
        ));
        packed.extend_from_slice(text.as_bytes());
    }
    std::fs::write(dir.path().join("pack.bin"), &packed).unwrap();
    std::fs::write(dir.path().join("m.csv"), manifest).unwrap();
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let dataset = Dataset::manifest_blocking(&*store, "m.csv").unwrap();
    for fetch in [
        Fetch::Async { max_in_flight: 8 },
        Fetch::Threads { threads: 3 },
        Fetch::Sequential { workers: 2 },
    ] {
        let loader = DataLoader::builder(Arc::clone(&store), dataset.clone())
            .map(
                |bytes: bytes::Bytes, info: &loader_core::SampleInfo| {
                    let text = String::from_utf8(bytes.to_vec())?;
                    assert!(
                        text.starts_with(&format!("sample {} ", info.index)),
                        "{info}: {text:?}"
                    );
                    assert_eq!(info.label, info.index as i64 % 4);
                    Ok(info.index)
                },
                |raw: loader_core::RawBatch<u64>| {
                    Ok(raw.samples.into_iter().map(|(_, i)| i).collect::<Vec<_>>())
                },
            )
            .batch_size(6)
            .shuffle(true)
            .fetch(fetch)
            .build()
            .unwrap();
        let mut seen: Vec<u64> = loader.flat_map(|b| b.unwrap()).collect();
        seen.sort();
        assert_eq!(seen, (0..40).collect::<Vec<_>>(), "{fetch:?}");
    }
}

#[test]
fn a_subset_reads_its_range_once_per_epoch_and_refuses_what_it_cannot_read() {
    let (f, dataset) = fixture();
    let build = |range: std::ops::Range<usize>, shuffle| {
        DataLoader::builder(Arc::clone(&f.store), dataset.clone())
            .batch_size(4)
            .shuffle(shuffle)
            .seed(9)
            .subset(range)
            .transform(small())
            .build()
    };
    for shuffle in [false, true] {
        let mut loader = build(10..25, shuffle).unwrap();
        assert_eq!((loader.samples_per_epoch(), loader.len()), (15, 4));
        let epochs: Vec<Vec<u64>> = (0..2)
            .map(|_| {
                (&mut loader)
                    .flat_map(|b| b.unwrap().info.indices)
                    .collect()
            })
            .collect();
        for seen in &epochs {
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (10..25).collect::<Vec<u64>>());
        }
        assert_eq!(
            epochs[0] != epochs[1],
            shuffle,
            "shuffled per epoch only if asked"
        );
    }
    for range in [30..50, 5..5] {
        let error = build(range, true).unwrap_err().to_string();
        assert!(error.contains("subset"), "{error}");
    }
    let error = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .subset(0..10)
        .distributed(0, 2)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("not both"), "{error}");
}

#[test]
fn to_epoch_start_drops_the_rest_of_an_epoch_but_keeps_a_finished_one() {
    let (f, dataset) = fixture();
    let mut loader = DataLoader::builder(Arc::clone(&f.store), dataset.clone())
        .batch_size(8)
        .shuffle(true)
        .transform(small())
        .build()
        .unwrap();
    // Nothing read yet: epoch 0 stays.
    assert_eq!(loader.to_epoch_start(), 0);
    let first = loader.next().unwrap().unwrap();
    assert_eq!(first.info.epoch, 0);
    // Part way: the next pass is epoch 1, whole.
    assert_eq!(loader.to_epoch_start(), 1);
    let epoch: Vec<_> = (&mut loader).map(|b| b.unwrap()).collect();
    assert!(epoch.iter().all(|b| b.info.epoch == 1));
    assert_eq!(epoch.iter().map(|b| b.len()).sum::<usize>(), IMAGES);
    // All of epoch 2 but the end of the pass: the next pass is epoch 3, not empty.
    let epoch2: Vec<_> = (&mut loader).take(IMAGES / 8).map(|b| b.unwrap()).collect();
    assert!(epoch2.iter().all(|b| b.info.epoch == 2));
    assert_eq!(loader.to_epoch_start(), 3);
    let epoch3: Vec<_> = (&mut loader).map(|b| b.unwrap()).collect();
    assert_eq!(epoch3.len(), IMAGES / 8);
    assert!(epoch3.iter().all(|b| b.info.epoch == 3));
}

/// A state's epoch and position, without its order stamp.
fn at(state: LoaderState) -> (u64, u64) {
    (state.epoch, state.position)
}

/// Multi-label and values manifests over the test kit's S3 server: each shuffled batch's
/// labels tensor holds each sample's own row (multi-hot, or its numbers), as torch's
/// default collate would stack them, in two shuffled epochs.
#[test]
fn multi_label_and_values_manifests_batch_each_samples_own_labels() {
    let dir = tempfile::tempdir().unwrap();
    let items = DatasetSpec::tiny(23, 3)
        .write(&dir.path().join("data"))
        .unwrap();
    // Sample i: the classes named c{i % 5} and c{(i + 2) % 5}; the values [i / 10, -i].
    let mut multi = String::new();
    let mut values = String::new();
    for (i, item) in items.iter().enumerate() {
        multi.push_str(&format!(
            "{{\"key\":\"{}\",\"label\":[\"c{}\",\"c{}\"]}}\n",
            item.key,
            i % 5,
            (i + 2) % 5
        ));
        values.push_str(&format!(
            "{},{} {}\n",
            item.key,
            i as f32 / 10.0,
            -(i as f32)
        ));
    }
    std::fs::write(dir.path().join("data/multi.jsonl"), multi).unwrap();
    std::fs::write(dir.path().join("data/values.csv"), values).unwrap();
    let server = S3Server::start(dir.path()).unwrap();
    let store = from_url("s3://data", server.options()).unwrap();
    let read = |key: &str, kind| Dataset::manifest_as_blocking(&*store, key, kind, None).unwrap();
    let multi = read("multi.jsonl", LabelKind::MultiLabel);
    let values = read("values.csv", LabelKind::Values);
    assert_eq!(multi.classes(), ["c0", "c1", "c2", "c3", "c4"]);
    for (dataset, width) in [(multi, 5usize), (values, 2)] {
        let expected = |index: u64| -> Vec<f32> {
            let i = index as usize;
            if width == 5 {
                let mut row = vec![0.0; 5];
                row[i % 5] = 1.0;
                row[(i + 2) % 5] = 1.0;
                row
            } else {
                vec![i as f32 / 10.0, -(i as f32)]
            }
        };
        let mut loader = DataLoader::builder(Arc::clone(&store), dataset)
            .transform(small())
            .batch_size(4)
            .shuffle(true)
            .seed(3)
            .build()
            .unwrap();
        let epochs = within(HANG_LIMIT * 4, "two epochs", move || {
            (0..2)
                .map(|epoch| {
                    loader.set_epoch(epoch);
                    let mut rows = Vec::new();
                    for batch in &mut loader {
                        let batch = batch.unwrap();
                        assert_eq!(batch.labels.shape(), [batch.len(), width]);
                        let values = batch.labels.as_f32().unwrap().chunks(width);
                        rows.extend(
                            batch
                                .info
                                .indices
                                .iter()
                                .copied()
                                .zip(values.map(<[f32]>::to_vec)),
                        );
                    }
                    rows
                })
                .collect::<Vec<_>>()
        });
        for rows in epochs {
            assert_eq!(rows.len(), 23);
            for (index, row) in rows {
                assert_eq!(row, expected(index), "sample {index}");
            }
        }
    }
}
