//! The record log: event records appended to segment files beside sled,
//! which keeps for each event only where its record is (a [`Pointer`]; a
//! commit's pointers together, see [`encode_group`]).
//!
//! Keeping the records themselves in sled's B-tree cost most of a sync's
//! writes: sled logs its leaves again as they fill, 4.2 KB written per event
//! of 1.8 KB in a 1M-pod sync, and every byte went through its page cache
//! and node splits. Appended here, a record is written once, sequentially,
//! and sled's tree holds small fixed-size values (WiscKey's key-value
//! separation, Lu et al., FAST 2016).
//!
//! Segments are files `log/NNNNNNNNNN.seg` of up to [`SEGMENT_BYTES`]
//! (a larger record gets a segment of its own); a new one is started at
//! each open, so a segment is never appended to after a crash, and bytes
//! past the last record sled points to are dead space. Compaction
//! ([`crate::Store::compact`]) moves the live records of segments that are
//! mostly dead to the end of the log, points sled at the copies, and then
//! deletes the segments.
//!
//! Durability: [`RecordLog::append`] syncs the segments it wrote when asked
//! (before the pointers are committed to sled, so a pointer made durable
//! never names bytes that are not); [`RecordLog::sync`] syncs them later.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// A segment is closed for appending once it holds this many bytes (by
/// default; see [`crate::Options::log_segment_bytes`]).
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// The log's directory inside the data dir.
pub const LOG_DIR: &str = "log";

/// First byte of a sled value that is a [`Pointer`]. An event record
/// written into sled itself (format 3) starts with a bincode varint, which
/// never starts with 0xFF.
const POINTER_TAG: u8 = 0xFF;

/// Length of an encoded [`Pointer`] (small enough for sled to keep inline).
pub const POINTER_LEN: usize = 17;

/// First byte of a sled value that holds the pointers of several events
/// (see [`encode_group`]). Neither a record (a bincode varint never starts
/// with 0xFE for a `u64`: 251-253 announce 2, 4 and 8 bytes, 254 only a
/// `u128`) nor a single [`Pointer`].
const GROUP_TAG: u8 = 0xFE;

/// Bytes per event in a group: its RV's distance from the key's RV (u32,
/// little-endian) and its pointer without the tag.
const GROUP_ENTRY_LEN: usize = 4 + POINTER_LEN - 1;

/// Most events in one group: a commit's pointers are written in groups of
/// up to this many, one sled value each (5 KB, well below what sled keeps
/// apart from its pages).
pub const GROUP_EVENTS: usize = 256;

/// What an append leaves after its records (a commit mark): the first and
/// the last resourceVersion of the commit whose records it ends (an append
/// that is no commit, a compaction's, repeats the newest commit's mark).
/// No pointer names it (readers never meet it); a start
/// compares the newest one with sled's head: sled's tree behind the log by
/// more than the last commit (which sled may lose to a crash before its
/// flush, never served) lost commits it had made durable, and is damaged.
///
/// A group of commits ([`crate::Store::commit_group`]) is marked once,
/// after sled flushed it (`flushed`): sled's head is then never behind
/// such a mark, whatever the size of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The commit's first resourceVersion.
    pub first_rv: u64,
    /// Its last one (the head after it).
    pub head_rv: u64,
    /// Written after sled flushed the commit (`kfM2`); before it otherwise (`kfM1`).
    pub flushed: bool,
}

/// First bytes of a [`Mark`] in a segment, written before sled's batch.
const MARK_MAGIC: &[u8; 4] = b"kfM1";

/// First bytes of a [`Mark`] written after sled flushed its commits.
const FLUSHED_MARK_MAGIC: &[u8; 4] = b"kfM2";

/// A [`Mark`]'s length: magic, two RVs, a CRC-32 of those.
pub(crate) const MARK_LEN: usize = 4 + 8 + 8 + 4;

impl Mark {
    fn encode(&self) -> [u8; MARK_LEN] {
        let mut out = [0u8; MARK_LEN];
        out[..4].copy_from_slice(if self.flushed { FLUSHED_MARK_MAGIC } else { MARK_MAGIC });
        out[4..12].copy_from_slice(&self.first_rv.to_le_bytes());
        out[12..20].copy_from_slice(&self.head_rv.to_le_bytes());
        let crc = crc32fast::hash(&out[..20]);
        out[20..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Mark> {
        if bytes.len() != MARK_LEN || crc32fast::hash(&bytes[..20]).to_le_bytes() != bytes[20..] {
            return None;
        }
        let flushed = match &bytes[..4] {
            magic if magic == MARK_MAGIC => false,
            magic if magic == FLUSHED_MARK_MAGIC => true,
            _ => return None,
        };
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
        Some(Mark { first_rv: word(4), head_rv: word(12), flushed })
    }
}

/// Where a record is: segment, offset, length and its CRC-32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    /// The segment's number.
    pub segment: u32,
    /// Offset of the record in the segment.
    pub offset: u32,
    /// The record's length.
    pub len: u32,
    /// CRC-32 of the record.
    pub crc: u32,
}

impl Pointer {
    /// As stored in sled.
    pub fn encode(&self) -> [u8; POINTER_LEN] {
        let mut out = [0u8; POINTER_LEN];
        out[0] = POINTER_TAG;
        self.write_words(&mut out[1..]);
        out
    }

    /// A pointer when `value` is one; `None` for a record stored inline.
    /// `Err` for a value that starts as a pointer but is not one.
    pub fn decode(value: &[u8]) -> Result<Option<Pointer>, String> {
        if value.first() != Some(&POINTER_TAG) {
            return Ok(None);
        }
        if value.len() != POINTER_LEN {
            return Err(format!("record pointer of {} bytes", value.len()));
        }
        Ok(Some(Pointer::read_words(&value[1..])))
    }

    /// The four words into `out` (16 bytes).
    fn write_words(&self, out: &mut [u8]) {
        for (i, n) in [self.segment, self.offset, self.len, self.crc].into_iter().enumerate() {
            out[4 * i..4 + 4 * i].copy_from_slice(&n.to_le_bytes());
        }
    }

    /// The pointer of four words (16 bytes).
    fn read_words(words: &[u8]) -> Pointer {
        let word = |i: usize| u32::from_le_bytes(words[4 * i..4 + 4 * i].try_into().expect("four bytes"));
        Pointer { segment: word(0), offset: word(1), len: word(2), crc: word(3) }
    }
}

/// The sled value holding the pointers of `events` (RV and pointer, in
/// RV order, none below `key_rv` nor more than `u32::MAX` above it), kept
/// under the key of `key_rv`: a commit's events get one value per
/// [`GROUP_EVENTS`] instead of one each. Inserting a key per event was the
/// largest cost of a commit, with the memory sled's tree grew by.
pub fn encode_group(key_rv: u64, events: &[(u64, Pointer)]) -> Vec<u8> {
    let mut out = vec![0u8; 1 + events.len() * GROUP_ENTRY_LEN];
    out[0] = GROUP_TAG;
    for ((rv, pointer), entry) in events.iter().zip(out[1..].chunks_exact_mut(GROUP_ENTRY_LEN)) {
        let distance = u32::try_from(rv - key_rv).expect("a group spans less than 2^32 RVs");
        entry[..4].copy_from_slice(&distance.to_le_bytes());
        pointer.write_words(&mut entry[4..]);
    }
    out
}

/// The events of the sled value under the key of `key_rv`, in RV order:
/// `None` for a record stored inline (the event at `key_rv`), else each
/// event's RV and pointer (one for a single [`Pointer`], those of a group
/// for an [`encode_group`] value). `Err` for a value that is neither.
pub fn decode_entries(key_rv: u64, value: &[u8]) -> Result<Option<Vec<(u64, Pointer)>>, String> {
    match value.first() {
        Some(&GROUP_TAG) => {
            let entries = &value[1..];
            if entries.is_empty() || !entries.len().is_multiple_of(GROUP_ENTRY_LEN) {
                return Err(format!("record pointer group of {} bytes", value.len()));
            }
            let mut out = Vec::with_capacity(entries.len() / GROUP_ENTRY_LEN);
            for entry in entries.chunks_exact(GROUP_ENTRY_LEN) {
                let distance = u32::from_le_bytes(entry[..4].try_into().expect("four bytes"));
                let rv = key_rv.checked_add(u64::from(distance)).ok_or("record pointer group past the last RV")?;
                if out.last().is_some_and(|(last, _)| *last >= rv) {
                    return Err(format!("record pointer group at RV {key_rv} out of order"));
                }
                out.push((rv, Pointer::read_words(&entry[4..])));
            }
            Ok(Some(out))
        }
        _ => Ok(Pointer::decode(value)?.map(|pointer| vec![(key_rv, pointer)])),
    }
}

/// The number of events of a sled value (see [`decode_entries`]), without
/// reading them: 1 for anything but a group.
pub fn entry_count(value: &[u8]) -> usize {
    match value.first() {
        Some(&GROUP_TAG) => (value.len() - 1) / GROUP_ENTRY_LEN,
        _ => 1,
    }
}

/// The segment being appended to.
struct Active {
    id: u32,
    file: Arc<File>,
    len: u64,
    /// Written since the last sync.
    dirty: bool,
}

/// The appending side: the active segment and the next segment's number.
struct Writer {
    active: Option<Active>,
    next_id: u32,
    /// The newest commit's mark, repeated after appends of no commit.
    mark: Option<Mark>,
    /// A segment was created by an append without `sync`: the directory
    /// is synced by the next append with `sync`.
    dir_dirty: bool,
    /// The write buffer, kept between appends (up to [`KEPT_BUFFER`]): a
    /// new one of a megabyte per commit cost page faults, a tenth of a
    /// sync's CPU time with its other fresh memory.
    buf: Vec<u8>,
}

/// The largest write buffer kept between appends.
const KEPT_BUFFER: usize = 8 << 20;

/// The segment files of a data dir.
pub struct RecordLog {
    dir: PathBuf,
    segment_bytes: u64,
    segments: RwLock<BTreeMap<u32, Arc<File>>>,
    writer: Mutex<Writer>,
}

pub(crate) fn segment_name(id: u32) -> String {
    format!("{id:010}.seg")
}

fn segment_id(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl RecordLog {
    /// Opens the log in `data_dir` (creating its directory); appends go to
    /// a new segment.
    pub fn open(data_dir: &Path, segment_bytes: u64) -> std::io::Result<RecordLog> {
        let dir = data_dir.join(LOG_DIR);
        std::fs::create_dir_all(&dir)?;
        let mut segments = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let Some(id) = entry.file_name().to_str().and_then(segment_id) else { continue };
            segments.insert(id, Arc::new(File::open(entry.path())?));
        }
        let next_id = segments.keys().next_back().map_or(1, |id| id + 1);
        let mark = newest_mark(&segments);
        Ok(RecordLog { dir, segment_bytes: segment_bytes.max(1), segments: RwLock::new(segments), writer: Mutex::new(Writer { active: None, next_id, mark, dir_dirty: false, buf: Vec::new() }) })
    }

    /// Appends `records` in order; their pointers in the same order. With
    /// `sync`, every segment written is on disk on return.
    pub fn append(&self, records: &[Vec<u8>], sync: bool) -> std::io::Result<Vec<Pointer>> {
        self.append_marked(records, sync, None)
    }

    /// [`RecordLog::append`], the records followed by `mark`, the mark of
    /// the commit they are (see [`Mark`]); without one, by the newest
    /// commit's mark.
    pub fn append_marked(&self, records: &[Vec<u8>], sync: bool, mark: Option<Mark>) -> std::io::Result<Vec<Pointer>> {
        self.append_with(records, sync, mark, true)
    }

    /// [`RecordLog::append`] without a mark after the records: a commit of
    /// a group whose mark follows its last commit's records (see
    /// [`crate::Store::commit_group`]). A crash before that mark leaves
    /// these records unmarked at the end: dead bytes no pointer names.
    pub fn append_unmarked(&self, records: &[Vec<u8>]) -> std::io::Result<Vec<Pointer>> {
        self.append_with(records, false, None, false)
    }

    fn append_with(&self, records: &[Vec<u8>], sync: bool, mark: Option<Mark>, marked: bool) -> std::io::Result<Vec<Pointer>> {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut pointers = Vec::with_capacity(records.len());
        let mut buf = std::mem::take(&mut writer.buf);
        buf.clear();
        buf.reserve(records.iter().map(Vec::len).sum::<usize>().min(self.segment_bytes as usize));
        let mut created = false;
        for record in records {
            let len = record.len() as u64;
            let full = writer.active.as_ref().is_none_or(|a| a.len + buf.len() as u64 > 0 && a.len + buf.len() as u64 + len > self.segment_bytes);
            if full {
                if let Some(active) = writer.active.as_mut() {
                    write_out(active, &mut buf)?;
                    // A closed segment is synced now whatever the mode: only
                    // the active one is left for `sync`.
                    active.file.sync_data()?;
                }
                let id = writer.next_id;
                let path = self.dir.join(segment_name(id));
                let file = Arc::new(private_file().create_new(true).read(true).write(true).open(&path)?);
                self.segments.write().unwrap_or_else(|e| e.into_inner()).insert(id, file.clone());
                writer.next_id = id + 1;
                writer.active = Some(Active { id, file, len: 0, dirty: false });
                created = true;
            }
            let active = writer.active.as_ref().expect("a segment to append to");
            let offset = active.len + buf.len() as u64;
            pointers.push(Pointer {
                segment: active.id,
                offset: u32::try_from(offset).map_err(|_| std::io::Error::other("segment offset over 4 GiB"))?,
                len: u32::try_from(len).map_err(|_| std::io::Error::other("record over 4 GiB"))?,
                crc: crc32fast::hash(record),
            });
            buf.extend_from_slice(record);
        }
        if mark.is_some() {
            writer.mark = mark;
        }
        if let (Some(mark), Some(_), true) = (writer.mark, writer.active.as_ref(), marked) {
            buf.extend_from_slice(&mark.encode());
        }
        if let Some(active) = writer.active.as_mut() {
            write_out(active, &mut buf)?;
            if sync && active.dirty {
                active.file.sync_data()?;
                active.dirty = false;
            }
        }
        if buf.capacity() <= KEPT_BUFFER {
            writer.buf = buf;
        }
        if created {
            writer.dir_dirty = true;
        }
        if sync && writer.dir_dirty {
            sync_dir(&self.dir)?;
            writer.dir_dirty = false;
        }
        Ok(pointers)
    }

    /// Syncs the records appended without `sync` (the active segment, and
    /// the directory when a segment was created since), as an append with
    /// `sync` would.
    pub fn sync_appended(&self) -> std::io::Result<()> {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(active) = writer.active.as_mut().filter(|a| a.dirty) {
            active.file.sync_data()?;
            active.dirty = false;
        }
        if writer.dir_dirty {
            sync_dir(&self.dir)?;
            writer.dir_dirty = false;
        }
        Ok(())
    }

    /// Syncs what was appended without `sync`.
    pub fn sync(&self) -> std::io::Result<()> {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(active) = writer.active.as_mut().filter(|a| a.dirty) {
            active.file.sync_data()?;
            active.dirty = false;
        }
        sync_dir(&self.dir)?;
        writer.dir_dirty = false;
        Ok(())
    }

    /// Reads the record at `pointer` into `out` (replacing what it held),
    /// checked against the pointer's CRC: false when its segment is gone
    /// (compaction moved the record: read its pointer again), `Err` when
    /// the bytes there are not the record (a damaged or truncated segment).
    pub fn read_into(&self, pointer: Pointer, out: &mut Vec<u8>) -> Result<bool, String> {
        let Some(file) = self.segments.read().unwrap_or_else(|e| e.into_inner()).get(&pointer.segment).cloned() else {
            return Ok(false);
        };
        out.clear();
        out.resize(pointer.len as usize, 0);
        let name = segment_name(pointer.segment);
        file.read_exact_at(out, u64::from(pointer.offset)).map_err(|e| format!("log segment {name} at {}: {e}", pointer.offset))?;
        if crc32fast::hash(out) != pointer.crc {
            return Err(format!("log segment {name} at {}: checksum mismatch", pointer.offset));
        }
        Ok(true)
    }

    /// Reads `len` bytes of segment `segment` from `offset` (several
    /// records at once); `None` when the segment is gone.
    pub fn read_span(&self, segment: u32, offset: u32, len: usize) -> Result<Option<Vec<u8>>, String> {
        self.read_span_into(segment, offset, len, Vec::new())
    }

    /// [`RecordLog::read_span`] into `out`, a buffer used before: only
    /// what it grows beyond its length is cleared first (clearing every
    /// span a long list read was 2 % of its CPU).
    pub fn read_span_into(&self, segment: u32, offset: u32, len: usize, mut out: Vec<u8>) -> Result<Option<Vec<u8>>, String> {
        let Some(file) = self.segments.read().unwrap_or_else(|e| e.into_inner()).get(&segment).cloned() else {
            return Ok(None);
        };
        out.resize(len, 0);
        file.read_exact_at(&mut out, u64::from(offset))
            .map_err(|e| format!("log segment {} at {offset}: {e}", segment_name(segment)))?;
        Ok(Some(out))
    }

    /// The mark the newest segment with bytes ends with, if it ends with
    /// one (an append cut short, or one without a mark, leaves none).
    pub fn last_mark(&self) -> Option<Mark> {
        newest_mark(&self.segments.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The segment being appended to, if any.
    pub fn active_id(&self) -> Option<u32> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).active.as_ref().map(|a| a.id)
    }

    /// Every segment and its length in bytes.
    pub fn segment_sizes(&self) -> std::io::Result<BTreeMap<u32, u64>> {
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner()).clone();
        segments.into_iter().map(|(id, file)| Ok((id, file.metadata()?.len()))).collect()
    }

    /// Bytes of every segment.
    pub fn size(&self) -> std::io::Result<u64> {
        Ok(self.segment_sizes()?.values().sum())
    }

    /// Deletes segments (none of them the active one): readers that still
    /// hold one finish with it; new reads of their records find them moved.
    pub fn remove(&self, ids: &[u32]) -> std::io::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let active = self.active_id();
        let mut segments = self.segments.write().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if Some(*id) == active {
                continue;
            }
            segments.remove(id);
            match std::fs::remove_file(self.dir.join(segment_name(*id))) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        drop(segments);
        sync_dir(&self.dir)
    }
}

/// The mark the newest of `segments` with bytes ends with, if any.
fn newest_mark(segments: &BTreeMap<u32, Arc<File>>) -> Option<Mark> {
    let (_, file) = segments.iter().rev().find(|(_, file)| file.metadata().is_ok_and(|m| m.len() > 0))?;
    let len = file.metadata().ok()?.len();
    let at = len.checked_sub(MARK_LEN as u64)?;
    let mut bytes = [0u8; MARK_LEN];
    file.read_exact_at(&mut bytes, at).ok()?;
    Mark::decode(&bytes)
}

/// Writes `buf` at the end of the active segment and empties it.
fn write_out(active: &mut Active, buf: &mut Vec<u8>) -> std::io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    // Past the end whatever happens: a failed write leaves dead bytes
    // behind, never a place a later record could half overwrite.
    let at = active.len;
    active.len += buf.len() as u64;
    active.dirty = true;
    active.file.write_all_at(buf, at)?;
    buf.clear();
    Ok(())
}

/// Where each event's record is, kept in memory so that a read needs no
/// lookup in sled's tree: in a list of 100,000 pods, sled's `Tree::get` of
/// the pointers was a quarter of kubefold's CPU. Filled from sled after
/// the store opens, then kept up by commits and compactions; an event it
/// does not hold (a format 3 record, or before it is filled) is looked up
/// in sled. About 50 MB for a million events.
#[derive(Default)]
pub struct Locations {
    map: RwLock<std::collections::HashMap<u64, Pointer, std::hash::BuildHasherDefault<RvHasher>>>,
    /// Set once the map holds every event record of the store (filled,
    /// and none was met in sled itself): its size is then the number of
    /// events retained.
    complete: std::sync::atomic::AtomicBool,
}

impl Locations {
    /// Where the record of the event at `rv` is, if known.
    pub fn get(&self, rv: u64) -> Option<Pointer> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).get(&rv).copied()
    }

    /// [`Locations::get`] for each of `rvs`, under one lock.
    pub fn get_many(&self, rvs: impl IntoIterator<Item = u64>) -> Vec<(u64, Option<Pointer>)> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        rvs.into_iter().map(|rv| (rv, map.get(&rv).copied())).collect()
    }

    /// Records where these events' records are now.
    pub fn insert(&self, located: impl IntoIterator<Item = (u64, Pointer)>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.extend(located);
    }

    /// Records these locations read from sled, except for events recorded
    /// since (commits go on while the map is filled).
    pub fn fill(&self, located: impl IntoIterator<Item = (u64, Pointer)>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for (rv, pointer) in located {
            map.entry(rv).or_insert(pointer);
        }
    }

    /// Forgets these events (compaction removed them).
    pub fn remove(&self, rvs: impl IntoIterator<Item = u64>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for rv in rvs {
            map.remove(&rv);
        }
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks the map as holding every event record of the store.
    pub fn set_complete(&self) {
        self.complete.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The number of events retained, once the map holds them all.
    pub fn count(&self) -> Option<usize> {
        self.complete.load(std::sync::atomic::Ordering::Acquire).then(|| self.len())
    }
}

/// Hashes an RV by one multiplication: RVs are distinct integers, mostly
/// consecutive, and need no protection from chosen keys.
#[derive(Default)]
pub struct RvHasher(u64);

impl std::hash::Hasher for RvHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Options of a new file only kubefold's user may read or write (0600): a
/// segment holds objects of the fleet.
pub(crate) fn private_file() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(n: u32) -> Pointer {
        Pointer { segment: n, offset: n * 7, len: n + 100, crc: n ^ 0xdead_beef }
    }

    #[test]
    fn groups_round_trip_and_damage_is_refused() {
        let events: Vec<(u64, Pointer)> = [10u64, 11, 15, 10 + u64::from(u32::MAX)].iter().zip(1..).map(|(rv, n)| (*rv, pointer(n))).collect();
        let value = encode_group(10, &events);
        assert_eq!(value.len(), 1 + 4 * GROUP_ENTRY_LEN);
        assert_eq!(decode_entries(10, &value).unwrap(), Some(events.clone()));
        assert_eq!(entry_count(&value), 4);
        // Keyed before its first event (compaction removed that one).
        assert_eq!(decode_entries(9, &encode_group(9, &events[1..3])).unwrap(), Some(events[1..3].to_vec()));
        // A single pointer is a group of one; a record is none.
        assert_eq!(decode_entries(5, &pointer(3).encode()).unwrap(), Some(vec![(5, pointer(3))]));
        assert_eq!(entry_count(&pointer(3).encode()), 1);
        assert_eq!(decode_entries(5, &[3, 1, 2]).unwrap(), None);
        // Truncated, empty, out of order, past the last RV.
        assert!(decode_entries(10, &value[..value.len() - 1]).is_err());
        assert!(decode_entries(10, &[GROUP_TAG]).is_err());
        let mut swapped = value.clone();
        swapped[1..1 + GROUP_ENTRY_LEN].copy_from_slice(&value[1 + GROUP_ENTRY_LEN..1 + 2 * GROUP_ENTRY_LEN]);
        assert!(decode_entries(10, &swapped).is_err());
        assert!(decode_entries(u64::MAX - 2, &value).is_err());
    }
}
