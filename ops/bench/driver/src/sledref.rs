//! The raw-sled reference of the ingest, disk and restart figures, run in
//! child processes of the driver (`kubefold-bench sled-reference ...`).
//!
//! sled's background flusher keeps the directory's lock for a while after
//! the database is dropped (over 2 minutes after a 1M insert in some runs),
//! so reopening it in the same process could fail. A process that exits
//! releases its lock: the insert runs in one child, the reopen and scan in
//! another, each timing its own work and printing it as one JSON line.

use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use crate::procs;

/// What the reference measured.
pub struct SledRef {
    pub insert_s: f64,
    pub records: usize,
    pub batch: usize,
    pub bytes: u64,
    pub reopen_scan_s: f64,
}

fn open(dir: &Path) -> sled::Result<sled::Db> {
    // As kubefold opens its store (store/src/lib.rs).
    sled::Config::new().path(dir).cache_capacity(256 * 1024 * 1024).flush_every_ms(Some(500)).segment_size(8 * 1024 * 1024).open()
}

/// Inserts `n` records (cycling through `records`) into a fresh sled tree
/// at `dir` in batches of `batch`, each applied and flushed (as kubefold
/// commits one batch per member's relist), then reopens it in a second
/// process and scans every key.
pub fn measure(dir: &Path, records: &[Bytes], n: usize, batch: usize) -> Result<SledRef> {
    let _ = std::fs::remove_dir_all(dir);
    let file = dir.with_extension("records");
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&file)?);
        for r in records {
            out.write_all(&(r.len() as u32).to_le_bytes())?;
            out.write_all(r)?;
        }
        out.flush()?;
    }
    let insert = child(&["insert".into(), dir.display().to_string(), file.display().to_string(), n.to_string(), batch.to_string()]);
    let _ = std::fs::remove_file(&file);
    let insert_s = insert?;
    let bytes = procs::dir_bytes(dir).0;
    let reopen_scan_s = child(&["reopen".into(), dir.display().to_string(), n.to_string()]);
    let _ = std::fs::remove_dir_all(dir);
    Ok(SledRef { insert_s, records: n, batch, bytes, reopen_scan_s: reopen_scan_s? })
}

/// Runs `kubefold-bench sled-reference ARGS` and returns the seconds it printed.
fn child(args: &[String]) -> Result<f64> {
    let exe = std::env::current_exe().context("driver's own path")?;
    let output = Command::new(exe)
        .arg("sled-reference")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("sled reference {}", args[0]))?;
    if !output.status.success() {
        bail!("sled reference {} exited with {}: {}", args[0], output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim().parse::<f64>().with_context(|| format!("sled reference {} printed {text:?}", args[0]))
}

/// The child's side: `insert DIR RECORDS N BATCH` or `reopen DIR N`.
/// Prints the seconds its timed work took.
pub fn child_main(args: &[String]) -> Result<()> {
    let seconds = match args {
        [mode, dir, file, n, batch] if mode == "insert" => {
            let records = read_records(Path::new(file))?;
            if records.is_empty() {
                bail!("no records in {file}");
            }
            insert(Path::new(dir), &records, n.parse()?, batch.parse::<usize>()?.max(1))?
        }
        [mode, dir, n] if mode == "reopen" => reopen(Path::new(dir), n.parse()?)?,
        _ => bail!("usage: kubefold-bench sled-reference insert DIR RECORDS N BATCH | reopen DIR N"),
    };
    println!("{seconds}");
    std::io::stdout().flush()?;
    // Exiting ends sled's background threads and releases the directory's
    // lock; every batch was flushed.
    std::process::exit(0)
}

fn read_records(file: &Path) -> Result<Vec<Vec<u8>>> {
    let mut input = BufReader::new(std::fs::File::open(file)?);
    let mut records = Vec::new();
    let mut len = [0u8; 4];
    loop {
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
        let mut r = vec![0; u32::from_le_bytes(len) as usize];
        input.read_exact(&mut r)?;
        records.push(r);
    }
    Ok(records)
}

fn insert(dir: &Path, records: &[Vec<u8>], n: usize, batch: usize) -> Result<f64> {
    let started = Instant::now();
    let db = open(dir)?;
    let tree = db.open_tree("bench")?;
    let mut i = 0usize;
    while i < n {
        let mut b = sled::Batch::default();
        for j in i..(i + batch).min(n) {
            b.insert(&(j as u64).to_be_bytes()[..], records[j % records.len()].as_slice());
        }
        tree.apply_batch(b)?;
        db.flush()?;
        i += batch;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn reopen(dir: &Path, n: usize) -> Result<f64> {
    let started = Instant::now();
    let db = open(dir)?;
    let count = db.open_tree("bench")?.iter().keys().count();
    let seconds = started.elapsed().as_secs_f64();
    if count != n {
        bail!("{count} records read back, {n} written");
    }
    Ok(seconds)
}
