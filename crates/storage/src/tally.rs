//! What a request met on its way besides its answer. A retry layer hides the throttling
//! answers and failures it retried, a cache that the store was never asked; a caller that
//! adapts its request rate to the store needs both. The caller runs requests inside
//! [`counted`], and layers [`note`] what they see into the tally of the request running in
//! their task, however deep the stack of wrappers.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What layers saw, counted over the requests run inside [`counted`] with this tally.
#[derive(Debug, Default)]
pub struct RequestTally {
    throttled: AtomicU64,
    retried: AtomicU64,
}

/// Something a layer saw while serving a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Seen {
    /// The store answered with throttling (429, 503 SlowDown).
    Throttled,
    /// An attempt failed and was retried.
    Retried,
    /// A cache answered the whole request without asking the store: its latency is not
    /// the store's.
    Cached,
}

/// What one request run inside [`counted`] met, beyond the tally's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Met {
    /// A layer answered it without the store ([`Seen::Cached`]).
    pub cached: bool,
}

impl RequestTally {
    /// Throttling answers so far, retried or not.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Retries so far.
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }
}

/// The request's scope: the shared tally, and what this request alone met.
struct Scope {
    tally: Arc<RequestTally>,
    cached: Cell<bool>,
    /// It asks again for what a request under way asks for (a hedge).
    repeat: bool,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Run `request` with what layers see counted into `tally`; also what it met alone.
pub async fn counted<F: Future>(tally: Arc<RequestTally>, request: F) -> (F::Output, Met) {
    counted_as(tally, false, request).await
}

/// [`counted`], for a request that asks again for what another under way asks for (a
/// hedge): a layer that would join that one ([`is_repeat`]) asks the store anew instead.
pub async fn counted_as<F: Future>(
    tally: Arc<RequestTally>,
    repeat: bool,
    request: F,
) -> (F::Output, Met) {
    let scoped = SCOPE.scope(
        Scope {
            tally,
            cached: Cell::new(false),
            repeat,
        },
        request,
    );
    tokio::pin!(scoped);
    let output = (&mut scoped).await;
    let cached = scoped.take_value().is_some_and(|s| s.cached.get());
    (output, Met { cached })
}

/// Whether the request running in this task repeats one under way ([`counted_as`]): a
/// cache must not hand it the answer of the request it is meant to overtake.
pub fn is_repeat() -> bool {
    SCOPE.try_with(|scope| scope.repeat).unwrap_or(false)
}

/// Count `seen` for the request running in this task, if it runs inside [`counted`].
pub fn note(seen: Seen) {
    let _ = SCOPE.try_with(|scope| {
        let counter = match seen {
            Seen::Throttled => &scope.tally.throttled,
            Seen::Retried => &scope.tally.retried,
            // The request's own, not the tally's.
            Seen::Cached => {
                scope.cached.set(true);
                return;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_inside_the_scope_only() {
        let tally = Arc::new(RequestTally::default());
        note(Seen::Throttled); // outside: nowhere to count
        let ((), met) = counted(Arc::clone(&tally), async {
            note(Seen::Throttled);
            note(Seen::Retried);
            note(Seen::Retried);
        })
        .await;
        assert_eq!((tally.throttled(), tally.retried()), (1, 2));
        assert!(!met.cached);
    }

    #[tokio::test]
    async fn a_cached_answer_is_the_requests_own() {
        let tally = Arc::new(RequestTally::default());
        let (hit, miss) = futures::join!(
            counted(Arc::clone(&tally), async {
                tokio::task::yield_now().await;
                note(Seen::Cached);
            }),
            counted(Arc::clone(&tally), tokio::task::yield_now()),
        );
        assert!(hit.1.cached);
        assert!(!miss.1.cached);
    }
}
