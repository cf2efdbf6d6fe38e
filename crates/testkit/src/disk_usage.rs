//! The bytes a directory holds, measured from outside while a cache writes into it.

use std::path::{Path, PathBuf};

/// Bytes the files under `dirs` held at one instant, or fewer. A walk while a writer works
/// would see a victim before its deletion and its replacement after its write, so only the
/// files seen and still there once the whole walk is over are summed: a subset of the
/// directories at that instant, which never exceeds what they really held. One walk for all
/// of them: two sums of separate walks would count a victim seen in one before its deletion
/// and its replacement seen in another after, which never coexisted.
pub fn du(dirs: &[PathBuf]) -> u64 {
    let seen: Vec<(PathBuf, u64)> = dirs
        .iter()
        .flat_map(|dir| walk(dir))
        .filter_map(|p| p.metadata().ok().map(|m| (p, m.len())))
        .collect();
    seen.iter()
        .filter(|(p, _)| p.exists())
        .map(|(_, len)| len)
        .sum()
}

/// Every file under `dir` (none if it is missing).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in read.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
