//! An in-process S3 server: s3s over s3s-fs (with a cheaper whole-object GET), with real
//! SigV4 checks.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rand::distr::{Alphanumeric, SampleString};
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

use crate::background::{Background, bind, serve_http};
use crate::s3_dir::DirStore;

/// An S3 server on 127.0.0.1 serving a directory: each top-level folder is a bucket.
///
/// Its credentials are random per server, made for this process only; `Debug` hides the
/// secret.
pub struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    access_key: String,
    secret_key: String,
    read_only: bool,
    background: Option<Background>,
}

impl fmt::Debug for S3Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint())
            .field("root", &self.root)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

impl S3Server {
    /// Serve `root` on a free port.
    pub fn start(root: impl AsRef<Path>) -> io::Result<Self> {
        Self::start_on(root, 0)
    }

    /// Serve `root` on `port` (0 for any free port), writable: tests may upload.
    pub fn start_on(root: impl AsRef<Path>, port: u16) -> io::Result<Self> {
        Self::start_with(root, port, false)
    }

    /// Serve `root` on `port` refusing every write (put, copy, delete, bucket creation and
    /// deletion) with `AccessDenied`: what `loader serve` runs over a user's folder.
    pub fn start_read_only(root: impl AsRef<Path>, port: u16) -> io::Result<Self> {
        Self::start_with(root, port, true)
    }

    fn start_with(root: impl AsRef<Path>, port: u16, read_only: bool) -> io::Result<Self> {
        // Every request in flight holds a socket and a file here, and tests and benches
        // keep thousands in flight; at the old limit the server still answers, with 503s.
        loader_storage::raise_open_files_limit();
        let mut rng = rand::rng();
        let access_key = format!(
            "LT{}",
            Alphanumeric.sample_string(&mut rng, 18).to_uppercase()
        );
        let secret_key = Alphanumeric.sample_string(&mut rng, 40);
        let root = root.as_ref().to_path_buf();
        let (addr, background) = serve(&root, port, &access_key, &secret_key, read_only)?;
        Ok(Self {
            addr,
            root,
            access_key,
            secret_key,
            read_only,
            background: Some(background),
        })
    }

    /// Stop serving, as a crashed server would: open connections are cut and new ones
    /// refused. The port and credentials are kept for [`Self::restart`].
    pub fn stop(&mut self) {
        self.background = None;
    }

    /// Serve again on the same port with the same credentials, after [`Self::stop`]
    /// (a no-op while running).
    pub fn restart(&mut self) -> io::Result<()> {
        if self.background.is_none() {
            let (_, background) = serve(
                &self.root,
                self.addr.port(),
                &self.access_key,
                &self.secret_key,
                self.read_only,
            )?;
            self.background = Some(background);
        }
        Ok(())
    }

    /// Whether it is serving (not [stopped](Self::stop)).
    pub fn is_running(&self) -> bool {
        self.background.is_some()
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The served directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The access key id clients must sign with.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret key clients must sign with.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Client options (object_store's names) to reach this server at `endpoint`, which is
    /// [`Self::endpoint`] or a proxy in front of it.
    pub fn options_for(&self, endpoint: &str) -> Vec<(String, String)> {
        vec![
            ("aws_access_key_id".into(), self.access_key.clone()),
            ("aws_secret_access_key".into(), self.secret_key.clone()),
            ("aws_region".into(), "us-east-1".into()),
            ("aws_endpoint".into(), endpoint.to_owned()),
            ("aws_allow_http".into(), "true".into()),
            ("aws_virtual_hosted_style_request".into(), "false".into()),
        ]
    }

    /// Client options to reach this server directly.
    pub fn options(&self) -> Vec<(String, String)> {
        self.options_for(&self.endpoint())
    }
}

fn serve(
    root: &Path,
    port: u16,
    access_key: &str,
    secret_key: &str,
    read_only: bool,
) -> io::Result<(SocketAddr, Background)> {
    let mut builder = S3ServiceBuilder::new(DirStore::new(root, read_only)?);
    builder.set_auth(SimpleAuth::from_single(
        access_key.to_owned(),
        secret_key.to_owned(),
    ));
    let service = builder.build();
    let listener = bind(port)?;
    let addr = listener.local_addr()?;
    let background = Background::start("testkit-s3", 2, listener, move |listener, stop| {
        serve_http(listener, service, stop)
    })?;
    Ok((addr, background))
}
