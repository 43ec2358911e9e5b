//! Damage found while serving, repaired while serving. A record that fails
//! its checksum when a read needs it is noted ([`Store::note_damage`]) and
//! handed out once by [`Store::take_damaged`] to the aggregator, which owns
//! the compaction floor: it copies the record log segment holding it into a
//! quarantine directory ([`Store::quarantine_damage`]), moves the floor
//! past the damaged event (to the event that superseded it,
//! [`Store::superseded_by`], so the state at the floor never needs its
//! body), compacts, and has the object rebuilt from its member when the
//! damaged record was an object's current version. Once the log no longer
//! holds a damaged record, the mark that makes the next start repair the
//! log is cleared ([`Store::settle_damage`]).

use super::*;

/// The file in a quarantine directory that says what was found damaged.
pub const DAMAGE_NOTE: &str = "damage.txt";

/// Creates a new quarantine directory, `quarantine-<unix time>/` (with a
/// `-N` suffix when that exists), inside the data dir `dir`.
pub fn create_quarantine_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut quarantine = dir.join(format!("quarantine-{secs}"));
    for n in 1.. {
        match std::fs::create_dir(&quarantine) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => quarantine = dir.join(format!("quarantine-{secs}-{n}")),
            Err(e) => return Err(e),
        }
    }
    Ok(quarantine)
}

/// The records found damaged while serving (see [`Store::note_damage`]).
#[derive(Default)]
pub(crate) struct Found {
    /// Every damaged record noted since the store opened (each is logged
    /// and counted once).
    pub(crate) seen: std::collections::BTreeSet<u64>,
    /// Those the log still holds.
    pub(crate) unrepaired: std::collections::BTreeSet<u64>,
    /// Those not yet handed out by [`Store::take_damaged`], with what is wrong.
    pub(crate) pending: Vec<(u64, String)>,
}

impl Store {
    /// Creates a new quarantine directory in the data dir ([`create_quarantine_dir`]).
    pub fn create_quarantine(&self) -> Result<PathBuf> {
        create_quarantine_dir(&self.dir).map_err(io_error)
    }

    /// The records found damaged since the last call, lowest first, each
    /// handed out once.
    pub fn take_damaged(&self) -> Vec<Damage> {
        let mut pending = std::mem::take(&mut self.health.found.lock().unwrap_or_else(|e| e.into_inner()).pending);
        pending.sort_by_key(|(rv, _)| *rv);
        pending
            .into_iter()
            .map(|(rv, what)| {
                let segment = self.pointer(rv).map(|p| self.segment_path(p.segment)).filter(|path| path.exists());
                Damage { rv, what, segment }
            })
            .collect()
    }

    /// Where the record of the event at `rv` is in the record log.
    fn pointer(&self, rv: u64) -> Option<log::Pointer> {
        self.locations.get(rv).or_else(|| match self.lookup(rv).ok().flatten()? {
            Located::Logged(pointer) => Some(pointer),
            Located::Inline(_) => None,
        })
    }

    fn segment_path(&self, segment: u32) -> PathBuf {
        self.dir.join(log::LOG_DIR).join(log::segment_name(segment))
    }

    /// Copies the record log segment holding `damage` into `quarantine`
    /// (it stays in the log: it holds intact records too) and adds to the
    /// quarantine's [`DAMAGE_NOTE`] what was found, where, and the
    /// compaction floor `floor` the history is given up to. Returns the copy.
    pub fn quarantine_damage(&self, damage: &Damage, floor: u64, quarantine: &Path) -> Result<Option<PathBuf>> {
        use std::io::Write as _;
        let pointer = self.pointer(damage.rv);
        let copy = match &damage.segment {
            Some(segment) => {
                let to = quarantine.join(segment.file_name().unwrap_or_default());
                if !to.exists() {
                    std::fs::copy(segment, &to).map_err(io_error)?;
                }
                Some(to)
            }
            None => None,
        };
        let place = match (pointer, &damage.segment) {
            (Some(p), Some(segment)) => format!("segment {} at offset {}, {} bytes", segment.display(), p.offset, p.len),
            _ => "its record log segment is gone".to_string(),
        };
        let mut note = std::fs::OpenOptions::new().create(true).append(true).open(quarantine.join(DAMAGE_NOTE)).map_err(io_error)?;
        writeln!(
            note,
            "damaged record found while serving: event {}: {}\nwhere: {place}\nthe history up to resourceVersion {floor} was given up (the compaction floor moved there)\n",
            damage.rv, damage.what
        )
        .map_err(io_error)?;
        Ok(copy)
    }

    /// The event that superseded the one at `rv`: the next version of its
    /// object (or its deletion), which names it as the previous version;
    /// `None` when the log holds none (the event was the object's last).
    pub fn superseded_by(&self, rv: u64) -> Result<Option<u64>> {
        for item in self.entries(rv.saturating_add(1), u64::MAX) {
            let (at, located) = item?;
            let Some(record) = self.scanned(at, located)? else { continue };
            if decode_head(&record)?.0.prev_rv == rv {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// Forgets the damaged records the log no longer holds (compaction
    /// removed them) and, when it forgot any, writes the damage mark for the
    /// lowest left, or removes it when none is: a start after a repair done
    /// while serving repairs nothing. Cheap when nothing changed (called
    /// after every compaction). Returns the damaged records the log still
    /// holds.
    pub fn settle_damage(&self) -> Result<Vec<u64>> {
        let mut found = self.health.found.lock().unwrap_or_else(|e| e.into_inner());
        let held: Vec<u64> = found.unrepaired.iter().copied().collect();
        let mut repaired = false;
        for rv in &held {
            if !self.holds(*rv)? {
                found.unrepaired.remove(rv);
                repaired = true;
            }
        }
        if !repaired {
            // The mark note_damage wrote stands.
            return Ok(held);
        }
        let tree = self.tree()?;
        match found.unrepaired.first() {
            Some(lowest) => tree.insert(meta_key(repair::DAMAGED), &lowest.to_be_bytes()[..])?,
            None => tree.remove(meta_key(repair::DAMAGED))?,
        };
        self.db()?.flush()?;
        Ok(found.unrepaired.iter().copied().collect())
    }
}
