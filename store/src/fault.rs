//! Storage faults while running: what a failed write was caused by, the
//! fault the store is in until a commit succeeds again, sled reopened
//! after a failed write, and a hook that injects faults into commits for
//! tests.
//!
//! sled 0.34 keeps the first error of a failed write of its log buffers
//! ("hit error while writing iobuf") and returns it from every later
//! operation of that `Db`: once space is back it still fails. The store
//! therefore drops the `Db` after a failed write and opens the data dir
//! again before the next commit ([`Store::commit`] does so by itself).
//! The record log needs nothing: a failed append leaves dead bytes after
//! the end, and the next one writes after them.

use super::*;

/// The file written to tell whether the data dir takes writes again.
const PROBE_FILE: &str = "write-probe";

/// Its size: room for sled to open and write a few batches.
const PROBE_BYTES: usize = 1024 * 1024;

/// sled's database and kubefold's tree in it; `None` between the drop of a
/// failed one and a successful reopen.
pub(crate) type Handle = Option<(sled::Db, sled::Tree)>;

/// What a failed write was caused by, as the metric label
/// `kubefold_commit_failures_total{cause}` and the health checks name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// ENOSPC or EDQUOT: the filesystem is full or the quota is reached.
    NoSpace,
    /// EROFS: the filesystem was remounted read-only.
    ReadOnly,
    /// Any other I/O error.
    Io,
    /// The data read back is damaged.
    Corrupt,
    /// Anything else (a bug, an unsupported layout).
    Other,
}

impl Cause {
    /// The label value: `no-space`, `read-only`, `io`, `corrupt`, `other`.
    pub fn label(self) -> &'static str {
        match self {
            Cause::NoSpace => "no-space",
            Cause::ReadOnly => "read-only",
            Cause::Io => "io",
            Cause::Corrupt => "corrupt",
            Cause::Other => "other",
        }
    }

    /// What it is, in words (`no space left on device`).
    pub fn describe(self) -> &'static str {
        match self {
            Cause::NoSpace => "no space left on device",
            Cause::ReadOnly => "read-only file system",
            Cause::Io => "i/o error",
            Cause::Corrupt => "data dir damaged",
            Cause::Other => "write failed",
        }
    }

    /// What the operator does about it.
    pub fn advice(self) -> &'static str {
        match self {
            Cause::NoSpace => "free space on the data dir's filesystem or grow it; ingestion resumes by itself",
            Cause::ReadOnly => "remount the data dir's filesystem read-write (check the kernel log for why it went read-only); ingestion resumes by itself",
            Cause::Io => "check the disk (kernel log, SMART); ingestion resumes by itself once writes succeed",
            Cause::Corrupt => "see store.onCorruption; restore a backup or let kubefold rebuild from the members",
            Cause::Other => "see the error; ingestion is retried",
        }
    }

    /// Every cause, for series that must exist before the first failure.
    pub const ALL: [Cause; 5] = [Cause::NoSpace, Cause::ReadOnly, Cause::Io, Cause::Corrupt, Cause::Other];
}

/// The cause of an I/O error.
fn io_cause(e: &std::io::Error) -> Cause {
    match e.raw_os_error() {
        Some(28) | Some(122) => return Cause::NoSpace,
        Some(30) => return Cause::ReadOnly,
        _ => {}
    }
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => Cause::NoSpace,
        std::io::ErrorKind::ReadOnlyFilesystem => Cause::ReadOnly,
        _ => {
            // sled wraps the error of its I/O threads in a message.
            let text = e.to_string();
            if text.contains("No space left") || text.contains("os error 28") {
                Cause::NoSpace
            } else if text.contains("Read-only file system") || text.contains("os error 30") {
                Cause::ReadOnly
            } else {
                Cause::Io
            }
        }
    }
}

impl Error {
    /// What caused it.
    pub fn cause(&self) -> Cause {
        match self {
            Error::Io(sled::Error::Io(e)) => io_cause(e),
            Error::Io(sled::Error::Corruption { .. }) | Error::Corrupt { .. } => Cause::Corrupt,
            Error::Io(other) => {
                let text = other.to_string();
                if text.contains("No space left") || text.contains("os error 28") {
                    Cause::NoSpace
                } else if text.contains("Read-only file system") || text.contains("os error 30") {
                    Cause::ReadOnly
                } else {
                    Cause::Other
                }
            }
            Error::OpenFailed { source: sled::Error::Io(e), .. } => io_cause(e),
            Error::OpenFailed { source: sled::Error::Corruption { .. }, .. } => Cause::Corrupt,
            Error::Unavailable { cause, .. } => *cause,
            _ => Cause::Other,
        }
    }
}

/// A fault injected into commits (tests of storage faults).
#[derive(Debug, Clone)]
pub enum Fault {
    /// Each commit fails with this OS error (28: no space, 30: read-only,
    /// 5: I/O error) before it writes anything; sled is treated as failed
    /// (it is reopened before the next commit), as after a real failure.
    Fail(i32),
    /// Each commit fails with this OS error, and sled's `Db` is left failing
    /// every later write, as sled 0.34 does after a failed write of its log
    /// buffers: the next commit once the fault is lifted must drop it and
    /// open the data dir again ([`Store::reopens`] counts it).
    Wedge(i32),
    /// Each commit waits this long first (a disk whose syncs stall).
    Stall(std::time::Duration),
}

/// The store's state of health: the fault of the last failed write, until
/// a commit succeeds, and the injected fault.
#[derive(Default)]
pub(crate) struct Health {
    /// The cause and message of the last failed commit, while it lasts.
    pub(crate) fault: std::sync::Mutex<Option<(Cause, String)>>,
    /// sled failed a write: open it again before the next one.
    pub(crate) reopen: std::sync::atomic::AtomicBool,
    /// Injected into commits.
    pub(crate) injected: std::sync::Mutex<Option<Fault>>,
    /// One above the highest resourceVersion whose record was found
    /// damaged while reading (0: none): requests from below it answer 410.
    pub(crate) damaged_below: std::sync::atomic::AtomicU64,
    /// Damaged records found while reading.
    pub(crate) damaged_records: std::sync::atomic::AtomicU64,
    /// Which records were found damaged, and which wait for their repair.
    pub(crate) found: std::sync::Mutex<crate::live_repair::Found>,
    /// sled's `Db` fails every write (an injected [`Fault::Wedge`]) until reopened.
    pub(crate) wedged: std::sync::atomic::AtomicBool,
    /// Times sled was opened again after a failed write.
    pub(crate) reopens: std::sync::atomic::AtomicU64,
}

impl Store {
    /// sled's database (an error while it is being reopened after a failure).
    pub(crate) fn db(&self) -> Result<sled::Db> {
        let handle = self.handle.read().unwrap_or_else(|e| e.into_inner());
        handle.as_ref().map(|(db, _)| db.clone()).ok_or_else(|| self.unavailable())
    }

    /// kubefold's tree in sled (an error while it is being reopened).
    pub(crate) fn tree(&self) -> Result<sled::Tree> {
        let handle = self.handle.read().unwrap_or_else(|e| e.into_inner());
        handle.as_ref().map(|(_, tree)| tree.clone()).ok_or_else(|| self.unavailable())
    }

    fn unavailable(&self) -> Error {
        let cause = self.fault().map_or(Cause::Other, |(cause, _)| cause);
        Error::Unavailable { cause, what: "sled is being reopened after a failed write".into() }
    }

    /// The storage fault the store is in: the cause and message of the
    /// last failed commit, until one succeeds again.
    pub fn fault(&self) -> Option<(Cause, String)> {
        self.health.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Injects `fault` into every commit from now on (`None`: stop);
    /// for tests of storage faults.
    pub fn inject_fault(&self, fault: Option<Fault>) {
        *self.health.injected.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// Before a commit: waits or fails as an injected fault says, and
    /// reopens sled if a write failed before.
    pub(crate) fn before_commit(&self) -> Result<()> {
        let injected = self.health.injected.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match injected {
            Some(Fault::Stall(delay)) => std::thread::sleep(delay),
            Some(Fault::Fail(code)) => return Err(Error::Io(sled::Error::Io(std::io::Error::from_raw_os_error(code)))),
            Some(Fault::Wedge(code)) => {
                self.health.wedged.store(true, std::sync::atomic::Ordering::Release);
                return Err(Error::Io(sled::Error::Io(std::io::Error::from_raw_os_error(code))));
            }
            None => {}
        }
        let lost = self.handle.read().unwrap_or_else(|e| e.into_inner()).is_none();
        if lost || self.health.reopen.load(std::sync::atomic::Ordering::Acquire) {
            // sled is reopened only once the data dir takes writes again:
            // until then the failed `Db` stays, and reads go on through it.
            self.probe_writes()?;
            // sled keeps working after some failed writes (a failed sync
            // of a batch): reopened only when it still fails.
            if !lost && self.sled_writes() {
                self.health.reopen.store(false, std::sync::atomic::Ordering::Release);
                return Ok(());
            }
            self.reopen()?;
        }
        Ok(())
    }

    /// Whether the open `Db` takes a write and a flush.
    fn sled_writes(&self) -> bool {
        if self.health.wedged.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let (Ok(db), Ok(tree)) = (self.db(), self.tree()) else { return false };
        let key = meta_key(PROBE_FILE);
        tree.insert(&key, &b"1"[..]).is_ok() && tree.remove(&key).is_ok() && db.flush().is_ok()
    }

    /// Whether the data dir takes writes again: a file of
    /// [`PROBE_BYTES`] written, synced and removed.
    fn probe_writes(&self) -> Result<()> {
        use std::io::Write as _;
        let path = self.dir.join(PROBE_FILE);
        let written = (|| {
            let mut file = std::fs::File::create(&path)?;
            file.write_all(&vec![0u8; PROBE_BYTES])?;
            file.sync_all()
        })();
        let _ = std::fs::remove_file(&path);
        written.map_err(io_error)
    }

    /// After a commit: remembers the fault of a failed one (and that sled
    /// must be reopened), forgets it after a successful one.
    pub(crate) fn after_commit(&self, result: &Result<()>) {
        let mut fault = self.health.fault.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                if let Some((cause, _)) = fault.take() {
                    tracing::info!(cause = cause.describe(), "Store writes succeed again; the storage fault is over.");
                }
            }
            Err(e) => {
                let cause = e.cause();
                if matches!(e, Error::Io(_)) {
                    self.health.reopen.store(true, std::sync::atomic::Ordering::Release);
                }
                *fault = Some((cause, e.to_string()));
            }
        }
    }

    /// Drops sled's failed `Db` (if still held) and opens the data dir again, as it is on
    /// disk (a batch whose write failed may or may not be there; the
    /// commits after it overwrite what it left).
    pub(crate) fn reopen(&self) -> Result<()> {
        // Every handle of the old `Db` must go before its lock is free; the
        // thread filling the locations and a compaction hold one until
        // they are done.
        let _compacting = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
        let mut handle = self.handle.write().unwrap_or_else(|e| e.into_inner());
        if let Some((db, tree)) = handle.take() {
            let _ = db.flush();
            drop(tree);
            drop(db);
        }
        let db = open_sled(&self.dir, &self.options, SEGMENT_SIZE)?;
        let tree = db.open_tree("kubefold")?;
        tracing::info!(dir = %self.dir.display(), "Store reopened after a failed write.");
        *handle = Some((db, tree));
        self.health.reopen.store(false, std::sync::atomic::Ordering::Release);
        self.health.wedged.store(false, std::sync::atomic::Ordering::Release);
        self.health.reopens.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Times sled was opened again after a failed write since the store opened.
    pub fn reopens(&self) -> u64 {
        self.health.reopens.load(std::sync::atomic::Ordering::Acquire)
    }
}
