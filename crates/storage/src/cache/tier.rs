//! One tier's book-keeping: what it holds, how many bytes, under which budget and rule.
//! No I/O here: the memory tier keeps its bytes in the value, the disk tier a state.

use std::collections::HashMap;

use super::announced::Announced;
use super::entry::EntryId;
use super::policy::{CachePolicy, Policy};

/// What a tier holds, within `budget` bytes.
pub(crate) struct Tier<V> {
    budget: u64,
    used: u64,
    entries: HashMap<EntryId, (u64, V)>,
    policy: Box<dyn Policy>,
}

/// The answer to "take this entry".
pub(crate) enum Admission<V> {
    /// Taken; these entries were let go to make room.
    Taken(Vec<(EntryId, V)>),
    /// Not taken: it does not fit, or the rule keeps what is held.
    Refused,
}

impl<V> Tier<V> {
    pub fn new(budget: u64, policy: CachePolicy) -> Self {
        Self {
            budget,
            used: 0,
            entries: HashMap::new(),
            policy: policy.build(),
        }
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The size `id` is held at.
    pub fn size_of(&self, id: EntryId) -> Option<u64> {
        self.entries.get(&id).map(|(size, _)| *size)
    }

    /// Whether it holds `id`.
    pub fn contains(&self, id: EntryId) -> bool {
        self.entries.contains_key(&id)
    }

    /// The entry, as a read: the rule learns of it.
    pub fn read(&mut self, id: EntryId, plan: &mut Announced) -> Option<&mut V> {
        let (_, value) = self.entries.get_mut(&id)?;
        self.policy.read(id, plan);
        Some(value)
    }

    /// A read of `id` was announced: if held, the rule may rank it anew.
    pub fn announced(&mut self, id: EntryId, plan: &mut Announced) {
        if self.entries.contains_key(&id) {
            self.policy.announced(id, plan);
        }
    }

    /// The entry, without telling the rule.
    pub fn peek_mut(&mut self, id: EntryId) -> Option<&mut V> {
        self.entries.get_mut(&id).map(|(_, v)| v)
    }

    /// Take `id` of `size` bytes, letting entries go as the rule says.
    pub fn admit(
        &mut self,
        id: EntryId,
        size: u64,
        value: V,
        plan: &mut Announced,
    ) -> Admission<V> {
        if self.entries.contains_key(&id) || size > self.budget {
            return Admission::Refused;
        }
        // Another process sharing the directory may have filled it to a larger budget of its
        // own: the smaller one is kept as entries come in.
        let need = (self.used + size).saturating_sub(self.budget);
        let mut evicted = Vec::new();
        if need > 0 {
            let entries = &self.entries;
            let size_of = |id: EntryId| entries.get(&id).map_or(0, |(s, _)| *s);
            let Some(victims) = self.policy.victims(id, need, &size_of, plan) else {
                return Admission::Refused;
            };
            for victim in victims {
                if let Some(value) = self.remove(victim) {
                    evicted.push((victim, value));
                }
            }
        }
        self.used += size;
        self.entries.insert(id, (size, value));
        self.policy.inserted(id, plan);
        Admission::Taken(evicted)
    }

    /// Hold `id` of `size` bytes whatever the budget: another process put it there.
    pub fn insert(&mut self, id: EntryId, size: u64, value: V, plan: &mut Announced) {
        if let Some((old, _)) = self.entries.insert(id, (size, value)) {
            self.used = self.used.saturating_sub(old);
        }
        // Sizes come from a file other processes write: a damaged one must not overflow.
        self.used = self.used.saturating_add(size);
        self.policy.inserted(id, plan);
    }

    /// Entries to let go, as the rule ranks them, until the tier is within its budget.
    pub fn over_budget(&mut self, plan: &mut Announced) -> Vec<EntryId> {
        let need = self.used.saturating_sub(self.budget);
        if need == 0 {
            return Vec::new();
        }
        let entries = &self.entries;
        let size_of = |id: EntryId| entries.get(&id).map_or(0, |(s, _)| *s);
        // For an entry no plan names; a rule that keeps everything for it (entries all
        // needed) still lets go of enough.
        self.policy
            .victims(EntryId::MAX, need, &size_of, plan)
            .unwrap_or_else(|| {
                let mut freed = 0;
                self.entries
                    .iter()
                    .take_while(|(_, (size, _))| {
                        let more = freed < need;
                        freed = freed.saturating_add(*size);
                        more
                    })
                    .map(|(&id, _)| id)
                    .collect()
            })
    }

    /// The entries held and their sizes.
    pub fn entries(&self) -> impl Iterator<Item = (EntryId, u64)> + '_ {
        self.entries.iter().map(|(&id, &(size, _))| (id, size))
    }

    /// Let everything go.
    pub fn clear(&mut self) {
        for id in self.entries.keys().copied().collect::<Vec<_>>() {
            self.remove(id);
        }
    }

    /// Let `id` go.
    pub fn remove(&mut self, id: EntryId) -> Option<V> {
        let (size, value) = self.entries.remove(&id)?;
        self.used = self.used.saturating_sub(size);
        self.policy.removed(id);
        Some(value)
    }
}
