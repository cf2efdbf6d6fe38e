//! GET throughput from the in-process S3 server with 1, 16 and 64 requests in flight,
//! directly and through the delay proxy at 50 ms RTT (100 KB objects).
//!
//! `cargo bench -p loader-benches --bench storage_get`

use std::sync::Arc;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use futures::StreamExt;
use loader_storage::{DynStorage, from_url};
use loader_testkit::{DelayProxy, S3Server};
use rand::{RngCore, SeedableRng};

const OBJECTS: usize = 256;
const OBJECT_SIZE: usize = 100 * 1024;

fn fill_bucket(root: &std::path::Path) {
    let bucket = root.join("bench");
    std::fs::create_dir_all(&bucket).expect("create bucket");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for i in 0..OBJECTS {
        let mut bytes = vec![0u8; OBJECT_SIZE];
        rng.fill_bytes(&mut bytes);
        std::fs::write(bucket.join(format!("obj-{i:04}")), bytes).expect("write object");
    }
}

/// Fetch `count` objects with `in_flight` requests at a time.
async fn fetch(store: &DynStorage, count: usize, in_flight: usize, offset: usize) {
    futures::stream::iter(0..count)
        .map(|i| {
            let key = format!("obj-{:04}", (offset + i) % OBJECTS);
            let store = Arc::clone(store);
            async move { store.get(&key).await.expect("GET failed").len() }
        })
        .buffer_unordered(in_flight)
        .for_each(|len| async move { assert_eq!(len, OBJECT_SIZE) })
        .await;
}

fn storage_get(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    fill_bucket(dir.path());
    let server = S3Server::start(dir.path()).expect("start S3 server");
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(50)).expect("start proxy");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let routes = [("direct", server.endpoint()), ("rtt_50ms", proxy.url())];
    for (route, endpoint) in routes {
        let store = from_url("s3://bench", server.options_for(&endpoint)).expect("store");
        let mut group = c.benchmark_group(format!("s3_get_100KB/{route}"));
        group.sampling_mode(SamplingMode::Flat).sample_size(10);
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        for in_flight in [1usize, 16, 64] {
            // Enough GETs per iteration to keep every slot busy, few enough to stay short.
            let count = (in_flight * 4).max(16);
            group.throughput(Throughput::Elements(count as u64));
            group.bench_with_input(
                BenchmarkId::new("in_flight", in_flight),
                &in_flight,
                |b, &n| {
                    let mut offset = 0;
                    b.to_async(&rt).iter(|| {
                        offset += count;
                        let store = &store;
                        let start = offset;
                        async move { fetch(store, count, n, start).await }
                    });
                },
            );
        }
        group.finish();
    }
}

criterion_group!(benches, storage_get);
criterion_main!(benches);
