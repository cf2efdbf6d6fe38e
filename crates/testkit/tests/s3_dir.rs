#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The S3 server's fast whole-object GET against s3s-fs's own answers, over a real socket.

use loader_testkit::S3Server;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

fn store(server: &S3Server) -> impl ObjectStore {
    AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_bucket_name("data")
        .with_region("us-east-1")
        .with_access_key_id(server.access_key())
        .with_secret_access_key(server.secret_key())
        .with_allow_http(true)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_gets_agree_with_heads_and_ranges_and_see_rewrites() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("data/a/b.bin");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let first: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &first).unwrap();
    let server = S3Server::start(root.path()).unwrap();
    let store = store(&server);
    let key = Path::from("a/b.bin");

    // The first GET hashes the file, the second is served from the cached ETag.
    for _ in 0..2 {
        let got = store.get(&key).await.unwrap();
        let etag = got.meta.e_tag.clone().unwrap();
        assert_eq!(got.bytes().await.unwrap().as_ref(), &first[..]);
        // HEAD and range GETs are s3s-fs's: the same object must carry the same ETag.
        assert_eq!(store.head(&key).await.unwrap().e_tag.unwrap(), etag);
        let range = store
            .get_opts(
                &key,
                GetOptions {
                    range: Some(GetRange::Bounded(10..20)),
                    if_match: Some(etag.clone()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(range.bytes().await.unwrap().as_ref(), &first[10..20]);
    }

    // Rewritten in place with the same size: new bytes and a new ETag, not the cached one.
    let old = store.head(&key).await.unwrap().e_tag.unwrap();
    let second: Vec<u8> = first.iter().map(|b| b.wrapping_add(1)).collect();
    std::thread::sleep(std::time::Duration::from_millis(20)); // a distinct mtime
    std::fs::write(&file, &second).unwrap();
    let got = store.get(&key).await.unwrap();
    let etag = got.meta.e_tag.clone().unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), &second[..]);
    assert_ne!(etag, old);
    assert_eq!(store.head(&key).await.unwrap().e_tag.unwrap(), etag);

    // Gone: a missing key, whether or not its ETag was cached.
    std::fs::remove_file(&file).unwrap();
    let err = store.get(&key).await.unwrap_err();
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
}
