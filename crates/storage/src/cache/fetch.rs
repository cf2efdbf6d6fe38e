//! A read's misses fetched: one request per run of units, one flight per entry however
//! many reads want it, new versions adopted, ranges cut into blocks.

use super::shared::{Claimed, Wait, Where, runs};
#[allow(clippy::wildcard_imports)]
use super::*;

/// `unit`'s bytes within a response that starts at byte `start` of the object.
pub(super) fn unit_in(response: &Bytes, start: u64, unit: Unit, block: u64) -> Bytes {
    match unit {
        Unit::Whole => response.clone(),
        Unit::Block(n) => {
            let len = response.len() as u64;
            let from = (n * block).saturating_sub(start).min(len);
            response.slice(from as usize..(from + block).min(len) as usize)
        }
    }
}

/// The error for a store that panicked while reading `key`.
pub(super) fn panicked(backend: &str, key: &str, panic: &(dyn std::any::Any + Send)) -> Error {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    Error::new(
        ErrorKind::Other,
        backend,
        key,
        format!("the store panicked: {message}"),
    )
}

impl<S: Storage + 'static> CacheStore<S> {
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.cache.shared
    }

    /// This run's view of `key` when entries must be validated: known, or asked for once;
    /// and whether this read waited for the store's answer to a HEAD.
    pub(super) async fn origin(&self, key: &str) -> Result<(Option<Origin>, bool)> {
        if let Some(origin) = lock(&self.shared().state).known.get(key) {
            return Ok((Some(origin.clone()), false));
        }
        // Memory entries live as long as this run: an object known from no listing is
        // not worth a HEAD for them (its blocks are then read unchecked).
        if !self.cache.validates() {
            return Ok((None, false));
        }
        let head = {
            let mut heads = lock(&self.shared().heads);
            heads
                .entry(key.to_owned())
                .or_insert_with(|| {
                    let (inner, key) = (Arc::clone(&self.inner), key.to_owned());
                    let counters = Arc::clone(&self.shared().counters);
                    async move {
                        Counters::add(&counters.validations, 1);
                        AssertUnwindSafe(inner.head(&key))
                            .catch_unwind()
                            .await
                            .unwrap_or_else(|panic| Err(panicked(inner.name(), &key, &*panic)))
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        let meta = head.await;
        lock(&self.shared().heads).remove(key);
        Ok((Some(self.learn(key, meta?)), true))
    }

    /// Keep what a HEAD said of `key` as this run's view of it.
    fn learn(&self, key: &str, meta: ObjectMeta) -> Origin {
        let origin = Origin {
            size: meta.size,
            version: meta.version,
        };
        lock(&self.shared().state)
            .known
            .insert(key.to_owned(), origin.clone());
        origin
    }

    /// Claim `units` for this process's fetch; for those another process claimed, wait
    /// (at most [`CLAIM_PATIENCE`]) for its file, and read the file. The bytes found, the
    /// units left to fetch, and this read's claims (let go when dropped, whatever becomes of
    /// the read, unless a flight of this process took them on). A read that must wait holds
    /// no claim meanwhile: two processes each holding what the other waits for would stall.
    pub(super) async fn await_claims(
        &self,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<&Origin>,
    ) -> (HashMap<EntryId, Bytes>, Vec<(EntryId, Unit)>, Claimed) {
        let mut claimed = Claimed {
            shared: Arc::clone(self.shared()),
            ids: Vec::new(),
        };
        let Some(disk) = self.shared().disk.clone() else {
            return (HashMap::new(), units, claimed);
        };
        let waiting: Vec<(EntryId, Unit)> = units
            .iter()
            .copied()
            .filter(|&(id, _)| !claimed.take(&disk, id))
            .collect();
        if waiting.is_empty() {
            return (HashMap::new(), units, claimed);
        }
        claimed.release();
        let deadline = tokio::time::Instant::now() + CLAIM_PATIENCE;
        let mut pause = std::time::Duration::from_millis(1);
        let (mut waiting, mut ready) = (waiting, Vec::new());
        while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
            waiting.retain(|&(id, unit)| {
                if disk.exists(id) {
                    ready.push((id, unit));
                    return false;
                }
                // Let go without a file (not kept, failed, its process died): fetched here.
                !matches!(disk.claim(id), Ok(Some(_)) | Err(_))
            });
        }
        let mut found = HashMap::new();
        if !ready.is_empty() {
            let bytes = self
                .shared()
                .read_disk(key, ready.clone(), origin.cloned())
                .await;
            for ((id, _), bytes) in ready.iter().zip(bytes) {
                if let Some(bytes) = bytes {
                    found.insert(*id, bytes);
                }
            }
        }
        let rest: Vec<(EntryId, Unit)> = units
            .into_iter()
            .filter(|(id, _)| !found.contains_key(id))
            .collect();
        for &(id, _) in &rest {
            claimed.take(&disk, id);
        }
        (found, rest, claimed)
    }

    /// The bytes of `units` of `key` that neither tier had when looked up: each run of
    /// consecutive units no other reader is fetching by one request, the others from the
    /// flight that fetches them, or from a tier if their flight landed meanwhile.
    pub(super) async fn fetch(
        &self,
        key: &str,
        units: &[(EntryId, Unit)],
        origin: Option<&Origin>,
        read: &GetOptions,
    ) -> Result<(Vec<Bytes>, Served)> {
        let block = self.shared().block_bytes;
        // A hedge is sent because the request under way seems lost: joining that one's
        // flight would wait for it. It fetches on its own, and lets later readers join it.
        // What this read's own requests met (not those of flights it joins: theirs are
        // reported by the reads that sent them).
        let mut served = Served::default();
        let mut mine: Vec<EntryId> = Vec::new();
        let waits: Vec<Wait> = {
            let mut flights = lock(&self.shared().flights);
            let free: Vec<usize> = (0..units.len())
                .filter(|&i| read.repeat || !flights.contains_key(&units[i].0))
                .collect();
            // A flight stores its entries before it leaves the map: one that landed since
            // the caller looked is in a tier now, and is not fetched again.
            let ids: Vec<EntryId> = free.iter().map(|&i| units[i].0).collect();
            let mut held: HashMap<usize, Where> =
                free.iter().copied().zip(self.shared().peek(&ids)).collect();
            let own: Vec<(EntryId, Unit)> = free
                .iter()
                .filter(|i| matches!(held.get(i), Some(Where::Fetch)))
                .map(|&i| units[i])
                .collect();
            for run in runs(&own) {
                let (Some(&(first_id, first)), Some(&(_, last))) = (run.first(), run.last()) else {
                    continue;
                };
                mine.push(first_id);
                let start = match first {
                    Unit::Whole => 0,
                    Unit::Block(n) => n * block,
                };
                let fetch = self.fetch_span(key, (first, last), run, origin, read);
                for &(id, _) in run {
                    flights.insert(
                        id,
                        Flight {
                            start,
                            fetch: fetch.clone(),
                        },
                    );
                }
            }
            (0..units.len())
                .map(|i| match flights.get(&units[i].0) {
                    Some(flight) => Wait::Flight(flight.clone()),
                    None => match held.remove(&i) {
                        Some(Where::Have(bytes)) => Wait::Have(bytes, false),
                        Some(Where::Queued(bytes)) => Wait::Have(bytes, true),
                        _ => Wait::Disk,
                    },
                })
                .collect()
        };
        let on_disk: Vec<(EntryId, Unit)> = units
            .iter()
            .zip(&waits)
            .filter(|(_, w)| matches!(w, Wait::Disk))
            .map(|(u, _)| *u)
            .collect();
        let mut from_disk = if on_disk.is_empty() {
            Vec::new()
        } else {
            self.shared().read_disk(key, on_disk, origin.cloned()).await
        }
        .into_iter();
        let mut out: Vec<Option<Bytes>> = Vec::with_capacity(units.len());
        let mut again = Vec::new();
        // Each unit the caller missed is counted once, here, where its bytes are found: a
        // store's answer (its own request or a joined one) is a miss, a tier's a hit
        // (`read_disk` counts its own; one it could not read is counted by the fetch
        // below). Counted at the look instead, an entry another process placed in the
        // meantime was a miss and then a disk hit: two reads for one.
        let counters = &self.shared().counters;
        for (i, (&(_, unit), wait)) in units.iter().zip(waits).enumerate() {
            out.push(match wait {
                Wait::Flight(flight) => {
                    Counters::add(&counters.misses, 1);
                    // A joined flight's facts (and its failure's) are its owner's to report.
                    let own = mine.contains(&units[i].0);
                    let (bytes, met) = flight.fetch.await.map_err(|e| {
                        if own {
                            e
                        } else {
                            e.with_served(Served::default())
                        }
                    })?;
                    if own {
                        served = served.merge(met);
                    }
                    Some(unit_in(&bytes, flight.start, unit, block))
                }
                Wait::Have(bytes, queued) => {
                    let tier = if queued {
                        &counters.disk_hits
                    } else {
                        &counters.memory_hits
                    };
                    Counters::add(tier, 1);
                    Some(bytes)
                }
                Wait::Disk => from_disk.next().flatten(),
            });
            if out[i].is_none() {
                again.push(i);
            }
        }
        // Files dropped as corrupt or stale since: fetched after all.
        if !again.is_empty() {
            let missing: Vec<(EntryId, Unit)> = again.iter().map(|&i| units[i]).collect();
            let (fetched, met) = Box::pin(self.fetch(key, &missing, origin, read)).await?;
            served = served.merge(met);
            for (i, bytes) in again.into_iter().zip(fetched) {
                out[i] = Some(bytes);
            }
        }
        let bytes = out.into_iter().map(Option::unwrap_or_default).collect();
        Ok((bytes, served))
    }

    /// One request for units `first..=last` of `key` that fills the cache with `own` when
    /// it lands, whoever is awaiting it then.
    pub(super) fn fetch_span(
        &self,
        key: &str,
        (first, last): (Unit, Unit),
        own: &[(EntryId, Unit)],
        origin: Option<&Origin>,
        read: &GetOptions,
    ) -> Fetch {
        // Weak: the flight map holds this future, and must not keep the cache alive.
        let (inner, weak) = (Arc::clone(&self.inner), Arc::downgrade(self.shared()));
        let counters = Arc::clone(&self.shared().counters);
        let (key, own, origin) = (key.to_owned(), own.to_vec(), origin.cloned());
        let block = self.shared().block_bytes;
        let checked = !lock(&self.shared().state).unchecked.contains(&key);
        // The flight's request tells the observer of the read that sent it; readers who
        // join the flight learn only its answer.
        let observer = read.observer.clone();
        async move {
            let request = async {
                match (first, last) {
                    (Unit::Block(a), Unit::Block(b)) => {
                        let mut end = (b + 1) * block;
                        if let Some(o) = &origin {
                            end = end.min(o.size);
                        }
                        // Of the version the entries are kept for, or an error: blocks
                        // of two versions must never make one read.
                        let mut options = GetOptions::range(a * block..end);
                        match origin.as_ref().and_then(|o| o.version.as_deref()) {
                            Some(version) if checked => options = options.if_match(version),
                            _ => {}
                        }
                        options.observer = observer;
                        inner.get_opts(&key, options).await
                    }
                    _ => {
                        let options = GetOptions {
                            observer,
                            ..GetOptions::default()
                        };
                        inner.get_opts(&key, options).await
                    }
                }
                .map(|answer| (answer.bytes, answer.served))
            };
            // A store that panics fails this read, not every later reader of the entry.
            let result = AssertUnwindSafe(request)
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(panicked(inner.name(), &key, &*panic)));
            Counters::add(&counters.requests, 1);
            let Some(shared) = weak.upgrade() else {
                return result;
            };
            // Fetched for a version the cache has since let go (the object changed while
            // this was under way): answered, but not kept beside the new version's blocks.
            let current = origin.as_ref().is_none_or(|o| {
                lock(&shared.state)
                    .known
                    .get(&key)
                    .is_none_or(|known| known.version == o.version)
            });
            if let Ok((bytes, _)) = &result
                && current
            {
                Counters::add(&shared.counters.bytes_fetched, bytes.len() as u64);
                let start = match first {
                    Unit::Block(a) => a * block,
                    Unit::Whole => 0,
                };
                for &(_, unit) in &own {
                    let piece = unit_in(bytes, start, unit, block);
                    // An entry the object's size does not account for is from a rewrite
                    // since the listing: answer with it, but do not keep it.
                    let expected = origin.as_ref().map(|o| match unit {
                        Unit::Whole => o.size,
                        Unit::Block(n) => o.size.saturating_sub(n * block).min(block),
                    });
                    if expected.is_some_and(|e| e != piece.len() as u64) {
                        continue;
                    }
                    shared.store(&key, unit, origin.as_ref(), piece, own.len() > 1);
                }
            }
            let mut flights = lock(&shared.flights);
            for (id, _) in &own {
                flights.remove(id);
            }
            drop(flights);
            // Claims of entries not handed to the writer (a failed read, a rewrite): let go.
            let mut claims = lock(&shared.claims);
            for (id, _) in &own {
                claims.remove(id);
            }
            drop(claims);
            result
        }
        .boxed()
        .shared()
    }

    /// Serve `units` of `key`: memory, then disk, then one request for the rest. `asked`:
    /// the read already waited for the store (a HEAD), so it is not the cache's alone.
    pub(super) async fn serve(
        &self,
        key: &str,
        units: Vec<(EntryId, Unit)>,
        origin: Option<Origin>,
        asked: bool,
        read: &GetOptions,
    ) -> Result<(Vec<Bytes>, Served)> {
        let ids: Vec<EntryId> = units.iter().map(|(id, _)| *id).collect();
        let sources = self.shared().look_up(&ids);
        let mut parts: Vec<Option<Bytes>> = Vec::with_capacity(units.len());
        let mut on_disk = Vec::new();
        for (i, source) in sources.into_iter().enumerate() {
            match source {
                Where::Have(bytes) | Where::Queued(bytes) => parts.push(Some(bytes)),
                Where::Disk => {
                    on_disk.push(i);
                    parts.push(None);
                }
                Where::Fetch => parts.push(None),
            }
        }
        if !on_disk.is_empty() {
            let wanted = on_disk.iter().map(|&i| units[i]).collect();
            let read = self.shared().read_disk(key, wanted, origin.clone()).await;
            for (i, bytes) in on_disk.into_iter().zip(read) {
                parts[i] = bytes;
            }
        }
        let missing: Vec<(EntryId, Unit)> = units
            .iter()
            .zip(&parts)
            .filter(|(_, p)| p.is_none())
            .map(|(u, _)| *u)
            .collect();
        // Entries another process of the node is fetching: their files, once there.
        let mut claimed = None;
        let missing = if missing.is_empty() || read.repeat {
            missing
        } else {
            let (mut found, rest, held) = self.await_claims(key, missing, origin.as_ref()).await;
            claimed = Some(held);
            for (i, part) in parts.iter_mut().enumerate() {
                if part.is_none()
                    && let Some(bytes) = found.remove(&units[i].0)
                {
                    *part = Some(bytes);
                }
            }
            rest
        };
        let counters = &self.shared().counters;
        let served: u64 = parts.iter().flatten().map(|b| b.len() as u64).sum();
        Counters::add(&counters.bytes_served, served);
        let mut served = Served::default();
        if !missing.is_empty() {
            let fetched = self.fetch(key, &missing, origin.as_ref(), read).await;
            // Claims of entries whose fetch is over (kept or not) go; those of a flight
            // still under way go with it.
            drop(claimed);
            let (fetched, met) = fetched?;
            served = met;
            let mut fetched = fetched.into_iter();
            for part in parts.iter_mut().filter(|p| p.is_none()) {
                *part = fetched.next();
            }
        } else if !asked {
            // The caller must not take this read's latency for the store's.
            served.cached = true;
        }
        let bytes = parts.into_iter().map(Option::unwrap_or_default).collect();
        Ok((bytes, served))
    }
}

impl<S: Storage + 'static> CacheStore<S> {
    /// `key` changed under a read made for `stale`: unless another reader already did,
    /// drop its entries and learn its new size and version with one HEAD.
    pub(super) async fn adopt_new_version(
        &self,
        key: &str,
        stale: Option<&Origin>,
    ) -> Result<Origin> {
        {
            let state = lock(&self.shared().state);
            if let Some(known) = state.known.get(key)
                && Some(known) != stale
            {
                return Ok(known.clone());
            }
        }
        if let Some(stale) = stale {
            self.shared().forget_object(key, stale.size);
        }
        Counters::add(&self.shared().counters.validations, 1);
        let meta = self.inner.head(key).await?;
        Ok(self.learn(key, meta))
    }

    /// A ranged read served from the tiers and the store, for `origin`.
    pub(super) async fn read_range(
        &self,
        key: &str,
        range: Range<u64>,
        origin: Option<Origin>,
        asked: bool,
        read: &GetOptions,
    ) -> Result<GetResult> {
        let end = origin.as_ref().map_or(range.end, |o| range.end.min(o.size));
        if range.start >= end {
            // Empty, or past the end: the store answers as it does.
            return self
                .inner
                .get_opts(
                    key,
                    GetOptions {
                        range: Some(range),
                        if_match: None,
                        ..read.clone()
                    },
                )
                .await;
        }
        let block = self.shared().block_bytes;
        let blocks = blocks_of(&(range.start..end), block);
        let first = blocks.start;
        let units: Vec<(EntryId, Unit)> = blocks
            .map(|n| {
                (
                    entry_id(&self.shared().backend, key, Unit::Block(n)),
                    Unit::Block(n),
                )
            })
            .collect();
        let (parts, served) = self.serve(key, units, origin, asked, read).await?;
        // Cut the read out of its blocks: zero-copy when it lies within one.
        let mut pieces = Vec::with_capacity(parts.len());
        for (k, part) in parts.into_iter().enumerate() {
            let at = (first + k as u64) * block;
            let from = range.start.saturating_sub(at).min(part.len() as u64) as usize;
            let to = (end - at).min(part.len() as u64) as usize;
            if from < to {
                pieces.push(part.slice(from..to));
            }
        }
        let bytes = match pieces.len() {
            0 => Bytes::new(),
            1 => pieces.pop().unwrap_or_default(),
            _ => {
                let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
                for p in pieces {
                    out.extend_from_slice(&p);
                }
                out.freeze()
            }
        };
        Ok(GetResult {
            bytes,
            meta: None,
            served,
        })
    }
}
