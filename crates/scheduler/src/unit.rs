//! Fetch units: one request that feeds one or many items, its bytes shared and cut out
//! per item without copying, under a byte budget.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use loader_storage::tally::counted_as;
use loader_storage::{DynStorage, Error, ErrorKind};
use tokio::sync::{Notify, OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::hedge::{Hedge, Hedger};
use crate::item::{Chunk, Member, WorkItem};
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
                    crate::engine::panic_message(&*panic)
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

    /// The request, once; `fetch` learns if a cache answered it.
    async fn request(
        &self,
        cx: &FetchContext,
        fetch: &InFlight<'_>,
        repeat: bool,
    ) -> Result<Bytes, Error> {
        let (answer, met) = counted_as(Arc::clone(&cx.metrics.tally), repeat, async {
            match &self.range {
                Some(r) => cx.storage.get_range(&self.key, r.clone()).await,
                None => cx.storage.get(&self.key).await,
            }
        })
        .await;
        if met.cached {
            fetch.served_by_cache();
        }
        answer
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
            Some(hedger) => Box::pin(self.race(cx, hedger, fetch)).await,
        }
    }

    async fn race(
        &self,
        cx: &FetchContext,
        hedger: &Hedger,
        fetch: &InFlight<'_>,
    ) -> Result<Bytes, Error> {
        use futures::stream::{FuturesUnordered, StreamExt};
        use std::time::Instant;

        hedger.sent();
        let throttled = cx.metrics.throttled();
        // Up to three requests for the same bytes: the first; a hedge when it is in the tail
        // (after the quantile, within the budget; looked at once) or has stalled (many
        // times the p99, whatever the budget, unless the store throttles); and one more
        // if both stall. The first answer wins; dropping the others cancels them. Until a hedge
        // goes out only the first is polled, with a timer: the common case allocates
        // nothing more.
        let first = self.request(cx, fetch, false);
        tokio::pin!(first);
        // When each request went out (no allocation: at most three).
        let mut times = [fetch.started(); 3];
        let mut count = 1;
        let mut tail_looked = false;
        // The first request alone until a hedge is due.
        loop {
            match self.next_hedge(cx, hedger, &times[..count], throttled, &mut tail_looked) {
                Next::Send => break,
                Next::Look => continue,
                Next::Wait(wait) => tokio::select! {
                    answer = first.as_mut() => {
                        return self.won(cx, hedger, fetch, &times[..1], answer.map(|b| (0, b)));
                    }
                    () = tokio::time::sleep(wait) => {}
                },
            }
        }
        // Then all of them, until one answers.
        let mut requests = FuturesUnordered::new();
        requests.push(async move { (0usize, first.await) }.boxed());
        let mut first_error: Option<Error> = None;
        let mut send = true;
        let result = loop {
            if std::mem::take(&mut send) && count < times.len() {
                let tag = count;
                times[tag] = Instant::now();
                count += 1;
                requests.push(
                    async move {
                        let _in_flight = cx.metrics.hedge_started();
                        (tag, self.request(cx, fetch, true).await)
                    }
                    .boxed(),
                );
            }
            let wait =
                match self.next_hedge(cx, hedger, &times[..count], throttled, &mut tail_looked) {
                    Next::Send => {
                        send = true;
                        continue;
                    }
                    Next::Look => continue,
                    Next::Wait(wait) => wait,
                };
            tokio::select! {
                answered = requests.next() => match answered {
                    Some((tag, Ok(bytes))) => break Ok((tag, bytes)),
                    Some((_, Err(e))) => {
                        // The first error is the one reported if every request fails.
                        let e = first_error.get_or_insert(e);
                        if requests.is_empty() {
                            break Err(e.clone());
                        }
                    }
                    None => break Err(first_error.take().unwrap_or_else(|| {
                        self.error(cx, ErrorKind::Other, "no request was sent")
                    })),
                },
                () = tokio::time::sleep(wait) => {}
            }
        };
        drop(requests);
        self.won(cx, hedger, fetch, &times[..count], result)
    }

    /// The race's answer: the bytes, with the winner's own latency for the hedger.
    fn won(
        &self,
        cx: &FetchContext,
        hedger: &Hedger,
        fetch: &InFlight<'_>,
        sent: &[std::time::Instant],
        result: Result<(usize, Bytes), Error>,
    ) -> Result<Bytes, Error> {
        result.map(|(tag, bytes)| {
            if tag > 0 {
                cx.metrics.hedge_won();
            }
            // A rescued stall's wait is not a latency of the store: counted, it would raise
            // the p99 and with it the next stall's threshold, round after round. The
            // winning request's own time is.
            if !fetch.cached()
                && let Some(at) = sent.get(tag)
            {
                hedger.answered(at.elapsed());
            }
            bytes
        })
    }

    /// What the race does next, given when its requests went out: send one more now, look
    /// again at once (a tail hedge the budget refused), or wait this long for an answer.
    fn next_hedge(
        &self,
        cx: &FetchContext,
        hedger: &Hedger,
        sent: &[std::time::Instant],
        throttled: u64,
        tail_looked: &mut bool,
    ) -> Next {
        let Some(&last) = sent.last() else {
            return Next::Wait(std::time::Duration::MAX);
        };
        let tail = if *tail_looked || sent.len() > 1 {
            None
        } else {
            hedger.delay()
        };
        let stall = if sent.len() < 3 {
            hedger.stall_after()
        } else {
            None
        };
        let (at, is_stall) = match (tail, stall) {
            (Some(t), Some(s)) if s <= t => (s, true),
            (Some(t), _) => (t, false),
            (None, Some(s)) => (s, true),
            (None, None) => return Next::Wait(std::time::Duration::MAX),
        };
        let elapsed = last.elapsed();
        if elapsed < at {
            // While nothing is known the stall threshold is a guess that the first answers
            // will lower: look again soon.
            let wait = at - elapsed;
            return Next::Wait(if is_stall {
                wait.min(hedger.recheck())
            } else {
                wait
            });
        }
        if is_stall {
            // A store that throttles keeps requests waiting in backoff, not lost: more of
            // them would only add to its load. And a burst of stalls (a hung mount, a
            // network cut) sends a bounded number again at a time.
            let cap = (cx.metrics.in_flight_limit() / 8).max(MIN_STALL_HEDGES);
            if cx.metrics.throttled() > throttled || cx.metrics.hedges_in_flight() >= cap {
                return Next::Wait(hedger.pause());
            }
            // Not tail: a lost response or a dead connection.
            cx.metrics.stall_hedged();
            return Next::Send;
        }
        *tail_looked = true;
        let retries = cx.metrics.tally.retried() + cx.metrics.throttled();
        if hedger.spend(retries) {
            Next::Send
        } else {
            Next::Look
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

/// Stall hedges in flight allowed at least (more under a high in-flight limit: an eighth).
const MIN_STALL_HEDGES: usize = 64;

/// What a race of requests does next.
enum Next {
    /// Send one more request now.
    Send,
    /// Look again at once.
    Look,
    /// Wait this long for an answer, then look again.
    Wait(std::time::Duration),
}

/// Runs of neighbouring ranges of one object in `items` (in plan order) are read in one
/// request each: consecutive ranged items without a chunk of their own whose gap is at most
/// `gap` bytes and whose joint span is at most `max` bytes get a shared chunk.
pub(crate) fn coalesce(items: &mut [WorkItem], gap: u64, max: u64) {
    let mut start = 0;
    while start < items.len() {
        let Some(first) = items[start].span().filter(|_| items[start].chunk.is_none()) else {
            start += 1;
            continue;
        };
        let mut span = first;
        let mut end = start + 1;
        while end < items.len() {
            let next = &items[end];
            let Some(s) = next.span().filter(|_| next.chunk.is_none()) else {
                break;
            };
            let joined = span.start.min(s.start)..span.end.max(s.end);
            let near =
                s.start <= span.end.saturating_add(gap) && s.end.saturating_add(gap) >= span.start;
            if next.key != items[start].key || !near || joined.end - joined.start > max {
                break;
            }
            span = joined;
            end += 1;
        }
        if end - start > 1 {
            for (i, item) in items[start..end].iter_mut().enumerate() {
                item.chunk = Some(Chunk {
                    range: span.clone(),
                    last_use: i == end - start - 1,
                });
            }
        }
        start = end;
    }
}

/// Chunks fetched (or being fetched) that later items of the plan will read, by object
/// and range, oldest first.
#[derive(Default)]
pub(crate) struct KeptChunks {
    units: HashMap<(Arc<str>, u64, u64), Arc<Unit>>,
    order: VecDeque<(Arc<str>, u64, u64)>,
}

/// Kept chunks at most: a plan whose `last_use` flags are missing costs refetches, never
/// unbounded memory.
const MAX_KEPT: usize = 4096;

impl KeptChunks {
    /// The unit an item reads from: its chunk's (shared with the chunk's other items), or
    /// one of its own.
    pub(crate) fn unit_for(&mut self, item: &WorkItem, trace_id: (u64, u64)) -> Arc<Unit> {
        let Some(chunk) = &item.chunk else {
            return Arc::new(Unit::new(Arc::clone(&item.key), item.span(), trace_id));
        };
        let id = (Arc::clone(&item.key), chunk.range.start, chunk.range.end);
        let unit = match self.units.get(&id) {
            Some(unit) => Arc::clone(unit),
            None => {
                let unit = Arc::new(Unit::new(
                    Arc::clone(&item.key),
                    Some(chunk.range.clone()),
                    trace_id,
                ));
                self.units.insert(id.clone(), Arc::clone(&unit));
                self.order.push_back(id.clone());
                while self.units.len() > MAX_KEPT {
                    self.evict_oldest();
                }
                unit
            }
        };
        if chunk.last_use {
            self.units.remove(&id);
        }
        if self.order.len() > 2 * MAX_KEPT {
            let units = &self.units;
            self.order.retain(|id| units.contains_key(id));
        }
        unit
    }

    fn evict_oldest(&mut self) {
        while let Some(id) = self.order.pop_front() {
            if self.units.remove(&id).is_some() {
                return;
            }
        }
    }

    /// Let go of every kept chunk: items already admitted keep theirs alive; later ones
    /// fetch them again.
    pub(crate) fn clear(&mut self) {
        self.units.clear();
        self.order.clear();
    }
}

/// An item's bytes and its members', by name.
pub(crate) type CutItem = (Bytes, Vec<(Arc<str>, Bytes)>);

/// The bytes an item needs, cut out of its unit: its own (a slice) and its members' (copies).
pub(crate) fn cut_item(
    unit: &Unit,
    cx: &FetchContext,
    bytes: &Bytes,
    range: &Option<Range<u64>>,
    members: &[Member],
) -> Result<CutItem, Arc<Error>> {
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
    Ok((main, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranged(key: &str, r: Range<u64>) -> WorkItem {
        WorkItem {
            key: key.into(),
            range: Some(r),
            ..WorkItem::default()
        }
    }

    #[test]
    fn neighbours_of_one_object_share_a_request_others_do_not() {
        let mut items = vec![
            ranged("a", 0..100),
            ranged("a", 150..200),   // gap 50
            ranged("a", 1000..1100), // gap 800: a new run
            ranged("b", 1100..1200), // another object
            WorkItem::object(0, "c"),
            ranged("c", 0..10),
        ];
        coalesce(&mut items, 64, 1 << 20);
        let chunks: Vec<Option<Chunk>> = items.iter().map(|i| i.chunk.clone()).collect();
        let shared = Chunk {
            range: 0..200,
            last_use: false,
        };
        assert_eq!(chunks[0], Some(shared.clone()));
        assert_eq!(
            chunks[1],
            Some(Chunk {
                last_use: true,
                ..shared
            })
        );
        assert!(chunks[2..].iter().all(Option::is_none), "{chunks:?}");
    }

    #[test]
    fn a_run_stops_at_the_size_limit() {
        let mut items: Vec<WorkItem> = (0..10).map(|i| ranged("a", i * 10..i * 10 + 10)).collect();
        coalesce(&mut items, 0, 30);
        let spans: Vec<_> = items
            .iter()
            .map(|i| i.chunk.as_ref().map(|c| c.range.clone()))
            .collect();
        assert_eq!(spans[0], Some(0..30));
        assert_eq!(spans[3], Some(30..60));
        assert_eq!(spans[9], None, "a run of one needs no chunk");
    }

    #[test]
    fn a_chunk_is_one_unit_until_its_last_use() {
        let mut kept = KeptChunks::default();
        let item = |last_use| WorkItem {
            chunk: Some(Chunk {
                range: 0..100,
                last_use,
            }),
            ..ranged("a", 0..10)
        };
        let first = kept.unit_for(&item(false), (0, 0));
        let last = kept.unit_for(&item(true), (1, 1));
        assert!(Arc::ptr_eq(&first, &last));
        let again = kept.unit_for(&item(false), (2, 2));
        assert!(
            !Arc::ptr_eq(&first, &again),
            "after its last use a chunk is fetched anew"
        );
    }
}
