//! The loader's options as `run` and `bench` take them: the common ones as flags, every
//! one by key with `--set KEY=VALUE` (`loader run --list-options` names them all). Each
//! flag defaults to the library's default ([`LoaderOptions`]), so the CLI cannot drift.

use loader_core::{Fetch, LoaderOptions, OptionValue};

use crate::{Result, Strategy};

/// Loader options shared by `run` and `bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoaderArgs {
    /// Samples per batch (default: the library's, 1, for `run`; `bench` measures 64).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Seed of the shuffle and of random transforms.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Drop the last batch of an epoch if it is short.
    #[arg(long)]
    pub drop_last: bool,
    /// CPU threads for decoding (default: the cores shared by the ranks of the node).
    #[arg(long)]
    pub decode_threads: Option<usize>,
    /// Finished batches kept ready for the consumer (default 2).
    #[arg(long)]
    pub prefetch: Option<usize>,
    /// Skip up to N failing samples per epoch (reported) instead of stopping at the first.
    #[arg(long, value_name = "N")]
    pub skip_errors: Option<usize>,
    /// Seconds one attempt of one request may take before it is retried (default 30).
    #[arg(long, value_name = "SECONDS")]
    pub request_timeout: Option<f64>,
    /// Retries of a failed or timed-out request (default 9).
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Fetched, undecoded bytes held at most, e.g. 1GiB (default 1 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_buffered_bytes: Option<u64>,
    /// Decoded images and finished batches held at most, e.g. 1GiB (default 1 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_decoded_bytes: Option<u64>,
    /// Any loader option by its key, e.g. `engine.hedge=tail`; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// List every loader option with its default, and exit.
    #[arg(long)]
    pub list_options: bool,
}

impl LoaderArgs {
    /// These flags over `o` (a command's own flags set first); `--set` comes last.
    pub fn over(&self, mut o: LoaderOptions) -> Result<LoaderOptions> {
        let mut set = |key: &str, value: Option<String>| -> Result {
            match value {
                Some(value) => Ok(o.set(key, &value)?),
                None => Ok(()),
            }
        };
        set("batch_size", self.batch_size.map(|v| v.to_string()))?;
        set("seed", self.seed.map(|v| v.to_string()))?;
        set("drop_last", self.drop_last.then(|| "true".into()))?;
        set(
            "engine.decode_threads",
            self.decode_threads.map(|v| v.to_string()),
        )?;
        set("engine.prefetch", self.prefetch.map(|v| v.to_string()))?;
        set(
            "engine.skip_errors",
            self.skip_errors.map(|v| v.to_string()),
        )?;
        set(
            "storage.request_timeout",
            self.request_timeout.map(|v| v.to_string()),
        )?;
        set(
            "storage.max_retries",
            self.max_retries.map(|v| v.to_string()),
        )?;
        set(
            "engine.max_buffered_bytes",
            self.max_buffered_bytes.map(|v| v.to_string()),
        )?;
        set(
            "engine.max_decoded_bytes",
            self.max_decoded_bytes.map(|v| v.to_string()),
        )?;
        for pair in &self.set {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--set {pair:?} is not KEY=VALUE"))?;
            o.set(key, value)?;
        }
        o.validate()?;
        Ok(o)
    }

    /// With `--list-options`: print every option, and say so.
    pub fn listed(&self) -> bool {
        if self.list_options {
            for k in LoaderOptions::keys() {
                println!("{:<28} {:<12} {}", k.key, k.default, k.doc);
            }
        }
        self.list_options
    }
}

/// A flag's value read as the library reads the option's text (`--order global` is
/// `--set shard_order=global`), so the CLI spells no option's values of its own.
pub fn option_value<T: OptionValue>(text: &str) -> std::result::Result<T, String> {
    T::parse(text)
}

/// A size as people write it: `2GB`, `512MiB`, `1.5 G`, or bytes.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size ({e}); write e.g. 2GB or 512MiB"))
}

/// Split `key=value` store options.
pub fn parse_store_options(options: &[String]) -> Result<Vec<(String, String)>> {
    options
        .iter()
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                .ok_or_else(|| format!("--option {o:?} is not KEY=VALUE").into())
        })
        .collect()
}

/// The strategy with its concurrency; `async` without a fixed `max_in_flight` adapts.
pub fn fetch(strategy: Strategy, max_in_flight: Option<usize>, threads: usize) -> Fetch {
    match (strategy, max_in_flight) {
        (Strategy::Sequential, _) => Fetch::Sequential { workers: threads },
        (Strategy::Threads, _) => Fetch::Threads { threads },
        (Strategy::Async, Some(max_in_flight)) => Fetch::Async { max_in_flight },
        (Strategy::Async, None) => Fetch::default(),
    }
}
