//! A manifest's lines as cells: its keys (or byte ranges of packed files) and its labels
//! as written, read from CSV or JSON lines, each error naming its line.

use std::collections::HashMap;
use std::ops::Range;

use super::super::error::{Result, SourceError};

/// How a manifest is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestSyntax {
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

impl ManifestSyntax {
    /// Guess from a file name: `.jsonl`/`.ndjson`/`.json` are JSON lines, anything else CSV.
    pub fn from_name(name: &str) -> Self {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
            ManifestSyntax::JsonLines
        } else {
            ManifestSyntax::Csv
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

/// What an error about a number label says to do.
pub(super) const READ_AS_VALUES: &str = "read numbers (regression targets, soft labels) as LabelKind::Values (Python: labels=\"values\")";
/// What an error about a list label says to do.
pub(super) const READ_AS_MULTI: &str =
    "read several classes per sample as LabelKind::MultiLabel (Python: labels=\"multi\")";

/// A CSV cell as a label of `kind`.
pub(super) fn cell_of_text(text: &str, kind: LabelKind) -> std::result::Result<Cell, String> {
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
pub(super) fn value_of_text(token: &str, label: &str) -> std::result::Result<f32, String> {
    match token.parse::<f64>() {
        Ok(v) if is_number(token) => finite(v, label),
        _ => Err(format!(
            "label {label:?} is not a number or numbers separated by spaces"
        )),
    }
}

/// `v` as an f32, if it is finite there.
pub(super) fn finite(v: f64, label: &str) -> std::result::Result<f32, String> {
    let f = v as f32;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(format!("label {label} is not a finite 32-bit float"))
    }
}

/// A JSON label read as a class: an integer, or a name.
pub(super) fn class_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
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
pub(super) fn values_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
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
pub(super) fn set_of_json(value: &serde_json::Value) -> std::result::Result<Cell, String> {
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

/// Duplicate keys, and labels of both kinds (integers and class names): one kind per
/// manifest, so a typo in one integer label cannot silently turn every label into a class
/// name and remap them all. The line named is the first of the rarer kind.
pub(super) fn check_kinds(lines: &[(usize, RowKey, Cell)]) -> Result<()> {
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

pub(super) enum Cell {
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
pub(super) struct RowKey {
    pub(super) key: String,
    pub(super) range: Option<Range<u64>>,
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
pub(super) fn range_of(
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
    pub(super) fn text(&self) -> String {
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
pub(super) fn parse_lines(
    text: &str,
    format: ManifestSyntax,
    kind: LabelKind,
) -> Result<Vec<(usize, RowKey, Cell)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let out = match format {
        ManifestSyntax::Csv => parse_csv(text, kind)?,
        ManifestSyntax::JsonLines => parse_json_lines(text, kind)?,
    };
    if out.is_empty() {
        return Err(SourceError::EmptyManifest);
    }
    Ok(out)
}

/// A label's text as a label: an integer, or else a class name. A number that is not a
/// whole one (`0.5`, `1.0`, `1e-3`) is refused: read as a class name it would become a
/// class sorted as text, a silently wrong label for a regression target or a soft label.
pub(super) fn label_of(text: &str) -> std::result::Result<Cell, String> {
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
pub(super) fn is_number(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit()) && text.parse::<f64>().is_ok()
}

pub(super) fn parse_csv(text: &str, kind: LabelKind) -> Result<Vec<(usize, RowKey, Cell)>> {
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
pub(super) fn misnamed_label_column<'a>(fields: &[&'a str]) -> Option<&'a str> {
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
pub(super) struct Columns {
    key: usize,
    /// `None`: the manifest gives no labels.
    label: Option<usize>,
    /// (offset, length), for samples packed in larger files.
    range: Option<(usize, usize)>,
}

/// The columns if a row names them, as a header does: key (or path, file), optionally
/// label (or class), in any order, and optionally offset and length, any case.
pub(super) fn header_columns(fields: &[&str]) -> Option<Columns> {
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

pub(super) fn parse_json_lines(text: &str, kind: LabelKind) -> Result<Vec<(usize, RowKey, Cell)>> {
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
pub(super) fn line_error(line: impl TryInto<usize>, problem: String) -> SourceError {
    SourceError::Line {
        line: line.try_into().unwrap_or(usize::MAX),
        problem,
    }
}
