//! `--etcd`: kubefold replicas on etcd, each figure beside its reference
//! in the same run. For each size, one simulator process of
//! [`EtcdPlan::members`] members (`kubefold sim --clusters`, empty
//! workload), then:
//!
//! - the sync on the embedded sled store (spawn to `/readyz` with every
//!   pod), then the same sync by one replica on a fresh etcd;
//! - the raw etcd reference: the replica's transactions (its keys grouped
//!   by the revision that wrote them) written to another fresh etcd by a
//!   plain client (`kubefold etcd-raw-load`, the same etcd client crate),
//!   one transaction after another, and with [`RAW_WRITERS`] writers;
//! - etcd's database bytes per object after the sync and after a
//!   compaction at the head and a defragmentation (beside the raw copy's);
//! - at the first size only: list p50, get p99 at a fixed rate and watch
//!   delivery latency (a marker patch on a member to each watch client)
//!   with every client on one replica, then spread over three;
//! - failover: SIGKILL of the replica owning a member, a patch on that
//!   member, time until a surviving replica serves it; with the default
//!   lease TTL (full run) and a short one.
//!
//! Every failed request, lost watch event or failed marker fails the run.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::Method;
use serde_json::{json, Value};

use crate::etcdproc::{bytes_per_object, delivery_latencies, DbStatus, Etcd};
use crate::fleet::{wait_members, wait_synced};
use crate::http::Client;
use crate::load::{self, LineKind, Target, WatchGroup};
use crate::phases::{ms_summary, timed_get};
use crate::procs::Proc;
use crate::report::{Figure, Report};
use crate::Ctx;

/// Writers of the concurrent raw load.
pub const RAW_WRITERS: usize = 8;

const MIB: f64 = 1024.0 * 1024.0;

/// The sizes of an `--etcd` run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EtcdPlan {
    /// Members of the simulator.
    pub members: usize,
    /// Pod counts, one step each (the replicas phase at the first).
    pub sizes: Vec<usize>,
    /// Concurrent list clients; timed lists each.
    pub list_clients: usize,
    /// Timed lists per client.
    pub list_reps: usize,
    /// Watch clients.
    pub watchers: usize,
    /// Seconds of marker writes in each watch case.
    pub watch_secs: f64,
    /// The short lease TTL of the second failover (seconds).
    pub short_ttl: u64,
    /// Whether the failover with the default TTL (15 s) runs too.
    pub default_ttl_failover: bool,
    /// Gets per second of the fixed-rate get runs (below the main suite's
    /// 1,000/s: here three replicas and etcd share the cores).
    pub get_rate: f64,
}

impl EtcdPlan {
    /// `--quick`: 6 members, 10k pods.
    pub fn quick() -> EtcdPlan {
        EtcdPlan { members: 6, sizes: vec![10_000], list_clients: 3, list_reps: 5, watchers: 60, watch_secs: 4.0, short_ttl: 3, default_ttl_failover: false, get_rate: 300.0 }
    }

    /// The full run: 10 members, 100k and 1M pods.
    pub fn full() -> EtcdPlan {
        EtcdPlan { members: 10, sizes: vec![100_000, 1_000_000], list_clients: 3, list_reps: 7, watchers: 300, watch_secs: 10.0, short_ttl: 3, default_ttl_failover: true, get_rate: 500.0 }
    }
}

/// The default lease TTL of a replica (seconds).
const DEFAULT_TTL: u64 = 15;

fn kubefold_args(data_dir: &Path, members_file: &Path, etcd: Option<(&Etcd, &str, Option<u64>)>) -> Vec<String> {
    let mut args = crate::fleet::serve_args(data_dir, members_file);
    if let Some((etcd, id, ttl)) = etcd {
        args.extend(["--etcd-servers".into(), etcd.url(), "--etcd-replica-id".into(), id.into()]);
        if let Some(ttl) = ttl {
            args.extend(["--etcd-lease-ttl".into(), ttl.to_string()]);
        }
    }
    args
}

/// One replica: its id, data dir and process.
struct Replica {
    id: String,
    data: std::path::PathBuf,
    proc: Proc,
}

fn spawn_replica(ctx: &Ctx, tag: &str, id: &str, etcd: &Etcd, members_file: &Path, ttl: Option<u64>) -> Result<Replica> {
    let data = ctx.scratch.join(format!("data-{tag}-{id}"));
    let proc = Proc::spawn(id, &ctx.kubefold, &kubefold_args(&data, members_file, Some((etcd, id, ttl))), &ctx.logs.join(format!("kubefold-{tag}-{id}.log")))?;
    Ok(Replica { id: id.into(), data, proc })
}

/// The `/admin/v1/replicas` items: (id, owned members).
async fn owners(addr: SocketAddr) -> Result<Vec<(String, Vec<String>)>> {
    let v = Client::new(addr).get_json("/admin/v1/replicas").await?;
    let items = v["items"].as_array().ok_or_else(|| anyhow!("no items in /admin/v1/replicas: {v}"))?;
    Ok(items
        .iter()
        .map(|i| {
            let owned = i["owned"].as_array().map(|o| o.iter().filter_map(|m| m.as_str().map(String::from)).collect()).unwrap_or_default();
            (i["id"].as_str().unwrap_or_default().to_string(), owned)
        })
        .collect())
}

/// Waits until `ids` are the live replicas and every member has one owner.
async fn wait_owned(addr: SocketAddr, ids: &[&str], members: usize, timeout: Duration) -> Result<Vec<(String, Vec<String>)>> {
    let started = Instant::now();
    loop {
        let now = owners(addr).await?;
        let live: Vec<&str> = now.iter().map(|(id, _)| id.as_str()).collect();
        let owned: usize = now.iter().map(|(_, o)| o.len()).sum();
        if ids.iter().all(|id| live.contains(id)) && live.len() == ids.len() && owned == members {
            return Ok(now);
        }
        if started.elapsed() > timeout {
            bail!("ownership did not settle within {timeout:?}: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `kubefold etcd-raw-load` from `from` into a fresh etcd with
/// `writers`; returns its JSON line and the target's status.
async fn raw_load(ctx: &Ctx, from: &Etcd, name: &str, writers: usize) -> Result<(Value, DbStatus)> {
    let to = Etcd::start(ctx, name).await?;
    let output = tokio::process::Command::new(&ctx.kubefold)
        .args(["etcd-raw-load", "--from", &from.url(), "--to", &to.url(), "--concurrency", &writers.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .context("kubefold etcd-raw-load")?;
    if !output.status.success() {
        bail!("kubefold etcd-raw-load failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).with_context(|| format!("the raw load's JSON line: {stdout:?}"))?;
    let status = to.status().await?;
    to.stop();
    Ok((line, status))
}

/// The `--etcd` run.
pub async fn run(ctx: &Ctx, report: &mut Report, plan: &EtcdPlan) -> Result<()> {
    for (step, &size) in plan.sizes.iter().enumerate() {
        if step > 0 && ctx.remaining() < 120.0 {
            report.note(format!("--etcd: {size} pods not run: {:.0} s left of the budget", ctx.remaining()));
            continue;
        }
        size_step(ctx, report, plan, size, step == 0).await?;
        report.write(&ctx.out.join("latest.json"))?;
    }
    Ok(())
}

async fn size_step(ctx: &Ctx, report: &mut Report, plan: &EtcdPlan, size: usize, replicas_phase: bool) -> Result<()> {
    let per = size / plan.members;
    let n = per * plan.members;
    let tag = format!("etcd{n}");
    let members_file = ctx.scratch.join(format!("members-{tag}"));
    let sim_args: Vec<String> = ["sim", "--clusters", &plan.members.to_string(), "--pods", &n.to_string(), "--workload", "empty", "--listen", "127.0.0.1:0", "--urls-file", &members_file.display().to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut sim = Proc::spawn("members", &ctx.kubefold, &sim_args, &ctx.logs.join(format!("{tag}-members.log")))?;
    let mut members = wait_members(&mut sim, &members_file, plan.members, Duration::from_secs(300)).await?;
    members.sort_by_key(|(name, _)| load::member_index(name.as_bytes()).unwrap_or(u64::MAX));
    if members.iter().enumerate().any(|(i, (name, _))| load::member_index(name.as_bytes()) != Some(i as u64)) {
        bail!("the simulator's members are not member1..member{}: {members:?}", plan.members);
    }
    let sync_timeout = || Duration::from_secs_f64((ctx.remaining() - 60.0).clamp(30.0, 1200.0));
    eprintln!("--etcd, {n} pods over {} members", plan.members);

    // The same sync on the embedded sled store.
    let sled_dir = ctx.scratch.join(format!("data-{tag}-sled"));
    let mut sled = Proc::spawn("kubefold-sled", &ctx.kubefold, &kubefold_args(&sled_dir, &members_file, None), &ctx.logs.join(format!("kubefold-{tag}-sled.log")))?;
    let (sled_s, _) = wait_synced(&mut sled, n, sync_timeout()).await?;
    let (sled_rss, _) = sled.memory();
    sled.stop(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&sled_dir);
    eprintln!("  sled: synced in {sled_s:.1} s");

    // One replica on a fresh etcd.
    let etcd = Etcd::start(ctx, &format!("{tag}-a")).await?;
    let mut a = spawn_replica(ctx, &tag, "r1", &etcd, &members_file, None)?;
    let (etcd_s, after_listen_s) = wait_synced(&mut a.proc, n, sync_timeout()).await?;
    let a_addr = a.proc.addr();
    let (a_rss, _) = a.proc.memory();
    let stats = Client::new(a_addr).get_json("/admin/v1/stats").await?;
    let objects = stats["objects"].as_u64().unwrap_or(0);
    let synced = etcd.status().await?;
    eprintln!("  etcd: synced in {etcd_s:.1} s, etcd revision {}, db {:.1} MiB", synced.revision, synced.db_size as f64 / MIB);
    report.add(
        Figure::new("etcd", "sync on etcd: spawn to /readyz", Some(n), "s", etcd_s)
            .reference("the same sync on sled", sled_s)
            .note(format!("{} members; {after_listen_s:.1} s after listening; RSS {:.0} MiB (sled {:.0} MiB); {} etcd revisions", plan.members, a_rss as f64 / MIB, sled_rss as f64 / MIB, synced.revision)),
    );

    // The raw reference: the same transactions by a plain client.
    let (raw, raw_status) = raw_load(ctx, &etcd, &format!("{tag}-raw"), 1).await?;
    let raw_s = raw["seconds"].as_f64().ok_or_else(|| anyhow!("no seconds in {raw}"))?;
    let records = raw["records"].as_u64().unwrap_or(0);
    let (raw_n, raw_n_status) = raw_load(ctx, &etcd, &format!("{tag}-raw{RAW_WRITERS}"), RAW_WRITERS).await?;
    let raw_n_s = raw_n["seconds"].as_f64().ok_or_else(|| anyhow!("no seconds in {raw_n}"))?;
    report.add(
        Figure::new("etcd", "ingest into etcd: kubefold's sync", Some(n), "s", etcd_s)
            .reference("raw etcd txns, same records, 1 writer", raw_s)
            .note(format!(
                "{records} records, {} transactions (largest {} ops, {:.2} MiB), {:.1} MiB of keys and values; kubefold {:.0} records/s spawn to ready, raw {:.0}/s; with {RAW_WRITERS} writers {raw_n_s:.2} s ({:.0}/s)",
                raw["transactions"],
                raw["largestTransactionOps"],
                raw["largestTransactionBytes"].as_f64().unwrap_or(0.0) / MIB,
                raw["bytes"].as_f64().unwrap_or(0.0) / MIB,
                records as f64 / etcd_s.max(1e-9),
                records as f64 / raw_s.max(1e-9),
                records as f64 / raw_n_s.max(1e-9),
            )),
    );

    // etcd's bytes per object, after the sync and after compaction + defragmentation.
    let compacted = etcd.compact_and_defragment().await?;
    let per_object = |s: &DbStatus| bytes_per_object(s.db_size, objects);
    match (per_object(&synced), per_object(&compacted), per_object(&raw_status)) {
        (Some(after_sync), Some(after_compaction), Some(raw_bytes)) => {
            report.add(
                Figure::new("etcd", "etcd db bytes per object after sync", Some(n), "B", after_sync)
                    .reference("the raw copy's db", raw_bytes)
                    .note(format!(
                        "{objects} objects; db {:.1} MiB ({:.1} MiB in use); raw copy {:.1} MiB ({:.1} MiB in use)",
                        synced.db_size as f64 / MIB,
                        synced.db_size_in_use as f64 / MIB,
                        raw_status.db_size as f64 / MIB,
                        raw_status.db_size_in_use as f64 / MIB
                    )),
            );
            report.add(
                Figure::new("etcd", "etcd db bytes per object, compacted+defragged", Some(n), "B", after_compaction)
                    .reference("after the sync", after_sync)
                    .note(format!("compacted at revision {}; db {:.1} MiB ({:.1} MiB in use)", compacted.revision, compacted.db_size as f64 / MIB, compacted.db_size_in_use as f64 / MIB)),
            );
        }
        _ => report.note(format!("--etcd: no objects counted at {n} pods: no bytes per object")),
    }
    report.raw(
        &tag,
        json!({
            "members": plan.members, "pods": n, "objects": objects,
            "sledSeconds": sled_s, "etcdSeconds": etcd_s, "etcdAfterListeningSeconds": after_listen_s,
            "rawLoad": raw, "rawLoadWriters": raw_n,
            "dbAfterSync": synced, "dbCompacted": compacted, "dbRaw": raw_status, "dbRawWriters": raw_n_status,
        }),
    );

    if replicas_phase {
        replicas(ctx, report, plan, &tag, &etcd, a, &members, &members_file, n).await?;
    } else {
        a.proc.stop(Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&a.data);
    }
    etcd.stop();
    sim.stop(Duration::from_secs(10));
    Ok(())
}

/// What one set of clients measured.
struct Served {
    list: crate::stats::Summary,
    get: crate::stats::Summary,
    get_ok: u64,
    watch: crate::stats::Summary,
    markers: usize,
    /// Why a watch client missed a marker (a lost event), if one did.
    lost: Option<String>,
}

/// list p50, get p99 at a rate and watch delivery with clients spread over `addrs`.
async fn measure(ctx: &Ctx, plan: &EtcdPlan, addrs: &[SocketAddr], members: &[(String, SocketAddr)], n: usize) -> Result<Served> {
    let per = n / members.len();
    // The same list by concurrent clients.
    let lists = (0..plan.list_clients).map(|c| {
        let addr = addrs[c % addrs.len()];
        let reps = plan.list_reps;
        tokio::spawn(async move {
            let mut client = Client::new(addr);
            timed_get(&mut client, "/api/v1/pods", None).await?;
            let mut ms = Vec::new();
            for _ in 0..reps {
                ms.push(timed_get(&mut client, "/api/v1/pods", None).await?.0);
            }
            Ok::<_, anyhow::Error>(ms)
        })
    });
    let mut list_ms = Vec::new();
    for task in lists.collect::<Vec<_>>() {
        list_ms.extend(task.await??);
    }

    // Gets at a fixed rate, by qualified name, spread over the replicas.
    let mut next = crate::stats::xorshift(0x9e37_79b9_7f4a_7c15u64);
    let targets: Arc<Vec<Target>> = Arc::new(
        (0..20_000)
            .map(|k| {
                let m = (next() % members.len() as u64) as usize;
                let i = (next() % per.max(1) as u64) as usize;
                Target { addr: addrs[k % addrs.len()], path: format!("/api/v1/namespaces/load-{}/pods/load-{i}_{}", i % 10, members[m].0) }
            })
            .collect(),
    );
    let gets = load::open_loop(targets, plan.get_rate, Duration::from_secs_f64(ctx.plan.get_secs), 16).await;
    if gets.errors > 0 {
        bail!("{} of {} gets failed", gets.errors, gets.errors + gets.ok);
    }

    // Watch clients from each replica's current resourceVersion; marker patches on the members.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let group = Arc::new(WatchGroup { base: Instant::now(), connected: AtomicUsize::new(0), stop: stop_rx.clone(), finders: load::Finders::new() });
    let mut rvs = Vec::new();
    for addr in addrs {
        let list = Client::new(*addr).get_json("/api/v1/pods?limit=1").await?;
        rvs.push(list["metadata"]["resourceVersion"].as_str().ok_or_else(|| anyhow!("no resourceVersion in a list"))?.to_string());
    }
    let clients: Vec<_> = (0..plan.watchers)
        .map(|c| {
            let k = c % addrs.len();
            tokio::spawn(load::watch_client(group.clone(), addrs[k], format!("/api/v1/pods?watch=true&resourceVersion={}", rvs[k]), LineKind::Kubefold))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while group.connected.load(Ordering::Relaxed) < plan.watchers {
        if Instant::now() > deadline {
            bail!("{} of {} watch clients connected within 30 s", group.connected.load(Ordering::Relaxed), plan.watchers);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (marker_stop_tx, marker_stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(load::marker_writes(members.iter().map(|(_, a)| *a).collect(), per, ctx.plan.marker_rate, group.base, marker_stop_rx));
    tokio::time::sleep(Duration::from_secs_f64(plan.watch_secs)).await;
    let _ = marker_stop_tx.send(true);
    let (markers, failed) = writer.await?;
    if failed > 0 {
        bail!("{failed} marker patches failed");
    }
    // Time for the last markers to arrive everywhere.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop_tx.send(true);
    let mut received = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        let log = client.await?;
        if log.status != 200 || log.errors > 0 || log.ended_early {
            bail!("watch client {c}: HTTP {}, {} ERROR events, ended early: {:?}", log.status, log.errors, log.end_reason);
        }
        received.push(log.received);
    }
    // A lost event is a failure of the run; the other figures are still measured.
    let (latencies, lost) = match delivery_latencies(&markers, &received) {
        Ok(latencies) => (latencies, None),
        Err((c, key)) => {
            let got: std::collections::HashSet<u64> = received[c].iter().map(|(k, _)| *k).collect();
            let missed = markers.iter().filter(|(k, _)| !got.contains(k)).count();
            let per_replica: Vec<String> = addrs
                .iter()
                .enumerate()
                .map(|(k, a)| {
                    let events: usize = received.iter().enumerate().filter(|(c, _)| c % addrs.len() == k).map(|(_, r)| r.len()).sum();
                    format!("{a}: {events} events to {} clients", received.iter().enumerate().filter(|(c, _)| c % addrs.len() == k).count())
                })
                .collect();
            (Vec::new(), Some(format!("watch client {c} (on {}) never received marker event {key:#x}: it missed {missed} of {} markers; received {}", addrs[c % addrs.len()], markers.len(), per_replica.join(", "))))
        }
    };
    Ok(Served { list: ms_summary(&list_ms), get: ms_summary(&gets.latencies_ms), get_ok: gets.ok, watch: ms_summary(&latencies), markers: markers.len(), lost })
}

/// One replica against three, then failover.
#[allow(clippy::too_many_arguments)]
async fn replicas(ctx: &Ctx, report: &mut Report, plan: &EtcdPlan, tag: &str, etcd: &Etcd, a: Replica, members: &[(String, SocketAddr)], members_file: &Path, n: usize) -> Result<()> {
    let one = measure(ctx, plan, &[a.proc.addr()], members, n).await?;
    eprintln!("  one replica: list p50 {:.1} ms, get p99 {:.2} ms, watch p50 {:.1} ms", one.list.p50, one.get.p99, one.watch.p50);
    let mut b = spawn_replica(ctx, tag, "r2", etcd, members_file, None)?;
    let mut c = spawn_replica(ctx, tag, "r3", etcd, members_file, None)?;
    let (b_s, _) = wait_synced(&mut b.proc, n, Duration::from_secs(600)).await?;
    let (c_s, _) = wait_synced(&mut c.proc, n, Duration::from_secs(600)).await?;
    let mut set = vec![a, b, c];
    wait_owned(set[0].proc.addr(), &["r1", "r2", "r3"], members.len(), Duration::from_secs(120)).await?;
    let addrs: Vec<SocketAddr> = set.iter().map(|r| r.proc.addr()).collect();
    let three = measure(ctx, plan, &addrs, members, n).await?;
    let clients = format!("{} list clients x {} lists, {} watchers, {} markers", plan.list_clients, plan.list_reps, plan.watchers, three.markers);
    report.add(
        Figure::new("etcd", "list of every pod p50, 3 replicas", Some(n), "ms", three.list.p50)
            .reference("the same clients on 1 replica", one.list.p50)
            .note(format!("{clients}; p99 {:.0} ms vs {:.0} ms", three.list.p99, one.list.p99)),
    );
    report.add(
        Figure::new("etcd", &format!("get p99 at {:.0}/s, 3 replicas", plan.get_rate), Some(n), "ms", three.get.p99)
            .reference("the same gets on 1 replica", one.get.p99)
            .note(format!("p50 {:.2} ms vs {:.2} ms; {} and {} gets, none failed", three.get.p50, one.get.p50, three.get_ok, one.get_ok)),
    );
    for (case, served) in [("1 replica", &one), ("3 replicas", &three)] {
        if let Some(lost) = &served.lost {
            report.failures += 1;
            report.note(format!("--etcd, {case}: events lost, no watch figure: {lost}"));
        }
    }
    if one.lost.is_none() && three.lost.is_none() {
        report.add(
            Figure::new("etcd", "watch delivery p99 (member to client), 3 replicas", Some(n), "ms", three.watch.p99)
                .reference("the same watchers on 1 replica", one.watch.p99)
                .note(format!("p50 {:.1} ms vs {:.1} ms; {} and {} deliveries, none lost", three.watch.p50, one.watch.p50, three.watch.n, one.watch.n)),
        );
    }
    report.note(format!("--etcd: replicas 2 and 3 caught up from etcd in {b_s:.1} s and {c_s:.1} s (spawn to /readyz with every pod)"));

    // Failover: with the default TTL (full run), then a short one.
    let mut failovers = Vec::new();
    if plan.default_ttl_failover {
        failovers.push(failover(ctx, &mut set, members, None, tag, etcd, members_file).await?);
    }
    failovers.push(failover(ctx, &mut set, members, Some(plan.short_ttl), tag, etcd, members_file).await?);
    for (ttl, seconds, member, victim) in &failovers {
        report.add(
            Figure::new("etcd", &format!("failover, lease TTL {ttl} s: SIGKILL to change served"), Some(n), "s", *seconds)
                .reference("the lease TTL", *ttl as f64)
                .note(format!("{victim} killed, owner of {member}; a patch on {member} read back from a surviving replica")),
        );
    }
    report.raw(&format!("{tag}-replicas"), json!({"failovers": failovers}));
    for mut r in set {
        r.proc.stop(Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&r.data);
    }
    Ok(())
}

/// Kills the owner of a member and times until a survivor serves a change
/// made on that member: (TTL, seconds, member, victim). With `ttl`, the
/// victim is first restarted with that lease TTL and waits to own members
/// again.
async fn failover(ctx: &Ctx, set: &mut [Replica], members: &[(String, SocketAddr)], ttl: Option<u64>, tag: &str, etcd: &Etcd, members_file: &Path) -> Result<(u64, f64, String, String)> {
    // The victim: the first replica that is running and owns a member.
    let alive: Vec<usize> = (0..set.len()).filter(|&i| set[i].proc.alive()).collect();
    let probe = set[alive[0]].proc.addr();
    let owned = owners(probe).await?;
    let (victim_id, member) = owned.iter().find_map(|(id, o)| Some((id.clone(), o.first()?.clone()))).ok_or_else(|| anyhow!("no replica owns a member: {owned:?}"))?;
    let v = set.iter().position(|r| r.id == victim_id).ok_or_else(|| anyhow!("unknown replica {victim_id}"))?;
    if let Some(ttl) = ttl {
        // Restart the victim with the short TTL (SIGTERM revokes its lease:
        // its members move at once); it takes its members back.
        set[v].proc.stop(Duration::from_secs(20));
        let dead = set[v].id.clone();
        let others: Vec<usize> = (0..set.len()).filter(|&i| i != v && set[i].proc.alive()).collect();
        let probe = set[others.first().copied().ok_or_else(|| anyhow!("no other replica runs"))?].proc.addr();
        let ids: Vec<String> = others.iter().map(|&i| set[i].id.clone()).collect();
        let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        wait_owned(probe, &ids, members.len(), Duration::from_secs(60)).await?;
        let data = set[v].data.clone();
        set[v].proc = Proc::spawn(&dead, &ctx.kubefold, &kubefold_args(&data, members_file, Some((etcd, &dead, Some(ttl)))), &ctx.logs.join(format!("kubefold-{tag}-{dead}-ttl{ttl}.log")))?;
        set[v].proc.wait_listening(Duration::from_secs(120))?;
        ids.push(&dead);
        // Until the others have handed it its members back.
        let back = Instant::now();
        loop {
            let settled = wait_owned(probe, &ids, members.len(), Duration::from_secs(120)).await?;
            if settled.iter().any(|(id, o)| *id == dead && !o.is_empty()) {
                break;
            }
            if back.elapsed() > Duration::from_secs(90) {
                bail!("the restarted replica {dead} owns no member after 90 s: {settled:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let victim = set[v].id.clone();
    let owned = owners(probe_of(set, v)?).await?;
    let member = owned.iter().find(|(id, _)| *id == victim).and_then(|(_, o)| o.first().cloned()).unwrap_or(member);
    let survivor = probe_of(set, v)?;
    let member_addr = members.iter().find(|(name, _)| *name == member).map(|(_, a)| *a).ok_or_else(|| anyhow!("unknown member {member}"))?;
    let value = format!("failover-ttl{}-{}", ttl.unwrap_or(DEFAULT_TTL), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    let killed = Instant::now();
    set[v].proc.kill_hard();
    let mut member_client = Client::new(member_addr);
    let body = format!(r#"{{"metadata":{{"annotations":{{"bench.kubefold.io/failover":"{value}"}}}}}}"#);
    let (status, reply) = member_client.request(Method::PATCH, "/api/v1/namespaces/load-0/pods/load-0", "application/merge-patch+json", Bytes::from(body)).await?;
    if status != 200 {
        bail!("the patch on {member}: HTTP {status}: {}", String::from_utf8_lossy(&reply[..reply.len().min(200)]));
    }
    let path = format!("/api/v1/namespaces/load-0/pods/load-0_{member}");
    let mut client = Client::new(survivor);
    let limit = Duration::from_secs(ttl.unwrap_or(DEFAULT_TTL) + 60);
    let seconds = loop {
        let got = tokio::time::timeout(Duration::from_secs(10), client.get_json(&path)).await.map_err(|_| anyhow!("GET {path}: no answer within 10 s"))??;
        if got["metadata"]["annotations"]["bench.kubefold.io/failover"] == value {
            break killed.elapsed().as_secs_f64();
        }
        if killed.elapsed() > limit {
            bail!("the change on {member} not served within {limit:?} of the SIGKILL of {victim}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("  failover (TTL {} s): {seconds:.2} s", ttl.unwrap_or(DEFAULT_TTL));
    Ok((ttl.unwrap_or(DEFAULT_TTL), seconds, member, victim))
}

/// The address of a running replica other than `v`.
fn probe_of(set: &mut [Replica], v: usize) -> Result<SocketAddr> {
    (0..set.len()).filter(|&i| i != v).find(|&i| set[i].proc.alive()).map(|i| set[i].proc.addr()).ok_or_else(|| anyhow!("no other replica runs"))
}
