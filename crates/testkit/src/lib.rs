//! Real parts for loader's tests, benches, examples and CLI: an in-process S3 server, an
//! HTTP static file server, a TCP delay proxy (which can also cut or stall responses, see
//! [`ProxyFaults`]), and a synthetic ImageNet-like dataset. The S3 server can be stopped and
//! restarted on its port, as a crashed server comes back; [`threads_named`] lists this
//! process's threads by name, for tests that check a component joins what it starts;
//! [`watchdog::within`] runs a call that must not hang and fails the test after a limit;
//! [`HookedStore`] stands in for a backend whose `get` fails, stalls or panics on chosen
//! keys; a [`Bucket`] is a synthetic dataset served by its own S3 server.
//!
//! Every server runs on 127.0.0.1 with an OS-chosen port on its own background thread and
//! runtime, so it works the same from synchronous code and from inside a tokio runtime, and
//! stops when dropped.
//!
//! ```
//! use loader_testkit::{DatasetSpec, HttpServer, DelayProxy};
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let items = DatasetSpec::tiny(6, 2).write(dir.path()).unwrap();
//! assert_eq!(items.len(), 6);
//!
//! let http = HttpServer::start(dir.path()).unwrap();
//! let slow = DelayProxy::start(http.addr(), Duration::from_millis(20)).unwrap();
//! assert_ne!(http.addr(), slow.addr());
//! ```
//!
//! # Rooms
//!
//! Servers (`s3`, `s3_dir`, `http`) and the TCP `proxy` that adds latency, cuts or stalls;
//! `dataset` (synthetic ImageNet-like data), `bucket` (that data behind an S3 server),
//! `hooked` (a store whose reads a test scripts), `watchdog` (a call that must return in time), `threads`, `background`.

mod background;
mod bucket;
mod dataset;
pub mod disk_usage;
mod hooked;
mod http;
mod proxy;
mod s3;
mod s3_dir;
mod threads;
pub mod watchdog;

pub use bucket::Bucket;
pub use dataset::{DatasetItem, DatasetSpec};
pub use hooked::HookedStore;
pub use http::HttpServer;
pub use proxy::{DelayProxy, ProxyFaults, ProxyStats};
pub use s3::S3Server;
pub use threads::{settled_threads_named, threads_named};
