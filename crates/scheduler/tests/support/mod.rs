//! What the engine tests over numbered files share: the files, plans over them, a stage that
//! reads each file's number back, and a drain under the watchdog.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loader_scheduler::{BatchPlan, Config, Engine, SampleInfo, StageError, Summary, WorkItem};
use loader_storage::{DynStorage, from_url};
use loader_testkit::watchdog::within;

/// How long a drain may take before the test fails as hung.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// `count` files named `00000`, `00001`, ..., each holding its number (8 bytes, LE).
pub fn files(count: usize) -> (tempfile::TempDir, DynStorage) {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..count {
        std::fs::write(dir.path().join(format!("{i:05}")), (i as u64).to_le_bytes()).unwrap();
    }
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    (dir, store)
}

/// One epoch over the files in order, in batches of `batch`.
pub fn plans(count: u64, batch: u64) -> impl Iterator<Item = BatchPlan> + Send + 'static {
    let batches = count.div_ceil(batch);
    (0..batches).map(move |b| {
        let items = (b * batch..((b + 1) * batch).min(count))
            .map(|i| WorkItem::object(i, format!("{i:05}")))
            .collect();
        BatchPlan::new(0, b * batch, items, b + 1 == batches)
    })
}

/// Every batch under the watchdog, each sample's bytes checked against its index: the
/// delivered indices in order, the summary, and the requests still in flight after.
pub fn drain(
    store: DynStorage,
    count: u64,
    batch: u64,
    config: Config,
) -> (Vec<u64>, Summary, usize) {
    let stage = Arc::new(|bytes: Bytes, _: &SampleInfo| -> Result<u64, StageError> {
        let raw: [u8; 8] = bytes
            .as_ref()
            .try_into()
            .map_err(|_| "8 bytes".to_string())?;
        Ok(u64::from_le_bytes(raw))
    });
    within(HANG_LIMIT, "an epoch over numbered files", move || {
        let mut engine = Engine::start(store, stage, plans(count, batch), &config).unwrap();
        let mut seen = Vec::new();
        while let Some(batch) = engine.next_blocking() {
            let batch = batch.unwrap();
            assert!(batch.skipped.is_empty());
            for (info, value) in batch.samples {
                assert_eq!(info.index, value, "the sample's bytes are its own");
                seen.push(info.index);
            }
        }
        let metrics = engine.metrics();
        (seen, metrics.summary(), metrics.in_flight())
    })
}
