//! Request slots: a limit on requests in flight that can be raised and lowered while
//! requests hold slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// The in-flight limit. Lowering it below the slots taken forgets slots as they come back
/// (a debt), so no request is cancelled to shrink it.
#[derive(Debug)]
pub(crate) struct Slots {
    sem: Arc<Semaphore>,
    limit: AtomicUsize,
    /// Slots to forget as they come back.
    debt: AtomicUsize,
    /// Requests that found every slot taken and waited: the limit was binding.
    waited: AtomicU64,
}

/// One request's slot, given back (or forgotten, while the limit is being lowered) on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Slots {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            sem: Arc::new(Semaphore::new(limit)),
            limit: AtomicUsize::new(limit),
            debt: AtomicUsize::new(0),
            waited: AtomicU64::new(0),
        })
    }

    /// A slot, waiting while all are taken; `None` once the engine is stopping.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Option<Slot> {
        let permit = match Arc::clone(&self.sem).try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::NoPermits) => {
                self.waited.fetch_add(1, Ordering::Relaxed);
                Arc::clone(&self.sem).acquire_owned().await.ok()?
            }
            Err(TryAcquireError::Closed) => return None,
        };
        Some(Slot {
            permit: Some(permit),
            slots: Arc::clone(self),
        })
    }

    /// Requests that have had to wait for a slot so far.
    pub(crate) fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Set the limit. Only one caller (the controller) resizes.
    pub(crate) fn resize(&self, limit: usize) {
        let old = self.limit.swap(limit, Ordering::Relaxed);
        if limit > old {
            let mut grow = limit - old;
            // Slots still owed from a lowering are kept rather than forgotten later.
            let owed = self
                .debt
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                    Some(d.saturating_sub(grow))
                })
                .unwrap_or(0);
            grow -= owed.min(grow);
            self.sem.add_permits(grow);
        } else {
            let shrink = old - limit;
            let forgotten = self.sem.forget_permits(shrink);
            self.debt.fetch_add(shrink - forgotten, Ordering::Relaxed);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let owed = self
            .slots
            .debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| d.checked_sub(1));
        if owed.is_ok()
            && let Some(permit) = self.permit.take()
        {
            permit.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn lowering_below_the_taken_slots_forgets_them_as_they_return() {
        rt().block_on(async {
            let slots = Slots::new(4);
            let mut held = Vec::new();
            for _ in 0..4 {
                held.push(slots.acquire().await.expect("a slot"));
            }
            slots.resize(2);
            held.truncate(1); // three come back: two are forgotten, one is free
            assert_eq!(slots.sem.available_permits(), 1);
            drop(held);
            assert_eq!(slots.sem.available_permits(), 2);
            slots.resize(5);
            assert_eq!(slots.sem.available_permits(), 5);
            assert_eq!(slots.waited(), 0);
        });
    }

    #[test]
    fn raising_while_in_debt_pays_the_debt_first() {
        rt().block_on(async {
            let slots = Slots::new(3);
            let held: Vec<_> = [
                slots.acquire().await,
                slots.acquire().await,
                slots.acquire().await,
            ]
            .into_iter()
            .flatten()
            .collect();
            slots.resize(1); // owes 2
            slots.resize(2); // owes 1
            drop(held); // one forgotten, two free
            assert_eq!(slots.sem.available_permits(), 2);
            assert_eq!(slots.limit.load(Ordering::Relaxed), 2);
        });
    }
}
