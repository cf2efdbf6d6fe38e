//! Writing MDS shards as MosaicML Streaming's `MDSWriter` writes them without compression:
//! shards of at most a size limit (64 MiB, its default), each a sample count, `count + 1`
//! offsets, the columns' description (JSON) and the samples (a `u32` size per variable-size
//! column, then every column's bytes, columns in name order), and `index.json` listing them.

use std::path::{Path, PathBuf};

use crate::source::error::WriteError;
use crate::tokens::TokenType;

/// Streaming's default shard size limit.
pub const SIZE_LIMIT: usize = 1 << 26;

/// One column: its name, its MDS encoding (`jpeg`, `int`, `bytes`, `ndarray:uint32`...) and,
/// for a fixed-size encoding, the size of every value.
#[derive(Debug, Clone)]
pub struct MdsColumn {
    /// Its name.
    pub name: String,
    /// Its encoding, as Streaming names it.
    pub encoding: String,
    /// The size of each value when fixed (`int`: 8), none when values carry their length.
    pub size: Option<usize>,
}

impl MdsColumn {
    /// A column of values of any length.
    pub fn variable(name: &str, encoding: &str) -> Self {
        Self {
            name: name.to_owned(),
            encoding: encoding.to_owned(),
            size: None,
        }
    }

    /// A column whose every value is `size` bytes.
    pub fn fixed(name: &str, encoding: &str, size: usize) -> Self {
        Self {
            size: Some(size),
            ..Self::variable(name, encoding)
        }
    }
}

/// A document's ids as an MDS `ndarray:<dtype>` value of dynamic shape, as `MDSWriter`
/// encodes a 1-D numpy array: `ndim << 2 | shape type`, the length in the smallest unsigned
/// type holding it, then the ids. An empty document, or an id the type cannot hold, is
/// refused.
pub fn ndarray_value(ids: &[i64], dtype: TokenType) -> Result<Vec<u8>, WriteError> {
    if ids.is_empty() {
        return Err(WriteError::Sample(
            "an empty document: MDS arrays hold one value or more".into(),
        ));
    }
    let n = ids.len() as u64;
    let (code, width) = match n {
        0..0x100 => (0u8, 1),
        0x100..0x1_0000 => (1, 2),
        0x1_0000..0x1_0000_0000 => (2, 4),
        _ => (3, 8),
    };
    let size = dtype.size() as usize;
    let mut out = Vec::with_capacity(1 + width + ids.len() * size);
    out.push(1 << 2 | code);
    out.extend_from_slice(&n.to_le_bytes()[..width]);
    for &id in ids {
        if id < 0 || id > dtype.max_id() {
            return Err(WriteError::Sample(format!(
                "id {id} does not fit {}",
                dtype.name()
            )));
        }
        out.extend_from_slice(&id.to_le_bytes()[..size]);
    }
    Ok(out)
}

/// MDS shards being written into a local directory.
pub struct MdsWriter {
    dir: PathBuf,
    /// The columns in name order, and where each one's value is in a sample given to
    /// [`write`](Self::write).
    columns: Vec<(MdsColumn, usize)>,
    size_limit: usize,
    shard: Vec<Vec<u8>>,
    bytes: usize,
    shards: Vec<serde_json::Value>,
}

impl MdsWriter {
    /// Shards of `columns` (in any order: they are stored by name) written under `dir`.
    pub fn create(dir: &Path, columns: Vec<MdsColumn>) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir)?;
        let mut columns: Vec<(MdsColumn, usize)> = columns
            .into_iter()
            .enumerate()
            .map(|(i, c)| (c, i))
            .collect();
        columns.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok(Self {
            dir: dir.to_owned(),
            columns,
            size_limit: SIZE_LIMIT,
            shard: Vec::new(),
            bytes: 0,
            shards: Vec::new(),
        })
    }

    /// Shards of at most `bytes` (Streaming's `size_limit`), a lone sample larger than that
    /// aside.
    pub fn size_limit(mut self, bytes: usize) -> Self {
        self.size_limit = bytes;
        self
    }

    /// Appends a sample: one encoded value per column, in the order the columns were given.
    pub fn write(&mut self, values: &[&[u8]]) -> Result<(), WriteError> {
        if values.len() != self.columns.len() {
            return Err(WriteError::Sample(format!(
                "a sample of {} values for {} columns",
                values.len(),
                self.columns.len()
            )));
        }
        // A size per variable-size column first, then every column's bytes.
        let mut sample = Vec::new();
        for (column, at) in &self.columns {
            let value = values[*at];
            match column.size {
                Some(size) if size != value.len() => {
                    return Err(WriteError::Sample(format!(
                        "column {:?} holds {size}-byte values, given {}",
                        column.name,
                        value.len()
                    )));
                }
                Some(_) => {}
                None => sample.extend_from_slice(&size_field(value.len())?.to_le_bytes()),
            }
        }
        for (_, at) in &self.columns {
            sample.extend_from_slice(values[*at]);
        }
        // Streaming's rule: a shard's size counts its header (the count, the first offset)
        // and each sample's offset, and a sample that would pass the limit starts a new one.
        let size = sample.len() + 4;
        if !self.shard.is_empty() && self.size_limit < self.head() + self.bytes + size {
            self.flush()?;
        }
        self.bytes += size;
        self.shard.push(sample);
        Ok(())
    }

    /// Writes the last shard and `index.json`.
    pub fn finish(mut self) -> Result<(), WriteError> {
        self.flush()?;
        let index = serde_json::json!({"shards": self.shards, "version": 2});
        std::fs::write(self.dir.join("index.json"), serde_json::to_vec(&index)?)?;
        Ok(())
    }

    /// A shard's bytes before its samples' own: the count, the first offset, the config.
    fn head(&self) -> usize {
        8 + self.config().len()
    }

    /// The columns' description every shard carries after its offsets, as Streaming writes
    /// it: Python's `json.dumps(..., sort_keys=True)`, whose separators are `", "` and `": "`.
    fn config(&self) -> String {
        let list = |f: &dyn Fn(&MdsColumn) -> String| -> String {
            let items: Vec<String> = self.columns.iter().map(|(c, _)| f(c)).collect();
            format!("[{}]", items.join(", "))
        };
        // `ensure_ascii`, Python's default: other characters as `\u` escapes.
        let text = |s: &str| {
            let mut out = String::new();
            for c in serde_json::Value::from(s).to_string().chars() {
                if c.is_ascii() {
                    out.push(c);
                } else {
                    for unit in c.encode_utf16(&mut [0; 2]) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
            }
            out
        };
        format!(
            "{{\"column_encodings\": {}, \"column_names\": {}, \"column_sizes\": {}, \"compression\": null, \"format\": \"mds\", \"hashes\": [], \"size_limit\": {}, \"version\": 2}}",
            list(&|c| text(&c.encoding)),
            list(&|c| text(&c.name)),
            list(&|c| c.size.map_or("null".to_owned(), |s| s.to_string())),
            self.size_limit
        )
    }

    fn flush(&mut self) -> Result<(), WriteError> {
        if self.shard.is_empty() {
            return Ok(());
        }
        let name = format!("shard.{:05}.mds", self.shards.len());
        let n = self.shard.len();
        let config = self.config();
        let mut out = Vec::with_capacity(self.head() + self.bytes);
        out.extend_from_slice(&size_field(n)?.to_le_bytes());
        let mut at = 4 * (n + 2) + config.len();
        out.extend_from_slice(&size_field(at)?.to_le_bytes());
        for sample in &self.shard {
            at += sample.len();
            out.extend_from_slice(&size_field(at)?.to_le_bytes());
        }
        out.extend_from_slice(config.as_bytes());
        for sample in self.shard.drain(..) {
            out.extend_from_slice(&sample);
        }
        std::fs::write(self.dir.join(&name), &out)?;
        let column = |f: fn(&MdsColumn) -> serde_json::Value| -> Vec<serde_json::Value> {
            self.columns.iter().map(|(c, _)| f(c)).collect()
        };
        self.shards.push(serde_json::json!({
            "column_encodings": column(|c| c.encoding.clone().into()),
            "column_names": column(|c| c.name.clone().into()),
            "column_sizes": column(|c| c.size.into()),
            "compression": null,
            "format": "mds",
            "hashes": [],
            "raw_data": {"basename": name, "bytes": out.len(), "hashes": {}},
            "samples": n,
            "size_limit": self.size_limit,
            "version": 2,
            "zip_data": null,
        }));
        self.bytes = 0;
        Ok(())
    }
}

/// A length or offset as MDS stores it, or why it cannot be.
fn size_field(n: usize) -> Result<u32, WriteError> {
    u32::try_from(n)
        .map_err(|_| WriteError::Sample(format!("{n} bytes do not fit MDS's 32-bit sizes")))
}
