//! Reading events back: an event's record found through the record
//! locations or sled, a range of events scanned in RV order.

use super::*;

/// An event record as read: from the record log, or from sled itself (format 3).
pub(crate) enum Record {
    Inline(sled::IVec),
    Logged(Vec<u8>),
}

impl std::ops::Deref for Record {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Record::Inline(v) => v,
            Record::Logged(v) => v,
        }
    }
}

impl Store {
    pub(crate) fn decode(&self, bytes: &[u8]) -> Result<StoredEvent> {
        decode_event_with(bytes, &self.dicts.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The record an event's entry names; `None` when compaction moved it
    /// since the entry was read.
    pub(crate) fn resolve(&self, located: Located) -> Result<Option<Record>> {
        match located {
            Located::Inline(value) => Ok(Some(Record::Inline(value))),
            Located::Logged(pointer) => {
                let mut out = Vec::new();
                match self.log.read_into(pointer, &mut out) {
                    Ok(true) => Ok(Some(Record::Logged(out))),
                    Ok(false) => Ok(None),
                    Err(what) => Err(Error::Corrupt { what }),
                }
            }
        }
    }

    /// The entry of the event at `rv` in sled, if it holds one: in the
    /// value under the greatest key at or before `rv` (a group's key is its
    /// first event's RV, and groups never overlap).
    pub(crate) fn lookup(&self, rv: u64) -> Result<Option<Located>> {
        let Some((k, v)) = self.tree()?.range(event_key(0)..=event_key(rv)).next_back().transpose()? else { return Ok(None) };
        Ok(located(&k, v)?.into_iter().find(|(at, _)| *at == rv).map(|(_, l)| l))
    }

    /// The events sled holds with RVs in `from..=to`, in RV order, each
    /// with its entry.
    pub(crate) fn entries(&self, from: u64, to: u64) -> Box<dyn Iterator<Item = Result<(u64, Located)>> + Send> {
        let tree = match self.tree() {
            Ok(tree) => tree,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        // The value holding `from` may be keyed before it (a group).
        let (start, failed) = match tree.range(event_key(0)..=event_key(from)).next_back().transpose() {
            Ok(found) => (found.map_or(event_key(from).to_vec(), |(k, _)| k.to_vec()), None),
            Err(e) => (event_key(from).to_vec(), Some(Err(Error::from(e)))),
        };
        Box::new(
            failed.into_iter().chain(
                tree.range(start..=event_key(to).to_vec())
                    .flat_map(|item| match item.map_err(Error::from).and_then(|(k, v)| located(&k, v)) {
                        Ok(events) => events.into_iter().map(Ok).collect::<Vec<_>>(),
                        Err(e) => vec![Err(e)],
                    })
                    .filter(move |item| item.as_ref().map_or(true, |(rv, _)| (from..=to).contains(rv))),
            ),
        )
    }

    /// The record of the event at `rv`, if the log holds it.
    pub(crate) fn record(&self, rv: u64) -> Result<Option<Record>> {
        let read = self.read_record(rv);
        if let Err(Error::Corrupt { what }) = &read {
            self.note_damage(rv, what);
        }
        read
    }

    fn read_record(&self, rv: u64) -> Result<Option<Record>> {
        if let Some(pointer) = self.locations.get(rv) {
            let mut out = Vec::new();
            match self.log.read_into(pointer, &mut out) {
                Ok(true) => return Ok(Some(Record::Logged(out))),
                // Moved: sled names the copy.
                Ok(false) => {}
                Err(what) => return Err(Error::Corrupt { what: format!("event {rv}: {what}") }),
            }
        }
        // A pointer read just before compaction moved its record names a
        // deleted segment; the pointer read again names the copy. One that
        // keeps naming a missing segment is damage.
        for _ in 0..4 {
            let Some(located) = self.lookup(rv)? else { return Ok(None) };
            if let Some(record) = self.resolve(located)? {
                return Ok(Some(record));
            }
        }
        Err(Error::Corrupt { what: format!("event {rv}: its record log segment is missing") })
    }

    /// The record of the event at `rv` met in a scan with its entry;
    /// `None` when the event was removed since.
    pub(crate) fn scanned(&self, rv: u64, located: Located) -> Result<Option<Record>> {
        match self.resolve(located) {
            Ok(Some(record)) => Ok(Some(record)),
            Ok(None) => self.record(rv),
            Err(Error::Corrupt { what }) => {
                let what = format!("event {rv}: {what}");
                self.note_damage(rv, &what);
                Err(Error::Corrupt { what })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the log still holds the event at `rv` (compaction keeps
    /// live versions and those retained events need).
    pub fn holds(&self, rv: u64) -> Result<bool> {
        Ok(self.locations.get(rv).is_some() || self.lookup(rv)?.is_some())
    }

    /// One event of the log.
    pub fn event(&self, rv: u64) -> Result<Option<StoredEvent>> {
        match self.record(rv)? {
            Some(record) => Ok(Some(self.decode(&record)?)),
            None => Ok(None),
        }
    }

    /// Events after `rv`, in order, up to the end of the log.
    pub fn events_after(&self, rv: u64) -> impl Iterator<Item = Result<StoredEvent>> + '_ {
        self.entries(rv.saturating_add(1), u64::MAX).filter_map(move |item| {
            let record = item.and_then(|(rv, located)| self.scanned(rv, located));
            match record {
                Ok(Some(record)) => Some(self.decode(&record)),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            }
        })
    }
}
