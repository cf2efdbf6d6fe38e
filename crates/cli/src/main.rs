//! `loader`: generate a dataset, serve it, iterate it, pack it into shards, and reproduce the
//! paper's benchmark.
//!
//! Rooms: one file or folder per command (`run`, `index`, `pack`; with the default `tools`
//! feature `generate` (`loader gen`), `serve`, `bench` and its `report`), below them `options` (the loader flags
//! `run` and `bench` share, over the library's `LoaderOptions`) and `progress` (what a
//! command shows while it works). Files are written by each format's own writer in
//! `loader-core`, beside its reader.

#[cfg(feature = "tools")]
mod bench;
#[cfg(feature = "tools")]
mod generate;
mod index;
mod options;
mod pack;
#[cfg(feature = "tools")]
mod parallel;
mod progress;
#[cfg(feature = "tools")]
mod report;
mod run;
#[cfg(feature = "tools")]
mod serve;
#[cfg(feature = "tokenize")]
mod tokenize;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Feed ML training from S3, HTTP or local disk as fast as from a local drive.
#[derive(Debug, Parser)]
#[command(name = "loader", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Write a synthetic ImageNet-like dataset (class folders of JPEGs, or tar shards).
    #[cfg(feature = "tools")]
    Gen(generate::Args),
    /// Build the index of WebDataset shards ahead of time, as sidecar files.
    Index(index::Args),
    /// Serve a directory over the in-process S3 or HTTP server, optionally with added RTT.
    #[cfg(feature = "tools")]
    Serve(serve::Args),
    /// Iterate a dataset at a URL and report throughput and the bottleneck stage.
    Run(run::Args),
    /// Write any dataset the loader reads as WebDataset or Parquet shards, optionally resized.
    Pack(pack::Args),
    /// Reproduce the paper: storage latency x fetch strategy, against the CPU ceiling.
    #[cfg(feature = "tools")]
    Bench(bench::Args),
    /// Tokenize a text corpus (JSON lines) into token files the loader reads (Megatron-LM, MDS, LitData).
    #[cfg(feature = "tokenize")]
    Tokenize(tokenize::Args),
}

/// Fetch strategy names shared by `run` and `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// PyTorch's vanilla loader: each worker fetches then decodes its batch item by item.
    Sequential,
    /// The paper's threaded fetcher.
    Threads,
    /// Many requests in flight on an async runtime, decode on a CPU pool.
    Async,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The library's warnings (a cache write that failed, a detached thread),
    // which it reports through `tracing` rather than printing.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .without_time()
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
    // Every request in flight holds a socket, and the adaptive limit stops at half the soft
    // limit of open files: a default `ulimit -n` of 1,024 would hold it under what 500 ms
    // of latency needs. The command owns its process, so it takes what the hard limit
    // allows, as Go programs do.
    loader_core::storage::raise_open_files_limit();
    let result = match cli.command {
        #[cfg(feature = "tools")]
        Command::Gen(args) => generate::main(args),
        Command::Index(args) => index::main(args),
        #[cfg(feature = "tools")]
        Command::Serve(args) => serve::main(args),
        Command::Run(args) => run::main(args),
        Command::Pack(args) => pack::main(args),
        #[cfg(feature = "tools")]
        Command::Bench(args) => bench::main(args),
        #[cfg(feature = "tokenize")]
        Command::Tokenize(args) => tokenize::main(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loader: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Errors of the commands: anything with a message.
pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag whose help is an option's declaration names a declared option, and shows
    /// its default as the library declares it.
    #[test]
    fn help_comes_from_the_declarations() {
        let mut cli = super::Cli::command();
        cli.build();
        let mut seen = 0;
        for command in cli.get_subcommands() {
            for arg in command.get_arguments() {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                assert!(
                    !help.contains("undeclared"),
                    "{}: {help}",
                    command.get_name()
                );
                seen += usize::from(help.contains("; --set "));
            }
        }
        assert!(
            seen >= 20,
            "{seen} flags read their help from a declaration"
        );
        let run = cli
            .find_subcommand_mut("run")
            .map(|c| c.render_long_help().to_string());
        let run = run.unwrap_or_default();
        assert!(run.contains("[default: 2; --set engine.prefetch]"), "{run}");
    }
}
