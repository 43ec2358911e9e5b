//! Drives kubefold's store directly, without members or HTTP, to measure
//! where its disk bytes and its start-up time go (`ops/soak/store` and
//! `ops/bench/restart` run it).
//!
//! - `fill`: writes PODS load pods as ADDED events, committed in batches
//!   as a member's relist is, then AFTER more changes (modifications) in
//!   small batches; leaves the data dir as a SIGKILL would (no clean shutdown).
//! - `churn`: PODS pods, then constant churn (modify, create, delete, as the
//!   simulator's churn does) until EVENTS events, compacting to keep RETAIN
//!   events every COMPACT_EVERY events; prints the disk figures.
//! - `open`: opens a data dir and recovers the index, timing each step.
//!
//! ```sh
//! cargo run --release --example store_soak -- churn --data-dir /tmp/d --pods 10000 --events 200000 --retain 100000
//! cargo run --release --example store_soak -- fill --data-dir /tmp/d --pods 1000000 --after 20000
//! cargo run --release --example store_soak -- open --data-dir /tmp/d
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use kubefold_engine::event::{Change, StoredEvent};
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources::{self, ResourceType};
use kubefold_store::{Commit, Options, Store};
use kubefold_testdata::workload::{self, Cluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CLUSTER: &str = "member1";

/// The allocator of the `kubefold` binary, so that timings compare.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    command: String,
    data_dir: PathBuf,
    pods: usize,
    events: u64,
    after: u64,
    retain: u64,
    batch: usize,
    compact_every: u64,
    snapshot: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let command = it.next().context("usage: store_soak fill|churn|open --data-dir D [--pods N] [--events N] [--after N] [--retain N] [--batch N] [--compact-every N] [--no-snapshot]")?;
    let mut args = Args {
        command,
        data_dir: PathBuf::new(),
        pods: 10_000,
        events: 200_000,
        after: 0,
        retain: 100_000,
        batch: 20,
        compact_every: 20_000,
        snapshot: true,
    };
    while let Some(flag) = it.next() {
        if flag == "--no-snapshot" {
            args.snapshot = false;
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--data-dir" => args.data_dir = PathBuf::from(value),
            "--pods" => args.pods = value.parse()?,
            "--events" => args.events = value.parse()?,
            "--after" => args.after = value.parse()?,
            "--retain" => args.retain = value.parse()?,
            "--batch" => args.batch = value.parse()?,
            "--compact-every" => args.compact_every = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if args.data_dir.as_os_str().is_empty() {
        bail!("--data-dir is required");
    }
    Ok(args)
}

fn pods_type() -> ResourceType {
    resources::find(&resources::builtin(), "", "v1", "pods").expect("pods are built in").clone()
}

/// Plans, commits and applies a batch like the aggregator does.
fn commit(store: &Store, index: &mut Index, changes: Vec<Change>, member_rv: u64) -> anyhow::Result<()> {
    let mut events: Vec<StoredEvent> = Vec::with_capacity(changes.len());
    for change in changes {
        if let Some(event) = plan_change(index, "v1/pods", CLUSTER, change, index.head_rv() + 1) {
            index.apply(&event);
            events.push(event);
        }
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    for e in &mut events {
        e.time_ms = now;
    }
    let checkpoints = vec![(CLUSTER.to_string(), "v1/pods".to_string(), member_rv.to_string())];
    store.commit(&Commit { events, checkpoints })?;
    Ok(())
}

fn du(path: &Path) -> u64 {
    let out = std::process::Command::new("du").arg("-sb").arg(path).output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The served size of every live object (what `GET /api/v1/pods` returns, without the list wrapper).
fn live_bytes(store: &Store, index: &Index) -> anyhow::Result<u64> {
    let mut total = 0u64;
    for (key, entry) in index.range("v1/pods", None, None) {
        let body = store.body(entry.rv)?.context("live body missing")?;
        total += body.to_bytes(Some(&format!("_{}", key.cluster)), entry.rv).len() as u64 + 1;
    }
    Ok(total)
}

fn report(store: &Store, index: &Index, data_dir: &Path, retain: u64, seconds: f64) -> anyhow::Result<()> {
    store.flush()?;
    let live = live_bytes(store, index)?;
    let objects = index.total() as u64;
    let per_object = live as f64 / objects.max(1) as f64;
    let window = retain as f64 * per_object;
    let usage = store.usage()?;
    let disk = du(data_dir);
    println!("store soak: head RV {} over {} objects in {seconds:.0} s; retained events {}, compacted RV {}",
        store.head_rv()?, objects, store.event_count(), store.compacted_rv()?);
    println!("live objects JSON: {:.1} MB; retained window (estimate {retain} x {per_object:.0} B): {:.1} MB", live as f64 / 1e6, window / 1e6);
    println!("records: {usage}");
    println!("sled size_on_disk: {:.1} MB", store.size_on_disk()? as f64 / 1e6);
    println!("data dir on disk: {:.1} MB = {:.2}x (live + window); records/disk = {:.2}", disk as f64 / 1e6, disk as f64 / (live as f64 + window), usage.total_bytes() as f64 / disk as f64);
    Ok(())
}

fn churn(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let store = Store::open(&args.data_dir, &Options::default())?;
    let mut index = store.recover()?.index;
    let pods = pods_type();
    let cluster = Cluster::new(CLUSTER, 7, chrono::Utc::now());
    let mut rng = StdRng::seed_from_u64(11);
    let mut member_rv = 1u64;
    // Live pods as the member holds them, with their keys for modify/delete.
    let mut live: Vec<serde_json::Value> = Vec::with_capacity(args.pods * 2);
    let mut changes = Vec::new();
    for i in 0..args.pods {
        let mut pod = workload::load_pod(&cluster, i);
        member_rv += 1;
        pod["metadata"]["resourceVersion"] = member_rv.to_string().into();
        changes.push(Change::Upsert(ingest(&pods, CLUSTER, &serde_json::to_vec(&pod)?)?));
        live.push(pod);
        if changes.len() == 500 {
            commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
        }
    }
    commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
    let mut serial = args.pods;
    let mut balance = 0i64;
    let mut last_compact = store.head_rv()?;
    while store.head_rv()? < args.events {
        for _ in 0..args.batch {
            member_rv += 1;
            let roll = rng.random_range(0..100);
            if (60..90).contains(&roll) && balance <= 0 || live.is_empty() {
                let mut pod = workload::churn_pod(&cluster, serial, true);
                serial += 1;
                pod["metadata"]["resourceVersion"] = member_rv.to_string().into();
                changes.push(Change::Upsert(ingest(&pods, CLUSTER, &serde_json::to_vec(&pod)?)?));
                live.push(pod);
                balance += 1;
            } else if (60..90).contains(&roll) {
                let i = rng.random_range(0..live.len());
                let mut pod = live.swap_remove(i);
                pod["metadata"]["resourceVersion"] = member_rv.to_string().into();
                changes.push(Change::Delete(ingest(&pods, CLUSTER, &serde_json::to_vec(&pod)?)?));
                balance -= 1;
            } else {
                let i = rng.random_range(0..live.len());
                let pod = &mut live[i];
                workload::touch_pod(pod, &mut rng, chrono::Utc::now());
                pod["metadata"]["resourceVersion"] = member_rv.to_string().into();
                changes.push(Change::Upsert(ingest(&pods, CLUSTER, &serde_json::to_vec(pod)?)?));
            }
        }
        commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
        let head = store.head_rv()?;
        if head - last_compact >= args.compact_every {
            last_compact = head;
            let floor = store.retention_floor(args.retain, u64::MAX, 0)?;
            store.compact(floor, &index)?;
            if args.snapshot {
                store.write_snapshot(&index)?;
            }
            eprintln!("events {head} after {:.0} s, data dir {:.1} MB", started.elapsed().as_secs_f64(), du(&args.data_dir) as f64 / 1e6);
        }
    }
    let floor = store.retention_floor(args.retain, u64::MAX, 0)?;
    store.compact(floor, &index)?;
    report(&store, &index, &args.data_dir, args.retain, started.elapsed().as_secs_f64())
}

fn fill(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let store = Store::open(&args.data_dir, &Options::default())?;
    let mut index = store.recover()?.index;
    let pods = pods_type();
    let cluster = Cluster::new(CLUSTER, 7, chrono::Utc::now());
    let mut member_rv = 1u64;
    let mut changes = Vec::new();
    for i in 0..args.pods {
        member_rv += 1;
        let json = workload::load_pod_json(&cluster, i, Some(member_rv));
        changes.push(Change::Upsert(ingest(&pods, CLUSTER, json.as_bytes())?));
        if changes.len() == 10_000 {
            commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
            if (i + 1) % 100_000 == 0 {
                eprintln!("{} pods after {:.0} s", i + 1, started.elapsed().as_secs_f64());
            }
        }
    }
    commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
    if args.snapshot {
        // What the aggregator's periodic snapshot would have written by now.
        store.write_snapshot(&index)?;
    }
    let mut rng = StdRng::seed_from_u64(5);
    let mut done = 0;
    while done < args.after {
        for _ in 0..args.batch {
            member_rv += 1;
            let i = rng.random_range(0..args.pods);
            let json = workload::load_pod_json(&cluster, i, Some(member_rv));
            changes.push(Change::Upsert(ingest(&pods, CLUSTER, json.as_bytes())?));
        }
        done += args.batch as u64;
        commit(&store, &mut index, std::mem::take(&mut changes), member_rv)?;
    }
    store.flush()?;
    println!("filled: head RV {} over {} objects in {:.1} s; data dir {:.1} MB", store.head_rv()?, index.total(), started.elapsed().as_secs_f64(), du(&args.data_dir) as f64 / 1e6);
    Ok(())
}

fn open(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let store = Store::open(&args.data_dir, &Options::default())?;
    let opened = started.elapsed().as_secs_f64();
    let recovered = store.recover()?;
    let total = started.elapsed().as_secs_f64();
    println!("open: sled open {opened:.2} s, recover {:.2} s ({}), total {total:.2} s; head RV {}, {} objects",
        total - opened, recovered.path, recovered.index.head_rv(), recovered.index.total());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    match args.command.as_str() {
        "fill" => fill(&args),
        "churn" => churn(&args),
        "open" => open(&args),
        other => bail!("unknown command {other}"),
    }
}
