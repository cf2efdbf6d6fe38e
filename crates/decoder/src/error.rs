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

/// A decode or transform error: a kind and a sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    message: String,
}

impl DecodeError {
    /// An error of `kind` with `message`.
    pub fn new(kind: DecodeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
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

impl std::error::Error for DecodeError {}

/// Results of this crate.
pub type Result<T, E = DecodeError> = std::result::Result<T, E>;
