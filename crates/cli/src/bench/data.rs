//! The benchmark's data, generated once and reused: image files, shards, Parquet files
//! with and without an offset index, MDS shards, and the files packed at 256 px. Each kind
//! is made only when a format asks for it, and marked complete when whole.

use std::path::Path;

use super::Args;
use crate::report::Format;
use crate::{Result, generate};

/// Every kind of data `args.formats` reads, under `root`.
pub(super) fn prepare(args: &Args, root: &Path) -> Result {
    let packed = args.formats.contains(&Format::Packed256);
    if args
        .formats
        .iter()
        .any(|f| matches!(f, Format::ShardsLocal | Format::ShardsGlobal))
    {
        shards(args, root)?;
    }
    // Parquet files of four shards' images each, with an offset index and without one.
    for (indexed, wanted) in [
        (true, Format::ParquetLocal),
        (false, Format::ParquetNoIndex),
    ] {
        if args
            .formats
            .iter()
            .any(|f| f.parquet() && (*f == wanted || (indexed && *f == Format::ParquetGlobal)))
        {
            parquet(args, root, indexed)?;
        }
    }
    if args.formats.contains(&Format::Mds) {
        once(root, ".mds-complete", || {
            let dir = root.join(Format::Mds.bucket());
            say(args, "as MDS shards in", &dir);
            let _ = std::fs::remove_dir_all(&dir);
            crate::generate::mds::write_mds(&args.dataset.spec(), &dir, !args.json)
        })?;
    }
    // The packed row is made from the files row's images.
    let bucket_dir = root.join("bench");
    if args.formats.contains(&Format::Files) || packed {
        once(root, ".complete", || {
            say(args, "in", &bucket_dir);
            generate::write(&args.dataset.spec(), &bucket_dir, !args.json)
        })?;
    }
    if packed {
        once(root, ".packed-256-complete", || {
            let packed_dir = root.join(Format::Packed256.bucket());
            eprintln!(
                "packing {} images at 256 px into {} ...",
                args.dataset.images,
                packed_dir.display()
            );
            let _ = std::fs::remove_dir_all(&packed_dir);
            crate::pack::main(crate::pack::Args::resized(
                &bucket_dir,
                &packed_dir,
                256,
                4 << 20,
            ))
        })?;
    }
    Ok(())
}

/// `make` run unless `root/marker` says it ran whole, then marked.
fn once<T>(root: &Path, marker: &str, make: impl FnOnce() -> Result<T>) -> Result {
    let marker = root.join(marker);
    if !marker.exists() {
        make()?;
        std::fs::write(&marker, b"")?;
    }
    Ok(())
}

fn say(args: &Args, how: &str, dir: &Path) {
    eprintln!(
        "generating {} images {how} {} ...",
        args.dataset.images,
        dir.display()
    );
}

fn shards(args: &Args, root: &Path) -> Result {
    once(
        root,
        &format!(".shards-{}-complete", args.shard_images),
        || {
            let dir = root.join("shards");
            say(args, "as shards in", &dir);
            let _ = std::fs::remove_dir_all(&dir);
            let shards = args.dataset.images.div_ceil(args.shard_images.max(1));
            generate::write_shards(&args.dataset.spec(), &dir, shards, !args.json)
        },
    )
}

fn parquet(args: &Args, root: &Path, indexed: bool) -> Result {
    let per_file = 4 * args.shard_images.max(1);
    let bucket = super::wanted_bucket(indexed);
    once(root, &format!(".{bucket}-{per_file}-complete"), || {
        let dir = root.join(bucket);
        say(args, "as Parquet files in", &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let files = args.dataset.images.div_ceil(per_file);
        crate::generate::parquet::write_parquet(
            &args.dataset.spec(),
            &dir,
            files,
            indexed,
            !args.json,
        )
    })
}
