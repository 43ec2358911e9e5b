//! The resourceVersion ceiling: a small file beside sled (`rv-ceiling`)
//! that holds a resourceVersion no commit has passed. A commit that would
//! pass it first raises it by [`CEILING_STEP`] (written to a temporary
//! file, synced, renamed), so it is written once per that many events. It
//! survives the loss of sled's files or of the record log: a data dir
//! rebuilt after damage continues above it, and never serves a
//! resourceVersion a client was already shown for another change.

use super::*;

/// The ceiling's file name in the data dir.
pub const CEILING_FILE: &str = "rv-ceiling";

/// How far above the head a raised ceiling is.
pub const CEILING_STEP: u64 = 100_000;

/// The ceiling in `dir` (0 when there is none or it is unreadable).
pub fn read_ceiling(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(CEILING_FILE)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Writes the ceiling `rv` to `dir`, durably.
pub(crate) fn write_ceiling(dir: &Path, rv: u64) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{CEILING_FILE}.tmp"));
    let mut file = log::private_file().write(true).create(true).truncate(true).open(&tmp)?;
    file.write_all(format!("{rv}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(CEILING_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

impl Store {
    /// At least every resourceVersion this store served: its head and its
    /// ceiling (a backup records it; a repair continues above it).
    pub fn served_rv_bound(&self) -> Result<u64> {
        Ok(self.head_rv()?.max(*self.ceiling.lock().unwrap_or_else(|e| e.into_inner())))
    }

    /// Raises the ceiling before a commit whose head is `head`, if it would pass it.
    pub(crate) fn keep_below_ceiling(&self, head: u64) -> Result<()> {
        let mut ceiling = self.ceiling.lock().unwrap_or_else(|e| e.into_inner());
        if head > *ceiling {
            let raised = head + CEILING_STEP;
            write_ceiling(&self.dir, raised).map_err(io_error)?;
            *ceiling = raised;
        }
        Ok(())
    }
}

/// Metadata a repair does not copy: what belongs to the damaged history.
const NOT_SALVAGED: &[&str] = &["head", "compacted", "format", "store-id"];

impl Store {
    /// Copies the settings kept in the metadata of the (damaged) data dir
    /// `from` into this store: the registered members, the resource
    /// selection, the discovered types, secrets; not its history (head,
    /// compaction floor, dictionaries, events, checkpoints). Returns how
    /// many values were copied, and the damaged store's head
    /// resourceVersion (0 when unreadable).
    pub fn salvage_settings(&self, from: &Path) -> Result<(usize, u64)> {
        let db = open_sled(from, &self.options, SEGMENT_SIZE)?;
        let old = db.open_tree("kubefold")?;
        let tree = self.tree()?;
        let mut copied = 0;
        for item in old.scan_prefix([META]) {
            let (k, v) = item?;
            let name = String::from_utf8_lossy(&k[1..]).into_owned();
            if NOT_SALVAGED.contains(&name.as_str()) || name.starts_with(DICT_PREFIX) {
                continue;
            }
            tree.insert(k, v)?;
            copied += 1;
        }
        self.db()?.flush()?;
        let head = old.get(meta_key("head")).ok().flatten().and_then(|v| read_u64(&v, "head rv").ok()).unwrap_or(0);
        Ok((copied, head))
    }
}
