//! A dataset in a bucket: images written by a [`DatasetSpec`] and served by an
//! [`S3Server`] on a real socket, the fixture most end-to-end tests start from.

use std::io;

use loader_storage::{DynStorage, from_url};

use crate::{DatasetItem, DatasetSpec, S3Server};

/// `spec`'s images in the bucket `data` of an S3 server of their own; the files, the
/// server and the store live as long as this does.
#[derive(Debug)]
pub struct Bucket {
    /// The bucket, read through the S3 server.
    pub store: DynStorage,
    /// What was written, in the order written.
    pub items: Vec<DatasetItem>,
    /// The server, for its address, options and counters.
    pub server: S3Server,
    _dir: tempfile::TempDir,
}

impl Bucket {
    /// `spec` written into `s3://data`.
    pub fn new(spec: &DatasetSpec) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let items = spec.write(&dir.path().join("data"))?;
        let server = S3Server::start(dir.path())?;
        let store = from_url("s3://data", server.options()).map_err(io::Error::other)?;
        Ok(Self {
            store,
            items,
            server,
            _dir: dir,
        })
    }
}
