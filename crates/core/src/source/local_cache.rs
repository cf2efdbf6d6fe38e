//! The local directory where sources keep what they learnt of a dataset's files (shard
//! indexes, Parquet footers), so later runs and every rank on a node open it without
//! reading those files again; and writing into it so readers never see half a file.

use std::path::{Path, PathBuf};

/// The default cache directory: `$LOADER_CACHE_DIR`, else `$XDG_CACHE_HOME/loader`, else
/// `~/.cache/loader`; `None` when none is set.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("LOADER_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("loader")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("loader")))
}

/// Where what is cached of `key` on the store named `store` lives: `dir/folder/`, one file
/// per object, named by a hash of the store and key (keys may hold any character) after
/// the key's last part, with `extension`.
pub(crate) fn cache_path(
    dir: &Path,
    folder: &str,
    store: &str,
    key: &str,
    extension: &str,
) -> PathBuf {
    // FNV-1a, written out: the name must not change with a dependency or Rust version.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in store.bytes().chain([0]).chain(key.bytes()) {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let stem: String = key
        .rsplit('/')
        .next()
        .unwrap_or("object")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    dir.join(folder)
        .join(format!("{stem}-{hash:016x}.{extension}"))
}

/// Write `bytes` to `path` atomically (a temporary file in the same directory, renamed
/// into place), so a reader never sees half of one and two ranks writing the same file do
/// not corrupt it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = loader_storage::write::temp_file_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
