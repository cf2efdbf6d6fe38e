//! The upcoming accesses the loader announces: for each entry, the positions in the access
//! sequence where it will be read next, and a clock that follows the reads as they happen.

use std::collections::{HashMap, VecDeque};

use super::entry::EntryId;

/// A next use that will not come (or that no plan announced).
pub(crate) const NEVER: u64 = u64::MAX;

/// How far ahead of the clock a read may be and still count as the announced one: the
/// loader reads ahead of what it delivered (requests in flight, prefetch), and out of
/// order within that window.
const SLACK: u64 = 1 << 14;

/// The announced accesses still to come.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    uses: HashMap<EntryId, VecDeque<u64>>,
    /// The furthest announced position read so far.
    clock: u64,
    /// Where the next announced access goes.
    end: u64,
    /// The last entry announced: consecutive samples of one block are one access, as the
    /// loader reads them with one request.
    last: Option<EntryId>,
}

impl Plan {
    /// Forget what was announced: the loader starts over (a resume, a new pass). Positions
    /// go on from where they were, so ranks computed before stay comparable with new ones.
    pub fn reset(&mut self) {
        self.uses.clear();
        self.last = None;
        self.clock = self.end;
    }

    /// Announce the next access, to `id`.
    pub fn push(&mut self, id: EntryId) {
        if self.last == Some(id) {
            return;
        }
        self.last = Some(id);
        self.uses.entry(id).or_default().push_back(self.end);
        self.end += 1;
    }

    /// The clock: accesses up to here have happened.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// The next position where `id` will be read, [`NEVER`] if none is announced. A
    /// position a little behind the clock is still to come (reads finish out of order);
    /// one far behind was never made as announced and is dropped.
    pub fn next_use(&mut self, id: EntryId) -> u64 {
        let behind = self.clock.saturating_sub(SLACK);
        let Some(queue) = self.uses.get_mut(&id) else {
            return NEVER;
        };
        while queue.front().is_some_and(|&p| p < behind) {
            queue.pop_front();
        }
        match queue.front() {
            Some(&p) => p,
            None => {
                self.uses.remove(&id);
                NEVER
            }
        }
    }

    /// `id` is being read: that is its earliest announced access, if that is near.
    pub fn read(&mut self, id: EntryId) {
        let clock = self.clock;
        let Some(queue) = self.uses.get_mut(&id) else {
            return;
        };
        while queue.front().is_some_and(|&p| p + SLACK < clock) {
            queue.pop_front();
        }
        if let Some(&p) = queue.front()
            && p <= clock.saturating_add(SLACK)
        {
            queue.pop_front();
            self.clock = clock.max(p);
        }
        if queue.is_empty() {
            self.uses.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_move_the_clock_and_next_uses_follow() {
        let mut plan = Plan::default();
        for id in [1, 2, 3, 1, 2, 3] {
            plan.push(id);
        }
        assert_eq!(plan.next_use(1), 0);
        plan.read(1);
        assert_eq!(plan.next_use(1), 3);
        plan.read(2);
        plan.read(3);
        assert_eq!(plan.clock(), 2);
        assert_eq!(plan.next_use(3), 5);
        assert_eq!(plan.next_use(9), NEVER);
        plan.read(1);
        plan.read(2);
        plan.read(3);
        assert_eq!(plan.next_use(1), NEVER);
    }

    #[test]
    fn consecutive_accesses_to_one_block_are_one() {
        let mut plan = Plan::default();
        for id in [7, 7, 7, 8, 7] {
            plan.push(id);
        }
        plan.read(7);
        assert_eq!(plan.next_use(7), 2);
    }
}
