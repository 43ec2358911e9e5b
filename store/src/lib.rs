//! kubefold's durable store: the event log, the member checkpoints and the
//! head resource version, in one sled tree so that each batch commit is one
//! atomic `apply_batch`; the event records themselves appended to the
//! record log beside it ([`log`]); and a snapshot of the index that makes a
//! warm start one sequential read.
//!
//! Key layout (all in the tree `kubefold`):
//! - `e` + big-endian u64 RV → where the event's record is in the record
//!   log (a [`log::Pointer`]; a data dir of format 3 may still hold records
//!   in sled itself, read the same way). A record is a head (everything
//!   of [`StoredEvent`] but the body, in the layout of the `codec` module,
//!   written and read by hand; records of format 5 and older in bincode's,
//!   read as they are), the Table row if any,
//!   then the body's JSON, LZ4 compressed (with its resource type's
//!   dictionary once there is one) when that makes it smaller;
//! - `c` + cluster `\0` resource → the member's resourceVersion (checkpoint);
//! - `m` + name → metadata (`format`, `head`, `compacted`, `store-id`,
//!   `dict/` + resource: the type's compression dictionary, never changed).
//!
//! The file `index.snapshot` in the data dir holds the whole index as of
//! some RV (written from time to time and at shutdown, see
//! [`Store::write_snapshot`]). Recovery loads it and replays the events
//! after it; it is used only when it belongs to this store, is intact, is
//! not ahead of the log's head and not older than the compaction floor, so
//! the recovered index always equals the replay of the retained log.
//!
//! Durability: every commit is atomic; it is durable once its records are
//! synced and sled has flushed, which [`Store::commit`] waits for when
//! [`Durability::Sync`] is chosen (records first: a durable pointer never
//! names bytes that are not), and which happens within `flush_every_ms`
//! otherwise. Several commits can be made durable with one sync: staged
//! ([`Store::stage`]) into a [`Group`], then committed together
//! ([`Store::commit_group`], one sled batch: all of the group or none).

//!
//! Modules, by job:
//! - `codec`: the binary layout of record heads and snapshots, written and
//!   read by hand (varints, strings, sequences);
//! - `record`: the record codec (heads, Table rows, bodies, LZ4 and the
//!   compression dictionaries);
//! - `log`: the record log, segment files of appended records;
//! - `keys`: the key layout of sled's tree and what an event key holds;
//! - `open`: opening a data dir (sled, its lock, the format check);
//! - `migrate`: the older formats and what opening one does;
//! - `commit`: committing a batch;
//! - `read`: reading events back, one or a range;
//! - `serve`: serving helpers ([`ChunkBuf`], bodies written as served,
//!   [`ReadAhead`]);
//! - `pin`: the records reads in progress keep from compaction;
//! - `recover`: rebuilding the index at start;
//! - `repair`: a damaged record log cut to its intact prefix, the lost
//!   history that answers 410;
//! - `live_repair`: damage found while serving, repaired while serving;
//! - `snapshot`: the index snapshot file;
//! - `ceiling`: the resourceVersion ceiling kept beside sled;
//! - `compact`: retention and compaction;
//! - `fault`: storage faults while running (causes, sled reopened after a
//!   failed write, injected faults for tests);
//! - `shared`: the seam of a log shared by several replicas (etcd);
//! - `backup`: backup and restore;
//! - `usage`: what the store holds, counted;
//! - `lz4`: LZ4 block compression with a prepared dictionary.

mod backup;
mod ceiling;
mod codec;
mod commit;
mod compact;
mod fault;
#[cfg(test)]
mod group_tests;
mod keys;
mod live_repair;
pub mod log;
mod lz4;
mod migrate;
mod open;
mod pin;
mod read;
mod record;
mod recover;
mod repair;
mod serve;
pub mod shared;
mod snapshot;
mod usage;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubefold_engine::event::{EventType, IndexEntry, ObjectKey, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::object::{ServedBody, TableRow};
use thiserror::Error;

use codec::*;
use keys::*;
use migrate::*;
use open::*;
use pin::*;
use read::*;
use record::*;

pub use ceiling::{read_ceiling, CEILING_FILE, CEILING_STEP};
pub use commit::Group;
pub use fault::{Cause, Fault};
pub use live_repair::{create_quarantine_dir, DAMAGE_NOTE};
pub use pin::ReadPin;
pub use record::{decode_event, decode_event_with, encode_event, new_dictionaries, Dicts, RecordEncoder};
pub use repair::{Damage, Truncated};
pub use serve::{write_served_event, ChunkBuf, ReadAhead, ReadCache};
pub use usage::{RecordBytes, Usage};

/// The on-disk format this build writes and reads.
pub const FORMAT: &str = "kubefold-store/6";

/// The index snapshot's file name inside the data dir.
pub const SNAPSHOT_FILE: &str = "index.snapshot";

/// Errors of the store.
#[derive(Debug, Error)]
pub enum Error {
    /// sled could not open the data directory.
    #[error("cannot open data dir {path}: {source}")]
    OpenFailed {
        /// The data directory.
        path: PathBuf,
        /// sled's error.
        #[source]
        source: sled::Error,
    },
    /// The data directory was written by another, incompatible format.
    #[error("data dir {path} holds format {found:?}, this kubefold reads {FORMAT:?}: restore a backup made by a matching version or start with an empty --data-dir")]
    IncompatibleFormat {
        /// The data directory.
        path: PathBuf,
        /// What it holds.
        found: String,
    },
    /// A record could not be decoded: the data directory is damaged.
    #[error("data dir is corrupt: {what}: restore a backup or start with an empty --data-dir")]
    Corrupt {
        /// What could not be read.
        what: String,
    },
    /// A write or read failed.
    #[error("store i/o failed: {0}")]
    Io(#[from] sled::Error),
    /// The store cannot be used until a storage fault is over.
    #[error("store unavailable ({}): {what}", cause.describe())]
    Unavailable {
        /// The fault.
        cause: Cause,
        /// What is going on.
        what: String,
    },
}

/// `Result` of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// When a commit is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `commit` returns after sled has flushed the batch to disk.
    Sync,
    /// `commit` returns after the batch is applied; sled flushes it within
    /// its `flush_every_ms` period, and the record log is synced with it
    /// only by [`Store::flush`], snapshots and compactions: a process crash
    /// loses nothing written, a power loss may leave pointers to records
    /// that never reached the disk, which reads report as corrupt.
    Periodic,
}

/// How to open the store.
#[derive(Debug, Clone)]
pub struct Options {
    /// When a commit is durable.
    pub durability: Durability,
    /// sled's background flush period in milliseconds.
    pub flush_every_ms: u64,
    /// sled's page cache size in bytes.
    pub cache_capacity: u64,
    /// The size at which a record log segment is closed ([`log::SEGMENT_BYTES`]).
    pub log_segment_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { durability: Durability::Sync, flush_every_ms: 500, cache_capacity: 256 * 1024 * 1024, log_segment_bytes: log::SEGMENT_BYTES }
    }
}

/// One atomic commit: events, the member checkpoints reached, and the new
/// head RV (the index follows from the events).
#[derive(Debug, Default)]
pub struct Commit {
    /// Events in RV order.
    pub events: Vec<StoredEvent>,
    /// (cluster, resource, member RV) checkpoints reached with these events.
    pub checkpoints: Vec<(String, String, String)>,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CompactStats {
    /// The new compaction floor.
    pub floor: u64,
    /// Events removed.
    pub removed: u64,
    /// Events at or below the floor kept as live or needed versions.
    pub kept: u64,
}

/// How [`Store::recover`] rebuilt the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryPath {
    /// From the snapshot at `snapshot_rv`, then `replayed` events of the log.
    Snapshot {
        /// The snapshot's RV.
        snapshot_rv: u64,
        /// Events after it, applied from the log.
        replayed: u64,
    },
    /// From a replay of the whole retained log, because of `reason`.
    Replay {
        /// Why the snapshot was not used.
        reason: String,
    },
}

impl std::fmt::Display for RecoveryPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryPath::Snapshot { snapshot_rv, replayed } => {
                write!(f, "snapshot at RV {snapshot_rv} plus {replayed} events of the log")
            }
            RecoveryPath::Replay { reason } => write!(f, "replay of the whole log ({reason})"),
        }
    }
}

/// What a snapshot write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStats {
    /// The RV the snapshot is at.
    pub rv: u64,
    /// Objects in it.
    pub objects: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// How often a replay reports its progress, in events.
pub const REPLAY_REPORT_EVENTS: u64 = 4_096;

/// How far the replay of the log at start is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayProgress {
    /// The first RV replayed (after the snapshot's).
    pub from_rv: u64,
    /// The RV reached.
    pub at_rv: u64,
    /// The RV the replay ends at.
    pub head_rv: u64,
    /// Events applied so far.
    pub replayed: u64,
}

impl ReplayProgress {
    /// The share of the RV range replayed, 0 to 1 (compaction leaves gaps
    /// in the range, so this is an estimate of the share of the events).
    pub fn fraction(&self) -> f64 {
        let span = self.head_rv.saturating_sub(self.from_rv);
        if span == 0 {
            return 1.0;
        }
        (self.at_rv.saturating_sub(self.from_rv) as f64 / span as f64).clamp(0.0, 1.0)
    }

    /// The time left at the pace of `elapsed` so far; `None` before any
    /// progress.
    pub fn time_left(&self, elapsed: std::time::Duration) -> Option<std::time::Duration> {
        let done = self.fraction();
        (done > 0.0).then(|| elapsed.mul_f64((1.0 - done) / done))
    }
}

/// What the store holds at start.
#[derive(Debug)]
pub struct Recovered {
    /// How the index was rebuilt.
    pub path: RecoveryPath,
    /// The merged index as of the head RV.
    pub index: Index,
    /// Member RV checkpoints by (cluster, resource).
    pub checkpoints: BTreeMap<(String, String), String>,
    /// The oldest RV whose events are retained is `compacted_rv + 1`.
    pub compacted_rv: u64,
}

/// The sled-backed store.
#[derive(Clone)]
pub struct Store {
    /// sled's database and tree, replaced after a failed write.
    handle: std::sync::Arc<std::sync::RwLock<fault::Handle>>,
    /// The options it was opened with (to open it again).
    options: Options,
    /// The resourceVersion ceiling ([`ceiling`]).
    ceiling: std::sync::Arc<std::sync::Mutex<u64>>,
    /// The fault the store is in, and an injected one.
    health: std::sync::Arc<fault::Health>,
    durability: Durability,
    dir: PathBuf,
    /// Serialises snapshot writes; holds the RV of the newest one written.
    snapshot: std::sync::Arc<std::sync::Mutex<u64>>,
    /// The body compression dictionaries (`m` + `dict/` + resource).
    dicts: std::sync::Arc<std::sync::RwLock<Dicts>>,
    /// The event records.
    log: std::sync::Arc<log::RecordLog>,
    /// How commits compress bodies.
    compressors: std::sync::Arc<std::sync::Mutex<Compressors>>,
    /// Held while a compaction runs (it alone changes or removes events),
    /// and while `locations` is filled.
    compacting: std::sync::Arc<std::sync::Mutex<()>>,
    /// Where the records are, in memory.
    locations: std::sync::Arc<log::Locations>,
    /// The thread filling `locations` at open, stopped and joined when the
    /// last handle goes (it holds the sled tree, and so the data dir's lock).
    _filler: std::sync::Arc<Filler>,
    /// What the responses being served read: compaction keeps it.
    pins: std::sync::Arc<Pins>,
}

fn io_error(e: std::io::Error) -> Error {
    Error::Io(sled::Error::Io(e))
}

impl Store {
    /// The RV of the last committed event (0 for a new store).
    pub fn head_rv(&self) -> Result<u64> {
        match self.tree()?.get(meta_key("head"))? {
            Some(v) => read_u64(&v, "head rv"),
            None => Ok(0),
        }
    }

    /// Events up to this RV have been compacted away (0 when none).
    pub fn compacted_rv(&self) -> Result<u64> {
        match self.tree()?.get(meta_key("compacted"))? {
            Some(v) => read_u64(&v, "compacted rv"),
            None => Ok(0),
        }
    }

    /// Makes the next resourceVersion served come after `min_rv`, for a data
    /// dir that starts empty on purpose (a new disk, a restore of an older
    /// backup) while clients may hold resourceVersions up to `min_rv`: the
    /// head is raised to `min_rv` and the compaction floor with it, so a
    /// client's older resourceVersion is answered 410 Gone and it lists
    /// again. Nothing is done when the head is already there; returns
    /// whether it was raised.
    pub fn raise_head(&self, min_rv: u64) -> Result<bool> {
        if self.head_rv()? >= min_rv {
            return Ok(false);
        }
        let mut batch = sled::Batch::default();
        batch.insert(meta_key("head"), &min_rv.to_be_bytes()[..]);
        if self.compacted_rv()? < min_rv {
            batch.insert(meta_key("compacted"), &min_rv.to_be_bytes()[..]);
        }
        self.tree()?.apply_batch(batch)?;
        self.db()?.flush()?;
        Ok(true)
    }

    /// Moves the head to `rv` without an event, when it is below (a copy of
    /// a shared log whose last events were compacted away); returns
    /// whether it moved.
    pub fn advance_head(&self, rv: u64) -> Result<bool> {
        if self.head_rv()? >= rv {
            return Ok(false);
        }
        self.keep_below_ceiling(rv)?;
        self.tree()?.insert(meta_key("head"), &rv.to_be_bytes()[..])?;
        self.db()?.flush()?;
        Ok(true)
    }

    /// Removes the checkpoint of one resource type of a cluster (it is no
    /// longer watched there).
    pub fn remove_checkpoint(&self, cluster: &str, resource: &str) -> Result<()> {
        self.tree()?.remove(checkpoint_key(cluster, resource))?;
        Ok(())
    }

    /// The checkpoints of a cluster, by resource (a replica taking a member
    /// over from another resumes its watchers from them).
    pub fn checkpoints_of(&self, cluster: &str) -> Result<BTreeMap<String, String>> {
        let mut prefix = vec![CHECKPOINT];
        prefix.extend_from_slice(cluster.as_bytes());
        prefix.push(0);
        let mut out = BTreeMap::new();
        for item in self.tree()?.scan_prefix(&prefix) {
            let (k, v) = item?;
            let resource = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            out.insert(resource, String::from_utf8_lossy(&v).into_owned());
        }
        Ok(out)
    }

    /// Removes the checkpoints of a cluster (it was removed).
    pub fn remove_checkpoints(&self, cluster: &str) -> Result<()> {
        let mut prefix = vec![CHECKPOINT];
        prefix.extend_from_slice(cluster.as_bytes());
        prefix.push(0);
        let mut batch = sled::Batch::default();
        for item in self.tree()?.scan_prefix(prefix) {
            batch.remove(item?.0);
        }
        self.tree()?.apply_batch(batch)?;
        Ok(())
    }

    /// Writes a metadata value and flushes it; a failure is a storage
    /// fault as a failed commit is (see [`Store::commit`]).
    pub fn put_meta(&self, name: &str, value: &[u8]) -> Result<()> {
        let result = self.before_commit().and_then(|()| {
            self.tree()?.insert(meta_key(name), value)?;
            self.db()?.flush()?;
            Ok(())
        });
        self.after_commit(&result);
        result
    }

    /// A metadata value, if set.
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.tree()?.get(meta_key(name))?.map(|v| v.to_vec()))
    }

    /// A metadata value, created by `init` (and flushed) when absent.
    pub fn meta_or_init(&self, name: &str, init: impl FnOnce() -> Vec<u8>) -> Result<Vec<u8>> {
        if let Some(v) = self.tree()?.get(meta_key(name))? {
            return Ok(v.to_vec());
        }
        let value = init();
        self.tree()?.insert(meta_key(name), value.clone())?;
        self.db()?.flush()?;
        Ok(value)
    }

    /// Flushes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.flush_all()
    }

    /// Bytes the data directory takes on disk: sled's files (as sled
    /// reports them) and the record log's segments.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db()?.size_on_disk()? + self.log.size().map_err(io_error)?)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod repair_tests;
