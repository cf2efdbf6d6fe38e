//! What a read asks for and what it gets back: [`GetOptions`] in, [`GetResult`] out, with
//! [`Served`] saying what the read met on its way (a cache's answer, retries, throttling).
//! Layers fill `Served` as they return, so a caller that adapts to the store (the engine's
//! in-flight limit, its hedger) reads the facts from the result, as object_store's
//! `GetOptions`/`GetResult` carry theirs: no side channel a custom layer could break.

use std::ops::Range;

use bytes::Bytes;

use crate::ObjectMeta;

/// What a read asks for besides its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GetOptions {
    /// Only these bytes (cut at the object's end, as HTTP ranges are); `None`: all of it.
    pub range: Option<Range<u64>>,
    /// Only from this version ([`ObjectMeta::version`]), for a ranged read: bytes of
    /// another are an [`ErrorKind::Changed`](crate::ErrorKind::Changed) error where the
    /// backend can tell (object_store's ETag or modification time, the local file's mtime;
    /// the opendal backend cannot and reads unchecked).
    pub if_match: Option<String>,
    /// It asks again for what a read under way asks for (a hedge): a layer must not make it
    /// wait for that read (a cache's single flight), which it is meant to overtake.
    pub repeat: bool,
}

impl GetOptions {
    /// The bytes `range` of the object.
    pub fn range(range: Range<u64>) -> Self {
        Self {
            range: Some(range),
            ..Self::default()
        }
    }

    /// Only from `version`.
    pub fn if_match(mut self, version: impl Into<String>) -> Self {
        self.if_match = Some(version.into());
        self
    }

    /// A hedge of a read under way.
    pub fn repeat(mut self, repeat: bool) -> Self {
        self.repeat = repeat;
        self
    }
}

/// What a read met besides its answer. On an error, [`Error::served`](crate::Error::served)
/// says the same of the failed read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Served {
    /// A cache answered the whole read without asking the store: its latency is not the
    /// store's.
    pub cached: bool,
    /// Attempts a retry layer repeated after failures other than throttling.
    pub retries: u32,
    /// Throttling answers (429, 503 SlowDown) a retry layer repeated.
    pub throttled: u32,
}

impl Served {
    /// `self` and what an inner layer reported, for one read made of both.
    pub fn merge(self, inner: Served) -> Served {
        Served {
            cached: self.cached || inner.cached,
            retries: self.retries.saturating_add(inner.retries),
            throttled: self.throttled.saturating_add(inner.throttled),
        }
    }
}

/// A read's bytes, what the backend said of the object, and what the read met.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GetResult {
    /// The bytes asked for.
    pub bytes: Bytes,
    /// The object's size and version, when the backend learned them with the read.
    pub meta: Option<ObjectMeta>,
    /// What the read met.
    pub served: Served,
}

impl GetResult {
    /// `bytes`, with nothing else known.
    pub fn new(bytes: Bytes) -> Self {
        Self {
            bytes,
            ..Self::default()
        }
    }
}
