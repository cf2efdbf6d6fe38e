//! `object_store` adapter: S3, HTTP(S), GCS, Azure and memory behind one type.

use std::ops::Range;
use std::sync::Arc;

use ::object_store::path::Path;
use ::object_store::{GetOptions, GetResult, ObjectStore, ObjectStoreExt};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use crate::{
    DEFAULT_MAX_READ_BYTES, Error, ErrorKind, ObjectMeta, Result, Storage, check_key, check_prefix,
    too_large,
};

/// Which service sits behind the adapter; it decides how some errors read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flavor {
    /// Amazon S3 or an S3-compatible server.
    S3,
    /// A plain HTTP(S) file server; it lists only if it speaks WebDAV.
    Http,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage.
    Azure,
    /// An in-memory store.
    Memory,
    /// Any other `ObjectStore` a caller brought.
    Other,
}

/// Any [`ObjectStore`] as a [`Storage`]. Build one with [`crate::from_url`], or wrap a
/// store you configured yourself with [`ObjectStoreAdapter::new`].
pub struct ObjectStoreAdapter {
    inner: Arc<dyn ObjectStore>,
    name: String,
    flavor: Flavor,
    max_read_bytes: u64,
}

impl std::fmt::Debug for ObjectStoreAdapter {
    // Not derived: object_store's stores and builders print their credentials in Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreAdapter")
            .field("name", &self.name)
            .field("flavor", &self.flavor)
            .finish_non_exhaustive()
    }
}

impl ObjectStoreAdapter {
    /// Wrap `inner`, naming it `name` in errors (give a URL without credentials).
    pub fn new(inner: Arc<dyn ObjectStore>, name: impl Into<String>, flavor: Flavor) -> Self {
        Self {
            inner,
            name: name.into(),
            flavor,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        }
    }

    /// The most bytes one read (whole object or range) may return; a larger answer is
    /// refused by its announced size, before its body is read or any buffer allocated.
    /// Default [`DEFAULT_MAX_READ_BYTES`].
    pub fn with_max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
    }

    /// The body of `result`, refused if the server announces more than the limit, and
    /// collected without trusting that announcement for the allocation (object_store's
    /// own `bytes()` reserves whatever `Content-Length` says).
    async fn body(&self, key: &str, result: GetResult) -> Result<Bytes> {
        let announced = result.range.end.saturating_sub(result.range.start);
        let max = self.max_read_bytes;
        if announced > max {
            return Err(too_large(&self.name, key, announced, max));
        }
        let mut stream = result.into_stream();
        let Some(first) = stream
            .next()
            .await
            .transpose()
            .map_err(|e| self.error(key, e))?
        else {
            return Ok(Bytes::new());
        };
        let Some(second) = stream
            .next()
            .await
            .transpose()
            .map_err(|e| self.error(key, e))?
        else {
            return Ok(first); // one chunk: no copy
        };
        let mut buf = Vec::with_capacity(usize::try_from(announced.min(64 << 20)).unwrap_or(0));
        buf.extend_from_slice(&first);
        buf.extend_from_slice(&second);
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk.map_err(|e| self.error(key, e))?);
            if buf.len() as u64 > max {
                return Err(too_large(&self.name, key, buf.len() as u64, max));
            }
        }
        Ok(buf.into())
    }

    /// A range of `key`; with `version`, refused as [`ErrorKind::Changed`] when the
    /// response is of another version of the object (its ETag or modification time). The
    /// response is checked rather than an `If-Match` sent: not every server honours it.
    async fn read_range(
        &self,
        key: &str,
        range: Range<u64>,
        version: Option<&str>,
    ) -> Result<(Bytes, Option<ObjectMeta>)> {
        let path = self.path(key)?;
        if range.start > range.end {
            return Err(Error::new(
                ErrorKind::Other,
                &self.name,
                key,
                format!("invalid byte range {range:?}"),
            ));
        }
        if range.start == range.end {
            return Ok((Bytes::new(), None));
        }
        let options = GetOptions::default().with_range(Some(range));
        let result = self
            .inner
            .get_opts(&path, options)
            .await
            .map_err(|e| self.error(key, e))?;
        if let Some(want) = version
            && let Some(got) = version_like(want, &result.meta)
            && want != got
        {
            return Err(Error::new(
                ErrorKind::Changed,
                &self.name,
                key,
                format!("the object changed since it was listed (version {want:?}, now {got:?})"),
            ));
        }
        let meta = meta_of(key, &result.meta);
        Ok((self.body(key, result).await?, Some(meta)))
    }

    /// The wrapped store, for operations this crate does not cover (e.g. writing).
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    fn path(&self, key: &str) -> Result<Path> {
        check_key(&self.name, key)?;
        Path::parse(key)
            .map_err(|e| Error::new(ErrorKind::InvalidKey, &self.name, key, "").with_source(e))
    }

    fn error(&self, key: &str, err: ::object_store::Error) -> Error {
        map_error(&self.name, key, err)
    }
}

/// Translate an `object_store` error into our kinds. HTTP status codes are read from the
/// error text because object_store keeps its retry error type private.
pub(crate) fn map_error(backend: &str, key: &str, err: ::object_store::Error) -> Error {
    use ::object_store::Error as E;
    let kind = match &err {
        E::NotFound { .. } => ErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorKind::PermissionDenied,
        E::InvalidPath { .. } => ErrorKind::InvalidKey,
        E::NotSupported { .. } | E::NotImplemented { .. } => ErrorKind::Unsupported,
        E::UnknownConfigurationKey { .. } => ErrorKind::Config,
        _ => classify_chain(&err),
    };
    // object_store and reqwest quote the URL they requested in full: user info, SAS tokens
    // and presigned signatures included.
    Error::new(kind, backend, key, "").with_source(crate::redact::Redacted::of(&err))
}

fn classify_chain(err: &(dyn std::error::Error + 'static)) -> ErrorKind {
    use ::object_store::client::{HttpError, HttpErrorKind};
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            return match http.kind() {
                HttpErrorKind::Timeout => ErrorKind::Timeout,
                // A refused or reset connection and a body cut short are worth a retry.
                HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Interrupted
                | HttpErrorKind::Decode => ErrorKind::Transient,
                _ => ErrorKind::Other,
            };
        }
        if let Some(status) = status_in(&e.to_string()) {
            return match status {
                401 | 403 => ErrorKind::PermissionDenied,
                404 | 410 => ErrorKind::NotFound,
                405 | 501 => ErrorKind::Unsupported,
                408 => ErrorKind::Timeout,
                // S3 answers 503 SlowDown when a prefix takes more requests than it can.
                429 | 503 => ErrorKind::Throttled,
                500..=599 => ErrorKind::Transient,
                _ => ErrorKind::Other,
            };
        }
        current = e.source();
    }
    ErrorKind::Other
}

/// The status in object_store's "Server returned non-2xx status code: 503 ..." message.
fn status_in(message: &str) -> Option<u16> {
    let rest = message.split_once("status code: ")?.1;
    rest.get(..3)?.parse().ok()
}

/// An object's version: its ETag, else the store's version id, else its modification time
/// (plain HTTP servers often send `Last-Modified` without `ETag`), else none. object_store
/// reads a missing `Last-Modified` as the Unix epoch, which says nothing. An ETag is taken
/// without its quotes and weak mark: servers quote it in a header and not always in a
/// listing, and the same object must have one version whichever of them named it.
/// What a response says of its object: the whole object's size (a ranged answer's
/// `Content-Range` total) and its version.
fn meta_of(key: &str, meta: &::object_store::ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        key: key.to_owned(),
        size: meta.size,
        version: version_of(meta),
    }
}

fn version_of(meta: &::object_store::ObjectMeta) -> Option<String> {
    tag_of(meta).or_else(|| modified_of(meta))
}

fn tag_of(meta: &::object_store::ObjectMeta) -> Option<String> {
    meta.e_tag
        .as_deref()
        .map(|tag| tag.trim_start_matches("W/").trim_matches('"').to_owned())
        .or_else(|| meta.version.clone())
}

/// The modification time as a version, in whole seconds: what an HTTP header can say
/// (a listing may say milliseconds of the same time).
fn modified_of(meta: &::object_store::ObjectMeta) -> Option<String> {
    let secs = meta.last_modified.timestamp();
    (secs != 0).then(|| format!("{MODIFIED}{secs}"))
}

/// How a version made from a modification time starts.
const MODIFIED: &str = "modified at ";

/// `response`'s version in the form of `want`: a listing may name an object by its
/// modification time where a GET names it by its ETag, so the two are compared as `want`
/// was made.
fn version_like(want: &str, response: &::object_store::ObjectMeta) -> Option<String> {
    if want.starts_with(MODIFIED) {
        modified_of(response)
    } else {
        tag_of(response)
    }
}

impl ObjectStoreAdapter {
    /// The whole of `key`, within the read limit.
    async fn read_whole(&self, key: &str) -> Result<(Bytes, Option<ObjectMeta>)> {
        let path = self.path(key)?;
        let result = self
            .inner
            .get(&path)
            .await
            .map_err(|e| self.error(key, e))?;
        let meta = meta_of(key, &result.meta);
        Ok((self.body(key, result).await?, Some(meta)))
    }
}

#[async_trait]
impl Storage for ObjectStoreAdapter {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get_opts(&self, key: &str, options: crate::GetOptions) -> Result<crate::GetResult> {
        let (bytes, meta) = match (options.range, options.if_match) {
            (Some(range), version) => self.read_range(key, range, version.as_deref()).await?,
            (None, None) => self.read_whole(key).await?,
            (None, Some(_)) => return Err(super::whole_if_match(&self.name, key)),
        };
        let mut answer = crate::GetResult::new(bytes);
        answer.meta = meta;
        Ok(answer)
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let path = self.path(key)?;
        let meta = self
            .inner
            .head(&path)
            .await
            .map_err(|e| self.error(key, e))?;
        Ok(meta_of(key, &meta))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let prefix = match check_prefix(&self.name, prefix) {
            Ok("") => None,
            // `parse`, as for keys: `Path::from` percent-encodes the prefix ('%', ' ' and
            // friends), and S3 then encodes it again, so such a prefix listed nothing.
            Ok(p) => match Path::parse(p) {
                Ok(path) => Some(path),
                Err(e) => {
                    let err = Error::new(ErrorKind::InvalidKey, &self.name, p, "").with_source(e);
                    return futures::stream::once(async { Err(err) }).boxed();
                }
            },
            Err(e) => return futures::stream::once(async { Err(e) }).boxed(),
        };
        let flavor = self.flavor;
        self.inner
            .list(prefix.as_ref())
            .map_ok(|meta| ObjectMeta {
                key: meta.location.to_string(),
                size: meta.size,
                version: version_of(&meta),
            })
            .map_err(move |e| {
                let err = self.error(prefix.as_ref().map_or("", |p| p.as_ref()), e);
                if flavor == Flavor::Http && !err.kind().is_retryable() {
                    // Static file servers answer PROPFIND with 404/405/501 or garbage.
                    Error::new(
                        ErrorKind::Unsupported,
                        &self.name,
                        err.key(),
                        "this HTTP server cannot list (it does not answer WebDAV PROPFIND); \
                         describe the dataset with a manifest instead",
                    )
                    .with_source(err)
                } else {
                    err
                }
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_from_object_store_messages() {
        let msg = "Error performing GET http://x/y in 1ms - Server returned non-2xx status code: 503 Service Unavailable: ";
        assert_eq!(status_in(msg), Some(503));
        assert_eq!(status_in("connection reset"), None);
    }
}
