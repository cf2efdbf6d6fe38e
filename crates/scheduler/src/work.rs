//! One item's work: fetch its unit, cut its bytes out, run the CPU stage, report.

// An item's error carries its whole `SampleInfo` (key, range, members) so it can name the
// sample; it is as large as the success, and errors are rare: boxing would buy nothing.
#![allow(clippy::result_large_err)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};

use crate::item::{ItemError, ItemFailure, Member, RecordOf, SampleInfo};
use crate::pool::PoolHandle;
use crate::stage::{Stage, panic_message};
use crate::unit::{FetchContext, Unit, cut_item};

pub(crate) type ItemResult<T> = Result<(SampleInfo, T), ItemError>;

/// Items' results by their sequence number, sent to the driver together.
pub(crate) type Results<T> = Vec<(u64, ItemResult<T>)>;

/// Everything an item's work needs, shared by the driver and its tasks.
pub(crate) struct Shared<T> {
    pub(crate) fetch: FetchContext,
    pub(crate) stage: Stage<T>,
    pub(crate) pool: PoolHandle,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) results: mpsc::UnboundedSender<Results<T>>,
    pub(crate) cancelled: watch::Receiver<bool>,
}

/// An admitted item: its place in the engine's sequence, what the stage is told, and the
/// request its bytes come from.
pub(crate) struct Job {
    pub(crate) seq: u64,
    pub(crate) info: SampleInfo,
    pub(crate) members: Arc<[Member]>,
    pub(crate) record: Option<RecordOf>,
    pub(crate) unit: Arc<Unit>,
}

/// The item's bytes (and its members') once its unit is fetched.
async fn fetch<T>(shared: &Shared<T>, job: &mut Job) -> Result<Bytes, ItemFailure> {
    let cx = &shared.fetch;
    let bytes = job.unit.bytes(cx).await.map_err(ItemFailure::Fetch)?;
    let (main, members, label) = cut_item(
        &job.unit,
        cx,
        &bytes,
        &job.info.range,
        &job.members,
        job.record.as_ref(),
    )
    .map_err(ItemFailure::Fetch)?;
    job.info.members = members;
    if let Some(label) = label {
        job.info.label = label;
    }
    Ok(main)
}

/// The `Async` strategy's run of admitted items (a plan's, or as much of it as the window
/// had room for): their fetches as futures of one task, and what is fetched together handed
/// to the pool together. A task and a pool job per item cost the runtime thread more than
/// the fetch of a cached or in-memory object does; requests still run concurrently.
pub(crate) async fn fetch_then_decode<T: Send + 'static>(shared: Arc<Shared<T>>, jobs: Vec<Job>) {
    let mut fetching: FuturesUnordered<_> = jobs
        .into_iter()
        .map(|mut job| {
            let shared = &shared;
            async move {
                let fetched = fetch(shared, &mut job).await;
                (job, fetched)
            }
        })
        .collect();
    loop {
        // Every answer that is in, without waiting for more.
        let ready = std::future::poll_fn(|cx| {
            let mut ready = Vec::with_capacity(fetching.len());
            while let Poll::Ready(Some(done)) = fetching.poll_next_unpin(cx) {
                ready.push(done);
            }
            if ready.is_empty() && !fetching.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(ready)
            }
        })
        .await;
        if ready.is_empty() {
            return;
        }
        decode_on_pool(&shared, ready);
    }
}

/// Fetched items onto the pool, in as many jobs as it has threads (so a run is decoded in
/// parallel) of at most [`MAX_PER_JOB`] items (so one slow job holds few results back);
/// failed fetches straight to the driver.
fn decode_on_pool<T: Send + 'static>(
    shared: &Arc<Shared<T>>,
    ready: Vec<(Job, Result<Bytes, ItemFailure>)>,
) {
    let mut fetched = Vec::with_capacity(ready.len());
    let mut failed = Vec::new();
    for (job, outcome) in ready {
        match outcome {
            Ok(bytes) => fetched.push((job, bytes)),
            Err(failure) => failed.push((
                job.seq,
                Err(ItemError {
                    info: job.info,
                    failure,
                }),
            )),
        }
    }
    if !failed.is_empty() {
        let _ = shared.results.send(failed);
    }
    if fetched.is_empty() {
        return;
    }
    shared.fetch.metrics.cpu_queued(fetched.len());
    let per_job = fetched
        .len()
        .div_ceil(shared.pool.threads())
        .clamp(1, MAX_PER_JOB);
    let mut fetched = fetched.into_iter().peekable();
    while fetched.peek().is_some() {
        let run: Vec<_> = fetched.by_ref().take(per_job).collect();
        let worker = Arc::clone(shared);
        shared.pool.execute(move || {
            let results: Vec<_> = run
                .into_iter()
                .map(|(job, bytes)| {
                    let result = run_stage(&worker, bytes, job.info);
                    // The unit (and its share of the byte budget) lives until the stage is
                    // done with the bytes cut out of it.
                    drop(job.unit);
                    (job.seq, result)
                })
                .collect();
            let _ = worker.results.send(results);
        });
    }
}

/// Items per pool job at most.
const MAX_PER_JOB: usize = 16;

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
    let _ = shared.results.send(vec![(job.seq, result)]);
}

/// The CPU stage, timed, with panics caught so one bad sample cannot take the pool down.
pub(crate) fn run_stage<T>(shared: &Shared<T>, bytes: Bytes, info: SampleInfo) -> ItemResult<T> {
    let guard = shared.fetch.metrics.decode_started();
    let (started, index) = (guard.started(), info.index);
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
