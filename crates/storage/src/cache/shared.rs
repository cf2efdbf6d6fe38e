//! What one process's reads share: where each unit's bytes are found (memory, the
//! writer's queue, the directory), the claims a read takes, and keeping what was fetched.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The claims one read took in the directory: let go when it is dropped (the read done,
/// failed or cancelled), except those a flight of this process is fetching (its end lets
/// them go, or hands them to the writer).
pub(super) struct Claimed {
    pub(super) shared: Arc<Shared>,
    pub(super) ids: Vec<EntryId>,
}

impl Claimed {
    /// Claim `id` for this read; true if this process holds it now (this read, another read's
    /// flight, or no claim to be had: a full disk), false if another process does.
    pub(super) fn take(&mut self, disk: &Disk, id: EntryId) -> bool {
        // Flights before claims, everywhere both are held.
        let flights = lock(&self.shared.flights);
        let mut claims = lock(&self.shared.claims);
        if claims.contains_key(&id) || flights.contains_key(&id) {
            return true;
        }
        match disk.claim(id) {
            Ok(Some(claim)) => {
                claims.insert(id, claim);
                self.ids.push(id);
                true
            }
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// Let go of this read's claims not taken on by a flight.
    pub(super) fn release(&mut self) {
        let flights = lock(&self.shared.flights);
        let mut claims = lock(&self.shared.claims);
        for id in self.ids.drain(..) {
            if !flights.contains_key(&id) {
                claims.remove(&id);
            }
        }
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        self.release();
    }
}

/// Where the bytes of one unit of a read come from.
pub(super) enum Where {
    Have(Bytes),
    /// In the writer's queue (its file not yet written): a disk hit when read.
    Queued(Bytes),
    Disk,
    Fetch,
}

/// How [`CacheStore::fetch`] gets one unit: from a request under way, from a tier that got
/// it meanwhile, or from its file.
pub(super) enum Wait {
    Flight(Flight),
    /// Where in a tier since the caller looked: in memory (`false`) or the writer's
    /// queue (`true`).
    Have(Bytes, bool),
    Disk,
}

/// `units` (sorted, as a read's are) cut into runs that one request each can fetch: blocks
/// that follow each other, and a whole object alone.
pub(super) fn runs(units: &[(EntryId, Unit)]) -> Vec<&[(EntryId, Unit)]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=units.len() {
        let joined = i < units.len()
            && matches!((units[i - 1].1, units[i].1), (Unit::Block(a), Unit::Block(b)) if b == a + 1);
        if !joined {
            runs.push(&units[start..i]);
            start = i;
        }
    }
    runs
}

impl Shared {
    /// Look `ids` up, as reads: hits from memory (or the writer's queue), the rest marked
    /// for the disk or the store.
    pub(super) fn look_up(&self, ids: &[EntryId]) -> Vec<Where> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let dir = self.disk.is_some();
        ids.iter()
            .map(|&id| {
                state.plan.read(id);
                state.node_plan.read(id);
                if let Some(bytes) = state.memory.read(id, &mut state.plan) {
                    Counters::add(&self.counters.memory_hits, 1);
                    return Where::Have(bytes.clone());
                }
                // Told to the rule whoever wrote it; looked for by name even when the ledger
                // was not followed since another process wrote it.
                state.disk.read(id, &mut state.node_plan);
                if let Some(bytes) = state.queued.get(&id) {
                    Counters::add(&self.counters.disk_hits, 1);
                    return Where::Have(bytes.clone());
                }
                // A file found bad is not read again until the writer replaced it.
                if dir && !state.deleting.contains(&id) {
                    Where::Disk
                } else {
                    Where::Fetch
                }
            })
            .collect()
    }

    /// Which of `ids` a tier holds now: a look, not a read (no hit counted, the rule and
    /// the plan untouched).
    pub(super) fn peek(&self, ids: &[EntryId]) -> Vec<Where> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        ids.iter()
            .map(|&id| {
                if let Some(bytes) = state.memory.peek_mut(id) {
                    return Where::Have(bytes.clone());
                }
                if let Some(bytes) = state.queued.get(&id) {
                    return Where::Queued(bytes.clone());
                }
                if state.disk.contains(id)
                    && !state.deleting.contains(&id)
                    && self.disk.as_ref().is_some_and(|d| d.exists(id))
                {
                    Where::Disk
                } else {
                    Where::Fetch
                }
            })
            .collect()
    }

    /// Read entries from their files, off the runtime; `None` where the file is missing,
    /// corrupt or stale (then it is dropped).
    pub(super) async fn read_disk(
        self: &Arc<Self>,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<Origin>,
    ) -> Vec<Option<Bytes>> {
        let Some(disk) = self.disk.clone() else {
            return vec![None; units.len()];
        };
        let (key_owned, wanted) = (key.to_owned(), units.clone());
        let origin_of = origin.clone();
        // Which write of each entry this read sees: a bad file found after a newer write
        // replaced it is that write's good file's predecessor, not the entry's state.
        let seen: Vec<u64> = {
            let state = lock(&self.state);
            units
                .iter()
                .map(|(id, _)| state.rewrites.get(id).copied().unwrap_or(0))
                .collect()
        };
        let read = tokio::task::spawn_blocking(move || {
            wanted
                .iter()
                .map(|&(id, unit)| {
                    // A file there but unreadable (permissions, a bad sector) is bad too:
                    // taken for missing, it would be chosen again and again.
                    let file = match disk.read(id) {
                        Ok(file) => file?,
                        Err(_) => return Some(Err(Rejected::Other)),
                    };
                    Some(match &origin_of {
                        Some(origin) => decode(file, &key_owned, unit, origin),
                        None => Err(Rejected::Stale),
                    })
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|_| vec![None; units.len()]);
        let mut out = Vec::with_capacity(units.len());
        let mut dropped = Vec::new();
        for (((id, _), result), seen) in units.iter().zip(read).zip(seen) {
            match result {
                Some(Ok(payload)) => {
                    Counters::add(&self.counters.disk_hits, 1);
                    out.push(Some(payload));
                }
                Some(Err(why)) => {
                    let counter = match why {
                        Rejected::Stale => &self.counters.stale,
                        Rejected::Corrupt(_) | Rejected::Other => &self.counters.corrupt,
                    };
                    dropped.push((*id, Some(counter), seen));
                    out.push(None);
                }
                None => {
                    dropped.push((*id, None, seen));
                    out.push(None);
                }
            }
        }
        if !dropped.is_empty() {
            let mut state = lock(&self.state);
            for (id, counter, seen) in dropped {
                if state.rewrites.get(&id).copied().unwrap_or(0) != seen {
                    // Written again since this read: the file there now is not the one
                    // found bad, neither counted nor deleted.
                    continue;
                }
                // Readers racing on one bad file each find it bad; the one that drops it
                // counts it, so the counter counts files, not readers. A missing file is
                // another process's eviction, or a write a kill cut short: fetched again,
                // and written again if the ledger still counts it.
                let Some(counter) = counter else { continue };
                if state.found_bad.insert(id) {
                    Counters::add(counter, 1);
                }
                if state.deleting.insert(id)
                    && !self
                        .writer
                        .as_ref()
                        .is_some_and(|w| w.send(Job::Delete(id)))
                {
                    state.deleting.remove(&id);
                }
            }
        }
        // Served from disk: worth keeping in memory if the memory tier's rule says so.
        for ((id, _), payload) in units.iter().zip(&out) {
            if let Some(payload) = payload {
                self.keep_in_memory(*id, payload, false);
            }
        }
        out
    }

    /// Drop every entry of `key` (an object of `size` bytes): it was rewritten, and blocks
    /// of the old version must not meet blocks of the new one in a read. Disk entries carry
    /// their version and would be refused anyway; they go too, to free their space.
    pub(super) fn forget_object(&self, key: &str, size: u64) {
        let units = std::iter::once(Unit::Whole)
            .chain(blocks_of(&(0..size), self.block_bytes).map(Unit::Block));
        let mut flights = lock(&self.flights);
        let mut state = lock(&self.state);
        for unit in units {
            let id = entry_id(&self.backend, key, unit);
            // A fetch under way for the old version is not joined by the reads of the new.
            flights.remove(&id);
            state.memory.remove(id);
            state.queued.remove(&id);
            if state.disk.contains(id)
                && let Some(w) = &self.writer
            {
                w.send(Job::Delete(id));
            }
        }
    }

    /// Keep `bytes` in memory if the rule takes them. `copy`: they are a slice of a larger
    /// response, which a kept entry must not pin; copied only once the tier may take them.
    pub(super) fn keep_in_memory(&self, id: EntryId, bytes: &Bytes, copy: bool) {
        let mut state = lock(&self.state);
        let state = &mut *state;
        if state.memory.budget() == 0
            || state.memory.contains(id)
            || bytes.len() as u64 > state.memory.budget()
        {
            return;
        }
        let bytes = if copy {
            Bytes::copy_from_slice(bytes)
        } else {
            bytes.clone()
        };
        match state
            .memory
            .admit(id, bytes.len() as u64, bytes, &mut state.plan)
        {
            Admission::Taken(evicted) => {
                state.memory_stats.evictions += evicted.len() as u64;
                state.memory_stats.peak = state.memory_stats.peak.max(state.memory.used());
            }
            Admission::Refused => state.memory_stats.rejected += 1,
        }
    }

    /// A fetched unit: into memory, and to the disk tier's writer (which lets go of it,
    /// and of the response it is a slice of, once written).
    pub(super) fn store(
        &self,
        key: &str,
        unit: Unit,
        origin: Option<&Origin>,
        bytes: Bytes,
        slice: bool,
    ) {
        let id = entry_id(&self.backend, key, unit);
        self.keep_in_memory(id, &bytes, slice);
        self.queue_write(id, key, unit, origin, bytes);
        // Not queued (no directory, writes off, the writer behind): the claim goes now.
        lock(&self.claims).remove(&id);
    }

    /// Hand a fetched unit to the writer, with this process's claim on it.
    pub(super) fn queue_write(
        &self,
        id: EntryId,
        key: &str,
        unit: Unit,
        origin: Option<&Origin>,
        bytes: Bytes,
    ) {
        let (Some(origin), Some(writer)) = (origin, &self.writer) else {
            return;
        };
        let mut state = lock(&self.state);
        let state = &mut *state;
        if !state.disk_writes || state.queued.contains_key(&id) {
            return;
        }
        let payload = bytes.len() as u64;
        if state.pending_write_bytes + payload > MAX_PENDING_WRITE_BYTES {
            Counters::add(&self.counters.dropped_writes, 1);
            return;
        }
        // Booked in the ledger by the writer, which follows what the other processes did
        // first (this process's view may be half a second old), and which writes only what
        // the rule takes: a refusal costs no write.
        state.pending_write_bytes += payload;
        state.queued.insert(id, bytes.clone());
        let claim = lock(&self.claims).remove(&id);
        let queued = writer.send(Job::Write {
            id,
            key: key.to_owned(),
            unit,
            origin: origin.clone(),
            payload: bytes,
            claim,
        });
        if !queued {
            state.queued.remove(&id);
            state.pending_write_bytes -= payload;
        }
    }
}
