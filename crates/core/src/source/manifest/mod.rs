//! Manifests: a CSV or JSON-lines list of keys (or byte ranges of packed files) and labels.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use loader_storage::Storage;

use super::blocking::block_on_own_thread;
use super::error::{Result, SourceError};
use super::format::{About, Fit, Format, Probe};
use crate::options::SourceOptions;
use loader_scheduler::{ClassSet, Label};

use super::index::{Dataset, Item};
use lines::{Cell, READ_AS_MULTI, RowKey, check_kinds, line_error, parse_lines};
pub use lines::{LabelKind, ManifestSyntax};

mod lines;

/// Manifests as a [`Format`]: chosen by `source.manifest` (a key under the URL), never
/// guessed from a listing, which a manifest exists to spare.
#[derive(Debug, Clone, Copy, Default)]
pub struct Manifest;

#[async_trait(?Send)]
impl Format for Manifest {
    fn about(&self) -> About {
        // `fields` say what each object is to the stage (Python's decoders read them), as
        // for an ImageFolder.
        About::new("manifest", "read through a manifest")
            .reads(&["manifest", "labels", "classes", "fields"])
    }

    fn chosen_by(&self, options: &SourceOptions) -> bool {
        options.manifest.is_some()
    }

    async fn detect(&self, _probe: &Probe<'_>) -> Result<Option<Fit>> {
        Ok(None)
    }

    async fn open(&self, probe: &Probe<'_>) -> Result<Dataset> {
        let options = probe.options();
        let key = options.manifest.as_deref().ok_or_else(|| {
            SourceError::Invalid(
                "a manifest is read from its key: set source.manifest (Python: manifest=)".into(),
            )
        })?;
        Dataset::manifest_as(
            &**probe.store(),
            key,
            options.labels,
            options.classes.as_deref(),
        )
        .await
    }
}

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
        format: ManifestSyntax,
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
    pub fn parse_manifest(text: &str, format: ManifestSyntax) -> Result<Self> {
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
        format: ManifestSyntax,
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
                format == ManifestSyntax::Csv && known.contains_key(v.to_string().as_str())
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
        format: ManifestSyntax,
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
                format == ManifestSyntax::Csv && known.contains_key(v.to_string().as_str())
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

/// `parse` the manifest at `key` (UTF-8, format from the key's extension), read in place:
/// a manifest of a million lines is tens of MB, not worth a second copy.
async fn read_manifest(
    store: &dyn Storage,
    key: &str,
    parse: impl FnOnce(&str, ManifestSyntax) -> Result<Dataset>,
) -> Result<Dataset> {
    // Through the caller's stack: retried as sample reads are.
    let bytes = store.get(key).await?;
    let text = std::str::from_utf8(&bytes).map_err(|e| SourceError::NotUtf8 {
        key: key.into(),
        store: store.name().into(),
        source: e,
    })?;
    parse(text, ManifestSyntax::from_name(key))
}

#[cfg(test)]
mod tests;
