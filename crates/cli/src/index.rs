//! `loader index`: build the index of WebDataset shards ahead of time, as sidecar files.

use std::path::{Path, PathBuf};

use loader_core::webdataset::{SIDECAR_SUFFIX, WebDataset, split_url, write_atomically};

use crate::Result;
use crate::options::parse_store_options;
use crate::progress::indexing_bar;

/// Arguments of `loader index`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Shards: a brace list (`s3://bucket/train-{000000..000127}.tar`), one `.tar`, or a
    /// prefix holding `.tar` files.
    url: String,
    /// Write the sidecars into this directory (to upload next to the shards); by default
    /// they go next to local shards, and remote shards need this.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Store option as key=value; repeatable.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
}

pub fn main(args: Args) -> Result {
    let options = parse_store_options(&args.options)?;
    let written = write_sidecars(&args.url, &options, args.out.as_deref(), true)?;
    println!("wrote {written} sidecar indexes");
    Ok(())
}

/// Index every shard `url` names and write `<shard>.idx.json` for each, into `out` or
/// next to local shards. Returns how many were written.
pub fn write_sidecars(
    url: &str,
    options: &[(String, String)],
    out: Option<&Path>,
    progress: bool,
) -> Result<usize> {
    let (root, _) = split_url(url)?;
    let local = !root.contains("://") || root.starts_with("file://");
    let dir = match out {
        Some(dir) => dir.to_path_buf(),
        None if local => PathBuf::from(root.strip_prefix("file://").unwrap_or(&root)),
        None => {
            return Err(format!(
                "{root} is not on local disk: give --out DIR and upload the sidecars next to the shards"
            )
            .into());
        }
    };
    let (bar, progress) = indexing_bar(progress);
    // Built from the shards themselves: a sidecar being written must not be read back.
    let wds = WebDataset::new()
        .sidecars(false)
        .cache_dir(None)
        .progress(progress);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let indexes = runtime.block_on(async {
        let (store, metas) = wds.resolve_url(url, options.iter().cloned()).await?;
        // Scanned behind the default timeouts and retries, as `loader run` reads.
        let store = loader_core::LoaderOptions::default().request_stack(store);
        wds.indexes(&store, metas).await
    })?;
    bar.finish_and_clear();
    for index in &indexes {
        let path = dir.join(format!("{}{SIDECAR_SUFFIX}", index.shard));
        write_atomically(&path, &index.to_json())?;
    }
    Ok(indexes.len())
}
