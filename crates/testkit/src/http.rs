//! An in-process static file server with Range support (tower-http's `ServeDir`).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hyper_util::service::TowerToHyperService;
use tower_http::services::ServeDir;

use crate::background::{Background, bind, serve_http};

/// An HTTP server on 127.0.0.1 serving a directory's files, with `Range` requests (206).
/// Like most static servers it does not answer WebDAV `PROPFIND`, so it cannot list.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    root: PathBuf,
    _background: Background,
}

impl HttpServer {
    /// Serve `root` on a free port.
    pub fn start(root: impl AsRef<Path>) -> io::Result<Self> {
        Self::start_on(root, 0)
    }

    /// Serve `root` on `port` (0 for any free port).
    pub fn start_on(root: impl AsRef<Path>, port: u16) -> io::Result<Self> {
        let root = root.as_ref().to_path_buf();
        let service = TowerToHyperService::new(ServeDir::new(&root));
        let listener = bind(port)?;
        let addr = listener.local_addr()?;
        let background = Background::start("testkit-http", 2, listener, move |listener, stop| {
            serve_http(listener, service, stop)
        })?;
        Ok(Self {
            addr,
            root,
            _background: background,
        })
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The served directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}
