//! `loader serve`: the in-process S3 or HTTP server over a directory, until Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use loader_testkit::{DelayProxy, HttpServer, S3Server};

use crate::Result;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// S3 (s3s + s3s-fs): each top-level folder of DIR is a bucket.
    S3,
    /// A static HTTP file server with Range support.
    Http,
}

/// Arguments of `loader serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server to start.
    kind: Kind,
    /// The directory to serve.
    dir: PathBuf,
    /// Port clients connect to (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Round-trip time to add in front of the server, through a TCP delay proxy.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    rtt: u64,
    /// Accept S3 writes (put, copy, delete, create and delete buckets) into DIR. Off by
    /// default: a command for trying things must not let a client delete the folder.
    #[arg(long)]
    writable: bool,
}

pub fn main(args: Args) -> Result {
    if !args.dir.is_dir() {
        return Err(format!("{} is not a directory", args.dir.display()).into());
    }
    let proxied = args.rtt > 0;
    let server_port = if proxied { 0 } else { args.port };
    let (s3, http) = match args.kind {
        Kind::S3 if args.writable => (Some(S3Server::start_on(&args.dir, server_port)?), None),
        Kind::S3 => (
            Some(S3Server::start_read_only(&args.dir, server_port)?),
            None,
        ),
        Kind::Http => (None, Some(HttpServer::start_on(&args.dir, server_port)?)),
    };
    let server_addr = match (&s3, &http) {
        (Some(s), _) => s.addr(),
        (_, Some(h)) => h.addr(),
        _ => return Err("no server started".into()),
    };
    let proxy = if proxied {
        Some(DelayProxy::start_on(
            server_addr,
            Duration::from_millis(args.rtt),
            args.port,
        )?)
    } else {
        None
    };
    let endpoint = proxy
        .as_ref()
        .map_or_else(|| format!("http://{server_addr}"), DelayProxy::url);
    println!("endpoint: {endpoint}");
    // The servers bind 127.0.0.1 only: nothing here is meant to be reachable from elsewhere.
    let mode = match args.kind {
        Kind::S3 if args.writable => "read-write (--writable)",
        _ => "read-only",
    };
    println!(
        "serving {} {mode}, on loopback (127.0.0.1) only",
        args.dir.display()
    );
    if proxied {
        println!(
            "rtt: {} ms (delay proxy in front of http://{server_addr})",
            args.rtt
        );
    }
    match &s3 {
        Some(server) => {
            let buckets: Vec<String> = std::fs::read_dir(&args.dir)?
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            println!("buckets: {}", buckets.join(", "));
            // Throwaway credentials made for this server run; nothing real is printed.
            println!("access key: {}", server.access_key());
            println!("secret key: {}", server.secret_key());
            let bucket = buckets.first().map_or("BUCKET", String::as_str);
            println!(
                "try: loader run s3://{bucket} --option aws_endpoint={endpoint} --option aws_access_key_id={} --option aws_secret_access_key={}",
                server.access_key(),
                server.secret_key()
            );
        }
        None => println!(
            "try: loader run {endpoint} --manifest train.csv  (HTTP cannot list; give a manifest)"
        ),
    }
    println!("press Ctrl-C to stop");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(tokio::signal::ctrl_c())?;
    println!("stopped");
    drop(proxy);
    drop(s3);
    drop(http);
    Ok(())
}
