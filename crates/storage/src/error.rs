//! The one error type of every store: a kind to act on, the key and backend to name, a cause.

use std::fmt;

/// What went wrong, coarsely enough to decide what to do about it (retry, skip, give up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The object does not exist.
    NotFound,
    /// A failure that may pass if the request is repeated: connection reset, 5xx, throttling.
    Transient,
    /// The request did not finish in time.
    Timeout,
    /// The store asked for fewer requests (429, 503 SlowDown): retried after a backoff, and
    /// a sign to lower the request rate.
    Throttled,
    /// The credentials are missing, wrong, or not allowed to read the object.
    PermissionDenied,
    /// The key is not acceptable to this store (escapes the root, empty, NUL, ...).
    InvalidKey,
    /// The store cannot do this operation (e.g. listing a plain HTTP server).
    Unsupported,
    /// The store's settings are wrong: a URL that does not parse, an unknown option, a
    /// value of the wrong form. Not retried.
    Config,
    /// The object is no longer the version asked for ([`Storage::get_range_if`](crate::Storage::get_range_if)):
    /// it was rewritten since it was listed. Not retried: the caller decides.
    Changed,
    /// Anything else; not retried.
    Other,
}

impl ErrorKind {
    /// Whether repeating the same request may succeed: the retry layer retries only these.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Transient | ErrorKind::Timeout | ErrorKind::Throttled
        )
    }

    fn describe(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Transient => "transient failure",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Throttled => "throttled",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::InvalidKey => "invalid key",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Changed => "changed",
            ErrorKind::Config => "invalid store settings",
            ErrorKind::Other => "failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Shared, so an error can be cloned: one failed request answers every caller waiting on it.
type SharedSource = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// An error from a store. It always names the key (empty for store-wide operations such as
/// opening the store) and the backend, e.g. `s3://bucket/prefix`, never any credential.
///
/// Displays as `not found: key "cat/1.jpg" on s3://images/train: <cause>`. Cloning is
/// cheap: the cause is shared.
#[derive(Clone)]
pub struct Error(Box<Inner>);

/// Boxed so `Result<Bytes, Error>` stays two words wide on the hot path.
#[derive(Clone)]
struct Inner {
    kind: ErrorKind,
    key: String,
    backend: String,
    message: String,
    source: Option<SharedSource>,
    /// What the failed read met (retries, throttling) before it failed.
    served: crate::Served,
}

impl Error {
    /// An error of `kind` for `key` on `backend`, with a human explanation.
    pub fn new(
        kind: ErrorKind,
        backend: impl Into<String>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self(Box::new(Inner {
            kind,
            key: key.into(),
            backend: backend.into(),
            message: message.into(),
            source: None,
            served: crate::Served::default(),
        }))
    }

    /// Attach the underlying cause; it is shown after the message and returned by `source()`.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.0.source = Some(SharedSource::from(source.into()));
        self
    }

    /// What the failed read met before it failed: the retries and throttling answers a
    /// retry layer saw (its last answer is this error).
    pub fn served(&self) -> crate::Served {
        self.0.served
    }

    /// This error with what its read met, as a layer reports it on the way back.
    pub fn with_served(mut self, served: crate::Served) -> Self {
        self.0.served = served;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The key the request was for; empty when the error is not about one object.
    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// The backend that failed, as the store names itself (e.g. `s3://bucket/prefix`).
    pub fn backend(&self) -> &str {
        &self.0.backend
    }

    /// The explanation without the cause chain.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The same error with another explanation in front, e.g. "after 5 attempts".
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.0.message = if self.0.message.is_empty() {
            context.to_string()
        } else {
            format!("{context}: {}", self.0.message)
        };
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.kind)?;
        if !self.0.key.is_empty() {
            write!(f, ": key {:?}", self.0.key)?;
        }
        write!(f, " on {}", self.0.backend)?;
        if !self.0.message.is_empty() {
            write!(f, ": {}", self.0.message)?;
        }
        if let Some(source) = &self.0.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("key", &self.0.key)
            .field("backend", &self.0.backend)
            .field("message", &self.0.message)
            .field("source", &self.0.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The result of every store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_key_backend_and_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = Error::new(ErrorKind::NotFound, "file:///data", "cat/1.jpg", "")
            .with_source(io)
            .context("reading the object");
        assert_eq!(
            err.to_string(),
            "not found: key \"cat/1.jpg\" on file:///data: reading the object: No such file"
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn only_transient_and_timeout_are_retryable() {
        assert!(ErrorKind::Transient.is_retryable());
        assert!(ErrorKind::Throttled.is_retryable());
        assert!(ErrorKind::Timeout.is_retryable());
        for kind in [
            ErrorKind::NotFound,
            ErrorKind::PermissionDenied,
            ErrorKind::InvalidKey,
            ErrorKind::Unsupported,
            ErrorKind::Changed,
            ErrorKind::Config,
            ErrorKind::Other,
        ] {
            assert!(!kind.is_retryable(), "{kind:?}");
        }
    }
}
