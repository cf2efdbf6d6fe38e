#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The cache layer over real stores: the in-process S3 server over a socket, and local disk.
//! Budgets are checked by measuring the directory while reads run, not by the cache's own
//! book-keeping.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::TryStreamExt;
use loader_storage::layer::{CacheConfig, CachePolicy, CacheStore, Latency, MetricsStore};
use loader_storage::{DynStorage, Storage, StorageExt, from_url};
use loader_testkit::disk_usage::{du, walk};
use loader_testkit::watchdog::no_hang;
use loader_testkit::{HookedStore, S3Server};

const BUCKET: &str = "data";

fn bytes_of(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k * 31 + i * 7) % 251) as u8).collect()
}

/// `n` objects of `len` bytes under `root/data/obj/NNN.bin`.
fn objects(root: &Path, n: usize, len: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let key = format!("obj/{i:03}.bin");
            let path = root.join(BUCKET).join(&key);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes_of(i, len)).unwrap();
            key
        })
        .collect()
}

fn local(root: &Path) -> DynStorage {
    from_url(&root.join(BUCKET).to_string_lossy(), [("a", "b"); 0]).unwrap()
}

fn s3(server: &S3Server) -> DynStorage {
    from_url(&format!("s3://{BUCKET}"), server.options()).unwrap()
}

fn config(dir: &Path, memory: u64, disk: u64) -> CacheConfig {
    CacheConfig {
        dir: Some(dir.to_path_buf()),
        memory_bytes: memory,
        disk_bytes: disk,
        policy: CachePolicy::Future,
        ..CacheConfig::default()
    }
}

/// The local store of `data` under a disk cache of 1 MiB in `cache` (no memory tier).
fn on_disk(data: &Path, cache: &Path) -> CacheStore<DynStorage> {
    local(data).with_cache(config(cache, 0, 1 << 20)).unwrap()
}

/// Flips the last bit of `file`: damage only its checksum can tell.
fn flip_last_bit(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(file, bytes).unwrap();
}

fn entry_files(dir: &Path) -> Vec<PathBuf> {
    walk(&dir.join("entries"))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The cache's store over S3, counting the requests that reach S3.
fn cached_s3(
    server: &S3Server,
    config: CacheConfig,
) -> (
    CacheStore<MetricsStore<DynStorage>>,
    Arc<loader_storage::layer::StorageMetrics>,
) {
    let counted = s3(server).with_metrics();
    let metrics = counted.metrics();
    (counted.with_cache(config).unwrap(), metrics)
}

#[test]
fn a_second_run_on_the_same_directory_reads_nothing_from_the_store() {
    no_hang("warm second run", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 40, 20_000);
        let server = S3Server::start(data.path()).unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            for run in 0..2 {
                let (store, gets) = cached_s3(&server, config(cache_dir.path(), 0, 64 << 20));
                let listed: Vec<_> = store.list("obj").try_collect().await.unwrap();
                assert_eq!(listed.len(), keys.len());
                let before = gets.snapshot().requests;
                for (i, key) in keys.iter().enumerate() {
                    assert_eq!(store.get(key).await.unwrap(), bytes_of(i, 20_000), "{key}");
                    let part = store.get_range(key, 100..5_000).await.unwrap();
                    assert_eq!(part, bytes_of(i, 20_000)[100..5_000], "{key}");
                }
                let made = gets.snapshot().requests - before;
                let snap = store.cache().snapshot();
                if run == 0 {
                    assert_eq!(made, 2 * keys.len() as u64, "run 0: {snap}");
                } else {
                    assert_eq!(made, 0, "run 1 made {made} requests: {snap}");
                    assert_eq!(snap.disk_hits, 2 * keys.len() as u64, "{snap}");
                    assert_eq!(snap.validations, 0, "the listing validated: {snap}");
                }
            }
        });
    });
}

#[test]
fn an_object_rewritten_under_the_cache_is_fetched_again() {
    no_hang("rewritten object", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 3, 1000);
        let cache_dir = tempfile::tempdir().unwrap();
        let path = data.path().join(BUCKET).join(&keys[1]);
        rt().block_on(async {
            let store = on_disk(data.path(), cache_dir.path());
            for key in &keys {
                store.get(key).await.unwrap();
            }
            drop(store);
            // Another size and another mtime: the next run's view differs from the entry's.
            std::thread::sleep(Duration::from_millis(20));
            std::fs::write(&path, b"rewritten").unwrap();
            let store = on_disk(data.path(), cache_dir.path());
            // No listing: the cache asks for the object's size and version once.
            assert_eq!(store.get(&keys[1]).await.unwrap().as_ref(), b"rewritten");
            assert_eq!(store.get(&keys[0]).await.unwrap(), bytes_of(0, 1000));
            let snap = store.cache().snapshot();
            assert_eq!(snap.stale, 1, "{snap}");
            assert_eq!(snap.validations, 2, "{snap}");
            // Same size, new content, new mtime: still caught by the version.
            drop(store);
            std::thread::sleep(Duration::from_millis(20));
            std::fs::write(&path, b"REWRITTEN").unwrap();
            let store = on_disk(data.path(), cache_dir.path());
            assert_eq!(store.get(&keys[1]).await.unwrap().as_ref(), b"REWRITTEN");
        });
    });
}

#[test]
fn a_corrupted_entry_file_is_detected_and_fetched_again() {
    no_hang("corrupt entry", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 4, 3000);
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let open = || on_disk(data.path(), cache_dir.path());
            let store = open();
            for key in &keys {
                store.get(key).await.unwrap();
            }
            drop(store);
            let files = entry_files(cache_dir.path());
            assert_eq!(files.len(), keys.len());
            // One bit flipped in one file, another file cut short.
            flip_last_bit(&files[0]);
            let bytes = std::fs::read(&files[1]).unwrap();
            std::fs::write(&files[1], &bytes[..bytes.len() / 2]).unwrap();
            let store = open();
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(store.get(key).await.unwrap(), bytes_of(i, 3000), "{key}");
            }
            let snap = store.cache().snapshot();
            assert_eq!(
                (snap.corrupt, snap.disk_hits, snap.misses),
                (2, 2, 2),
                "{snap}"
            );
        });
    });
}

// Issue 25, defect 22: readers racing on one damaged file each found it damaged and each
// counted it, so the counter said 8 for one file.
#[test]
fn a_damaged_file_read_by_racing_readers_is_counted_once() {
    no_hang("racing readers of a corrupt entry", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 1, 3000);
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let open = || on_disk(data.path(), cache_dir.path());
            let store = open();
            store.get(&keys[0]).await.unwrap();
            drop(store);
            let files = entry_files(cache_dir.path());
            flip_last_bit(&files[0]);
            let store = open();
            let reads = (0..8).map(|_| store.get(&keys[0]));
            for read in futures::future::join_all(reads).await {
                assert_eq!(read.unwrap(), bytes_of(0, 3000));
            }
            let snap = store.cache().snapshot();
            assert_eq!(snap.corrupt, 1, "{snap}");
        });
    });
}

/// `inner` whose first read never answers (a response lost by the network).
fn first_read_lost(inner: DynStorage) -> HookedStore {
    let lost = Arc::new(AtomicBool::new(false));
    HookedStore::before_get(inner, move |_, _| {
        let first = !lost.swap(true, Ordering::SeqCst);
        async move {
            if first {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            None
        }
        .boxed()
    })
}

// Issue 25, review: the cache serves concurrent reads of one entry with one request, so a
// hedge sent for a lost response joined that very request and waited with it.
#[test]
fn a_hedge_is_not_joined_to_the_stalled_request_it_overtakes() {
    no_hang("a hedge through the cache", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 1, 5000);
        rt().block_on(async {
            let store = Arc::new(
                first_read_lost(local(data.path()))
                    .with_cache(CacheConfig {
                        dir: None,
                        memory_bytes: 1 << 20,
                        ..CacheConfig::default()
                    })
                    .unwrap(),
            );
            let lost = {
                let (store, key) = (Arc::clone(&store), keys[0].clone());
                tokio::spawn(async move { store.get_range(&key, 0..4000).await })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let options = loader_storage::GetOptions::range(0..4000).repeat(true);
            let hedge = store
                .get_opts(&keys[0], options)
                .await
                .map(|answer| answer.bytes);
            assert_eq!(hedge.unwrap(), bytes_of(0, 5000)[..4000]);
            lost.abort();
        });
    });
}

#[test]
fn many_concurrent_readers_of_one_key_make_one_request() {
    no_hang("single flight", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 1, 50_000);
        let server = S3Server::start(data.path()).unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            // Slow enough that every reader arrives while the first request is out.
            let counted = s3(&server)
                .with_latency(Latency::Fixed(Duration::from_millis(200)), 1)
                .with_metrics();
            let gets = counted.metrics();
            let store = Arc::new(
                counted
                    .with_cache(config(cache_dir.path(), 1 << 20, 1 << 20))
                    .unwrap(),
            );
            store.head(&keys[0]).await.unwrap();
            let readers = (0..64).map(|i| {
                let (store, key) = (Arc::clone(&store), keys[0].clone());
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        store.get(&key).await.unwrap()
                    } else {
                        store.get_range(&key, 0..50_000).await.unwrap()
                    }
                })
            });
            for reader in futures::future::join_all(readers).await {
                assert_eq!(reader.unwrap(), bytes_of(0, 50_000));
            }
            // One HEAD, one whole GET and one ranged GET (a block is another entry).
            assert_eq!(gets.snapshot().requests, 3, "{}", store.cache().snapshot());
        });
    });
}

#[test]
fn two_processes_reading_one_entry_at_once_make_one_request() {
    no_hang("claims", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 4, 50_000);
        let server = S3Server::start(data.path()).unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            // Two caches on one directory, each over its own counted, slow store: the locks
            // are per open file, so each stands in for a process of its own.
            let open = || {
                let counted = s3(&server)
                    .with_latency(Latency::Fixed(Duration::from_millis(300)), 1)
                    .with_metrics();
                let gets = counted.metrics();
                let store = Arc::new(
                    counted
                        .with_cache(config(cache_dir.path(), 0, 1 << 20))
                        .unwrap(),
                );
                (store, gets)
            };
            let ((a, a_gets), (b, b_gets)) = (open(), open());
            for store in [&a, &b] {
                for key in &keys {
                    store.head(key).await.unwrap();
                }
            }
            let (before_a, before_b) = (a_gets.snapshot().requests, b_gets.snapshot().requests);
            let reads = keys.iter().enumerate().flat_map(|(i, key)| {
                [&a, &b].map(|store| {
                    let (store, key) = (Arc::clone(store), key.clone());
                    tokio::spawn(async move {
                        let got = if i % 2 == 0 {
                            store.get(&key).await.unwrap()
                        } else {
                            store.get_range(&key, 0..50_000).await.unwrap()
                        };
                        assert_eq!(got, bytes_of(i, 50_000));
                    })
                })
            });
            for read in futures::future::join_all(reads).await {
                read.unwrap();
            }
            let gets =
                a_gets.snapshot().requests - before_a + b_gets.snapshot().requests - before_b;
            assert_eq!(gets, 4, "one GET per object between the two");
            // Nothing left claimed.
            a.cache().flush();
            b.cache().flush();
            let claims = std::fs::read_dir(cache_dir.path().join("claims"))
                .unwrap()
                .count();
            assert_eq!(claims, 0);
        });
    });
}

#[test]
fn the_disk_stays_within_its_budget_while_reads_run() {
    no_hang("disk budget", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 120, 40_000);
        let cache_dir = tempfile::tempdir().unwrap();
        let budget: u64 = 1_000_000;
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let watcher = {
            let (stop, peak, dir) = (
                Arc::clone(&stop),
                Arc::clone(&peak),
                cache_dir.path().to_path_buf(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(
                        du(&[dir.join("entries"), dir.join("tmp")]),
                        Ordering::Relaxed,
                    );
                }
            })
        };
        rt().block_on(async {
            for policy in [CachePolicy::Lru, CachePolicy::Future, CachePolicy::PinOnce] {
                let store = Arc::new(
                    local(data.path())
                        .with_cache(CacheConfig {
                            policy,
                            ..config(cache_dir.path(), 200_000, budget)
                        })
                        .unwrap(),
                );
                let readers = (0..4).map(|r| {
                    let (store, keys) = (Arc::clone(&store), keys.clone());
                    tokio::spawn(async move {
                        for round in 0..3 {
                            for (i, key) in keys.iter().enumerate() {
                                if (i + r + round) % 3 == 0 {
                                    let got = store.get_range(key, 0..40_000).await.unwrap();
                                    assert_eq!(got, bytes_of(i, 40_000));
                                }
                            }
                        }
                    })
                });
                for r in futures::future::join_all(readers).await {
                    r.unwrap();
                }
                let snap = store.cache().snapshot();
                assert!(snap.disk.peak_bytes <= budget, "{policy}: {snap}");
                assert!(snap.memory.peak_bytes <= 200_000, "{policy}: {snap}");
                assert!(
                    snap.disk.bytes > budget / 2,
                    "{policy}: the disk tier was used: {snap}"
                );
            }
        });
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        let peak = peak.load(Ordering::Relaxed);
        assert!(
            peak <= budget,
            "measured {peak} bytes on disk, budget {budget}"
        );
        assert!(peak > budget / 2, "measured {peak}");
    });
}

#[test]
fn two_caches_on_one_directory_both_write_and_share_one_budget() {
    no_hang("shared directory", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 12, 2000);
        let cache_dir = tempfile::tempdir().unwrap();
        // Room for 8 entry files of about 2.1 KB.
        let budget = 8 * 2200;
        rt().block_on(async {
            // The locks are per open file, so a second cache in this process stands in for
            // a second process (the tests of crates/cli/tests/node_cache.rs run real ones).
            let a = local(data.path())
                .with_cache(config(cache_dir.path(), 0, budget))
                .unwrap();
            let b = local(data.path())
                .with_cache(config(cache_dir.path(), 0, budget))
                .unwrap();
            for key in &keys[..3] {
                a.get(key).await.unwrap();
            }
            a.cache().flush();
            for (i, key) in keys[..6].iter().enumerate() {
                assert_eq!(b.get(key).await.unwrap(), bytes_of(i, 2000));
            }
            b.cache().flush();
            let snap = b.cache().snapshot();
            assert_eq!((snap.disk_hits, snap.misses), (3, 3), "{snap}");
            assert_eq!(
                entry_files(cache_dir.path()).len(),
                6,
                "the second one wrote"
            );
            // What the second one wrote, the first one reads.
            for (i, key) in keys[3..6].iter().enumerate() {
                assert_eq!(a.get(key).await.unwrap(), bytes_of(i + 3, 2000));
            }
            assert_eq!(a.cache().snapshot().disk_hits, 3);
            // Both fill it on: one budget, whoever writes.
            for (i, key) in keys.iter().enumerate() {
                let (x, y) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                x.get(key).await.unwrap();
                y.get(key).await.unwrap();
                x.cache().flush();
                y.cache().flush();
                let files = entry_files(cache_dir.path());
                let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
                assert!(bytes <= budget, "{bytes} bytes in {} files", files.len());
            }
            assert!(entry_files(cache_dir.path()).len() >= 7);
        });
    });
}

/// The child of `a_writer_killed_mid_write_leaves_nothing_servable`: writes big entries
/// until it is killed. Ignored: only that test runs it, in a process of its own.
#[test]
#[ignore = "the child process of a_writer_killed_mid_write_leaves_nothing_servable"]
fn child_writer_process() {
    let (Ok(data), Ok(cache)) = (
        std::env::var("LOADER_CACHE_CHILD_DATA"),
        std::env::var("LOADER_CACHE_CHILD_DIR"),
    ) else {
        return;
    };
    rt().block_on(async {
        let store = local(Path::new(&data))
            .with_cache(config(Path::new(&cache), 0, 1 << 30))
            .unwrap();
        for i in 0..4 {
            store.get(&format!("obj/{i:03}.bin")).await.unwrap();
        }
    });
}

#[test]
fn a_writer_killed_mid_write_leaves_nothing_servable() {
    no_hang("killed writer", || {
        let data = tempfile::tempdir().unwrap();
        let len = 48 << 20;
        let keys = objects(data.path(), 4, len);
        let caches = tempfile::tempdir().unwrap();
        let mut caught = None;
        for attempt in 0..20 {
            let cache_dir = caches.path().join(attempt.to_string());
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_writer_process",
                    "--ignored",
                    "--nocapture",
                ])
                .env("LOADER_CACHE_CHILD_DATA", data.path())
                .env("LOADER_CACHE_CHILD_DIR", &cache_dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // Kill it as soon as a file is being written.
            let tmp = cache_dir.join("tmp");
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                let partial = walk(&tmp).iter().any(|p| {
                    p.metadata()
                        .is_ok_and(|m| m.len() > 0 && m.len() < len as u64)
                });
                if partial || child.try_wait().unwrap().is_some() {
                    break;
                }
            }
            child.kill().ok();
            child.wait().unwrap();
            if !walk(&tmp).is_empty() {
                caught = Some(cache_dir);
                break;
            }
        }
        let cache_dir = caught.expect("never killed the child with an entry half written");
        rt().block_on(async {
            let store = local(data.path())
                .with_cache(config(&cache_dir, 0, 1 << 30))
                .unwrap();
            let left: Vec<_> = walk(&cache_dir.join("tmp"))
                .into_iter()
                .filter(|p| p.extension().is_none_or(|e| e != "lock"))
                .collect();
            assert!(left.is_empty(), "left-overs deleted: {left:?}");
            for (i, key) in keys.iter().enumerate() {
                assert!(store.get(key).await.unwrap() == bytes_of(i, len), "{key}");
            }
            let snap = store.cache().snapshot();
            assert_eq!(snap.corrupt, 0, "{snap}");
            assert_eq!(snap.disk_hits + snap.misses, keys.len() as u64, "{snap}");
        });
    });
}

/// A tmpfs of `bytes`, unmounted when dropped; `None` where this process may not mount.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_full_disk_is_reported_and_reads_go_on_without_it() {
    no_hang("full disk", || {
        let data = tempfile::tempdir().unwrap();
        let keys = objects(data.path(), 30, 100_000);
        // A real full disk where this process may mount one; else a directory the cache
        // cannot write into (its `tmp/` replaced by a file), which fails the same way.
        let small = SmallDisk::mount(512 << 10);
        let fallback = tempfile::tempdir().unwrap();
        let cache_dir = match &small {
            Some(disk) => disk.0.path().join("cache"),
            None => {
                eprintln!("no tmpfs here: a write that fails stands in for a full disk");
                fallback.path().join("cache")
            }
        };
        rt().block_on(async {
            let store = local(data.path())
                .with_cache(config(&cache_dir, 0, 64 << 20))
                .unwrap();
            if small.is_none() {
                std::fs::remove_dir(cache_dir.join("tmp")).unwrap();
                std::fs::write(cache_dir.join("tmp"), b"not a directory").unwrap();
            }
            for _ in 0..2 {
                for (i, key) in keys.iter().enumerate() {
                    assert_eq!(store.get(key).await.unwrap(), bytes_of(i, 100_000), "{key}");
                }
            }
            let snap = store.cache().snapshot();
            assert!(snap.write_errors >= 1, "{snap}");
            assert!(snap.disk.bytes <= 512 << 10, "{snap}");
        });
    });
}

#[test]
fn ranges_across_blocks_read_as_the_store_does() {
    no_hang("ranges", || {
        let data = tempfile::tempdir().unwrap();
        let len = 10_000;
        let keys = objects(data.path(), 2, len);
        let cache_dir = tempfile::tempdir().unwrap();
        rt().block_on(async {
            let plain = local(data.path());
            let store = local(data.path())
                .with_cache(CacheConfig {
                    block_bytes: 1024,
                    ..config(cache_dir.path(), 4096, 1 << 20)
                })
                .unwrap();
            store.list("").try_collect::<Vec<_>>().await.unwrap();
            let mut seed = 7u64;
            for _ in 0..300 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let a = (seed >> 33) % (len as u64 + 50);
                let b = a + (seed >> 13) % 3000;
                let key = &keys[(seed % 2) as usize];
                let want = plain.get_range(key, a..b).await;
                let got = store.get_range(key, a..b).await;
                match (want, got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, g, "{key} {a}..{b}"),
                    (Err(w), Err(g)) => assert_eq!(w.kind(), g.kind(), "{key} {a}..{b}"),
                    (w, g) => panic!("{key} {a}..{b}: store {w:?}, cache {g:?}"),
                }
            }
            let snap = store.cache().snapshot();
            assert!(snap.memory_hits + snap.disk_hits > 0, "{snap}");
        });
    });
}
