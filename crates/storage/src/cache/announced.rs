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
pub(crate) struct Announced {
    uses: HashMap<EntryId, VecDeque<u64>>,
    /// The furthest announced position read so far.
    clock: u64,
    /// Where the next announced access goes.
    end: u64,
    /// The last entry announced: consecutive samples of one block are one access, as the
    /// loader reads them with one request.
    last: Option<EntryId>,
    /// For a plan of several processes' reads: how this one's reads move through it.
    trail: Option<Trail>,
}

/// How a process's own reads move through a plan that holds other processes' reads too,
/// which it never sees: theirs are taken as made once this one's clock is past them by
/// more than the reads it makes out of order, and by some of their own.
#[derive(Debug, Default, Clone, Copy)]
struct Trail {
    /// How far behind the clock this process's reads land (a decaying maximum).
    spread: u64,
    /// Positions between two of this process's reads (a running mean): the node's ranks.
    stride: u64,
    last: u64,
}

impl Announced {
    /// A plan of the reads of several processes in step (the ranks of a node), of which
    /// this one reads some.
    pub fn shared() -> Announced {
        Announced {
            trail: Some(Trail::default()),
            ..Announced::default()
        }
    }

    /// Positions before this one are past: never read as announced, or read by another
    /// process.
    pub fn behind(&self) -> u64 {
        let slack = match self.trail {
            None => SLACK,
            Some(t) => (2 * t.spread + 8 * t.stride + 16).min(SLACK),
        };
        self.clock.saturating_sub(slack)
    }

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

    /// The next position where `id` will be read, [`NEVER`] if none is announced. A
    /// position a little behind the clock is still to come (reads finish out of order);
    /// one far behind was never made as announced and is dropped.
    pub fn next_use(&mut self, id: EntryId) -> u64 {
        let behind = self.behind();
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
        let (clock, behind) = (self.clock, self.behind());
        let Some(queue) = self.uses.get_mut(&id) else {
            return;
        };
        // Uses left behind (another process's, in a shared plan) are not this read's.
        while queue.front().is_some_and(|&p| p < behind) {
            queue.pop_front();
        }
        if let Some(&p) = queue.front()
            && p <= clock.saturating_add(SLACK)
        {
            queue.pop_front();
            self.clock = clock.max(p);
            if let Some(t) = &mut self.trail {
                t.spread = (t.spread - t.spread / 32).max(clock.saturating_sub(p));
                if p > t.last {
                    let step = (p - t.last).min(SLACK);
                    t.stride = (t.stride * 7 + step).div_ceil(8);
                    t.last = p;
                }
            }
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
        let mut plan = Announced::default();
        for id in [1, 2, 3, 1, 2, 3] {
            plan.push(id);
        }
        assert_eq!(plan.next_use(1), 0);
        plan.read(1);
        assert_eq!(plan.next_use(1), 3);
        plan.read(2);
        plan.read(3);
        assert_eq!(plan.clock, 2);
        assert_eq!(plan.next_use(3), 5);
        assert_eq!(plan.next_use(9), NEVER);
        plan.read(1);
        plan.read(2);
        plan.read(3);
        assert_eq!(plan.next_use(1), NEVER);
    }

    #[test]
    fn a_shared_plan_lets_other_processes_reads_pass_behind_its_clock() {
        let mut plan = Announced::shared();
        // Two processes in step; this one reads the even positions. Entry 100 + i is read
        // by the other one at 2i + 1, and again by this one much later.
        for i in 0..200u128 {
            plan.push(i);
            plan.push(100_000 + i);
        }
        for i in 0..200u128 {
            plan.push(100_000 + i);
        }
        for i in 0..150u128 {
            plan.read(i);
        }
        // Read by the other process long ago: its next use is this one's, later.
        assert_eq!(plan.next_use(100_000), 400);
        // Near the clock: still to come.
        assert_eq!(plan.next_use(100_149), 299);
        let mut own = Announced::default();
        own.push(1);
        own.push(2);
        own.read(2);
        assert_eq!(
            own.next_use(1),
            0,
            "a plan of one process waits for its late reads"
        );
    }

    #[test]
    fn consecutive_accesses_to_one_block_are_one() {
        let mut plan = Announced::default();
        for id in [7, 7, 7, 8, 7] {
            plan.push(id);
        }
        plan.read(7);
        assert_eq!(plan.next_use(7), 2);
    }
}
