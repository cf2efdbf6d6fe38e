//! The benchmark's rows: local disk, then S3 at each round-trip time (the in-process
//! server behind a delay proxy, or an external endpoint holding one dataset).

use std::path::Path;
use std::time::Duration;

use loader_core::{DynStorage, from_url};
use loader_testkit::{DelayProxy, S3Server};

use super::Args;
use crate::Result;
use crate::options::parse_store_options;

/// Opens a row's store for a bucket (a format's data).
pub(super) type Open = Box<dyn Fn(&str) -> Result<DynStorage>>;

/// One row of the matrix.
pub(super) struct Row {
    pub(super) name: String,
    /// The round-trip time added; `None` for local disk.
    pub(super) rtt: Option<u64>,
    pub(super) open: Open,
    /// Kept alive while the row is measured.
    _proxy: Option<DelayProxy>,
}

/// The rows `args` ask for, over the data under `root` (served by `server`, when in-process).
pub(super) fn rows(args: &Args, root: &Path, server: Option<&S3Server>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if !args.no_local && args.endpoint.is_none() {
        let root = root.to_path_buf();
        rows.push(Row {
            name: "local disk".into(),
            rtt: None,
            open: Box::new(move |bucket: &str| {
                Ok(from_url(
                    &root.join(bucket).to_string_lossy(),
                    Vec::<(String, String)>::new(),
                )?)
            }),
            _proxy: None,
        });
    }
    for &rtt in &args.rtts {
        let (open, proxy) = match (server, &args.endpoint) {
            (Some(server), _) => served(server, rtt)?,
            (None, Some(endpoint)) => {
                let url = format!("s3://{}", args.bucket.as_deref().unwrap_or_default());
                let mut options = parse_store_options(&args.options)?;
                options.push(("aws_endpoint".into(), endpoint.clone()));
                // An external endpoint holds one dataset, at --bucket.
                let open: Open = Box::new(move |_: &str| Ok(from_url(&url, options.clone())?));
                (open, None)
            }
            (None, None) => return Err("no store: the in-process server or an endpoint".into()),
        };
        rows.push(Row {
            name: format!("S3, RTT {rtt} ms"),
            rtt: Some(rtt),
            open,
            _proxy: proxy,
        });
    }
    Ok(rows)
}

/// The in-process server's buckets behind a proxy adding `rtt` ms (none at 0).
fn served(server: &S3Server, rtt: u64) -> Result<(Open, Option<DelayProxy>)> {
    let proxy = if rtt > 0 {
        Some(DelayProxy::start(
            server.addr(),
            Duration::from_millis(rtt),
        )?)
    } else {
        None
    };
    let endpoint = proxy
        .as_ref()
        .map_or_else(|| server.endpoint(), DelayProxy::url);
    let options = server.options_for(&endpoint);
    let open: Open =
        Box::new(move |bucket: &str| Ok(from_url(&format!("s3://{bucket}"), options.clone())?));
    Ok((open, proxy))
}
