//! Repair of a data dir whose record log is damaged: the first event whose
//! record cannot be read is found, the events from it on are dropped (the
//! intact prefix of the history is kept), and the store continues above
//! the highest resourceVersion it ever served. The resourceVersions from
//! the first lost event up to that point are the lost history
//! ([`Store::lost_history`]): a watch or a list from one of them answers
//! 410, as one from before the compaction floor does.

use super::*;

/// The meta key of the lost history: two big-endian u64, the first lost
/// resourceVersion and the one the store continued from.
const LOST: &str = "lost";

/// The meta key of the lowest resourceVersion whose record was found
/// damaged while running (big-endian u64): the next start repairs the log
/// from it on ([`Store::recover`] reports it as damage).
pub(crate) const DAMAGED: &str = "damaged";

/// The first damaged event of the record log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Its resourceVersion: the history from it on is lost.
    pub rv: u64,
    /// What is wrong with it (the segment and offset, a checksum mismatch).
    pub what: String,
    /// The record log segment it is in, if it names one that exists.
    pub segment: Option<PathBuf>,
}

/// What [`Store::drop_history_from`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated {
    /// Events kept (the intact prefix).
    pub kept: u64,
    /// Events dropped.
    pub dropped: u64,
    /// The lost resourceVersions, inclusive (they answer 410).
    pub lost: (u64, u64),
}

impl Store {
    /// Reads every event of the log in resourceVersion order and returns
    /// the first whose record is missing, damaged or undecodable; `None`
    /// when every record reads. An `Err` is damage of sled's tree itself
    /// (the pointers cannot be read).
    pub fn find_damage(&self) -> Result<Option<Damage>> {
        for item in self.entries(0, u64::MAX) {
            let (rv, located) = item?;
            let pointer = match &located {
                Located::Logged(pointer) => Some(*pointer),
                Located::Inline(_) => None,
            };
            let read = self.scanned(rv, located).and_then(|record| match record {
                Some(record) => self.decode(&record).map(|_| ()),
                // Removed since the scan read its pointer: not damage.
                None => Ok(()),
            });
            if let Err(e) = read {
                let segment = pointer
                    .map(|p| self.dir.join(log::LOG_DIR).join(log::segment_name(p.segment)))
                    .filter(|path| path.exists());
                return Ok(Some(Damage { rv, what: e.to_string(), segment }));
            }
        }
        Ok(None)
    }

    /// Drops every event from `first_lost` on (keeping the ones before it,
    /// the intact prefix), forgets every member checkpoint (the members are
    /// listed again and what changed since the prefix becomes new events),
    /// and continues above `continue_above` (the highest resourceVersion
    /// ever served, see [`read_ceiling`]): the resourceVersions from
    /// `first_lost` to the new head are recorded as lost history. One
    /// atomic batch.
    pub fn drop_history_from(&self, first_lost: u64, continue_above: u64) -> Result<Truncated> {
        let _compacting = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
        let tree = self.tree()?;
        let head = self.head_rv()?.max(continue_above).max(first_lost);
        let mut batch = sled::Batch::default();
        let (mut kept, mut dropped) = (0u64, 0u64);
        let mut forgotten = Vec::new();
        for item in tree.scan_prefix([EVENT]) {
            let (k, v) = item?;
            let events = located(&k, v)?;
            let total = events.len();
            let (keep, lose): (Vec<_>, Vec<_>) = events.into_iter().partition(|(rv, _)| *rv < first_lost);
            kept += keep.len() as u64;
            dropped += lose.len() as u64;
            forgotten.extend(lose.iter().map(|(rv, _)| *rv));
            if keep.len() == total {
                continue;
            }
            match left_value(&k, keep)? {
                Some(value) => batch.insert(k, value),
                None => batch.remove(k),
            }
        }
        for item in tree.scan_prefix([CHECKPOINT]) {
            batch.remove(item?.0);
        }
        let lost = match self.lost_history()? {
            // One range: an older one joined to this (the history between
            // them is given up, never served wrong).
            Some((from, _)) => (from.min(first_lost), head),
            None => (first_lost, head),
        };
        let mut value = lost.0.to_be_bytes().to_vec();
        value.extend_from_slice(&lost.1.to_be_bytes());
        batch.insert(meta_key(LOST), value);
        batch.insert(meta_key("head"), &head.to_be_bytes()[..]);
        batch.remove(meta_key(DAMAGED));
        tree.apply_batch(batch)?;
        self.db()?.flush()?;
        self.locations.remove(forgotten);
        Ok(Truncated { kept, dropped, lost })
    }

    /// The lost history, inclusive: resourceVersions whose events a repair
    /// dropped, up to the one the store continued from. A watch from one
    /// below the last, or a list at one, answers 410.
    pub fn lost_history(&self) -> Result<Option<(u64, u64)>> {
        let Some(value) = self.tree()?.get(meta_key(LOST))? else { return Ok(None) };
        if value.len() != 16 {
            return Err(Error::Corrupt { what: "lost history range".into() });
        }
        Ok(Some((read_u64(&value[..8], "lost history")?, read_u64(&value[8..], "lost history")?)))
    }

    /// Whether a watch from `rv` (the events after it) or a list at `rv`
    /// needs events of the lost history, or events at or after a record
    /// found damaged while running; such a request answers 410.
    pub fn in_lost_history(&self, rv: u64) -> bool {
        // A watch from `rv` needs the events after it; a damaged one at
        // `damaged_below - 1` is needed from below it.
        rv.saturating_add(1) < self.health.damaged_below.load(std::sync::atomic::Ordering::Acquire)
            || matches!(self.lost_history(), Ok(Some((from, to))) if rv >= from && rv < to)
    }

    /// Records that the record of the event at `rv` was found damaged
    /// while reading it: logged and counted ([`Store::damaged_records`])
    /// once per record, requests that need it answer 410 from now on
    /// ([`Store::in_lost_history`]), the data dir is marked so that a start
    /// before its repair repairs the log from it on, and it is handed to
    /// the repair done while serving ([`Store::take_damaged`]).
    pub(crate) fn note_damage(&self, rv: u64, what: &str) {
        use std::sync::atomic::Ordering;
        self.health.damaged_below.fetch_max(rv.saturating_add(1), Ordering::AcqRel);
        let lowest = {
            let mut found = self.health.found.lock().unwrap_or_else(|e| e.into_inner());
            if !found.seen.insert(rv) {
                return;
            }
            found.unrepaired.insert(rv);
            found.pending.push((rv, what.to_string()));
            found.unrepaired.first().copied().unwrap_or(rv)
        };
        self.health.damaged_records.fetch_add(1, Ordering::AcqRel);
        let marked = (|| {
            self.tree()?.insert(meta_key(DAMAGED), &lowest.to_be_bytes()[..])?;
            self.db()?.flush()?;
            Ok::<_, Error>(())
        })();
        tracing::error!(
            rv,
            damage = what,
            marked_for_repair = marked.is_ok(),
            "A record of the event log is damaged: requests that need it answer 410 (watches from before it list again); \
             kubefold repairs it while serving (the segment copied into a quarantine directory, the compaction floor moved past it, \
             the object re-listed from its member when it was an object's current version; a replica over etcd repairs it at its next start). \
             Check the disk."
        );
    }

    /// The number of damaged records found while reading since the store opened.
    pub fn damaged_records(&self) -> u64 {
        self.health.damaged_records.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The resourceVersion of the lowest record found damaged while
    /// running in an earlier life of the data dir, if one was (the repair
    /// at start cuts the history there).
    pub fn damage_mark(&self) -> Result<Option<u64>> {
        match self.tree()?.get(meta_key(DAMAGED))? {
            Some(v) => Ok(Some(read_u64(&v, "damaged rv")?)),
            None => Ok(None),
        }
    }

    /// Forgets the damage mark (the records read again).
    pub fn clear_damage_mark(&self) -> Result<()> {
        self.tree()?.remove(meta_key(DAMAGED))?;
        self.db()?.flush()?;
        Ok(())
    }
}
