//! The loader engine: planned batches of samples in, decoded batches out, in order.
//!
//! Generic over a [`Storage`](loader_storage::Storage) and a CPU stage
//! `Fn(Bytes, &SampleInfo) -> Result<T>`, so it knows nothing of images. A [`WorkItem`] says
//! where a sample's bytes are (an object, or a byte range of one) and what it carries (its
//! label, its members); the engine turns items into fetch units, so one request feeds every
//! sample of a [`Chunk`] or of neighbouring ranges, cut out with `Bytes::slice`, with
//! fetched bytes under a byte budget. Three fetch strategies ([`Fetch`]) reproduce the
//! paper's comparison; `Async` keeps many requests in flight on a tokio runtime and runs
//! CPU work on a pool of named threads. At most `prefetch` finished batches wait for the
//! consumer: when it is slow, fetching stops.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use loader_scheduler::{BatchPlan, Config, Engine, Fetch, SampleInfo, WorkItem};
//! use loader_storage::{Storage, StorageExt, from_url};
//!
//! let dir = tempfile::tempdir().unwrap();
//! for i in 0..10 {
//!     std::fs::write(dir.path().join(format!("{i}.txt")), format!("item {i}")).unwrap();
//! }
//! let store = from_url(&dir.path().to_string_lossy(), Vec::<(String, String)>::new()).unwrap();
//!
//! // Two batches of five; the CPU stage here just measures the bytes.
//! let plans = (0..2u64).map(|b| {
//!     let items = (b * 5..b * 5 + 5).map(|i| WorkItem::object(i, format!("{i}.txt"))).collect();
//!     BatchPlan::new(0, b * 5, items, b == 1)
//! });
//! let stage = Arc::new(|bytes: Bytes, _info: &SampleInfo| Ok(bytes.len()));
//! let config = Config { fetch: Fetch::Async { max_in_flight: 8 }, decode_threads: 2, ..Config::default() };
//!
//! let mut engine = Engine::start(store, stage, plans, &config).unwrap();
//! let first = engine.next_blocking().unwrap().unwrap();
//! let indices: Vec<u64> = first.samples.iter().map(|(info, _)| info.index).collect();
//! assert_eq!(indices, [0, 1, 2, 3, 4]); // exactly the plan's order
//! assert_eq!(first.samples[0].1, "item 0".len());
//! assert!(engine.next_blocking().unwrap().unwrap().last_in_epoch);
//! assert!(engine.next_blocking().is_none());
//! println!("{}", engine.metrics().summary());
//! ```
//!
//! # Rooms, bottom up
//!
//! Each file imports only files above it in this list, never one below (a test in
//! `crates/testkit/tests/module_circles.rs` fails on an import circle).
//!
//! - Vocabulary: `config` (what a run is asked to do), `item` (work items, plans, batches,
//!   errors), `decoded` (the decoded-bytes bound), `stage` (the CPU stage and the engine's
//!   output), `limit` (why the in-flight limit is where it is).
//! - Measurement: `summary` (the report and its bottleneck line), `metrics` (live gauges
//!   and the guards that keep them), `cpu` (the process's CPU time), `trace`.
//! - Fetching: `slots` (the in-flight limit), `hedge` (hedged requests and their race),
//!   `unit` (one request feeding many items, under the byte budget), `kept` (chunks kept
//!   for later items), `coalesce` (neighbouring ranges read in one request).
//! - Running: `pool` (CPU threads), `work` (an item fetched and decoded), `strategy` (the
//!   three fetch strategies), `control` (the adaptive in-flight limit), `assembly`
//!   (results back in plan order), `driver` (the admission loop), `engine` (the handle).

mod assembly;
mod coalesce;
mod config;
mod control;
mod cpu;
mod decoded;
mod driver;
mod engine;
mod hedge;
mod item;
mod kept;
mod label;
mod limit;
mod metrics;
mod pool;
mod slots;
mod stage;
mod strategy;
mod summary;
mod trace;
mod unit;
mod work;

pub use config::{
    Config, ConfigError, DEFAULT_IN_FLIGHT_CAP, DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_DECODED_BYTES, ErrorPolicy, Fetch, Order,
};
pub use cpu::process_cpu_time;
pub use decoded::Weigh;
pub use engine::{Engine, THREAD_PREFIX, detached_on_drop};
pub use hedge::Hedge;
pub use item::{
    BatchPlan, Chunk, EngineError, ItemError, ItemFailure, Member, RawBatch, Record, RecordOf,
    Records, SampleInfo, StageError, WorkItem, span_of,
};
pub use label::{ClassSet, Label};
pub use limit::LimitReason;
pub use metrics::Metrics;
pub use stage::Stage;
pub use summary::{StageSummary, Summary};
pub use trace::Trace;
