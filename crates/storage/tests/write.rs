#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! Writing whole objects ([`Put`]): into a local directory, and into the test kit's S3
//! server (s3s-fs) in one PUT and in parts; what cannot be written is refused, named.

use bytes::Bytes;
use loader_storage::{ErrorKind, Storage, from_url, put_to_url};
use loader_testkit::S3Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_written_whole_locally_and_to_s3_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    // 20 MiB and a bit: more than one 16 MiB part.
    let big: Vec<u8> = (0..(20u32 << 20) + 12_345)
        .map(|i| (i % 251) as u8)
        .collect();
    let file = dir.path().join("big.bin");
    std::fs::write(&file, &big).unwrap();

    let local = put_to_url(
        &dir.path().join("out").to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    local
        .put("a/small.json", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    local.put_file("a/big.bin", &file).await.unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("out/a/small.json")).unwrap(),
        b"{}"
    );
    assert!(std::fs::read(dir.path().join("out/a/big.bin")).unwrap() == big);
    for key in ["../escape", "a/../b", "/abs", ""] {
        let err = local.put(key, Bytes::new()).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::InvalidKey),
            "{key:?}: {err}"
        );
    }

    let root = dir.path().join("s3");
    std::fs::create_dir_all(root.join("bucket")).unwrap();
    let server = S3Server::start(&root).unwrap();
    let s3 = put_to_url("s3://bucket/prefix", server.options()).unwrap();
    s3.put_file("big.bin", &file).await.unwrap();
    s3.put("small.json", Bytes::from_static(b"[1]"))
        .await
        .unwrap();
    let read = from_url("s3://bucket/prefix", server.options()).unwrap();
    assert!(read.get("big.bin").await.unwrap() == big);
    assert_eq!(&read.get("small.json").await.unwrap()[..], b"[1]");

    let err = put_to_url("http://127.0.0.1:1/x", Vec::<(String, String)>::new()).unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
}
