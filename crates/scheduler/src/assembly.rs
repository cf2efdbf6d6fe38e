//! Reassembling batches: admitted items' results, put back in plan order.

use std::collections::VecDeque;

use tokio::sync::OwnedSemaphorePermit;

use crate::config::Order;
use crate::work::ItemResult;

/// What assembly needs to know of a planned batch.
pub(crate) struct Pending {
    pub(crate) epoch: u64,
    pub(crate) position: u64,
    pub(crate) len: usize,
    pub(crate) last_in_epoch: bool,
    pub(crate) covers: u64,
    pub(crate) padding: usize,
}

/// The batches admitted and not yet handed over, with their items' results as they come.
pub(crate) struct Assembly<T> {
    pub(crate) pending: VecDeque<Pending>,
    /// Window permits of admitted items, in admission order.
    pub(crate) permits: VecDeque<OwnedSemaphorePermit>,
    /// `Sampler` order: results by sequence number, from `base` on.
    slots: VecDeque<Option<ItemResult<T>>>,
    base: u64,
    /// `AsCompleted` order: results as they arrived.
    arrived: VecDeque<ItemResult<T>>,
    pub(crate) failures: EpochFailures,
}

/// Items that failed so far in the current epoch, for `Skip { max_failures }`.
#[derive(Debug, Default)]
pub(crate) struct EpochFailures {
    epoch: Option<u64>,
    count: usize,
}

impl EpochFailures {
    /// Count `n` failures of `epoch` (a new epoch counts from zero); the epoch's total.
    pub(crate) fn add(&mut self, epoch: u64, n: usize) -> usize {
        if self.epoch != Some(epoch) {
            *self = Self {
                epoch: Some(epoch),
                count: 0,
            };
        }
        self.count += n;
        self.count
    }
}

impl<T> Default for Assembly<T> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            permits: VecDeque::new(),
            slots: VecDeque::new(),
            base: 0,
            arrived: VecDeque::new(),
            failures: EpochFailures::default(),
        }
    }
}

impl<T> Assembly<T> {
    pub(crate) fn put(&mut self, order: Order, seq: u64, result: ItemResult<T>) {
        match order {
            Order::Sampler => {
                let slot = (seq - self.base) as usize;
                if self.slots.len() <= slot {
                    self.slots.resize_with(slot + 1, || None);
                }
                self.slots[slot] = Some(result);
            }
            Order::AsCompleted => self.arrived.push_back(result),
        }
    }

    /// The front batch's results, if all have arrived.
    pub(crate) fn take_front(&mut self, order: Order) -> Option<(Pending, Vec<ItemResult<T>>)> {
        let n = self.pending.front()?.len;
        let items: Vec<ItemResult<T>> = match order {
            Order::Sampler => {
                if self.slots.len() < n || self.slots.iter().take(n).any(Option::is_none) {
                    return None;
                }
                self.base += n as u64;
                self.slots.drain(..n).flatten().collect()
            }
            // Admission never crosses an epoch boundary in this order, so whatever has
            // arrived belongs to the front batch's epoch.
            Order::AsCompleted => {
                if self.arrived.len() < n {
                    return None;
                }
                self.arrived.drain(..n).collect()
            }
        };
        self.pending.pop_front().map(|p| (p, items))
    }

    /// The window slots of the `n` items of the batch being handed over: they travel with
    /// it and are freed when the consumer drops it.
    pub(crate) fn take_permits(&mut self, n: usize) -> Vec<OwnedSemaphorePermit> {
        let mut taken = Vec::new();
        let mut count = 0;
        while count < n {
            let Some(permit) = self.permits.pop_front() else {
                break;
            };
            count += permit.num_permits();
            taken.push(permit);
        }
        taken
    }
}
