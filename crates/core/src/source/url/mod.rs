//! Which files a dataset URL names, and the store they lie in: brace lists
//! (`train-{000..127}.tar`, `braces`) and the cut between a store and its keys.

mod braces;

pub use braces::expand;

use super::error::{Result, SourceError};

/// Split `url` into the store's root and the keys it names, or `None` for "a prefix":
/// a brace list (`s3://b/train-{000..009}.tar`, `/data/{a,b}/x.tar`) or one file that
/// `names` says is a dataset's file is cut at the last `/` before it.
pub(crate) fn split_named(
    url: &str,
    names: impl Fn(&str) -> bool,
) -> Result<(String, Option<Vec<String>>)> {
    // Errors show the URL without its user info and query, where credentials hide.
    let list_error = |problem: String| SourceError::List(loader_storage::redact(url), problem);
    let cut = match url.find('{') {
        Some(brace) => url[..brace].rfind('/'),
        None if names(url) => url.rfind('/'),
        None => return Ok((url.trim_end_matches('/').to_owned(), None)),
    };
    let (root, pattern) = match cut {
        Some(i) => (url[..i].to_owned(), &url[i + 1..]),
        None => (".".to_owned(), url),
    };
    if pattern.contains('?') {
        // A query would become part of every key (and show up in errors, where a
        // signature or token must not).
        return Err(list_error(
            "a URL of files with a query (?...) is not supported: give the store's \
             credentials as storage options instead"
                .into(),
        ));
    }
    let keys = expand(pattern).map_err(list_error)?;
    Ok((if root.is_empty() { "/".into() } else { root }, Some(keys)))
}
