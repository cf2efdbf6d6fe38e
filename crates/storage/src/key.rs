//! Key rules shared by every backend, so a key means the same on local disk and on S3.

use crate::{Error, ErrorKind, Result};

/// Longest key accepted, in bytes: S3's own limit.
pub const MAX_KEY_LEN: usize = 1024;

/// Why `key` is not a valid object key, or `None` if it is.
///
/// A key is a non-empty, `/`-separated path relative to the store's root: no leading `/`,
/// no empty, `.` or `..` segment, no NUL or backslash, at most [`MAX_KEY_LEN`] bytes.
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("the key is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Some("the key is longer than 1024 bytes");
    }
    if key.contains('\0') {
        return Some("the key contains a NUL byte");
    }
    if key.contains('\\') {
        return Some("the key contains a backslash; keys are '/'-separated");
    }
    if key.starts_with('/') {
        return Some("the key is absolute; keys are relative to the store's root");
    }
    for segment in key.split('/') {
        match segment {
            "" => return Some("the key has an empty segment ('//' or a trailing '/')"),
            "." | ".." => {
                return Some("the key has a '.' or '..' segment, which could escape the root");
            }
            _ => {}
        }
    }
    None
}

/// Check `key` for `backend`, as an [`ErrorKind::InvalidKey`] error naming both.
pub fn check_key(backend: &str, key: &str) -> Result<()> {
    match key_problem(key) {
        None => Ok(()),
        Some(problem) => Err(Error::new(ErrorKind::InvalidKey, backend, key, problem)),
    }
}

/// Check a listing prefix: empty means the whole store; a trailing `/` is allowed and dropped.
pub fn check_prefix<'a>(backend: &str, prefix: &'a str) -> Result<&'a str> {
    let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
    if trimmed.is_empty() {
        return Ok("");
    }
    check_key(backend, trimmed).map(|()| trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_keys() {
        for key in [
            "a",
            "cat/1.jpg",
            "n01440764/n01440764_10026.JPEG",
            "a.b/..c/d..",
            "ü/ß",
        ] {
            assert_eq!(key_problem(key), None, "{key}");
        }
    }

    #[test]
    fn refuses_keys_that_could_escape_or_confuse() {
        let long = "a".repeat(MAX_KEY_LEN + 1);
        for key in [
            "",
            "/etc/passwd",
            "..",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "a\\b",
            long.as_str(),
        ] {
            assert!(key_problem(key).is_some(), "{key:?} was accepted");
        }
    }

    #[test]
    fn prefix_may_be_empty_or_end_in_slash() {
        assert_eq!(check_prefix("mem", "").unwrap(), "");
        assert_eq!(check_prefix("mem", "/").unwrap(), "");
        assert_eq!(check_prefix("mem", "train/").unwrap(), "train");
        let err = check_prefix("mem", "../x").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        assert_eq!(err.backend(), "mem");
    }
}
