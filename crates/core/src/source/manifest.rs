//! Manifests: a CSV or JSON-lines list of keys (or byte ranges of packed files) and labels.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use loader_storage::Storage;
use loader_storage::layer::{RetryConfig, RetryStore};

use super::blocking::block_on_own_thread;
use super::error::{Result, SourceError};
use loader_scheduler::{ClassSet, Label};

use super::index::{Dataset, Item};

/// How a manifest is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestFormat {
    /// `key,label` per line, RFC 4180 quoting (a key holding a comma is quoted), a UTF-8
    /// BOM allowed, `#` comment lines. A first row is a header only if it names the columns:
    /// `key`, `path` or `file`, and `label` or `class` (any case, any order), and optionally
    /// `offset` and `length` for samples packed in larger files (a sample is then that
    /// byte range of its object). Without a label column (a header without one, or rows of
    /// a key alone) no sample has a label (each is labelled -1).
    Csv,
    /// One JSON object per line: `{"key": "...", "label": 3}` or `"label": "cat"` (or
    /// `"class"`), with optional `"offset"` and `"length"` for a byte range; with no label
    /// on any line, no sample has one (each is labelled -1).
    JsonLines,
}

impl ManifestFormat {
    /// Guess from a file name: `.jsonl`/`.ndjson`/`.json` are JSON lines, anything else CSV.
    pub fn from_name(name: &str) -> Self {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
            ManifestFormat::JsonLines
        } else {
            ManifestFormat::Csv
        }
    }
}

/// How a manifest's labels are read. Each kind is asked for, never guessed from the values:
/// integer regression targets would otherwise read as classes, and a typo `1.0` among class
/// indices as a regression target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum LabelKind {
    /// One class per sample: an integer index or a class name (or no label on any line).
    /// Batched i64 `[N]`.
    #[default]
    Class,
    /// Several classes per sample (multi-label): a JSON list of indices or names, or in
    /// CSV indices or names separated by spaces, `;` or `|` (an empty list or cell: no
    /// class). Batched multi-hot, f32 `[N, classes]`.
    MultiLabel,
    /// Numbers (regression targets, soft labels): one per sample, batched f32 `[N]`, or a
    /// list of one length on every line (a JSON list, or CSV numbers separated by spaces),
    /// batched f32 `[N, K]`.
    Values,
}

impl LabelKind {
    /// The kind a name gives, as the command line and Python say it: `class`, `multi` (or
    /// `multilabel`), `values`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "class" => Some(LabelKind::Class),
            "multi" | "multilabel" | "multi-label" | "multi_label" => Some(LabelKind::MultiLabel),
            "values" | "value" | "float" => Some(LabelKind::Values),
            _ => None,
        }
    }
}

/// A manifest to read: its key, and how its labels are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest<'a> {
    /// Its key in the store (format from the extension: `.jsonl`, `.ndjson`, `.json` are
    /// JSON lines, anything else CSV).
    pub key: &'a str,
    /// How its labels are read.
    pub labels: LabelKind,
    /// The classes its labels must be among, in index order (e.g. the training set's, for
    /// a validation manifest); `None`: the sorted names it gives, or its indices.
    pub classes: Option<&'a [String]>,
}

impl<'a> From<&'a str> for Manifest<'a> {
    fn from(key: &'a str) -> Self {
        Manifest {
            key,
            labels: LabelKind::Class,
            classes: None,
        }
    }
}

/// What an error about a number label says to do.
const READ_AS_VALUES: &str = "read numbers (regression targets, soft labels) as LabelKind::Values (Python: labels=\"values\")";
/// What an error about a list label says to do.
const READ_AS_MULTI: &str =
    "read several classes per sample as LabelKind::MultiLabel (Python: labels=\"multi\")";

impl Dataset {
    /// Read a manifest from the store and parse it (format from the key's extension).
    pub async fn manifest(store: &dyn Storage, key: &str) -> Result<Self> {
        read_manifest(store, key, Self::parse_manifest).await
    }

    /// [`Dataset::manifest`] for synchronous callers.
    pub fn manifest_blocking(store: &dyn Storage, key: &str) -> Result<Self> {
        block_on_own_thread(|| Self::manifest(store, key))
    }

    /// Read a manifest whose labels must belong to known `classes` (e.g. the training
    /// set's, for a validation manifest): see [`Dataset::parse_manifest_with_classes`].
    pub async fn manifest_with_classes(
        store: &dyn Storage,
        key: &str,
        classes: &[String],
    ) -> Result<Self> {
        read_manifest(store, key, |text, format| {
            Self::parse_manifest_with_classes(text, format, classes)
        })
        .await
    }

    /// Read a manifest whose labels are of `kind`, and, when `classes` are given, must be
    /// among them (see [`Dataset::parse_manifest_as`]).
    pub async fn manifest_as(
        store: &dyn Storage,
        key: &str,
        kind: LabelKind,
        classes: Option<&[String]>,
    ) -> Result<Self> {
        read_manifest(store, key, |text, format| {
            Self::parse_manifest_as(text, format, kind, classes)
        })
        .await
    }

    /// [`Dataset::manifest_as`] for synchronous callers.
    pub fn manifest_as_blocking(
        store: &dyn Storage,
        key: &str,
        kind: LabelKind,
        classes: Option<&[String]>,
    ) -> Result<Self> {
        block_on_own_thread(|| Self::manifest_as(store, key, kind, classes))
    }

    /// Parse a manifest whose labels are of `kind`. Classes (single or multi-label) are
    /// integers, or names mapped to indices through the sorted set of names, or through
    /// `classes` when given (then a label must be one of them). Errors name the line.
    pub fn parse_manifest_as(
        text: &str,
        format: ManifestFormat,
        kind: LabelKind,
        classes: Option<&[String]>,
    ) -> Result<Self> {
        match (kind, classes) {
            (LabelKind::Class, None) => Self::parse_manifest(text, format),
            (LabelKind::Class, Some(classes)) => {
                Self::parse_manifest_with_classes(text, format, classes)
            }
            (LabelKind::Values, _) => {
                let lines = parse_lines(text, format, kind)?;
                check_kinds(&lines)?;
                Self::valued(lines)
            }
            (LabelKind::MultiLabel, Some([])) => Err(SourceError::NoClassList),
            (LabelKind::MultiLabel, classes) => {
                let lines = parse_lines(text, format, kind)?;
                check_kinds(&lines)?;
                Self::multi(lines, format, classes)
            }
        }
    }

    /// Parse a manifest. Labels are integers, or class names mapped to indices through
    /// the sorted set of names. Errors name the line.
    pub fn parse_manifest(text: &str, format: ManifestFormat) -> Result<Self> {
        let lines = parse_lines(text, format, LabelKind::Class)?;
        check_kinds(&lines)?;
        let named = lines.iter().any(|(_, _, l)| matches!(l, Cell::Name(_)));
        let classes: Vec<String> = if named {
            lines
                .iter()
                .map(|(_, _, l)| l.text())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        // "cat dog" where cat and dog are labels of other lines is two classes, not a third
        // named so ("golden retriever" alone stays a name).
        let set: std::collections::HashSet<&str> = classes.iter().map(String::as_str).collect();
        for (line, _, label) in &lines {
            let Cell::Name(name) = label else { continue };
            let mut parts = name.split_whitespace();
            if parts.clone().nth(1).is_some() && parts.all(|p| set.contains(p)) {
                return Err(line_error(
                    *line,
                    format!(
                        "label {name:?} names classes that other lines give alone; {READ_AS_MULTI}"
                    ),
                ));
            }
        }
        Self::label(lines, classes, named)
    }

    /// Parse a manifest against a fixed class list: a class-name label must be one of
    /// `classes` and an integer label an index into it, so a label the model does not
    /// know is an error naming its line rather than a silently new class.
    pub fn parse_manifest_with_classes(
        text: &str,
        format: ManifestFormat,
        classes: &[String],
    ) -> Result<Self> {
        if classes.is_empty() {
            return Err(SourceError::NoClassList);
        }
        let lines = parse_lines(text, format, LabelKind::Class)?;
        check_kinds(&lines)?;
        let known: HashMap<&str, i64> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as i64))
            .collect();
        let shown = || {
            let mut list = classes
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if classes.len() > 5 {
                list.push_str(", ...");
            }
            format!("{list} ({} classes)", classes.len())
        };
        // In CSV, "7" is a name if there is such a class and an index otherwise.
        let named = lines.iter().any(|(_, _, l)| match l {
            Cell::Name(_) => true,
            Cell::Int(v) => {
                format == ManifestFormat::Csv && known.contains_key(v.to_string().as_str())
            }
            _ => false,
        });
        for (line, _, label) in &lines {
            match label {
                Cell::Absent => {
                    return Err(line_error(
                        *line,
                        format!("no label, but the labels must be classes of {}", shown()),
                    ));
                }
                Cell::Int(v) if !named => {
                    if !(0..classes.len() as i64).contains(v) {
                        return Err(line_error(
                            *line,
                            format!("label {v} is not a class index of {}", shown()),
                        ));
                    }
                }
                other => {
                    if !known.contains_key(other.text().as_str()) {
                        return Err(line_error(
                            *line,
                            format!(
                                "unknown label {:?}; the classes are {}",
                                other.text(),
                                shown()
                            ),
                        ));
                    }
                }
            }
        }
        Self::label(lines, classes.to_vec(), named)
    }

    /// Items with their labels: integers as they are, names as indices into `classes`.
    fn label(lines: Vec<(usize, RowKey, Cell)>, classes: Vec<String>, named: bool) -> Result<Self> {
        let index: HashMap<&str, i64> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as i64))
            .collect();
        let unlabelled = lines.iter().all(|(_, _, l)| matches!(l, Cell::Absent));
        let items = lines
            .iter()
            .map(|(_, key, label)| Item {
                key: key.key.as_str().into(),
                range: key.range.clone(),
                name: None,
                members: Arc::default(),
                record: None,
                label: match label {
                    Cell::Absent => Label::None,
                    Cell::Int(v) if !named => Label::Class(*v),
                    other => Label::Class(
                        index
                            .get(other.text().as_str())
                            .copied()
                            .unwrap_or_default(),
                    ),
                },
            })
            .collect();
        let dataset = Self::from_items(items, classes);
        Ok(if unlabelled {
            dataset.without_labels()
        } else {
            dataset
        })
    }
}

impl Dataset {
    /// Items labelled with numbers: one on every line, or lists of one length.
    fn valued(lines: Vec<(usize, RowKey, Cell)>) -> Result<Self> {
        let first = &lines[0].2;
        let mut items = Vec::with_capacity(lines.len());
        for (line, key, cell) in &lines {
            let label = match (cell, first) {
                (Cell::Value(v), Cell::Value(_)) => Label::Value(*v),
                (Cell::Values(v), Cell::Values(head)) if v.len() == head.len() => {
                    Label::Values(v.as_slice().into())
                }
                (Cell::Values(v), Cell::Values(head)) => {
                    return Err(line_error(
                        *line,
                        format!(
                            "{} numbers, but line {} has {}; every label is a list of one length",
                            v.len(),
                            lines[0].0,
                            head.len()
                        ),
                    ));
                }
                (Cell::Absent, _) => {
                    return Err(line_error(
                        *line,
                        "no label, but the labels are read as numbers".into(),
                    ));
                }
                _ => {
                    return Err(line_error(
                        *line,
                        format!(
                            "label {:?} is not the kind of line {} (one number, or a list of \
                             numbers, on every line)",
                            cell.text(),
                            lines[0].0
                        ),
                    ));
                }
            };
            items.push(Item {
                key: key.key.as_str().into(),
                range: key.range.clone(),
                label,
                ..Item::default()
            });
        }
        Ok(Self::from_items(items, Vec::new()))
    }

    /// Items labelled with sets of classes: names through the sorted set of all names (or
    /// `classes`), indices as they are, below the class count (`classes`' length, or one
    /// more than the largest index, so give `classes` to fix the width across manifests).
    /// Names or indices is decided once for the manifest, as for single classes: in CSV,
    /// "7" is a name if `classes` has one so called.
    fn multi(
        lines: Vec<(usize, RowKey, Cell)>,
        format: ManifestFormat,
        classes: Option<&[String]>,
    ) -> Result<Self> {
        if let Some((line, _, _)) = lines.iter().find(|(_, _, c)| matches!(c, Cell::Absent)) {
            return Err(line_error(
                *line,
                "no label, but the labels are read as sets of classes (an empty list, or an \
                 empty CSV cell, gives none)"
                    .into(),
            ));
        }
        let tokens = || {
            lines.iter().flat_map(|(line, _, cell)| {
                let set: &[Cell] = match cell {
                    Cell::Set(set) => set,
                    _ => &[],
                };
                set.iter().map(move |t| (*line, t))
            })
        };
        let known: HashMap<&str, u32> = classes
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as u32))
            .collect();
        // A CSV integer is a name when the class list has one so called.
        let is_name = |t: &Cell| match t {
            Cell::Name(_) => true,
            Cell::Int(v) => {
                format == ManifestFormat::Csv && known.contains_key(v.to_string().as_str())
            }
            _ => false,
        };
        let named = tokens().any(|(_, t)| is_name(t));
        let names: Vec<String> = match classes {
            Some(classes) => classes.to_vec(),
            None => tokens()
                .filter_map(|(_, t)| match t {
                    Cell::Name(n) => Some(n.clone()),
                    _ => None,
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        };
        let index: HashMap<&str, u32> = names
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as u32))
            .collect();
        let shown = || {
            let mut list = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            if names.len() > 5 {
                list.push_str(", ...");
            }
            format!("{list} ({} classes)", names.len())
        };
        // Each token's class, or why it has none.
        let class_of = |t: &Cell, of: u32| -> std::result::Result<u32, String> {
            match t {
                _ if named && is_name(t) => {
                    index.get(t.text().as_str()).copied().ok_or_else(|| {
                        format!("unknown label {:?}; the classes are {}", t.text(), shown())
                    })
                }
                Cell::Int(v) if named => Err(format!(
                    "label {v} is a class index, but other labels name classes; use one kind \
                     of label"
                )),
                Cell::Int(v) => u32::try_from(*v)
                    .ok()
                    .filter(|v| *v < of)
                    .ok_or_else(|| format!("label {v} is not a class index below {of}")),
                other => Err(format!("label {:?} is not a class", other.text())),
            }
        };
        let of = match classes {
            Some(classes) => classes.len(),
            None if named => names.len(),
            None => {
                // Indices as they are, below one more than the largest: a typo like
                // 4000000000 would make every sample's row that wide, so a class count far
                // above the classes seen asks for the class list instead.
                if let Some((line, Cell::Int(v))) =
                    tokens().find(|(_, t)| matches!(t, Cell::Int(v) if *v < 0))
                {
                    return Err(line_error(line, format!("label {v} is not a class index")));
                }
                let seen: BTreeSet<i64> = tokens()
                    .filter_map(|(_, t)| match t {
                        Cell::Int(v) => Some(*v),
                        _ => None,
                    })
                    .collect();
                let Some(&largest) = seen.last() else {
                    return Err(SourceError::Invalid(
                        "no line gives a class, so the number of classes is unknown; give the \
                         class list"
                            .into(),
                    ));
                };
                let of = usize::try_from(largest)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1);
                if of > MAX_UNLISTED_CLASSES.max(seen.len().saturating_mul(8)) {
                    let line = tokens()
                        .find(|(_, t)| matches!(t, Cell::Int(v) if *v == largest))
                        .map_or(0, |(line, _)| line);
                    return Err(line_error(
                        line,
                        format!(
                            "class index {largest} would make every sample's multi-hot row \
                             {of} wide, with {} classes seen; give the class list",
                            seen.len()
                        ),
                    ));
                }
                of
            }
        };
        let of = u32::try_from(of)
            .map_err(|_| SourceError::Invalid(format!("{of} classes is more than 2^32")))?;
        let mut items = Vec::with_capacity(lines.len());
        for (line, key, cell) in &lines {
            let Cell::Set(set) = cell else {
                return Err(line_error(*line, "not a set of classes".into()));
            };
            let mut indices = set
                .iter()
                .map(|t| class_of(t, of))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|why| line_error(*line, why))?;
            indices.sort_unstable();
            indices.dedup();
            items.push(Item {
                key: key.key.as_str().into(),
                range: key.range.clone(),
                label: Label::Classes(ClassSet {
                    indices: indices.into(),
                    of,
                }),
                ..Item::default()
            });
        }
        let class_names = if named || classes.is_some() {
            names
        } else {
            Vec::new()
        };
        Ok(Self::from_items(items, class_names))
    }
}

/// The most classes a multi-label manifest of indices may imply without a class list (more
/// when at least an eighth of them are seen).
const MAX_UNLISTED_CLASSES: usize = 100_000;

/// A CSV cell as a label of `kind`.
fn cell_of_text(text: &str, kind: LabelKind) -> std::result::Result<Cell, String> {
    match kind {
        LabelKind::Class => label_of(text),
        LabelKind::Values => {
            let values = text
                .split_whitespace()
                .map(|t| value_of_text(t, text))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            match values.as_slice() {
                [] => Err("the label is empty".into()),
                [one] => Ok(Cell::Value(*one)),
                _ => Ok(Cell::Values(values)),
            }
        }
        LabelKind::MultiLabel => text
            .split(|c: char| c.is_whitespace() || c == ';' || c == '|')
            .filter(|t| !t.is_empty())
            .map(label_of)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Cell::Set),
    }
}

/// One number of a values label, as an f32: finite, or an error quoting the whole label.
fn value_of_text(token: &str, label: &str) -> std::result::Result<f32, String> {
    match token.parse::<f64>() {
        Ok(v) if is_number(token) => finite(v, label),
        _ => Err(format!(
            "label {label:?} is not a number or numbers separated by spaces"
        )),
    }
}

/// `v` as an f32, if it is finite there.
fn finite(v: f64, label: &str) -> std::result::Result<f32, String> {
    let f = v as f32;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(format!("label {label} is not a finite 32-bit float"))
    }
}

/// A JSON label read as a class: an integer, or a name.
fn class_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
    match value {
        serde_json::Value::Number(n) => n.as_i64().map(Cell::Int).ok_or_else(|| {
            format!(
                "label {n} is not an integer; a class label is an index or a name: {READ_AS_VALUES}"
            )
        }),
        // A string is a class name, even "7"; but not "0.5" (see `label_of`).
        serde_json::Value::String(s) if !s.is_empty() => label_of(s).map(|_| Cell::Name(s.clone())),
        serde_json::Value::Array(_) => Err(format!(
            "the label is a list; {READ_AS_MULTI}, or a list of numbers as LabelKind::Values \
             (Python: labels=\"values\")"
        )),
        _ => Err("the \"label\" is not an integer or a string".into()),
    }
}

/// A JSON label read as numbers: one, or a non-empty list.
fn values_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
    let number = |v: &serde_json::Value| match v {
        serde_json::Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("label {n} is not a number"))
            .and_then(|f| finite(f, &n.to_string())),
        other => Err(format!(
            "label {other} is not a number or a list of numbers"
        )),
    };
    match value {
        serde_json::Value::Array(list) if !list.is_empty() => list
            .iter()
            .map(number)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Cell::Values),
        serde_json::Value::Array(_) => Err("the label is an empty list".into()),
        other => number(other).map(Cell::Value),
    }
}

/// A JSON label read as a set of classes: a list of indices or names (or one of them).
fn set_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
    let one = |v: &serde_json::Value| match class_of_json(v) {
        Ok(cell) => Ok(cell),
        Err(_) if v.is_array() => Err(format!("label {v} is a list inside a list")),
        Err(_) if v.is_string() => Err(format!(
            "label {v} is not one class name; give each class as an element of the list"
        )),
        Err(why) => Err(why),
    };
    match value {
        serde_json::Value::Array(list) => list
            .iter()
            .map(one)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Cell::Set),
        other => one(other).map(|cell| Cell::Set(vec![cell])),
    }
}

/// `parse` the manifest at `key` (UTF-8, format from the key's extension), read in place:
/// a manifest of a million lines is tens of MB, not worth a second copy.
async fn read_manifest(
    store: &dyn Storage,
    key: &str,
    parse: impl FnOnce(&str, ManifestFormat) -> Result<Dataset>,
) -> Result<Dataset> {
    // Retried as sample reads are: a manifest read is one GET a 503 must not fail.
    let bytes = RetryStore::new(store, RetryConfig::default())
        .get(key)
        .await?;
    let text = std::str::from_utf8(&bytes).map_err(|e| SourceError::NotUtf8 {
        key: key.into(),
        store: store.name().into(),
        source: e,
    })?;
    parse(text, ManifestFormat::from_name(key))
}

/// Duplicate keys, and labels of both kinds (integers and class names): one kind per
/// manifest, so a typo in one integer label cannot silently turn every label into a class
/// name and remap them all. The line named is the first of the rarer kind.
fn check_kinds(lines: &[(usize, RowKey, Cell)]) -> Result<()> {
    // A packed file's key comes back with other ranges: a sample is (key, range).
    let mut seen: HashMap<&RowKey, usize> = HashMap::new();
    for (line, key, _) in lines {
        if let Some(first) = seen.insert(key, *line) {
            return Err(line_error(
                *line,
                format!("key {key} was already listed on line {first}"),
            ));
        }
    }
    // Labelled and unlabelled lines: one or the other, or a forgotten label would read as
    // "no label" (-1) among classes.
    let absent = lines
        .iter()
        .filter(|(_, _, l)| matches!(l, Cell::Absent))
        .count();
    if absent != 0 && absent != lines.len() {
        let rare_is_absent = absent * 2 <= lines.len();
        if let Some((line, _, _)) = lines
            .iter()
            .find(|(_, _, l)| matches!(l, Cell::Absent) == rare_is_absent)
        {
            let why = if rare_is_absent {
                "no label, but the other lines have one"
            } else {
                "a label, but the other lines have none"
            };
            return Err(line_error(*line, why.to_owned()));
        }
    }
    let names = lines
        .iter()
        .filter(|(_, _, l)| matches!(l, Cell::Name(_)))
        .count();
    let ints = lines.len() - names - absent;
    if names == 0 || ints == 0 {
        return Ok(());
    }
    let first_is_name = matches!(lines[0].2, Cell::Name(_));
    let majority_is_name = names > ints || (names == ints && first_is_name);
    let Some((line, _, label)) = lines
        .iter()
        .find(|(_, _, l)| matches!(l, Cell::Name(_)) != majority_is_name)
    else {
        return Ok(());
    };
    let why = if majority_is_name {
        "a numeric label among class-name labels".to_owned()
    } else {
        format!(
            "label {:?} is not an integer, but the other labels are",
            label.text()
        )
    };
    let hint = if *line == lines[0].0 && !majority_is_name {
        "; if this row is a header, name the columns key (or path, file) and label (or class)"
    } else {
        "; use one kind of label"
    };
    Err(line_error(*line, format!("{why}{hint}")))
}

enum Cell {
    Int(i64),
    Name(String),
    /// A number, read as [`LabelKind::Values`].
    Value(f32),
    /// A list of numbers, read as [`LabelKind::Values`].
    Values(Vec<f32>),
    /// Class indices or names, read as [`LabelKind::MultiLabel`].
    Set(Vec<Cell>),
    /// The manifest gives no label.
    Absent,
}

/// A manifest row's object and, for packed files, the sample's bytes in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RowKey {
    key: String,
    range: Option<Range<u64>>,
}

impl std::fmt::Display for RowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.key)?;
        if let Some(r) = &self.range {
            write!(f, " bytes {}..{}", r.start, r.end)?;
        }
        Ok(())
    }
}

/// A row's byte range from its offset and length fields, both given or neither.
fn range_of(
    offset: Option<u64>,
    length: Option<u64>,
) -> std::result::Result<Option<Range<u64>>, String> {
    match (offset, length) {
        (None, None) => Ok(None),
        (Some(o), Some(l)) => o
            .checked_add(l)
            .map(|end| Some(o..end))
            .ok_or_else(|| "offset + length overflows".to_owned()),
        _ => Err("give both offset and length, or neither".into()),
    }
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            Cell::Name(n) => n.clone(),
            Cell::Value(v) => v.to_string(),
            Cell::Values(v) => format!("{v:?}"),
            Cell::Set(v) => v.iter().map(Cell::text).collect::<Vec<_>>().join(" "),
            Cell::Absent => String::new(),
        }
    }
}

/// (line number, key, label) of every data line.
fn parse_lines(
    text: &str,
    format: ManifestFormat,
    kind: LabelKind,
) -> Result<Vec<(usize, RowKey, Cell)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let out = match format {
        ManifestFormat::Csv => parse_csv(text, kind)?,
        ManifestFormat::JsonLines => parse_json_lines(text, kind)?,
    };
    if out.is_empty() {
        return Err(SourceError::EmptyManifest);
    }
    Ok(out)
}

/// A label's text as a label: an integer, or else a class name. A number that is not a
/// whole one (`0.5`, `1.0`, `1e-3`) is refused: read as a class name it would become a
/// class sorted as text, a silently wrong label for a regression target or a soft label.
fn label_of(text: &str) -> std::result::Result<Cell, String> {
    if text.is_empty() {
        return Err("the label is empty".into());
    }
    if let Ok(v) = text.parse::<i64>() {
        return Ok(Cell::Int(v));
    }
    if is_number(text) {
        return Err(format!(
            "label {text:?} is a number but not an integer; a class label is an index or a \
             name: {READ_AS_VALUES}"
        ));
    }
    // "0 1", "0.2;0.8" or "cat|dog" is a list, not a class named so: read as a name it would
    // give each combination a class of its own.
    if let Some(sep) = text.chars().find(|c| matches!(c, ';' | '|')) {
        return Err(format!(
            "label {text:?} holds {sep:?}, which separates several classes; {READ_AS_MULTI} \
             (a class name cannot hold ; or |)"
        ));
    }
    let tokens: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ';' || c == '|')
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.len() > 1 && tokens.iter().all(|t| is_number(t)) {
        return Err(format!(
            "label {text:?} is a list of numbers, not a class; {READ_AS_MULTI}, or numbers as \
             LabelKind::Values (Python: labels=\"values\")"
        ));
    }
    Ok(Cell::Name(text.to_owned()))
}

/// Whether `text` reads as a floating-point number (`0.5`, `-1.0`, `1e3`, `.5`), not a word
/// that merely parses as one (`inf`, `NaN`).
fn is_number(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit()) && text.parse::<f64>().is_ok()
}

fn parse_csv(text: &str, kind: LabelKind) -> Result<Vec<(usize, RowKey, Cell)>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut out = Vec::new();
    // Columns from a header, or key first then label (or a key alone, on every row).
    let mut columns = Columns {
        key: 0,
        label: Some(1),
        range: None,
    };
    let mut first = true;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            line_error(line, format!("not valid CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let fields: Vec<&str> = record.iter().collect();
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        let shown = fields.join(",");
        let bad = |why: String| line_error(line, format!("{why}: {shown:?}"));
        if std::mem::take(&mut first) {
            if let Some(header) = header_columns(&fields) {
                columns = header;
                continue;
            }
            if let Some(name) = misnamed_label_column(&fields) {
                return Err(bad(format!(
                    "{name:?} is not a label column name: name it label (or class)"
                )));
            }
            if fields.len() == 1 {
                columns.label = None;
            }
        }
        let want =
            1 + usize::from(columns.label.is_some()) + if columns.range.is_some() { 2 } else { 0 };
        if fields.len() != want {
            let shape = match (columns.label.is_some(), columns.range.is_some()) {
                (true, true) => "key,label,offset,length",
                (true, false) => "key,label",
                (false, true) => "key,offset,length",
                (false, false) => "key alone (as the first row)",
            };
            return Err(bad(format!(
                "expected {shape} ({want} fields) but found {}; quote a key that holds a comma",
                fields.len()
            )));
        }
        let key = fields[columns.key];
        let label = match columns.label {
            Some(column) => cell_of_text(fields[column], kind).map_err(bad)?,
            None => Cell::Absent,
        };
        if let Some(problem) = loader_storage::key_problem(key) {
            return Err(bad(problem.to_owned()));
        }
        let range = match columns.range {
            Some((o, l)) => {
                let number = |i: usize, name: &str| {
                    fields[i]
                        .parse::<u64>()
                        .map_err(|_| bad(format!("the {name} is not a whole number")))
                };
                range_of(Some(number(o, "offset")?), Some(number(l, "length")?)).map_err(bad)?
            }
            None => None,
        };
        out.push((
            line,
            RowKey {
                key: key.to_owned(),
                range,
            },
            label,
        ));
    }
    Ok(out)
}

/// A header's label column under a name that is not read (`labels`, `target`, ...): read as
/// data, the header would become a sample and its label a class.
fn misnamed_label_column<'a>(fields: &[&'a str]) -> Option<&'a str> {
    let is = |f: &str, names: &[&str]| names.iter().any(|n| f.eq_ignore_ascii_case(n));
    if !fields.iter().any(|f| is(f, &["key", "path", "file"])) {
        return None;
    }
    fields
        .iter()
        .find(|f| {
            is(
                f,
                &["labels", "target", "targets", "cls", "y", "classes", "tags"],
            )
        })
        .copied()
}

/// Where a CSV manifest's fields are.
struct Columns {
    key: usize,
    /// `None`: the manifest gives no labels.
    label: Option<usize>,
    /// (offset, length), for samples packed in larger files.
    range: Option<(usize, usize)>,
}

/// The columns if a row names them, as a header does: key (or path, file), optionally
/// label (or class), in any order, and optionally offset and length, any case.
fn header_columns(fields: &[&str]) -> Option<Columns> {
    let find = |names: &[&str]| {
        let mut hits = fields
            .iter()
            .enumerate()
            .filter(|(_, f)| names.iter().any(|n| f.eq_ignore_ascii_case(n)));
        let first = hits.next().map(|(i, _)| i);
        // A name given twice is not a header we understand.
        if hits.next().is_some() { None } else { first }
    };
    let key = find(&["key", "path", "file"])?;
    let label = find(&["label", "class"]);
    let range = match (find(&["offset"]), find(&["length"])) {
        (Some(o), Some(l)) => Some((o, l)),
        _ => None,
    };
    let named = 1 + usize::from(label.is_some()) + if range.is_some() { 2 } else { 0 };
    (fields.len() == named).then_some(Columns { key, label, range })
}

fn parse_json_lines(text: &str, kind: LabelKind) -> Result<Vec<(usize, RowKey, Cell)>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let bad = |why: String| line_error(line, format!("{why}: {trimmed:?}"));
        let value: serde_json::Value =
            serde_json::from_str(trimmed).map_err(|e| bad(format!("not JSON ({e})")))?;
        let key = value
            .get("key")
            .and_then(|k| k.as_str())
            .ok_or_else(|| bad("no string \"key\"".into()))?
            .to_owned();
        // "class" as a CSV header may say; a label under another name is not read as none.
        let given = value.get("label").or_else(|| value.get("class"));
        if given.is_none()
            && let Some(other) = ["cls", "target", "labels", "y"]
                .into_iter()
                .find(|k| value.get(*k).is_some())
        {
            return Err(bad(format!(
                "{other:?} is not a label key: name the label \"label\" (or \"class\")"
            )));
        }
        let label = match (given, kind) {
            (None | Some(serde_json::Value::Null), _) => Cell::Absent,
            (Some(given), LabelKind::Class) => class_of_json(given).map_err(bad)?,
            (Some(given), LabelKind::Values) => values_of_json(given).map_err(bad)?,
            (Some(given), LabelKind::MultiLabel) => set_of_json(given).map_err(bad)?,
        };
        if let Some(problem) = loader_storage::key_problem(&key) {
            return Err(bad(problem.to_owned()));
        }
        let number = |name: &str| match value.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(format!("the {name} is not a whole number"))),
        };
        let range = range_of(number("offset")?, number("length")?).map_err(bad)?;
        out.push((line, RowKey { key, range }, label));
    }
    Ok(out)
}

/// A manifest line's problem.
fn line_error(line: impl TryInto<usize>, problem: String) -> SourceError {
    SourceError::Line {
        line: line.try_into().unwrap_or(usize::MAX),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_names_maps_through_sorted_classes() {
        let d = Dataset::parse_manifest(
            "key,label\nb/1.jpg,dog\na/2.jpg,cat\n\n# note\nc.jpg,dog\n",
            ManifestFormat::Csv,
        )
        .unwrap();
        assert_eq!(d.classes(), ["cat", "dog"]);
        let labels: Vec<i64> = d
            .items()
            .iter()
            .map(|i| i.label.class().unwrap_or(-1))
            .collect();
        assert_eq!(labels, [1, 0, 1]);
    }

    #[test]
    fn integer_labels_are_kept() {
        let d = Dataset::parse_manifest(
            "{\"key\":\"x.jpg\",\"label\":7}\n{\"key\":\"y.jpg\",\"label\":-1}",
            ManifestFormat::JsonLines,
        )
        .unwrap();
        assert!(d.classes().is_empty());
        assert_eq!(d.items()[0].label, 7);
    }

    #[test]
    fn manifests_without_labels_label_nothing() {
        let labels = |d: Dataset| {
            d.items()
                .iter()
                .map(|i| i.label.clone())
                .collect::<Vec<_>>()
        };
        let d = Dataset::parse_manifest("{\"key\":\"a\",\"class\":3}\n", ManifestFormat::JsonLines)
            .unwrap();
        assert!(
            d.has_labels() && d.items()[0].label == 3,
            "\"class\" as CSV's header says"
        );
        for (text, format) in [
            ("a.npy\nb.npy\n", ManifestFormat::Csv),
            ("key\na.npy\nb.npy\n", ManifestFormat::Csv),
            (
                "{\"key\":\"a.npy\"}\n{\"key\":\"b.npy\",\"label\":null}\n",
                ManifestFormat::JsonLines,
            ),
        ] {
            let d = Dataset::parse_manifest(text, format).unwrap();
            assert!(!d.has_labels(), "{text}");
            assert_eq!(labels(d), [-1, -1], "{text}");
        }
        let d = Dataset::parse_manifest(
            "path,offset,length\np.bin,0,4\np.bin,4,4\n",
            ManifestFormat::Csv,
        )
        .unwrap();
        assert_eq!(d.items()[1].range, Some(4..8));
        // A label forgotten on some lines only is an error, not a sample labelled -1.
        let err = |text, format| {
            Dataset::parse_manifest(text, format)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("a.jpg\nb.jpg,3\n", ManifestFormat::Csv),
            "line 2: expected key alone (as the first row) (1 fields) but found 2; quote a key \
             that holds a comma: \"b.jpg,3\""
        );
        assert_eq!(
            err(
                "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\"}\n{\"key\":\"c\",\"label\":2}\n",
                ManifestFormat::JsonLines
            ),
            "line 2: no label, but the other lines have one"
        );
        // A label under a name that is not read is not "no label".
        assert!(
            err(
                "{\"key\":\"a\",\"target\":0.5}\n",
                ManifestFormat::JsonLines
            )
            .contains("\"target\" is not a label key"),
        );
        let classes = ["cat".to_owned()];
        let err = Dataset::parse_manifest_with_classes("a.jpg\n", ManifestFormat::Csv, &classes)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no label, but the labels must be classes"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_line() {
        for (text, format, needle) in [
            (
                "a.jpg,1\nb.jpg\n",
                ManifestFormat::Csv,
                "line 2: expected key,label (2 fields) but found 1",
            ),
            (
                "a.jpg,1\na.jpg,2\n",
                ManifestFormat::Csv,
                "line 2: key \"a.jpg\" was already listed on line 1",
            ),
            (
                "a.jpg,\n",
                ManifestFormat::Csv,
                "line 1: the label is empty",
            ),
            (
                "../x.jpg,1\n",
                ManifestFormat::Csv,
                "line 1: the key has a '.' or '..' segment",
            ),
            (
                "{\"key\":\"a\",\"label\":1}\n{bad json\n",
                ManifestFormat::JsonLines,
                "line 2: not JSON",
            ),
            (
                "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\",\"label\":\"cat\"}\n",
                ManifestFormat::JsonLines,
                "line 2: label \"cat\" is not an integer",
            ),
            (
                "{\"key\":\"a\",\"label\":1.5}\n",
                ManifestFormat::JsonLines,
                "line 1: label 1.5 is not an integer",
            ),
            ("\n# nothing\n", ManifestFormat::Csv, "lists no samples"),
        ] {
            let err = Dataset::parse_manifest(text, format)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    // Defect 4: a header naming other columns became a sample, and its "label" a class
    // that shifted every other label.
    #[test]
    fn csv_headers_are_recognised_by_their_column_names_or_refused() {
        for text in [
            "path,label\na.jpg,2\nb.jpg,10\n",
            "\u{feff}path,label\na.jpg,2\nb.jpg,10\n",
            "key, label\na.jpg,2\nb.jpg,10\n",
            "FILE,Class\na.jpg,2\nb.jpg,10\n",
            "\u{feff}a.jpg,2\nb.jpg,10\n",
            "\"a.jpg\",2\r\nb.jpg,10\r\n",
        ] {
            let d = Dataset::parse_manifest(text, ManifestFormat::Csv)
                .unwrap_or_else(|e| panic!("{text:?}: {e}"));
            let got: Vec<(&str, i64)> = d
                .items()
                .iter()
                .map(|i| (&*i.key, i.label.class().unwrap_or(-1)))
                .collect();
            assert_eq!(got, [("a.jpg", 2), ("b.jpg", 10)], "{text:?}");
            assert!(d.classes().is_empty(), "{text:?}");
        }
        // A header with the columns the other way round.
        let d = Dataset::parse_manifest("label,path\n2,a.jpg\n", ManifestFormat::Csv).unwrap();
        assert_eq!(
            (&*d.items()[0].key, d.items()[0].label.class()),
            ("a.jpg", Some(2))
        );
        // Quoted keys may hold commas.
        let d = Dataset::parse_manifest("\"a,b.jpg\",cat\n", ManifestFormat::Csv).unwrap();
        assert_eq!(&*d.items()[0].key, "a,b.jpg");
        for (text, needle) in [
            // One typo in an integer label: not a class name among numbers.
            ("a.jpg,2\nb.jpg,1O\nc.jpg,3\n", "line 2"),
            ("a.jpg,cat\nb.jpg,3\n", "line 2"),
            // A first row that is neither data nor a header naming the columns.
            ("filename,target\na.jpg,2\nb.jpg,3\n", "line 1"),
            ("a.jpg,2,extra\n", "line 1"),
            ("path,label\na.jpg\n", "line 2"),
        ] {
            let err = Dataset::parse_manifest(text, ManifestFormat::Csv)
                .map(|d| format!("parsed as {:?}", d.items()))
                .unwrap_or_else(|e| e.to_string());
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    // Issue 25, defect 4: float labels became classes sorted as text ("0.5" -> class 0,
    // "1.0" -> class 1, "10.0" -> class 1 too), silently.
    #[test]
    fn float_labels_are_refused_not_read_as_class_names() {
        for (text, format, needle) in [
            (
                "a.jpg,0.5\nb.jpg,1.0\n",
                ManifestFormat::Csv,
                "line 1: label \"0.5\"",
            ),
            (
                "a.jpg,1\nb.jpg,2.0\n",
                ManifestFormat::Csv,
                "line 2: label \"2.0\"",
            ),
            (
                "key,label\na.jpg,1e-3\n",
                ManifestFormat::Csv,
                "line 2: label \"1e-3\"",
            ),
            ("a.jpg,-.5\n", ManifestFormat::Csv, "line 1: label \"-.5\""),
            (
                "{\"key\":\"a\",\"label\":\"0.25\"}\n",
                ManifestFormat::JsonLines,
                "line 1: label \"0.25\"",
            ),
            (
                "{\"key\":\"a\",\"label\":2.0}\n",
                ManifestFormat::JsonLines,
                "line 1: label 2.0 is not an integer",
            ),
        ] {
            let err = Dataset::parse_manifest(text, format)
                .map(|d| format!("parsed as {:?} {:?}", d.items(), d.classes()))
                .unwrap_or_else(|e| e.to_string());
            assert!(err.contains(needle), "{text:?}: {err}");
            assert!(err.contains("not an integer"), "{text:?}: {err}");
        }
        // Words that parse as floats are class names, as before.
        let d = Dataset::parse_manifest("a.jpg,inf\nb.jpg,nan\n", ManifestFormat::Csv).unwrap();
        assert_eq!(d.classes(), ["inf", "nan"]);
    }

    fn parsed(text: &str, format: ManifestFormat, kind: LabelKind) -> Result<Vec<Label>> {
        let d = Dataset::parse_manifest_as(text, format, kind, None)?;
        Ok(d.items().iter().map(|i| i.label.clone()).collect())
    }

    fn failed(text: &str, format: ManifestFormat, kind: LabelKind) -> String {
        match parsed(text, format, kind) {
            Ok(labels) => panic!("{text:?} read as {labels:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn values_manifests_give_numbers_and_lists_of_one_length() {
        use ManifestFormat::{Csv, JsonLines};
        let values = |v: &[f32]| Label::Values(v.into());
        assert_eq!(
            parsed(
                "path,label
a.npy,0.5
b.npy,-2
c.npy,1e-3
",
                Csv,
                LabelKind::Values
            )
            .unwrap(),
            [Label::Value(0.5), Label::Value(-2.0), Label::Value(1e-3)]
        );
        assert_eq!(
            parsed(
                "a.npy,0.1 0.9
b.npy,1 0
",
                Csv,
                LabelKind::Values
            )
            .unwrap(),
            [values(&[0.1, 0.9]), values(&[1.0, 0.0])]
        );
        assert_eq!(
            parsed(
                "{\"key\":\"a\",\"label\":[0.25,0.75]}\n{\"key\":\"b\",\"label\":[1,0]}\n",
                JsonLines,
                LabelKind::Values
            )
            .unwrap(),
            [values(&[0.25, 0.75]), values(&[1.0, 0.0])]
        );
        assert_eq!(
            parsed(
                "{\"key\":\"a\",\"label\":3}\n",
                JsonLines,
                LabelKind::Values
            )
            .unwrap(),
            [Label::Value(3.0)],
            "integers are numbers when the manifest says its labels are values"
        );
        for (text, format, needle) in [
            (
                "a,0.1 0.9\nb,1 0 0\n",
                Csv,
                "line 2: 3 numbers, but line 1 has 2",
            ),
            (
                "a,0.5\nb,0.1 0.9\n",
                Csv,
                "line 2: label \"[0.1, 0.9]\" is not the kind of line 1",
            ),
            ("a,cat\n", Csv, "line 1: label \"cat\" is not a number"),
            ("a,1e39\n", Csv, "not a finite 32-bit float"),
            ("a,nan\n", Csv, "label \"nan\" is not a number"),
            ("key,label\na,\n", Csv, "line 2: the label is empty"),
            (
                "{\"key\":\"a\",\"label\":[]}\n",
                JsonLines,
                "line 1: the label is an empty list",
            ),
            (
                "{\"key\":\"a\",\"label\":\"0.5\"}\n",
                JsonLines,
                "is not a number or a list",
            ),
            (
                "{\"key\":\"a\"}\n",
                JsonLines,
                "line 1: no label, but the labels are read as numbers",
            ),
        ] {
            let err = failed(text, format, LabelKind::Values);
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn multi_label_manifests_give_sets_of_classes() {
        use ManifestFormat::{Csv, JsonLines};
        let set = |of: u32, i: &[u32]| {
            Label::Classes(ClassSet {
                indices: i.into(),
                of,
            })
        };
        let d = Dataset::parse_manifest_as(
            "key,label\na.jpg,dog cat\nb.jpg,\nc.jpg,bird;dog|dog\n",
            Csv,
            LabelKind::MultiLabel,
            None,
        )
        .unwrap();
        assert_eq!(d.classes(), ["bird", "cat", "dog"]);
        let labels: Vec<Label> = d.items().iter().map(|i| i.label.clone()).collect();
        assert_eq!(labels, [set(3, &[1, 2]), set(3, &[]), set(3, &[0, 2])]);
        assert_eq!(
            parsed(
                "{\"key\":\"a\",\"label\":[4,1]}\n{\"key\":\"b\",\"label\":[]}\n{\"key\":\"c\",\"label\":0}\n",
                JsonLines,
                LabelKind::MultiLabel
            )
            .unwrap(),
            [set(5, &[1, 4]), set(5, &[]), set(5, &[0])],
            "indices as they are, below one more than the largest"
        );
        // A class list fixes the width and the names; "7" is a name when there is one.
        let classes: Vec<String> = ["cat", "dog", "7"].map(String::from).to_vec();
        let d = Dataset::parse_manifest_as(
            "a,dog 7\nb,cat\n",
            Csv,
            LabelKind::MultiLabel,
            Some(&classes),
        )
        .unwrap();
        let labels: Vec<Label> = d.items().iter().map(|i| i.label.clone()).collect();
        assert_eq!(labels, [set(3, &[1, 2]), set(3, &[0])]);
        for (text, format, classes, needle) in [
            (
                "a,cat 1\n",
                Csv,
                None,
                "line 1: label 1 is a class index, but other labels name classes",
            ),
            (
                "a,1\nb,cat\n",
                Csv,
                None,
                "line 1: label 1 is a class index",
            ),
            (
                "a,0.5\n",
                Csv,
                None,
                "line 1: label \"0.5\" is a number but not an integer",
            ),
            ("a,-1\n", Csv, None, "line 1: label -1 is not a class index"),
            ("a,\n", Csv, None, "no line gives a class"),
            (
                "a,1\nb,4000000000\n",
                Csv,
                None,
                "line 2: class index 4000000000 would make",
            ),
            (
                "{\"key\":\"a\",\"label\":[7,\"7\"]}\n",
                JsonLines,
                None,
                "label 7 is a class index, but other labels name classes",
            ),
            (
                "{\"key\":\"a\",\"label\":[\"0 1\"]}\n",
                JsonLines,
                None,
                "give each class as an element of the list",
            ),
            (
                "a,cow\n",
                Csv,
                Some(&classes),
                "line 1: unknown label \"cow\"",
            ),
            (
                "a,3\n",
                Csv,
                Some(&classes),
                "line 1: label 3 is not a class index below 3",
            ),
            (
                "{\"key\":\"a\",\"label\":[[1]]}\n",
                JsonLines,
                None,
                "is a list inside a list",
            ),
            (
                "{\"key\":\"a\"}\n",
                JsonLines,
                None,
                "line 1: no label, but the labels are read as sets",
            ),
        ] {
            let err = match Dataset::parse_manifest_as(
                text,
                format,
                LabelKind::MultiLabel,
                classes.map(|c| c.as_slice()),
            ) {
                Ok(d) => panic!("{text:?} read as {:?}", d.items()),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn lists_and_numbers_under_class_labels_say_which_kind_reads_them() {
        let err = failed(
            "{\"key\":\"a\",\"label\":[1,2]}\n",
            ManifestFormat::JsonLines,
            LabelKind::Class,
        );
        assert!(err.contains("the label is a list; read several classes per sample as LabelKind::MultiLabel (Python: labels=\"multi\")"), "{err}");
        for text in [
            "a,0 1\n",
            "a,1 2.5\n",
            "{\"key\":\"a\",\"label\":\"3 4\"}\n",
        ] {
            let format = ManifestFormat::from_name(if text.starts_with('{') {
                "m.jsonl"
            } else {
                "m.csv"
            });
            let err = failed(text, format, LabelKind::Class);
            assert!(err.contains("is a list of numbers, not a class"), "{err}");
        }
        let d =
            Dataset::parse_manifest("a,golden retriever\nb,2 x\n", ManifestFormat::Csv).unwrap();
        assert_eq!(
            d.classes(),
            ["2 x", "golden retriever"],
            "names with spaces stay names"
        );
        let err = failed("a,0.5\n", ManifestFormat::Csv, LabelKind::Class);
        assert!(
            err.contains("LabelKind::Values (Python: labels=\"values\")"),
            "{err}"
        );
        assert_eq!(LabelKind::from_name("Multi"), Some(LabelKind::MultiLabel));
        assert_eq!(LabelKind::from_name("floats"), None);
    }

    #[test]
    fn labels_outside_a_known_class_list_are_errors_with_the_line() {
        let classes: Vec<String> = ["cat", "dog"].map(String::from).to_vec();
        let d = Dataset::parse_manifest_with_classes(
            "a.jpg,dog\nb.jpg,cat\n",
            ManifestFormat::Csv,
            &classes,
        )
        .unwrap();
        assert_eq!(d.classes(), classes);
        assert_eq!(d.items()[0].label, 1);
        // Only dogs: still indexed against both classes, not a class list of one.
        let d = Dataset::parse_manifest_with_classes("a.jpg,dog\n", ManifestFormat::Csv, &classes)
            .unwrap();
        assert_eq!(d.items()[0].label, 1);
        let d = Dataset::parse_manifest_with_classes("a.jpg,1\n", ManifestFormat::Csv, &classes)
            .unwrap();
        assert_eq!(d.items()[0].label, 1);
        for (text, format, needle) in [
            (
                "a.jpg,dog\nb.jpg,cow\n",
                ManifestFormat::Csv,
                "line 2: unknown label \"cow\"; the classes are cat, dog (2 classes)",
            ),
            (
                "a.jpg,0\nb.jpg,2\n",
                ManifestFormat::Csv,
                "line 2: label 2 is not a class index",
            ),
            (
                "{\"key\":\"a\",\"label\":-1}\n",
                ManifestFormat::JsonLines,
                "line 1: label -1 is not a class index",
            ),
            (
                "{\"key\":\"a\",\"label\":\"bird\"}\n",
                ManifestFormat::JsonLines,
                "line 1: unknown label \"bird\"",
            ),
        ] {
            let err = Dataset::parse_manifest_with_classes(text, format, &classes)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        assert!(Dataset::parse_manifest_with_classes("a,1", ManifestFormat::Csv, &[]).is_err());
    }

    #[test]
    fn offset_and_length_columns_make_ranged_samples_of_packed_files() {
        let csv = "key,label,offset,length\npack.bin,0,0,10\npack.bin,1,10,5\n";
        let json = "{\"key\":\"pack.bin\",\"label\":0,\"offset\":0,\"length\":10}\n\
                    {\"key\":\"pack.bin\",\"label\":1,\"offset\":10,\"length\":5}\n";
        for (text, format) in [
            (csv, ManifestFormat::Csv),
            (json, ManifestFormat::JsonLines),
        ] {
            let d = Dataset::parse_manifest(text, format).unwrap();
            let got: Vec<_> = d
                .items()
                .iter()
                .map(|i| (&*i.key, i.range.clone(), i.label.class().unwrap_or(-1)))
                .collect();
            assert_eq!(
                got,
                [("pack.bin", Some(0..10), 0), ("pack.bin", Some(10..15), 1)],
                "{format:?}"
            );
        }
        // Columns in another order.
        let d =
            Dataset::parse_manifest("length,path,class,offset\n4,p,7,100\n", ManifestFormat::Csv)
                .unwrap();
        assert_eq!(
            (d.items()[0].range.clone(), d.items()[0].label.clone()),
            (Some(100..104), Label::Class(7))
        );
        for (text, format, needle) in [
            (
                "key,label,offset,length\np,0,0,10\np,1,0,10\n",
                ManifestFormat::Csv,
                "line 3: key \"p\" bytes 0..10 was already listed on line 2",
            ),
            (
                "key,label,offset,length\np,0,x,10\n",
                ManifestFormat::Csv,
                "line 2: the offset is not a whole number",
            ),
            (
                "key,label,offset,length\np,0,10\n",
                ManifestFormat::Csv,
                "line 2: expected key,label,offset,length (4 fields)",
            ),
            (
                "{\"key\":\"p\",\"label\":0,\"offset\":3}\n",
                ManifestFormat::JsonLines,
                "line 1: give both offset and length",
            ),
        ] {
            let err = Dataset::parse_manifest(text, format)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn manifests_are_read_from_the_store_and_must_be_utf8() {
        #![allow(clippy::unwrap_used)]
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.csv"), "a.jpg,dog\nb.jpg,cat\n").unwrap();
        std::fs::write(dir.path().join("bad.csv"), b"a.jpg,\xff\n").unwrap();
        let store = loader_storage::from_url(
            &dir.path().to_string_lossy(),
            Vec::<(String, String)>::new(),
        )
        .unwrap();
        let d = Dataset::manifest_blocking(&*store, "m.csv").unwrap();
        assert_eq!(d.classes(), ["cat", "dog"]);
        let classes = ["dog".to_owned(), "cat".to_owned()];
        let fixed =
            block_on_own_thread(|| Dataset::manifest_with_classes(&*store, "m.csv", &classes))
                .unwrap();
        let labels: Vec<i64> = fixed
            .items()
            .iter()
            .map(|i| i.label.class().unwrap_or(-1))
            .collect();
        assert_eq!(labels, [0, 1]);
        let err = Dataset::manifest_blocking(&*store, "bad.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"bad.csv\"") && err.contains("not UTF-8"),
            "{err}"
        );
        assert!(err.contains(store.name()), "{err}");
    }
}
