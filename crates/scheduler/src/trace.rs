//! A Chrome trace of the engine's work: every fetch, every CPU stage, every batch handed
//! over, on a timeline like the paper's plots. Open the file in chrome://tracing or Perfetto.

use std::cell::Cell;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Events kept at most, so a long run cannot grow the trace without bound.
const MAX_EVENTS: usize = 2_000_000;

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A fetch: an async span on its own track (`id` = the item's sequence number).
    Fetch { id: u64 },
    /// A CPU stage run on a pool thread.
    Decode,
    /// A batch entered the ready queue.
    Batch,
    /// The in-flight limit was set (`value`).
    Limit,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    kind: Kind,
    start_us: f64,
    dur_us: f64,
    tid: u64,
    /// The dataset index (or for batches, the epoch position).
    value: u64,
}

/// Collects spans while an engine runs; share it through `Config::trace`.
#[derive(Debug)]
pub struct Trace {
    origin: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }
}

thread_local! {
    static TID: Cell<u64> = const { Cell::new(0) };
}

/// A small stable number per thread, for the trace's lanes.
fn tid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    TID.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

impl Trace {
    /// An empty trace; time 0 is now.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&self, kind: Kind, start: Instant, end: Instant, value: u64) {
        let event = Event {
            kind,
            start_us: start.saturating_duration_since(self.origin).as_secs_f64() * 1e6,
            dur_us: end.saturating_duration_since(start).as_secs_f64() * 1e6,
            tid: tid(),
            value,
        };
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() < MAX_EVENTS {
            events.push(event);
        }
    }

    pub(crate) fn fetch(&self, seq: u64, start: Instant, index: u64) {
        self.push(Kind::Fetch { id: seq }, start, Instant::now(), index);
    }

    pub(crate) fn decode(&self, start: Instant, index: u64) {
        self.push(Kind::Decode, start, Instant::now(), index);
    }

    pub(crate) fn batch(&self, position: u64) {
        let now = Instant::now();
        self.push(Kind::Batch, now, now, position);
    }

    pub(crate) fn limit(&self, limit: usize) {
        let now = Instant::now();
        self.push(Kind::Limit, now, now, limit as u64);
    }

    /// Events recorded so far.
    pub fn len(&self) -> usize {
        self.events.lock().map_or(0, |e| e.len())
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write the Chrome trace-event JSON.
    pub fn write_json(&self, mut out: impl Write) -> std::io::Result<()> {
        let events = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        out.write_all(b"{\"traceEvents\":[\n")?;
        for (i, e) in events.iter().enumerate() {
            let sep = if i + 1 == events.len() { "" } else { "," };
            match e.kind {
                Kind::Fetch { id } => {
                    // Async begin/end pairs: overlapping fetches get tracks of their own.
                    writeln!(
                        out,
                        r#"{{"name":"fetch","cat":"fetch","ph":"b","id":{id},"ts":{:.1},"pid":1,"tid":0,"args":{{"index":{}}}}},"#,
                        e.start_us, e.value
                    )?;
                    writeln!(
                        out,
                        r#"{{"name":"fetch","cat":"fetch","ph":"e","id":{id},"ts":{:.1},"pid":1,"tid":0}}{sep}"#,
                        e.start_us + e.dur_us
                    )?;
                }
                Kind::Decode => writeln!(
                    out,
                    r#"{{"name":"decode","cat":"cpu","ph":"X","ts":{:.1},"dur":{:.1},"pid":1,"tid":{},"args":{{"index":{}}}}}{sep}"#,
                    e.start_us, e.dur_us, e.tid, e.value
                )?,
                Kind::Limit => writeln!(
                    out,
                    r#"{{"name":"in-flight limit","cat":"control","ph":"C","ts":{:.1},"pid":1,"args":{{"limit":{}}}}}{sep}"#,
                    e.start_us, e.value
                )?,
                Kind::Batch => writeln!(
                    out,
                    r#"{{"name":"batch ready","cat":"batch","ph":"i","s":"g","ts":{:.1},"pid":1,"tid":0,"args":{{"position":{}}}}}{sep}"#,
                    e.start_us, e.value
                )?,
            }
        }
        out.write_all(b"]}\n")
    }
}
