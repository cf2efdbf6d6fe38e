//! `opendal` adapter (cargo feature `opendal`): its s3, http and fs services.

use std::ops::Range;

use ::opendal::{ErrorKind as OdKind, Operator, services};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use url::Url;

use crate::{
    DEFAULT_MAX_READ_BYTES, Error, ErrorKind, GetOptions, GetResult, ObjectMeta, Result, Storage,
    check_key, check_prefix, too_large,
};

/// An opendal [`Operator`] as a [`Storage`].
///
/// opendal's own retry, timeout and concurrency layers are not added: this crate's layers do
/// that job, the same way for every backend. Its http service cannot list.
pub struct OpendalStore {
    op: Operator,
    name: String,
    max_read_bytes: u64,
}

impl std::fmt::Debug for OpendalStore {
    // Not derived: an operator's configuration may hold credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpendalStore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl OpendalStore {
    /// Wrap an operator you built, naming it `name` in errors (no credentials in it).
    pub fn new(op: Operator, name: impl Into<String>) -> Self {
        // With opendal's default features off, its HTTP transport must be installed once.
        ::opendal::install_default();
        Self {
            op,
            name: name.into(),
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        }
    }

    /// The most bytes one whole-object read may return; a larger object is refused once
    /// that many bytes have arrived, so memory stays bounded whatever the server says.
    /// Default [`DEFAULT_MAX_READ_BYTES`].
    pub fn with_max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
    }

    /// Build from a URL: `s3://bucket/prefix` (options `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_session_token`, `aws_region`, `aws_endpoint`),
    /// `http(s)://host/prefix`, or `file:///dir`.
    pub fn from_url<K, V>(url: &str, options: impl IntoIterator<Item = (K, V)>) -> Result<Self>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        ::opendal::install_default();
        let config = |msg: String| Error::new(ErrorKind::Other, url_name(url), "", msg);
        let parsed =
            Url::parse(url).map_err(|e| config("not a valid URL".into()).with_source(e))?;
        let name = url_name(url);
        let root = format!("/{}", parsed.path().trim_matches('/'));
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.as_ref().to_owned()))
            .collect();
        let built = match parsed.scheme() {
            "s3" => {
                let bucket = parsed.host_str().unwrap_or_default();
                if bucket.is_empty() {
                    return Err(config(
                        "the URL has no bucket; write s3://bucket/prefix".into(),
                    ));
                }
                let mut b = services::S3::default()
                    .bucket(bucket)
                    .root(&root)
                    .region("us-east-1");
                for (key, value) in &options {
                    b = match key.as_str() {
                        "aws_access_key_id" | "access_key_id" => b.access_key_id(value),
                        "aws_secret_access_key" | "secret_access_key" => b.secret_access_key(value),
                        "aws_session_token" | "session_token" => b.session_token(value),
                        "aws_region" | "region" => b.region(value),
                        "aws_endpoint" | "endpoint" => b.endpoint(value),
                        _ => return Err(config(format!("unknown S3 option {key:?}"))),
                    };
                }
                Operator::new(b)
            }
            "http" | "https" => {
                if let Some((key, _)) = options.first() {
                    return Err(config(format!("unknown HTTP option {key:?}")));
                }
                let endpoint = format!("{}://{}", parsed.scheme(), host_port(&parsed));
                Operator::new(services::Http::default().endpoint(&endpoint).root(&root))
            }
            "file" => {
                if let Some((key, _)) = options.first() {
                    return Err(config(format!("unknown option {key:?}")));
                }
                Operator::new(services::Fs::default().root(parsed.path()))
            }
            other => {
                return Err(config(format!(
                    "opendal adapter: unsupported scheme {other:?}"
                )));
            }
        };
        let op = built.map_err(|e| map_error(&name, "", e))?;
        Ok(Self::new(op, name))
    }

    /// The wrapped operator.
    pub fn operator(&self) -> &Operator {
        &self.op
    }
}

fn host_port(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => String::new(),
    }
}

/// The store's name: the URL without credentials, marked as going through opendal.
fn url_name(url: &str) -> String {
    format!("opendal+{}", crate::redact(url))
}

/// opendal's errors for a range beyond the object's end: RangeNotSatisfied from fs, and a
/// short read ("reader got too little data") from HTTP services.
fn runs_past_end(err: &::opendal::Error) -> bool {
    err.kind() == OdKind::RangeNotSatisfied
        || (err.kind() == OdKind::Unexpected && err.to_string().contains("too little data"))
}

/// An object's version: its ETag without quotes or weak mark (as the object_store backend
/// keeps it), else the service's version id.
fn version_of(meta: &::opendal::Metadata) -> Option<String> {
    meta.etag()
        .map(|tag| tag.trim_start_matches("W/").trim_matches('"').to_owned())
        .or_else(|| meta.version().map(str::to_owned))
}

fn map_error(backend: &str, key: &str, err: ::opendal::Error) -> Error {
    let kind = match err.kind() {
        OdKind::NotFound | OdKind::IsADirectory | OdKind::NotADirectory => ErrorKind::NotFound,
        OdKind::PermissionDenied => ErrorKind::PermissionDenied,
        OdKind::Unsupported => ErrorKind::Unsupported,
        OdKind::RateLimited => ErrorKind::Throttled,
        OdKind::ConfigInvalid => ErrorKind::Config,
        _ if err.is_temporary() => ErrorKind::Transient,
        _ => ErrorKind::Other,
    };
    // opendal quotes the request's URL, credentials and all, in its context.
    Error::new(kind, backend, key, "").with_source(crate::redact::Redacted::of(&err))
}

impl OpendalStore {
    /// The whole of `key`, within the read limit.
    async fn read_whole(&self, key: &str) -> Result<Bytes> {
        check_key(&self.name, key)?;
        // Streamed and bounded rather than `read`, which collects whatever comes.
        let stream = self
            .op
            .reader(key)
            .await
            .map_err(|e| map_error(&self.name, key, e))?
            .into_bytes_stream(..)
            .await
            .map_err(|e| map_error(&self.name, key, e))?;
        let mut stream = std::pin::pin!(stream);
        let max = self.max_read_bytes;
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut total = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| match e.downcast::<::opendal::Error>() {
                Ok(e) => map_error(&self.name, key, e),
                Err(e) => Error::new(ErrorKind::Transient, &self.name, key, "")
                    .with_source(crate::redact::Redacted::of(&e)),
            })?;
            total += chunk.len() as u64;
            if total > max {
                return Err(too_large(&self.name, key, total, max));
            }
            chunks.push(chunk);
        }
        Ok(match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.swap_remove(0),
            _ => chunks.concat().into(),
        })
    }

    /// A range of `key`, cut at its end.
    async fn read_range_unchecked(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        check_key(&self.name, key)?;
        if range.start > range.end {
            return Err(Error::new(
                ErrorKind::Other,
                &self.name,
                key,
                format!("invalid byte range {range:?}"),
            ));
        }
        if range.start == range.end {
            return Ok(Bytes::new());
        }
        match self.op.read_with(key).range(range.clone()).await {
            Ok(buf) => Ok(buf.to_bytes()),
            // opendal insists on exact ranges, while HTTP (and this trait) cut a range at
            // the object's end: look the size up and read what exists.
            Err(e) if runs_past_end(&e) => {
                let size = self
                    .op
                    .stat(key)
                    .await
                    .map_err(|e| map_error(&self.name, key, e))?;
                let end = range.end.min(size.content_length());
                if range.start >= end {
                    return Ok(Bytes::new());
                }
                let buf = self
                    .op
                    .read_with(key)
                    .range(range.start..end)
                    .await
                    .map_err(|e| map_error(&self.name, key, e))?;
                Ok(buf.to_bytes())
            }
            Err(e) => Err(map_error(&self.name, key, e)),
        }
    }
}

#[async_trait]
impl Storage for OpendalStore {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get_opts(&self, key: &str, options: GetOptions) -> Result<GetResult> {
        let bytes = match (options.range, options.if_match) {
            // opendal cannot check a version: the read is unchecked (see GetOptions::if_match).
            (Some(range), _) => self.read_range_unchecked(key, range).await?,
            (None, None) => self.read_whole(key).await?,
            (None, Some(_)) => return Err(super::whole_if_match(&self.name, key)),
        };
        Ok(GetResult::new(bytes))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        check_key(&self.name, key)?;
        let meta = self
            .op
            .stat(key)
            .await
            .map_err(|e| map_error(&self.name, key, e))?;
        if meta.is_dir() {
            return Err(Error::new(
                ErrorKind::NotFound,
                &self.name,
                key,
                "a directory, not an object",
            ));
        }
        Ok(ObjectMeta {
            key: key.to_owned(),
            size: meta.content_length(),
            version: version_of(&meta),
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxStream<'a, Result<ObjectMeta>> {
        let dir = match check_prefix(&self.name, prefix) {
            Ok("") => String::new(),
            Ok(p) => format!("{p}/"),
            Err(e) => return futures::stream::once(async { Err(e) }).boxed(),
        };
        let name = &self.name;
        let list_error = move |e: ::opendal::Error| {
            let err = map_error(name, prefix, e);
            if err.kind() == ErrorKind::Unsupported {
                err.context("this store cannot list; describe the dataset with a manifest instead")
            } else {
                err
            }
        };
        futures::stream::once(async move {
            self.op
                .lister_with(&dir)
                .recursive(true)
                .await
                .map_err(list_error)
        })
        .map_ok(move |lister| lister.map_err(list_error))
        .try_flatten()
        .try_filter_map(|entry| async move {
            let meta = entry.metadata();
            Ok((!meta.is_dir()).then(|| ObjectMeta {
                key: entry.path().to_owned(),
                size: meta.content_length(),
                version: version_of(meta),
            }))
        })
        .boxed()
    }
}
