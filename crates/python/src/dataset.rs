//! `loader_ml.Dataset`: a dataset opened from its URL, for inspection and for loaders.

use std::collections::HashMap;

use loader_core::{Dataset, DynStorage, Label, LoaderOptions, SourceContext, from_url, store_url};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;

use crate::errors;

/// A dataset at a URL: an ImageFolder, WebDataset shards, Parquet files, MDS shards or
/// LitData chunks (an `index.json` URL), a manifest's list, or token files (Megatron-LM
/// `.idx`/`.bin` pairs, LitData `TokensLoader` chunks, MDS shards of token arrays, Parquet
/// token lists) read in blocks of `block_size` tokens. Listing (and indexing shards, reading Parquet footers) happens once, here; loaders
/// made from it share it.
///
/// `Dataset(url, *, manifest=None, labels=None, storage_options=None, fields=None,
/// image_column=None, label_column=None, member_columns=None, format=None, block_size=None,
/// keep_tail=None, vocab_size=None, token_column=None, options=None)`: `url` is `s3://bucket/prefix`, `http(s)://...`,
/// `file:///dir` or a path, or shards as `s3://bucket/train-{000000..000127}.tar`, or
/// Parquet files (`s3://bucket/data/train-00000-of-00004.parquet`, a brace list of them, or
/// a prefix holding them), or MDS shards or LitData chunks by their `.../index.json`;
/// `image_column` and `label_column` the Parquet, MDS or LitData columns of the
/// images (binary, or Hugging Face's struct of bytes and path) and labels (`""`: none;
/// default `image`/`img`/... and `label`/`cls` when present); `manifest` a CSV (`key,label`) or JSON-lines key
/// under it, read instead of listing; `labels` how its labels are read: `"class"` (the
/// default: an index or a name), `"multi"` (several classes, batched multi-hot float32
/// `[N, classes]`) or `"values"` (numbers, batched float32 `[N]` or `[N, K]`); `classes` the
/// classes its labels must be among, in index order (the training set's, for a validation
/// manifest: the same indices and multi-hot columns); `storage_options` the store's settings (e.g.
/// `aws_endpoint`, `aws_region`); `fields` the members of each WebDataset sample, as
/// `to_tuple` names them (`("npy", "json")`; the first is the main one); `member_columns`
/// Parquet columns handed as members; `format` the format by name (default: found);
/// `block_size` the tokens a row of a token dataset trains on, `keep_tail` whether each
/// file's last tokens make a padded row, `vocab_size` the bound its ids must be under,
/// `token_column` an MDS or Parquet dataset's column of ids (default `tokens` or
/// `input_ids`);
/// `options` any loader option by key, e.g. `{"storage.max_retries": "3"}`. `len(ds)`,
/// `ds.classes`, `ds[i] == (key, label)`.
#[pyclass(module = "loader_ml._native", name = "Dataset", frozen)]
pub struct PyDataset {
    pub(crate) store: DynStorage,
    pub(crate) dataset: Dataset,
    /// The WebDataset fields it was opened with, if any.
    fields: Option<Vec<String>>,
}

#[pymethods]
impl PyDataset {
    /// Open the dataset at `url` (`s3://bucket/prefix`, `http(s)://...`, `file:///dir` or a
    /// path; shards as `s3://bucket/train-{000000..000127}.tar`), reading `manifest` (a CSV
    /// `key,label` or JSON-lines key under the URL) instead of listing when given.
    /// `storage_options` are the store's settings, e.g. `aws_endpoint`, `aws_region`.
    #[new]
    #[pyo3(signature = (url, *, manifest = None, storage_options = None, fields = None, labels = None, classes = None, image_column = None, label_column = None, member_columns = None, format = None, block_size = None, keep_tail = None, vocab_size = None, token_column = None, options = None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn new(
        py: Python<'_>,
        url: String,
        manifest: Option<String>,
        storage_options: Option<HashMap<String, String>>,
        fields: Option<Vec<String>>,
        labels: Option<String>,
        classes: Option<Vec<String>>,
        image_column: Option<String>,
        label_column: Option<String>,
        member_columns: Option<Vec<String>>,
        format: Option<String>,
        block_size: Option<u64>,
        keep_tail: Option<bool>,
        vocab_size: Option<u64>,
        token_column: Option<String>,
        options: Option<HashMap<String, String>>,
    ) -> PyResult<Self> {
        // The keywords are `source.*` options, typed; `options` any source.* or storage.*
        // option by key, read through the same declarations. One setting given both ways
        // is refused, not settled by a rule the caller cannot see.
        let mut settings = LoaderOptions::default();
        let config = |e: loader_core::OptionError| errors::config(e.to_string());
        let options = options.unwrap_or_default();
        let keywords = [
            ("manifest", manifest.is_some()),
            ("labels", labels.is_some()),
            ("classes", classes.is_some()),
            ("fields", fields.is_some()),
            ("image_column", image_column.is_some()),
            ("label_column", label_column.is_some()),
            ("member_columns", member_columns.is_some()),
            ("format", format.is_some()),
            ("block_size", block_size.is_some()),
            ("keep_tail", keep_tail.is_some()),
            ("vocab_size", vocab_size.is_some()),
            ("token_column", token_column.is_some()),
        ];
        for (key, value) in &options {
            let key = key.trim();
            if !(key.starts_with("source.") || key.starts_with("storage.")) {
                return Err(errors::config(format!(
                    "options={{{key:?}: ...}}: a Dataset reads source.* and storage.* options; \
                     give the loader's own to the DataLoader"
                )));
            }
            if let Some((keyword, _)) = keywords
                .iter()
                .find(|(k, given)| *given && key.strip_prefix("source.") == Some(*k))
            {
                return Err(errors::config(format!(
                    "{keyword}= and options[{key:?}] both set it: give one of them"
                )));
            }
            settings.set(key, value).map_err(config)?;
        }
        let source = &mut settings.source;
        if member_columns.is_some() || !source.member_columns.is_empty() {
            return Err(errors::config(
                "member_columns: the Python package does not hand a sample's members to \
                 Python yet; read them from Rust (SampleInfo::members)",
            ));
        }
        if let Some(name) = labels {
            source.set("labels", &name).map_err(config)?;
        }
        if let Some(label) = label_column {
            source.set("label_column", &label).map_err(config)?;
        }
        // Typed, not through text: an empty image column is refused by `validate`, where
        // its text would read as unset.
        for (slot, given) in [
            (&mut source.manifest, manifest),
            (&mut source.image_column, image_column),
            (&mut source.token_column, token_column),
            (&mut source.format, format),
        ] {
            if given.is_some() {
                *slot = given;
            }
        }
        if classes.is_some() {
            source.classes = classes;
        }
        if block_size.is_some() {
            source.block_size = block_size;
        }
        if let Some(keep) = keep_tail {
            source.keep_tail = keep;
        }
        if vocab_size.is_some() {
            source.vocab_size = vocab_size;
        }
        if fields.is_some() {
            source.fields = fields;
        }
        settings
            .validate()
            .map_err(|e| errors::config(e.to_string()))?;
        let fields = settings.source.fields.clone();
        let store_options = storage_options.unwrap_or_default();
        let opened = py.detach(|| -> loader_core::Result<(DynStorage, Dataset)> {
            let store = from_url(&store_url(&url)?, store_options)?;
            let context = SourceContext::new(store.clone(), &settings);
            let dataset = Dataset::open_blocking(&url, &context)?;
            Ok((store, dataset))
        });
        match opened {
            Ok((store, dataset)) => Ok(Self {
                store,
                dataset,
                fields,
            }),
            // The URL without its user info and query, where credentials hide.
            Err(e) => Err(errors::raise(&e, &loader_core::storage::redact(&url))),
        }
    }

    /// Samples.
    fn __len__(&self) -> usize {
        self.dataset.len()
    }

    /// Class names, in label order.
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.dataset.classes().to_vec()
    }

    /// The store, as errors name it (e.g. `s3://bucket/train`).
    #[getter]
    fn backend(&self) -> String {
        self.store.name().to_owned()
    }

    /// The WebDataset fields it was opened with (`None`: the image and `.cls`).
    #[getter]
    fn fields(&self) -> Option<Vec<String>> {
        self.fields.clone()
    }

    /// How many samples' objects end in each extension (lowercased, after the last dot;
    /// `""` for none), for a dataset of one object per sample.
    fn extensions(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for item in self.dataset.iter() {
            let ext = item
                .key
                .rsplit_once('/')
                .map_or(&*item.key, |(_, name)| name)
                .rsplit_once('.')
                .map_or(String::new(), |(_, ext)| ext.to_ascii_lowercase());
            *counts.entry(ext).or_insert(0) += 1;
        }
        counts
    }

    /// Whether its source gives labels (a folder's classes, a manifest's label column,
    /// shards' `.cls`); without, every label is -1.
    #[getter]
    fn labelled(&self) -> bool {
        self.dataset.has_labels()
    }

    /// What its labels are: `"class"` (an index, -1 for none), `"multi"` (sets of classes)
    /// or `"values"` (numbers), as batches hold them.
    #[getter]
    fn label_kind(&self) -> &'static str {
        match self.dataset.get(0).map(|i| i.label) {
            Some(Label::Classes(_)) => "multi",
            Some(Label::Value(_) | Label::Values(_)) => "values",
            _ => "class",
        }
    }

    /// The tokens a row trains on, for a dataset of token blocks (`None` for others).
    #[getter]
    fn block_size(&self) -> Option<u64> {
        self.dataset
            .tokens()
            .map(|files| files.blocking().row_len())
    }

    /// Shards (0 for a dataset of one object per sample).
    #[getter]
    fn num_shards(&self) -> usize {
        self.dataset.shards().len()
    }

    /// Sample `index` as `(key, label)`; the key is the object's, or the sample's name
    /// within its shard; the label an int (-1 for none), a float, a list of floats, or for
    /// multi-label a list of class indices.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: isize,
    ) -> PyResult<(String, Bound<'py, PyAny>)> {
        let len = self.dataset.len() as isize;
        let at = if index < 0 { index + len } else { index };
        let item = usize::try_from(at)
            .ok()
            .and_then(|i| self.dataset.get(i))
            .ok_or_else(|| PyIndexError::new_err(format!("index {index} of {len} samples")))?;
        let key = item.name.as_deref().unwrap_or(&item.key).to_owned();
        let label = match &item.label {
            Label::None => (-1i64).into_pyobject(py)?.into_any(),
            Label::Class(c) => c.into_pyobject(py)?.into_any(),
            Label::Value(v) => v.into_pyobject(py)?.into_any(),
            Label::Values(v) => v.to_vec().into_pyobject(py)?.into_any(),
            Label::Classes(set) => set.indices.to_vec().into_pyobject(py)?.into_any(),
        };
        Ok((key, label))
    }

    fn __repr__(&self) -> String {
        format!(
            "Dataset({} samples, {} classes, {} shards, at {})",
            self.dataset.len(),
            self.dataset.classes().len(),
            self.dataset.shards().len(),
            self.store.name()
        )
    }
}
