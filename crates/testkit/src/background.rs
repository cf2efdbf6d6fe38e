//! A server's home: its own thread and tokio runtime, stopped and joined on drop.

use std::future::Future;
use std::io;
use std::thread::JoinHandle;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A running background server. Dropping it stops the server (open connections are cut)
/// and joins its thread; safe to do from inside another tokio runtime.
#[derive(Debug)]
pub(crate) struct Background {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Run `serve(listener, stop)` on a new thread named `name` with a runtime of `threads`
    /// workers. The listener is bound here, so a bind error reaches the caller.
    pub(crate) fn start<F, Fut>(
        name: &str,
        threads: usize,
        listener: std::net::TcpListener,
        serve: F,
    ) -> io::Result<Self>
    where
        F: FnOnce(TcpListener, oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(format!("{name}-rt"))
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, stopped).await,
                        Err(e) => eprintln!("test server could not start: {e}"),
                    }
                });
                // Dropping the runtime here, outside any async context, cancels every task.
                drop(runtime);
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Bind 127.0.0.1 on `port` (0 for any free port).
pub(crate) fn bind(port: u16) -> io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(("127.0.0.1", port))
}

/// Accept connections until stopped, serving HTTP/1 and HTTP/2 with `service`.
/// `TCP_NODELAY` is set on every socket: without it each small response waits ~40 ms
/// for Nagle's algorithm and the client's delayed ACK.
pub(crate) async fn serve_http<S, B>(
    listener: TcpListener,
    service: S,
    mut stop: oneshot::Receiver<()>,
) where
    S: hyper::service::Service<hyper::Request<Incoming>, Response = hyper::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let builder = ConnBuilder::new(TokioExecutor::new());
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else { continue };
                let _ = socket.set_nodelay(true);
                let builder = builder.clone();
                let service = service.clone();
                tokio::spawn(async move {
                    let _ = builder.serve_connection(TokioIo::new(socket), service).await;
                });
            }
        }
    }
}
