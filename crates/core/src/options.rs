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
use std::time::Duration;

use loader_sampler::{Batching, StopRule};
use loader_scheduler::{Config, ErrorPolicy, Fetch, Hedge, Order};
use loader_storage::layer::{CacheConfig, CachePolicy, RetryConfig};

use crate::error::{ConfigError, OptionError};

/// The default deadline of one attempt of one request: far above any healthy GET of a
/// sample, so only a stalled connection trips it, and then the retry policy takes over.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a dataset stored in shards is shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardOrder {
    /// Shards in a random order, samples shuffled within a buffer of a few chunks, each
    /// chunk read with one request ([`ShardSampler`](loader_sampler::ShardSampler)); the
    /// default.
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

/// A value an option holds: read from the text a front end passes, and written back.
pub trait OptionValue: Sized {
    /// The value of `text`, or why it is not one.
    fn parse(text: &str) -> Result<Self, String>;
    /// The value as [`parse`](Self::parse) reads it.
    fn show(&self) -> String;
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
            fn set_key(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
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

            /// This group's options and their values here, under `prefix`.
            fn list(&self, prefix: &str, out: &mut Vec<OptionKey>) {
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
    }
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
        /// Ranks of this node sharing the directory: the cache keeps by all their reads (none: LOCAL_WORLD_SIZE or SLURM_NTASKS_PER_NODE, else 1).
        node_ranks: Option<usize> = None,
        /// This process's place among the node's ranks (none: LOCAL_RANK or SLURM_LOCALID, else rank modulo node_ranks).
        local_rank: Option<usize> = None,
    }
}

impl LoaderOptions {
    /// Set the option at dotted `key` (`batch_size`, `engine.prefetch`, `cache.dir`, ...)
    /// from its text; `none` unsets an optional one.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        match self.set_key(key.trim(), value) {
            Some(Ok(())) => Ok(()),
            Some(Err(problem)) => Err(OptionError::Value {
                key: key.trim().to_owned(),
                problem,
            }),
            None => Err(OptionError::Unknown {
                key: key.to_owned(),
                known: Self::keys()
                    .into_iter()
                    .map(|k| k.key)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Every option: its key, its default and what it does.
    pub fn keys() -> Vec<OptionKey> {
        let mut out = Vec::new();
        Self::default().list("", &mut out);
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

impl OptionValue for bool {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(format!("{text:?} is not true or false")),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

macro_rules! integer_value {
    ($($ty:ty),*) => {$(
        impl OptionValue for $ty {
            fn parse(text: &str) -> Result<Self, String> {
                text.replace('_', "")
                    .parse()
                    .map_err(|e| format!("{text:?} is not a whole number of at most {}: {e}", <$ty>::MAX))
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_value!(usize, u64, u32);

impl<T: OptionValue> OptionValue for Option<T> {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "" | "none" | "off" => Ok(None),
            _ => T::parse(text).map(Some),
        }
    }
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "none".into(), T::show)
    }
}

impl OptionValue for PathBuf {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
}

/// Seconds, as a decimal number.
impl OptionValue for Duration {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| format!("{text:?} is not a number of seconds"))
    }
    fn show(&self) -> String {
        format!("{}", self.as_secs_f64())
    }
}

/// `start..end`.
impl OptionValue for Range<usize> {
    fn parse(text: &str) -> Result<Self, String> {
        let (start, end) = text
            .split_once("..")
            .ok_or_else(|| format!("{text:?} is not a range start..end"))?;
        Ok(usize::parse(start.trim())?..usize::parse(end.trim())?)
    }
    fn show(&self) -> String {
        format!("{}..{}", self.start, self.end)
    }
}

/// Decode threads when none are given: the cores this process may use, shared by the ranks
/// of its node (torchrun's `LOCAL_WORLD_SIZE`, SLURM's `SLURM_NTASKS_PER_NODE`; SLURM's
/// `SLURM_CPUS_PER_TASK` when it says the share itself), at least one. Without this, 8 ranks
/// of a node would each start a thread per core, 8 times what the node has.
pub(crate) fn default_decode_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    threads_per_rank(cores, |name| std::env::var(name).ok())
}

/// [`default_decode_threads`] for `cores`, reading the environment through `get`.
fn threads_per_rank(cores: usize, get: impl Fn(&str) -> Option<String>) -> usize {
    // SLURM's "8(x2)" (8 tasks on each of 2 nodes) reads as 8.
    let number = |name: &str| {
        get(name).and_then(|v| {
            let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().ok().filter(|&n| n > 0)
        })
    };
    if let Some(per_task) = number("SLURM_CPUS_PER_TASK") {
        return per_task.min(cores).max(1);
    }
    let ranks = number("LOCAL_WORLD_SIZE")
        .or_else(|| number("SLURM_NTASKS_PER_NODE"))
        .unwrap_or(1);
    (cores / ranks).max(1)
}

/// Ranks whose reads the disk cache is told: those of this process's node (torchrun's
/// `LOCAL_RANK`/`LOCAL_WORLD_SIZE`, SLURM's `SLURM_LOCALID`/`SLURM_NTASKS_PER_NODE`, or the
/// options), consecutive ranks as both launchers number them, within the world.
pub(crate) fn node_ranks(options: &LoaderOptions) -> Result<Range<usize>, ConfigError> {
    node_ranks_from(options, |name| std::env::var(name).ok())
}

/// [`node_ranks`], reading the environment through `get`.
fn node_ranks_from(
    options: &LoaderOptions,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Range<usize>, ConfigError> {
    let number = |name: &str| {
        get(name).and_then(|v| {
            let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().ok()
        })
    };
    let (rank, world) = (options.rank, options.world_size.max(1));
    if world == 1 {
        // One rank reads it all (under torchrun too, if so configured): no other rank's
        // reads to announce, whatever the launcher's variables say.
        return Ok(rank..rank + 1);
    }
    let ranks = options
        .cache
        .node_ranks
        .or_else(|| number("LOCAL_WORLD_SIZE"))
        .or_else(|| number("SLURM_NTASKS_PER_NODE"))
        .unwrap_or(1)
        .clamp(1, world);
    let local = options
        .cache
        .local_rank
        .or_else(|| number("LOCAL_RANK"))
        .or_else(|| number("SLURM_LOCALID"))
        .unwrap_or(rank % ranks);
    if local >= ranks || local > rank {
        return Err(ConfigError::Option(format!(
            "cache.local_rank {local} does not fit rank {rank} on a node of {ranks} ranks \
             (cache.node_ranks, LOCAL_WORLD_SIZE or SLURM_NTASKS_PER_NODE): set both, or \
             neither to read them from the launcher"
        )));
    }
    let first = rank - local;
    Ok(first..(first + ranks).min(world))
}

impl OptionValue for ShardOrder {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "local" => Ok(ShardOrder::Local),
            "global" => Ok(ShardOrder::Global),
            _ => Err(format!("{text:?}: local or global")),
        }
    }
    fn show(&self) -> String {
        match self {
            ShardOrder::Local => "local",
            ShardOrder::Global => "global",
        }
        .into()
    }
}

/// `first_exhausted`, `all_exhausted`, `all_exhausted_without_replacement`,
/// `samples_per_epoch:N`, `cycle_forever`.
impl OptionValue for StopRule {
    fn parse(text: &str) -> Result<Self, String> {
        let lower = text.trim().to_ascii_lowercase().replace('-', "_");
        if let Some(n) = lower.strip_prefix("samples_per_epoch") {
            let n = n.trim_start_matches([':', '=']).trim();
            return match u64::parse(n)? {
                0 => Err("samples_per_epoch must be at least 1".into()),
                n => Ok(StopRule::SamplesPerEpoch(n)),
            };
        }
        match lower.as_str() {
            "first_exhausted" => Ok(StopRule::FirstExhausted),
            "all_exhausted" => Ok(StopRule::AllExhausted),
            "all_exhausted_without_replacement" => Ok(StopRule::AllExhaustedWithoutReplacement),
            "cycle_forever" => Ok(StopRule::CycleForever),
            _ => Err(format!(
                "{text:?}: first_exhausted, all_exhausted, all_exhausted_without_replacement, \
                 samples_per_epoch:N or cycle_forever"
            )),
        }
    }
    fn show(&self) -> String {
        match self {
            StopRule::FirstExhausted => "first_exhausted".into(),
            StopRule::AllExhausted => "all_exhausted".into(),
            StopRule::AllExhaustedWithoutReplacement => "all_exhausted_without_replacement".into(),
            StopRule::SamplesPerEpoch(n) => format!("samples_per_epoch:{n}"),
            StopRule::CycleForever => "cycle_forever".into(),
        }
    }
}

/// `mixed` or `per_stream`.
impl OptionValue for Batching {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "mixed" => Ok(Batching::Mixed),
            "per_stream" => Ok(Batching::PerStream),
            _ => Err(format!("{text:?}: mixed or per_stream")),
        }
    }
    fn show(&self) -> String {
        match self {
            Batching::Mixed => "mixed",
            Batching::PerStream => "per_stream",
        }
        .into()
    }
}

impl OptionValue for Order {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "sampler" => Ok(Order::Sampler),
            "as_completed" => Ok(Order::AsCompleted),
            _ => Err(format!("{text:?}: sampler or as_completed")),
        }
    }
    fn show(&self) -> String {
        match self {
            Order::AsCompleted => "as_completed",
            _ => "sampler",
        }
        .into()
    }
}

impl OptionValue for CachePolicy {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse()
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// `adaptive`, `adaptive:CAP`, `async:N`, `threads:N`, `sequential:N`.
impl OptionValue for Fetch {
    fn parse(text: &str) -> Result<Self, String> {
        let lower = text.to_ascii_lowercase();
        let (kind, n) = match lower.split_once(':') {
            Some((kind, n)) => (kind.trim().to_owned(), Some(usize::parse(n.trim())?)),
            None => (lower.trim().to_owned(), None),
        };
        let need =
            |n: Option<usize>| n.ok_or_else(|| format!("{text:?}: give the count, e.g. {kind}:16"));
        match kind.as_str() {
            "adaptive" => Ok(Fetch::Adaptive {
                max_in_flight: n.unwrap_or(loader_scheduler::DEFAULT_IN_FLIGHT_CAP),
            }),
            "async" => Ok(Fetch::Async {
                max_in_flight: need(n)?,
            }),
            "threads" => Ok(Fetch::Threads { threads: need(n)? }),
            "sequential" => Ok(Fetch::Sequential { workers: need(n)? }),
            _ => Err(format!(
                "{text:?}: adaptive[:CAP], async:N, threads:N or sequential:N"
            )),
        }
    }
    fn show(&self) -> String {
        match *self {
            Fetch::Adaptive { max_in_flight }
                if max_in_flight == loader_scheduler::DEFAULT_IN_FLIGHT_CAP =>
            {
                "adaptive".into()
            }
            Fetch::Adaptive { max_in_flight } => format!("adaptive:{max_in_flight}"),
            Fetch::Async { max_in_flight } => format!("async:{max_in_flight}"),
            Fetch::Threads { threads } => format!("threads:{threads}"),
            Fetch::Sequential { workers } => format!("sequential:{workers}"),
        }
    }
}

/// `stalls` ([`Hedge::stalls_only`]), `tail` ([`Hedge::default`]); `off` is `none`.
impl OptionValue for Hedge {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "stalls" => Ok(Hedge::stalls_only()),
            "tail" => Ok(Hedge::default()),
            _ => Err(format!("{text:?}: stalls, tail or off")),
        }
    }
    fn show(&self) -> String {
        if *self == Hedge::stalls_only() {
            "stalls".into()
        } else if *self == Hedge::default() {
            "tail".into()
        } else {
            "custom".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_threads_share_the_node_among_its_ranks() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(threads_per_rank(16, env(&[])), 16);
        assert_eq!(threads_per_rank(16, env(&[("LOCAL_WORLD_SIZE", "8")])), 2);
        assert_eq!(threads_per_rank(4, env(&[("LOCAL_WORLD_SIZE", "8")])), 1);
        assert_eq!(
            threads_per_rank(16, env(&[("SLURM_NTASKS_PER_NODE", "4(x2)")])),
            4
        );
        assert_eq!(
            threads_per_rank(
                64,
                env(&[("SLURM_NTASKS_PER_NODE", "8"), ("SLURM_CPUS_PER_TASK", "6")])
            ),
            6
        );
        assert_eq!(threads_per_rank(16, env(&[("LOCAL_WORLD_SIZE", "x")])), 16);
    }

    #[test]
    fn the_nodes_ranks_come_from_the_launcher_or_the_options() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let mut o = LoaderOptions {
            rank: 5,
            world_size: 16,
            ..LoaderOptions::default()
        };
        assert_eq!(node_ranks_from(&o, env(&[])).unwrap(), 5..6);
        let torchrun = env(&[("LOCAL_WORLD_SIZE", "4"), ("LOCAL_RANK", "1")]);
        assert_eq!(node_ranks_from(&o, torchrun).unwrap(), 4..8);
        let slurm = env(&[("SLURM_NTASKS_PER_NODE", "8(x2)"), ("SLURM_LOCALID", "5")]);
        assert_eq!(node_ranks_from(&o, slurm).unwrap(), 0..8);
        o.cache.node_ranks = Some(8);
        assert_eq!(node_ranks_from(&o, env(&[])).unwrap(), 0..8);
        o.cache.local_rank = Some(9);
        assert!(node_ranks_from(&o, env(&[])).is_err());
        // A node larger than the world holds the world.
        o.world_size = 2;
        o.rank = 1;
        o.cache.local_rank = None;
        assert_eq!(node_ranks_from(&o, env(&[])).unwrap(), 0..2);
        // One rank alone, as a loader without ranks under torchrun is.
        o.world_size = 1;
        o.rank = 0;
        let torchrun = env(&[("LOCAL_WORLD_SIZE", "4"), ("LOCAL_RANK", "3")]);
        assert_eq!(node_ranks_from(&o, torchrun).unwrap(), 0..1);
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
