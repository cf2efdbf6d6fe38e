//! Chunks kept for the later items of a plan that read them, bounded.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::item::WorkItem;
use crate::unit::Unit;

/// Chunks fetched (or being fetched) that later items of the plan will read, by object
/// and range, oldest first.
#[derive(Default)]
pub(crate) struct KeptChunks {
    units: HashMap<(Arc<str>, u64, u64), Arc<Unit>>,
    order: VecDeque<(Arc<str>, u64, u64)>,
}

/// Kept chunks at most: a plan whose `last_use` flags are missing costs refetches, never
/// unbounded memory.
const MAX_KEPT: usize = 4096;

impl KeptChunks {
    /// The unit an item reads from: its chunk's (shared with the chunk's other items), or
    /// one of its own.
    pub(crate) fn unit_for(&mut self, item: &WorkItem, trace_id: (u64, u64)) -> Arc<Unit> {
        let Some(chunk) = &item.chunk else {
            return Arc::new(Unit::new(Arc::clone(&item.key), item.span(), trace_id));
        };
        let id = (Arc::clone(&item.key), chunk.range.start, chunk.range.end);
        let unit = match self.units.get(&id) {
            Some(unit) => Arc::clone(unit),
            None => {
                let unit = Arc::new(Unit::new(
                    Arc::clone(&item.key),
                    Some(chunk.range.clone()),
                    trace_id,
                ));
                self.units.insert(id.clone(), Arc::clone(&unit));
                self.order.push_back(id.clone());
                while self.units.len() > MAX_KEPT {
                    self.evict_oldest();
                }
                unit
            }
        };
        if chunk.last_use {
            self.units.remove(&id);
        }
        if self.order.len() > 2 * MAX_KEPT {
            let units = &self.units;
            self.order.retain(|id| units.contains_key(id));
        }
        unit
    }

    fn evict_oldest(&mut self) {
        while let Some(id) = self.order.pop_front() {
            if self.units.remove(&id).is_some() {
                return;
            }
        }
    }

    /// Let go of every kept chunk: items already admitted keep theirs alive; later ones
    /// fetch them again.
    pub(crate) fn clear(&mut self) {
        self.units.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::Chunk;

    #[test]
    fn a_chunk_is_one_unit_until_its_last_use() {
        let mut kept = KeptChunks::default();
        let item = |last_use| WorkItem {
            chunk: Some(Chunk {
                range: 0..100,
                last_use,
            }),
            ..WorkItem::ranged("a", 0..10)
        };
        let first = kept.unit_for(&item(false), (0, 0));
        let last = kept.unit_for(&item(true), (1, 1));
        assert!(Arc::ptr_eq(&first, &last));
        let again = kept.unit_for(&item(false), (2, 2));
        assert!(
            !Arc::ptr_eq(&first, &again),
            "after its last use a chunk is fetched anew"
        );
    }
}
