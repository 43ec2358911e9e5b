//! Backup and restore. A backup file is a header, then every key and value
//! of the store (an event's whole record, not its pointer), each as its
//! length (u32, big-endian) and bytes, then `u32::MAX` and the checksum of
//! those lengths and bytes:
//!
//! - `kubefold-backup/4\n`, `checksum sha256\n`, then
//!   `min-resource-version N\n` (this build): the checksum is SHA-256, 32
//!   bytes, and covers the third line; N is above every resourceVersion
//!   the store served when the backup was written (its resourceVersion
//!   ceiling) and at least [`CEILING_STEP`] above its head; a restore
//!   continues above it;
//! - `kubefold-backup/3\n` then `checksum sha256\n`: the same without the
//!   third line;
//! - `kubefold-backup/2\n` (older builds, still restored): the checksum is
//!   SipHash-1-3 with zero keys (what std's `DefaultHasher` computed then;
//!   std may change that algorithm, so it is computed here), 8 bytes,
//!   big-endian.

use super::*;

/// First bytes of a backup file.
pub(crate) const BACKUP_MAGIC: &[u8; 18] = b"kubefold-backup/4\n";

/// First bytes of a backup file of the build before (no minimum
/// resourceVersion line).
const BACKUP_MAGIC_3: &[u8; 18] = b"kubefold-backup/3\n";

/// The start of a backup's third line, `min-resource-version N\n`.
const MIN_RV_LINE: &str = "min-resource-version ";

/// The line after [`BACKUP_MAGIC`]: which checksum the file ends with.
const CHECKSUM_LINE: &[u8; 16] = b"checksum sha256\n";

/// First bytes of a backup file of older builds (SipHash-1-3 checksum).
const BACKUP_MAGIC_2: &[u8; 18] = b"kubefold-backup/2\n";

/// Records restored per sled batch.
const RESTORE_BATCH: usize = 10_000;

/// A backup's checksum as it is computed.
enum Checksum {
    Sha256(ring::digest::Context),
    SipHash13(SipHasher13),
}

impl Checksum {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            Checksum::Sha256(context) => context.update(bytes),
            Checksum::SipHash13(hasher) => hasher.write(bytes),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Checksum::Sha256(context) => context.finish().as_ref().to_vec(),
            Checksum::SipHash13(hasher) => hasher.finish().to_be_bytes().to_vec(),
        }
    }
}

impl Store {
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
        let mut checksum = Checksum::Sha256(ring::digest::Context::new(&ring::digest::SHA256));
        let io = |e: std::io::Error| Error::Io(sled::Error::Io(e));
        out.write_all(BACKUP_MAGIC).map_err(io)?;
        out.write_all(CHECKSUM_LINE).map_err(io)?;
        let min_rv = self.backup_min_rv_now()?;
        let line = format!("{MIN_RV_LINE}{min_rv}\n");
        out.write_all(line.as_bytes()).map_err(io)?;
        checksum.update(line.as_bytes());
        let mut count = 0u64;
        for item in self.tree()?.iter() {
            let (k, v) = item?;
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
                    checksum.update(&len);
                    checksum.update(part);
                }
                count += 1;
            }
        }
        out.write_all(&u32::MAX.to_be_bytes()).map_err(io)?;
        out.write_all(&checksum.finish()).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(count)
    }

    /// The size of a backup of the store in bytes, about (metadata a
    /// backup rewrites may change it a little): for a backup's progress.
    /// Reads the pointers, not the records.
    pub fn backup_bytes(&self) -> Result<u64> {
        let min_rv_line = format!("{MIN_RV_LINE}{}\n", self.backup_min_rv_now()?);
        let mut bytes = (BACKUP_MAGIC.len() + CHECKSUM_LINE.len() + min_rv_line.len() + 4 + 32) as u64;
        for item in self.tree()?.iter() {
            let (k, v) = item?;
            let logged = match k.first() {
                Some(&EVENT) => log::decode_entries(read_u64(&k[1..], "event key")?, &v).map_err(|what| Error::Corrupt { what })?,
                _ => None,
            };
            bytes += match logged {
                Some(events) => events.iter().map(|(_, p)| 8 + 9 + u64::from(p.len)).sum(),
                None => 8 + k.len() as u64 + v.len() as u64,
            };
        }
        Ok(bytes)
    }

    /// The minimum resourceVersion a backup of the store written now
    /// records: above every resourceVersion it served
    /// ([`Store::served_rv_bound`]), and at least [`CEILING_STEP`] above its
    /// head, so that a restore of the newest backup stays above what was
    /// served in that many events after it.
    pub fn backup_min_rv_now(&self) -> Result<u64> {
        Ok(self.served_rv_bound()?.max(self.head_rv()?.saturating_add(CEILING_STEP)))
    }

    /// The minimum resourceVersion a backup file's header records (see
    /// [`Store::backup_min_rv_now`]); 0 for a backup of an older build that
    /// has none. Reads the header only.
    pub fn backup_min_rv(input: &mut impl std::io::Read) -> Result<u64> {
        Ok(read_backup_header(input)?.1)
    }

    /// Creates a store in the empty directory `path` from a backup (of
    /// this build or an older one). The store continues above the
    /// minimum resourceVersion of the backup's header and `min_rv`,
    /// whichever is higher (the newest backup's or the newest ceiling
    /// known, for a restore of an older backup): the resourceVersions
    /// between the backup's head and that are lost history (410, see
    /// [`Store::lost_history`]), the members are listed again (their
    /// checkpoints are dropped), and events up to the backup's head keep
    /// answering watches and lists. Returns the store, the backup's head
    /// and the resourceVersion the store continues above.
    pub fn restore_above(path: &Path, input: &mut impl std::io::Read, options: &Options, min_rv: u64) -> Result<(Store, u64, u64)> {
        let (store, header_rv) = Store::restore_inner(path, input, options)?;
        let head = store.head_rv()?;
        let above = header_rv.max(min_rv);
        if above > head {
            ceiling::write_ceiling(path, above).map_err(io_error)?;
            *store.ceiling.lock().unwrap_or_else(|e| e.into_inner()) = above;
            store.drop_history_from(head + 1, above)?;
        }
        Ok((store, head, above.max(head)))
    }

    /// Creates a store in the empty directory `path` from a backup (of
    /// this build or an older one), continuing above the minimum
    /// resourceVersion of its header ([`Store::restore_above`]).
    pub fn restore(path: &Path, input: &mut impl std::io::Read, options: &Options) -> Result<Store> {
        Ok(Store::restore_above(path, input, options, 0)?.0)
    }

    fn restore_inner(path: &Path, input: &mut impl std::io::Read, options: &Options) -> Result<(Store, u64)> {
        if path.exists() && std::fs::read_dir(path).map(|mut d| d.next().is_some()).unwrap_or(false) {
            return Err(Error::Corrupt { what: format!("restore target {} is not empty; restore into a new --data-dir", path.display()) });
        }
        let bad = |what: &str| Error::Corrupt { what: format!("backup file: {what}") };
        let (mut checksum, min_rv) = read_backup_header(input)?;
        let db = open_sled(path, options, SEGMENT_SIZE)?;
        let tree = db.open_tree("kubefold")?;
        let log = log::RecordLog::open(path, options.log_segment_bytes).map_err(io_error)?;
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
            checksum.update(&klen.to_be_bytes());
            checksum.update(&key);
            checksum.update(&vlen.to_be_bytes());
            checksum.update(&value);
            if key.first() == Some(&EVENT) {
                records.push((key, value));
            } else {
                batch.insert(key, value);
            }
            pending += 1;
            if pending == RESTORE_BATCH {
                apply(&mut batch, &mut records)?;
                pending = 0;
            }
        }
        let expected = checksum.finish();
        let mut sum = vec![0u8; expected.len()];
        input.read_exact(&mut sum).map_err(|_| bad("truncated"))?;
        if sum != expected {
            return Err(bad("checksum mismatch"));
        }
        apply(&mut batch, &mut records)?;
        log.sync().map_err(io_error)?;
        drop(log);
        db.flush()?;
        // Keep the open database: dropping and reopening races sled's file lock.
        Ok((Store::from_db(db, path, options)?, min_rv))
    }
}

/// Reads a backup file's header: the checksum to compute over the rest
/// (the minimum resourceVersion line already in it) and that minimum (0
/// when the format has none).
fn read_backup_header(input: &mut impl std::io::Read) -> Result<(Checksum, u64)> {
    let bad = |what: &str| Error::Corrupt { what: format!("backup file: {what}") };
    let mut magic = [0u8; BACKUP_MAGIC.len()];
    input.read_exact(&mut magic).map_err(|_| bad("too short"))?;
    if magic == *BACKUP_MAGIC_2 {
        return Ok((Checksum::SipHash13(SipHasher13::default()), 0));
    }
    if magic != *BACKUP_MAGIC && magic != *BACKUP_MAGIC_3 {
        return Err(bad("not a kubefold backup of a format this build reads"));
    }
    let mut line = [0u8; CHECKSUM_LINE.len()];
    input.read_exact(&mut line).map_err(|_| bad("too short"))?;
    if line != *CHECKSUM_LINE {
        let line = String::from_utf8_lossy(&line);
        return Err(bad(&format!("unknown checksum {:?}", line.trim_end())));
    }
    let mut checksum = Checksum::Sha256(ring::digest::Context::new(&ring::digest::SHA256));
    if magic == *BACKUP_MAGIC_3 {
        return Ok((checksum, 0));
    }
    // `min-resource-version N\n`, read a byte at a time (the input is
    // read on from its end).
    let mut text = Vec::new();
    let mut byte = [0u8; 1];
    while byte[0] != b'\n' {
        if text.len() > MIN_RV_LINE.len() + 21 {
            return Err(bad("damaged header"));
        }
        input.read_exact(&mut byte).map_err(|_| bad("too short"))?;
        text.push(byte[0]);
    }
    checksum.update(&text);
    let min_rv = std::str::from_utf8(&text)
        .ok()
        .and_then(|t| t.strip_prefix(MIN_RV_LINE)?.trim_end().parse().ok())
        .ok_or_else(|| bad("damaged header"))?;
    Ok((checksum, min_rv))
}

/// SipHash-1-3 with zero keys over the bytes written, as std's
/// `DefaultHasher::new()` computed it when older builds wrote their
/// backups' checksums (`kubefold-backup/2`).
#[derive(Debug, Clone)]
pub(crate) struct SipHasher13 {
    v: [u64; 4],
    tail: u64,
    ntail: usize,
    length: usize,
}

impl Default for SipHasher13 {
    fn default() -> Self {
        SipHasher13 { v: [0x736f_6d65_7073_6575, 0x646f_7261_6e64_6f6d, 0x6c79_6765_6e65_7261, 0x7465_6462_7974_6573], tail: 0, ntail: 0, length: 0 }
    }
}

impl SipHasher13 {
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        Self::round(&mut self.v);
        self.v[0] ^= m;
    }

    /// Adds `bytes` to what is hashed.
    pub(crate) fn write(&mut self, mut bytes: &[u8]) {
        self.length += bytes.len();
        while !bytes.is_empty() {
            let take = (8 - self.ntail).min(bytes.len());
            for (i, b) in bytes[..take].iter().enumerate() {
                self.tail |= u64::from(*b) << (8 * (self.ntail + i));
            }
            self.ntail += take;
            bytes = &bytes[take..];
            if self.ntail == 8 {
                let m = self.tail;
                self.compress(m);
                self.tail = 0;
                self.ntail = 0;
            }
        }
    }

    /// The hash of everything written.
    pub(crate) fn finish(&self) -> u64 {
        let mut v = self.v;
        let b = ((self.length as u64 & 0xff) << 56) | self.tail;
        v[3] ^= b;
        Self::round(&mut v);
        v[0] ^= b;
        v[2] ^= 0xff;
        for _ in 0..3 {
            Self::round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What std's `DefaultHasher` gives today for the same writes (it was
    /// SipHash-1-3 with zero keys when `kubefold-backup/2` files were
    /// written; should std change it, the fixture test still holds).
    #[test]
    fn siphash13_is_what_default_hasher_computed() {
        use std::hash::Hasher;
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for cuts in [vec![], vec![1], vec![7, 8, 9], vec![3, 100, 101, 999], vec![0, 0, 500]] {
            let mut ours = SipHasher13::default();
            let mut std = std::collections::hash_map::DefaultHasher::new();
            let mut at = 0;
            for cut in cuts.into_iter().chain([data.len()]) {
                ours.write(&data[at..cut]);
                std.write(&data[at..cut]);
                at = cut;
            }
            assert_eq!(ours.finish(), std.finish());
        }
        assert_eq!(SipHasher13::default().finish(), std::collections::hash_map::DefaultHasher::new().finish());
    }
}
