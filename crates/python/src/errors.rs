//! Errors as the package's exception classes (`loader_ml.errors`), each carrying the key,
//! the backend and the cause, and raising Python's own base class too (`NotFoundError` is a
//! `FileNotFoundError`, a config error a `ValueError`), so existing `except` clauses work.

use loader_core::Error;
use loader_core::scheduler::{EngineError, ItemError, ItemFailure};
use loader_core::storage::ErrorKind;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Which exception class an error raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `NotFoundError`: the object (or bucket) does not exist.
    NotFound,
    /// `PermissionDeniedError`: credentials missing, wrong or not allowed.
    Permission,
    /// `TransientError`: failed after the retries (connection, 5xx, throttling, timeout).
    Transient,
    /// `DecodeError`: the bytes are not a readable image or sample (or a transform failed).
    Decode,
    /// `ConfigError`: the settings or the dataset's description do not make sense.
    Config,
    /// `LoaderError`, the base of them all.
    Other,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::NotFound => "NotFoundError",
            Kind::Permission => "PermissionDeniedError",
            Kind::Transient => "TransientError",
            Kind::Decode => "DecodeError",
            Kind::Config => "ConfigError",
            Kind::Other => "LoaderError",
        }
    }
}

/// An error on its way to Python.
#[derive(Debug)]
pub struct Failure {
    /// The class.
    pub kind: Kind,
    /// The whole message (key, backend and cause included).
    pub message: String,
    /// The object's key, when one object is to blame.
    pub key: Option<String>,
    /// The store, e.g. `s3://bucket/train`.
    pub backend: Option<String>,
    /// What went wrong underneath.
    pub cause: Option<String>,
    /// A Python exception underneath (a transform's), to chain as `__cause__`.
    pub python: Option<PyErr>,
}

impl Failure {
    /// A failure of `kind` saying `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            key: None,
            backend: None,
            cause: None,
            python: None,
        }
    }

    /// The failure `error` is; `backend` names the store when the error itself does not.
    pub fn of(error: &Error, backend: &str) -> Self {
        let mut failure = match error {
            Error::Storage(e) => storage(e),
            Error::Engine(e) => engine(e),
            Error::Dataset(e) if e.is_shard() => Failure::new(Kind::Decode, ""),
            Error::Sampler(_)
            | Error::Transform(_)
            | Error::Dataset(_)
            | Error::Config(_)
            | Error::Collate(_)
            | Error::State(_) => Failure::new(Kind::Config, ""),
            _ => Failure::new(Kind::Other, ""),
        };
        failure.message = error.to_string();
        if failure.cause.is_none() {
            failure.cause = chain(error);
        }
        failure.backend.get_or_insert_with(|| backend.to_owned());
        failure
    }

    /// The failure of one sample (skipped, or failing its batch).
    pub fn of_item(error: &ItemError, backend: &str) -> Self {
        let mut failure = item(error);
        failure.message = error.to_string();
        failure.backend.get_or_insert_with(|| backend.to_owned());
        failure
    }

    /// The Python exception.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        match self.instance(py) {
            Ok(e) => e,
            Err(e) => e,
        }
    }

    fn instance(self, py: Python<'_>) -> PyResult<PyErr> {
        let class = py.import("loader_ml.errors")?.getattr(self.kind.class())?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("key", self.key)?;
        kwargs.set_item("backend", self.backend)?;
        kwargs.set_item("cause", self.cause)?;
        let value = class.call((self.message,), Some(&kwargs))?;
        let error = PyErr::from_value(value);
        if let Some(python) = self.python {
            error.set_cause(py, Some(python));
        }
        Ok(error)
    }
}

/// A `ConfigError` saying `message`: settings that make no sense.
pub fn config(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| Failure::new(Kind::Config, message).into_py(py))
}

/// Raise `error` as its exception class.
pub fn raise(error: &Error, backend: &str) -> PyErr {
    Python::attach(|py| Failure::of(error, backend).into_py(py))
}

fn storage(e: &loader_core::storage::Error) -> Failure {
    let kind = match e.kind() {
        ErrorKind::NotFound => Kind::NotFound,
        ErrorKind::PermissionDenied => Kind::Permission,
        ErrorKind::Transient | ErrorKind::Timeout | ErrorKind::Throttled => Kind::Transient,
        ErrorKind::InvalidKey | ErrorKind::Unsupported | ErrorKind::Config => Kind::Config,
        _ => Kind::Other,
    };
    let mut failure = Failure::new(kind, e.to_string());
    failure.key = Some(e.key().to_owned()).filter(|k| !k.is_empty());
    failure.backend = Some(e.backend().to_owned());
    failure.cause = chain(e).or_else(|| Some(e.message().to_owned()));
    failure
}

fn engine(e: &EngineError) -> Failure {
    match e {
        EngineError::Batch { errors, .. } | EngineError::TooManyFailures { errors, .. } => errors
            .first()
            .map_or_else(|| Failure::new(Kind::Other, ""), item),
        EngineError::Config(_) => Failure::new(Kind::Config, ""),
        _ => Failure::new(Kind::Other, ""),
    }
}

fn item(e: &ItemError) -> Failure {
    let mut failure = match &e.failure {
        ItemFailure::Fetch(cause) => storage(cause),
        ItemFailure::Stage(cause) => {
            let mut failure = Failure::new(Kind::Decode, "");
            failure.cause = Some(cause.to_string());
            // A transform's own exception, raised again as the cause of this one.
            failure.python = cause
                .downcast_ref::<PyErr>()
                .map(|p| Python::attach(|py| p.clone_ref(py)));
            failure
        }
        ItemFailure::Panic(message) => {
            let mut failure = Failure::new(Kind::Other, "");
            failure.cause = Some(format!("panicked: {message}"));
            failure
        }
        _ => Failure::new(Kind::Other, ""),
    };
    failure.key = Some(e.info.name.as_deref().unwrap_or(&e.info.key).to_owned());
    failure
}

/// The causes under `error`, joined.
fn chain(error: &dyn std::error::Error) -> Option<String> {
    let mut causes = Vec::new();
    let mut next = error.source();
    while let Some(e) = next {
        causes.push(e.to_string());
        next = e.source();
    }
    (!causes.is_empty()).then(|| causes.join(": "))
}
