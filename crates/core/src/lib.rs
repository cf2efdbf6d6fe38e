//! loader: feed ML training from S3, HTTP or local disk as fast as from a local drive.
//!
//! This facade is what a training program depends on: a [`Dataset`] (ImageFolder listing,
//! manifest or Vec), a [`DataLoader`] with PyTorch's names that is both a blocking
//! `Iterator` and an async `Stream` of [`Batch`]es, exact `state()` / `resume()`, and the
//! other crates re-exported.
//!
//! ```
//! use loader_core::{DataLoader, Dataset, Pipeline, from_url};
//!
//! # fn main() -> loader_core::Result<()> {
//! // A tiny ImageFolder on local disk; `s3://bucket/train` works the same way.
//! let dir = tempfile::tempdir().unwrap();
//! loader_testkit::DatasetSpec::tiny(12, 3).write(dir.path()).unwrap();
//! let store = from_url(&dir.path().to_string_lossy(), Vec::<(String, String)>::new())?;
//!
//! let dataset = Dataset::image_folder_blocking(&*store)?;
//! assert_eq!(dataset.classes(), ["class_000", "class_001", "class_002"]);
//!
//! let mut loader = DataLoader::builder(store, dataset)
//!     .batch_size(5)
//!     .shuffle(true)
//!     .seed(42)
//!     .transform(Pipeline::imagenet_eval())
//!     .build()?;
//! assert_eq!(loader.len(), 3); // 5 + 5 + 2
//!
//! for batch in &mut loader {
//!     let batch = batch?;
//!     assert_eq!(&batch.shape[1..], &[3, 224, 224]);
//!     assert_eq!(batch.labels.len(), batch.len());
//! }
//! // The next pass reads epoch 1; a checkpoint is just the state.
//! let state = loader.state()?;
//! assert_eq!((state.epoch, state.position), (1, 0));
//! # Ok(())
//! # }
//! ```
//!
//! # Rooms, along the data flow
//!
//! `source/` turns what is stored (an ImageFolder listing, a manifest, WebDataset shards,
//! Parquet files)
//! into the sample index, a [`Dataset`]; every source returns its own [`SourceError`],
//! which the facade's [`Error`] (`error.rs`, the bottom room) maps back to `Storage` or
//! `Dataset`. [`LoaderOptions`] (`options.rs`) declares every
//! plain-data setting once; the builder (`builder.rs`) writes into it and, at `build`,
//! wraps the store in its timeout, retry and cache layers (a mixture's datasets read through
//! one [`storage::MountStore`], `source/mixture.rs`). `plan.rs` owns the order (the run's
//! global order, cut into this rank's shares of global batches, or a caller's sampler) and
//! tells the engine (which chunks to read whole, and their last uses) and the cache (the
//! epochs ahead) what will be read; `stage.rs` holds the CPU stage and collate. `loader/` keeps epochs, state
//! and iteration (`delivery.rs`: what each batch from the engine does to the pass);
//! `batch`, `buffer` and `export` are what a batch is; `state` is what a checkpoint means.

/// The README's code, compiled and run as doc tests, so the training loop a user copies is
/// the one that is tested.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guides' code (`docs/`), compiled and run as doc tests as the README's is.
#[doc = include_str!("../../../docs/formats.md")]
#[doc = include_str!("../../../docs/mixtures.md")]
#[doc = include_str!("../../../docs/cache.md")]
#[doc = include_str!("../../../docs/stores.md")]
#[doc = include_str!("../../../docs/rust.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

mod batch;
mod buffer;
mod builder;
mod error;
mod export;
mod labels;
mod launch;
mod loader;
mod memory;
mod options;
mod plan;
pub mod source;
mod stage;
mod state;
pub mod tokens;

pub use batch::{Batch, BatchData, BatchInfo, BatchTensors, collate, collate_in};
pub use buffer::Buffer;
pub use builder::DataLoaderBuilder;
pub use error::{CollateError, ConfigError, Error, OptionError, Result, StateError};
pub use export::{DType, HostTensor, HostVec, ShapeError};
pub use labels::labels_tensor;
pub use launch::Launch;
pub use loader::DataLoader;
pub use memory::{BatchMemory, LentBlock, MemoryError};
pub use options::{
    CacheOptions, Column, DEFAULT_REQUEST_TIMEOUT, EngineOptions, LoaderOptions, MixtureOptions,
    OptionKey, OptionValue, PackingOptions, ShardOrder, SourceOptions, StorageOptions, WeighBy,
};
pub use source::{
    CLASSES_FILE, Dataset, IMAGE_EXTENSIONS, Item, LabelKind, ManifestSyntax, Member, PACK_FILE,
    ShardLayout, Source, SourceContext, SourceError, WriteError,
};
pub use source::{litdata, mds, open, open_with, parquet, store_url, webdataset};
pub use stage::{Collate, sample_bytes};
pub use state::{
    Arrangement, CustomStamp, LoaderState, MixtureStamp, ORDER_VERSION, OrderStamp, SourceStamp,
};

pub use loader_decoder::{self as decoder, DecodeOptions, Pipeline, Sample, SampleKey};
pub use loader_sampler::{
    self as sampler, Batching, DistributedSampler, Sampler, SamplerState, Segment, StopRule,
};
pub use loader_scheduler::{
    self as scheduler, ClassSet, ErrorPolicy, Fetch, Hedge, ItemError, Label, LimitReason, Metrics,
    Order, RawBatch, SampleInfo, StageError, Summary, Trace,
};
pub use loader_storage::{self as storage, DynStorage, Storage, StorageExt, from_url};
