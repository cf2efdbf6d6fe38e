//! What a request met on its way besides its answer. A retry layer hides the throttling
//! answers and failures it retried; a caller that adapts its request rate needs them. The
//! caller runs requests inside [`counted`], and layers [`note`] what they see into the
//! tally of the request running in their task, however deep the stack of wrappers.

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

    fn add(&self, seen: Seen) {
        match seen {
            Seen::Throttled => &self.throttled,
            Seen::Retried => &self.retried,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

tokio::task_local! {
    static TALLY: Arc<RequestTally>;
}

/// Run `request` with what layers see counted into `tally`.
pub async fn counted<F: Future>(tally: Arc<RequestTally>, request: F) -> F::Output {
    TALLY.scope(tally, request).await
}

/// Count `seen` for the request running in this task, if it runs inside [`counted`].
pub fn note(seen: Seen) {
    let _ = TALLY.try_with(|tally| tally.add(seen));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_inside_the_scope_only() {
        let tally = Arc::new(RequestTally::default());
        note(Seen::Throttled); // outside: nowhere to count
        counted(Arc::clone(&tally), async {
            note(Seen::Throttled);
            note(Seen::Retried);
            note(Seen::Retried);
        })
        .await;
        assert_eq!((tally.throttled(), tally.retried()), (1, 2));
    }
}
