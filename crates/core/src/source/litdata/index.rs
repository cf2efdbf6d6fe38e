//! What a LitData `index.json` says: its chunks, how they are stored, and a sample's
//! leaves (names from the pytree `data_spec`, formats from `data_format`).

use serde::Deserialize;
use serde_json::Value;

use crate::tokens::TokenType;

#[derive(Debug, Deserialize)]
struct Index {
    chunks: Vec<ChunkInfo>,
    config: Config,
}

/// One chunk as `index.json` describes it.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct ChunkInfo {
    /// The file's size; for a whole-file compressed chunk, what it decompresses to.
    pub(super) chunk_bytes: u64,
    /// Its items.
    pub(super) chunk_size: u64,
    /// Its tokens, for `TokensLoader` chunks.
    #[serde(default)]
    pub(super) dim: Option<u64>,
    pub(super) filename: String,
}

#[derive(Debug, Deserialize)]
struct Config {
    #[serde(default)]
    compression: Option<String>,
    #[serde(default)]
    compression_level: Option<String>,
    data_format: Vec<String>,
    #[serde(default)]
    data_spec: Option<String>,
    #[serde(default)]
    encryption: Option<Value>,
    #[serde(default)]
    item_loader: Option<String>,
}

/// How a dataset's chunks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Packing {
    Raw,
    /// `LDFZ01` frames of items.
    Framed,
    /// The whole file one zstd frame.
    Whole,
    /// Each item its own zstd frame.
    Sample,
}

/// What `index.json` says.
#[derive(Debug)]
pub(super) struct Described {
    pub(super) chunks: Vec<ChunkInfo>,
    pub(super) packing: Packing,
    /// Each leaf's name (a dict's key, a tuple's position) and format, in stored order.
    pub(super) leaves: Vec<(String, String)>,
    /// For chunks written for `TokensLoader` (one flat array of ids each): the ids' type.
    pub(super) tokens: Option<TokenType>,
}

/// Whether `text` is a LitData index (an object with `chunks` and `config`) rather than
/// an MDS one (`shards`).
pub(super) fn is_litdata(text: &[u8]) -> bool {
    serde_json::from_slice::<Value>(text)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.contains_key("chunks") && o.contains_key("config"))
        })
        .unwrap_or(false)
}

/// The chunks, packing and leaves of an `index.json`'s bytes.
pub(super) fn parse_index(text: &[u8]) -> Result<Described, String> {
    let index: Index = serde_json::from_slice(text).map_err(|e| {
        format!("not a LitData index (a JSON object with \"chunks\" and \"config\"): {e}")
    })?;
    let config = index.config;
    let tokens = match config.item_loader.as_deref() {
        None | Some("PyTreeLoader") => None,
        Some("TokensLoader") => Some(token_type(&config.data_format)?),
        Some(loader) => {
            return Err(format!(
                "its chunks are written for litdata's {loader}: chunks of the default \
                 PyTreeLoader (samples) or of TokensLoader (token ids) are read here"
            ));
        }
    };
    if config.encryption.is_some() {
        return Err("its chunks are encrypted: decrypt them before reading them here".into());
    }
    let packing = match (
        config.compression.as_deref(),
        config.compression_level.as_deref(),
    ) {
        (None, _) => Packing::Raw,
        (Some(c), level) if c == "zstd" || c.starts_with("zstd:") => match level {
            // litdata reads a missing level as whole-file, for datasets written before it.
            None | Some("" | "chunk") => Packing::Whole,
            Some("batch") => Packing::Framed,
            Some("sample") => Packing::Sample,
            Some(other) => return Err(format!("compression level {other:?} is not litdata's")),
        },
        (Some(c), _) => {
            return Err(format!(
                "its chunks are compressed with {c:?}: LitData chunks are read raw or \
                 zstd-compressed"
            ));
        }
    };
    if tokens.is_some() && packing != Packing::Raw {
        return Err(
            "its token chunks are compressed: litdata's TokensLoader reads raw chunks, and so \
             does this reader"
                .into(),
        );
    }
    let names = leaf_names(config.data_spec.as_deref())?;
    if names.len() != config.data_format.len() {
        return Err(format!(
            "its data_spec has {} leaves ({names:?}) and its data_format {} ({:?})",
            names.len(),
            config.data_format.len(),
            config.data_format
        ));
    }
    for c in &index.chunks {
        crate::source::record_files::check_listed_name(&c.filename)?;
        // Item offsets are u32: no chunk is larger.
        if c.chunk_bytes > u64::from(u32::MAX) || c.chunk_size > u64::from(u32::MAX) {
            return Err(format!(
                "chunk {:?} claims {} items in {} bytes: more than its 32-bit offsets hold",
                c.filename, c.chunk_size, c.chunk_bytes
            ));
        }
    }
    Ok(Described {
        chunks: index.chunks,
        packing,
        leaves: names.into_iter().zip(config.data_format).collect(),
        tokens,
    })
}

/// The ids' type of `TokensLoader` chunks, from their one `data_format`
/// (`no_header_numpy:N` or `no_header_tensor:N`, `N` litdata's dtype index).
fn token_type(formats: &[String]) -> Result<TokenType, String> {
    let [format] = formats else {
        return Err(format!(
            "its TokensLoader chunks list {} data formats ({formats:?}), not one",
            formats.len()
        ));
    };
    let parsed = format.split_once(':').and_then(|(kind, code)| {
        let code: u8 = code.parse().ok()?;
        // litdata's _NUMPY_DTYPES_MAPPING and _TORCH_DTYPES_MAPPING.
        match (kind, code) {
            ("no_header_numpy", 0) | ("no_header_tensor", 12) => Some(TokenType::I8),
            ("no_header_numpy", 1) | ("no_header_tensor", 13 | 14) => Some(TokenType::I16),
            ("no_header_numpy", 2) | ("no_header_tensor", 15 | 16) => Some(TokenType::I32),
            ("no_header_numpy", 3) | ("no_header_tensor", 17 | 18) => Some(TokenType::I64),
            ("no_header_numpy", 4) | ("no_header_tensor", 11) => Some(TokenType::U8),
            ("no_header_numpy", 5) | ("no_header_tensor", 20) => Some(TokenType::U16),
            ("no_header_numpy", 6) => Some(TokenType::U32),
            ("no_header_numpy", 7) => Some(TokenType::U64),
            _ => None,
        }
    });
    parsed.ok_or_else(|| format!("its TokensLoader chunks hold {format:?}: not integer token ids"))
}

/// The names of a sample's leaves from litdata's pytree `data_spec`
/// (`[1, {"type": "builtins.dict", "context": "[\"image\", ...]", "children_spec": [...]}]`):
/// a dict's keys, a tuple's or list's positions, `"0"` for a lone leaf.
fn leaf_names(spec: Option<&str>) -> Result<Vec<String>, String> {
    let spec = spec.ok_or("its config has no data_spec")?;
    let parsed: Value =
        serde_json::from_str(spec).map_err(|e| format!("its data_spec is not JSON: {e}"))?;
    let node = parsed
        .get(1)
        .filter(|_| parsed.get(0).and_then(Value::as_u64) == Some(1))
        .ok_or("its data_spec is not a pytree spec of protocol 1")?;
    let kind = node.get("type").and_then(Value::as_str);
    let children = node
        .get("children_spec")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let is_leaf = |c: &Value| {
        c.get("type").is_none_or(Value::is_null)
            && c.get("children_spec")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
    };
    let Some(kind) = kind else {
        return Ok(vec!["0".into()]);
    };
    if !children.iter().all(is_leaf) {
        return Err(format!(
            "its samples are nested ({kind} holding containers): samples of one level (a \
             dict, tuple or list of values) are read here"
        ));
    }
    match kind {
        "builtins.dict" | "collections.OrderedDict" => {
            let context = node
                .get("context")
                .and_then(Value::as_str)
                .ok_or("its data_spec's dict has no keys")?;
            let keys: Vec<Value> = serde_json::from_str(context)
                .map_err(|e| format!("its data_spec's dict keys are not JSON: {e}"))?;
            Ok(keys
                .into_iter()
                .map(|k| match k {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect())
        }
        "builtins.tuple" | "builtins.list" => {
            Ok((0..children.len()).map(|i| i.to_string()).collect())
        }
        other => Err(format!(
            "its samples are {other}: a dict, tuple or list of values is read here"
        )),
    }
}
