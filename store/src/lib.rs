//! kubefold's durable store: the event log, the index entries, the member
//! checkpoints and the head resource version, in one sled tree so that each
//! batch commit is one atomic `apply_batch`.
//!
//! Key layout (all in the tree `kubefold`):
//! - `e` + big-endian u64 RV → bincode [`StoredEvent`] (raw JSON body inside);
//! - `i` + resource `\0` namespace `\0` name `\0` cluster → bincode [`IndexEntry`];
//! - `c` + cluster `\0` resource → the member's resourceVersion (checkpoint);
//! - `m` + name → metadata (`format`, `head`, `compacted`).
//!
//! Durability: every commit is atomic; it is durable once sled has flushed,
//! which [`Store::commit`] waits for when [`Durability::Sync`] is chosen, and
//! which happens within `flush_every_ms` otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubefold_engine::event::{EventType, IndexEntry, ObjectKey, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::object::ServedBody;
use thiserror::Error;

/// The on-disk format this build writes and reads.
pub const FORMAT: &str = "kubefold-store/1";

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
    /// its `flush_every_ms` period.
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
}

impl Default for Options {
    fn default() -> Self {
        Options { durability: Durability::Sync, flush_every_ms: 500, cache_capacity: 256 * 1024 * 1024 }
    }
}

/// One atomic commit: events (their index entries follow from them), the
/// member checkpoints reached, and the new head RV.
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

/// What the store holds at start.
#[derive(Debug)]
pub struct Recovered {
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
}

/// First bytes of a backup file.
const BACKUP_MAGIC: &[u8; 18] = b"kubefold-backup/1\n";

const EVENT: u8 = b'e';
const INDEX: u8 = b'i';
const CHECKPOINT: u8 = b'c';
const META: u8 = b'm';

/// Largest record the store decodes: no length read from a damaged record
/// can make decoding allocate more than this.
const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

fn config() -> bincode::config::Configuration<bincode::config::LittleEndian, bincode::config::Varint, bincode::config::Limit<MAX_RECORD_BYTES>> {
    bincode::config::standard().with_limit::<MAX_RECORD_BYTES>()
}

fn event_key(rv: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = EVENT;
    k[1..].copy_from_slice(&rv.to_be_bytes());
    k
}

fn index_key(resource: &str, key: &ObjectKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + resource.len() + key.namespace.len() + key.name.len() + key.cluster.len());
    k.push(INDEX);
    for part in [resource, &key.namespace, &key.name] {
        k.extend_from_slice(part.as_bytes());
        k.push(0);
    }
    k.extend_from_slice(key.cluster.as_bytes());
    k
}

fn parse_index_key(k: &[u8]) -> Option<(String, ObjectKey)> {
    let mut parts = k.get(1..)?.split(|b| *b == 0);
    let mut next = || parts.next().and_then(|p| String::from_utf8(p.to_vec()).ok());
    let resource = next()?;
    let namespace = next()?;
    let name = next()?;
    let cluster = next()?;
    Some((resource, ObjectKey { namespace, name, cluster }))
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

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    bincode::serde::decode_from_slice(bytes, config())
        .map(|(v, _)| v)
        .map_err(|e| Error::Corrupt { what: format!("{what}: {e}") })
}

/// Decodes one event envelope (the value of an `e` record) as the store
/// reads it; a damaged record is [`Error::Corrupt`]. Public for the
/// `store_envelope` fuzz target (`fuzz/`).
pub fn decode_event(bytes: &[u8]) -> Result<StoredEvent> {
    let event: StoredEvent = decode(bytes, "event")?;
    let len = event.body.json.len();
    if event.body.name_end as usize > len || event.body.rv_at as usize > len {
        return Err(Error::Corrupt { what: format!("event {}: body splice points outside the body", event.rv) });
    }
    Ok(event)
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
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(Some(options.flush_every_ms))
            .cache_capacity(options.cache_capacity)
            .open()
            .map_err(|source| Error::OpenFailed { path: path.to_path_buf(), source })?;
        Store::from_db(db, path, options)
    }

    /// A store over an open sled database, refusing another format.
    fn from_db(db: sled::Db, path: &Path, options: &Options) -> Result<Store> {
        let tree = db.open_tree("kubefold")?;
        match tree.get(meta_key("format"))? {
            Some(found) if found.as_ref() == FORMAT.as_bytes() => {}
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
        Ok(Store { db, tree, durability: options.durability })
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

    /// Commits a batch atomically; with [`Durability::Sync`] it is on disk on return.
    pub fn commit(&self, commit: &Commit) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut head = None;
        for event in &commit.events {
            batch.insert(&event_key(event.rv)[..], encode(event)?);
            let ik = index_key(&event.resource, &event.key);
            match event.event_type {
                EventType::Added | EventType::Modified => batch.insert(ik, encode(&event.index_entry())?),
                EventType::Deleted => batch.remove(ik),
            }
            head = Some(event.rv);
        }
        for (cluster, resource, member_rv) in &commit.checkpoints {
            batch.insert(checkpoint_key(cluster, resource), member_rv.as_bytes());
        }
        if let Some(head) = head {
            batch.insert(meta_key("head"), &head.to_be_bytes()[..]);
        }
        self.tree.apply_batch(batch)?;
        if self.durability == Durability::Sync {
            self.db.flush()?;
        }
        Ok(())
    }

    /// Reads the merged index, the checkpoints and the compaction floor.
    pub fn recover(&self) -> Result<Recovered> {
        let mut index = Index::at(self.head_rv()?);
        for item in self.tree.scan_prefix([INDEX]) {
            let (k, v) = item?;
            let (resource, key) =
                parse_index_key(&k).ok_or_else(|| Error::Corrupt { what: "index key".into() })?;
            let entry: IndexEntry = decode(&v, "index entry")?;
            index.load(&resource, key, entry);
        }
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
        Ok(Recovered { index, checkpoints, compacted_rv: self.compacted_rv()? })
    }

    /// One event of the log.
    pub fn event(&self, rv: u64) -> Result<Option<StoredEvent>> {
        match self.tree.get(event_key(rv))? {
            Some(v) => Ok(Some(decode_event(&v)?)),
            None => Ok(None),
        }
    }

    /// The body of the event at `rv` (an object's version).
    pub fn body(&self, rv: u64) -> Result<Option<ServedBody>> {
        Ok(self.event(rv)?.map(|e| e.body))
    }

    /// Events after `rv`, in order, up to the end of the log.
    pub fn events_after(&self, rv: u64) -> impl Iterator<Item = Result<StoredEvent>> + '_ {
        let start = event_key(rv.saturating_add(1));
        let end = event_key(u64::MAX);
        self.tree.range(start..=end).map(|item| {
            let (_, v) = item?;
            decode_event(&v)
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
        for item in self.tree.range(event_key(floor.saturating_add(1))..=event_key(head)) {
            let (_, v) = item?;
            let event = decode_event(&v)?;
            if event.time_ms >= cutoff {
                break;
            }
            floor = event.rv;
        }
        Ok(floor.min(head))
    }

    /// Compacts the log up to `floor`: afterwards watches and exact reads
    /// older than `floor` are refused (410), and an event at or below it is
    /// kept only while it is an object's live version or the previous
    /// version of a retained event (needed to rewind to any RV >= floor).
    /// Safe while commits go on: an event that is not live never becomes
    /// live again, and new events only reference live versions.
    pub fn compact(&self, floor: u64) -> Result<CompactStats> {
        let floor = floor.min(self.head_rv()?);
        if floor <= self.compacted_rv()? {
            return Ok(CompactStats { floor: self.compacted_rv()?, removed: 0, kept: 0 });
        }
        self.tree.insert(meta_key("compacted"), &floor.to_be_bytes()[..])?;
        let mut keep = std::collections::HashSet::new();
        for item in self.tree.scan_prefix([INDEX]) {
            let (_, v) = item?;
            let entry: IndexEntry = decode(&v, "index entry")?;
            keep.insert(entry.rv);
        }
        for event in self.events_after(floor) {
            keep.insert(event?.prev_rv);
        }
        let (mut removed, mut kept) = (0u64, 0u64);
        let mut batch = sled::Batch::default();
        for item in self.tree.range(event_key(0)..=event_key(floor)) {
            let (k, v) = item?;
            let rv = read_u64(&k[1..], "event key")?;
            if keep.contains(&rv) {
                kept += 1;
                continue;
            }
            let _ = v;
            batch.remove(k);
            removed += 1;
            if removed % 10_000 == 0 {
                self.tree.apply_batch(std::mem::take(&mut batch))?;
            }
        }
        self.tree.apply_batch(batch)?;
        self.db.flush()?;
        Ok(CompactStats { floor, removed, kept })
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
        use std::hash::Hasher;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let io = |e: std::io::Error| Error::Io(sled::Error::Io(e));
        out.write_all(BACKUP_MAGIC).map_err(io)?;
        let mut count = 0u64;
        for item in self.tree.iter() {
            let (k, v) = item?;
            for part in [&k[..], &v[..]] {
                let len = (part.len() as u32).to_be_bytes();
                out.write_all(&len).map_err(io)?;
                out.write_all(part).map_err(io)?;
                hasher.write(&len);
                hasher.write(part);
            }
            count += 1;
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
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(Some(options.flush_every_ms))
            .open()
            .map_err(|source| Error::OpenFailed { path: path.to_path_buf(), source })?;
        let tree = db.open_tree("kubefold")?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut batch = sled::Batch::default();
        let mut pending = 0;
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
            batch.insert(key, value);
            pending += 1;
            if pending == 10_000 {
                tree.apply_batch(std::mem::take(&mut batch))?;
                pending = 0;
            }
        }
        let mut sum = [0u8; 8];
        input.read_exact(&mut sum).map_err(|_| bad("truncated"))?;
        if u64::from_be_bytes(sum) != hasher.finish() {
            return Err(bad("checksum mismatch"));
        }
        tree.apply_batch(batch)?;
        db.flush()?;
        // Keep the open database: dropping and reopening races sled's file lock.
        Store::from_db(db, path, options)
    }

    /// Flushes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    /// Bytes the data directory takes on disk, as sled reports it.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk()?)
    }

    /// Number of events retained in the log.
    pub fn event_count(&self) -> usize {
        self.tree.scan_prefix([EVENT]).count()
    }
}

#[cfg(test)]
mod tests;
