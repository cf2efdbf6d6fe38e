//! One tier's book-keeping: what it holds, how many bytes, under which budget and rule.
//! No I/O here: the memory tier keeps its bytes in the value, the disk tier a state.

use std::collections::HashMap;

use super::entry::EntryId;
use super::plan::Plan;
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

    /// Whether it holds `id`.
    pub fn contains(&self, id: EntryId) -> bool {
        self.entries.contains_key(&id)
    }

    /// The entry, as a read: the rule learns of it.
    pub fn read(&mut self, id: EntryId, plan: &mut Plan) -> Option<&mut V> {
        let (_, value) = self.entries.get_mut(&id)?;
        self.policy.read(id, plan);
        Some(value)
    }

    /// A read of `id` was announced: if held, the rule may rank it anew.
    pub fn announced(&mut self, id: EntryId, plan: &mut Plan) {
        if self.entries.contains_key(&id) {
            self.policy.announced(id, plan);
        }
    }

    /// The entry, without telling the rule.
    pub fn peek_mut(&mut self, id: EntryId) -> Option<&mut V> {
        self.entries.get_mut(&id).map(|(_, v)| v)
    }

    /// Take `id` of `size` bytes, letting entries go as the rule says.
    pub fn admit(&mut self, id: EntryId, size: u64, value: V, plan: &mut Plan) -> Admission<V> {
        if self.entries.contains_key(&id) || size > self.budget {
            return Admission::Refused;
        }
        let free = self.budget - self.used;
        let mut evicted = Vec::new();
        if size > free {
            let entries = &self.entries;
            let size_of = |id: EntryId| entries.get(&id).map_or(0, |(s, _)| *s);
            let Some(victims) = self.policy.victims(id, size - free, &size_of, plan) else {
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

    /// Let `id` go.
    pub fn remove(&mut self, id: EntryId) -> Option<V> {
        let (size, value) = self.entries.remove(&id)?;
        self.used -= size;
        self.policy.removed(id);
        Some(value)
    }
}
