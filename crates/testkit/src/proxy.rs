//! A TCP delay proxy: adds a round-trip time to every connection, since kernel netem is not
//! available here, and can break responses the way a flaky network or server does.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::background::{Background, bind};

/// Chunks in flight per direction before the reader waits for the writer.
const PIPE_DEPTH: usize = 256;

/// Faults the proxy injects into responses to GET requests, each decided per request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProxyFaults {
    /// Share of GETs whose response is cut mid-way: part of it is sent, then the
    /// connection closes, as when a server or load balancer dies mid-transfer.
    pub cut_rate: f64,
    /// Share of GETs whose response never comes; the connection stays open until the
    /// client gives up and closes it.
    pub stall_rate: f64,
    /// Seed of the decisions, so a failing run can be replayed (up to request order).
    pub seed: u64,
}

/// What the proxy has seen and done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyStats {
    /// GET requests forwarded.
    pub gets: u64,
    /// Responses cut mid-way.
    pub cut: u64,
    /// Responses held back.
    pub stalled: u64,
}

#[derive(Debug, Default)]
struct Counters {
    gets: AtomicU64,
    cut: AtomicU64,
    stalled: AtomicU64,
}

/// A proxy on 127.0.0.1 that forwards each TCP connection to `upstream`, holding every
/// chunk for RTT/2 in each direction. Chunks are pipelined (a reader never waits for the
/// delay), so bandwidth is kept and only latency is added, as a long link would. With
/// [`ProxyFaults`] it also cuts or stalls a share of the responses.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    rtt: Duration,
    counters: Arc<Counters>,
    _background: Background,
}

impl DelayProxy {
    /// Proxy to `upstream` with round-trip time `rtt`.
    pub fn start(upstream: SocketAddr, rtt: Duration) -> io::Result<Self> {
        Self::start_on(upstream, rtt, 0)
    }

    /// The same, listening on `port` (0 for any free port).
    pub fn start_on(upstream: SocketAddr, rtt: Duration, port: u16) -> io::Result<Self> {
        Self::with_faults(upstream, rtt, port, ProxyFaults::default())
    }

    /// Proxy to `upstream` with round-trip time `rtt` on `port` (0 for any), injecting
    /// `faults`.
    pub fn with_faults(
        upstream: SocketAddr,
        rtt: Duration,
        port: u16,
        faults: ProxyFaults,
    ) -> io::Result<Self> {
        let listener = bind(port)?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let dice = Arc::new(Dice {
            faults,
            rng: Mutex::new(StdRng::seed_from_u64(faults.seed)),
            counters: Arc::clone(&counters),
        });
        let background = Background::start("testkit-proxy", 2, listener, move |listener, stop| {
            accept_loop(listener, upstream, rtt / 2, dice, stop)
        })?;
        Ok(Self {
            addr,
            upstream,
            rtt,
            counters,
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

    /// Requests seen and faults injected so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            gets: self.counters.gets.load(Ordering::Relaxed),
            cut: self.counters.cut.load(Ordering::Relaxed),
            stalled: self.counters.stalled.load(Ordering::Relaxed),
        }
    }
}

/// Decides the fate of each GET.
#[derive(Debug)]
struct Dice {
    faults: ProxyFaults,
    rng: Mutex<StdRng>,
    counters: Arc<Counters>,
}

const FATE_NONE: u8 = 0;
const FATE_CUT: u8 = 1;
const FATE_STALL: u8 = 2;

impl Dice {
    fn roll(&self) -> u8 {
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let ProxyFaults {
            cut_rate,
            stall_rate,
            ..
        } = self.faults;
        if cut_rate <= 0.0 && stall_rate <= 0.0 {
            return FATE_NONE;
        }
        let x: f64 = match self.rng.lock() {
            Ok(mut rng) => rng.random(),
            Err(poisoned) => poisoned.into_inner().random(),
        };
        if x < cut_rate {
            FATE_CUT
        } else if x < cut_rate + stall_rate {
            FATE_STALL
        } else {
            FATE_NONE
        }
    }
}

/// One proxied connection's shared state. HTTP/1.1 clients send a request only after the
/// previous response, so a fate decided when a GET passes upstream belongs to the next
/// response that comes down.
#[derive(Debug, Default)]
struct Connection {
    fate: AtomicU8,
    /// Closes the whole connection at once.
    cut: Notify,
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    one_way: Duration,
    dice: Arc<Dice>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let dice = Arc::clone(&dice);
                tokio::spawn(async move {
                    // A failed connect closes the client's socket, as a dead upstream would.
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let conn = Arc::new(Connection::default());
                    let (client_gone, client_gone_rx) = watch::channel(false);
                    let up = pipe(client_read, server_write, one_way, |chunk: &[u8]| {
                        if chunk.starts_with(b"GET ") {
                            conn.fate.store(dice.roll(), Ordering::Relaxed);
                        }
                    });
                    let up = async {
                        up.await;
                        let _ = client_gone.send(true);
                    };
                    let down = deliver_down(
                        server_read,
                        client_write,
                        one_way,
                        &conn,
                        &dice.counters,
                        client_gone_rx,
                    );
                    // Dropping both halves of both sockets is what closes the connection.
                    tokio::select! {
                        _ = async { tokio::join!(up, down) } => {}
                        _ = conn.cut.notified() => {}
                    }
                });
            }
        }
    }
}

/// Server to client, applying each response's fate.
async fn deliver_down(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    delay: Duration,
    conn: &Connection,
    counters: &Counters,
    mut client_gone: watch::Receiver<bool>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(PIPE_DEPTH);
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            match conn.fate.swap(FATE_NONE, Ordering::Relaxed) {
                FATE_CUT => {
                    counters.cut.fetch_add(1, Ordering::Relaxed);
                    let _ = to.write_all(&chunk[..chunk.len() / 2]).await;
                    let _ = to.flush().await;
                    conn.cut.notify_one();
                    return;
                }
                FATE_STALL => {
                    counters.stalled.fetch_add(1, Ordering::Relaxed);
                    let _ = client_gone.wait_for(|gone| *gone).await;
                    conn.cut.notify_one();
                    return;
                }
                _ => {}
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read_chunks(from, tx, delay, |_: &[u8]| {}), writer);
}

/// Copy `from` to `to`, each chunk delivered `delay` after it was read; `seen` looks at
/// every chunk as it is read.
async fn pipe(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    delay: Duration,
    seen: impl FnMut(&[u8]),
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(PIPE_DEPTH);
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read_chunks(from, tx, delay, seen), writer);
}

/// Read `from` into timestamped chunks until EOF or error; dropping `tx` at the end tells
/// the writer to finish.
async fn read_chunks(
    mut from: impl AsyncRead + Unpin,
    tx: mpsc::Sender<(Instant, Bytes)>,
    delay: Duration,
    mut seen: impl FnMut(&[u8]),
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                seen(&buf[..n]);
                let chunk = Bytes::copy_from_slice(&buf[..n]);
                if tx.send((Instant::now() + delay, chunk)).await.is_err() {
                    return;
                }
            }
        }
    }
}
