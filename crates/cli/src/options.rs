//! The loader's options as `run` and `bench` take them: the common ones as flags, every
//! one by key with `--set KEY=VALUE` (`loader run --list-options` names them all). Each
//! flag defaults to the library's default ([`LoaderOptions`]), so the CLI cannot drift.

use std::time::Duration;

use loader_core::{Column, Fetch, LoaderOptions, OptionValue, SourceOptions};

use crate::{Result, Strategy};

/// Samples per batch `loader bench` measures (the paper's batch size).
pub const BENCH_BATCH_SIZE: usize = 64;

/// Loader options shared by `run` and `bench`. Each flag's help is its option's own
/// declaration ([`declared`]) and each assigns its option's typed field.
#[derive(Debug, Clone, clap::Args)]
pub struct LoaderArgs {
    #[arg(long, help = format!("{}; `loader bench` measures {}", declared("batch_size"), BENCH_BATCH_SIZE))]
    pub batch_size: Option<usize>,
    #[arg(long, help = declared("seed"))]
    pub seed: Option<u64>,
    #[arg(long, help = declared("drop_last"))]
    pub drop_last: bool,
    #[arg(long, help = declared("engine.decode_threads"))]
    pub decode_threads: Option<usize>,
    #[arg(long, help = declared("engine.prefetch"))]
    pub prefetch: Option<usize>,
    #[arg(long, value_name = "N", help = declared("engine.skip_errors"))]
    pub skip_errors: Option<usize>,
    #[arg(long, value_name = "SECONDS", value_parser = option_value::<Duration>, help = declared("storage.request_timeout"))]
    pub request_timeout: Option<Duration>,
    #[arg(long, value_name = "N", help = declared("storage.max_retries"))]
    pub max_retries: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = declared("engine.max_buffered_bytes"))]
    pub max_buffered_bytes: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = declared("engine.max_decoded_bytes"))]
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
        if let Some(v) = self.batch_size {
            o.batch_size = v;
        }
        if let Some(v) = self.seed {
            o.seed = v;
        }
        o.drop_last |= self.drop_last;
        let (e, s) = (&mut o.engine, &mut o.storage);
        e.decode_threads = self.decode_threads.or(e.decode_threads);
        e.prefetch = self.prefetch.unwrap_or(e.prefetch);
        e.skip_errors = self.skip_errors.or(e.skip_errors);
        e.max_buffered_bytes = self.max_buffered_bytes.unwrap_or(e.max_buffered_bytes);
        e.max_decoded_bytes = self.max_decoded_bytes.unwrap_or(e.max_decoded_bytes);
        s.request_timeout = self.request_timeout.or(s.request_timeout);
        s.max_retries = self.max_retries.or(s.max_retries);
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

/// The dataset's own settings as `run` and `pack` take them (each also `--set source.KEY`
/// in `run`), their help their options' declarations.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SourceArgs {
    #[arg(long, value_name = "KEY", help = declared("source.manifest"))]
    pub manifest: Option<String>,
    #[arg(long, value_name = "NAME", help = declared("source.image_column"))]
    pub image_column: Option<String>,
    #[arg(long, value_name = "NAME", value_parser = option_value::<Column>, help = declared("source.label_column"))]
    pub label_column: Option<Column>,
}

impl SourceArgs {
    /// These flags over `o`.
    pub fn over(&self, o: &mut SourceOptions) {
        o.manifest.clone_from(&self.manifest);
        o.image_column.clone_from(&self.image_column);
        if let Some(column) = &self.label_column {
            o.label_column = column.clone();
        }
    }
}

/// A flag's help from the option it sets: the option's own doc line and default, so `--help`
/// cannot drift from the library (a key that is not an option says so, and a test looks).
pub fn declared(key: &str) -> String {
    match LoaderOptions::keys().into_iter().find(|k| k.key == key) {
        Some(k) if k.default.is_empty() => format!("{} [--set {key}]", k.doc),
        Some(k) => format!("{} [default: {}; --set {key}]", k.doc, k.default),
        None => format!("undeclared option {key}"),
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
