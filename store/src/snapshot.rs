//! The index snapshot file: a header (format, store id, RV, number of
//! chunks), then the index in chunks of up to [`SNAPSHOT_CHUNK`] objects
//! (decoded in parallel), then a CRC-32 of everything before it; its
//! writer and its reader.
//!
//! Layout (format `kubefold-store/6`, pieces of [`crate::codec`]):
//! [`SNAPSHOT_MAGIC`]; the header: format (string), store id (byte
//! string), RV (varint), number of chunks (varint); each chunk: resource
//! (string), number of objects (varint), byte length (varint), then per
//! object its namespace, name and cluster (strings), RV (varint), member
//! RV and uid (strings), labels and selectable fields (each a sequence of
//! string pairs); then the CRC-32 (u32, little-endian). A snapshot of an
//! older format (an older magic) is not read: the log is replayed instead.

use super::*;

/// First bytes of an index snapshot file.
pub(crate) const SNAPSHOT_MAGIC: &[u8; 26] = b"kubefold-index-snapshot/6\n";

/// First bytes of an index snapshot file of format 5 and older (bincode's
/// layout), not read.
const OLD_SNAPSHOT_MAGIC: &[u8; 24] = b"kubefold-index-snapshot\n";

/// What [`Store::read_snapshot`] says of a snapshot of this store ahead of
/// sled's head: sled lost commits it had made durable (damage).
pub(crate) const SNAPSHOT_AHEAD: &str = "is ahead of the log's head";

/// Why [`Store::read_snapshot`] did not use the snapshot file.
#[derive(Debug)]
pub(crate) enum Unused {
    /// There is none, or it cannot be used with this log (another store's,
    /// another format's, older than the compaction floor): the log is
    /// replayed instead.
    Stale(String),
    /// It is damaged (unreadable, a checksum mismatch, undecodable): it is
    /// quarantined and the log replayed instead.
    Damaged(String),
    /// It is ahead of sled's head: sled lost commits it had made durable
    /// (damage of sled's tree).
    Ahead(String),
}

/// Objects per chunk of an index snapshot (chunks are decoded in parallel).
pub(crate) const SNAPSHOT_CHUNK: usize = 32 * 1024;

/// The first record of an index snapshot.
pub(crate) struct SnapshotHeader<'a> {
    format: &'a str,
    store_id: &'a [u8],
    head_rv: u64,
    chunks: u64,
}

impl<'a> SnapshotHeader<'a> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        w.bytes(self.format.as_bytes());
        w.bytes(self.store_id);
        w.varint(self.head_rv);
        w.varint(self.chunks);
    }

    fn read(r: &mut Reader<'a>) -> Option<SnapshotHeader<'a>> {
        Some(SnapshotHeader { format: r.str()?, store_id: r.bytes()?, head_rv: r.u64()?, chunks: r.u64()? })
    }
}

/// Writes one object of a snapshot chunk.
pub(crate) fn write_entry(out: &mut Vec<u8>, key: &ObjectKey, entry: &IndexEntry) {
    let mut w = Writer(out);
    for part in [&key.namespace, &key.name, &key.cluster] {
        w.bytes(part.as_bytes());
    }
    w.varint(entry.rv);
    w.bytes(entry.member_rv().as_bytes());
    w.bytes(entry.uid().as_bytes());
    w.pairs(entry.labels().count(), entry.labels());
    w.pairs(entry.fields().count(), entry.fields());
}

/// Reads one object of a snapshot chunk.
pub(crate) fn read_entry(r: &mut Reader<'_>) -> Option<(ObjectKey, IndexEntry)> {
    let key = ObjectKey { namespace: r.str()?.to_string(), name: r.str()?.to_string(), cluster: r.str()?.to_string() };
    let rv = r.u64()?;
    let (member_rv, uid) = (r.str()?, r.str()?);
    let (labels, fields) = (r.pairs()?, r.pairs()?);
    Some((key, IndexEntry::new(rv, member_rv, uid, labels, fields)))
}

/// A decoded chunk of an index snapshot, in list order.
pub(crate) type Chunk = Vec<(ObjectKey, std::sync::Arc<IndexEntry>)>;

/// Decodes the snapshot's chunks (resource, object count, byte range of
/// `body`) on up to four threads; the chunks in order.
pub(crate) fn decode_chunks(body: &[u8], chunks: &[(String, u64, std::ops::Range<usize>)]) -> Result<Vec<Chunk>, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let decode = |count: u64, range: &std::ops::Range<usize>| -> Result<Chunk, String> {
        let mut r = Reader::new(&body[range.clone()]);
        let mut entries = Vec::with_capacity(count.min(SNAPSHOT_CHUNK as u64) as usize);
        for _ in 0..count {
            let (key, entry) = read_entry(&mut r).ok_or("snapshot undecodable: damaged object")?;
            entries.push((key, std::sync::Arc::new(entry)));
        }
        if !r.is_done() {
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

/// Bytes of a snapshot written between two syncs of its file (see
/// [`SyncedAsWritten`]).
const SYNC_EVERY_BYTES: u64 = 2 << 20;

/// A file written in large amounts beside commits (an index snapshot,
/// hundreds of MB at a fleet's size), synced every [`SYNC_EVERY_BYTES`]:
/// left to the kernel, its dirty pages went to the disk in one flood at
/// its closing sync, and every commit's sync of the record log waited
/// behind it (a 1.5 GB write made a small `fdatasync` beside it take up to
/// 270 ms on this project's machines; synced every 8 MiB, 10 to 15 ms; every
/// 2 MiB, 3 ms, the write 5 to 10 % slower). At 2M objects a snapshot is
/// 810 MB, and stalled the commits, and so every watch, for 250 to 500 ms
/// every 100,000 events.
pub(crate) struct SyncedAsWritten {
    file: std::fs::File,
    unsynced: u64,
    /// Syncs made along the way.
    pub(crate) syncs: u64,
}

impl SyncedAsWritten {
    pub(crate) fn new(file: std::fs::File) -> SyncedAsWritten {
        SyncedAsWritten { file, unsynced: 0, syncs: 0 }
    }

    /// The file, every byte written to it synced.
    pub(crate) fn finish(self) -> std::io::Result<std::fs::File> {
        self.file.sync_all()?;
        Ok(self.file)
    }
}

impl std::io::Write for SyncedAsWritten {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.unsynced += n as u64;
        if self.unsynced >= SYNC_EVERY_BYTES {
            self.file.sync_data()?;
            self.unsynced = 0;
            self.syncs += 1;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Bytes of a replaced snapshot let go at a time.
const RELEASE_STEP_BYTES: u64 = 16 << 20;

/// Shrinks a file no longer linked (the snapshot a newer one replaced) to
/// nothing in steps of [`RELEASE_STEP_BYTES`] before it is closed. Freed
/// at once, its 810 MB (at 2M objects) went to the disk as one discard,
/// and a small `fdatasync` beside it (a commit's) waited up to 42 to 56 ms;
/// let go 16 MiB at a time, 6 to 10 ms. A crash on the way leaves an
/// orphaned inode, which the file system frees when mounted.
fn release_gradually(file: std::fs::File) {
    let Ok(mut size) = file.metadata().map(|m| m.len()) else { return };
    while size > 0 {
        size = size.saturating_sub(RELEASE_STEP_BYTES);
        if file.set_len(size).is_err() {
            return;
        }
    }
}

/// A writer that sums what goes through it.
pub(crate) struct ChecksumWriter<W> {
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

impl Store {
    pub(crate) fn store_id(&self) -> Result<Vec<u8>> {
        Ok(self.tree()?.get(meta_key("store-id"))?.map(|v| v.to_vec()).unwrap_or_default())
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
        let file = SyncedAsWritten::new(file);
        let mut out = ChecksumWriter { inner: std::io::BufWriter::with_capacity(1 << 20, file), crc: crc32fast::Hasher::new(), bytes: 0 };
        out.write_all(SNAPSHOT_MAGIC).map_err(io)?;
        let resources = index.resource_keys();
        let chunks: u64 = resources.iter().map(|r| (index.len(r) as u64).div_ceil(SNAPSHOT_CHUNK as u64)).sum();
        let store_id = self.store_id()?;
        let mut header = Vec::new();
        SnapshotHeader { format: FORMAT, store_id: &store_id, head_rv: rv, chunks }.write(&mut header);
        out.write_all(&header).map_err(io)?;
        let mut objects = 0u64;
        let mut chunk = Vec::with_capacity(SNAPSHOT_CHUNK * 512);
        for resource in resources {
            let mut entries = index.range(&resource, None, None).peekable();
            while entries.peek().is_some() {
                chunk.clear();
                let mut count = 0u64;
                for (key, entry) in entries.by_ref().take(SNAPSHOT_CHUNK) {
                    write_entry(&mut chunk, key, entry);
                    count += 1;
                }
                header.clear();
                let mut w = Writer(&mut header);
                w.bytes(resource.as_bytes());
                w.varint(count);
                w.varint(chunk.len() as u64);
                out.write_all(&header).map_err(io)?;
                out.write_all(&chunk).map_err(io)?;
                objects += count;
            }
        }
        let crc = out.crc.clone().finalize();
        let bytes = out.bytes + 4;
        let mut inner = out.inner;
        inner.write_all(&crc.to_le_bytes()).map_err(io)?;
        let file = inner.into_inner().map_err(|e| io(e.into_error()))?;
        drop(file.finish().map_err(io)?);
        // The snapshot replaced, held open: its blocks are let go after the
        // rename, a few at a time (see `release_gradually`).
        let replaced = std::fs::OpenOptions::new().write(true).open(self.dir.join(SNAPSHOT_FILE)).ok();
        std::fs::rename(&tmp, self.dir.join(SNAPSHOT_FILE)).map_err(io)?;
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        if let Some(replaced) = replaced {
            release_gradually(replaced);
        }
        *newest = rv;
        Ok(Some(SnapshotStats { rv, objects, bytes }))
    }

    /// The index of the snapshot file, when it can be used with a log at
    /// `head` compacted to `compacted`; otherwise why not.
    pub(crate) fn read_snapshot(&self, head: u64, compacted: u64) -> Result<Index, Unused> {
        let path = self.dir.join(SNAPSHOT_FILE);
        let damaged = |what: &str| Unused::Damaged(what.to_string());
        let started = std::time::Instant::now();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unused::Stale("no snapshot".into())),
            Err(e) => return Err(Unused::Damaged(format!("snapshot unreadable: {e}"))),
        };
        if bytes.starts_with(OLD_SNAPSHOT_MAGIC) {
            return Err(Unused::Stale("snapshot of an older store format".into()));
        }
        if bytes.len() < SNAPSHOT_MAGIC.len() + 4 || &bytes[..SNAPSHOT_MAGIC.len()] != SNAPSHOT_MAGIC {
            return Err(damaged("snapshot is not an index snapshot (its first bytes are damaged, or it is truncated)"));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != sum {
            return Err(damaged("snapshot checksum mismatch (bytes changed, or truncated)"));
        }
        let mut r = Reader::new(&body[SNAPSHOT_MAGIC.len()..]);
        let bad = || damaged("snapshot undecodable: damaged header");
        let header = SnapshotHeader::read(&mut r).ok_or_else(bad)?;
        if header.format != FORMAT {
            return Err(Unused::Stale(format!("snapshot of format {:?}", header.format)));
        }
        if header.store_id != self.store_id().map_err(|e| Unused::Stale(e.to_string()))? {
            return Err(Unused::Stale("snapshot of another store".into()));
        }
        if header.head_rv > head {
            return Err(Unused::Ahead(format!("snapshot at RV {} {SNAPSHOT_AHEAD} {head}", header.head_rv)));
        }
        if header.head_rv < compacted {
            return Err(Unused::Stale(format!("snapshot at RV {} is older than the compaction floor {compacted}", header.head_rv)));
        }
        // Chunk headers first, then the chunks decoded on every core.
        let mut chunks = Vec::new();
        for _ in 0..header.chunks {
            let (resource, count, len) = (|| Some((r.str()?.to_string(), r.u64()?, r.u64()?)))().ok_or_else(bad)?;
            let at = SNAPSHOT_MAGIC.len() + r.position();
            let end = at.checked_add(len as usize).filter(|end| *end <= body.len()).ok_or_else(|| damaged("snapshot chunk past its end"))?;
            chunks.push((resource, count, at..end));
            r.take(end - at).ok_or_else(bad)?;
        }
        if !r.is_done() {
            return Err(damaged("snapshot has trailing bytes"));
        }
        let read_seconds = started.elapsed().as_secs_f64();
        let decoded = decode_chunks(body, &chunks).map_err(Unused::Damaged)?;
        let decode_seconds = started.elapsed().as_secs_f64() - read_seconds;
        // A type's chunks loaded at once: each of its maps built once.
        let mut index = Index::at(header.head_rv);
        let mut decoded = chunks.iter().map(|(resource, _, _)| resource).zip(decoded).peekable();
        while let Some((resource, first)) = decoded.next() {
            let mut of_type = vec![first];
            while let Some((_, entries)) = decoded.next_if(|(next, _)| next == &resource) {
                of_type.push(entries);
            }
            index.load_all(resource, of_type.into_iter().flatten());
        }
        let build_seconds = started.elapsed().as_secs_f64() - read_seconds - decode_seconds;
        tracing::info!(
            rv = header.head_rv,
            bytes = bytes.len(),
            objects = index.total(),
            read_seconds,
            decode_seconds,
            build_seconds,
            "Index snapshot loaded (read and checked, decoded, index built)."
        );
        Ok(index)
    }

    /// Moves a damaged index snapshot file into a new quarantine directory
    /// (with a [`crate::DAMAGE_NOTE`] saying why); returns the directory.
    pub(crate) fn quarantine_snapshot(&self, reason: &str) -> Result<PathBuf> {
        let quarantine = self.create_quarantine()?;
        std::fs::rename(self.dir.join(SNAPSHOT_FILE), quarantine.join(SNAPSHOT_FILE)).map_err(io_error)?;
        let note = format!("the index snapshot is damaged: {reason}\nthe index was rebuilt from the record log (nothing of the history is lost)\n");
        std::fs::write(quarantine.join(crate::DAMAGE_NOTE), note).map_err(io_error)?;
        Ok(quarantine)
    }
}

#[cfg(test)]
mod synced_tests {
    use std::io::Write;

    use super::*;

    /// A snapshot's file is synced every 2 MiB as it is written, and whole
    /// at its end: 20 MiB in writes of 1 MiB make ten syncs on the way.
    #[test]
    fn a_large_file_is_synced_every_few_megabytes_as_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let mut out = SyncedAsWritten::new(std::fs::File::create(&path).unwrap());
        let block = vec![7u8; 1 << 20];
        for _ in 0..20 {
            out.write_all(&block).unwrap();
        }
        assert_eq!(out.syncs, 10);
        let file = out.finish().unwrap();
        assert_eq!(file.metadata().unwrap().len(), 20 << 20);
        assert!(std::fs::read(&path).unwrap().iter().all(|&b| b == 7));
    }

    /// A replaced snapshot, unlinked but held open, is let go in steps to
    /// nothing; a name that still points at it would see it emptied.
    #[test]
    fn a_replaced_file_is_let_go_to_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old");
        std::fs::write(&path, vec![1u8; (RELEASE_STEP_BYTES * 2 + 5) as usize]).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        release_gradually(file);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
