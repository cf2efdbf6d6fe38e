//! WebDataset's brace notation for shard lists: `train-{000000..000127}.tar`, `{a,b}`.
//!
//! Written here rather than taken from a crate: the notation is a dozen lines, and what
//! matters is that it expands exactly as Python's `braceexpand` (which WebDataset uses)
//! does for shard lists: zero-padded numeric ranges keep their width, groups multiply.

/// The most names a pattern may stand for: a list of shards longer than this is a typo.
const MAX_NAMES: u128 = 10_000_000;

/// Every name `pattern` stands for, in order. `Err` says what is malformed, or that the
/// pattern stands for more than 10 million names (counted before any is made).
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let names = count(pattern)?;
    if names > MAX_NAMES {
        return Err(format!(
            "the pattern stands for {names} names, more than 10 million; check its ranges"
        ));
    }
    expand_checked(pattern)
}

/// How many names `pattern` stands for, without making them.
fn count(pattern: &str) -> Result<u128, String> {
    let mut total: u128 = 1;
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|i| open + i)
            .ok_or_else(|| "a '{' without its '}'".to_owned())?;
        let body = &rest[open + 1..close];
        let n: u128 = match body.split_once("..") {
            Some((from, to)) => match (from.trim().parse::<u64>(), to.trim().parse::<u64>()) {
                (Ok(lo), Ok(hi)) if lo <= hi => u128::from(hi - lo) + 1,
                // Malformed: `expand_checked` says how.
                _ => 1,
            },
            None => body.split(',').count() as u128,
        };
        total = total.saturating_mul(n);
        rest = &rest[close + 1..];
    }
    Ok(total)
}

fn expand_checked(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('{') else {
        if pattern.contains('}') {
            return Err("a '}' without its '{'".into());
        }
        return Ok(vec![pattern.to_owned()]);
    };
    let close = pattern[open..]
        .find('}')
        .map(|i| open + i)
        .ok_or_else(|| "a '{' without its '}'".to_owned())?;
    let (head, body, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    if body.contains('{') {
        return Err("nested braces are not supported".into());
    }
    let choices = alternatives(body)?;
    let rest = expand_checked(tail)?;
    let mut out = Vec::with_capacity(choices.len() * rest.len());
    for choice in &choices {
        for r in &rest {
            out.push(format!("{head}{choice}{r}"));
        }
    }
    Ok(out)
}

/// The alternatives of one group's body: `a,b,c` or `000..127`.
fn alternatives(body: &str) -> Result<Vec<String>, String> {
    if let Some((from, to)) = body.split_once("..") {
        let (a, b) = (from.trim(), to.trim());
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("{{{body}}}: {s:?} is not a whole number"))
        };
        let (lo, hi) = (parse(a)?, parse(b)?);
        if lo > hi {
            return Err(format!("{{{body}}}: the range runs backwards"));
        }
        if hi - lo >= 10_000_000 {
            return Err(format!("{{{body}}}: more than 10 million names"));
        }
        let padded = (a.len() > 1 && a.starts_with('0')) || (b.len() > 1 && b.starts_with('0'));
        let width = if padded { a.len().max(b.len()) } else { 0 };
        return Ok((lo..=hi).map(|n| format!("{n:0width$}")).collect());
    }
    if body.contains(',') {
        return Ok(body.split(',').map(str::to_owned).collect());
    }
    // `{x}` is not a group for braceexpand either: it stays as it is.
    Ok(vec![format!("{{{body}}}")])
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn ranges_keep_their_width_and_groups_multiply() {
        assert_eq!(
            expand("s3://b/train-{000..002}.tar").unwrap(),
            [
                "s3://b/train-000.tar",
                "s3://b/train-001.tar",
                "s3://b/train-002.tar"
            ]
        );
        assert_eq!(expand("{8..10}").unwrap(), ["8", "9", "10"]);
        assert_eq!(
            expand("{a,b}-{0..1}.tar").unwrap(),
            ["a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"]
        );
        assert_eq!(expand("plain.tar").unwrap(), ["plain.tar"]);
        assert_eq!(expand("{x}.tar").unwrap(), ["{x}.tar"]);
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in ["a-{000..", "a-}", "{3..1}", "{a..b}", "{{0..1}}"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    // Issue 25, defect 18: each group passed its own limit and the product's
    // `Vec::with_capacity(10^14)` aborted the process (SIGABRT, the Python interpreter too).
    #[test]
    fn a_product_of_groups_past_the_limit_is_an_error_not_an_abort() {
        for typo in [
            "x-{0..9999999}-{0..9999999}.tar",
            "{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}.tar",
        ] {
            let err = expand(typo).unwrap_err();
            assert!(err.contains("more than 10 million"), "{typo}: {err}");
        }
        assert_eq!(expand("{0..999}-{0..9}").unwrap().len(), 10_000);
    }
}
