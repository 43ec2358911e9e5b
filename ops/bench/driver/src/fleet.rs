//! `--fleet`: kubefold over many members of one simulator process (`kubefold
//! sim --clusters N`), the shape of Karmada's own scale test
//! (karmada-io/karmada#2518: 1,000 clusters, 2,000,000 pods). Measured: the
//! initial sync, RSS, the list of every pod against the loopback limit (the
//! same bytes served from memory), one cluster's pods, a 1% label selector,
//! gets at a fixed rate, gets while many members are restored at once (each
//! must be relisted), the watch fan-out under churn ([`crate::fleet_watch`])
//! and a warm restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use hyper::Method;
use serde_json::json;

use crate::http::{self, Client};
use crate::load::{self, Target};
use crate::phases::{ms_summary, timed_get};
use crate::procs::Proc;
use crate::report::{Figure, Report};
use crate::Ctx;

const MIB: f64 = 1024.0 * 1024.0;

/// The sizes of a fleet run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetPlan {
    /// Members.
    pub members: usize,
    /// Pods over all of them.
    pub pods: usize,
    /// Members restored at once in the reconnect phase.
    pub restored: usize,
    /// Timed repetitions of the list of every pod.
    pub list_reps: usize,
    /// Watch clients of the fan-out measure ([`crate::fleet_watch`]).
    pub watch_clients: usize,
    /// Events per second across the fleet during it.
    pub watch_events_per_sec: f64,
    /// kubefold speaks HTTP/1.1 to the members (`--fleet-http1`: the
    /// simulator's `NAME=URL` lines as they are) instead of HTTP/2 (each
    /// member with `h2c: true`), to measure one beside the other, or a
    /// kubefold that has no `h2c`.
    pub http1: bool,
}

impl FleetPlan {
    /// `--quick`: 20 members, 20,000 pods; 100 watch clients, 200 events/s.
    pub fn quick() -> FleetPlan {
        FleetPlan { members: 20, pods: 20_000, restored: 10, list_reps: 5, watch_clients: 100, watch_events_per_sec: 200.0, http1: false }
    }

    /// The full run: Karmada's 1,000 members, and as many pods as asked
    /// (`--fleet-pods`); 1,000 watch clients, 1,000 events/s.
    pub fn full() -> FleetPlan {
        FleetPlan { members: 1_000, pods: 2_000_000, restored: 100, list_reps: 3, watch_clients: 1_000, watch_events_per_sec: 1_000.0, http1: false }
    }
}

/// The member lines written by the simulator, once it wrote them all.
pub async fn wait_members(sim: &mut Proc, file: &Path, count: usize, timeout: Duration) -> Result<Vec<(String, SocketAddr)>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let members: Vec<(String, SocketAddr)> = text
                .lines()
                .filter_map(|l| {
                    let (name, url) = l.split_once('=')?;
                    Some((name.to_string(), url.strip_prefix("http://")?.parse().ok()?))
                })
                .collect();
            if members.len() == count {
                return Ok(members);
            }
        }
        if !sim.alive() {
            bail!("the simulator exited before listening; see {}", sim.log.display());
        }
        if Instant::now() > deadline {
            bail!("the simulator's {count} members did not listen within {timeout:?}; see {}", sim.log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kubefold serve` on a free port over `data_dir`, its members from
/// `members_file` (the simulator's `NAME=URL` lines).
pub(crate) fn serve_args(data_dir: &Path, members_file: &Path) -> Vec<String> {
    vec![
        "serve".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--clusters-file".into(),
        members_file.display().to_string(),
    ]
}

/// The members of `members_file` as a configuration file beside it, each
/// spoken to over HTTP/2 with prior knowledge (`h2c`), as the simulator
/// serves it.
fn h2c_config(members_file: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(members_file).with_context(|| format!("reading {}", members_file.display()))?;
    let mut config = String::from("clusters:\n");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, url) = line.split_once('=').with_context(|| format!("{}: not NAME=URL: {line:?}", members_file.display()))?;
        config.push_str(&format!("  - {{name: {name}, url: \"{url}\", h2c: true}}\n"));
    }
    let path = members_file.with_extension("h2c.yaml");
    std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn spawn_kubefold(ctx: &Ctx, tag: &str, data_dir: &Path, members_file: &Path) -> Result<Proc> {
    let fleet = ctx.plan.fleet.as_ref().context("a fleet plan")?;
    let args = if fleet.http1 {
        serve_args(data_dir, members_file)
    } else {
        let config = h2c_config(members_file)?.display().to_string();
        let mut args = serve_args(data_dir, members_file);
        let at = args.iter().position(|a| a == "--clusters-file").context("--clusters-file in the arguments")?;
        args.splice(at..at + 2, ["--config".to_string(), config]);
        args
    };
    Proc::spawn("kubefold", &ctx.kubefold, &args, &ctx.logs.join(format!("{tag}.log")))
}

/// Spawn to `/readyz` 200 with every pod in `/admin/v1/stats`: (seconds since spawn, seconds after listening).
pub async fn wait_synced(kubefold: &mut Proc, pods: usize, timeout: Duration) -> Result<(f64, f64)> {
    let addr = kubefold.wait_listening(Duration::from_secs(120))?;
    let listen_s = kubefold.spawned.elapsed().as_secs_f64();
    let mut client = Client::new(addr);
    let mut last = Instant::now();
    loop {
        if kubefold.spawned.elapsed() > timeout {
            bail!("kubefold not ready within {timeout:?}; see {}", kubefold.log.display());
        }
        if !kubefold.alive() {
            bail!("kubefold exited during the initial sync; see {}", kubefold.log.display());
        }
        if let Ok(Ok(stats)) = tokio::time::timeout(Duration::from_secs(10), client.get_json("/admin/v1/stats")).await {
            let objects = stats["objects"].as_u64().unwrap_or(0);
            if last.elapsed() > Duration::from_secs(5) {
                eprintln!("  {:.0} s: {objects} objects, head {}", kubefold.spawned.elapsed().as_secs_f64(), stats["headResourceVersion"]);
                last = Instant::now();
            }
            if objects >= pods as u64 && matches!(client.get_count("/readyz", None).await, Ok((200, _))) {
                let ready_s = kubefold.spawned.elapsed().as_secs_f64();
                return Ok((ready_s, ready_s - listen_s));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Relists of `names` so far, from the admin API's member statuses, asked
/// one member at a time: the list of every member is about 1.6 MB at 1,000
/// members, and asking for it five times a second took a fifth of a core
/// from the gets this phase measures.
async fn relists(client: &mut Client, names: &[String]) -> Result<u64> {
    let mut total = 0;
    for name in names {
        let item = client.get_json(&format!("/admin/v1/clusters/{name}")).await?;
        total += item["status"]["relists"].as_u64().unwrap_or(0);
    }
    Ok(total)
}

/// The fleet run: one simulator process of `plan.members` members, kubefold over them.
pub async fn run(ctx: &Ctx, report: &mut Report, plan: &FleetPlan) -> Result<()> {
    let n = plan.pods / plan.members * plan.members;
    let per = n / plan.members;
    let tag = format!("fleet{}x{per}", plan.members);
    let members_file = ctx.scratch.join("members");
    let started = Instant::now();
    let sim_args: Vec<String> = [
        "sim",
        "--clusters",
        &plan.members.to_string(),
        "--pods",
        &n.to_string(),
        "--workload",
        "empty",
        "--listen",
        "127.0.0.1:0",
        "--urls-file",
        &members_file.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut sim = Proc::spawn("members", &ctx.kubefold, &sim_args, &ctx.logs.join(format!("{tag}-members.log")))?;
    let members = wait_members(&mut sim, &members_file, plan.members, Duration::from_secs(300)).await?;
    let sim_s = started.elapsed().as_secs_f64();
    let (sim_rss, _) = sim.memory();
    eprintln!("  {} members with {per} pods each listening after {sim_s:.1} s, simulator RSS {:.0} MiB", plan.members, sim_rss as f64 / MIB);

    let data_dir = ctx.scratch.join(format!("data-{tag}"));
    let mut kubefold = spawn_kubefold(ctx, &format!("kubefold-{tag}"), &data_dir, &members_file)?;
    let sync_timeout = Duration::from_secs_f64((ctx.remaining() - 60.0).clamp(30.0, 900.0));
    let (ready_s, after_listen_s) = wait_synced(&mut kubefold, n, sync_timeout).await?;
    let addr = kubefold.addr();
    let (rss_sync, hwm_sync) = kubefold.memory();
    let threads = std::fs::read_to_string(format!("/proc/{}/status", kubefold.pid))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Threads:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0);
    eprintln!("  kubefold synced {n} pods of {} members in {ready_s:.1} s, RSS {:.0} MiB, {threads} threads", plan.members, rss_sync as f64 / MIB);
    // The size-bound targets (sync, RSS, list time) are the issue's at 1,000 members and 2M pods.
    let full_size = plan.members >= 1_000 && n >= 2_000_000;
    let at_full = |f: Figure, text: &str, met: bool| if full_size { f.target(text, met) } else { f.note_more(&format!("target at 1,000 x 2M: {text}")) };
    let mut figures = vec![
        at_full(
            Figure::new("fleet", &format!("{} members: spawn to /readyz", plan.members), Some(n), "s", ready_s)
                .note(format!("{after_listen_s:.1} s after listening; Karmada #2518: 78 s cache build at 1,000 x 2M on 6-12 cores")),
            "< 60 s",
            ready_s < 60.0,
        ),
        at_full(
            Figure::new("fleet", &format!("{} members: RSS after sync", plan.members), Some(n), "MiB", rss_sync as f64 / MIB)
                .reference("the simulator holding every member (compact pods)", sim_rss as f64 / MIB)
                .note(format!("high-water {:.0} MiB; {threads} threads; Karmada #2518: 140 GB", hwm_sync as f64 / MIB)),
            "< 2.5 GB",
            (rss_sync as f64) < 2.5e9,
        ),
    ];

    // The list of every pod, against the same bytes from memory.
    let mut client = Client::new(addr);
    let (status, body) = client.get_bytes("/api/v1/pods", None).await?;
    if status != 200 {
        bail!("kubefold list: HTTP {status}");
    }
    // Every pod carries one uid (load pods have no owner references).
    let items = memchr::memmem::find_iter(&body, b"\"uid\":\"").count();
    let list_bytes = body.len();
    let (limit_addr, limit_task) = http::serve_bytes(body).await?;
    let mut limit_client = Client::new(limit_addr);
    timed_get(&mut limit_client, "/", None).await?;
    let (mut kf_ms, mut limit_ms) = (Vec::new(), Vec::new());
    for _ in 0..plan.list_reps {
        kf_ms.push(timed_get(&mut client, "/api/v1/pods", None).await?.0);
        limit_ms.push(timed_get(&mut limit_client, "/", None).await?.0);
    }
    limit_task.abort();
    drop(limit_client);
    let (kf_list, limit_list) = (ms_summary(&kf_ms), ms_summary(&limit_ms));
    let ratio = kf_list.p50 / limit_list.p50.max(1e-9);
    let list = Figure::new("fleet", "list of every pod, JSON p50", Some(n), "ms", kf_list.p50)
        .reference("same bytes from memory (loopback limit)", limit_list.p50)
        .note(format!("{} reps, {:.0} MiB, {items} items; Karmada #2518: median 8.57 s", plan.list_reps, list_bytes as f64 / MIB));
    figures.push(if full_size {
        list.target("< 3 s and <= 1.5x limit", kf_list.p50 < 3000.0 && ratio <= 1.5)
    } else {
        list.target("<= 1.5x limit", ratio <= 1.5).note_more("target at 1,000 x 2M: also < 3 s")
    });

    // One cluster's pods: kubefold against that member directly.
    let (name, member_addr) = members[members.len() / 2].clone();
    let one_path = format!("/clusters/{name}/api/v1/pods");
    let mut member_client = Client::new(member_addr);
    timed_get(&mut client, &one_path, None).await?;
    timed_get(&mut member_client, "/api/v1/pods", None).await?;
    let (mut one_kf, mut one_member) = (Vec::new(), Vec::new());
    let mut one_bytes = 0;
    for _ in 0..15 {
        let (ms, bytes) = timed_get(&mut client, &one_path, None).await?;
        one_kf.push(ms);
        one_bytes = bytes;
        one_member.push(timed_get(&mut member_client, "/api/v1/pods", None).await?.0);
    }
    let (one_kf, one_member) = (ms_summary(&one_kf), ms_summary(&one_member));
    figures.push(
        Figure::new("fleet", "one cluster's pods p50", Some(n), "ms", one_kf.p50)
            .reference("that member directly", one_member.p50)
            .target("< 20 ms", one_kf.p50 < 20.0)
            .note(format!("{one_path}, 15 reps, {:.2} MiB ({per} pods)", one_bytes as f64 / MIB)),
    );

    // A 1% label selector over every member.
    let selector = "/api/v1/pods?labelSelector=shard%3Ds7";
    timed_get(&mut client, selector, None).await?;
    let mut sel = Vec::new();
    let mut sel_bytes = 0;
    for _ in 0..15 {
        let (ms, bytes) = timed_get(&mut client, selector, None).await?;
        sel.push(ms);
        sel_bytes = bytes;
    }
    // The reference: the members asked one after another, once (1,000 requests).
    let members_started = Instant::now();
    for (_, a) in &members {
        let mut c = Client::new(*a);
        timed_get(&mut c, selector, None).await?;
    }
    let members_sel_ms = members_started.elapsed().as_secs_f64() * 1e3;
    let sel = ms_summary(&sel);
    figures.push(
        Figure::new("fleet", "label selector shard=s7 (1%) p50", Some(n), "ms", sel.p50)
            .reference("the members one by one (new connection each)", members_sel_ms)
            .target("< 100 ms", sel.p50 < 100.0)
            .note(format!("15 reps, {:.2} MiB ({} pods expected)", sel_bytes as f64 / MIB, n / 100)),
    );

    // Gets at a fixed rate, by qualified name, over every member.
    let mut next = crate::stats::xorshift(0x2545_f491_4f6c_dd1du64);
    let targets: Arc<Vec<Target>> = Arc::new(
        (0..20_000)
            .map(|_| {
                let m = (next() % plan.members as u64) as usize;
                let i = (next() % per.max(1) as u64) as usize;
                Target { addr, path: format!("/api/v1/namespaces/load-{}/pods/load-{i}_{}", i % 10, members[m].0) }
            })
            .collect(),
    );
    let rate = ctx.plan.get_rate;
    let get_secs = Duration::from_secs_f64(ctx.plan.get_secs);
    let quiet = load::open_loop(targets.clone(), rate, get_secs, 32).await;
    let quiet_get = ms_summary(&quiet.latencies_ms);
    figures.push(
        Figure::new("fleet", &format!("get p99 at {rate:.0}/s"), Some(n), "ms", quiet_get.p99)
            .target("< 5 ms", quiet_get.p99 < 5.0 && quiet.errors == 0)
            .note(format!("p50 {:.2} ms; {} ok, {} errors", quiet_get.p50, quiet.ok, quiet.errors)),
    );

    // Many members restored at once (each must be relisted), gets going on.
    let restored: Vec<(String, SocketAddr)> = members.iter().step_by((members.len() / plan.restored.max(1)).max(1)).take(plan.restored).cloned().collect();
    let names: Vec<String> = restored.iter().map(|(n, _)| n.clone()).collect();
    let relists_before = relists(&mut client, &names).await?;
    let window = Duration::from_secs_f64(ctx.plan.get_secs.max(8.0));
    let gets = tokio::spawn(load::open_loop(targets.clone(), rate, window, 32));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let restore_started = Instant::now();
    let restores = restored.iter().map(|(_, a)| {
        let a = *a;
        async move {
            let mut c = Client::new(a);
            c.request(Method::POST, "/sim/restore", "application/json", bytes::Bytes::from_static(br#"{"resourceVersion":1}"#)).await.map(|(s, _)| s)
        }
    });
    let answers = futures_join_all(restores).await;
    let failed = answers.iter().filter(|a| !matches!(a, Ok(200))).count();
    // Every type of every restored member relisted (the member's watchers: 10 built-in types each by default).
    let types = {
        let one = client.get_json(&format!("/admin/v1/clusters/{}", names[0])).await?;
        one["status"]["resources"].as_object().map_or(1, |r| r.len().max(1)) as u64
    };
    let wanted = relists_before + types * names.len() as u64;
    let absorbed_s = loop {
        let now = relists(&mut client, &names).await?;
        if now >= wanted {
            break Some(restore_started.elapsed().as_secs_f64());
        }
        if restore_started.elapsed() > Duration::from_secs(180) {
            report.note(format!("restored members: {} of {} relists within 180 s", now - relists_before, wanted - relists_before));
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let during = gets.await.map_err(|e| anyhow!("get load: {e}"))?;
    let during_get = ms_summary(&during.latencies_ms);
    figures.push(
        Figure::new("fleet", &format!("get p99 at {rate:.0}/s while {} members are relisted", names.len()), Some(n), "ms", during_get.p99)
            .reference("get p99 at the same rate before", quiet_get.p99)
            .target("< 10 ms", during_get.p99 < 10.0 && during.errors == 0)
            .note(format!(
                "{} members restored at once ({failed} restores failed); every type relisted {}; {} ok, {} errors over {:.0} s",
                names.len(),
                absorbed_s.map_or("not within 180 s".to_string(), |s| format!("within {s:.1} s")),
                during.ok,
                during.errors,
                window.as_secs_f64()
            )),
    );

    // /metrics stays usable: its size and time.
    let t0 = Instant::now();
    let (_, metrics) = client.get_bytes("/metrics", None).await?;
    let metrics_ms = t0.elapsed().as_secs_f64() * 1e3;
    let metrics_lines = metrics.iter().filter(|b| **b == b'\n').count();

    // Watch fan-out with churn across the fleet.
    let fan_out = crate::fleet_watch::FanOut { clients: plan.watch_clients, events_per_sec: plan.watch_events_per_sec };
    if let Err(e) = crate::fleet_watch::run(ctx, report, &fan_out, &kubefold, &sim, &members).await {
        report.note(format!("fleet watch fan-out not measured: {e:#}"));
    }

    // Warm restart: SIGKILL, start again on the same data dir, time to the first list served.
    let before = client.get_json("/admin/v1/stats").await?;
    drop(client);
    kubefold.kill_hard();
    let mut again = spawn_kubefold(ctx, &format!("kubefold-{tag}-restart"), &data_dir, &members_file)?;
    let addr2 = again.wait_listening(Duration::from_secs(120))?;
    let first_list_s = loop {
        if again.spawned.elapsed() > Duration::from_secs(120) {
            bail!("no list served within 120 s of the restart");
        }
        if let Ok((200, body)) = http::get_once(addr2, "/api/v1/pods?limit=500", Duration::from_secs(10)).await {
            if memchr::memmem::find(&body, b"\"items\":[{").is_some() {
                break again.spawned.elapsed().as_secs_f64();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (rss_restart, _) = again.memory();
    figures.push(
        Figure::new("fleet", "warm restart: SIGKILL to first list served", Some(n), "s", first_list_s)
            .target("< 10 s", first_list_s < 10.0)
            .note(format!("RSS {:.0} MiB after it; {} objects before", rss_restart as f64 / MIB, before["objects"])),
    );
    again.stop(Duration::from_secs(20));
    sim.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&data_dir);

    report.raw(
        "fleet",
        json!({
            "members": plan.members, "pods": n, "podsPerMember": per,
            "memberProtocol": if plan.http1 { "HTTP/1.1" } else { "HTTP/2 (h2c)" },
            "simulatorListeningSeconds": sim_s, "simulatorRss": sim_rss,
            "readySeconds": ready_s, "afterListeningSeconds": after_listen_s,
            "rssSync": rss_sync, "hwmSync": hwm_sync, "threads": threads,
            "list": {"kubefold": kf_list, "limit": limit_list, "bytes": list_bytes, "items": items},
            "oneCluster": {"kubefold": one_kf, "member": one_member},
            "selector": {"kubefold": sel, "membersOnce": members_sel_ms},
            "get": {"quiet": quiet_get, "quietErrors": quiet.errors, "restoring": during_get, "restoringErrors": during.errors},
            "restored": names.len(), "absorbedSeconds": absorbed_s, "restoresFailed": failed,
            "metrics": {"ms": metrics_ms, "lines": metrics_lines},
            "restart": {"firstListSeconds": first_list_s, "rss": rss_restart},
        }),
    );
    figures.push(
        Figure::new("fleet", "/metrics at this size", Some(n), "lines", metrics_lines as f64)
            .note(format!("{metrics_ms:.1} ms; per-cluster series bounded to 100 members (metricsClusterSeries)")),
    );
    for f in figures {
        report.add(f);
    }
    Ok(())
}

/// Runs every future at once and collects their outputs in order.
async fn futures_join_all<F: std::future::Future + Send + 'static>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}
