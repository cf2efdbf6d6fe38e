#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! S3's throttling answer (503 with the `SlowDown` code) is `ErrorKind::Throttled` through
//! both S3 backends, over a real socket: the signal the in-flight controller backs off on.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use loader_storage::{ErrorKind, from_url};

/// A socket that answers every request as S3 does when a prefix takes too many.
fn slow_down_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                // The request head, up to its blank line.
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                    <Message>Please reduce your request rate.</Message><RequestId>1</RequestId></Error>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

fn options(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("aws_access_key_id", "AKIAEXAMPLE".into()),
        ("aws_secret_access_key", "not-a-real-secret-0123".into()),
        ("aws_region", "us-east-1".into()),
        ("aws_endpoint", endpoint.into()),
        ("aws_allow_http", "true".into()),
        ("aws_virtual_hosted_style_request", "false".into()),
    ]
}

#[tokio::test]
async fn object_store_s3_reads_slow_down_as_throttled() {
    let endpoint = slow_down_server();
    let store = from_url("s3://bucket", options(&endpoint)).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), store.get("a.jpg"))
        .await
        .expect("answered at once")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
    assert!(err.kind().is_retryable());
    assert!(err.to_string().contains("a.jpg"), "{err}");
}

#[cfg(feature = "opendal")]
#[tokio::test]
async fn opendal_s3_reads_slow_down_as_throttled() {
    let endpoint = slow_down_server();
    let store = loader_storage::backend::OpendalStore::from_url(
        "s3://bucket",
        options(&endpoint)
            .into_iter()
            .filter(|(k, _)| !k.contains("allow_http") && !k.contains("virtual")),
    )
    .unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        loader_storage::Storage::get(&store, "a.jpg"),
    )
    .await
    .expect("answered at once")
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
}
