//! Every plain-data setting of a loader, declared once: a field, its default and one doc
//! line each. The builder's setters write into [`LoaderOptions`]; the CLI and the Python
//! package set them by dotted key ([`LoaderOptions::set`]) and list them
//! ([`LoaderOptions::keys`]), so a new option reaches every front end from here, and a
//! front end that forgets one fails a test.
//!
//! ```
//! use loader_core::LoaderOptions;
//!
//! let mut options = LoaderOptions::default();
//! options.set("batch_size", "64").unwrap();
//! options.set("engine.prefetch", "4").unwrap();
//! options.set("cache.dir", "/tmp/cache").unwrap();
//! assert_eq!(options.engine.prefetch, 4);
//! let err = options.set("engine.prefech", "4").unwrap_err().to_string();
//! assert!(err.contains("engine.prefetch"), "{err}"); // the known keys are named
//! assert!(LoaderOptions::keys().iter().any(|k| k.key == "storage.request_timeout"));
//! ```

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use loader_sampler::{Batching, StopRule};
use loader_scheduler::{Config, ErrorPolicy, Fetch, Hedge, Order};
use loader_storage::layer::{CacheConfig, CachePolicy, RetryConfig};
use loader_storage::{DynStorage, StorageExt};

use crate::error::{ConfigError, OptionError};
use crate::launch::Launch;
use crate::tokens::Packing;

/// The default deadline of one attempt of one request: far above any healthy GET of a
/// sample, so only a stalled connection trips it, and then the retry policy takes over.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a dataset stored in shards is shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardOrder {
    /// Shards in a random order, read in lanes, samples shuffled within a window of a few
    /// chunks, each chunk read with one request (the global order's
    /// [`SourceKind::ShardLocal`](loader_sampler::SourceKind::ShardLocal)); the default.
    #[default]
    Local,
    /// Every sample of every shard in one random permutation: one ranged request per
    /// sample, coalesced with neighbours when the order keeps them together.
    Global,
}

/// One option as the front ends list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionKey {
    /// Its dotted key, e.g. `engine.prefetch`.
    pub key: String,
    /// Its default, written as [`LoaderOptions::set`] reads it.
    pub default: String,
    /// What it does, in one line.
    pub doc: &'static str,
}

/// Declares an options group: its struct (one documented field per option, one doc line
/// each), its defaults, and its part of `set` and `keys`.
macro_rules! options_group {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( #[doc = $doc:literal] $field:ident : $ty:ty = $default:expr, )*
        }
        $( groups { $( #[doc = $gdoc:literal] $group:ident : $gty:ty, )* } )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub struct $name {
            $( #[doc = $doc] pub $field: $ty, )*
            $( $( #[doc = $gdoc] pub $group: $gty, )* )?
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $( $field: $default, )*
                    $( $( $group: <$gty>::default(), )* )?
                }
            }
        }

        impl $name {
            /// Set the option at `key` (relative to this group); `None` if it has none.
            pub(crate) fn set_key(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
                match key {
                    $( stringify!($field) => {
                        return Some(OptionValue::parse(value.trim()).map(|v| self.$field = v));
                    } )*
                    _ => {}
                }
                $( $(
                    if let Some(rest) = key.strip_prefix(concat!(stringify!($group), ".")) {
                        return self.$group.set_key(rest, value);
                    }
                )* )?
                None
            }

            /// This group's own groups: each one's name and what it holds.
            #[allow(dead_code)] // a group of no groups has none to name
            pub(crate) fn groups() -> Vec<(&'static str, &'static str)> {
                vec![$( $( (stringify!($group), $gdoc.trim()), )* )?]
            }

            /// This group's options and their values here, under `prefix`.
            pub(crate) fn list(&self, prefix: &str, out: &mut Vec<OptionKey>) {
                $( out.push(OptionKey {
                    key: format!("{prefix}{}", stringify!($field)),
                    default: self.$field.show(),
                    doc: $doc.trim(),
                }); )*
                $( $(
                    self.$group.list(&format!("{prefix}{}.", stringify!($group)), out);
                )* )?
            }
        }
    };
}

mod source;
mod value;

pub use source::{Column, SourceOptions};
pub use value::OptionValue;

options_group! {
    /// Every plain-data setting of a [`DataLoader`](crate::DataLoader), with PyTorch's
    /// defaults where PyTorch has the setting. What is not plain data (a sampler, a CPU
    /// stage, a trace, a runtime) is given to the builder.
    pub struct LoaderOptions {
        /// Samples per batch.
        batch_size: usize = 1,
        /// A new random order every epoch, from the seed and the epoch.
        shuffle: bool = false,
        /// Seed of the shuffle and of random transforms.
        seed: u64 = 0,
        /// Drop the last batch of an epoch if it is short.
        drop_last: bool = false,
        /// Epochs the run reads (none: no end); nothing is fetched past the last.
        epochs: Option<u64> = None,
        /// How shards are shuffled: `local` (few large GETs) or `global` (a GET per sample).
        shard_order: ShardOrder = ShardOrder::Local,
        /// Samples shuffled together in each lane of a shard-local order (none: 4 chunks' worth, more if a starting rank reads under 2 lanes; kept in the run's state).
        shuffle_buffer: Option<usize> = None,
        /// Lanes of a shard-local order; a world size dividing it gives each rank lanes of its own (none: lcm(16, world size) at a run's start, kept in its state).
        lanes: Option<u32> = None,
        /// This process's rank among `world_size`: it takes its share of each global batch.
        rank: usize = 0,
        /// Processes that share each global batch; 1 reads it all.
        world_size: usize = 1,
        /// Read only the dataset indices `start..end` (none: all of them).
        subset: Option<Range<usize>> = None,
    }
    groups {
        /// How several datasets are mixed, and how a run continues under another mixture.
        mixture: MixtureOptions,
        /// How the engine fetches, decodes and orders.
        engine: EngineOptions,
        /// How each request to the store is bounded and retried.
        storage: StorageOptions,
        /// The cache in memory and on local disk.
        cache: CacheOptions,
        /// How the dataset is found and read when it is opened by URL.
        source: SourceOptions,
        /// How token blocks are made into rows.
        packing: PackingOptions,
    }
}

options_group! {
    /// How token blocks are made into rows ([`Packing`]): what the data does not say.
    pub struct PackingOptions {
        /// Token rows: a document's last token is not trained to predict the next document's first (its label is -100).
        mask_boundaries: bool = false,
        /// Token rows: the id that ends a document, for documents stored run together (pre-packed rows, LitData items of several documents): a document also starts after each (none: only the format's boundaries).
        end_of_document: Option<i64> = None,
    }
}

impl PackingOptions {
    /// The packing these options ask for: [`Packing::new`]'s padding and ignore index.
    pub fn packing(&self) -> Packing {
        Packing {
            mask_boundaries: self.mask_boundaries,
            end_of_document: self.end_of_document,
            ..Packing::new()
        }
    }
}

options_group! {
    /// How several datasets are mixed, and how a run continues under another mixture.
    pub struct MixtureOptions {
        /// When an epoch ends: `first_exhausted`, `all_exhausted`, `all_exhausted_without_replacement`, `samples_per_epoch:N` or `cycle_forever`.
        stop: StopRule = StopRule::FirstExhausted,
        /// `mixed` (sources interleaved sample by sample) or `per_stream` (global batches from one source each, by weight).
        batching: Batching = Batching::Mixed,
        /// Resume a state saved under other weights or sources by starting a new segment at its position.
        new_segment: bool = false,
        /// What a weight shares out: `samples` (token datasets: blocks, so tokens) or `documents` (token datasets: each source's share of documents read).
        weigh_by: WeighBy = WeighBy::Samples,
    }
}

/// What a mixture's weights share out among its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeighBy {
    /// Samples: for token datasets, blocks of one length, so tokens.
    #[default]
    Samples,
    /// Documents, for token datasets: a source's weight is divided by the blocks a document
    /// of it makes on average, so the documents read follow the weights.
    Documents,
}

options_group! {
    /// How the engine fetches, decodes and orders ([`Config`]).
    pub struct EngineOptions {
        /// `adaptive[:CAP]` (the default), `async:N` fixed in flight, `threads:N` or `sequential:N`.
        fetch: Fetch = Fetch::default(),
        /// Threads of the decode pool (none: this process's cores shared by the node's ranks).
        decode_threads: Option<usize> = None,
        /// Finished batches kept ready for the consumer, at most.
        prefetch: usize = 2,
        /// Skip up to this many failing samples per epoch, reported (none: stop at the first).
        skip_errors: Option<usize> = None,
        /// `sampler` (exact order, resumable) or `as_completed` (no state to resume from).
        order: Order = Order::Sampler,
        /// Fetched bytes not yet decoded, at most.
        max_buffered_bytes: u64 = loader_scheduler::DEFAULT_MAX_BUFFERED_BYTES,
        /// Decoded samples and finished batches held for the consumer, in bytes, at most.
        max_decoded_bytes: u64 = loader_scheduler::DEFAULT_MAX_DECODED_BYTES,
        /// Ranged samples of one object closer than this many bytes are read in one request.
        coalesce_gap: u64 = 256 << 10,
        /// A coalesced request reads at most this many bytes.
        max_coalesced_bytes: u64 = 16 << 20,
        /// Send a request again: `stalls` (only a stalled one), `tail` (also slow ones), or `off`.
        hedge: Option<Hedge> = Some(Hedge::stalls_only()),
    }
}

options_group! {
    /// How each request to the store is bounded and retried.
    pub struct StorageOptions {
        /// Seconds one attempt of one request may take before it is retried (none: no deadline).
        request_timeout: Option<Duration> = Some(DEFAULT_REQUEST_TIMEOUT),
        /// Retries of a failed or timed-out request (none: no retry layer at all).
        max_retries: Option<u32> = Some(RetryConfig::default().max_attempts - 1),
    }
}

options_group! {
    /// The cache between the engine and the store; on when `dir` is set or `memory` is
    /// above 0.
    pub struct CacheOptions {
        /// Directory of the disk tier (none: memory only).
        dir: Option<PathBuf> = None,
        /// Bytes of the memory tier (none: 256 MiB once the cache is on, 0: no memory tier).
        memory: Option<u64> = None,
        /// Bytes of the disk tier.
        size: u64 = CacheConfig::default().disk_bytes,
        /// What a full tier keeps: `future` (read soonest), `lru` or `pin-once`.
        policy: CachePolicy = CachePolicy::Future,
        /// Bytes of the unit in which ranged reads are cached.
        block: u64 = CacheConfig::default().block_bytes,
        /// Ranks of this node sharing the directory: the cache keeps by all their reads (none: the launcher's ranks per node, else 1).
        node_ranks: Option<usize> = None,
        /// This process's place among the node's ranks (none: the launcher's local rank, else rank modulo node_ranks).
        local_rank: Option<usize> = None,
    }
}

/// What setting `key` (spelled `full` in messages) answered: done, a value it cannot
/// read, or no such key (naming those there are).
pub(crate) fn answer(
    key: &str,
    full: &str,
    found: Option<Result<(), String>>,
    keys: fn() -> Vec<OptionKey>,
) -> Result<(), OptionError> {
    match found {
        Some(Ok(())) => Ok(()),
        Some(Err(problem)) => Err(OptionError::Value {
            key: full.to_owned(),
            problem,
        }),
        None => Err(OptionError::Unknown {
            key: key.to_owned(),
            known: keys()
                .into_iter()
                .map(|k| k.key)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

impl StorageOptions {
    /// `store` with each attempt under the timeout (inside the retry: a stalled attempt is
    /// abandoned and repeated) and retried by `retry`.
    pub(crate) fn stack(&self, store: DynStorage, retry: Option<RetryConfig>) -> DynStorage {
        let store = match self.request_timeout {
            Some(timeout) => Arc::new(store.with_timeout(timeout)) as DynStorage,
            None => store,
        };
        match retry {
            Some(retry) => Arc::new(store.with_retry(retry)) as DynStorage,
            None => store,
        }
    }
}

impl LoaderOptions {
    /// Set the option at dotted `key` (`batch_size`, `engine.prefetch`, `cache.dir`, ...)
    /// from its text; `none` unsets an optional one.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        let found = self.set_key(key.trim(), value);
        answer(key, key.trim(), found, Self::keys)
    }

    /// Every option: its key, its default and what it does.
    pub fn keys() -> Vec<OptionKey> {
        let mut out = Vec::new();
        Self::default().list("", &mut out);
        out
    }

    /// Every option as Markdown, from the declarations: a table of the loader's own, then
    /// one per group (its keys under its prefix). What `docs/options.md` holds.
    pub fn reference() -> String {
        let cell = |text: &str| text.replace('|', "\\|");
        let table = |out: &mut String, keys: &[&OptionKey]| {
            out.push_str("| key | default | what it does |\n|---|---|---|\n");
            for k in keys {
                let default = match k.default.as_str() {
                    "" => "(empty)".to_owned(),
                    value => format!("`{}`", cell(value)),
                };
                out.push_str(&format!("| `{}` | {default} | {} |\n", k.key, cell(k.doc)));
            }
        };
        let keys = Self::keys();
        let mut out = String::from(
            "# Options\n\nEvery setting of the loader, generated from the options' declarations \
             (`crates/core/src/options/`): `LOADER_REGENERATE=1 cargo test -p loader-core --test \
             options_reference` writes this file, and the same test fails when it differs. \
             Each is set by its key: `LoaderOptions::set(\"engine.prefetch\", \"4\")` in Rust, \
             `loader run --set engine.prefetch=4`, or the Python `DataLoader` keyword that \
             `loader_ml/options.py` maps to it (`prefetch=4`). A default `none` means unset.\n\n\
             ## The loader\n\n",
        );
        let own: Vec<&OptionKey> = keys.iter().filter(|k| !k.key.contains('.')).collect();
        table(&mut out, &own);
        for (group, doc) in Self::groups() {
            let prefix = format!("{group}.");
            let mine: Vec<&OptionKey> =
                keys.iter().filter(|k| k.key.starts_with(&prefix)).collect();
            out.push_str(&format!("\n## `{group}.*`: {doc}\n\n"));
            table(&mut out, &mine);
        }
        out
    }

    /// Refuse settings that make no sense, naming the option.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.batch_size == 0 {
            return Err(ConfigError::NoBatchSize);
        }
        if self.lanes == Some(0) {
            return Err(ConfigError::Option(
                "lanes must be at least 1 (none: chosen at the run's start)".into(),
            ));
        }
        if self.shuffle_buffer == Some(0) {
            return Err(ConfigError::Option(
                "shuffle_buffer must be at least 1 sample (none: chosen at the run's start)".into(),
            ));
        }
        if let Some(timeout) = self.storage.request_timeout
            && timeout.is_zero()
        {
            return Err(ConfigError::Option(
                "storage.request_timeout must be above 0 seconds (none: no deadline)".into(),
            ));
        }
        if self.cache.node_ranks == Some(0) {
            return Err(ConfigError::Option(
                "cache.node_ranks must be at least 1 (none: from the launcher)".into(),
            ));
        }
        if self.cache.dir.is_none()
            && (self.cache.node_ranks.is_some() || self.cache.local_rank.is_some())
        {
            // Only a directory is shared by a node's ranks: memory is each process's own.
            return Err(ConfigError::Option(
                "cache.node_ranks and cache.local_rank say which ranks share cache.dir: set \
                 cache.dir too, or leave them unset"
                    .into(),
            ));
        }
        self.source.validate()?;
        self.engine_config().validate().map_err(ConfigError::Engine)
    }

    /// The engine's settings (without a trace or runtime, which the builder adds).
    pub fn engine_config(&self) -> Config {
        let e = &self.engine;
        let defaults = Config::default();
        Config {
            fetch: e.fetch,
            decode_threads: e.decode_threads.unwrap_or_else(default_decode_threads),
            prefetch: e.prefetch,
            order: e.order,
            error_policy: match e.skip_errors {
                Some(max_failures) => ErrorPolicy::Skip { max_failures },
                None => ErrorPolicy::Fail,
            },
            max_buffered_bytes: e.max_buffered_bytes,
            max_decoded_bytes: e.max_decoded_bytes,
            coalesce_gap: e.coalesce_gap,
            max_coalesced_bytes: e.max_coalesced_bytes,
            hedge: e.hedge,
            ..defaults
        }
    }

    /// The retry layer's settings, `None` without one.
    pub fn retry_config(&self) -> Option<RetryConfig> {
        self.storage.max_retries.map(|retries| RetryConfig {
            max_attempts: retries.saturating_add(1),
            ..RetryConfig::default()
        })
    }

    /// `store` behind the request bounds these options set: each attempt under
    /// `storage.request_timeout`, retried `storage.max_retries` times. What every read goes
    /// through, a dataset's index and its samples alike.
    pub fn request_stack(&self, store: DynStorage) -> DynStorage {
        self.storage.stack(store, self.retry_config())
    }

    /// The ranks whose reads the disk cache is told: those of this process's node
    /// (`cache.node_ranks` and `cache.local_rank`, else `launch`'s), consecutive ranks
    /// as launchers number them, within the world these options read.
    pub fn node_ranks(&self, launch: &Launch) -> Result<Range<usize>, ConfigError> {
        let (rank, world) = (self.rank, self.world_size.max(1));
        if world == 1 {
            // One rank reads it all (under torchrun too, if so configured): no other
            // rank's reads to announce, whatever the launcher's variables say.
            return Ok(rank..rank + 1);
        }
        let ranks = self
            .cache
            .node_ranks
            .or(launch.node_ranks)
            .unwrap_or(1)
            .clamp(1, world);
        let local = self
            .cache
            .local_rank
            .or(launch.local_rank)
            .unwrap_or(rank % ranks);
        if local >= ranks || local > rank {
            return Err(ConfigError::Option(format!(
                "cache.local_rank {local} does not fit rank {rank} on a node of {ranks} ranks \
                 (cache.node_ranks, or the launcher's): set both, or neither to read them \
                 from the launcher"
            )));
        }
        let first = rank - local;
        Ok(first..(first + ranks).min(world))
    }

    /// The cache's settings when it is on: a directory, or a memory tier above 0.
    pub fn cache_config(&self) -> Option<CacheConfig> {
        let c = &self.cache;
        if c.dir.is_none() && c.memory.is_none_or(|m| m == 0) {
            return None;
        }
        let defaults = CacheConfig::default();
        Some(CacheConfig {
            dir: c.dir.clone(),
            memory_bytes: c.memory.unwrap_or(defaults.memory_bytes),
            disk_bytes: c.size,
            policy: c.policy,
            block_bytes: c.block,
        })
    }
}

/// Decode threads when none are given: the cores this process may use, shared by the ranks
/// of its node as its launcher says ([`Launch::decode_threads`](crate::Launch)).
pub(crate) fn default_decode_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Launch::node_from_env().decode_threads(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_settings_of_a_node_need_its_directory() {
        // Settings of a node that shares no directory are refused, not ignored.
        let mut shared = LoaderOptions::default();
        shared.cache.node_ranks = Some(4);
        assert!(shared.validate().is_err());
        shared.cache.dir = Some("/tmp/cache".into());
        assert!(shared.validate().is_ok());
        shared.cache.node_ranks = Some(0);
        assert!(shared.validate().is_err());
    }

    #[test]
    fn every_key_sets_its_own_default_back() {
        let keys = LoaderOptions::keys();
        assert!(keys.len() >= 25, "{}", keys.len());
        for k in &keys {
            let mut options = LoaderOptions::default();
            options
                .set(&k.key, &k.default)
                .unwrap_or_else(|e| panic!("{}: {e}", k.key));
            assert_eq!(
                options,
                LoaderOptions::default(),
                "{} = {}",
                k.key,
                k.default
            );
            assert!(!k.doc.is_empty(), "{} has no doc", k.key);
        }
    }

    #[test]
    fn values_are_read_as_front_ends_write_them() {
        let mut o = LoaderOptions::default();
        for (key, value) in [
            ("batch_size", "64"),
            ("shuffle", "true"),
            ("epochs", "3"),
            ("subset", "10..20"),
            ("engine.fetch", "async:32"),
            ("engine.hedge", "off"),
            ("engine.order", "as-completed"),
            ("storage.request_timeout", "1.5"),
            ("storage.max_retries", "none"),
            ("cache.dir", "/tmp/c"),
            ("cache.policy", "lru"),
            ("mixture.stop", "samples_per_epoch:1000"),
            ("mixture.batching", "per-stream"),
        ] {
            o.set(key, value).unwrap();
        }
        assert_eq!((o.batch_size, o.shuffle, o.epochs), (64, true, Some(3)));
        assert_eq!(o.subset, Some(10..20));
        assert_eq!(o.engine.fetch, Fetch::Async { max_in_flight: 32 });
        assert_eq!((o.engine.hedge, o.engine.order), (None, Order::AsCompleted));
        assert_eq!(o.storage.request_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(o.retry_config(), None);
        let cache = o.cache_config().unwrap();
        assert_eq!(cache.dir, Some(PathBuf::from("/tmp/c")));
        assert_eq!(cache.policy, CachePolicy::Lru);
        assert_eq!(o.mixture.stop, StopRule::SamplesPerEpoch(1000));
        assert_eq!(o.mixture.batching, Batching::PerStream);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let mut o = LoaderOptions::default();
        let err = o.set("engine.prefech", "4").unwrap_err().to_string();
        assert!(
            err.contains("\"engine.prefech\"") && err.contains("engine.prefetch"),
            "{err}"
        );
        let err = o.set("batch_size", "-1").unwrap_err().to_string();
        assert!(
            err.contains("batch_size") && err.contains("\"-1\""),
            "{err}"
        );
        let err = o.set("engine.fetch", "threads").unwrap_err().to_string();
        assert!(err.contains("threads:16"), "{err}");
        o.set("storage.request_timeout", "0").unwrap();
        let err = o.validate().unwrap_err().to_string();
        assert!(err.contains("storage.request_timeout"), "{err}");
    }

    #[test]
    fn the_cache_is_on_only_with_a_directory_or_memory() {
        let mut o = LoaderOptions::default();
        assert_eq!(o.cache_config(), None);
        o.set("cache.memory", "0").unwrap();
        assert_eq!(o.cache_config(), None);
        o.set("cache.memory", "1000").unwrap();
        assert_eq!(o.cache_config().map(|c| c.memory_bytes), Some(1000));
    }
}
