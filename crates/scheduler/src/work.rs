//! One item's work: fetch its unit, cut its bytes out, run the CPU stage, report.

// An item's error carries its whole `SampleInfo` (key, range, members) so it can name the
// sample; it is as large as the success, and errors are rare: boxing would buy nothing.
#![allow(clippy::result_large_err)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use crate::engine::{Stage, panic_message};
use crate::item::{ItemError, ItemFailure, Member, SampleInfo};
use crate::pool::PoolHandle;
use crate::unit::{FetchContext, Unit, cut_item};

pub(crate) type ItemResult<T> = Result<(SampleInfo, T), ItemError>;

/// Everything an item's work needs, shared by the driver and its tasks.
pub(crate) struct Shared<T> {
    pub(crate) fetch: FetchContext,
    pub(crate) stage: Stage<T>,
    pub(crate) pool: PoolHandle,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) results: mpsc::UnboundedSender<(u64, ItemResult<T>)>,
    pub(crate) cancelled: watch::Receiver<bool>,
}

/// An admitted item: its place in the engine's sequence, what the stage is told, and the
/// request its bytes come from.
pub(crate) struct Job {
    pub(crate) seq: u64,
    pub(crate) info: SampleInfo,
    pub(crate) members: Arc<[Member]>,
    pub(crate) unit: Arc<Unit>,
}

/// The item's bytes (and its members') once its unit is fetched.
async fn fetch<T>(shared: &Shared<T>, job: &mut Job) -> Result<Bytes, ItemFailure> {
    let cx = &shared.fetch;
    let bytes = job.unit.bytes(cx).await.map_err(ItemFailure::Fetch)?;
    let (main, members) = cut_item(&job.unit, cx, &bytes, &job.info.range, &job.members)
        .map_err(ItemFailure::Fetch)?;
    job.info.members = members;
    Ok(main)
}

/// The `Async` strategy's item: the fetch as a future, then the CPU stage on the pool.
pub(crate) async fn fetch_then_decode<T: Send + 'static>(shared: Arc<Shared<T>>, mut job: Job) {
    match fetch(&shared, &mut job).await {
        Ok(bytes) => {
            let worker = Arc::clone(&shared);
            shared.fetch.metrics.cpu_queued();
            shared.pool.execute(move || {
                let result = run_stage(&worker, bytes, job.info);
                // The unit (and its share of the byte budget) lives until the stage is done
                // with the bytes cut out of it.
                drop(job.unit);
                let _ = worker.results.send((job.seq, result));
            });
        }
        Err(failure) => {
            let error = ItemError {
                info: job.info,
                failure,
            };
            let _ = shared.results.send((job.seq, Err(error)));
        }
    }
}

/// The blocking strategies' item, on a pool thread: fetch, then decode, then report. The
/// item is always reported, even if something in it panics, so its batch completes.
pub(crate) fn load_blocking<T>(shared: &Shared<T>, mut job: Job) {
    let info = job.info.clone();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut cancelled = shared.cancelled.clone();
        let fetched = shared.runtime.block_on(async {
            tokio::select! {
                fetched = fetch(shared, &mut job) => fetched,
                // Also when the engine is gone (the sender dropped).
                _ = cancelled.wait_for(|c| *c) => Err(ItemFailure::Cancelled),
            }
        });
        match fetched {
            Ok(bytes) => run_stage(shared, bytes, job.info.clone()),
            Err(failure) => Err(ItemError {
                info: job.info.clone(),
                failure,
            }),
        }
    }))
    .unwrap_or_else(|panic| {
        Err(ItemError {
            info,
            failure: ItemFailure::Panic(panic_message(&*panic)),
        })
    });
    let _ = shared.results.send((job.seq, result));
}

/// The CPU stage, timed, with panics caught so one bad sample cannot take the pool down.
pub(crate) fn run_stage<T>(shared: &Shared<T>, bytes: Bytes, info: SampleInfo) -> ItemResult<T> {
    let _guard = shared.fetch.metrics.decode_started();
    let (started, index) = (Instant::now(), info.index);
    let stage = &shared.stage;
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| stage(bytes, &info)));
    if let Some(trace) = &shared.fetch.trace {
        trace.decode(started, index);
    }
    match outcome {
        Ok(Ok(value)) => Ok((info, value)),
        Ok(Err(e)) => Err(ItemError {
            info,
            failure: ItemFailure::Stage(e),
        }),
        Err(panic) => Err(ItemError {
            info,
            failure: ItemFailure::Panic(panic_message(&*panic)),
        }),
    }
}
