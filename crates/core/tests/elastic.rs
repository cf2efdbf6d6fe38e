#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Exactly once across any change of world size: random sequences of runs, each on its own
//! world size and per-rank batch size, over a mixture of three datasets on real stores (local
//! files, the in-process S3 server, WebDataset shards read in lanes), under each stop rule,
//! mixed or per-source batches. Each run steps its ranks in lockstep (as DDP does), saves the
//! state of a random rank after a random step (every rank's must be the same), reads on a
//! step or two past it and is then dropped, as a crashed job's processes are: those steps were
//! never committed. The next run, on another world size, resumes from the saved state; some
//! change the weights and start a new segment. Over all runs, the committed samples are
//! exactly the positions of the global order from the first to the last state, each once,
//! each the sample a one-rank loader of the same order names (so the order does not depend on
//! the world size); every prefix of a segment holds each source within one of its weight; and
//! within a source-epoch no sample comes twice, across segments too.
//!
//! Half the cases read token streams instead: three copies of a Megatron-LM dataset
//! (megatron-core's own files, on local disk and behind the S3 server) cut in blocks of 8
//! tokens, each block's fetched bytes checked against the file, so the committed blocks of
//! every rank, in order, are the uninterrupted run's token stream: none lost, none
//! repeated, every block the same bytes.
//!
//! 96 cases by default; `LOADER_PROPTEST_CASES=N` runs N. Every run is under the watchdog.

mod common;
use common::refused;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use loader_core::webdataset::WebDataset;
use loader_core::{
    Batching, DataLoader, Dataset, DynStorage, LoaderState, RawBatch, SampleInfo, Source, StopRule,
    StorageExt, from_url,
};
use loader_testkit::watchdog::within;
use loader_testkit::{DatasetSpec, S3Server};
use proptest::prelude::*;

/// Three sources: files on local disk, files behind the S3 server, shards on disk; or
/// three token datasets.
struct World {
    _dir: tempfile::TempDir,
    _server: S3Server,
    sources: Vec<(DynStorage, Dataset)>,
    /// Samples of each source.
    sizes: [usize; 3],
}

const SIZES: [usize; 3] = [37, 23, 30];

/// Tokens a block trains on, in the token world.
const BLOCK: u64 = 8;

fn world_of(tokens: bool) -> &'static World {
    if tokens { token_world() } else { served() }
}

/// The megatron-core fixture `u16` three times: on local disk, behind the S3 server, on
/// local disk again, each cut in blocks of [`BLOCK`].
fn token_world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for name in ["one", "two", "three"] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            for ext in ["idx", "bin"] {
                let file = format!("u16.{ext}");
                std::fs::copy(megatron_fixture().join(&file), d.join(&file)).unwrap();
            }
        }
        let server = S3Server::start(dir.path()).unwrap();
        let mut options = loader_core::LoaderOptions::default();
        options
            .set("source.block_size", &BLOCK.to_string())
            .unwrap();
        let local = |name: &str| {
            let url = dir.path().join(name).to_string_lossy().into_owned();
            loader_core::open_with(&url, Vec::<(String, String)>::new(), &options).unwrap()
        };
        let s3 = loader_core::open_with("s3://two", server.options(), &options).unwrap();
        let sources = vec![local("one"), s3, local("three")];
        let sizes = [0, 1, 2].map(|s| sources[s].1.len());
        World {
            sources,
            sizes,
            _dir: dir,
            _server: server,
        }
    })
}

fn megatron_fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/megatron")
}

/// The bytes block `index` of the token world's mixture must be: every source is the same
/// file, so its block `index - offset` of that file.
fn block_bytes(index: u64) -> Bytes {
    static BIN: OnceLock<Vec<u8>> = OnceLock::new();
    let bin = BIN.get_or_init(|| std::fs::read(megatron_fixture().join("u16.bin")).unwrap());
    let block = index % token_world().sizes[0] as u64;
    let start = (block * BLOCK * 2) as usize;
    Bytes::copy_from_slice(&bin[start..start + (BLOCK as usize + 1) * 2])
}

fn served() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for (name, n) in [("local", SIZES[0]), ("data", SIZES[1])] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            for i in 0..n {
                std::fs::write(d.join(format!("{i}.bin")), format!("{name}{i}")).unwrap();
            }
        }
        let shards = dir.path().join("shards");
        DatasetSpec::tiny(SIZES[2], 3)
            .write_shards(&shards, 3)
            .unwrap();
        let server = S3Server::start(dir.path()).unwrap();
        let files = |n: usize| Dataset::from_pairs((0..n).map(|i| (format!("{i}.bin"), 0)));
        let local = from_url(
            &dir.path().join("local").to_string_lossy(),
            Vec::<(String, String)>::new(),
        )
        .unwrap();
        let s3 = from_url("s3://data", server.options()).unwrap();
        let url = format!("{}/shard-{{000000..000002}}.tar", shards.display());
        let (shard_store, shard_data) = WebDataset::new()
            .cache_dir(None)
            .chunk_bytes(3 * 2_000)
            .load_url_blocking(&url, Vec::<(String, String)>::new())
            .unwrap();
        // The shards' labels are classes of their own: the mixture's sources must agree,
        // so the check reads every sample as label 0 here.
        let shard_data = Dataset::from_shards(
            shard_data
                .iter()
                .map(|i| loader_core::Item {
                    label: 0.into(),
                    ..i.clone()
                })
                .collect(),
            Vec::new(),
            shard_data.shards().to_vec(),
        )
        .unwrap();
        World {
            sources: vec![
                (local, files(SIZES[0])),
                (s3, files(SIZES[1])),
                (shard_store, shard_data),
            ],
            sizes: SIZES,
            _dir: dir,
            _server: server,
        }
    })
}

/// One run: its world size, per-rank batch size, the steps it commits, the steps it reads
/// past its checkpoint before it crashes, the rank whose state is saved, and new weights
/// (a new segment) if it changes the mixture.
#[derive(Debug, Clone)]
struct Run {
    world: usize,
    batch: usize,
    steps: usize,
    lost: usize,
    saver: usize,
    weights: Option<[u8; 3]>,
}

#[derive(Debug, Clone)]
struct Case {
    weights: [u8; 3],
    stop: StopRule,
    per_stream: bool,
    shuffle: bool,
    seed: u64,
    runs: Vec<Run>,
    /// Lanes left to the loader (chosen by the first run's world size) rather than 4.
    auto_lanes: bool,
    /// Token datasets' blocks rather than files and shards.
    tokens: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let run = (
        1usize..=4,
        1usize..=6,
        0usize..=12,
        0usize..=2,
        0usize..4,
        prop::option::weighted(0.25, prop::array::uniform3(0u8..4)),
    )
        .prop_map(|(world, batch, steps, lost, saver, weights)| Run {
            world,
            batch,
            steps,
            lost,
            saver: saver % world,
            weights,
        });
    (
        prop::array::uniform3(0u8..4),
        0u8..5,
        20u64..120,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
        prop::collection::vec(run, 1..=4),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(weights, stop, n, per_stream, shuffle, seed, runs, auto_lanes, tokens)| Case {
                weights,
                stop: match stop {
                    0 => StopRule::FirstExhausted,
                    1 => StopRule::AllExhausted,
                    2 => StopRule::AllExhaustedWithoutReplacement,
                    3 => StopRule::SamplesPerEpoch(n),
                    _ => StopRule::CycleForever,
                },
                per_stream,
                shuffle,
                seed,
                runs,
                auto_lanes,
                tokens,
            },
        )
}

/// What a rank delivered in one batch: (epoch position, dataset index) of each sample
/// other than padding.
#[derive(Debug)]
struct Seen {
    epoch: u64,
    reads: Vec<(u64, u64)>,
}

type Loader = DataLoader<u64, Seen>;

fn weights_of(w: [u8; 3]) -> [f64; 3] {
    // At least one source weighs something.
    let w = if w.iter().all(|&x| x == 0) {
        [1, 0, 0]
    } else {
        w
    };
    w.map(f64::from)
}

fn loader(case: &Case, weights: [u8; 3], rank: usize, world: usize, batch: usize) -> Loader {
    let sources = world_of(case.tokens)
        .sources
        .iter()
        .zip(weights_of(weights))
        .map(|((store, data), w)| Source::new(Arc::clone(store), data.clone()).weight(w))
        .collect();
    let builder = DataLoader::mixture(sources);
    let tokens = case.tokens;
    let builder = if case.auto_lanes {
        builder
    } else {
        builder.lanes(4)
    };
    builder
        .batch_size(batch)
        .shuffle(case.shuffle)
        .seed(case.seed)
        .stop(case.stop)
        .batching(if case.per_stream {
            Batching::PerStream
        } else {
            Batching::Mixed
        })
        .new_segment(true)
        .distributed(rank, world)
        .decode_threads(1)
        .prefetch(1)
        .map(
            move |bytes: Bytes, info: &SampleInfo| {
                // A token block's bytes are the file's at that block, or the run fails.
                if tokens && bytes != block_bytes(info.index) {
                    return Err(format!("block {} is other bytes", info.index).into());
                }
                Ok(info.index)
            },
            |raw: RawBatch<u64>| {
                let real = raw.samples.len() - raw.padding;
                Ok(Seen {
                    epoch: raw.epoch,
                    reads: raw.samples[..real]
                        .iter()
                        .map(|(info, _)| (info.position, info.index))
                        .collect(),
                })
            },
        )
        .build()
        .unwrap()
}

/// One step of every rank, as DDP takes it: a batch from each, or the end of the pass on
/// all of them (then the next pass, the next epoch, begins); `None` when no rank has a
/// batch twice running (an epoch cannot be empty, so that would be a bug).
fn step(ranks: &mut [Loader]) -> Vec<Seen> {
    for _ in 0..2 {
        let batches: Vec<Option<Seen>> = ranks
            .iter_mut()
            .map(|l| l.next().map(|b| b.unwrap()))
            .collect();
        let ended = batches.iter().filter(|b| b.is_none()).count();
        assert!(
            ended == 0 || ended == batches.len(),
            "ranks disagree on the end of the epoch: {ended} of {} ended",
            batches.len()
        );
        if ended == 0 {
            return batches.into_iter().flatten().collect();
        }
    }
    panic!("an epoch with no batch");
}

fn check(case: Case) -> Result<(), TestCaseError> {
    // (epoch, position) -> dataset index, every committed read.
    let mut committed: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    // The reference order of each run: (epoch, position) -> index, from a one-rank loader.
    let mut reference: HashMap<(u64, u64), u64> = HashMap::new();
    let mut state: Option<LoaderState> = None;
    let mut weights = case.weights;
    let mut segments: Vec<(LoaderState, [u8; 3])> = Vec::new();
    for run in &case.runs {
        // A segment starts with the run and with each change of weights (the same weights
        // again are the same mixture: the saved segment goes on).
        let starts_segment = state.is_none()
            || run
                .weights
                .is_some_and(|w| weights_of(w) != weights_of(weights));
        if let Some(w) = run.weights {
            weights = w;
        }
        let mut ranks: Vec<Loader> = (0..run.world)
            .map(|r| loader(&case, weights, r, run.world, run.batch))
            .collect();
        let start = match &state {
            Some(s) => {
                // A checkpoint crosses a process boundary as JSON.
                let s: LoaderState =
                    serde_json::from_str(&serde_json::to_string(s).unwrap()).unwrap();
                for l in &mut ranks {
                    l.resume(s.clone()).unwrap();
                }
                s
            }
            None => LoaderState::at(0, 0),
        };
        if starts_segment {
            segments.push((start.clone(), weights));
        }
        // The order this run reads, as one rank of one reads it (with the same global batch:
        // per-source batching counts its interleave in global batches), resumed with the
        // run's own stamp at its start, which carries its segment and its lanes.
        let mut one = loader(&case, weights, 0, 1, run.world * run.batch);
        one.resume(LoaderState {
            order: Some(ranks[0].order_stamp()),
            ..start.clone()
        })
        .unwrap();
        let segment = one.order_stamp().mixture.unwrap().segment;
        for epoch in start.epoch..start.epoch + 16 {
            let from = if epoch == segment.epoch {
                segment.start
            } else {
                0
            };
            for (k, index) in one.planned(epoch).take(1200).enumerate() {
                reference.insert((epoch, from + k as u64), index);
            }
        }
        for _ in 0..run.steps {
            for seen in step(&mut ranks) {
                for (position, index) in seen.reads {
                    let again = committed.insert((seen.epoch, position), index);
                    prop_assert!(again.is_none(), "({}, {position}) read twice", seen.epoch);
                }
            }
        }
        let states: Vec<LoaderState> = ranks.iter().map(|l| l.state().unwrap()).collect();
        prop_assert!(
            states.windows(2).all(|w| w[0] == w[1]),
            "ranks' states differ: {:?}",
            states
        );
        let saved = states[run.saver].clone();
        // Steps past the checkpoint, then the crash: read, never committed.
        for _ in 0..run.lost {
            step(&mut ranks);
        }
        drop(ranks);
        state = Some(saved);
    }
    let end = state.unwrap();
    // Every position from the start to the last state, once, the sample the order names.
    let mut expect = (0u64, 0u64);
    for (&(epoch, position), &index) in &committed {
        if (epoch, position) != expect {
            // Only an epoch's end may be skipped over (to the next epoch's start).
            prop_assert_eq!(
                (epoch, position),
                (expect.0 + 1, 0),
                "positions lost before ({}, {})",
                epoch,
                position
            );
        }
        let want = reference.get(&(epoch, position)).copied();
        prop_assert_eq!(
            Some(index),
            want,
            "({}, {}) is not the order's sample",
            epoch,
            position
        );
        expect = (epoch, position + 1);
    }
    prop_assert!(
        expect == (end.epoch, end.position) || (end.position == 0 && expect.0 + 1 == end.epoch),
        "committed up to {:?}, the state says ({}, {})",
        expect,
        end.epoch,
        end.position
    );
    // Within a source-epoch no sample twice: (source, sample) read at most once per
    // (epoch, source-epoch) for stop rules that restart sources each epoch; across epochs
    // for the rest, which carry reads on.
    let sizes = world_of(case.tokens).sizes;
    let offsets = [0usize, sizes[0], sizes[0] + sizes[1]];
    let source_of = |index: u64| {
        (0..3)
            .rev()
            .find(|&s| index as usize >= offsets[s])
            .unwrap()
    };
    let mut reads: HashMap<(u64, usize), Vec<u64>> = HashMap::new();
    for (&(epoch, _), &index) in &committed {
        let s = source_of(index);
        let stream = if matches!(case.stop, StopRule::SamplesPerEpoch(_)) {
            0
        } else {
            epoch
        };
        reads.entry((stream, s)).or_default().push(index);
    }
    for ((_, s), list) in reads {
        for window in list.chunks(sizes[s]) {
            let mut w = window.to_vec();
            w.sort_unstable();
            w.dedup();
            prop_assert_eq!(
                w.len(),
                window.len(),
                "source {} read a sample twice in a source-epoch",
                s
            );
        }
    }
    // Every prefix of a segment within one of its weights (mixed batching, one phase).
    if !case.per_stream && case.stop != StopRule::AllExhaustedWithoutReplacement {
        for (i, (start, w)) in segments.iter().enumerate() {
            let stop_at = segments.get(i + 1).map(|(s, _)| (s.epoch, s.position));
            let w = weights_of(*w);
            let total: f64 = w.iter().sum();
            let mut counts = [0f64; 3];
            let mut n = 0f64;
            for (&(epoch, position), &index) in committed.range((start.epoch, start.position)..) {
                if epoch != start.epoch || Some((epoch, position)) >= stop_at {
                    break;
                }
                n += 1.0;
                counts[source_of(index)] += 1.0;
                for s in 0..3 {
                    let ideal = n * w[s] / total;
                    prop_assert!(
                        (counts[s] - ideal).abs() < 1.0,
                        "prefix {} of segment {}: source {} has {} for {}",
                        n,
                        i,
                        s,
                        counts[s],
                        ideal
                    );
                }
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("LOADER_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

#[test]
fn restripes_crashes_and_new_segments_read_every_sample_exactly_once() {
    let config = ProptestConfig {
        cases: cases(),
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(case in case())| {
        let shown = format!("{case:?}");
        within(Duration::from_secs(120), &shown, move || check(case))?;
    });
}

/// Positions (epoch position, index) delivered and skipped by one rank's batch.
type Split = (Vec<(u64, u64)>, Vec<(u64, u64)>);

fn skipping(
    store: &DynStorage,
    dataset: &Dataset,
    rank: usize,
    world: usize,
    batch: usize,
) -> DataLoader<u64, Split> {
    DataLoader::builder(Arc::clone(store), dataset.clone())
        .batch_size(batch)
        .shuffle(true)
        .seed(3)
        .distributed(rank, world)
        .error_policy(loader_core::ErrorPolicy::Skip { max_failures: 100 })
        .retry(None)
        .decode_threads(1)
        .map(
            |_: Bytes, info: &SampleInfo| Ok(info.index),
            |raw: RawBatch<u64>| {
                Ok((
                    raw.samples
                        .iter()
                        .map(|(i, _)| (i.position, i.index))
                        .collect(),
                    raw.skipped
                        .iter()
                        .map(|e| (e.info.position, e.info.index))
                        .collect(),
                ))
            },
        )
        .build()
        .unwrap()
}

// Deterministic skips: a sample that fails under `skip_errors` leaves its place in its global
// batch empty (nothing is pulled in from later positions to fill it), so which samples make up
// each batch depends on positions alone, never on timing: the rank that owns the position
// reports it, once, on any world size, and a replay skips it at the same place.
#[test]
fn a_skipped_sample_keeps_its_place_on_every_rank_and_in_a_replay() {
    within(Duration::from_secs(120), "skips across a restripe", || {
        let dir = tempfile::tempdir().unwrap();
        let missing = [4usize, 17, 30];
        for i in (0..41).filter(|i| !missing.contains(i)) {
            std::fs::write(dir.path().join(format!("{i}.bin")), i.to_string()).unwrap();
        }
        let store = from_url(
            &dir.path().to_string_lossy(),
            Vec::<(String, String)>::new(),
        )
        .unwrap();
        let dataset = Dataset::from_pairs((0..41).map(|i| (format!("{i}.bin"), 0)));
        let run = |world: usize, batch: usize, start: Option<LoaderState>, steps: usize| {
            let mut delivered = Vec::new();
            let mut skipped = Vec::new();
            let mut ranks: Vec<_> = (0..world)
                .map(|r| skipping(&store, &dataset, r, world, batch))
                .collect();
            for l in &mut ranks {
                if let Some(s) = &start {
                    l.resume(s.clone()).unwrap();
                }
            }
            // Steps of every rank until the epoch ends (on all of them at once).
            for _ in 0..steps {
                let batches: Vec<_> = ranks.iter_mut().map(|l| l.next()).collect();
                if batches.iter().any(Option::is_none) {
                    assert!(batches.iter().all(Option::is_none), "ranks end apart");
                    break;
                }
                for batch in batches.into_iter().flatten() {
                    let (d, s) = batch.unwrap();
                    delivered.extend(d);
                    skipped.extend(s);
                }
            }
            for l in &mut ranks {
                skipped.extend(
                    l.take_unreported_skips()
                        .iter()
                        .map(|e| (e.info.position, e.info.index)),
                );
            }
            let state = ranks[0].state().unwrap();
            (delivered, skipped, state)
        };
        // Two ranks for 2 steps, then three ranks of other batches to the epoch's end.
        let (d1, s1, state) = run(2, 4, None, 2);
        let (d2, s2, _) = run(3, 3, Some(state), 20);
        let mut positions: Vec<u64> = d1
            .iter()
            .chain(&d2)
            .chain(&s1)
            .chain(&s2)
            .map(|p| p.0)
            .collect();
        positions.sort_unstable();
        assert_eq!(
            positions,
            (0..41).collect::<Vec<_>>(),
            "every position once"
        );
        let mut skipped: Vec<(u64, u64)> = s1.iter().chain(&s2).copied().collect();
        skipped.sort_unstable();
        assert_eq!(
            skipped
                .iter()
                .map(|s| s.1 as usize)
                .collect::<std::collections::BTreeSet<_>>(),
            missing.iter().copied().collect(),
            "each missing sample reported once"
        );
        // A replay on one rank skips the same samples at the same positions.
        let (_, replay, _) = run(1, 5, None, 20);
        let mut replay = replay;
        replay.sort_unstable();
        assert_eq!(replay, skipped);
    });
}

/// Files `0.bin` .. in `dir/name` holding `name` and their index; the store and dataset.
fn files(dir: &std::path::Path, name: &str, n: usize) -> (DynStorage, Dataset) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..n {
        std::fs::write(d.join(format!("{i}.bin")), format!("{name}{i}")).unwrap();
    }
    let store = from_url(&d.to_string_lossy(), Vec::<(String, String)>::new()).unwrap();
    (
        store,
        Dataset::from_pairs((0..n).map(|i| (format!("{i}.bin"), 0))),
    )
}

type Keys = DataLoader<u64, Vec<(u64, u64)>>;

/// A shuffled mixture of `sources` (store, dataset, weight), batches of 4, all_exhausted.
fn keyed(sources: &[(DynStorage, Dataset, f64)], new_segment: bool) -> Keys {
    DataLoader::mixture(
        sources
            .iter()
            .map(|(s, d, w)| Source::new(Arc::clone(s), d.clone()).weight(*w))
            .collect(),
    )
    .batch_size(4)
    .shuffle(true)
    .seed(9)
    .stop(StopRule::AllExhausted)
    .new_segment(new_segment)
    .decode_threads(1)
    .map(
        |_: Bytes, info: &SampleInfo| Ok(info.index),
        |raw: RawBatch<u64>| {
            Ok(raw
                .samples
                .iter()
                .map(|(i, _)| (i.epoch, i.index))
                .collect())
        },
    )
    .build()
    .unwrap()
}

// Review of issue 28: adding a dataset to a mixture, or removing one, at a resume was refused
// even with new_segment (the stamp compared one arrangement string of all sources).
#[test]
fn datasets_added_and_removed_at_a_resume_start_a_new_segment() {
    within(
        Duration::from_secs(60),
        "datasets added and removed",
        || {
            let dir = tempfile::tempdir().unwrap();
            let (a, b, c) = (
                files(dir.path(), "a", 24),
                files(dir.path(), "b", 12),
                files(dir.path(), "c", 8),
            );
            let two = [
                (a.0.clone(), a.1.clone(), 1.0),
                (b.0.clone(), b.1.clone(), 1.0),
            ];
            let mut first = keyed(&two, false);
            let mut read: Vec<(usize, u64)> = Vec::new();
            let name = |l: &Keys, i: u64| l.source_of(i).map(|(s, k)| (s, k as u64)).unwrap();
            for _ in 0..3 {
                for (_, i) in first.next().unwrap().unwrap() {
                    read.push(name(&first, i));
                }
            }
            let state = first.state().unwrap();
            // Without new_segment: refused, naming the sources.
            let three = [
                two[0].clone(),
                two[1].clone(),
                (c.0.clone(), c.1.clone(), 1.0),
            ];
            refused(
                keyed(&three, false).resume(state.clone()),
                &["other sources", "new_segment"],
            );
            // With it: a and b go on where they stood (no sample of theirs twice in their
            // first permutation), c starts at its first.
            let mut more = keyed(&three, true);
            more.resume(state.clone()).unwrap();
            let indices: Vec<u64> = (&mut more)
                .flat_map(|b| b.unwrap())
                .map(|(_, i)| i)
                .collect();
            let rest: Vec<(usize, u64)> = indices.iter().map(|&i| name(&more, i)).collect();
            for (source, size) in [(0usize, 24usize), (1, 12)] {
                let keys: Vec<u64> = read
                    .iter()
                    .chain(&rest)
                    .filter(|r| r.0 == source)
                    .map(|r| r.1)
                    .take(size)
                    .collect();
                let mut unique = keys.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(
                    unique.len(),
                    keys.len(),
                    "source {source} read a sample twice"
                );
            }
            assert!(rest.iter().any(|r| r.0 == 2), "the new dataset is read");
            // Removing b: a alone goes on from its cursor.
            let mut fewer = keyed(&two[..1], true);
            fewer.resume(state).unwrap();
            let alone: Vec<u64> = (&mut fewer)
                .flat_map(|b| b.unwrap())
                .map(|(_, i)| i)
                .collect();
            let before: Vec<u64> = read.iter().filter(|r| r.0 == 0).map(|r| r.1).collect();
            let mut all: Vec<u64> = before.iter().chain(&alone).copied().collect();
            all.sort_unstable();
            assert_eq!(
                all,
                (0..24).collect::<Vec<_>>(),
                "a's epoch: the rest of its permutation"
            );
            // Set back to epoch 0 after the new segment (which started in it): a whole epoch.
            fewer.set_epoch(0);
            let again: Vec<u64> = (&mut fewer)
                .flat_map(|b| b.unwrap())
                .map(|(_, i)| i)
                .collect();
            assert!(!again.is_empty());
        },
    );
}

// Review of issue 28: a cache with an endless epoch announced reads until a cap that chunks
// never reached (a chunk read again within the reads ahead never closed), so the first batch
// never came.
#[test]
fn a_cache_over_an_endless_epoch_of_shards_starts_at_once() {
    within(Duration::from_secs(60), "cache and cycle_forever", || {
        let dir = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(40, 2)
            .write_shards(dir.path(), 2)
            .unwrap();
        let url = format!("{}/shard-{{000000..000001}}.tar", dir.path().display());
        let (store, dataset) = WebDataset::new()
            .cache_dir(None)
            .load_url_blocking(&url, Vec::<(String, String)>::new())
            .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let mut loader = DataLoader::builder(store, dataset)
            .batch_size(8)
            .shuffle(true)
            .stop(StopRule::CycleForever)
            .cache(loader_core::storage::layer::CacheConfig {
                dir: Some(cache.path().to_path_buf()),
                ..Default::default()
            })
            .decode_threads(1)
            .build()
            .unwrap();
        assert_eq!(loader.len(), usize::MAX);
        for _ in 0..20 {
            loader.next().unwrap().unwrap();
        }
    });
}

// Review of issue 28: at one rank, lanes of large chunks (small samples) spread a chunk's
// reads beyond the reads looked ahead at, so chunks were read sample by sample.
#[test]
fn one_rank_reads_each_chunk_of_small_samples_once() {
    within(
        Duration::from_secs(60),
        "small samples in large chunks",
        || {
            let dir = tempfile::tempdir().unwrap();
            // 64 chunks of about 300 samples: a chunk's reads span 64 x 300 positions of the
            // 16 lanes, beyond the 8,192 reads looked ahead at before.
            DatasetSpec::tiny(19_200, 2)
                .write_shards(dir.path(), 4)
                .unwrap();
            let url = format!("{}/shard-{{000000..000003}}.tar", dir.path().display());
            let (_, dataset) = WebDataset::new()
                .cache_dir(None)
                .chunk_bytes(1 << 30)
                .load_url_blocking(&url, Vec::<(String, String)>::new())
                .unwrap();
            let per_chunk = 300;
            let layout: Vec<loader_core::ShardLayout> = dataset
                .shards()
                .iter()
                .map(|s| {
                    let all = s.chunks[0].start..s.chunks.last().unwrap().end;
                    loader_core::ShardLayout {
                        key: Arc::clone(&s.key),
                        chunks: all
                            .clone()
                            .step_by(per_chunk)
                            .map(|c| c..(c + per_chunk).min(all.end))
                            .collect(),
                    }
                })
                .collect();
            let dataset =
                Dataset::from_shards(dataset.iter().collect(), Vec::new(), layout).unwrap();
            let chunks: usize = dataset.shards().iter().map(|s| s.chunks.len()).sum();
            let store = from_url(
                &dir.path().to_string_lossy(),
                Vec::<(String, String)>::new(),
            )
            .unwrap()
            .with_metrics();
            let metrics = store.metrics();
            let loader = DataLoader::builder(store.into_dyn(), dataset)
                .batch_size(16)
                .shuffle(true)
                .epochs(1)
                .map(
                    |_: Bytes, i: &SampleInfo| Ok(i.index),
                    |r: RawBatch<u64>| Ok(r.samples.len()),
                )
                .build()
                .unwrap();
            let read: usize = loader.map(|b| b.unwrap()).sum();
            assert_eq!(read, 19_200);
            let requests = metrics.snapshot().requests as usize;
            // A lane's piece ends inside a chunk, so a few chunks are read twice.
            assert!(
                requests <= chunks + 32,
                "{requests} requests for {chunks} chunks"
            );
        },
    );
}

#[test]
fn a_sampler_given_with_settings_of_the_loaders_own_order_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, dataset) = files(dir.path(), "a", 10);
    refused(
        DataLoader::builder(store, dataset)
            .sampler(loader_core::sampler::SequentialSampler::new(10))
            .lanes(8)
            .build(),
        &["lanes", "sampler"],
    );
}

/// The lanes of the first source's arrangement in `state`.
fn lanes_of(state: &LoaderState) -> Option<u32> {
    match &state.order.as_ref()?.mixture.as_ref()?.sources[0].arrangement {
        loader_core::Arrangement::ShardLocal { lanes, .. } => Some(*lanes),
        _ => None,
    }
}

// Lanes left to the loader are chosen for the world size a run starts on (16 and its least
// common multiple) and kept in its state: a resume on another world size takes them (and the
// lanes' windows) from the state and goes on exactly, reading the samples the first run's
// order names; lanes given that differ from the state's are refused. 3 ranks then 2, and 8
// then 12 (found by a review: a window chosen from the resuming world size was refused).
#[test]
fn lanes_chosen_at_the_start_are_kept_across_world_sizes() {
    within(Duration::from_secs(120), "lanes kept", || {
        let dir = tempfile::tempdir().unwrap();
        DatasetSpec::tiny(96, 2)
            .write_shards(dir.path(), 4)
            .unwrap();
        let url = format!("{}/shard-{{000000..000003}}.tar", dir.path().display());
        let (store, dataset) = WebDataset::new()
            .cache_dir(None)
            .chunk_bytes(6 * 2_000)
            .load_url_blocking(&url, Vec::<(String, String)>::new())
            .unwrap();
        let rank = |r: usize, world: usize, batch: usize, lanes: Option<u32>| {
            let mut b = DataLoader::builder(Arc::clone(&store), dataset.clone())
                .batch_size(batch)
                .shuffle(true)
                .seed(4)
                .distributed(r, world)
                .decode_threads(1);
            if let Some(l) = lanes {
                b = b.lanes(l);
            }
            b.map(
                |_: Bytes, i: &SampleInfo| Ok(i.index),
                |raw: RawBatch<u64>| {
                    let real = raw.samples.len() - raw.padding;
                    Ok(raw.samples[..real]
                        .iter()
                        .map(|(i, _)| (i.position, i.index))
                        .collect::<Vec<_>>())
                },
            )
            .build()
            .unwrap()
        };
        for (first_world, then_world, lanes) in [(3usize, 2usize, 48u32), (8, 12, 16)] {
            let mut reads: Vec<(u64, u64)> = Vec::new();
            let mut first: Vec<_> = (0..first_world)
                .map(|r| rank(r, first_world, 4, None))
                .collect();
            // The first run's order, as one rank reads it with the first run's stamp.
            let mut one = rank(0, 1, 1, None);
            one.resume(LoaderState {
                epoch: 0,
                position: 0,
                order: Some(first[0].order_stamp()),
            })
            .unwrap();
            let order: Vec<u64> = one.planned(0).collect();
            for _ in 0..2 {
                for l in &mut first {
                    reads.extend(l.next().unwrap().unwrap());
                }
            }
            let state = first[0].state().unwrap();
            assert_eq!(lanes_of(&state), Some(lanes));
            let mut then: Vec<_> = (0..then_world)
                .map(|r| rank(r, then_world, 3, None))
                .collect();
            for l in &mut then {
                l.resume(state.clone()).unwrap();
                assert_eq!(lanes_of(&l.state().unwrap()), Some(lanes));
            }
            for l in &mut then {
                for b in l.by_ref() {
                    reads.extend(b.unwrap());
                }
            }
            reads.sort_unstable();
            let expected: Vec<(u64, u64)> = order
                .iter()
                .enumerate()
                .map(|(p, &i)| (p as u64, i))
                .collect();
            assert_eq!(
                reads, expected,
                "{first_world} then {then_world} ranks: the first run's order, once"
            );
            let other = if lanes == 16 { 48 } else { 16 };
            let err = rank(0, 2, 5, Some(other))
                .resume(state)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("arrangement") && err.contains(&format!("lanes={lanes}")),
                "{err}"
            );
        }
    });
}
