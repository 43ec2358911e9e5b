//! Retention and compaction: the floor retention allows, the removal of
//! superseded events' pointers, and the reclaiming of record log segments
//! that are mostly dead.

use super::*;

impl Store {
    /// The floor that retention allows: keep at most `max_events` events
    /// and none older than `max_age_ms` (relative to `now_ms`); the floor
    /// never passes `head_rv` and never goes back.
    pub fn retention_floor(&self, max_events: u64, max_age_ms: u64, now_ms: u64) -> Result<u64> {
        let head = self.head_rv()?;
        let compacted = self.compacted_rv()?;
        let mut floor = head.saturating_sub(max_events).max(compacted);
        let cutoff = now_ms.saturating_sub(max_age_ms);
        for item in self.entries(floor.saturating_add(1), head) {
            let (rv, located) = item?;
            let Some(record) = self.scanned(rv, located)? else { continue };
            let event = decode_event_head(&record)?;
            if event.time_ms >= cutoff {
                break;
            }
            floor = event.rv;
        }
        Ok(floor.min(head))
    }

    /// Compacts the log up to `floor`: afterwards watches and exact reads
    /// older than `floor` are refused (410), and an event at or below it is
    /// kept only while it is an object's live version in `live` (the index
    /// of every event committed so far) or the previous version of a
    /// retained event (needed to rewind to any RV >= floor). Safe while
    /// commits go on: an event that is not live never becomes live again,
    /// and new events only reference live versions. Events are removed in
    /// RV order (see [`Store::recover`] for why that matters).
    pub fn compact(&self, floor: u64, live: &Index) -> Result<CompactStats> {
        let _compacting = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
        let floor = floor.min(self.head_rv()?);
        if floor <= self.compacted_rv()? {
            return Ok(CompactStats { floor: self.compacted_rv()?, removed: 0, kept: 0 });
        }
        if live.head_rv() < floor {
            return Err(Error::Corrupt { what: format!("compaction to RV {floor} with an index at RV {}", live.head_rv()) });
        }
        // Segments that may be reclaimed: those closed before this scan
        // (commits go on appending to the active one and to new ones).
        let active = self.log.active_id();
        let sizes: BTreeMap<u32, u64> =
            self.log.segment_sizes().map_err(io_error)?.into_iter().filter(|(id, _)| active.is_none_or(|a| *id < a)).collect();
        self.tree()?.insert(meta_key("compacted"), &floor.to_be_bytes()[..])?;
        let mut keep: std::collections::HashSet<u64> = live.live_rvs().filter(|rv| *rv <= floor).collect();
        // And what the reads in progress will read (a list streaming from
        // an older snapshot), read now: a read pinned later took an index
        // at least as new as `live` (see `Store::pin`).
        let pinned: Vec<Pinned> = self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        // Events after this are all kept (a replaying watch).
        let mut keep_after = u64::MAX;
        for pin in &pinned {
            match pin {
                Pinned::Index(index) => keep.extend(index.live_rvs().filter(|rv| *rv <= floor)),
                Pinned::Rvs(rvs) => keep.extend(rvs.iter().copied().filter(|rv| *rv <= floor)),
                Pinned::After(rv) => keep_after = keep_after.min(*rv),
            }
        }
        drop(pinned);
        // Nothing goes when every event at or below the floor is kept by
        // the indexes alone (the live version of its object, in `live` or
        // in a pinned read's), as in a fleet whose objects change rarely;
        // the previous versions found below can only keep more. Then the
        // scan after the floor (a record read for each event above it, a
        // million at 2M objects, every minute) is not made, and segments
        // are left for the next compaction that removes something to
        // reclaim (no record died since the last one that did; a segment
        // still active then waits until that next one).
        if let Some(kept) = self.all_kept(floor, &keep, keep_after)? {
            self.flush_all()?;
            return Ok(CompactStats { floor, removed: 0, kept });
        }
        // Every retained record in a reclaimable segment: (rv, pointer).
        let mut retained: Vec<(u64, log::Pointer)> = Vec::new();
        let mut note = |rv: u64, located: &Located| {
            if let Located::Logged(pointer) = located {
                if sizes.contains_key(&pointer.segment) {
                    retained.push((rv, *pointer));
                }
            }
        };
        for item in self.entries(floor.saturating_add(1), u64::MAX) {
            let (rv, located) = item?;
            note(rv, &located);
            let Some(record) = self.scanned(rv, located)? else { continue };
            keep.insert(decode_head(&record)?.0.prev_rv);
        }
        let (mut removed, mut kept) = (0u64, 0u64);
        let mut batch = sled::Batch::default();
        let mut gone = Vec::new();
        // Each value holding events at or below the floor loses those not
        // kept: removed when none is left, else written again with the rest
        // under the same key (the events above the floor were noted above).
        for item in self.tree()?.range(event_key(0)..=event_key(floor)) {
            let (k, v) = item?;
            let events = located(&k, v)?;
            let before = gone.len();
            let mut left = Vec::with_capacity(events.len());
            for (rv, located) in events {
                if rv > floor {
                    left.push((rv, located));
                } else if keep.contains(&rv) || rv > keep_after {
                    note(rv, &located);
                    kept += 1;
                    left.push((rv, located));
                } else {
                    gone.push(rv);
                }
            }
            if gone.len() == before {
                continue;
            }
            removed += (gone.len() - before) as u64;
            match left_value(&k, left)? {
                None => batch.remove(k),
                Some(value) => batch.insert(k, value),
            }
            if gone.len() >= 10_000 {
                self.tree()?.apply_batch(std::mem::take(&mut batch))?;
                self.locations.remove(gone.drain(..));
            }
        }
        self.tree()?.apply_batch(batch)?;
        self.locations.remove(gone);
        self.flush_all()?;
        self.reclaim(&sizes, retained)?;
        Ok(CompactStats { floor, removed, kept })
    }

    /// The number of events at or below `floor`, when each of them is in
    /// `keep` or after `keep_after`; `None` at the first that is not.
    fn all_kept(&self, floor: u64, keep: &std::collections::HashSet<u64>, keep_after: u64) -> Result<Option<u64>> {
        let mut kept = 0u64;
        for item in self.tree()?.range(event_key(0)..=event_key(floor)) {
            let (k, v) = item?;
            for (rv, _) in located(&k, v)? {
                if rv > floor {
                    continue;
                }
                if !(keep.contains(&rv) || rv > keep_after) {
                    return Ok(None);
                }
                kept += 1;
            }
        }
        Ok(Some(kept))
    }

    /// Deletes the record log's segments (of `sizes`, their lengths) whose
    /// records are mostly dead, moving their `retained` records (every
    /// retained record of those segments, with its pointer) to the end of
    /// the log first. Segments at most half dead are left as they are, so a
    /// byte is moved at most about as often as it is written.
    pub(crate) fn reclaim(&self, sizes: &BTreeMap<u32, u64>, retained: Vec<(u64, log::Pointer)>) -> Result<()> {
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        for (_, pointer) in &retained {
            *live.entry(pointer.segment).or_default() += u64::from(pointer.len);
        }
        let victims: Vec<u32> = sizes.iter().filter(|(id, size)| live.get(id).copied().unwrap_or(0) * 2 <= **size).map(|(id, _)| *id).collect();
        if victims.is_empty() {
            return Ok(());
        }
        let (mut moved, mut moved_bytes) = (0u64, 0u64);
        let mut pending: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut pending_bytes = 0usize;
        for (rv, pointer) in retained.into_iter().filter(|(_, p)| victims.contains(&p.segment)) {
            let mut record = Vec::new();
            match self.log.read_into(pointer, &mut record) {
                Ok(true) => {}
                Ok(false) => return Err(Error::Corrupt { what: format!("event {rv}: its record log segment is missing") }),
                Err(what) => return Err(Error::Corrupt { what: format!("event {rv}: {what}") }),
            }
            pending_bytes += record.len();
            pending.push((rv, record));
            if pending_bytes >= 4 << 20 {
                (moved, moved_bytes) = (moved + pending.len() as u64, moved_bytes + pending_bytes as u64);
                self.relocate(std::mem::take(&mut pending))?;
                pending_bytes = 0;
            }
        }
        (moved, moved_bytes) = (moved + pending.len() as u64, moved_bytes + pending_bytes as u64);
        self.relocate(pending)?;
        // The copies and the pointers to them are durable before the
        // segments go.
        self.flush_all()?;
        self.log.remove(&victims).map_err(io_error)?;
        let freed: u64 = victims.iter().filter_map(|id| sizes.get(id)).sum();
        tracing::info!(segments = victims.len(), freed_bytes = freed, moved, moved_bytes, "Record log segments reclaimed.");
        Ok(())
    }

    /// Appends `records` (event RV, record) to the record log again and
    /// points their events at the copies.
    pub(crate) fn relocate(&self, records: Vec<(u64, Vec<u8>)>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let (rvs, records): (Vec<u64>, Vec<Vec<u8>>) = records.into_iter().unzip();
        // Followed by the newest commit's mark again.
        let pointers = self.log.append(&records, false).map_err(io_error)?;
        let moved: BTreeMap<u64, log::Pointer> = rvs.into_iter().zip(pointers).collect();
        // Each value holding a moved event, written again with the new
        // pointers (commits only add values after these; compaction, which
        // also rewrites them, is this caller).
        let mut batch = sled::Batch::default();
        let mut done_to = None;
        for rv in moved.keys() {
            if done_to.is_some_and(|to| *rv <= to) {
                continue;
            }
            let Some((k, v)) = self.tree()?.range(event_key(0)..=event_key(*rv)).next_back().transpose()? else { continue };
            let events = located(&k, v)?;
            done_to = events.last().map(|(last, _)| *last);
            let events = events
                .into_iter()
                .map(|(at, located)| (at, moved.get(&at).map_or(located, |pointer| Located::Logged(*pointer))))
                .collect();
            if let Some(value) = left_value(&k, events)? {
                batch.insert(k, value);
            }
        }
        self.tree()?.apply_batch(batch)?;
        self.locations.insert(moved);
        Ok(())
    }
}
