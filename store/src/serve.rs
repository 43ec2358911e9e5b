//! Serving helpers: [`ChunkBuf`], the buffer a list's chunks are written
//! into, bodies decompressed straight into it with the object's name and
//! resourceVersion spliced in, and [`ReadAhead`], neighbouring records
//! read together for a page of a list.

use std::sync::Arc;

use super::*;

/// Gaps up to this many bytes between records are read through by
/// [`Store::read_ahead`] rather than read apart (a read costs more than
/// copying a few records' bytes)...
pub(crate) const READ_AHEAD_GAP: u64 = 16 * 1024;
/// ... and its reads are at most this long.
pub(crate) const READ_AHEAD_SPAN: u64 = 1024 * 1024;

/// A read through a [`ReadCache`] takes at least this many bytes from the
/// first record it needs on ...
pub(crate) const READ_CACHE_WINDOW: u64 = 16 * 1024;
/// ... and the cache keeps at most about this many bytes of such reads.
pub(crate) const READ_CACHE_BYTES: usize = 16 << 20;
/// Buffers of spans a [`ReadCache`] let go kept to read the next spans into.
const SPARE_SPANS: usize = 16;

/// A cache's first this many window reads are made whatever they serve;
/// after them a read takes its window only while the windows have served
/// as many records from kept spans as they cost reads, and else one read
/// in this many (so a list whose records draw closer later gets its
/// windows back).
pub(crate) const READ_CACHE_TRIAL: u32 = 32;

/// Spans of the record log a long list has read, kept for its next
/// batches ([`Store::read_ahead_cached`]). A list is in (namespace, name,
/// cluster) order, and each member's objects were committed in its own
/// (namespace, name) order, so a list of many members reads each member's
/// records in log order, one record every as many items as there are
/// members: at 1,000 members a batch's records lie in as many places, one
/// read each, and the next record of each member lies just after the last. A read of
/// [`READ_CACHE_WINDOW`] from the first record it needs serves the
/// member's next records too, as long as the span is kept: the cache
/// keeps the spans read last, [`READ_CACHE_BYTES`] of them (1,024 members'
/// windows), which at a few members is a few spans.
///
/// A sparse list does not read so: a label selector matching one pod in a
/// hundred finds a member's next match about a hundred records further,
/// past the window, and reading a window for every object read 16 KiB
/// for each object's kilobyte (the 1% selector at 1,000 x 2M went from
/// 140 to 227 ms). Windows are kept up only while they pay
/// ([`READ_CACHE_TRIAL`]).
#[derive(Default)]
pub struct ReadCache {
    /// By (segment, offset of the span's first byte).
    spans: std::collections::BTreeMap<(u32, u32), Arc<Vec<u8>>>,
    /// Oldest first.
    order: std::collections::VecDeque<(u32, u32)>,
    bytes: usize,
    /// The log's segments and their lengths when the cache was first used:
    /// a read is extended only within them (the records of a list were all
    /// written by then).
    sizes: Option<std::collections::BTreeMap<u32, u64>>,
    /// Buffers of spans let go, read into again ([`SPARE_SPANS`] at most).
    spare: Vec<Vec<u8>>,
    /// Bytes of spans kept at most (none: [`READ_CACHE_BYTES`]).
    limit: Option<usize>,
    /// Reads extended to their window, ...
    windowed: u32,
    /// ... records found in kept spans ...
    hits: u32,
    /// ... and reads left at their records' length.
    exact: u32,
    /// Reads of the log made through the cache, and their bytes.
    #[cfg(test)]
    pub(crate) reads: usize,
    #[cfg(test)]
    pub(crate) bytes_read: usize,
    /// Reads made into the buffer of a span let go.
    #[cfg(test)]
    pub(crate) reused: usize,
}

impl ReadCache {
    /// A cache keeping at most `limit` bytes of spans.
    #[cfg(test)]
    pub(crate) fn with_limit(limit: usize) -> ReadCache {
        ReadCache { limit: Some(limit), ..ReadCache::default() }
    }

    /// The kept span holding `p`'s record: its bytes and the record's place in them.
    fn find(&self, p: &log::Pointer) -> Option<(Arc<Vec<u8>>, u32)> {
        let ((segment, start), span) = self.spans.range(..=(p.segment, p.offset)).next_back()?;
        let at = p.offset - start;
        (*segment == p.segment && at as usize + p.len as usize <= span.len()).then(|| (span.clone(), at))
    }

    /// Whether the next read takes its window ([`READ_CACHE_TRIAL`]).
    fn next_read_windowed(&mut self) -> bool {
        if self.windowed < READ_CACHE_TRIAL || self.hits >= self.windowed {
            self.windowed += 1;
            return true;
        }
        self.exact += 1;
        if self.exact % READ_CACHE_TRIAL == 0 {
            self.windowed += 1;
            return true;
        }
        false
    }

    /// Keeps `span` (from `offset` of `segment`), dropping the oldest
    /// spans beyond [`READ_CACHE_BYTES`].
    fn keep(&mut self, segment: u32, offset: u32, span: Arc<Vec<u8>>) {
        self.bytes += span.len();
        if let Some(old) = self.spans.insert((segment, offset), span) {
            self.bytes -= old.len();
        } else {
            self.order.push_back((segment, offset));
        }
        while self.bytes > self.limit.unwrap_or(READ_CACHE_BYTES) {
            let Some(key) = self.order.pop_front() else { break };
            if let Some(old) = self.spans.remove(&key) {
                self.bytes -= old.len();
                // Read into again unless a batch still holds it.
                if let Ok(old) = Arc::try_unwrap(old) {
                    if self.spare.len() < SPARE_SPANS {
                        self.spare.push(old);
                    }
                }
            }
        }
    }
}

/// Event records read together ([`Store::read_ahead`]).
#[derive(Default)]
pub struct ReadAhead {
    /// In the order the events were asked for (`None`: not in the log).
    records: Vec<(u64, Option<Held>)>,
    /// Where [`ReadAhead::get`] looks first: after the record it gave last
    /// (a list writes its items in the order it asked for them; finding
    /// each in records kept by RV was 3 % of a long list's CPU).
    next: std::cell::Cell<usize>,
    pub(crate) spans: Vec<Arc<Vec<u8>>>,
    /// The dictionaries when the records were read (looked up once per
    /// batch, not once per record under the store's lock).
    dicts: Dicts,
}

/// Where a record of a [`ReadAhead`] is.
pub(crate) enum Held {
    Inline(sled::IVec),
    Span { span: u32, start: u32, len: u32 },
}

impl ReadAhead {
    /// The record of the event at `rv`, if read.
    fn get(&self, rv: u64) -> Option<&[u8]> {
        let at = match self.records.get(self.next.get()) {
            Some((next, _)) if *next == rv => self.next.get(),
            _ => self.records.iter().position(|(held, _)| *held == rv)?,
        };
        self.next.set(at + 1);
        Some(match self.records[at].1.as_ref()? {
            Held::Inline(value) => value,
            Held::Span { span, start, len } => &self.spans[*span as usize][*start as usize..(*start + *len) as usize],
        })
    }
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
pub(crate) fn write_served_record(record: &[u8], rv: u64, name_suffix: Option<&str>, dicts: &Dicts, out: &mut ChunkBuf) -> Result<()> {
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

/// Writes the object of one event record as a list serves it (see
/// [`Store::write_served`]), for a type without a dictionary; a damaged
/// record is [`Error::Corrupt`] and leaves what `out` holds. Public for the
/// `store_envelope` fuzz target (`fuzz/`).
pub fn write_served_event(bytes: &[u8], rv: u64, name_suffix: Option<&str>, out: &mut ChunkBuf) -> Result<()> {
    write_served_record(bytes, rv, name_suffix, &Dicts::new(), out)
}

impl Store {
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
        self.read_ahead_in(rvs, None)
    }

    /// [`Store::read_ahead`] for one of many batches of a long list:
    /// records in a span `cache` kept are taken from it, and the reads
    /// made are at least [`READ_CACHE_WINDOW`] long and kept for the next
    /// batches (see [`ReadCache`]).
    pub fn read_ahead_cached(&self, rvs: impl IntoIterator<Item = u64>, cache: &mut ReadCache) -> Result<ReadAhead> {
        self.read_ahead_in(rvs, Some(cache))
    }

    fn read_ahead_in(&self, rvs: impl IntoIterator<Item = u64>, mut cache: Option<&mut ReadCache>) -> Result<ReadAhead> {
        let mut ahead = ReadAhead { dicts: self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone(), ..ReadAhead::default() };
        // The records in the log: their place in `ahead.records`, and where they are.
        let mut logged: Vec<(usize, log::Pointer)> = Vec::new();
        for (at, (rv, located)) in self.locations.get_many(rvs).into_iter().enumerate() {
            let held = match located {
                Some(pointer) => {
                    logged.push((at, pointer));
                    None
                }
                None => match self.lookup(rv)? {
                    Some(Located::Logged(pointer)) => {
                        logged.push((at, pointer));
                        None
                    }
                    Some(Located::Inline(value)) => Some(Held::Inline(value)),
                    None => None,
                },
            };
            ahead.records.push((rv, held));
        }
        logged.sort_unstable_by_key(|(_, p)| (p.segment, p.offset));
        if let Some(cache) = cache.as_deref_mut() {
            if cache.sizes.is_none() {
                cache.sizes = Some(self.log.segment_sizes().unwrap_or_default());
            }
            // Records in kept spans are taken from them; the others are read.
            let mut unread = Vec::with_capacity(logged.len());
            for (i, p) in logged {
                match cache.find(&p) {
                    Some((span, at)) => {
                        cache.hits += 1;
                        let bytes = &span[at as usize..(at + p.len) as usize];
                        let rv = ahead.records[i].0;
                        if crc32fast::hash(bytes) != p.crc {
                            let what = format!("event {rv}: log segment {} at {}: checksum mismatch", p.segment, p.offset);
                            self.note_damage(rv, &what);
                            return Err(Error::Corrupt { what });
                        }
                        ahead.records[i].1 = Some(Held::Span { span: ahead.spans.len() as u32, start: at, len: p.len });
                        ahead.spans.push(span);
                    }
                    None => unread.push((i, p)),
                }
            }
            logged = unread;
        }
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
            let mut len = (end - u64::from(first.offset)) as usize;
            // Through a cache: at least its window, within the segment,
            // while windows pay.
            if let Some(cache) = cache.as_deref_mut() {
                if let Some(size) = cache.sizes.as_ref().and_then(|sizes| sizes.get(&first.segment).copied()) {
                    if cache.next_read_windowed() {
                        len = len.max(READ_CACHE_WINDOW.min(size.saturating_sub(u64::from(first.offset))) as usize);
                    }
                }
            }
            // A segment gone since the pointers were read: those records
            // are read on their own, through their new pointers.
            let buffer = cache.as_deref_mut().and_then(|cache| cache.spare.pop()).unwrap_or_default();
            #[cfg(test)]
            if let Some(cache) = cache.as_deref_mut() {
                cache.reused += usize::from(buffer.capacity() > 0);
            }
            if let Some(span) = self.log.read_span_into(first.segment, first.offset, len, buffer).map_err(|what| Error::Corrupt { what })? {
                let index = ahead.spans.len() as u32;
                for (i, p) in &logged[run..next] {
                    let start = p.offset - first.offset;
                    let bytes = &span[start as usize..(start + p.len) as usize];
                    let rv = ahead.records[*i].0;
                    if crc32fast::hash(bytes) != p.crc {
                        let what = format!("event {rv}: log segment {} at {}: checksum mismatch", p.segment, p.offset);
                        self.note_damage(rv, &what);
                        return Err(Error::Corrupt { what });
                    }
                    ahead.records[*i].1 = Some(Held::Span { span: index, start, len: p.len });
                }
                let span = Arc::new(span);
                if let Some(cache) = cache.as_deref_mut() {
                    #[cfg(test)]
                    {
                        cache.reads += 1;
                        cache.bytes_read += span.len();
                    }
                    cache.keep(first.segment, first.offset, span.clone());
                }
                ahead.spans.push(span);
            }
            run = next;
        }
        Ok(ahead)
    }
}
