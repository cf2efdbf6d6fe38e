//! Fetch units: one request that feeds one or many items, its bytes shared and cut out
//! per item without copying, under a byte budget.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::FutureExt;
use loader_storage::{DynStorage, Error, ErrorKind, GetOptions, Observer, Served};
use tokio::sync::{Notify, OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::hedge::{Hedge, Hedger};
use crate::item::{Member, Record, RecordOf};
use crate::metrics::{InFlight, Metrics};
use crate::slots::Slots;

/// The byte budget counts in KiB: a semaphore takes at most `u32::MAX` permits at once.
const BUDGET_UNIT: u64 = 1024;

/// What a unit's fetch needs from the engine.
pub(crate) struct FetchContext {
    pub(crate) storage: DynStorage,
    pub(crate) metrics: Arc<Metrics>,
    /// Requests in flight, at most: fixed, or set by the controller.
    pub(crate) slots: Arc<Slots>,
    /// Fetched, undecoded bytes, in [`BUDGET_UNIT`]s; `None` for the blocking strategies.
    /// Their fetches wait on pool threads, and a job queued behind such a wait may hold the
    /// very chunk whose bytes would end it: there the threads and the item window bound
    /// memory instead.
    pub(crate) budget: Option<Arc<Semaphore>>,
    budget_total: u32,
    /// Raised when a fetch waits for the budget: the driver then lets go of the chunks it
    /// keeps for later items, so a budget full of kept chunks cannot stall the loader.
    pub(crate) budget_short: Arc<Notify>,
    pub(crate) trace: Option<Arc<crate::Trace>>,
    /// Hedged requests, when asked for.
    pub(crate) hedger: Option<Hedger>,
}

impl FetchContext {
    pub(crate) fn new(
        storage: DynStorage,
        metrics: Arc<Metrics>,
        max_in_flight: usize,
        max_bytes: Option<u64>,
        trace: Option<Arc<crate::Trace>>,
        hedge: Option<Hedge>,
    ) -> Self {
        let total = max_bytes.map_or(0, |max| {
            u32::try_from(max.div_ceil(BUDGET_UNIT).max(1)).unwrap_or(u32::MAX)
        });
        Self {
            storage,
            metrics,
            slots: Slots::new(max_in_flight),
            budget: max_bytes.map(|_| Arc::new(Semaphore::new(total as usize))),
            budget_total: total,
            budget_short: Arc::new(Notify::new()),
            trace,
            hedger: hedge.map(Hedger::new),
        }
    }
}

/// One request: the whole object, or a range of it.
pub(crate) struct Unit {
    key: Arc<str>,
    range: Option<Range<u64>>,
    /// Trace id and dataset index of the item that made it, for the trace.
    trace_id: (u64, u64),
    fetched: OnceCell<Result<Fetched, Arc<Error>>>,
    /// Its records, for items stored encoded ([`RecordOf`]), decoded by the first of
    /// them to need them.
    records: OnceLock<Result<Arc<[Record]>, Arc<Error>>>,
}

struct Fetched {
    bytes: Bytes,
    /// The unit's share of the byte budget, returned when the last item holding the unit
    /// is done with it.
    _budget: Option<OwnedSemaphorePermit>,
}

impl Unit {
    pub(crate) fn new(key: Arc<str>, range: Option<Range<u64>>, trace_id: (u64, u64)) -> Self {
        Self {
            key,
            range,
            trace_id,
            fetched: OnceCell::new(),
            records: OnceLock::new(),
        }
    }

    /// The unit's bytes, fetched by the first item that asks; the others wait for it. A
    /// failed fetch fails every item of the unit with the same error.
    pub(crate) async fn bytes(&self, cx: &FetchContext) -> Result<Bytes, Arc<Error>> {
        let fetched = self.fetched.get_or_init(|| self.fetch(cx)).await;
        match fetched {
            Ok(f) => Ok(f.bytes.clone()),
            Err(e) => Err(Arc::clone(e)),
        }
    }

    async fn fetch(&self, cx: &FetchContext) -> Result<Fetched, Arc<Error>> {
        let budget = match (&self.range, &cx.budget) {
            (Some(r), Some(budget)) => {
                let want = ((r.end - r.start).div_ceil(BUDGET_UNIT) as u32).min(cx.budget_total);
                let permit = match Arc::clone(budget).try_acquire_many_owned(want) {
                    Ok(p) => Ok(p),
                    Err(_) => {
                        cx.budget_short.notify_one();
                        Arc::clone(budget).acquire_many_owned(want).await
                    }
                };
                // Never closed while the engine lives.
                permit.ok()
            }
            _ => None,
        };
        let Some(_slot) = cx.slots.acquire().await else {
            return Err(Arc::new(self.error(
                cx,
                ErrorKind::Other,
                "the loader stopped",
            )));
        };
        let guard = cx.metrics.fetch_started();
        let started = guard.started();
        let request = self.hedged(cx, &guard);
        // A custom backend's panic is its error naming the key and backend: unwound
        // through the engine it would lose the items and leave their batch waiting.
        let result = match AssertUnwindSafe(request).catch_unwind().await {
            Ok(r) => r,
            Err(panic) => Err(self.error(
                cx,
                ErrorKind::Other,
                &format!(
                    "the backend panicked: {}",
                    crate::stage::panic_message(&*panic)
                ),
            )),
        };
        if let Some(trace) = &cx.trace {
            trace.fetch(self.trace_id.0, started, self.trace_id.1);
        }
        cx.metrics
            .fetch_finished(result.as_ref().err().map(|e| e.kind()));
        let bytes = result.map_err(Arc::new)?;
        cx.metrics.fetched(bytes.len());
        Ok(Fetched {
            bytes,
            _budget: budget,
        })
    }

    /// The request, once; the metrics learn what it met as it happens (a throttled answer
    /// before the retry layer's backoff, so the in-flight limit and the hedger react while
    /// the request still waits), then whatever its result reports beyond that (a layer that
    /// fills [`Served`](loader_storage::Served) but tells no observer); `fetch` learns
    /// whether a cache answered.
    async fn request(
        &self,
        cx: &FetchContext,
        fetch: &InFlight<'_>,
        repeat: bool,
    ) -> Result<Bytes, Error> {
        let seen = Arc::new(Mutex::new(Served::default()));
        let observer = {
            let (metrics, seen) = (Arc::clone(&cx.metrics), Arc::clone(&seen));
            Observer::new(move |fact| {
                metrics.served(fact);
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                *seen = seen.merge(fact);
            })
        };
        let mut options = GetOptions::default().repeat(repeat).observe(observer);
        options.range = self.range.clone();
        let result = cx.storage.get_opts(&self.key, options).await;
        let seen = *seen.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(answer) => {
                cx.metrics.served(answer.served.beyond(seen));
                if answer.served.cached {
                    fetch.served_by_cache();
                }
                Ok(answer.bytes)
            }
            Err(e) => {
                cx.metrics.served(e.served().beyond(seen));
                Err(e)
            }
        }
    }

    /// The request, sent again when it is in the tail (within the budget) or has stalled;
    /// the first answer wins, and dropping the others cancels them. A hedge takes no slot
    /// of the in-flight limit (the budget and a cap of stall hedges in flight bound them):
    /// behind a saturated limit, a stalled request would otherwise never be hedged.
    async fn hedged(&self, cx: &FetchContext, fetch: &InFlight<'_>) -> Result<Bytes, Error> {
        match &cx.hedger {
            None => self.request(cx, fetch, false).await,
            // Boxed: inline, the race's timer and second request would triple the size of
            // every item's future, hedged or not, and each is moved and allocated per item.
            Some(hedger) => {
                let request = |repeat| self.request(cx, fetch, repeat);
                let none_sent = || self.error(cx, ErrorKind::Other, "no request was sent");
                Box::pin(hedger.race(&cx.metrics, fetch, request, none_sent)).await
            }
        }
    }

    fn error(&self, cx: &FetchContext, kind: ErrorKind, message: &str) -> Error {
        Error::new(kind, cx.storage.name(), &*self.key, message)
    }

    /// The bytes of `range` (of the object) out of this unit's `bytes`, without a copy.
    pub(crate) fn cut(
        &self,
        cx: &FetchContext,
        bytes: &Bytes,
        range: &Range<u64>,
    ) -> Result<Bytes, Arc<Error>> {
        let base = self.range.as_ref().map_or(0, |r| r.start);
        let inside = range.start >= base && range.end >= range.start;
        let (from, to) = if inside {
            (range.start - base, range.end - base)
        } else {
            (0, u64::MAX)
        };
        if to > bytes.len() as u64 {
            return Err(Arc::new(self.error(
                cx,
                ErrorKind::Other,
                &format!(
                    "bytes {}..{} are past the end of the object ({} bytes read from offset \
                     {base}): the object is shorter than its index says; was it replaced?",
                    range.start,
                    range.end,
                    bytes.len()
                ),
            )));
        }
        Ok(bytes.slice(from as usize..to as usize))
    }
}

/// An item's bytes, its members' by name, and its label when stored with it.
pub(crate) type CutItem = (Bytes, Vec<(Arc<str>, Bytes)>, Option<crate::Label>);

impl Unit {
    /// The records of `range` (the item's span), decoded once per unit when the unit is
    /// that span, and for the item alone when the unit is larger (a coalesced request).
    fn records(
        &self,
        cx: &FetchContext,
        bytes: &Bytes,
        range: &Range<u64>,
        of: &RecordOf,
    ) -> Result<Arc<[Record]>, Arc<Error>> {
        let decode = || {
            let own = self.cut(cx, bytes, range)?;
            // A source's decoder is code of its own over bytes from storage: its panic is
            // this span's error, never the end of the loader.
            let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                of.records.decode(&self.key, range, own)
            }))
            .unwrap_or_else(|panic| {
                Err(format!(
                    "decoding it panicked: {}",
                    crate::stage::panic_message(&*panic)
                ))
            });
            decoded.map(Arc::from).map_err(|cause| {
                Arc::new(self.error(
                    cx,
                    ErrorKind::Other,
                    &format!("bytes {}..{}: {cause}", range.start, range.end),
                ))
            })
        };
        if self.range.as_ref() == Some(range) {
            self.records.get_or_init(decode).clone()
        } else {
            decode()
        }
    }
}

/// The bytes an item needs, cut out of its unit: its own (a slice) and its members' (copies),
/// or, for an item stored encoded, its record's.
pub(crate) fn cut_item(
    unit: &Unit,
    cx: &FetchContext,
    bytes: &Bytes,
    range: &Option<Range<u64>>,
    members: &[Member],
    record: Option<&RecordOf>,
) -> Result<CutItem, Arc<Error>> {
    if let Some(of) = record {
        let Some(range) = range else {
            return Err(Arc::new(unit.error(
                cx,
                ErrorKind::Other,
                "a sample stored encoded has no byte range to decode",
            )));
        };
        let records = unit.records(cx, bytes, range, of)?;
        let fail = |message: String| {
            Arc::new(unit.error(
                cx,
                ErrorKind::Other,
                &format!("bytes {}..{}: {message}", range.start, range.end),
            ))
        };
        let Some(record) = records.get(of.slot as usize) else {
            return Err(fail(format!(
                "record {} asked for, but the span decodes to {} records: was the object \
                 replaced since it was indexed?",
                of.slot,
                records.len()
            )));
        };
        let Some(main) = record.bytes.clone() else {
            return Err(fail(format!(
                "record {} has no value (it is null)",
                of.slot
            )));
        };
        return Ok((main, record.members.clone(), record.label.clone()));
    }
    let main = match range {
        Some(r) => unit.cut(cx, bytes, r)?,
        None => bytes.clone(),
    };
    // Members are copied out: they ride with the sample to the collate, and a slice would
    // keep the whole chunk (4 MiB) alive until the last of its samples is collated. The
    // main bytes stay a slice: the CPU stage drops them as soon as it is done.
    let members = members
        .iter()
        .map(|m| {
            let cut = unit.cut(cx, bytes, &m.range)?;
            Ok((Arc::clone(&m.name), Bytes::copy_from_slice(&cut)))
        })
        .collect::<Result<Vec<_>, Arc<Error>>>()?;
    Ok((main, members, None))
}
