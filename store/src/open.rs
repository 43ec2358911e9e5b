//! Opening a data dir: sled's configuration and lock, the format check,
//! and the record locations loaded in the background.

use super::*;

/// Stops and joins the thread that fills the record locations.
pub(crate) struct Filler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// sled's log segment size for kubefold's data dirs: 8 MiB instead of
/// sled's 512 KiB. sled reuses a segment only once at most half of it is
/// live; with the event log's pages rewritten at the head and removed at the
/// tail, larger segments reach that point sooner. Under constant churn
/// (200,000 events over 10,000 pods, 100,000 retained) sled's files were
/// 3.6x the records at 512 KiB, 2.3x at 8 MiB, 2.4x at 16 MiB
/// (`examples/store_soak.rs`, BENCHMARKS.md). sled marks the setting as
/// meant for its tests, and keeps it in the data dir: it cannot change
/// afterwards (a different size is a different format here).
pub(crate) const SEGMENT_SIZE: usize = 8 * 1024 * 1024;

pub(crate) fn sled_config(path: &Path, options: &Options, segment_size: usize) -> sled::Config {
    sled::Config::new()
        .path(path)
        .flush_every_ms(Some(options.flush_every_ms))
        .cache_capacity(options.cache_capacity)
        .segment_size(segment_size)
}

/// How long an open waits for a data dir's lock that this process still
/// holds (see [`open_sled`]).
pub(crate) const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens sled in `path`. sled locks its `db` file (`flock`); after the last
/// handle of a store is dropped, work sled handed to its I/O threads may
/// keep the file, and so the lock, open for a moment. A lock held by this
/// process is therefore waited for (up to [`OWN_LOCK_WAIT`]); one held by
/// another process fails at once and names that process.
pub(crate) fn open_sled(path: &Path, options: &Options, segment_size: usize) -> Result<sled::Db> {
    let deadline = std::time::Instant::now() + OWN_LOCK_WAIT;
    loop {
        let failed = match sled_config(path, options, segment_size).open() {
            Ok(db) => return Ok(db),
            // Said in words: sled's own text of it is a debug dump.
            Err(sled::Error::Corruption { .. }) => {
                return Err(Error::Corrupt { what: format!("sled cannot read its files in {}: they hold damaged data", path.display()) })
            }
            Err(source) => source,
        };
        let locked = failed.to_string().contains("could not acquire lock");
        let holder = if locked { lock_holder(&path.join("db")) } else { None };
        let ours = holder.is_none_or(|pid| pid == std::process::id());
        if !locked || !ours || std::time::Instant::now() >= deadline {
            let source = match holder.filter(|pid| *pid != std::process::id()) {
                Some(pid) => sled::Error::Io(std::io::Error::other(format!(
                    "{failed}; the lock is held by process {pid}: another kubefold on this data dir?"
                ))),
                None => failed,
            };
            return Err(Error::OpenFailed { path: path.to_path_buf(), source });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The process holding a `flock` on `file`, from `/proc/locks` (Linux):
/// `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`. `None` when it
/// cannot be told.
pub(crate) fn lock_holder(file: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(file).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1:" "FLOCK" "ADVISORY" "WRITE" pid dev:inode ...; blocked
        // waiters are listed with "->" and do not hold the lock.
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let found: u64 = fields.get(5)?.rsplit(':').next()?.parse().ok()?;
        (found == inode).then(|| fields.get(4)?.parse().ok()).flatten()
    })
}

/// The segment size a sled data dir was created with (its `conf` file).
pub(crate) fn sled_segment_size(path: &Path) -> Option<usize> {
    // Text lines, then a binary checksum.
    let conf = std::fs::read(path.join("conf")).ok()?;
    String::from_utf8_lossy(&conf)
        .lines().find_map(|line| line.strip_prefix("segment_size:")?.trim().parse().ok())
}

/// Fills `locations` from the pointers in `tree`; true when every event
/// record is in the record log (none in sled itself).
pub(crate) fn fill_locations(tree: &sled::Tree, locations: &log::Locations, stop: &std::sync::atomic::AtomicBool) -> Result<bool> {
    let mut chunk = Vec::with_capacity(16 * 1024);
    let mut all_logged = true;
    for item in tree.scan_prefix([EVENT]) {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            // The store is closing: the locations will not be complete.
            return Ok(false);
        }
        let (k, v) = item?;
        match log::decode_entries(read_u64(&k[1..], "event key")?, &v).map_err(|what| Error::Corrupt { what })? {
            Some(events) => chunk.extend(events),
            None => all_logged = false,
        }
        if chunk.len() >= 16 * 1024 {
            locations.fill(chunk.drain(..));
        }
    }
    locations.fill(chunk);
    Ok(all_logged)
}

/// A random number (std's hasher keys are random per process and per `RandomState`).
pub(crate) fn random_u64(salt: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

impl Store {
    /// Opens (or creates) the store in `path`, refusing a data dir of another format.
    pub fn open(path: &Path, options: &Options) -> Result<Store> {
        let segment_size = match sled_segment_size(path) {
            // A data dir of another format: open it as it was written, to
            // name its format in the error (sled refuses another size).
            Some(size) if size != SEGMENT_SIZE => size,
            _ => SEGMENT_SIZE,
        };
        let db = open_sled(path, options, segment_size)?;
        if segment_size != SEGMENT_SIZE {
            let found = match db.open_tree("kubefold")?.get(meta_key("format"))? {
                Some(found) if found.as_ref() != FORMAT.as_bytes() => String::from_utf8_lossy(&found).into_owned(),
                Some(_) => format!("{FORMAT} with sled segments of {segment_size} bytes"),
                None => "(none)".into(),
            };
            return Err(Error::IncompatibleFormat { path: path.to_path_buf(), found });
        }
        Store::from_db(db, path, options)
    }

    /// A store over an open sled database, refusing another format.
    pub(crate) fn from_db(db: sled::Db, path: &Path, options: &Options) -> Result<Store> {
        let tree = db.open_tree("kubefold")?;
        upgrade(&db, &tree, path)?;
        if tree.get(meta_key("store-id"))?.is_none() {
            // Ties index snapshots to this store (a snapshot copied from
            // another data dir is ignored).
            let id: Vec<u8> = (0..2u64).flat_map(|i| random_u64(i).to_be_bytes()).collect();
            tree.insert(meta_key("store-id"), &id[..])?;
            db.flush()?;
        }
        let mut dicts = Dicts::new();
        let prefix = meta_key(DICT_PREFIX);
        for item in tree.scan_prefix(&prefix) {
            let (k, v) = item?;
            dicts.insert(String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), v.to_vec().into());
        }
        let log = log::RecordLog::open(path, options.log_segment_bytes).map_err(io_error)?;
        let locations = std::sync::Arc::new(log::Locations::default());
        let compacting = std::sync::Arc::new(std::sync::Mutex::new(()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Under the compaction lock: a compaction removing or moving records
        // while they are read here would leave stale locations behind.
        let thread = {
            let (compacting, tree, locations, stop) = (compacting.clone(), tree.clone(), locations.clone(), stop.clone());
            std::thread::Builder::new()
                .name("store-locations".into())
                .spawn(move || {
                    let _compacting = compacting.lock().unwrap_or_else(|e| e.into_inner());
                    let started = std::time::Instant::now();
                    match fill_locations(&tree, &locations, &stop) {
                        Ok(true) => locations.set_complete(),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(error = %e, "Record locations not loaded; reads look them up in sled."),
                    }
                    tracing::debug!(events = locations.len(), seconds = started.elapsed().as_secs_f64(), "Record locations loaded.");
                })
                .map_err(io_error)?
        };
        let store = Store {
            handle: std::sync::Arc::new(std::sync::RwLock::new(Some((db, tree)))),
            options: options.clone(),
            health: std::sync::Arc::default(),
            ceiling: std::sync::Arc::new(std::sync::Mutex::new(read_ceiling(path))),
            durability: options.durability,
            dir: path.to_path_buf(),
            snapshot: std::sync::Arc::new(std::sync::Mutex::new(0)),
            dicts: std::sync::Arc::new(std::sync::RwLock::new(dicts)),
            log: std::sync::Arc::new(log),
            compacting,
            locations,
            _filler: std::sync::Arc::new(Filler { stop, thread: Some(thread) }),
            pins: std::sync::Arc::new(Pins::default()),
            compressors: std::sync::Arc::new(std::sync::Mutex::new(Compressors::default())),
        };
        Ok(store)
    }
}
