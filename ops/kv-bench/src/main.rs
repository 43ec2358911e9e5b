//! sled beside fjall and redb for what kubefold keeps in sled: the event
//! log's pointer groups (`e` + RV, a group of up to 256 17-byte pointers
//! with their RV offsets, about 5 KB), the members' checkpoints (`c` +
//! cluster `\0` resource, a resourceVersion) and the head RV (`m` + `head`).
//! Each engine commits the same batches atomically, each synced to disk
//! before the next (kubefold's `durability: sync`), then reads them back: a
//! scan of every `e` value in key order (a start's replay) and lookups of
//! random events (a read of a group by the RV of its first event).
//!
//! `cargo run --release -- DIR [COMMITS] [EVENTS_PER_COMMIT]` (DIR: a
//! directory on the disk to measure; each engine gets a fresh directory in it).

use std::time::{Duration, Instant};

use redb::{ReadableDatabase, ReadableTable};

/// One commit: the pointer groups of its events, the checkpoints reached, the head.
struct Batch {
    groups: Vec<([u8; 9], Vec<u8>)>,
    checkpoints: Vec<(Vec<u8>, Vec<u8>)>,
    head: ([u8; 5], [u8; 8]),
}

const GROUP_EVENTS: u64 = 256;
const ENTRY_BYTES: usize = 4 + 16;

fn event_key(rv: u64) -> [u8; 9] {
    let mut k = [b'e'; 9];
    k[1..].copy_from_slice(&rv.to_be_bytes());
    k
}

/// The batches: `commits` commits of `per_commit` events each, their
/// pointers in groups of up to 256, two members' checkpoints per commit.
fn batches(commits: u64, per_commit: u64) -> Vec<Batch> {
    let mut rv = 0u64;
    let mut offset = 0u32;
    (0..commits)
        .map(|c| {
            let mut groups = Vec::new();
            let mut left = per_commit;
            while left > 0 {
                let n = left.min(GROUP_EVENTS);
                let first = rv + 1;
                let mut value = vec![0xFE];
                for i in 0..n {
                    value.extend_from_slice(&(i as u32).to_le_bytes());
                    // segment, offset, length, crc
                    let len = 1_800 + (i as u32 * 37) % 400;
                    for word in [1u32, offset, len, (first + i).wrapping_mul(2_654_435_761) as u32] {
                        value.extend_from_slice(&word.to_le_bytes());
                    }
                    offset = offset.wrapping_add(len);
                }
                debug_assert_eq!(value.len(), 1 + n as usize * ENTRY_BYTES);
                groups.push((event_key(first), value));
                rv += n;
                left -= n;
            }
            let checkpoints = (0..2)
                .map(|m| (format!("cmember{}\0v1/pods", (c + m) % 10).into_bytes(), format!("{}", 1_000_000 + c * 7).into_bytes()))
                .collect();
            Batch { groups, checkpoints, head: (*b"mhead", rv.to_be_bytes()) }
        })
        .collect()
}

/// What one engine did.
struct Outcome {
    name: &'static str,
    commit: Duration,
    scan: Duration,
    scanned: u64,
    lookups: Duration,
    disk: u64,
}

trait Engine {
    fn commit(&mut self, batch: &Batch);
    /// Every `e` value in key order: (count, bytes).
    fn scan(&self) -> (u64, u64);
    /// The value holding the event at `rv` (the greatest key at or before it).
    fn lookup(&self, rv: u64) -> usize;
}

struct Sled {
    db: sled::Db,
    tree: sled::Tree,
}

impl Engine for Sled {
    fn commit(&mut self, b: &Batch) {
        let mut batch = sled::Batch::default();
        for (k, v) in &b.groups {
            batch.insert(&k[..], &v[..]);
        }
        for (k, v) in &b.checkpoints {
            batch.insert(&k[..], &v[..]);
        }
        batch.insert(&b.head.0[..], &b.head.1[..]);
        self.tree.apply_batch(batch).unwrap();
        self.db.flush().unwrap();
    }
    fn scan(&self) -> (u64, u64) {
        self.tree.scan_prefix(b"e").fold((0, 0), |(n, bytes), kv| (n + 1, bytes + kv.unwrap().1.len() as u64))
    }
    fn lookup(&self, rv: u64) -> usize {
        self.tree.range(event_key(0)..=event_key(rv)).next_back().unwrap().unwrap().1.len()
    }
}

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Engine for Fjall {
    fn commit(&mut self, b: &Batch) {
        let mut batch = self.db.batch().durability(Some(fjall::PersistMode::SyncAll));
        for (k, v) in &b.groups {
            batch.insert(&self.ks, &k[..], &v[..]);
        }
        for (k, v) in &b.checkpoints {
            batch.insert(&self.ks, &k[..], &v[..]);
        }
        batch.insert(&self.ks, &b.head.0[..], &b.head.1[..]);
        batch.commit().unwrap();
    }
    fn scan(&self) -> (u64, u64) {
        self.ks.prefix(b"e").fold((0, 0), |(n, bytes), kv| (n + 1, bytes + kv.into_inner().unwrap().1.len() as u64))
    }
    fn lookup(&self, rv: u64) -> usize {
        self.ks.range(event_key(0)..=event_key(rv)).next_back().unwrap().into_inner().unwrap().1.len()
    }
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("kubefold");

struct Redb {
    db: redb::Database,
}

impl Engine for Redb {
    fn commit(&mut self, b: &Batch) {
        // Durability::Immediate (the default): synced on commit.
        let txn = self.db.begin_write().unwrap();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for (k, v) in &b.groups {
                table.insert(&k[..], &v[..]).unwrap();
            }
            for (k, v) in &b.checkpoints {
                table.insert(&k[..], &v[..]).unwrap();
            }
            table.insert(&b.head.0[..], &b.head.1[..]).unwrap();
        }
        txn.commit().unwrap();
    }
    fn scan(&self) -> (u64, u64) {
        let txn = self.db.begin_read().unwrap();
        let table = txn.open_table(TABLE).unwrap();
        let end = [b'f'];
        table.range(&b"e"[..]..&end[..]).unwrap().fold((0, 0), |(n, bytes), kv| (n + 1, bytes + kv.unwrap().1.value().len() as u64))
    }
    fn lookup(&self, rv: u64) -> usize {
        let txn = self.db.begin_read().unwrap();
        let table = txn.open_table(TABLE).unwrap();
        let (from, to) = (event_key(0), event_key(rv));
        let found = table.range(&from[..]..=&to[..]).unwrap().next_back().unwrap().unwrap();
        found.1.value().len()
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let e = e.unwrap();
                    let meta = e.metadata().unwrap();
                    if meta.is_dir() {
                        dir_bytes(&e.path())
                    } else {
                        // Allocated bytes, not the length (sled's files are sparse).
                        std::os::unix::fs::MetadataExt::blocks(&meta) * 512
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn run(name: &'static str, dir: &std::path::Path, mut engine: Box<dyn Engine>, batches: &[Batch], events: u64) -> Outcome {
    let started = Instant::now();
    for batch in batches {
        engine.commit(batch);
    }
    let commit = started.elapsed();
    let started = Instant::now();
    let (scanned, _) = engine.scan();
    let scan = started.elapsed();
    let started = Instant::now();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut total = 0;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        total += engine.lookup(1 + x % events);
    }
    assert!(total > 0);
    let lookups = started.elapsed();
    drop(engine);
    Outcome { name, commit, scan, scanned, lookups, disk: dir_bytes(dir) }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = std::path::PathBuf::from(args.get(1).expect("usage: kv-bench DIR [COMMITS] [EVENTS_PER_COMMIT]"));
    let commits: u64 = args.get(2).map_or(2_000, |a| a.parse().unwrap());
    let per_commit: u64 = args.get(3).map_or(256, |a| a.parse().unwrap());
    let batches = batches(commits, per_commit);
    let events = commits * per_commit;
    let bytes: usize = batches.iter().map(|b| b.groups.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()).sum();
    println!("{commits} commits of {per_commit} events ({} groups, {:.1} MB of pointers), each synced", batches.iter().map(|b| b.groups.len()).sum::<usize>(), bytes as f64 / 1e6);
    println!("{:<6} {:>10} {:>12} {:>10} {:>14} {:>10}", "engine", "commit ms", "commits/s", "scan ms", "10k lookups ms", "disk MB");
    for name in ["sled", "fjall", "redb"] {
        let dir = root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let engine: Box<dyn Engine> = match name {
            "sled" => {
                // As kubefold opens it (store/src/open.rs): 8 MiB segments.
                let db = sled::Config::new().path(&dir).segment_size(8 * 1024 * 1024).flush_every_ms(Some(500)).open().unwrap();
                let tree = db.open_tree("kubefold").unwrap();
                Box::new(Sled { db, tree })
            }
            "fjall" => {
                let db = fjall::Database::builder(&dir).open().unwrap();
                let ks = db.keyspace("kubefold", fjall::KeyspaceCreateOptions::default).unwrap();
                Box::new(Fjall { db, ks })
            }
            _ => Box::new(Redb { db: redb::Database::create(dir.join("db.redb")).unwrap() }),
        };
        let o = run(name, &dir, engine, &batches, events);
        assert_eq!(o.scanned, batches.iter().map(|b| b.groups.len() as u64).sum::<u64>());
        println!(
            "{:<6} {:>10.0} {:>12.0} {:>10.1} {:>14.1} {:>10.1}",
            o.name,
            o.commit.as_secs_f64() * 1e3,
            commits as f64 / o.commit.as_secs_f64(),
            o.scan.as_secs_f64() * 1e3,
            o.lookups.as_secs_f64() * 1e3,
            o.disk as f64 / 1e6
        );
    }
}
