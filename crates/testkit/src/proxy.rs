//! A TCP delay proxy: adds a round-trip time to every connection, since kernel netem is not
//! available here.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::background::{Background, bind};

/// Chunks in flight per direction before the reader waits for the writer.
const PIPE_DEPTH: usize = 256;

/// A proxy on 127.0.0.1 that forwards each TCP connection to `upstream`, holding every
/// chunk for RTT/2 in each direction. Chunks are pipelined (a reader never waits for the
/// delay), so bandwidth is kept and only latency is added, as a long link would.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    rtt: Duration,
    _background: Background,
}

impl DelayProxy {
    /// Proxy to `upstream` with round-trip time `rtt`.
    pub fn start(upstream: SocketAddr, rtt: Duration) -> io::Result<Self> {
        Self::start_on(upstream, rtt, 0)
    }

    /// The same, listening on `port` (0 for any free port).
    pub fn start_on(upstream: SocketAddr, rtt: Duration, port: u16) -> io::Result<Self> {
        let listener = bind(port)?;
        let addr = listener.local_addr()?;
        let background = Background::start("testkit-proxy", 2, listener, move |listener, stop| {
            accept_loop(listener, upstream, rtt / 2, stop)
        })?;
        Ok(Self {
            addr,
            upstream,
            rtt,
            _background: background,
        })
    }

    /// The proxy's own address: connect here instead of to the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where connections go.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The added round-trip time.
    pub fn rtt(&self) -> Duration {
        self.rtt
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    one_way: Duration,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                tokio::spawn(async move {
                    // A failed connect closes the client's socket, as a dead upstream would.
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, one_way),
                        pipe(server_read, client_write, one_way),
                    );
                });
            }
        }
    }
}

/// Copy `from` to `to`, each chunk delivered `delay` after it was read.
async fn pipe(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, delay: Duration) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(PIPE_DEPTH);
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return, // dropping tx tells the writer to finish
                Ok(n) => {
                    let chunk = Bytes::copy_from_slice(&buf[..n]);
                    if tx.send((Instant::now() + delay, chunk)).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
