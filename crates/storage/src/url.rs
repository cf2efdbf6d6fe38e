//! `from_url`: one entry point from a dataset URL and options to a configured store.

use std::sync::Arc;
use std::time::Duration;

use ::object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use ::object_store::http::HttpBuilder;
use ::object_store::memory::InMemory;
use ::object_store::prefix::PrefixStore;
use ::object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use url::Url;

use crate::backend::aws_chain::{AwsChain, profile_region};
use crate::backend::object_store::{Flavor, map_error};
use crate::backend::{LocalStore, ObjectStoreAdapter};
use crate::redact::redact;
use crate::write::{DynPut, LocalPut, ObjectStorePut};
use crate::{DEFAULT_MAX_READ_BYTES, DynStorage, Error, ErrorKind, Result};

/// How long object_store may take to connect, and to finish a whole request. Generous,
/// because the per-request [`TimeoutStore`](crate::layer::TimeoutStore) is the real bound.
const CONNECT_TIMEOUT: &str = "5s";
const REQUEST_TIMEOUT: &str = "60s";
/// Idle connections kept per host, and for how long: the in-flight limit may reach
/// thousands at high latency, and without a bound every connection it ever opened stayed
/// open until the store was dropped. A burst above this reconnects.
const POOL_MAX_IDLE: &str = "1024";
const POOL_IDLE_TIMEOUT: &str = "30s";

/// Open the store a URL names.
///
/// - `s3://bucket/prefix`: S3 or an S3-compatible server. Options and `AWS_*` environment
///   variables use object_store's names: `aws_access_key_id`, `aws_secret_access_key`,
///   `aws_session_token`, `aws_region`, `aws_endpoint` (an `http://` endpoint turns on
///   plain HTTP), `aws_virtual_hosted_style_request`, and client options such as `timeout`.
///   Options win over the environment. Without a key (and without `aws_skip_signature`),
///   credentials are found as the AWS CLI and boto3 find them: the environment, the profile
///   (`AWS_PROFILE` or option `aws_profile`; its SSO, assumed roles, `credential_process`
///   and `region`), web identity, ECS and EC2 instance credentials (AWS's `aws-config`).
/// - `http://host/prefix`, `https://...`: a static file server (client options only).
/// - `gs://bucket/prefix`, `az://container/prefix` (cargo features `gcp`, `azure`): with
///   `GOOGLE_*` / `AZURE_*` environment variables and object_store's option names.
/// - `memory://`: an empty in-memory store, for tests.
/// - `file:///dir` or a plain path: [`LocalStore`]; option `allow_external_symlinks`.
///
/// Every store takes `max_read_bytes` (default [`DEFAULT_MAX_READ_BYTES`], 1 GiB): the most
/// one read may return, refused by size before anything is allocated.
///
/// object_store's own retries are switched off: the [`RetryStore`](crate::layer::RetryStore)
/// layer owns retrying, so a dead server fails fast here instead of being retried for
/// minutes underneath it. An unknown option is an error, not silently ignored.
pub fn from_url<K, V>(url: &str, options: impl IntoIterator<Item = (K, V)>) -> Result<DynStorage>
where
    K: AsRef<str>,
    V: Into<String>,
{
    let mut options = lowered(options);
    let max_read_bytes = match options.iter().position(|(k, _)| k == "max_read_bytes") {
        None => DEFAULT_MAX_READ_BYTES,
        Some(at) => {
            let (key, value) = options.remove(at);
            value.parse::<u64>().map_err(|_| {
                config_error(
                    &redact(url),
                    format!("option {key:?} must be a number of bytes, not {value:?}"),
                )
            })?
        }
    };
    let limit = |store: ObjectStoreAdapter| -> DynStorage {
        Arc::new(store.with_max_read_bytes(max_read_bytes))
    };
    let name = redact(url);
    let parsed = match target(url)? {
        Target::Path(path) => return local(&name, &path, &options, max_read_bytes),
        Target::Url(parsed) => parsed,
    };
    match parsed.scheme() {
        "s3" | "s3a" => s3(&name, &parsed, &options).map(limit),
        "http" | "https" => http(&name, &parsed, &options).map(limit),
        "memory" => {
            no_options(&name, &options)?;
            Ok(limit(ObjectStoreAdapter::new(
                Arc::new(InMemory::new()),
                name,
                Flavor::Memory,
            )))
        }
        #[cfg(feature = "gcp")]
        "gs" => cloud::gcs(&name, &parsed, &options).map(limit),
        #[cfg(feature = "azure")]
        "az" | "azure" | "abfs" | "abfss" => cloud::azure(&name, &parsed, &options).map(limit),
        other => Err(Error::new(
            ErrorKind::Unsupported,
            &name,
            "",
            format!(
                "unknown scheme {other:?}; use s3://, http(s)://, file://, memory:// \
                 (gs:// and az:// need the crate features `gcp` / `azure`)"
            ),
        )),
    }
}

/// Open a URL for writing whole objects: a local path or `file://` URL (created if
/// missing), `s3://bucket/prefix`, `memory://`, and `gs://` and `az://` with their
/// features, with the options and credentials [`from_url`] takes. HTTP stores are
/// read-only, and refused.
pub fn put_to_url<K, V>(url: &str, options: impl IntoIterator<Item = (K, V)>) -> Result<DynPut>
where
    K: AsRef<str>,
    V: Into<String>,
{
    let mut options = lowered(options);
    options.retain(|(k, _)| k != "max_read_bytes");
    let name = redact(url);
    let parsed = match target(url)? {
        Target::Path(path) => {
            no_options(&name, &options)?;
            return Ok(Arc::new(LocalPut::new(path)?));
        }
        Target::Url(parsed) => parsed,
    };
    let objects = |store: ObjectStoreAdapter| -> DynPut {
        Arc::new(ObjectStorePut::new(Arc::clone(store.inner()), name.clone()))
    };
    match parsed.scheme() {
        "s3" | "s3a" => s3(&name, &parsed, &options).map(objects),
        "memory" => {
            no_options(&name, &options)?;
            Ok(Arc::new(ObjectStorePut::new(
                Arc::new(InMemory::new()),
                name.clone(),
            )))
        }
        #[cfg(feature = "gcp")]
        "gs" => cloud::gcs(&name, &parsed, &options).map(objects),
        #[cfg(feature = "azure")]
        "az" | "azure" | "abfs" | "abfss" => cloud::azure(&name, &parsed, &options).map(objects),
        "http" | "https" => Err(Error::new(
            ErrorKind::Unsupported,
            &name,
            "",
            "an HTTP store is read-only: write to s3:// (or gs://, az://) or a local directory",
        )),
        other => Err(Error::new(
            ErrorKind::Unsupported,
            &name,
            "",
            format!("unknown scheme {other:?} to write to; use s3://, file:// or a path"),
        )),
    }
}

/// Options as the stores take them: keys in lower case.
fn lowered<K: AsRef<str>, V: Into<String>>(
    options: impl IntoIterator<Item = (K, V)>,
) -> Vec<(String, String)> {
    options
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.into()))
        .collect()
}

/// What a URL names: a local directory (a plain path, or a `file://` URL), or a store.
enum Target {
    Path(String),
    Url(Url),
}

fn target(url: &str) -> Result<Target> {
    match Url::parse(url) {
        Ok(parsed) if parsed.scheme() == "file" => parsed
            .to_file_path()
            .map(|path| Target::Path(path.to_string_lossy().into_owned()))
            .map_err(|()| {
                config_error(
                    &redact(url),
                    "a file URL needs an absolute local path".into(),
                )
            }),
        Ok(parsed) => Ok(Target::Url(parsed)),
        // No scheme (or a Windows drive letter): a plain path.
        Err(url::ParseError::RelativeUrlWithoutBase) => Ok(Target::Path(url.to_owned())),
        Err(e) => {
            Err(Error::new(ErrorKind::Config, redact(url), "", "not a valid URL").with_source(e))
        }
    }
}

fn config_error(name: &str, message: String) -> Error {
    Error::new(ErrorKind::Config, name, "", message)
}

fn no_options(name: &str, options: &[(String, String)]) -> Result<()> {
    match options.first() {
        None => Ok(()),
        Some((key, _)) => Err(config_error(
            name,
            format!("unknown option {key:?} for this store"),
        )),
    }
}

fn local(
    name: &str,
    path: &str,
    options: &[(String, String)],
    max_read_bytes: u64,
) -> Result<DynStorage> {
    let mut store = LocalStore::new(path)?.max_read_bytes(max_read_bytes);
    for (key, value) in options {
        match key.as_str() {
            "allow_external_symlinks" => {
                let allow = value.parse::<bool>().map_err(|_| {
                    config_error(
                        name,
                        format!("option {key:?} must be true or false, not {value:?}"),
                    )
                })?;
                store = store.allow_external_symlinks(allow);
            }
            _ => {
                return Err(config_error(
                    name,
                    format!("unknown option {key:?}; local stores take `allow_external_symlinks`"),
                ));
            }
        }
    }
    Ok(Arc::new(store))
}

/// object_store's retry loop, off: zero retries.
fn no_retries() -> RetryConfig {
    RetryConfig {
        max_retries: 0,
        retry_timeout: Duration::ZERO,
        ..RetryConfig::default()
    }
}

/// The bucket's sub-path as a prefix store, so keys stay relative to the URL.
fn with_prefix(store: Arc<dyn ObjectStore>, url: &Url) -> Arc<dyn ObjectStore> {
    let prefix = url.path().trim_matches('/');
    if prefix.is_empty() {
        store
    } else {
        Arc::new(PrefixStore::new(store, prefix))
    }
}

fn s3(name: &str, url: &Url, options: &[(String, String)]) -> Result<ObjectStoreAdapter> {
    let bucket = url.host_str().unwrap_or_default();
    if bucket.is_empty() {
        return Err(config_error(
            name,
            "the URL has no bucket; write s3://bucket/prefix".into(),
        ));
    }
    let client = |k: ClientConfigKey| AmazonS3ConfigKey::Client(k);
    let mut builder = AmazonS3Builder::new()
        .with_config(client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT)
        .with_config(client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
        .with_config(client(ClientConfigKey::PoolMaxIdlePerHost), POOL_MAX_IDLE)
        .with_config(client(ClientConfigKey::PoolIdleTimeout), POOL_IDLE_TIMEOUT);
    // The environment first (AWS_* variables meant for other tools are skipped), then the
    // caller's options, which must all be known.
    let env = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .filter_map(|(k, v)| {
            k.to_ascii_lowercase()
                .parse::<AmazonS3ConfigKey>()
                .ok()
                .map(|k| (k, v))
        });
    let mut settings: Vec<(AmazonS3ConfigKey, String)> = env.collect();
    let mut profile = None;
    for (key, value) in options {
        if key == "aws_profile" {
            profile = Some(value.clone());
            continue;
        }
        let config_key = key.parse::<AmazonS3ConfigKey>().map_err(|_| {
            config_error(
                name,
                format!("unknown S3 option {key:?}; see object_store's AmazonS3ConfigKey"),
            )
        })?;
        settings.push((config_key, value.clone()));
    }
    // Keys given, or no signature: object_store's own. Otherwise the AWS SDK's chain, which
    // reads what object_store does not (profiles, SSO, credential_process) as well.
    let given = settings.iter().any(|(k, v)| {
        matches!(k, AmazonS3ConfigKey::AccessKeyId)
            || (matches!(k, AmazonS3ConfigKey::SkipSignature) && v.eq_ignore_ascii_case("true"))
    });
    if !given {
        let has_region = settings.iter().any(|(k, _)| {
            matches!(
                k,
                AmazonS3ConfigKey::Region | AmazonS3ConfigKey::DefaultRegion
            )
        });
        if !has_region && let Some(region) = profile_region(profile.as_deref()) {
            builder = builder.with_region(region);
        }
        builder = builder.with_credentials(Arc::new(AwsChain::new(profile)));
    } else if profile.is_some() {
        return Err(config_error(
            name,
            "aws_profile with aws_access_key_id or aws_skip_signature: give one way of signing"
                .into(),
        ));
    }
    for (key, value) in settings {
        if matches!(key, AmazonS3ConfigKey::Endpoint) {
            check_endpoint(name, &value)?;
        }
        if matches!(key, AmazonS3ConfigKey::Endpoint) && value.starts_with("http://") {
            builder = builder.with_config(client(ClientConfigKey::AllowHttp), "true");
        }
        builder = builder.with_config(key, value);
    }
    let store = builder
        .with_bucket_name(bucket)
        .with_retry(no_retries())
        .build()
        .map_err(|e| map_error(name, "", e).context("cannot configure S3"))?;
    let store = with_prefix(Arc::new(store), url);
    Ok(ObjectStoreAdapter::new(store, name, Flavor::S3))
}

/// An endpoint must be an http(s) URL with a host; anything else would only fail at the
/// first request, far from the typo.
fn check_endpoint(name: &str, endpoint: &str) -> Result<()> {
    let ok = Url::parse(endpoint)
        .ok()
        .is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
    if ok {
        Ok(())
    } else {
        Err(config_error(
            name,
            format!(
                "the endpoint {:?} is not an http(s) URL with a host; write e.g. \
                 https://s3.example.com or http://127.0.0.1:9000",
                redact(endpoint)
            ),
        ))
    }
}

fn http(name: &str, url: &Url, options: &[(String, String)]) -> Result<ObjectStoreAdapter> {
    let mut builder = HttpBuilder::new()
        .with_url(url.as_str())
        .with_config(ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT)
        .with_config(ClientConfigKey::Timeout, REQUEST_TIMEOUT)
        .with_config(ClientConfigKey::PoolMaxIdlePerHost, POOL_MAX_IDLE)
        .with_config(ClientConfigKey::PoolIdleTimeout, POOL_IDLE_TIMEOUT)
        .with_config(
            ClientConfigKey::AllowHttp,
            (url.scheme() == "http").to_string(),
        )
        .with_retry(no_retries());
    for (key, value) in options {
        let config_key = key.parse::<ClientConfigKey>().map_err(|_| {
            config_error(
                name,
                format!("unknown HTTP option {key:?}; see object_store's ClientConfigKey"),
            )
        })?;
        builder = builder.with_config(config_key, value);
    }
    let store = builder
        .build()
        .map_err(|e| map_error(name, "", e).context("cannot configure HTTP"))?;
    Ok(ObjectStoreAdapter::new(Arc::new(store), name, Flavor::Http))
}

#[cfg(any(feature = "gcp", feature = "azure"))]
mod cloud {
    //! GCS and Azure: object_store's builders from the environment, then options.
    use super::*;

    macro_rules! cloud_store {
        ($fn:ident, $builder:ty, $key:ty, $flavor:expr, $what:literal) => {
            pub(super) fn $fn(
                name: &str,
                url: &Url,
                options: &[(String, String)],
            ) -> Result<ObjectStoreAdapter> {
                let mut builder = <$builder>::from_env()
                    .with_url(url.as_str())
                    .with_retry(no_retries());
                for (key, value) in options {
                    let config_key = key.parse::<$key>().map_err(|_| {
                        config_error(
                            name,
                            format!(concat!("unknown ", $what, " option {:?}"), key),
                        )
                    })?;
                    builder = builder.with_config(config_key, value);
                }
                let store = builder.build().map_err(|e| {
                    map_error(name, "", e).context(concat!("cannot configure ", $what))
                })?;
                let store = with_prefix(Arc::new(store), url);
                Ok(ObjectStoreAdapter::new(store, name, $flavor))
            }
        };
    }

    #[cfg(feature = "gcp")]
    cloud_store!(
        gcs,
        ::object_store::gcp::GoogleCloudStorageBuilder,
        ::object_store::gcp::GoogleConfigKey,
        Flavor::Gcs,
        "GCS"
    );
    #[cfg(feature = "azure")]
    cloud_store!(
        azure,
        ::object_store::azure::MicrosoftAzureBuilder,
        ::object_store::azure::AzureConfigKey,
        Flavor::Azure,
        "Azure"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_scheme_says_what_works() {
        let err = from_url("ftp://host/x", Vec::<(String, String)>::new()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.to_string().contains("s3://"), "{err}");
    }

    #[test]
    fn s3_needs_a_bucket_and_known_options() {
        let err = from_url("s3:///prefix", [("aws_region", "us-east-1")]).unwrap_err();
        assert!(err.to_string().contains("no bucket"), "{err}");
        let err = from_url("s3://bucket", [("aws_regoin", "us-east-1")]).unwrap_err();
        assert!(err.to_string().contains("aws_regoin"), "{err}");
    }

    #[test]
    fn a_bad_endpoint_says_what_to_write() {
        for endpoint in ["localhost:9000", "127.0.0.1:9000", "ftp://host", "http://"] {
            let err = from_url("s3://bucket", [("aws_endpoint", endpoint)]).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("http(s) URL") && text.contains("s3://bucket"),
                "{endpoint}: {text}"
            );
        }
        let err = from_url("http://", Vec::<(String, String)>::new()).unwrap_err();
        assert!(!err.to_string().is_empty());
    }

    #[test]
    fn names_never_carry_credentials() {
        assert_eq!(
            redact("http://user:pass@host/p?X-Amz-Signature=abc"),
            "http://host/p"
        );
        let store = from_url(
            "s3://bucket/train",
            [
                ("aws_access_key_id", "AKIDEXAMPLE"),
                ("aws_secret_access_key", "wJalrXUtnFEMIsecretKEY"),
                ("aws_endpoint", "http://127.0.0.1:9"),
            ],
        )
        .unwrap();
        let shown = format!("{store:?} {}", store.name());
        assert!(!shown.contains("wJalrXUtnFEMIsecretKEY"), "{shown}");
        assert!(!shown.contains("AKIDEXAMPLE"), "{shown}");
        assert!(shown.contains("s3://bucket/train"), "{shown}");
    }

    // Defect 6: a URL that did not parse was echoed whole, credentials included.
    #[test]
    fn urls_that_do_not_parse_never_show_their_credentials() {
        for (url, secrets) in [
            (
                "s3://AKIDEXAMPLE:wJalr/XUtnFEMI@bucket/p",
                &["AKIDEXAMPLE", "wJalr", "XUtnFEMI"][..],
            ),
            (
                "s3://AKIDEXAMPLE:wJalr@bucket:notaport/p",
                &["AKIDEXAMPLE", "wJalr"],
            ),
            (
                "http://user:hunter2@[::1/p?token=sekrit",
                &["hunter2", "sekrit"],
            ),
            ("https://host:99999/p?X-Amz-Signature=abcdef", &["abcdef"]),
            ("s3://bu cket/p?sig=topsecret#frag", &["topsecret"]),
        ] {
            let err = match from_url(url, Vec::<(String, String)>::new()) {
                Err(e) => e,
                Ok(store) => {
                    let shown = format!("{store:?} {}", store.name());
                    for secret in secrets {
                        assert!(!shown.contains(secret), "{url}: {shown}");
                    }
                    continue;
                }
            };
            let shown = format!("{err} {err:?} {}", err.backend());
            for secret in secrets {
                assert!(!shown.contains(secret), "{url}: {secret} shown in {shown}");
            }
        }
        assert_eq!(redact("s3://a:b/c@bucket/p?x=1"), "s3://bucket/p");
        assert_eq!(redact("s3://KEY:se?cr#et@bu cket/p"), "s3://bu cket/p");
        assert_eq!(redact("not a url with spaces"), "not a url with spaces");
    }

    #[test]
    fn plain_paths_and_file_urls_are_local() {
        let dir = tempfile::tempdir().unwrap();
        let by_path = from_url(
            &dir.path().to_string_lossy(),
            Vec::<(String, String)>::new(),
        )
        .unwrap();
        let by_url = from_url(
            &format!("file://{}", dir.path().display()),
            [("allow_external_symlinks", "true")],
        )
        .unwrap();
        assert!(by_path.name().starts_with("file://"));
        assert_eq!(by_path.name(), by_url.name());
        let err = from_url(
            &dir.path().to_string_lossy(),
            [("allow_external_symlinks", "yes")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("true or false"), "{err}");
    }
}
