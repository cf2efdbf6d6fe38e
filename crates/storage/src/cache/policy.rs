//! Which entry a full tier lets go, and whether it takes a new one at all: one type per
//! rule behind a narrow trait.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::announced::{Announced, NEVER};
use super::entry::EntryId;

/// How a full cache tier chooses what to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Evict the least recently used entry. The usual rule; on a fresh shuffle every epoch
    /// it keeps the wrong bytes (those read longest ago are as likely to come next).
    Lru,
    /// Fill once, never evict: what is cached first stays. Optimal when every sample is read
    /// once per epoch; not when some are read more often than others.
    PinOnce,
    /// Evict the entry whose next use is furthest away (Belady's rule), from the upcoming
    /// accesses the loader announces, and do not admit an entry needed later than
    /// everything cached. Without an announcement it falls back to LRU.
    #[default]
    Future,
}

impl CachePolicy {
    pub(crate) fn build(self) -> Box<dyn Policy> {
        match self {
            CachePolicy::Lru => Box::<Lru>::default(),
            CachePolicy::PinOnce => Box::new(PinOnce),
            CachePolicy::Future => Box::<Future>::default(),
        }
    }
}

impl std::str::FromStr for CachePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(CachePolicy::Lru),
            "pin" | "pin-once" | "pinonce" => Ok(CachePolicy::PinOnce),
            "future" | "belady" => Ok(CachePolicy::Future),
            other => Err(format!(
                "unknown cache policy {other:?}: expected lru, pin-once or future"
            )),
        }
    }
}

impl std::fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CachePolicy::Lru => "lru",
            CachePolicy::PinOnce => "pin-once",
            CachePolicy::Future => "future",
        })
    }
}

/// The rule of one tier. The tier tells it what it holds; it answers which entries to let
/// go for a new one, or `None` to keep them all and not take the new one.
pub(crate) trait Policy: Send {
    /// `id` entered the tier.
    fn inserted(&mut self, id: EntryId, plan: &mut Announced);
    /// `id`, held by the tier, was read.
    fn read(&mut self, id: EntryId, plan: &mut Announced);
    /// `id` left the tier.
    fn removed(&mut self, id: EntryId);
    /// A read of `id`, held by the tier, was announced.
    fn announced(&mut self, _id: EntryId, _plan: &mut Announced) {}
    /// Entries whose sizes add up to at least `need` bytes, to evict so that `incoming`
    /// fits; `None` if `incoming` should not be admitted.
    fn victims(
        &mut self,
        incoming: EntryId,
        need: u64,
        size_of: &dyn Fn(EntryId) -> u64,
        plan: &mut Announced,
    ) -> Option<Vec<EntryId>>;
}

/// Least recently used first.
#[derive(Default)]
struct Lru {
    tick: u64,
    by_age: BTreeMap<u64, EntryId>,
    age_of: HashMap<EntryId, u64>,
}

impl Lru {
    fn touch(&mut self, id: EntryId) {
        self.removed(id);
        self.tick += 1;
        self.by_age.insert(self.tick, id);
        self.age_of.insert(id, self.tick);
    }
}

impl Policy for Lru {
    fn inserted(&mut self, id: EntryId, _: &mut Announced) {
        self.touch(id);
    }
    fn read(&mut self, id: EntryId, _: &mut Announced) {
        self.touch(id);
    }
    fn removed(&mut self, id: EntryId) {
        if let Some(age) = self.age_of.remove(&id) {
            self.by_age.remove(&age);
        }
    }
    fn victims(
        &mut self,
        _: EntryId,
        need: u64,
        size_of: &dyn Fn(EntryId) -> u64,
        _: &mut Announced,
    ) -> Option<Vec<EntryId>> {
        take_until(self.by_age.values().copied(), need, size_of)
    }
}

/// Admit while there is room, then nothing.
struct PinOnce;

impl Policy for PinOnce {
    fn inserted(&mut self, _: EntryId, _: &mut Announced) {}
    fn read(&mut self, _: EntryId, _: &mut Announced) {}
    fn removed(&mut self, _: EntryId) {}
    fn victims(
        &mut self,
        _: EntryId,
        _: u64,
        _: &dyn Fn(EntryId) -> u64,
        _: &mut Announced,
    ) -> Option<Vec<EntryId>> {
        None
    }
}

/// Belady's rule on the announced plan; least recently used among entries with no
/// announced use.
#[derive(Default)]
struct Future {
    tick: u64,
    /// Ascending by next use, then most recently used first: the last is the one to evict.
    order: BTreeSet<(u64, Reverse<u64>, EntryId)>,
    rank: HashMap<EntryId, (u64, Reverse<u64>)>,
}

impl Future {
    fn place(&mut self, id: EntryId, plan: &mut Announced, touched: bool) {
        let tick = match self.rank.remove(&id) {
            Some((next, tick)) => {
                self.order.remove(&(next, tick, id));
                tick
            }
            None => Reverse(0),
        };
        let tick = if touched {
            self.tick += 1;
            Reverse(self.tick)
        } else {
            tick
        };
        let next = plan.next_use(id);
        self.order.insert((next, tick, id));
        self.rank.insert(id, (next, tick));
    }

    /// Entries ranked by a next use the clock has left far behind were not read then (the
    /// loader served them from a request it had made): look their next use up again.
    fn refresh(&mut self, plan: &mut Announced) {
        let behind = plan.behind();
        while let Some(&(next, _, id)) = self.order.first() {
            if next >= behind {
                break;
            }
            self.place(id, plan, false);
            if self.rank.get(&id).is_some_and(|&(n, _)| n == next) {
                break;
            }
        }
    }
}

impl Policy for Future {
    fn inserted(&mut self, id: EntryId, plan: &mut Announced) {
        self.place(id, plan, true);
    }
    fn read(&mut self, id: EntryId, plan: &mut Announced) {
        self.place(id, plan, true);
    }
    fn removed(&mut self, id: EntryId) {
        if let Some((next, tick)) = self.rank.remove(&id) {
            self.order.remove(&(next, tick, id));
        }
    }
    /// An entry ranked before its reads were announced (found on disk at start, or held
    /// across a resume) moves to its place in the new plan.
    fn announced(&mut self, id: EntryId, plan: &mut Announced) {
        if self.rank.contains_key(&id) {
            self.place(id, plan, false);
        }
    }
    fn victims(
        &mut self,
        incoming: EntryId,
        need: u64,
        size_of: &dyn Fn(EntryId) -> u64,
        plan: &mut Announced,
    ) -> Option<Vec<EntryId>> {
        self.refresh(plan);
        let wanted = plan.next_use(incoming);
        // Evicting an entry needed sooner than the new one would lose more than it gains.
        let candidates = self
            .order
            .iter()
            .rev()
            .map_while(|&(next, _, id)| (next >= wanted || next == NEVER).then_some(id));
        take_until(candidates, need, size_of)
    }
}

/// The first of `ids` whose sizes reach `need`; `None` if they never do.
fn take_until(
    ids: impl Iterator<Item = EntryId>,
    need: u64,
    size_of: &dyn Fn(EntryId) -> u64,
) -> Option<Vec<EntryId>> {
    let mut freed = 0u64;
    let mut out = Vec::new();
    for id in ids {
        if freed >= need {
            break;
        }
        freed = freed.saturating_add(size_of(id));
        out.push(id);
    }
    (freed >= need).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(_: EntryId) -> u64 {
        1
    }

    #[test]
    fn lru_lets_the_oldest_go() {
        let mut plan = Announced::default();
        let mut lru = CachePolicy::Lru.build();
        for id in 1..=3 {
            lru.inserted(id, &mut plan);
        }
        lru.read(1, &mut plan);
        assert_eq!(lru.victims(9, 1, &one, &mut plan), Some(vec![2]));
    }

    #[test]
    fn pin_once_never_evicts() {
        let mut plan = Announced::default();
        let mut pin = CachePolicy::PinOnce.build();
        pin.inserted(1, &mut plan);
        assert_eq!(pin.victims(2, 1, &one, &mut plan), None);
    }

    #[test]
    fn future_evicts_the_furthest_and_rejects_what_comes_last() {
        let mut plan = Announced::default();
        for id in [1, 2, 3, 4, 3, 1, 2] {
            plan.push(id);
        }
        let mut future = CachePolicy::Future.build();
        for id in [1, 2, 3] {
            plan.read(id);
            future.inserted(id, &mut plan);
        }
        // Next uses: 3 at 4, 1 at 5, 2 at 6; 4 is never needed again after position 3.
        plan.read(4);
        assert_eq!(future.victims(4, 1, &one, &mut plan), None);
        // Something needed at once displaces the one needed last.
        let mut plan2 = Announced::default();
        for id in [1, 2, 5, 1, 2] {
            plan2.push(id);
        }
        let mut future = CachePolicy::Future.build();
        for id in [1, 2] {
            plan2.read(id);
            future.inserted(id, &mut plan2);
        }
        assert_eq!(future.victims(5, 1, &one, &mut plan2), Some(vec![2]));
    }

    #[test]
    fn entries_held_before_the_plan_take_their_place_in_it() {
        let mut plan = Announced::default();
        let mut future = CachePolicy::Future.build();
        for id in [1, 2] {
            future.inserted(id, &mut plan);
        }
        plan.reset();
        for id in [3, 1] {
            plan.push(id);
            future.announced(id, &mut plan);
        }
        // 2 is not needed again, 1 is: 2 goes first, and 3 (needed before 1) may come in.
        assert_eq!(future.victims(3, 1, &one, &mut plan), Some(vec![2]));
    }

    #[test]
    fn future_without_a_plan_is_lru() {
        let mut plan = Announced::default();
        let mut future = CachePolicy::Future.build();
        for id in 1..=3 {
            future.inserted(id, &mut plan);
        }
        future.read(1, &mut plan);
        assert_eq!(future.victims(9, 1, &one, &mut plan), Some(vec![2]));
    }
}
