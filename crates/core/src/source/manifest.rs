//! Manifests: a CSV or JSON-lines list of keys (or byte ranges of packed files) and labels.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use loader_storage::Storage;
use loader_storage::layer::{RetryConfig, RetryStore};

use super::blocking::block_on_own_thread;
use super::error::{Result, SourceError};
use super::index::Dataset;
use super::index::Item;

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

    /// Parse a manifest. Labels are integers, or class names mapped to indices through
    /// the sorted set of names. Errors name the line.
    pub fn parse_manifest(text: &str, format: ManifestFormat) -> Result<Self> {
        let lines = parse_lines(text, format)?;
        check_kinds(&lines)?;
        let named = lines.iter().any(|(_, _, l)| matches!(l, Label::Name(_)));
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
        let lines = parse_lines(text, format)?;
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
            Label::Name(_) => true,
            Label::Int(v) => {
                format == ManifestFormat::Csv && known.contains_key(v.to_string().as_str())
            }
            Label::Absent => false,
        });
        for (line, _, label) in &lines {
            match label {
                Label::Absent => {
                    return Err(line_error(
                        *line,
                        format!("no label, but the labels must be classes of {}", shown()),
                    ));
                }
                Label::Int(v) if !named => {
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
    fn label(
        lines: Vec<(usize, RowKey, Label)>,
        classes: Vec<String>,
        named: bool,
    ) -> Result<Self> {
        let index: HashMap<&str, i64> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as i64))
            .collect();
        let unlabelled = lines.iter().all(|(_, _, l)| matches!(l, Label::Absent));
        let items = lines
            .iter()
            .map(|(_, key, label)| Item {
                key: key.key.as_str().into(),
                range: key.range.clone(),
                name: None,
                members: Arc::default(),
                label: match label {
                    Label::Absent => -1,
                    Label::Int(v) if !named => *v,
                    other => index
                        .get(other.text().as_str())
                        .copied()
                        .unwrap_or_default(),
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
fn check_kinds(lines: &[(usize, RowKey, Label)]) -> Result<()> {
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
        .filter(|(_, _, l)| matches!(l, Label::Absent))
        .count();
    if absent != 0 && absent != lines.len() {
        let rare_is_absent = absent * 2 <= lines.len();
        if let Some((line, _, _)) = lines
            .iter()
            .find(|(_, _, l)| matches!(l, Label::Absent) == rare_is_absent)
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
        .filter(|(_, _, l)| matches!(l, Label::Name(_)))
        .count();
    let ints = lines.len() - names - absent;
    if names == 0 || ints == 0 {
        return Ok(());
    }
    let first_is_name = matches!(lines[0].2, Label::Name(_));
    let majority_is_name = names > ints || (names == ints && first_is_name);
    let Some((line, _, label)) = lines
        .iter()
        .find(|(_, _, l)| matches!(l, Label::Name(_)) != majority_is_name)
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

enum Label {
    Int(i64),
    Name(String),
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

impl Label {
    fn text(&self) -> String {
        match self {
            Label::Int(v) => v.to_string(),
            Label::Name(n) => n.clone(),
            Label::Absent => String::new(),
        }
    }
}

/// (line number, key, label) of every data line.
fn parse_lines(text: &str, format: ManifestFormat) -> Result<Vec<(usize, RowKey, Label)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let out = match format {
        ManifestFormat::Csv => parse_csv(text)?,
        ManifestFormat::JsonLines => parse_json_lines(text)?,
    };
    if out.is_empty() {
        return Err(SourceError::EmptyManifest);
    }
    Ok(out)
}

/// A label's text as a label: an integer, or else a class name. A number that is not a
/// whole one (`0.5`, `1.0`, `1e-3`) is refused: read as a class name it would become a
/// class sorted as text, a silently wrong label for a regression target or a soft label.
fn label_of(text: &str) -> std::result::Result<Label, String> {
    if text.is_empty() {
        return Err("the label is empty".into());
    }
    if let Ok(v) = text.parse::<i64>() {
        return Ok(Label::Int(v));
    }
    if is_number(text) {
        return Err(format!(
            "label {text:?} is a number but not an integer; manifest labels are class \
             indices (integers) or class names, so a float label (a regression target, a soft \
             label) cannot be read from a manifest yet"
        ));
    }
    Ok(Label::Name(text.to_owned()))
}

/// Whether `text` reads as a floating-point number (`0.5`, `-1.0`, `1e3`, `.5`), not a word
/// that merely parses as one (`inf`, `NaN`).
fn is_number(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit()) && text.parse::<f64>().is_ok()
}

fn parse_csv(text: &str) -> Result<Vec<(usize, RowKey, Label)>> {
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
            Some(column) => label_of(fields[column]).map_err(bad)?,
            None => Label::Absent,
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

fn parse_json_lines(text: &str) -> Result<Vec<(usize, RowKey, Label)>> {
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
        let label = match given {
            Some(serde_json::Value::Number(n)) => Label::Int(n.as_i64().ok_or_else(|| {
                bad(format!(
                    "label {n} is not an integer; manifest labels are class indices or class \
                     names, so a float label cannot be read from a manifest yet"
                ))
            })?),
            // A string is a class name, even "7"; but not "0.5" (see `label_of`).
            Some(serde_json::Value::String(s)) if !s.is_empty() => match label_of(s) {
                Ok(_) => Label::Name(s.clone()),
                Err(why) => return Err(bad(why)),
            },
            None | Some(serde_json::Value::Null) => Label::Absent,
            _ => return Err(bad("the \"label\" is not an integer or a string".into())),
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
        let labels: Vec<i64> = d.items().iter().map(|i| i.label).collect();
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
        let labels = |d: Dataset| d.items().iter().map(|i| i.label).collect::<Vec<_>>();
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
            let got: Vec<(&str, i64)> = d.items().iter().map(|i| (&*i.key, i.label)).collect();
            assert_eq!(got, [("a.jpg", 2), ("b.jpg", 10)], "{text:?}");
            assert!(d.classes().is_empty(), "{text:?}");
        }
        // A header with the columns the other way round.
        let d = Dataset::parse_manifest("label,path\n2,a.jpg\n", ManifestFormat::Csv).unwrap();
        assert_eq!((&*d.items()[0].key, d.items()[0].label), ("a.jpg", 2));
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
                .map(|i| (&*i.key, i.range.clone(), i.label))
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
            (d.items()[0].range.clone(), d.items()[0].label),
            (Some(100..104), 7)
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
        let labels: Vec<i64> = fixed.items().iter().map(|i| i.label).collect();
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
