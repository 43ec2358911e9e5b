//! The index snapshot file: a header (format, store id, RV, number of
//! chunks), then the index in chunks of up to [`SNAPSHOT_CHUNK`] objects
//! (decoded in parallel), then a CRC-32 of everything before it; its
//! writer and its reader.

use super::*;

/// First bytes of an index snapshot file.
pub(crate) const SNAPSHOT_MAGIC: &[u8; 24] = b"kubefold-index-snapshot\n";

/// Objects per chunk of an index snapshot (chunks are decoded in parallel).
pub(crate) const SNAPSHOT_CHUNK: usize = 32 * 1024;

/// The first record of an index snapshot.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct SnapshotHeader {
    format: String,
    store_id: Vec<u8>,
    head_rv: u64,
    chunks: u64,
}

/// A decoded chunk of an index snapshot, in list order.
pub(crate) type Chunk = Vec<(ObjectKey, std::sync::Arc<IndexEntry>)>;

/// Decodes the snapshot's chunks (resource, object count, byte range of
/// `body`) on up to four threads; the chunks in order.
pub(crate) fn decode_chunks(body: &[u8], chunks: &[(String, u64, std::ops::Range<usize>)]) -> Result<Vec<Chunk>, String> {
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
    pub(crate) fn read_snapshot(&self, head: u64, compacted: u64) -> Result<Index, String> {
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
}
