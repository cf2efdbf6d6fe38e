//! What a read asks for and what it gets back: [`GetOptions`] in, [`GetResult`] out, with
//! [`Served`] saying what the read met on its way (a cache's answer, retries, throttling).
//! Layers fill `Served` as they return, so a caller that adapts to the store (the engine's
//! in-flight limit, its hedger) reads the facts from the result, as object_store's
//! `GetOptions`/`GetResult` carry theirs: no side channel a custom layer could break.
//! A caller that must know while the read is still under way (a throttled answer, before
//! the retry layer's backoff) gives an [`Observer`] in the options; layers tell it each
//! fact as it happens, and the totals still come back in `Served`.

use std::ops::Range;
use std::sync::Arc;

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
    /// Told of each fact a layer will report in [`Served`] when it happens, so a caller
    /// adapts while the read is still backing off; layers pass the options on unchanged.
    pub observer: Option<Observer>,
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

    /// Tell `observer` what the read meets as it happens.
    pub fn observe(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Tell the observer, if any, that the read just met `fact` (one retry, one throttled
    /// answer): a layer calls this where it adds the same to the read's [`Served`].
    pub fn met(&self, fact: Served) {
        if let Some(observer) = &self.observer {
            (observer.0)(fact);
        }
    }
}

/// A callback told of what a read meets while it is under way ([`GetOptions::observer`]).
/// Two observers are equal when they are the same callback.
#[derive(Clone)]
pub struct Observer(Arc<dyn Fn(Served) + Send + Sync>);

impl Observer {
    /// An observer calling `f` with each fact.
    pub fn new(f: impl Fn(Served) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl PartialEq for Observer {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Observer {}

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
    /// One throttling answer repeated.
    pub fn throttled() -> Self {
        Self {
            throttled: 1,
            ..Self::default()
        }
    }

    /// One failure other than throttling repeated.
    pub fn retried() -> Self {
        Self {
            retries: 1,
            ..Self::default()
        }
    }

    /// What `self` counts beyond `seen` (saturating): the part of a read's totals an
    /// observer was not told of (a custom layer that fills `Served` but calls no observer).
    pub fn beyond(self, seen: Served) -> Served {
        Served {
            cached: self.cached,
            retries: self.retries.saturating_sub(seen.retries),
            throttled: self.throttled.saturating_sub(seen.throttled),
        }
    }

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
