//! Why bytes did not become pixels.

use std::fmt;

/// The broad reason a decode or transform failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// No bytes at all.
    Empty,
    /// No magic bytes of a format this crate decodes.
    UnknownFormat,
    /// The image declares more pixels than the configured budget.
    TooLarge,
    /// The data ends before the image does.
    Truncated,
    /// The data is damaged or violates the format.
    Corrupt,
    /// A valid feature this decoder does not handle (e.g. 12-bit JPEG, arithmetic coding).
    Unsupported,
    /// A caller-provided output buffer has the wrong size, or a transform's size is invalid.
    InvalidArgument,
}

/// The library error under a decode error.
type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A decode or transform error: a kind, a sentence for a person, and the decoding
/// library's own error when one is under it ([`std::error::Error::source`]).
#[derive(Debug, Clone)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    message: String,
    source: Option<Cause>,
}

/// Two errors are the same when their kind and sentence are (a library's error has no
/// equality of its own).
impl PartialEq for DecodeError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for DecodeError {}

impl DecodeError {
    /// An error of `kind` with `message`.
    pub fn new(kind: DecodeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// This error, caused by the decoding library's `source`.
    pub fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// The broad reason.
    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Results of this crate.
pub type Result<T, E = DecodeError> = std::result::Result<T, E>;
