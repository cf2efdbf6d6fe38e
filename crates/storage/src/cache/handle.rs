//! [`Cache`]: the handle a loader holds on a cache, to announce its reads, teach it a
//! dataset's objects and read its figures.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Cache {
    /// Announce this process's next reads, in order: `(key, None)` for a whole object,
    /// `(key, Some(range))` for a range. [`CachePolicy::Future`] keeps what is needed soonest.
    pub fn announce<'a>(&self, reads: impl IntoIterator<Item = (&'a str, Option<Range<u64>>)>) {
        self.announce_node(reads.into_iter().map(|(key, range)| (key, range, true)));
    }

    /// Announce the next reads of every process that shares the cache's directory (the
    /// ranks of a node), in the order the node makes them: `(key, range, here)`, `here`
    /// when this process makes the read. The disk tier keeps by the node's reads, the
    /// memory tier (this process's own) by this process's.
    pub fn announce_node<'a>(
        &self,
        reads: impl IntoIterator<Item = (&'a str, Option<Range<u64>>, bool)>,
    ) {
        let (block, store) = (self.shared.block_bytes, self.shared.backend.as_str());
        let ids = reads.into_iter().flat_map(|(key, range, here)| {
            let units: Box<dyn Iterator<Item = Unit>> = match range {
                None => Box::new(std::iter::once(Unit::Whole)),
                Some(range) => Box::new(blocks_of(&range, block).map(Unit::Block)),
            };
            units.map(move |unit| (entry_id(store, key, unit), here))
        });
        // Hashed outside the lock and added a slice at a time: an epoch of a million reads
        // must not hold up the reads being served meanwhile.
        let mut ids = ids.peekable();
        while ids.peek().is_some() {
            let slice: Vec<(EntryId, bool)> = ids.by_ref().take(ANNOUNCE_SLICE).collect();
            let mut state = lock(&self.shared.state);
            let state = &mut *state;
            for (id, here) in slice {
                if here {
                    state.plan.push(id);
                    state.memory.announced(id, &mut state.plan);
                }
                state.node_plan.push(id);
                state.disk.announced(id, &mut state.node_plan);
            }
        }
    }

    /// Forget the announced reads (the reader starts over from another position).
    pub fn forget_plan(&self) {
        let mut state = lock(&self.shared.state);
        state.plan.reset();
        state.node_plan.reset();
    }

    /// What this run knows of these objects (from a listing or an index): entries made
    /// from another size or version are not served, and no HEAD is made for them.
    pub fn learn(&self, objects: impl IntoIterator<Item = ObjectMeta>) {
        let mut state = lock(&self.shared.state);
        for meta in objects {
            state.known.insert(
                meta.key,
                Origin {
                    size: meta.size,
                    version: meta.version,
                },
            );
        }
    }

    /// Block until the entries queued for the disk are written (a process that owns the
    /// directory; otherwise returns at once). Dropping the store does it too.
    pub fn flush(&self) {
        if let Some(writer) = &self.shared.writer {
            writer.flush();
        }
    }

    /// The counters as they are now.
    pub fn snapshot(&self) -> CacheSnapshot {
        lock(&self.shared.state).snapshot(&self.shared.counters)
    }

    /// The totals of every process that shares this cache's directory (the ranks of a
    /// node), this one's as they are now and the others' as they last recorded them;
    /// `None` without a directory.
    pub fn node_snapshot(&self) -> Option<NodeSnapshot> {
        let disk = self.shared.disk.as_ref()?;
        let mine = NodeSnapshot::of(&self.snapshot());
        // Recorded first, so a rank that ends after this one counts it as it ends.
        disk.record(&mine.to_text());
        let mut total = NodeSnapshot::default();
        let mut counted_mine = false;
        for (name, text) in disk.records() {
            if name == disk.name() {
                counted_mine = true;
                total.add_text(&mine.to_text());
            } else {
                total.add_text(&text);
            }
        }
        if !counted_mine {
            total.add_text(&mine.to_text());
        }
        Some(total)
    }

    /// Whether entries outlive this process, so they must be checked against the object.
    pub(super) fn validates(&self) -> bool {
        self.shared.disk.is_some()
    }
}
