//! Backup and restore: a backup file holds a header, then every key and
//! value of the store (an event's whole record, not its pointer), then a
//! checksum.

use super::*;

/// First bytes of a backup file.
pub(crate) const BACKUP_MAGIC: &[u8; 18] = b"kubefold-backup/2\n";

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
}
