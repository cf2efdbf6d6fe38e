#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! One conformance suite, run against every backend over real sockets where the backend
//! is remote: local disk, object_store → in-process S3, object_store → in-process HTTP,
//! opendal → S3 / HTTP / fs, and memory.

use std::time::Duration;

use futures::TryStreamExt;
use loader_storage::backend::ObjectStoreAdapter;
use loader_storage::{DynStorage, ErrorKind, GetOptions, Storage, from_url};
use loader_testkit::{DelayProxy, HttpServer, S3Server};
use object_store::ObjectStoreExt;
use tempfile::TempDir;

const BUCKET: &str = "data";

/// The objects every backend serves, relative to the bucket.
fn objects() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("a.txt", b"hello loader".to_vec()),
        ("dir/b.bin", (0..=255u8).cycle().take(1000).collect()),
        ("dir/sub/c.bin", vec![7; 3]),
        ("dirty/d.bin", vec![1]), // shares a string prefix with "dir", not a path prefix
        // Names users really have: spaces, non-ASCII letters, '+', '%' and '='.
        ("odd name+ü/a b%20=c+d é.bin", vec![2, 3]),
    ]
}

/// A temp dir holding `data/<objects>` and, beside the bucket, a file no key may reach.
fn fixture() -> TempDir {
    let root = tempfile::tempdir().unwrap();
    for (key, bytes) in objects() {
        let path = root.path().join(BUCKET).join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    std::fs::write(root.path().join("secret.txt"), b"outside the bucket").unwrap();
    root
}

fn no_options() -> Vec<(String, String)> {
    Vec::new()
}

fn sorted_keys(list: Vec<loader_storage::ObjectMeta>) -> Vec<String> {
    let mut keys: Vec<_> = list.into_iter().map(|m| m.key).collect();
    keys.sort();
    keys
}

/// The behaviour every backend must share.
async fn conformance(store: &dyn Storage, can_list: bool) {
    let name = store.name().to_owned();
    for (key, bytes) in objects() {
        assert_eq!(
            store.get(key).await.unwrap().as_ref(),
            bytes.as_slice(),
            "{name}: get {key}"
        );
        assert_eq!(
            store.head(key).await.unwrap().size,
            bytes.len() as u64,
            "{name}: head {key}"
        );
    }
    let b = &objects()[1].1;
    // What a read says of its object, where the backend tells: the whole object's size and
    // the version a HEAD names, also for a range.
    let answer = store
        .get_opts("dir/b.bin", GetOptions::range(10..20))
        .await
        .unwrap();
    if let Some(meta) = &answer.meta {
        let head = store.head("dir/b.bin").await.unwrap();
        assert_eq!(
            (meta.size, &meta.version),
            (b.len() as u64, &head.version),
            "{name}"
        );
    }
    assert_eq!(
        store.get_range("dir/b.bin", 10..20).await.unwrap().as_ref(),
        &b[10..20],
        "{name}"
    );
    assert_eq!(
        store
            .get_range("dir/b.bin", 990..2000)
            .await
            .unwrap()
            .as_ref(),
        &b[990..],
        "{name}: range past the end is cut"
    );
    assert!(
        store.get_range("dir/b.bin", 5..5).await.unwrap().is_empty(),
        "{name}"
    );

    let missing = store.get("dir/nope.bin").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{name}: {missing}");
    assert_eq!(missing.key(), "dir/nope.bin");
    assert_eq!(missing.backend(), name);
    assert!(missing.to_string().contains("dir/nope.bin"), "{missing}");
    assert_eq!(
        store.head("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "{name}"
    );

    for escape in [
        "../secret.txt",
        "/secret.txt",
        "dir/../../secret.txt",
        "a\0b",
        "",
    ] {
        let err = store.get(escape).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidKey,
            "{name}: {escape:?} gave {err}"
        );
    }

    let listed: Result<Vec<_>, _> = store.list("").try_collect().await;
    if can_list {
        let all: Vec<String> = objects().iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(sorted_keys(listed.unwrap()), all, "{name}");
        let dir = store.list("dir").try_collect().await.unwrap();
        assert_eq!(sorted_keys(dir), ["dir/b.bin", "dir/sub/c.bin"], "{name}");
        let dir_slash = store.list("dir/").try_collect().await.unwrap();
        assert_eq!(sorted_keys(dir_slash).len(), 2, "{name}");
        // A prefix with the same odd characters lists its object (it was encoded twice).
        let odd = store.list("odd name+ü").try_collect().await.unwrap();
        assert_eq!(
            sorted_keys(odd),
            ["odd name+ü/a b%20=c+d é.bin"],
            "{name}: a prefix with spaces, '+', '%' or non-ASCII letters"
        );
        let sizes: Vec<_> = store.list("dir/sub").try_collect().await.unwrap();
        assert_eq!(sizes[0].size, 3, "{name}");
        assert!(
            store
                .list("nothing")
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
    } else {
        let err = listed.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{name}: {err}");
        assert!(err.to_string().contains("manifest"), "{err}");
    }
}

fn s3_store(server: &S3Server, endpoint: &str) -> DynStorage {
    from_url(&format!("s3://{BUCKET}"), server.options_for(endpoint)).unwrap()
}

#[tokio::test]
async fn local() {
    let root = fixture();
    let store = from_url(&root.path().join(BUCKET).to_string_lossy(), no_options()).unwrap();
    conformance(&*store, true).await;
}

#[tokio::test]
async fn memory() {
    let store = from_url("memory://", no_options()).unwrap();
    // Fill the in-memory store through object_store itself.
    let adapter = ObjectStoreAdapter::new(
        std::sync::Arc::new(object_store::memory::InMemory::new()),
        "memory://",
        loader_storage::backend::object_store::Flavor::Memory,
    );
    for (key, bytes) in objects() {
        adapter
            .inner()
            .put(&object_store::path::Path::parse(key).unwrap(), bytes.into())
            .await
            .unwrap();
    }
    conformance(&adapter, true).await;
    assert_eq!(
        store.get("a.txt").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn object_store_s3() {
    let root = fixture();
    let server = S3Server::start(root.path()).unwrap();
    let store = s3_store(&server, &server.endpoint());
    conformance(&*store, true).await;
    let answer = store
        .get_opts("a.txt", GetOptions::range(0..1))
        .await
        .unwrap();
    assert!(
        answer.meta.is_some(),
        "object_store tells the object's size and version"
    );

    // A prefix in the URL makes keys relative to it.
    let prefixed = from_url(&format!("s3://{BUCKET}/dir"), server.options()).unwrap();
    assert_eq!(prefixed.get("b.bin").await.unwrap().len(), 1000);
    let keys = sorted_keys(prefixed.list("").try_collect().await.unwrap());
    assert_eq!(keys, ["b.bin", "sub/c.bin"]);
}

#[tokio::test]
async fn object_store_s3_wrong_credentials_is_permission_denied() {
    let root = fixture();
    let server = S3Server::start(root.path()).unwrap();
    let mut options = server.options();
    for (key, value) in &mut options {
        if key == "aws_secret_access_key" {
            *value = "not-the-secret-0123456789".into();
        }
    }
    let store = from_url(&format!("s3://{BUCKET}"), options).unwrap();
    let err = store.get("a.txt").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(
        !format!("{err} {err:?}").contains("not-the-secret"),
        "secret leaked: {err:?}"
    );
}

#[tokio::test]
async fn object_store_s3_through_delay_proxy() {
    let root = fixture();
    let server = S3Server::start(root.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(60)).unwrap();
    let store = s3_store(&server, &proxy.url());
    let start = std::time::Instant::now();
    assert_eq!(store.get("a.txt").await.unwrap().as_ref(), b"hello loader");
    // A request needs at least one round trip (lower bound only: never a speed check).
    assert!(
        start.elapsed() >= Duration::from_millis(60),
        "{:?}",
        start.elapsed()
    );
    conformance(&*store, true).await;
}

#[tokio::test]
async fn object_store_http() {
    let root = fixture();
    let server = HttpServer::start(root.path()).unwrap();
    let store = from_url(&format!("{}/{BUCKET}", server.url()), no_options()).unwrap();
    conformance(&*store, false).await;
}

#[tokio::test]
async fn dead_server_fails_fast_with_a_transient_error() {
    // Bind then drop, so the port is closed: object_store's own retries are off, so this
    // returns at once instead of after minutes of hidden retrying.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = from_url(&format!("http://127.0.0.1:{port}/x"), no_options()).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), store.get("a"))
        .await
        .expect("a dead server must not hang")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
}

// Defect 10: a whole-object read allocated what the server's Content-Length announced
// before a byte arrived. Over the per-read limit it is refused by that announcement, with
// the key and the size, from S3, HTTP and local disk alike; a range under it is fine.
#[tokio::test]
async fn reads_over_the_size_limit_are_refused_by_their_announced_size() {
    let root = fixture();
    let server = S3Server::start(root.path()).unwrap();
    let http = HttpServer::start(root.path().join(BUCKET)).unwrap();
    let mut s3_options = server.options();
    s3_options.push(("max_read_bytes".into(), "500".into()));
    let limited = [
        from_url(&format!("s3://{BUCKET}"), s3_options).unwrap(),
        from_url(&http.url(), [("max_read_bytes", "500")]).unwrap(),
        from_url(
            &root.path().join(BUCKET).to_string_lossy(),
            [("max_read_bytes", "500")],
        )
        .unwrap(),
    ];
    for store in limited {
        let name = store.name().to_owned();
        let err = store.get("dir/b.bin").await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"dir/b.bin\"") && text.contains("1000 bytes") && text.contains(&name),
            "{name}: {text}"
        );
        assert!(
            store.get_range("dir/b.bin", 0..2000).await.is_err(),
            "{name}"
        );
        assert_eq!(
            store.get_range("dir/b.bin", 0..500).await.unwrap().len(),
            500
        );
        assert_eq!(store.get("a.txt").await.unwrap().len(), 12, "{name}");
    }
    let err = from_url("memory://", [("max_read_bytes", "lots")]).unwrap_err();
    assert!(err.to_string().contains("number of bytes"), "{err}");
}

#[cfg(feature = "opendal")]
mod opendal {
    use super::*;
    use loader_storage::backend::OpendalStore;

    #[tokio::test]
    async fn opendal_s3() {
        let root = fixture();
        let server = S3Server::start(root.path()).unwrap();
        let store = OpendalStore::from_url(
            &format!("s3://{BUCKET}"),
            server
                .options_for(&server.endpoint())
                .into_iter()
                .filter(|(k, _)| !k.contains("allow_http") && !k.contains("virtual")),
        )
        .unwrap();
        conformance(&store, true).await;
    }

    #[tokio::test]
    async fn opendal_s3_wrong_credentials_is_permission_denied() {
        let root = fixture();
        let server = S3Server::start(root.path()).unwrap();
        let store = OpendalStore::from_url(
            &format!("s3://{BUCKET}"),
            [
                ("aws_access_key_id", server.access_key()),
                ("aws_secret_access_key", "wrong-secret-wrong-secret"),
                ("aws_endpoint", server.endpoint().as_str()),
            ],
        )
        .unwrap();
        let err = store.get("a.txt").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    }

    // Defect 10 for opendal: a whole-object read over the limit stops when the limit is
    // passed, naming key and size.
    #[tokio::test]
    async fn opendal_reads_over_the_size_limit_are_refused() {
        let root = fixture();
        let server = HttpServer::start(root.path()).unwrap();
        let store = OpendalStore::from_url(&format!("{}/{BUCKET}", server.url()), no_options())
            .unwrap()
            .with_max_read_bytes(500);
        let err = store.get("dir/b.bin").await.unwrap_err();
        assert!(
            err.to_string().contains("\"dir/b.bin\"") && err.to_string().contains("limit"),
            "{err}"
        );
        assert_eq!(store.get("a.txt").await.unwrap().len(), 12);
    }

    #[tokio::test]
    async fn opendal_http() {
        let root = fixture();
        let server = HttpServer::start(root.path()).unwrap();
        let store =
            OpendalStore::from_url(&format!("{}/{BUCKET}", server.url()), no_options()).unwrap();
        conformance(&store, false).await;
    }

    #[tokio::test]
    async fn opendal_fs() {
        let root = fixture();
        let url = format!("file://{}", root.path().join(BUCKET).display());
        let store = OpendalStore::from_url(&url, no_options()).unwrap();
        conformance(&store, true).await;
    }
}
