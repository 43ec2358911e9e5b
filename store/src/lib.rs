//! kubefold's durable store: the event log, the member checkpoints and the
//! head resource version, in one sled tree so that each batch commit is one
//! atomic `apply_batch`; the event records themselves appended to the
//! record log beside it ([`log`]); and a snapshot of the index that makes a
//! warm start one sequential read.
//!
//! Key layout (all in the tree `kubefold`):
//! - `e` + big-endian u64 RV → where the event's record is in the record
//!   log (a [`log::Pointer`]; a data dir of format 3 may still hold records
//!   in sled itself, read the same way). A record is a bincode head
//!   (everything of [`StoredEvent`] but the body), the Table row if any,
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
//! otherwise.

pub mod log;
mod lz4;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubefold_engine::event::{EventType, IndexEntry, ObjectKey, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::object::{ServedBody, TableRow};
use thiserror::Error;

/// The on-disk format this build writes and reads.
pub const FORMAT: &str = "kubefold-store/5";

/// The format before: one sled key per event, holding its record's
/// [`log::Pointer`]. This build reads such pointers as they are and writes
/// a commit's pointers in groups ([`log::encode_group`]), so opening a
/// data dir of this format only renames it (after which an older
/// kubefold refuses it).
const FORMAT_4: &str = "kubefold-store/4";

/// The format before: event records inside sled's tree. This build reads
/// such records as they are (they leave with compaction) and writes new
/// ones to the record log, so opening a data dir of this format only
/// renames it (after which an older kubefold refuses it).
const FORMAT_3: &str = "kubefold-store/3";

/// The format before that: format 3's records plus an index entry per live object
/// (`i` records), which this build removes when it opens such a data dir.
/// Keeping an entry per object in the B-tree beside the log cost a quarter
/// of kubefold's CPU in a sync (each commit rewrote leaves all over the
/// tree: 100,000 pods from 10 members, 11.1 and 11.7 CPU-s with the entries,
/// 8.7 and 8.4 without), and the snapshot plus the log hold the same.
const FORMAT_2: &str = "kubefold-store/2";

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
    /// Encoding an envelope failed.
    #[error("cannot encode record: {0}")]
    Encode(#[from] bincode::error::EncodeError),
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
    db: sled::Db,
    tree: sled::Tree,
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

/// The event records that reads in progress will read, kept by compaction
/// until each read ends (a list is streamed from the records of its
/// snapshot; kube-apiserver never ends a list response early because etcd
/// compacted).
#[derive(Default)]
struct Pins {
    next: std::sync::atomic::AtomicU64,
    held: std::sync::Mutex<std::collections::HashMap<u64, Pinned>>,
}

/// What one read keeps.
#[derive(Clone)]
enum Pinned {
    /// Every object of an index (until the read knows which it needs).
    Index(std::sync::Arc<Index>),
    /// These events.
    Rvs(std::sync::Arc<[u64]>),
    /// Every event after this RV (a watch replaying them).
    After(u64),
}

/// A read's hold on event records: compaction keeps them until it is
/// dropped (see [`Store::pin`]).
pub struct ReadPin {
    pins: std::sync::Arc<Pins>,
    id: u64,
}

impl ReadPin {
    /// Keeps only the records of the events `rvs` from now on.
    pub fn narrow(&self, rvs: std::sync::Arc<[u64]>) {
        if let Some(pinned) = self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&self.id) {
            *pinned = Pinned::Rvs(rvs);
        }
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

/// Stops and joins the thread that fills the record locations.
struct Filler {
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

/// Gaps up to this many bytes between records are read through by
/// [`Store::read_ahead`] rather than read apart (a read costs more than
/// copying a few records' bytes)...
const READ_AHEAD_GAP: u64 = 16 * 1024;
/// ... and its reads are at most this long.
const READ_AHEAD_SPAN: u64 = 1024 * 1024;

/// Event records read together ([`Store::read_ahead`]).
#[derive(Default)]
pub struct ReadAhead {
    /// By RV.
    records: Vec<(u64, Held)>,
    spans: Vec<Vec<u8>>,
    /// The dictionaries when the records were read (looked up once per
    /// batch, not once per record under the store's lock).
    dicts: Dicts,
}

/// Where a record of a [`ReadAhead`] is.
enum Held {
    Inline(sled::IVec),
    Span { span: u32, start: u32, len: u32 },
}

impl ReadAhead {
    /// The record of the event at `rv`, if read.
    fn get(&self, rv: u64) -> Option<&[u8]> {
        let at = self.records.binary_search_by_key(&rv, |(rv, _)| *rv).ok()?;
        Some(match &self.records[at].1 {
            Held::Inline(value) => value,
            Held::Span { span, start, len } => &self.spans[*span as usize][*start as usize..(*start + *len) as usize],
        })
    }
}

/// An event record as read: from the record log, or from sled itself (format 3).
enum Record {
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

fn io_error(e: std::io::Error) -> Error {
    Error::Io(sled::Error::Io(e))
}

/// A buffer written from its start again and again (a list's chunk): the
/// first [`ChunkBuf::len`] bytes are what was written since it was
/// cleared, the bytes after them space kept from earlier use. A body
/// decompressed into that space needs no clearing first: `Vec::resize`
/// clearing every body's bytes before LZ4 wrote them was 6 % of a 100k
/// list's CPU. Only growth beyond what the buffer ever held is cleared.
#[derive(Default)]
pub struct ChunkBuf {
    bytes: Vec<u8>,
    len: usize,
}

impl ChunkBuf {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> ChunkBuf {
        ChunkBuf { bytes: Vec::with_capacity(capacity), len: 0 }
    }

    /// What was written since the buffer was cleared.
    pub fn written(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Bytes written since the buffer was cleared.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing written since the buffer was cleared.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer holds without growing.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Makes room for at least `additional` more bytes.
    pub fn reserve(&mut self, additional: usize) {
        self.bytes.reserve((self.len + additional).saturating_sub(self.bytes.len()));
    }

    /// Forgets what was written; the space stays for the next writes.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Writes one byte.
    pub fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    /// Writes `bytes`.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.space(bytes.len()).copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// The `n` bytes after what was written, to write into before
    /// [`ChunkBuf::commit`]; their contents are whatever was there.
    fn space(&mut self, n: usize) -> &mut [u8] {
        let end = self.len + n;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        &mut self.bytes[self.len..end]
    }

    /// Counts `n` bytes of the space as written.
    fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Writes through a `Vec` (for writers that need one), after what was
    /// written; the space after it is given up.
    pub fn with_vec<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.bytes.truncate(self.len);
        let result = write(&mut self.bytes);
        self.len = self.bytes.len();
        result
    }
}

/// Writes the object of `record` (the event at `rv`) as served, see
/// [`Store::write_served`], with the store's dictionaries `dicts`.
fn write_served_record(record: &[u8], rv: u64, name_suffix: Option<&str>, dicts: &Dicts, out: &mut ChunkBuf) -> Result<()> {
    let (head, used) = BodyHead::read(record)?;
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    let (_, body) = row_section(head.rv, head.body_codec, head.body_len, &record[used..])?;
    let len = head.body_len as usize;
    let room = kubefold_engine::object::hole_bytes(name_suffix, rv);
    let space = out.space(room + len);
    let target = &mut space[room..];
    let written = match head.body_codec & !BODY_WITH_ROW {
        BODY_LZ4 => lz4_flex::block::decompress_into(body, target).ok(),
        BODY_LZ4_DICT => match dicts.get(head.resource) {
            Some(dict) => lz4_flex::block::decompress_into_with_dict(body, target, dict).ok(),
            None => return Err(Error::Corrupt { what: format!("event {}: no compression dictionary for {}", head.rv, head.resource) }),
        },
        _ if body.len() == len => {
            target.copy_from_slice(body);
            Some(len)
        }
        _ => None,
    };
    if written != Some(len) {
        return Err(Error::Corrupt { what: format!("event {}: stored body does not decode to its {len} bytes", head.rv) });
    }
    kubefold_engine::object::open_holes(space, 0, head.name_end, head.rv_at, name_suffix, rv);
    out.commit(room + len);
    Ok(())
}

/// First bytes of a backup file.
const BACKUP_MAGIC: &[u8; 18] = b"kubefold-backup/2\n";

/// First bytes of an index snapshot file.
const SNAPSHOT_MAGIC: &[u8; 24] = b"kubefold-index-snapshot\n";

/// How an event's body is stored after its head: as it is, LZ4, or LZ4
/// with the dictionary of the event's resource type.
const BODY_RAW: u8 = 0;
const BODY_LZ4: u8 = 1;
const BODY_LZ4_DICT: u8 = 2;
/// Set in a record's body encoding when the object's Table row
/// ([`kubefold_engine::object::TableRow`]) comes between the head and the
/// body: its metadata start and end and its template's length (each a u32,
/// little-endian), then the template.
const BODY_WITH_ROW: u8 = 0x80;

/// A resource type's compression dictionary is made of the first bodies of
/// that type committed in one batch: at least this many bytes of them...
const DICT_MIN_BYTES: usize = 4 * 1024;
/// ... and at most this many (LZ4 reaches back 64 KiB).
const DICT_MAX_BYTES: usize = 16 * 1024;
/// Compression dictionaries by resource type (immutable once written).
type Dicts = std::collections::HashMap<String, std::sync::Arc<[u8]>>;

const EVENT: u8 = b'e';
/// Index entries of [`FORMAT_2`] (removed on open).
const FORMAT_2_INDEX: u8 = b'i';
const CHECKPOINT: u8 = b'c';
const META: u8 = b'm';

/// Meta key prefix of the compression dictionaries.
const DICT_PREFIX: &str = "dict/";

/// Largest record the store decodes: no length read from a damaged record
/// can make decoding allocate more than this.
const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

fn config() -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint, bincode::config::Limit<MAX_RECORD_BYTES>> {
    bincode::config::standard().with_limit::<MAX_RECORD_BYTES>()
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
const SEGMENT_SIZE: usize = 8 * 1024 * 1024;

fn sled_config(path: &Path, options: &Options, segment_size: usize) -> sled::Config {
    sled::Config::new()
        .path(path)
        .flush_every_ms(Some(options.flush_every_ms))
        .cache_capacity(options.cache_capacity)
        .segment_size(segment_size)
}

/// How long an open waits for a data dir's lock that this process still
/// holds (see [`open_sled`]).
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens sled in `path`. sled locks its `db` file (`flock`); after the last
/// handle of a store is dropped, work sled handed to its I/O threads may
/// keep the file, and so the lock, open for a moment. A lock held by this
/// process is therefore waited for (up to [`OWN_LOCK_WAIT`]); one held by
/// another process fails at once and names that process.
fn open_sled(path: &Path, options: &Options, segment_size: usize) -> Result<sled::Db> {
    let deadline = std::time::Instant::now() + OWN_LOCK_WAIT;
    loop {
        let failed = match sled_config(path, options, segment_size).open() {
            Ok(db) => return Ok(db),
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
fn lock_holder(file: &Path) -> Option<u32> {
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
fn sled_segment_size(path: &Path) -> Option<usize> {
    // Text lines, then a binary checksum.
    let conf = std::fs::read(path.join("conf")).ok()?;
    String::from_utf8_lossy(&conf)
        .lines().find_map(|line| line.strip_prefix("segment_size:")?.trim().parse().ok())
}

fn event_key(rv: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = EVENT;
    k[1..].copy_from_slice(&rv.to_be_bytes());
    k
}

/// One event as sled holds it: where its record is in the record log, or
/// (format 3) the record itself.
#[derive(Debug, Clone)]
enum Located {
    Logged(log::Pointer),
    Inline(sled::IVec),
}

/// The events of an `e` key and its value, in RV order.
fn located(key: &[u8], value: sled::IVec) -> Result<Vec<(u64, Located)>> {
    let rv = read_u64(key.get(1..).unwrap_or_default(), "event key")?;
    match log::decode_entries(rv, &value).map_err(|what| Error::Corrupt { what: format!("event {rv}: {what}") })? {
        None => Ok(vec![(rv, Located::Inline(value))]),
        Some(events) => Ok(events.into_iter().map(|(rv, pointer)| (rv, Located::Logged(pointer))).collect()),
    }
}

/// The value to keep under `key` for `events` (what is left of its
/// events, in RV order): `None` when none is left, the record itself for
/// a format 3 record, else the group of their pointers.
fn left_value(key: &[u8], events: Vec<(u64, Located)>) -> Result<Option<sled::IVec>> {
    let key_rv = read_u64(key.get(1..).unwrap_or_default(), "event key")?;
    let mut logged = Vec::with_capacity(events.len());
    for (rv, located) in events {
        match located {
            Located::Logged(pointer) => logged.push((rv, pointer)),
            // Only ever alone under its own key.
            Located::Inline(value) => return Ok(Some(value)),
        }
    }
    Ok((!logged.is_empty()).then(|| log::encode_group(key_rv, &logged).into()))
}

fn checkpoint_key(cluster: &str, resource: &str) -> Vec<u8> {
    let mut k = vec![CHECKPOINT];
    k.extend_from_slice(cluster.as_bytes());
    k.push(0);
    k.extend_from_slice(resource.as_bytes());
    k
}

fn meta_key(name: &str) -> Vec<u8> {
    let mut k = vec![META];
    k.extend_from_slice(name.as_bytes());
    k
}

/// The head of an event record as written: every field of [`StoredEvent`]
/// but the body's bytes, borrowed.
#[derive(serde::Serialize)]
struct EventHeadRef<'a> {
    rv: u64,
    event_type: EventType,
    resource: &'a str,
    key: &'a ObjectKey,
    prev_rv: u64,
    member_rv: &'a str,
    uid: &'a str,
    labels: &'a [(String, String)],
    fields: &'a [(String, String)],
    time_ms: u64,
    name_end: u32,
    rv_at: u32,
    body_len: u32,
    body_codec: u8,
}

/// The head of an event record as read (same layout as [`EventHeadRef`]).
#[derive(serde::Deserialize)]
struct EventHead {
    rv: u64,
    event_type: EventType,
    resource: String,
    key: ObjectKey,
    prev_rv: u64,
    member_rv: String,
    uid: String,
    labels: Vec<(String, String)>,
    fields: Vec<(String, String)>,
    time_ms: u64,
    name_end: u32,
    rv_at: u32,
    body_len: u32,
    body_codec: u8,
}

impl EventHead {
    /// The event with `json` as its body and `row` as its Table row.
    fn into_event(self, json: Vec<u8>, row: Option<TableRow>) -> StoredEvent {
        StoredEvent {
            rv: self.rv,
            event_type: self.event_type,
            resource: self.resource,
            key: self.key,
            prev_rv: self.prev_rv,
            member_rv: self.member_rv,
            uid: self.uid,
            labels: self.labels,
            fields: self.fields,
            body: ServedBody { json, name_end: self.name_end, rv_at: self.rv_at, row },
            time_ms: self.time_ms,
        }
    }
}

/// Encodes one event as the store writes it (the value of an `e` record)
/// when its type has no dictionary: the head, then the body, LZ4-compressed
/// when that is smaller.
pub fn encode_event(event: &StoredEvent) -> Result<Vec<u8>> {
    encode_event_with(event, None, &mut Compressors::default())
}

/// Bodies' compression state kept between events: the prepared
/// dictionaries (see [`lz4`]) and scratch space.
#[derive(Default)]
struct Compressors {
    /// By resource type: the dictionary (its identity: a type's dictionary
    /// forgotten after a failed commit is made again, different) and its
    /// preparation.
    prepared: std::collections::HashMap<String, (std::sync::Arc<[u8]>, std::sync::Arc<lz4::Prepared>)>,
    /// For types without a dictionary.
    plain: Option<std::sync::Arc<lz4::Prepared>>,
    table: Vec<u32>,
    body: Vec<u8>,
}

impl Compressors {
    /// The compressor for `dict`, the dictionary of `resource` (none: plain
    /// LZ4), prepared on first use.
    fn get(&mut self, resource: &str, dict: Option<&std::sync::Arc<[u8]>>) -> std::sync::Arc<lz4::Prepared> {
        match dict {
            None => self.plain.get_or_insert_with(|| std::sync::Arc::new(lz4::Prepared::new(b""))).clone(),
            Some(dict) => match self.prepared.get(resource) {
                Some((known, prepared)) if std::sync::Arc::ptr_eq(known, dict) => prepared.clone(),
                _ => {
                    let prepared = std::sync::Arc::new(lz4::Prepared::new(dict));
                    self.prepared.insert(resource.to_string(), (dict.clone(), prepared.clone()));
                    prepared
                }
            },
        }
    }
}

/// [`encode_event`] compressing with `dict`, the dictionary of the event's
/// type, with `compressors` (the compressed body is made in its scratch
/// space). The record is written into one buffer of its final size.
fn encode_event_with(event: &StoredEvent, dict: Option<&std::sync::Arc<[u8]>>, compressors: &mut Compressors) -> Result<Vec<u8>> {
    let json = &event.body.json;
    let prepared = compressors.get(&event.resource, dict);
    let Compressors { table, body: compressed, .. } = compressors;
    prepared.compress(json, table, compressed);
    let codec = if dict.is_some() { BODY_LZ4_DICT } else { BODY_LZ4 };
    let compressed = (codec, compressed.len());
    let (mut codec, body) = match compressed {
        (codec, n) if n < json.len() => (codec, &compressors.body[..n]),
        _ => (BODY_RAW, &json[..]),
    };
    if event.body.row.is_some() {
        codec |= BODY_WITH_ROW;
    }
    let head = EventHeadRef {
        rv: event.rv,
        event_type: event.event_type,
        resource: &event.resource,
        key: &event.key,
        prev_rv: event.prev_rv,
        member_rv: &event.member_rv,
        uid: &event.uid,
        labels: &event.labels,
        fields: &event.fields,
        time_ms: event.time_ms,
        name_end: event.body.name_end,
        rv_at: event.body.rv_at,
        body_len: u32::try_from(json.len()).map_err(|_| Error::Corrupt { what: format!("event {}: body over 4 GiB", event.rv) })?,
        body_codec: codec,
    };
    // Integers take at most 10 bytes, a string its length and at most 10.
    let strings = |pairs: &[(String, String)]| pairs.iter().map(|(k, v)| k.len() + v.len() + 20).sum::<usize>();
    let head_max = 160
        + event.resource.len()
        + event.key.namespace.len()
        + event.key.name.len()
        + event.key.cluster.len()
        + event.member_rv.len()
        + event.uid.len()
        + strings(&event.labels)
        + strings(&event.fields);
    let row_len = event.body.row.as_ref().map_or(0, |row| 12 + row.template.len());
    let mut out = Vec::with_capacity(head_max + row_len + body.len());
    bincode::serde::encode_into_std_write(&head, &mut out, config())?;
    if let Some(row) = &event.body.row {
        let template_len = u32::try_from(row.template.len())
            .map_err(|_| Error::Corrupt { what: format!("event {}: Table row over 4 GiB", event.rv) })?;
        for n in [row.metadata_start, row.metadata_end, template_len] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&row.template);
    }
    out.extend_from_slice(body);
    Ok(out)
}

/// Decodes the head of an event record; returns it and where the body starts.
fn decode_head(bytes: &[u8]) -> Result<(EventHead, usize)> {
    let (head, used): (EventHead, usize) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| Error::Corrupt { what: format!("event: {e}") })?;
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    Ok((head, used))
}

/// Decodes one event record (the value of an `e` record) as the store
/// reads it, for a type without a dictionary; a damaged record is
/// [`Error::Corrupt`]. Public for the `store_envelope` fuzz target (`fuzz/`).
pub fn decode_event(bytes: &[u8]) -> Result<StoredEvent> {
    decode_event_with(bytes, &Dicts::new())
}

/// Writes the object of one event record as a list serves it (see
/// [`Store::write_served`]), for a type without a dictionary; a damaged
/// record is [`Error::Corrupt`] and leaves what `out` holds. Public for the
/// `store_envelope` fuzz target (`fuzz/`).
pub fn write_served_event(bytes: &[u8], rv: u64, name_suffix: Option<&str>, out: &mut ChunkBuf) -> Result<()> {
    write_served_record(bytes, rv, name_suffix, &Dicts::new(), out)
}

/// [`decode_event`] with the store's dictionaries.
fn decode_event_with(bytes: &[u8], dicts: &Dicts) -> Result<StoredEvent> {
    let (head, used) = decode_head(bytes)?;
    let (row, body) = split_row(head.rv, head.body_codec, head.body_len, &bytes[used..])?;
    let json = decompress_body(head.rv, &head.resource, head.body_codec, head.body_len as usize, body, dicts)?;
    Ok(head.into_event(json, row))
}

/// The head of an event record as read for its body alone (same layout
/// as [`EventHeadRef`]): what serving the body needs, the rest passed over.
struct BodyHead<'a> {
    rv: u64,
    resource: &'a str,
    name_end: u32,
    rv_at: u32,
    body_len: u32,
    body_codec: u8,
}

impl<'a> BodyHead<'a> {
    /// Reads the head at the start of `record` and the bytes it takes, as
    /// bincode's standard configuration encodes [`EventHeadRef`] (varint
    /// integers: one byte below 251, else a marker 251/252/253 and 2/4/8
    /// little-endian bytes; lengths before strings and sequences; a `u8`
    /// as itself; an enum as its variant's index). Read by hand rather than
    /// through serde: a list reads one head per object, and bincode's
    /// generic reader was about a tenth of a long list's CPU (100k pods).
    /// Whatever bincode would refuse here is refused too.
    fn read(record: &'a [u8]) -> Result<(BodyHead<'a>, usize)> {
        let mut r = HeadReader { bytes: record, at: 0 };
        let head = r.body_head().ok_or_else(|| Error::Corrupt { what: "event: damaged record head".to_string() })?;
        Ok((head, r.at))
    }
}

/// A cursor over a record head for [`BodyHead::read`]; `None` is damage.
struct HeadReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> HeadReader<'a> {
    fn body_head(&mut self) -> Option<BodyHead<'a>> {
        let rv = self.varint(u64::MAX)?;
        // EventType: Added, Modified or Deleted.
        if self.varint(u64::from(u32::MAX))? > 2 {
            return None;
        }
        let resource = std::str::from_utf8(self.bytes()?).ok()?;
        for _ in 0..3 {
            self.bytes()?; // key: namespace, name, cluster
        }
        self.varint(u64::MAX)?; // prev_rv
        self.bytes()?; // member_rv
        self.bytes()?; // uid
        for _ in 0..2 {
            // labels, then fields: pairs of strings
            let pairs = self.varint(u64::MAX)?;
            for _ in 0..pairs {
                self.bytes()?;
                self.bytes()?;
            }
        }
        self.varint(u64::MAX)?; // time_ms
        let name_end = self.u32()?;
        let rv_at = self.u32()?;
        let body_len = self.u32()?;
        let body_codec = *self.take(1)?.first()?;
        Some(BodyHead { rv, resource, name_end, rv_at, body_len, body_codec })
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    /// A varint of a type whose largest value is `max` (a `u32` refuses
    /// the 8-byte marker, as bincode does).
    fn varint(&mut self, max: u64) -> Option<u64> {
        let first = *self.take(1)?.first()?;
        let value = match first {
            0..=250 => u64::from(first),
            251 => u64::from(u16::from_le_bytes(self.take(2)?.try_into().ok()?)),
            252 => u64::from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
            253 if max > u64::from(u32::MAX) => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
            _ => return None,
        };
        (value <= max).then_some(value)
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint(u64::from(u32::MAX))?).ok()
    }

    /// A length-prefixed string or byte string (a length past the record's
    /// end or [`MAX_RECORD_BYTES`] is damage).
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint(u64::MAX)?).ok()?;
        if len > MAX_RECORD_BYTES {
            return None;
        }
        self.take(len)
    }
}

/// Decodes the body of one event record (what a list or get serves): as
/// [`decode_event_with`], without building the rest of the event.
fn decode_body_with(bytes: &[u8], dicts: &Dicts) -> Result<ServedBody> {
    let (head, used) = BodyHead::read(bytes)?;
    check_body(head.rv, head.body_len, head.name_end, head.rv_at, head.body_codec)?;
    let (row, body) = split_row(head.rv, head.body_codec, head.body_len, &bytes[used..])?;
    let json = decompress_body(head.rv, head.resource, head.body_codec, head.body_len as usize, body, dicts)?;
    Ok(ServedBody { json, name_end: head.name_end, rv_at: head.rv_at, row })
}

/// The Table row of a record (when its encoding says it has one) and the
/// stored body after it.
fn split_row(rv: u64, codec: u8, body_len: u32, after_head: &[u8]) -> Result<(Option<TableRow>, &[u8])> {
    let (row, body) = row_section(rv, codec, body_len, after_head)?;
    let row = row.map(|(metadata_start, metadata_end, template)| TableRow { template: template.to_vec(), metadata_start, metadata_end });
    Ok((row, body))
}

/// A Table row's section borrowed ([`split_row`]): metadata start and end,
/// template; and the stored body after it.
#[allow(clippy::type_complexity)]
fn row_section(rv: u64, codec: u8, body_len: u32, after_head: &[u8]) -> Result<(Option<(u32, u32, &[u8])>, &[u8])> {
    if codec & BODY_WITH_ROW == 0 {
        return Ok((None, after_head));
    }
    let damaged = || Error::Corrupt { what: format!("event {rv}: Table row out of bounds") };
    let word = |at: usize| -> Result<u32> {
        let bytes = after_head.get(at..at + 4).ok_or_else(damaged)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("four bytes")))
    };
    let (metadata_start, metadata_end, template_len) = (word(0)?, word(4)?, word(8)? as usize);
    if metadata_start > metadata_end || metadata_end > body_len {
        return Err(damaged());
    }
    let template = after_head.get(12..12 + template_len).ok_or_else(damaged)?;
    Ok((Some((metadata_start, metadata_end, template)), &after_head[12 + template_len..]))
}

/// Checks a record head's body length, splice points and encoding.
fn check_body(rv: u64, body_len: u32, name_end: u32, rv_at: u32, codec: u8) -> Result<()> {
    let len = body_len as usize;
    if len > MAX_RECORD_BYTES || name_end as usize > len || rv_at as usize > len {
        return Err(Error::Corrupt { what: format!("event {rv}: body length or splice points out of bounds") });
    }
    if ![BODY_RAW, BODY_LZ4, BODY_LZ4_DICT].contains(&(codec & !BODY_WITH_ROW)) {
        return Err(Error::Corrupt { what: format!("event {rv}: unknown body encoding {codec}") });
    }
    Ok(())
}

/// The JSON of a record's body as stored (`body`, encoded with `codec`).
fn decompress_body(rv: u64, resource: &str, codec: u8, len: usize, body: &[u8], dicts: &Dicts) -> Result<Vec<u8>> {
    let undecodable = || Error::Corrupt { what: format!("event {rv}: compressed body does not decode") };
    Ok(match codec & !BODY_WITH_ROW {
        BODY_LZ4 => lz4_flex::block::decompress(body, len).ok().filter(|json| json.len() == len).ok_or_else(undecodable)?,
        BODY_LZ4_DICT => {
            let dict = dicts.get(resource).ok_or_else(|| Error::Corrupt {
                what: format!("event {rv}: no compression dictionary for {resource}"),
            })?;
            lz4_flex::block::decompress_with_dict(body, len, dict).ok().filter(|json| json.len() == len).ok_or_else(undecodable)?
        }
        _ if body.len() == len => body.to_vec(),
        _ => return Err(Error::Corrupt { what: format!("event {rv}: body is {} bytes, the head says {len}", body.len()) }),
    })
}

/// Decodes an event record without its body (an empty one): what
/// recovery, retention and compaction need.
fn decode_event_head(bytes: &[u8]) -> Result<StoredEvent> {
    Ok(decode_head(bytes)?.0.into_event(Vec::new(), None))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

fn read_u64(bytes: &[u8], what: &str) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Corrupt { what: what.to_string() })?;
    Ok(u64::from_be_bytes(arr))
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
    fn from_db(db: sled::Db, path: &Path, options: &Options) -> Result<Store> {
        let tree = db.open_tree("kubefold")?;
        match tree.get(meta_key("format"))? {
            Some(found) if found.as_ref() == FORMAT.as_bytes() => {}
            Some(found) if found.as_ref() == FORMAT_4.as_bytes() || found.as_ref() == FORMAT_3.as_bytes() => {
                tree.insert(meta_key("format"), FORMAT.as_bytes())?;
                db.flush()?;
                let from = String::from_utf8_lossy(&found).into_owned();
                tracing::info!(%from, to = FORMAT, "Store format upgraded: new event records go to the record log, their pointers in groups.");
            }
            Some(found) if found.as_ref() == FORMAT_2.as_bytes() => migrate_from_2(&db, &tree)?,
            Some(found) => {
                return Err(Error::IncompatibleFormat {
                    path: path.to_path_buf(),
                    found: String::from_utf8_lossy(&found).into_owned(),
                })
            }
            None if tree.is_empty() => {
                tree.insert(meta_key("format"), FORMAT.as_bytes())?;
                db.flush()?;
            }
            None => {
                return Err(Error::IncompatibleFormat { path: path.to_path_buf(), found: "(none)".into() });
            }
        }
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
            db,
            tree,
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

    /// The RV of the last committed event (0 for a new store).
    pub fn head_rv(&self) -> Result<u64> {
        match self.tree.get(meta_key("head"))? {
            Some(v) => read_u64(&v, "head rv"),
            None => Ok(0),
        }
    }

    /// Events up to this RV have been compacted away (0 when none).
    pub fn compacted_rv(&self) -> Result<u64> {
        match self.tree.get(meta_key("compacted"))? {
            Some(v) => read_u64(&v, "compacted rv"),
            None => Ok(0),
        }
    }

    /// Takes an index with `take` and keeps the records of every object in
    /// it from compaction until the pin is dropped (or narrowed with
    /// [`ReadPin::narrow`]). Taking and pinning are one step for
    /// compaction: it either sees the pin or started before the index was
    /// taken, and then keeps every object live in it anyway (it keeps what
    /// is live in an index at least as new).
    pub fn pin<E>(&self, take: impl FnOnce() -> std::result::Result<std::sync::Arc<Index>, E>) -> std::result::Result<(std::sync::Arc<Index>, ReadPin), E> {
        let mut held = self.pins.held.lock().unwrap_or_else(|e| e.into_inner());
        let index = take()?;
        let id = self.pins.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        held.insert(id, Pinned::Index(index.clone()));
        Ok((index, ReadPin { pins: self.pins.clone(), id }))
    }

    /// Keeps every event after `rv` from compaction until the pin is
    /// dropped: a watch replaying the log from `rv`. Compaction reads its
    /// pins after the compaction floor is published, so a reader that
    /// takes this pin and then finds `rv` not below the published floor has
    /// every event after `rv` until it drops the pin.
    pub fn pin_after(&self, rv: u64) -> ReadPin {
        let mut held = self.pins.held.lock().unwrap_or_else(|e| e.into_inner());
        let id = self.pins.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        held.insert(id, Pinned::After(rv));
        ReadPin { pins: self.pins.clone(), id }
    }

    /// Reads in progress that hold records (see [`Store::pin`]).
    pub fn pinned_reads(&self) -> usize {
        self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Commits a batch atomically; with [`Durability::Sync`] it is on disk on return.
    pub fn commit(&self, commit: &Commit) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut head = None;
        let mut dicts = self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone();
        let new_dicts = new_dictionaries(&dicts, &commit.events);
        for (resource, dict) in &new_dicts {
            batch.insert(meta_key(&format!("{DICT_PREFIX}{resource}")), &dict[..]);
            dicts.insert(resource.clone(), dict.clone());
        }
        let mut compressors = self.compressors.lock().unwrap_or_else(|e| e.into_inner());
        let records = commit
            .events
            .iter()
            .map(|event| encode_event_with(event, dicts.get(&event.resource), &mut compressors))
            .collect::<Result<Vec<_>>>()?;
        drop(compressors);
        // Records first, then the pointers to them.
        let pointers = self.log.append(&records, self.durability == Durability::Sync).map_err(io_error)?;
        let located: Vec<(u64, log::Pointer)> = commit.events.iter().map(|event| event.rv).zip(pointers).collect();
        for group in located.chunks(log::GROUP_EVENTS) {
            batch.insert(&event_key(group[0].0)[..], log::encode_group(group[0].0, group));
            head = group.last().map(|(rv, _)| *rv);
        }
        for (cluster, resource, member_rv) in &commit.checkpoints {
            batch.insert(checkpoint_key(cluster, resource), member_rv.as_bytes());
        }
        if let Some(head) = head {
            batch.insert(meta_key("head"), &head.to_be_bytes()[..]);
        }
        // Readers may meet the new records as soon as the batch is applied:
        // the dictionaries are known before, and forgotten if it fails.
        if !new_dicts.is_empty() {
            *self.dicts.write().unwrap_or_else(|e| e.into_inner()) = dicts;
        }
        if let Err(e) = self.tree.apply_batch(batch) {
            let mut dicts = self.dicts.write().unwrap_or_else(|e| e.into_inner());
            for (resource, _) in &new_dicts {
                dicts.remove(resource);
            }
            return Err(e.into());
        }
        self.locations.insert(located);
        if self.durability == Durability::Sync {
            self.db.flush()?;
        }
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<StoredEvent> {
        decode_event_with(bytes, &self.dicts.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The record an event's entry names; `None` when compaction moved it
    /// since the entry was read.
    fn resolve(&self, located: Located) -> Result<Option<Record>> {
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
    fn lookup(&self, rv: u64) -> Result<Option<Located>> {
        let Some((k, v)) = self.tree.range(event_key(0)..=event_key(rv)).next_back().transpose()? else { return Ok(None) };
        Ok(located(&k, v)?.into_iter().find(|(at, _)| *at == rv).map(|(_, l)| l))
    }

    /// The events sled holds with RVs in `from..=to`, in RV order, each
    /// with its entry.
    fn entries(&self, from: u64, to: u64) -> impl Iterator<Item = Result<(u64, Located)>> + '_ {
        // The value holding `from` may be keyed before it (a group).
        let (start, failed) = match self.tree.range(event_key(0)..=event_key(from)).next_back().transpose() {
            Ok(found) => (found.map_or(event_key(from).to_vec(), |(k, _)| k.to_vec()), None),
            Err(e) => (event_key(from).to_vec(), Some(Err(Error::from(e)))),
        };
        failed
            .into_iter()
            .chain(
                self.tree
                    .range(start..=event_key(to).to_vec())
                    .flat_map(|item| match item.map_err(Error::from).and_then(|(k, v)| located(&k, v)) {
                        Ok(events) => events.into_iter().map(Ok).collect::<Vec<_>>(),
                        Err(e) => vec![Err(e)],
                    })
                    .filter(move |item| item.as_ref().map_or(true, |(rv, _)| (from..=to).contains(rv))),
            )
    }

    /// The record of the event at `rv`, if the log holds it.
    fn record(&self, rv: u64) -> Result<Option<Record>> {
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
    fn scanned(&self, rv: u64, located: Located) -> Result<Option<Record>> {
        match self.resolve(located)? {
            Some(record) => Ok(Some(record)),
            None => self.record(rv),
        }
    }

    /// Syncs the record log, then flushes sled.
    fn flush_all(&self) -> Result<()> {
        self.log.sync().map_err(io_error)?;
        self.db.flush()?;
        Ok(())
    }

    /// Reads the merged index, the checkpoints and the compaction floor.
    /// The index comes from the snapshot plus the events after it when the
    /// snapshot can be trusted, from a scan of the index entries otherwise;
    /// either way it equals the replay of the retained log.
    pub fn recover(&self) -> Result<Recovered> {
        self.recover_with_progress(&mut |_| {})
    }

    /// [`Store::recover`], telling `report` how far the replay of the log
    /// is every [`REPLAY_REPORT_EVENTS`] events.
    pub fn recover_with_progress(&self, report: &mut dyn FnMut(ReplayProgress)) -> Result<Recovered> {
        let head = self.head_rv()?;
        let compacted = self.compacted_rv()?;
        let (index, path) = match self.read_snapshot(head, compacted) {
            Ok(mut index) => {
                let snapshot_rv = index.head_rv();
                let replayed = self.replay_into(&mut index, snapshot_rv.saturating_add(1), head, report)?;
                index.set_head_rv(head);
                (index, RecoveryPath::Snapshot { snapshot_rv, replayed })
            }
            Err(reason) => {
                let mut index = Index::at(head);
                self.replay_into(&mut index, 0, head, report)?;
                (index, RecoveryPath::Replay { reason })
            }
        };
        let mut checkpoints = BTreeMap::new();
        for item in self.tree.scan_prefix([CHECKPOINT]) {
            let (k, v) = item?;
            let text = String::from_utf8_lossy(&k[1..]).into_owned();
            let (cluster, resource) =
                text.split_once('\0').ok_or_else(|| Error::Corrupt { what: "checkpoint key".into() })?;
            checkpoints.insert(
                (cluster.to_string(), resource.to_string()),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
        Ok(Recovered { path, index, checkpoints, compacted_rv: compacted })
    }

    /// Applies every event the log holds from `from_rv` on to `index`, in RV
    /// order; returns how many. From 0, the index equals the one the events
    /// built, compaction notwithstanding: an object's last event is always
    /// kept (it is either live or above the floor) and replays last; the
    /// events compaction removes are superseded ones, and
    /// [`Store::compact`] removes them in RV order, so an interrupted
    /// compaction leaves each object a suffix of its events, which still
    /// ends with its last.
    fn replay_into(&self, index: &mut Index, from_rv: u64, head_rv: u64, report: &mut dyn FnMut(ReplayProgress)) -> Result<u64> {
        let mut replayed = 0u64;
        for item in self.entries(from_rv, u64::MAX) {
            let (rv, located) = item?;
            let Some(record) = self.scanned(rv, located)? else { continue };
            index.apply(&decode_event_head(&record)?);
            replayed += 1;
            if replayed % REPLAY_REPORT_EVENTS == 0 {
                report(ReplayProgress { from_rv, at_rv: rv, head_rv, replayed });
            }
        }
        report(ReplayProgress { from_rv, at_rv: head_rv, head_rv, replayed });
        Ok(replayed)
    }

    /// The index from a replay of every event the log holds.
    #[cfg(test)]
    fn replay(&self, head: u64) -> Result<Index> {
        let mut index = Index::at(head);
        self.replay_into(&mut index, 0, head, &mut |_| {})?;
        Ok(index)
    }

    fn store_id(&self) -> Result<Vec<u8>> {
        Ok(self.tree.get(meta_key("store-id"))?.map(|v| v.to_vec()).unwrap_or_default())
    }

    /// Writes the index to the snapshot file, atomically (a temporary file,
    /// synced, renamed over the old one). The log is flushed first, so the
    /// snapshot is never ahead of what a restart finds on disk. An index
    /// older than the newest snapshot already written is not written.
    /// Runs beside commits (call it with a clone of the aggregator's index
    /// off the actor thread).
    pub fn write_snapshot(&self, index: &Index) -> Result<Option<SnapshotStats>> {
        use std::io::Write;
        let mut newest = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        let rv = index.head_rv();
        if rv <= *newest && *newest != 0 {
            return Ok(None);
        }
        self.flush_all()?;
        if rv > self.head_rv()? {
            return Err(Error::Corrupt { what: format!("snapshot at RV {rv} is ahead of the log's head") });
        }
        let io = |e: std::io::Error| Error::Io(sled::Error::Io(e));
        let tmp = self.dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let file = log::private_file().write(true).create(true).truncate(true).open(&tmp).map_err(io)?;
        let mut out = ChecksumWriter { inner: std::io::BufWriter::with_capacity(1 << 20, file), crc: crc32fast::Hasher::new(), bytes: 0 };
        out.write_all(SNAPSHOT_MAGIC).map_err(io)?;
        let resources = index.resource_keys();
        let chunks: u64 = resources.iter().map(|r| (index.len(r) as u64).div_ceil(SNAPSHOT_CHUNK as u64)).sum();
        let header = SnapshotHeader { format: FORMAT.to_string(), store_id: self.store_id()?, head_rv: rv, chunks };
        out.write_all(&encode(&header)?).map_err(io)?;
        let mut objects = 0u64;
        let mut chunk = Vec::with_capacity(SNAPSHOT_CHUNK * 512);
        for resource in resources {
            let mut entries = index.range(&resource, None, None).peekable();
            while entries.peek().is_some() {
                chunk.clear();
                let mut count = 0u64;
                for (key, entry) in entries.by_ref().take(SNAPSHOT_CHUNK) {
                    bincode::serde::encode_into_std_write(&(key, &**entry), &mut chunk, config())?;
                    count += 1;
                }
                out.write_all(&encode(&(&resource, count, chunk.len() as u64))?).map_err(io)?;
                out.write_all(&chunk).map_err(io)?;
                objects += count;
            }
        }
        let crc = out.crc.clone().finalize();
        let bytes = out.bytes + 4;
        let mut inner = out.inner;
        inner.write_all(&crc.to_le_bytes()).map_err(io)?;
        let file = inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&tmp, self.dir.join(SNAPSHOT_FILE)).map_err(io)?;
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        *newest = rv;
        Ok(Some(SnapshotStats { rv, objects, bytes }))
    }

    /// The index of the snapshot file, when it can be used with a log at
    /// `head` compacted to `compacted`; otherwise why not.
    fn read_snapshot(&self, head: u64, compacted: u64) -> Result<Index, String> {
        let path = self.dir.join(SNAPSHOT_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no snapshot".into()),
            Err(e) => return Err(format!("snapshot unreadable: {e}")),
        };
        if bytes.len() < SNAPSHOT_MAGIC.len() + 4 || &bytes[..SNAPSHOT_MAGIC.len()] != SNAPSHOT_MAGIC {
            return Err("snapshot is not an index snapshot".into());
        }
        let (body, sum) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != sum {
            return Err("snapshot checksum mismatch".into());
        }
        let mut at = SNAPSHOT_MAGIC.len();
        let bad = |e: bincode::error::DecodeError| format!("snapshot undecodable: {e}");
        let (header, used): (SnapshotHeader, usize) = bincode::serde::decode_from_slice(&body[at..], config()).map_err(bad)?;
        at += used;
        // Format 3's and 4's snapshots hold the same index.
        if ![FORMAT, FORMAT_4, FORMAT_3].contains(&header.format.as_str()) {
            return Err(format!("snapshot of format {:?}", header.format));
        }
        if header.store_id != self.store_id().map_err(|e| e.to_string())? {
            return Err("snapshot of another store".into());
        }
        if header.head_rv > head {
            return Err(format!("snapshot at RV {} is ahead of the log's head {head}", header.head_rv));
        }
        if header.head_rv < compacted {
            return Err(format!("snapshot at RV {} is older than the compaction floor {compacted}", header.head_rv));
        }
        // Chunk headers first, then the chunks decoded on every core.
        let mut chunks = Vec::new();
        for _ in 0..header.chunks {
            let ((resource, count, len), used): ((String, u64, u64), usize) =
                bincode::serde::decode_from_slice(&body[at..], config()).map_err(bad)?;
            at += used;
            let end = at.checked_add(len as usize).filter(|end| *end <= body.len()).ok_or("snapshot chunk past its end")?;
            chunks.push((resource, count, at..end));
            at = end;
        }
        if at != body.len() {
            return Err("snapshot has trailing bytes".into());
        }
        let decoded = decode_chunks(body, &chunks)?;
        let mut index = Index::at(header.head_rv);
        for ((resource, _, _), entries) in chunks.iter().zip(decoded) {
            index.load_all(resource, entries);
        }
        Ok(index)
    }

    /// One event of the log.
    pub fn event(&self, rv: u64) -> Result<Option<StoredEvent>> {
        match self.record(rv)? {
            Some(record) => Ok(Some(self.decode(&record)?)),
            None => Ok(None),
        }
    }

    /// The body of the event at `rv` (an object's version).
    pub fn body(&self, rv: u64) -> Result<Option<ServedBody>> {
        match self.record(rv)? {
            Some(record) => Ok(Some(decode_body_with(&record, &self.dicts.read().unwrap_or_else(|e| e.into_inner()))?)),
            None => Ok(None),
        }
    }

    /// Writes the object at `rv` as served (`name_suffix` after its name,
    /// `rv` as its resourceVersion) to the end of `out`, as
    /// [`ServedBody::write`] would, but decompressing the body straight into
    /// `out`: no copy of the body is made. False when the log has no event
    /// `rv`; a damaged record is [`Error::Corrupt`] and leaves `out` as it was.
    pub fn write_served(&self, rv: u64, name_suffix: Option<&str>, out: &mut ChunkBuf) -> Result<bool> {
        let Some(record) = self.record(rv)? else { return Ok(false) };
        write_served_record(&record, rv, name_suffix, &self.dicts.read().unwrap_or_else(|e| e.into_inner()), out)?;
        Ok(true)
    }

    /// [`Store::write_served`] with the records of `ahead` (read together
    /// before); an event it does not hold is read on its own.
    pub fn write_served_from(&self, ahead: &ReadAhead, rv: u64, name_suffix: Option<&str>, out: &mut ChunkBuf) -> Result<bool> {
        match ahead.get(rv) {
            Some(record) => {
                write_served_record(record, rv, name_suffix, &ahead.dicts, out)?;
                Ok(true)
            }
            None => self.write_served(rv, name_suffix, out),
        }
    }

    /// [`Store::body`] with the records of `ahead`, as [`Store::write_served_from`].
    pub fn body_from(&self, ahead: &ReadAhead, rv: u64) -> Result<Option<ServedBody>> {
        match ahead.get(rv) {
            Some(record) => Ok(Some(decode_body_with(record, &ahead.dicts)?)),
            None => self.body(rv),
        }
    }

    /// Reads the records of the events `rvs` (those the log holds) at once,
    /// for [`Store::write_served_from`] and [`Store::body_from`]: records
    /// next to each other in the record log are read with one read. The
    /// objects of a member's list are committed in its list order, which is
    /// the order kubefold lists them in (namespace, name), so a page of a
    /// list is mostly a few runs of neighbouring records.
    pub fn read_ahead(&self, rvs: impl IntoIterator<Item = u64>) -> Result<ReadAhead> {
        let mut ahead = ReadAhead { dicts: self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone(), ..ReadAhead::default() };
        let mut logged: Vec<(u64, log::Pointer)> = Vec::new();
        for (rv, located) in self.locations.get_many(rvs) {
            if let Some(pointer) = located {
                logged.push((rv, pointer));
                continue;
            }
            match self.lookup(rv)? {
                Some(Located::Logged(pointer)) => logged.push((rv, pointer)),
                Some(Located::Inline(value)) => ahead.records.push((rv, Held::Inline(value))),
                None => {}
            }
        }
        logged.sort_unstable_by_key(|(_, p)| (p.segment, p.offset));
        let mut run = 0;
        while run < logged.len() {
            let first = logged[run].1;
            let mut end = u64::from(first.offset) + u64::from(first.len);
            let mut next = run + 1;
            while let Some((_, p)) = logged.get(next) {
                let p_end = u64::from(p.offset) + u64::from(p.len);
                if p.segment != first.segment || u64::from(p.offset) > end + READ_AHEAD_GAP || p_end - u64::from(first.offset) > READ_AHEAD_SPAN {
                    break;
                }
                end = end.max(p_end);
                next += 1;
            }
            let len = (end - u64::from(first.offset)) as usize;
            // A segment gone since the pointers were read: those records
            // are read on their own, through their new pointers.
            if let Some(span) = self.log.read_span(first.segment, first.offset, len).map_err(|what| Error::Corrupt { what })? {
                let index = ahead.spans.len() as u32;
                for (rv, p) in &logged[run..next] {
                    let start = p.offset - first.offset;
                    let bytes = &span[start as usize..(start + p.len) as usize];
                    if crc32fast::hash(bytes) != p.crc {
                        return Err(Error::Corrupt { what: format!("event {rv}: log segment {} at {}: checksum mismatch", p.segment, p.offset) });
                    }
                    ahead.records.push((*rv, Held::Span { span: index, start, len: p.len }));
                }
                ahead.spans.push(span);
            }
            run = next;
        }
        ahead.records.sort_unstable_by_key(|(rv, _)| *rv);
        Ok(ahead)
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

    /// Removes the checkpoint of one resource type of a cluster (it is no
    /// longer watched there).
    pub fn remove_checkpoint(&self, cluster: &str, resource: &str) -> Result<()> {
        self.tree.remove(checkpoint_key(cluster, resource))?;
        Ok(())
    }

    /// Removes the checkpoints of a cluster (it was removed).
    pub fn remove_checkpoints(&self, cluster: &str) -> Result<()> {
        let mut prefix = vec![CHECKPOINT];
        prefix.extend_from_slice(cluster.as_bytes());
        prefix.push(0);
        let mut batch = sled::Batch::default();
        for item in self.tree.scan_prefix(prefix) {
            batch.remove(item?.0);
        }
        self.tree.apply_batch(batch)?;
        Ok(())
    }

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
        self.tree.insert(meta_key("compacted"), &floor.to_be_bytes()[..])?;
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
        for item in self.tree.range(event_key(0)..=event_key(floor)) {
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
                self.tree.apply_batch(std::mem::take(&mut batch))?;
                self.locations.remove(gone.drain(..));
            }
        }
        self.tree.apply_batch(batch)?;
        self.locations.remove(gone);
        self.flush_all()?;
        self.reclaim(&sizes, retained)?;
        Ok(CompactStats { floor, removed, kept })
    }

    /// Deletes the record log's segments (of `sizes`, their lengths) whose
    /// records are mostly dead, moving their `retained` records (every
    /// retained record of those segments, with its pointer) to the end of
    /// the log first. Segments at most half dead are left as they are, so a
    /// byte is moved at most about as often as it is written.
    fn reclaim(&self, sizes: &BTreeMap<u32, u64>, retained: Vec<(u64, log::Pointer)>) -> Result<()> {
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
    fn relocate(&self, records: Vec<(u64, Vec<u8>)>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let (rvs, records): (Vec<u64>, Vec<Vec<u8>>) = records.into_iter().unzip();
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
            let Some((k, v)) = self.tree.range(event_key(0)..=event_key(*rv)).next_back().transpose()? else { continue };
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
        self.tree.apply_batch(batch)?;
        self.locations.insert(moved);
        Ok(())
    }

    /// Writes a metadata value and flushes it.
    pub fn put_meta(&self, name: &str, value: &[u8]) -> Result<()> {
        self.tree.insert(meta_key(name), value)?;
        self.db.flush()?;
        Ok(())
    }

    /// A metadata value, if set.
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(meta_key(name))?.map(|v| v.to_vec()))
    }

    /// A metadata value, created by `init` (and flushed) when absent.
    pub fn meta_or_init(&self, name: &str, init: impl FnOnce() -> Vec<u8>) -> Result<Vec<u8>> {
        if let Some(v) = self.tree.get(meta_key(name))? {
            return Ok(v.to_vec());
        }
        let value = init();
        self.tree.insert(meta_key(name), value.clone())?;
        self.db.flush()?;
        Ok(value)
    }

    /// Writes a copy of the whole store to `out`: a header naming the format,
    /// then every record, then a checksum. Call it where no commit runs at
    /// the same time (the aggregator, or a stopped kubefold) for a
    /// consistent copy. Returns the number of records.
    pub fn backup(&self, out: &mut impl std::io::Write) -> Result<u64> {
        self.backup_with(out, |_, _| None)
    }

    /// [`Store::backup`], with the metadata values `rewrite_meta(name,
    /// value)` replaces (`Some`) written in place of the stored ones: a
    /// backup that leaves member credentials out.
    pub fn backup_with(&self, out: &mut impl std::io::Write, rewrite_meta: impl Fn(&str, &[u8]) -> Option<Vec<u8>>) -> Result<u64> {
        use std::hash::Hasher;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let io = |e: std::io::Error| Error::Io(sled::Error::Io(e));
        out.write_all(BACKUP_MAGIC).map_err(io)?;
        let mut count = 0u64;
        for item in self.tree.iter() {
            let (k, v) = item?;
            // An event's record, not where it is in this data dir.
            // An event's record, not where it is in this data dir: one
            // key and record per event, whatever value holds its pointer.
            let entries: Vec<(Vec<u8>, Record)> = match k.first() {
                Some(&EVENT) => {
                    let mut records = Vec::new();
                    for (rv, located) in located(&k, v)? {
                        if let Some(record) = self.scanned(rv, located)? {
                            records.push((event_key(rv).to_vec(), record));
                        }
                    }
                    records
                }
                Some(&META) => {
                    let rewritten = std::str::from_utf8(&k[1..]).ok().and_then(|name| rewrite_meta(name, &v));
                    vec![(k.to_vec(), Record::Inline(rewritten.map_or(v, sled::IVec::from)))]
                }
                _ => vec![(k.to_vec(), Record::Inline(v))],
            };
            for (k, v) in entries {
                for part in [&k[..], &v[..]] {
                    let len = (part.len() as u32).to_be_bytes();
                    out.write_all(&len).map_err(io)?;
                    out.write_all(part).map_err(io)?;
                    hasher.write(&len);
                    hasher.write(part);
                }
                count += 1;
            }
        }
        out.write_all(&u32::MAX.to_be_bytes()).map_err(io)?;
        out.write_all(&hasher.finish().to_be_bytes()).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(count)
    }

    /// Creates a store in the empty directory `path` from a backup.
    pub fn restore(path: &Path, input: &mut impl std::io::Read, options: &Options) -> Result<Store> {
        use std::hash::Hasher;
        if path.exists() && std::fs::read_dir(path).map(|mut d| d.next().is_some()).unwrap_or(false) {
            return Err(Error::Corrupt { what: format!("restore target {} is not empty; restore into a new --data-dir", path.display()) });
        }
        let bad = |what: &str| Error::Corrupt { what: format!("backup file: {what}") };
        let mut magic = [0u8; BACKUP_MAGIC.len()];
        input.read_exact(&mut magic).map_err(|_| bad("too short"))?;
        if magic != *BACKUP_MAGIC {
            return Err(bad("not a kubefold backup of this format"));
        }
        let db = open_sled(path, options, SEGMENT_SIZE)?;
        let tree = db.open_tree("kubefold")?;
        let log = log::RecordLog::open(path, options.log_segment_bytes).map_err(io_error)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut batch = sled::Batch::default();
        let mut pending = 0;
        // Event records go to the record log, a batch at a time.
        let mut records: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let apply = |batch: &mut sled::Batch, records: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<()> {
            let (keys, values): (Vec<Vec<u8>>, Vec<Vec<u8>>) = std::mem::take(records).into_iter().unzip();
            for (key, pointer) in keys.into_iter().zip(log.append(&values, false).map_err(io_error)?) {
                batch.insert(key, &pointer.encode()[..]);
            }
            tree.apply_batch(std::mem::take(batch))?;
            Ok(())
        };
        let read_len = |input: &mut dyn std::io::Read| -> Result<u32> {
            let mut len = [0u8; 4];
            input.read_exact(&mut len).map_err(|_| bad("truncated"))?;
            Ok(u32::from_be_bytes(len))
        };
        loop {
            let klen = read_len(input)?;
            if klen == u32::MAX {
                break;
            }
            let mut key = vec![0u8; klen as usize];
            input.read_exact(&mut key).map_err(|_| bad("truncated"))?;
            let vlen = read_len(input)?;
            let mut value = vec![0u8; vlen as usize];
            input.read_exact(&mut value).map_err(|_| bad("truncated"))?;
            hasher.write(&klen.to_be_bytes());
            hasher.write(&key);
            hasher.write(&vlen.to_be_bytes());
            hasher.write(&value);
            if key.first() == Some(&EVENT) {
                records.push((key, value));
            } else {
                batch.insert(key, value);
            }
            pending += 1;
            if pending == 10_000 {
                apply(&mut batch, &mut records)?;
                pending = 0;
            }
        }
        let mut sum = [0u8; 8];
        input.read_exact(&mut sum).map_err(|_| bad("truncated"))?;
        if u64::from_be_bytes(sum) != hasher.finish() {
            return Err(bad("checksum mismatch"));
        }
        apply(&mut batch, &mut records)?;
        log.sync().map_err(io_error)?;
        drop(log);
        db.flush()?;
        // Keep the open database: dropping and reopening races sled's file lock.
        Store::from_db(db, path, options)
    }

    /// Flushes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.flush_all()
    }

    /// Bytes the data directory takes on disk: sled's files (as sled
    /// reports them) and the record log's segments.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk()? + self.log.size().map_err(io_error)?)
    }

    /// Number of events retained in the log: the size of the record
    /// locations once they are loaded and hold every event (a data dir of
    /// format 4), else a scan of the events (served by `/admin/v1/stats`,
    /// which monitoring polls: a scan of a million events there took CPU
    /// from ingestion).
    pub fn event_count(&self) -> usize {
        self.locations
            .count()
            .unwrap_or_else(|| self.tree.scan_prefix([EVENT]).values().map(|v| v.map_or(0, |v| log::entry_count(&v))).sum())
    }

    /// Records and their key and value bytes by kind (a full scan; for
    /// measurements and the soak tools, not for a request path).
    pub fn usage(&self) -> Result<Usage> {
        let mut usage = Usage::default();
        for item in self.tree.iter() {
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

/// Takes a data dir of [`FORMAT_2`] to [`FORMAT`]: removes its index
/// entries, then names the new format (an interrupted migration runs again
/// at the next open; an older kubefold refuses the data dir afterwards).
fn migrate_from_2(db: &sled::Db, tree: &sled::Tree) -> Result<()> {
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

/// Fills `locations` from the pointers in `tree`; true when every event
/// record is in the record log (none in sled itself).
fn fill_locations(tree: &sled::Tree, locations: &log::Locations, stop: &std::sync::atomic::AtomicBool) -> Result<bool> {
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

/// Dictionaries for the types in `events` that have none yet, each made of
/// the first bodies of that type in `events` when they are large enough.
fn new_dictionaries(dicts: &Dicts, events: &[StoredEvent]) -> Vec<(String, std::sync::Arc<[u8]>)> {
    let mut building: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    for event in events {
        if dicts.contains_key(&event.resource) {
            continue;
        }
        let dict = building.entry(&event.resource).or_default();
        let room = DICT_MAX_BYTES - dict.len();
        dict.extend_from_slice(&event.body.json[..event.body.json.len().min(room)]);
    }
    building
        .into_iter()
        .filter(|(_, dict)| dict.len() >= DICT_MIN_BYTES)
        .map(|(resource, dict)| (resource.to_string(), dict.into()))
        .collect()
}

/// A random number (std's hasher keys are random per process and per `RandomState`).
fn random_u64(salt: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

/// Objects per chunk of an index snapshot (chunks are decoded in parallel).
const SNAPSHOT_CHUNK: usize = 32 * 1024;

/// The first record of an index snapshot.
#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotHeader {
    format: String,
    store_id: Vec<u8>,
    head_rv: u64,
    chunks: u64,
}

/// A decoded chunk of an index snapshot, in list order.
type Chunk = Vec<(ObjectKey, std::sync::Arc<IndexEntry>)>;

/// Decodes the snapshot's chunks (resource, object count, byte range of
/// `body`) on up to four threads; the chunks in order.
fn decode_chunks(body: &[u8], chunks: &[(String, u64, std::ops::Range<usize>)]) -> Result<Vec<Chunk>, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let decode = |count: u64, range: &std::ops::Range<usize>| -> Result<Chunk, String> {
        let bytes = &body[range.clone()];
        let mut at = 0;
        let mut entries = Vec::with_capacity(count.min(SNAPSHOT_CHUNK as u64) as usize);
        for _ in 0..count {
            let ((key, entry), used): ((ObjectKey, IndexEntry), usize) = bincode::serde::decode_from_slice(&bytes[at..], config())
                .map_err(|e| format!("snapshot undecodable: {e}"))?;
            at += used;
            entries.push((key, std::sync::Arc::new(entry)));
        }
        if at != bytes.len() {
            return Err("snapshot chunk has trailing bytes".into());
        }
        Ok(entries)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4).min(chunks.len().max(1));
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<Chunk, String>>>> = chunks.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, count, range)) = chunks.get(i) else { break };
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(decode(*count, range));
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| slot.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_else(|| Err("snapshot chunk not decoded".into())))
        .collect()
}

/// A writer that sums what goes through it.
struct ChecksumWriter<W> {
    inner: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: std::io::Write> std::io::Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests;
