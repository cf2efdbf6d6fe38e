//! What the cache is told of the epochs ahead: each rank's reads of the node, in the order
//! they will come.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Reads of one epoch the cache is told about at once, at most.
pub(super) const ANNOUNCE_CAP: usize = 1 << 22;

impl Planner {
    /// Tell `cache` the reads of `epoch` from `from` of this rank and of the other ranks of
    /// its node (at most [`ANNOUNCE_CAP`] in all), as the engines make them: an item each,
    /// or a chunk once per run of its items; the node's ranks batch by batch, as they read
    /// in step.
    pub(super) fn announce(&self, cache: &Cache, epoch: u64, from: u64) {
        let own = match &self.order {
            ReadOrder::Global { stripe, .. } => stripe.rank,
            ReadOrder::Custom(_) => 0,
        };
        let ranks: Vec<usize> = match &self.order {
            ReadOrder::Global { .. } if self.node.contains(&own) => self.node.clone().collect(),
            _ => vec![own],
        };
        let mut plans: Vec<_> = ranks
            .iter()
            .map(|&rank| (rank, self.as_rank(rank).chunked(epoch, from)))
            .collect();
        let mut reads: Vec<(Arc<str>, Option<Range<u64>>, bool)> = Vec::new();
        let mut open: HashMap<(usize, Arc<str>, u64, u64), ()> = HashMap::new();
        let mut looked = 0usize;
        while looked < ANNOUNCE_CAP && !plans.is_empty() {
            plans.retain_mut(|(rank, plans)| {
                let Some(plan) = plans.next() else {
                    return false;
                };
                let (rank, here) = (*rank, *rank == own);
                looked += plan.items.len();
                for item in plan.items {
                    match &item.chunk {
                        Some(chunk) => {
                            let id = (
                                rank,
                                Arc::clone(&item.key),
                                chunk.range.start,
                                chunk.range.end,
                            );
                            if open.insert(id.clone(), ()).is_none() {
                                reads.push((
                                    Arc::clone(&item.key),
                                    Some(chunk.range.clone()),
                                    here,
                                ));
                            }
                            if chunk.last_use {
                                open.remove(&id);
                            }
                        }
                        None => reads.push((Arc::clone(&item.key), item.range.clone(), here)),
                    }
                }
                true
            });
        }
        cache.announce_node(
            reads
                .iter()
                .map(|(key, range, here)| (&**key, range.clone(), *here)),
        );
    }
}
