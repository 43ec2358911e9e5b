//! What the store holds, counted: events retained, bytes by kind.

use super::*;

/// Records of one kind: how many, and their bytes as sled stores them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordBytes {
    /// Number of records.
    pub records: u64,
    /// Bytes of their keys.
    pub key_bytes: u64,
    /// Bytes of their values.
    pub value_bytes: u64,
}

/// What the store holds, by kind of record (see [`Store::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The event log (`e` records).
    pub events: RecordBytes,
    /// Checkpoints, metadata, snapshots.
    pub other: RecordBytes,
}

impl Usage {
    /// Key and value bytes of every record.
    pub fn total_bytes(&self) -> u64 {
        [self.events, self.other].iter().map(|r| r.key_bytes + r.value_bytes).sum()
    }
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, r) in [("events", self.events), ("other", self.other)] {
            write!(f, "{name} {} ({:.1} MB, {:.0} B each) ", r.records, (r.key_bytes + r.value_bytes) as f64 / 1e6, (r.key_bytes + r.value_bytes) as f64 / r.records.max(1) as f64)?;
        }
        write!(f, "= {:.1} MB", self.total_bytes() as f64 / 1e6)
    }
}

impl Store {
    /// Number of events retained in the log: the size of the record
    /// locations once they are loaded and hold every event (a data dir of
    /// format 4), else a scan of the events (served by `/admin/v1/stats`,
    /// which monitoring polls: a scan of a million events there took CPU
    /// from ingestion).
    pub fn event_count(&self) -> usize {
        self.locations
            .count()
            .unwrap_or_else(|| self.tree().map_or(0, |tree| tree.scan_prefix([EVENT]).values().map(|v| v.map_or(0, |v| log::entry_count(&v))).sum()))
    }

    /// Records and their key and value bytes by kind (a full scan; for
    /// measurements and the soak tools, not for a request path).
    pub fn usage(&self) -> Result<Usage> {
        let mut usage = Usage::default();
        for item in self.tree()?.iter() {
            let (k, v) = item?;
            let kind = match k.first() {
                Some(&EVENT) => &mut usage.events,
                _ => &mut usage.other,
            };
            kind.records += 1;
            kind.key_bytes += k.len() as u64;
            // Logged records count with their lengths, not their pointers'.
            let read = read_u64(k.get(1..).unwrap_or_default(), "event key").ok();
            let logged = read.and_then(|rv| log::decode_entries(rv, &v).ok().flatten()).filter(|_| k.first() == Some(&EVENT));
            kind.value_bytes += logged.map_or(v.len() as u64, |events| events.iter().map(|(_, p)| u64::from(p.len)).sum());
        }
        Ok(usage)
    }
}
