#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! Exact resume and rank splits over shards, in shard-local and global order: proptest
//! over seeds, world sizes, ranks, batch sizes and cut points. `LOADER_PROPTEST_CASES=N`
//! runs N cases (default 96).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use loader_core::webdataset::WebDataset;
use loader_core::{DataLoader, Dataset, DynStorage, RawBatch, SampleInfo, ShardOrder, from_url};
use loader_testkit::DatasetSpec;
use proptest::prelude::*;

const IMAGES: usize = 61;

/// Shards of uneven size (61 samples in 5), chunks of about 4 samples.
fn served() -> &'static (tempfile::TempDir, DynStorage, Dataset) {
    static SERVED: OnceLock<(tempfile::TempDir, DynStorage, Dataset)> = OnceLock::new();
    SERVED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(IMAGES, 3)
            .write_shards(dir.path(), 5)
            .unwrap();
        let store = from_url(
            &dir.path().to_string_lossy(),
            Vec::<(String, String)>::new(),
        )
        .unwrap();
        let url = format!("{}/shard-{{000000..000004}}.tar", dir.path().display());
        let (_, dataset) = WebDataset::new()
            .cache_dir(None)
            .chunk_bytes(4 * 2_000)
            .load_url_blocking(&url, Vec::<(String, String)>::new())
            .unwrap();
        (dir, store, dataset)
    })
}

type Loader = DataLoader<u64, Vec<u64>>;

fn loader(seed: u64, order: ShardOrder, rank: usize, world: usize, batch: usize) -> Loader {
    let (_, store, dataset) = served();
    DataLoader::builder(Arc::clone(store), dataset.clone())
        .map(
            |_: Bytes, info: &SampleInfo| Ok(info.index),
            |raw: RawBatch<u64>| Ok(raw.samples.iter().map(|(_, i)| *i).collect()),
        )
        .batch_size(batch)
        .shuffle(true)
        .seed(seed)
        .shard_order(order)
        .shuffle_buffer(6)
        .distributed(rank, world)
        .decode_threads(1)
        .build()
        .unwrap()
}

fn pass(loader: &mut Loader) -> Vec<u64> {
    loader.flat_map(|b| b.unwrap()).collect()
}

fn cases() -> u32 {
    std::env::var("LOADER_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn resuming_anywhere_delivers_exactly_the_rest(
        seed in 0u64..1000,
        global in any::<bool>(),
        world in 1usize..4,
        rank_pick in 0usize..4,
        batch in 1usize..9,
        cut_pick in 0usize..100,
        epoch in 0u64..3,
    ) {
        let order = if global { ShardOrder::Global } else { ShardOrder::Local };
        let rank = rank_pick % world;
        let mut whole = loader(seed, order, rank, world, batch);
        whole.set_epoch(epoch);
        let batches = whole.len();
        let all = pass(&mut whole);
        let next_epoch = pass(&mut whole);
        // Global batches of world x batch; the last one shared out evenly (or padded to one
        // sample each when it has fewer than the ranks).
        prop_assert!((IMAGES / world..=IMAGES.div_ceil(world)).contains(&all.len()));
        prop_assert_eq!(batches, IMAGES.div_ceil(world * batch));

        let cut = cut_pick % (batches + 1);
        let mut first = loader(seed, order, rank, world, batch);
        first.set_epoch(epoch);
        let head: Vec<u64> = (&mut first).take(cut).flat_map(|b| b.unwrap()).collect();
        let state = first.state().unwrap();
        drop(first);
        let mut resumed = loader(seed, order, rank, world, batch);
        resumed.resume(state.clone()).unwrap();
        resumed.set_epoch(state.epoch); // as a training loop would: keeps the position
        let mut rest = pass(&mut resumed);
        if cut == batches {
            // The state pointed at the next epoch already.
            prop_assert_eq!(&head, &all);
            prop_assert_eq!(rest, next_epoch);
        } else {
            let mut joined = head;
            joined.append(&mut rest);
            prop_assert_eq!(&joined, &all);
            prop_assert_eq!(pass(&mut resumed), next_epoch);
        }
    }

    #[test]
    fn ranks_read_disjoint_samples_that_cover_the_epoch(
        seed in 0u64..1000,
        global in any::<bool>(),
        world in 1usize..5,
    ) {
        let order = if global { ShardOrder::Global } else { ShardOrder::Local };
        let mut count = vec![0usize; IMAGES];
        for rank in 0..world {
            for i in pass(&mut loader(seed, order, rank, world, 4)) {
                count[i as usize] += 1;
            }
        }
        prop_assert!(count.iter().all(|&c| c >= 1), "a sample no rank read: {:?}", count);
        let repeats: usize = count.iter().map(|c| c - 1).sum();
        // Only a last global batch of fewer samples than ranks is padded: one each.
        let tail = IMAGES % (world * 4);
        let padded = if tail > 0 && tail < world { world - tail } else { 0 };
        prop_assert_eq!(repeats, padded, "only the padding repeats");
    }
}
