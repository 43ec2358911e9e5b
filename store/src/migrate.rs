//! Older store formats: what each was, and what opening a data dir of
//! one does to it.

use super::*;

/// The format before: record heads and index snapshots in bincode's
/// layout. This build reads such records as they are ([`codec::Reader::old`])
/// and ignores such a snapshot (the log is replayed at the next start and
/// a new snapshot written), so opening a data dir of this format only
/// renames it (after which an older kubefold refuses it).
pub(crate) const FORMAT_5: &str = "kubefold-store/5";

/// The format before that: one sled key per event, holding its record's
/// [`log::Pointer`]. This build reads such pointers as they are and writes
/// a commit's pointers in groups ([`log::encode_group`]), so opening a
/// data dir of this format only renames it (after which an older
/// kubefold refuses it).
pub(crate) const FORMAT_4: &str = "kubefold-store/4";

/// The format before: event records inside sled's tree. This build reads
/// such records as they are (they leave with compaction) and writes new
/// ones to the record log, so opening a data dir of this format only
/// renames it (after which an older kubefold refuses it).
pub(crate) const FORMAT_3: &str = "kubefold-store/3";

/// The format before that: format 3's records plus an index entry per live object
/// (`i` records), which this build removes when it opens such a data dir.
/// Keeping an entry per object in the B-tree beside the log cost a quarter
/// of kubefold's CPU in a sync (each commit rewrote leaves all over the
/// tree: 100,000 pods from 10 members, 11.1 and 11.7 CPU-s with the entries,
/// 8.7 and 8.4 without), and the snapshot plus the log hold the same.
pub(crate) const FORMAT_2: &str = "kubefold-store/2";

/// Checks the format a data dir holds and takes an older one to
/// [`FORMAT`]; a new (empty) store is given [`FORMAT`]; any other format is
/// [`Error::IncompatibleFormat`].
pub(crate) fn upgrade(db: &sled::Db, tree: &sled::Tree, path: &Path) -> Result<()> {
    match tree.get(meta_key("format"))? {
        Some(found) if found.as_ref() == FORMAT.as_bytes() => {}
        Some(found) if [FORMAT_5, FORMAT_4, FORMAT_3].iter().any(|old| found.as_ref() == old.as_bytes()) => {
            tree.insert(meta_key("format"), FORMAT.as_bytes())?;
            db.flush()?;
            let from = String::from_utf8_lossy(&found).into_owned();
            tracing::info!(%from, to = FORMAT, "Store format upgraded: new event records are written in the current layout, older ones read as they are.");
        }
        Some(found) if found.as_ref() == FORMAT_2.as_bytes() => migrate_from_2(db, tree)?,
        Some(found) => {
            return Err(Error::IncompatibleFormat {
                path: path.to_path_buf(),
                found: String::from_utf8_lossy(&found).into_owned(),
            })
        }
        None if tree.is_empty() => {
            if let Some(left) = history_left(path) {
                // sled's files were lost or damaged (sled starts an empty
                // tree when its `db` file is gone): starting from 0 would
                // serve resourceVersions clients already hold.
                return Err(Error::Corrupt { what: format!("sled's tree in {} is empty but the data dir holds {left}: sled's files are missing or damaged", path.display()) });
            }
            tree.insert(meta_key("format"), FORMAT.as_bytes())?;
            db.flush()?;
        }
        None => {
            return Err(Error::IncompatibleFormat { path: path.to_path_buf(), found: "(none)".into() });
        }
    }
    Ok(())
}

/// What a data dir holds beside sled's tree from an earlier life (a
/// record log segment with records, an index snapshot), if anything.
pub(crate) fn history_left(path: &Path) -> Option<String> {
    if path.join(SNAPSHOT_FILE).exists() {
        return Some(format!("an index snapshot ({SNAPSHOT_FILE})"));
    }
    let segments = std::fs::read_dir(path.join(log::LOG_DIR)).ok()?;
    segments.flatten().find_map(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        let len = entry.metadata().map_or(0, |m| m.len());
        (name.ends_with(".seg") && len > 0).then(|| format!("record log segment {name} of {len} bytes"))
    })
}

/// Takes a data dir of [`FORMAT_2`] to [`FORMAT`]: removes its index
/// entries, then names the new format (an interrupted migration runs again
/// at the next open; an older kubefold refuses the data dir afterwards).
pub(crate) fn migrate_from_2(db: &sled::Db, tree: &sled::Tree) -> Result<()> {
    let mut removed = 0u64;
    let mut batch = sled::Batch::default();
    for key in tree.scan_prefix([FORMAT_2_INDEX]).keys() {
        batch.remove(key?);
        removed += 1;
        if removed % 10_000 == 0 {
            tree.apply_batch(std::mem::take(&mut batch))?;
        }
    }
    tree.apply_batch(batch)?;
    tree.insert(meta_key("format"), FORMAT.as_bytes())?;
    db.flush()?;
    tracing::info!(index_entries = removed, from = FORMAT_2, to = FORMAT, "Store format upgraded.");
    Ok(())
}
