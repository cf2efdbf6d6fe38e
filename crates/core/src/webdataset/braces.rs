//! WebDataset's brace notation for shard lists: `train-{000000..000127}.tar`, `{a,b}`.
//!
//! Written here rather than taken from a crate: the notation is a dozen lines, and what
//! matters is that it expands exactly as Python's `braceexpand` (which WebDataset uses)
//! does for shard lists: zero-padded numeric ranges keep their width, groups multiply.

/// Every name `pattern` stands for, in order. `Err` says what is malformed.
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
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
    let rest = expand(tail)?;
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
}
