//! Grouping a shard's members into samples, as WebDataset groups them.

use super::tar::TarMember;

/// One sample of a shard: its key and its members by suffix.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IndexedSample {
    /// WebDataset's `__key__`: the member's directory plus its name up to the first dot.
    pub key: String,
    /// Where the header of its first member starts.
    pub offset: u64,
    /// Its members: suffix (lowercased, e.g. `jpg`, `cls`, `seg.png`), data offset, size.
    pub members: Vec<(String, u64, u64)>,
    /// The text of its small members (labels, class names), by suffix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub texts: Vec<(String, String)>,
}

/// A sample that breaks the rules: its key, where it starts, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupError {
    pub(crate) key: String,
    pub(crate) offset: u64,
    pub(crate) problem: String,
}

/// WebDataset's split of a member name into (key, suffix): the key is the directory plus
/// the file name up to its first dot, the suffix the rest. `None` for a name without a dot
/// in its file name, which WebDataset skips.
pub(crate) fn split_name(name: &str) -> Option<(&str, &str)> {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[file_start..].find('.')? + file_start;
    Some((&name[..dot], &name[dot + 1..]))
}

/// Whether WebDataset skips a member as metadata: a path component of the form `__x__`
/// (`__README__`, `__index__/...`).
fn is_meta(name: &str) -> bool {
    name.split('/')
        .any(|part| part.len() >= 4 && part.starts_with("__") && part.ends_with("__"))
}

/// Members grouped into samples: *consecutive* members with the same key form a sample,
/// so a key that comes back later starts a new sample, as in WebDataset.
pub(crate) fn group(members: Vec<TarMember>) -> Result<Vec<IndexedSample>, GroupError> {
    let mut samples: Vec<IndexedSample> = Vec::new();
    for m in members {
        if is_meta(&m.name) {
            continue;
        }
        let Some((key, suffix)) = split_name(&m.name) else {
            continue;
        };
        let suffix = suffix.to_lowercase();
        let same = samples.last().is_some_and(|s| s.key == key);
        if !same {
            samples.push(IndexedSample {
                key: key.to_owned(),
                offset: m.header,
                members: Vec::new(),
                texts: Vec::new(),
            });
        }
        let Some(sample) = samples.last_mut() else {
            continue;
        };
        if sample.members.iter().any(|(s, _, _)| *s == suffix) {
            return Err(GroupError {
                key: sample.key.clone(),
                offset: sample.offset,
                problem: format!("the suffix {suffix:?} appears twice in one sample"),
            });
        }
        if let Some(text) = m.text {
            sample.texts.push((suffix.clone(), text));
        }
        sample.members.push((suffix, m.data, m.size));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, at: u64) -> TarMember {
        TarMember {
            name: name.into(),
            header: at,
            data: at + 512,
            size: 10,
            text: None,
        }
    }

    #[test]
    fn names_split_as_webdataset_splits_them() {
        assert_eq!(split_name("a/b/000.seg.PNG"), Some(("a/b/000", "seg.PNG")));
        assert_eq!(split_name("dir.v2/000.jpg"), Some(("dir.v2/000", "jpg")));
        assert_eq!(split_name("README"), None);
        assert_eq!(split_name("dir.v2/README"), None);
    }

    #[test]
    fn consecutive_members_group_and_meta_is_skipped() {
        let members = vec![
            member("__README__", 0),
            member("x/1.jpg", 1024),
            member("x/1.CLS", 2048),
            member("x/2.jpg", 3072),
            member("noext", 4096),
            member("x/1.json", 5120), // key 1 again, not consecutive: a new sample
        ];
        let samples = group(members).unwrap();
        let keys: Vec<(&str, usize)> = samples
            .iter()
            .map(|s| (s.key.as_str(), s.members.len()))
            .collect();
        assert_eq!(keys, [("x/1", 2), ("x/2", 1), ("x/1", 1)]);
        assert_eq!(samples[0].members[1].0, "cls");
        assert_eq!(samples[0].offset, 1024);
    }

    #[test]
    fn a_repeated_suffix_is_an_error() {
        let err = group(vec![member("a.jpg", 0), member("a.JPG", 1024)]).unwrap_err();
        assert_eq!(err.key, "a");
        assert!(err.problem.contains("twice"), "{err:?}");
    }
}
