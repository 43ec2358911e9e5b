//! The watch phase: a small churning fleet, 1,000 watch clients on
//! kubefold (all pods, then each client its own namespace) and the same
//! clients on the members directly, each event's latency from the member's
//! own watch stream and from the driver's marker writes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use crate::http;
use crate::load::{self, LineKind, WatchGroup, WatchLog};
use crate::phases::*;
use crate::procs::{self, Proc};
use crate::report::{Figure, Report};
use crate::stats::{summary, Summary};
use crate::Ctx;

/// A list's resourceVersion.
pub(crate) async fn list_rv(addr: SocketAddr, path: &str) -> Result<u64> {
    let (status, body) = http::get_once(addr, path, Duration::from_secs(30)).await?;
    if status != 200 {
        bail!("GET {path}: HTTP {status}");
    }
    let v: Value = serde_json::from_slice(&body)?;
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).ok_or_else(|| anyhow!("no resourceVersion in {path}"))
}

/// One watch case's clients.
pub(crate) struct WatchCase {
    name: String,
    /// What each client saw.
    pub(crate) logs: Vec<WatchLog>,
    /// Member each client watched directly, when not kubefold.
    member_of: Vec<Option<u64>>,
    /// The measured window (ns from `base`).
    pub(crate) window: (u64, u64),
    /// kubefold's CPU over the window (cores).
    pub(crate) kubefold_cpu: f64,
    /// The driver's CPU over the window (cores).
    pub(crate) driver_cpu: f64,
    members_cpu: f64,
    connect_s: f64,
    /// Lateness of a 10 ms timer in the driver during the window (ms): how
    /// long the driver's runtime, or the machine, kept a ready task waiting.
    driver_lag: Summary,
    /// The machine's idle, iowait and steal seconds per second of window
    /// (both cores: 2.0 is all of them).
    machine: (f64, f64, f64),
    /// Every 100 ms from before the clients connect to the window's end:
    /// see [`TIMELINE_COLUMNS`] (the first column from `base` here).
    timeline: Vec<[f64; 8]>,
    /// Messages (writes) kubefold handed its watch clients over the
    /// window, and the lines in them (`kubefold_watch_messages_total`,
    /// `kubefold_watch_lines_total`).
    pub(crate) writes: Option<(f64, f64)>,
}

/// kubefold's counts of watch messages and lines so far, from `/metrics`.
async fn watch_write_counts(kubefold: &Proc) -> Option<(f64, f64)> {
    let (status, page) = crate::http::get_once(kubefold.addr?, "/metrics", Duration::from_secs(5)).await.ok()?;
    if status != 200 {
        return None;
    }
    let page = String::from_utf8_lossy(&page);
    let value = |series: &str| page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<f64>().ok());
    Some((value("kubefold_watch_messages_total")?, value("kubefold_watch_lines_total")?))
}

/// What the watch window's timeline samples: a stall shows in the second
/// it happened, beside what kubefold and the machine were doing.
const TIMELINE_COLUMNS: [&str; 8] = [
    "ms into the window (negative: clients connecting and settling)",
    "kubefold RSS MiB",
    "kubefold minor faults",
    "kubefold major faults",
    "kubefold CPU s",
    "memory pressure some ms",
    "io pressure full ms",
    "cpu pressure some ms",
];

/// Connects `clients` (address, path, what their lines are), lets them
/// settle, and measures a window of `ctx.plan.watch_secs`: what each
/// client received, and kubefold's, the driver's and `sims`' CPU.
pub(crate) async fn run_watch_case(
    ctx: &Ctx,
    name: &str,
    base: Instant,
    clients: Vec<(SocketAddr, String, LineKind)>,
    kubefold: &Proc,
    sims: &[Proc],
) -> Result<WatchCase> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let group = Arc::new(WatchGroup { base, connected: Default::default(), stop: stop_rx, finders: load::Finders::new() });
    let count = clients.len();
    let member_of = clients.iter().map(|(_, _, k)| match k { LineKind::Member { cluster } => Some(*cluster), LineKind::Kubefold => None }).collect();
    // From before the clients connect: a stall that starts with them shows.
    let kubefold_pid = kubefold.pid;
    let (timeline_stop_tx, mut timeline_stop) = tokio::sync::watch::channel(false);
    let timeline = tokio::spawn(async move {
        let mut rows = Vec::new();
        loop {
            let (rss, minflt, majflt, cpu) = procs::sample(kubefold_pid);
            let [memory_some, _, io_full, cpu_some] = procs::pressure();
            let ms = |us: u64| us as f64 / 1e3;
            rows.push([
                base.elapsed().as_secs_f64() * 1e3,
                rss as f64 / MIB,
                minflt as f64,
                majflt as f64,
                cpu,
                ms(memory_some),
                ms(io_full),
                ms(cpu_some),
            ]);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = timeline_stop.changed() => return rows,
            }
        }
    });
    let connect_started = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for (addr, path, kind) in clients {
        tasks.push(tokio::spawn(load::watch_client(group.clone(), addr, path, kind)));
    }
    while group.connected.load(Ordering::Relaxed) < count && connect_started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let connect_s = connect_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(ctx.plan.watch_settle_secs)).await;
    let cpu = || (kubefold.cpu_seconds(), procs::cpu_seconds(std::process::id()), sims.iter().map(Proc::cpu_seconds).sum::<f64>());
    let (k0, d0, m0) = cpu();
    let machine0 = procs::machine_cpu_seconds();
    let (lag_stop_tx, mut lag_stop) = tokio::sync::watch::channel(false);
    let lag = tokio::spawn(async move {
        let mut lags = Vec::new();
        loop {
            let t = Instant::now();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => lags.push((t.elapsed().as_secs_f64() * 1e3 - 10.0).max(0.0)),
                _ = lag_stop.changed() => return lags,
            }
        }
    });
    let writes0 = watch_write_counts(kubefold).await;
    let t_start = base.elapsed().as_nanos() as u64;
    let pause = ctx.plan.watch_pause_ms / 1e3;
    if pause > 0.0 && name == "all pods" {
        let half = ctx.plan.watch_secs / 2.0;
        tokio::time::sleep(Duration::from_secs_f64(half)).await;
        let mut pids: Vec<u32> = Vec::new();
        let of = ctx.plan.watch_pause_of.as_str();
        if matches!(of, "kubefold" | "all") {
            pids.push(kubefold.pid);
        }
        if matches!(of, "members" | "all") {
            pids.extend(sims.iter().map(|s| s.pid));
        }
        if matches!(of, "driver" | "all") {
            pids.push(std::process::id());
        }
        let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        // A shell stops and continues them, so that the driver can stop itself.
        let child = std::process::Command::new("sh").arg("-c").arg(format!("kill -STOP {list}; sleep {pause}; kill -CONT {list}")).spawn();
        tokio::time::sleep(Duration::from_secs_f64(pause)).await;
        if let Ok(mut c) = child {
            let _ = c.wait();
        }
        eprintln!("  {of} stopped for {:.0} ms at {half:.1} s into the window", pause * 1e3);
        tokio::time::sleep(Duration::from_secs_f64((ctx.plan.watch_secs - half - pause).max(0.0))).await;
    } else {
        tokio::time::sleep(Duration::from_secs_f64(ctx.plan.watch_secs)).await;
    }
    let t_end = base.elapsed().as_nanos() as u64;
    let writes1 = watch_write_counts(kubefold).await;
    let (k1, d1, m1) = cpu();
    let machine1 = procs::machine_cpu_seconds();
    let _ = lag_stop_tx.send(true);
    let _ = timeline_stop_tx.send(true);
    let driver_lag = summary(lag.await.unwrap_or_default());
    let timeline = timeline.await.unwrap_or_default();
    // Let events of the window's last moments arrive before stopping.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let _ = stop_tx.send(true);
    let mut logs = Vec::with_capacity(count);
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(10), t).await {
            Ok(Ok(log)) => logs.push(log),
            _ => logs.push(WatchLog { ended_early: true, end_reason: Some("client task did not stop".into()), ..Default::default() }),
        }
    }
    let secs = (t_end - t_start) as f64 / 1e9;
    let machine = ((machine1.0 - machine0.0) / secs, (machine1.1 - machine0.1) / secs, (machine1.2 - machine0.2) / secs);
    eprintln!(
        "  watch case {name}: {count} clients connected in {connect_s:.1} s; CPU kubefold {:.0}%, driver {:.0}%, members {:.0}%; machine idle {:.0}%, iowait {:.0}%, steal {:.0}%; driver timer late p99 {:.1} ms, max {:.1} ms",
        (k1 - k0) / secs * 100.0,
        (d1 - d0) / secs * 100.0,
        (m1 - m0) / secs * 100.0,
        machine.0 * 100.0,
        machine.1 * 100.0,
        machine.2 * 100.0,
        driver_lag.p99,
        driver_lag.max
    );
    Ok(WatchCase {
        name: name.into(),
        logs,
        member_of,
        window: (t_start, t_end),
        kubefold_cpu: (k1 - k0) / secs,
        driver_cpu: (d1 - d0) / secs,
        members_cpu: (m1 - m0) / secs,
        connect_s,
        driver_lag,
        machine,
        timeline,
        writes: writes0.zip(writes1).map(|((m0, l0), (m1, l1))| (m1 - m0, l1 - l0)).filter(|(m, _)| *m > 0.0),
    })
}

/// The timeline's samples with times from the window's start (`t0`, ns
/// from `base`) and counters as increases since the first, rounded for
/// the report.
fn timeline_rows(rows: &[[f64; 8]], t0: u64) -> Vec<Vec<f64>> {
    let Some(first) = rows.first() else { return Vec::new() };
    rows.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, v)| {
                    let v = match i {
                        0 => v - t0 as f64 / 1e6,
                        1 => *v,
                        _ => v - first[i],
                    };
                    (v * 10.0).round() / 10.0
                })
                .collect()
        })
        .collect()
}

/// What the timeline adds up to over the window (`t0`..`t1`, ns from
/// `base`): kubefold's highest RSS, its page faults, and the machine's
/// pressure stalls.
fn window_totals(rows: &[[f64; 8]], t0: u64, t1: u64) -> Value {
    let in_window: Vec<&[f64; 8]> = rows.iter().filter(|r| r[0] >= t0 as f64 / 1e6 - 100.0 && r[0] <= t1 as f64 / 1e6 + 100.0).collect();
    let rows = in_window;
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else { return Value::Null };
    let rss_max = rows.iter().map(|r| r[1]).fold(0.0, f64::max);
    json!({
        "rssMaxMiB": rss_max, "rssFirstMiB": first[1], "minorFaults": last[2] - first[2], "majorFaults": last[3] - first[3],
        "memoryPressureSomeMs": last[5] - first[5], "ioPressureFullMs": last[6] - first[6], "cpuPressureSomeMs": last[7] - first[7],
    })
}

/// Watch fan-out on a churning fleet.
pub async fn watch_phase(ctx: &Ctx, report: &mut Report) -> Result<()> {
    let plan = &ctx.plan;
    if ctx.remaining() < 20.0 + 3.0 * (plan.watch_secs + 8.0) {
        report.note(format!("watch phase skipped: {:.0} s left in the budget", ctx.remaining()));
        return Ok(());
    }
    let members = plan.sims;
    let per = plan.watch_pods_per_sim;
    let churn_each = plan.churn_per_sec / members as f64;
    let sims = spawn_sims(ctx, "watch", members, per, churn_each)?;
    let member_addrs: Vec<SocketAddr> = sims.iter().map(Proc::addr).collect();
    let data_dir = ctx.scratch.join("data-watch");
    let mut kubefold = spawn_kubefold(ctx, "kubefold-watch", &data_dir, &member_addrs)?;
    let pods = members * per;
    wait_synced(&mut kubefold, pods * 9 / 10, Duration::from_secs(120)).await?;
    let addr = kubefold.addr();
    let base = Instant::now();

    // Probes: one watch per member, in the driver: the time each event leaves the member.
    let (probe_stop_tx, probe_stop_rx) = tokio::sync::watch::channel(false);
    let probe_group = Arc::new(WatchGroup { base, connected: Default::default(), stop: probe_stop_rx.clone(), finders: load::Finders::new() });
    let mut member_rvs = Vec::new();
    let mut probes = Vec::new();
    for (k, a) in member_addrs.iter().enumerate() {
        let rv = list_rv(*a, "/api/v1/pods?limit=1").await?;
        member_rvs.push(rv);
        probes.push(tokio::spawn(load::watch_client(
            probe_group.clone(),
            *a,
            format!("/api/v1/pods?watch=1&resourceVersion={rv}"),
            LineKind::Member { cluster: k as u64 },
        )));
    }
    let markers = tokio::spawn(load::marker_writes(member_addrs.clone(), per, plan.marker_rate, base, probe_stop_rx.clone()));

    let w = plan.watchers;
    let mut cases = Vec::new();
    let head = list_rv(addr, "/api/v1/pods?limit=1").await?;
    let all: Vec<_> = (0..w).map(|_| (addr, format!("/api/v1/pods?watch=1&resourceVersion={head}"), LineKind::Kubefold)).collect();
    cases.push(run_watch_case(ctx, "all pods", base, all, &kubefold, &sims).await?);
    let head = list_rv(addr, "/api/v1/pods?limit=1").await?;
    let own: Vec<_> = (0..w)
        .map(|i| (addr, format!("/api/v1/namespaces/load-{}/pods?watch=1&resourceVersion={head}", i % 10), LineKind::Kubefold))
        .collect();
    cases.push(run_watch_case(ctx, "own namespace", base, own, &kubefold, &sims).await?);
    let mut direct = Vec::new();
    for i in 0..w {
        let k = i % members;
        let rv = list_rv(member_addrs[k], "/api/v1/pods?limit=1").await?;
        direct.push((member_addrs[k], format!("/api/v1/pods?watch=1&resourceVersion={rv}"), LineKind::Member { cluster: k as u64 }));
    }
    cases.push(run_watch_case(ctx, "members directly", base, direct, &kubefold, &sims).await?);

    let _ = probe_stop_tx.send(true);
    let (marks, mark_failures) = markers.await.unwrap_or_default();
    let mut probe_logs = Vec::new();
    for p in probes {
        if let Ok(l) = p.await {
            probe_logs.push(l);
        }
    }
    kubefold.stop(Duration::from_secs(10));
    drop(sims);
    let _ = std::fs::remove_dir_all(&data_dir);

    // When each event left its member (first receipt by the probe), and when each marker was written.
    let mut left_member: HashMap<u64, u64> = HashMap::new();
    for l in &probe_logs {
        for &(key, t) in &l.received {
            left_member.entry(key).or_insert(t);
        }
        if l.ended_early {
            report.note(format!("a member probe watch ended early: {:?}", l.end_reason));
        }
    }
    let namespace_of: HashMap<u64, u8> = probe_logs.iter().flat_map(|l| l.namespaces.iter().copied()).collect();
    let written: HashMap<u64, u64> = marks.iter().copied().collect();
    let mut write_to_probe = Vec::new();
    for (key, t_sent) in &written {
        if let Some(t) = left_member.get(key) {
            write_to_probe.push((*t as f64 - *t_sent as f64) / 1e6);
        }
    }
    let write_to_probe = summary(write_to_probe);
    let mut raw_cases = Vec::new();
    let mut summaries: HashMap<String, (Summary, Summary, usize, u64, u64)> = HashMap::new();
    let mut throughput: HashMap<String, (f64, f64)> = HashMap::new();
    for case in &cases {
        let (t0, t1) = case.window;
        let in_window = |t: u64| t >= t0 && t < t1;
        let events_in_window: Vec<u64> = left_member.iter().filter(|(_, t)| in_window(**t)).map(|(k, _)| *k).collect();
        let per_member: HashMap<u64, usize> = events_in_window.iter().fold(HashMap::new(), |mut m, k| {
            *m.entry(k >> 48).or_default() += 1;
            m
        });
        let per_namespace: HashMap<u8, usize> = events_in_window.iter().filter_map(|k| namespace_of.get(k)).fold(HashMap::new(), |mut m, ns| {
            *m.entry(*ns).or_default() += 1;
            m
        });
        let mut latencies = Vec::new();
        // The latest delivery of the events that left their member in each
        // second of the window: one stall shows as one bad second.
        let mut worst_by_second = vec![0.0f64; ((t1 - t0) as f64 / 1e9).ceil() as usize];
        let mut marker_latencies = Vec::new();
        let mut delivered = 0u64;
        let mut expected = 0u64;
        for (i, log) in case.logs.iter().enumerate() {
            let mut seen = 0u64;
            for &(key, t) in &log.received {
                let Some(&t_left) = left_member.get(&key) else { continue };
                if !in_window(t_left) {
                    continue;
                }
                seen += 1;
                let ms = (t as f64 - t_left as f64) / 1e6;
                let second = ((t_left - t0) / 1_000_000_000) as usize;
                if let Some(worst) = worst_by_second.get_mut(second) {
                    *worst = f64::max(*worst, ms);
                }
                latencies.push(ms);
                if let Some(&t_sent) = written.get(&key) {
                    marker_latencies.push((t as f64 - t_sent as f64) / 1e6);
                }
            }
            delivered += seen;
            expected += match (case.name.as_str(), case.member_of[i]) {
                ("all pods", _) => events_in_window.len() as u64,
                ("own namespace", _) => per_namespace.get(&((i % 10) as u8)).copied().unwrap_or(0) as u64,
                (_, Some(m)) => per_member.get(&m).copied().unwrap_or(0) as u64,
                _ => 0,
            };
        }
        let dropped = case.logs.iter().filter(|l| l.ended_early || l.errors > 0 || l.status != 200).count();
        // Deliveries that had not arrived when the clients stopped (2 s after
        // the window) count as infinitely late, so percentiles do not flatter.
        let missing = expected.saturating_sub(delivered);
        latencies.extend(std::iter::repeat_n(f64::INFINITY, missing as usize));
        let lat = summary(latencies);
        let marker = summary(marker_latencies);
        let bytes: u64 = case.logs.iter().map(|l| l.bytes).sum();
        let window_s = (t1 - t0) as f64 / 1e9;
        // Event lines the clients received per second (window + drain), against what they needed.
        let lines: u64 = case.logs.iter().map(|l| l.lines).sum();
        let lines_per_s = lines as f64 / (window_s + 3.0);
        let needed_per_s = expected as f64 / window_s;
        eprintln!(
            "  {}: {} deliveries ({} expected), p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; {} dropped; {:.0} MiB/s to clients",
            case.name,
            delivered,
            expected,
            lat.p50,
            lat.p99,
            lat.max,
            dropped,
            bytes as f64 / MIB / (window_s + 3.0)
        );
        let reasons: Vec<String> = case.logs.iter().filter_map(|l| l.end_reason.clone()).take(5).collect();
        raw_cases.push(json!({
            "case": case.name, "clients": case.logs.len(), "connectSeconds": case.connect_s, "windowSeconds": window_s,
            "eventsInWindow": events_in_window.len(), "eventsPerSecond": events_in_window.len() as f64 / window_s,
            "deliveries": delivered, "expectedDeliveries": expected, "latencyFromMemberWatch": lat, "latencyFromWrite": marker,
            "dropped": dropped, "endReasons": reasons, "bytesToClients": bytes,
            "linesPerSecond": lines_per_s, "neededPerSecond": needed_per_s,
            "cpu": {"kubefold": case.kubefold_cpu, "driver": case.driver_cpu, "members": case.members_cpu},
            "driverTimerLateMs": case.driver_lag,
            "machine": {"idle": case.machine.0, "iowait": case.machine.1, "steal": case.machine.2},
            "worstBySecond": worst_by_second,
            "timeline": {"columns": TIMELINE_COLUMNS, "rows": timeline_rows(&case.timeline, t0)},
            "kubefoldDuringWindow": window_totals(&case.timeline, t0, t1),
            "kubefoldWatchWrites": case.writes.map(|(m, l)| json!({"messages": m, "lines": l, "linesPerMessage": l / m})),
        }));
        summaries.insert(case.name.clone(), (lat, marker, dropped, delivered, expected));
        throughput.insert(case.name.clone(), (lines_per_s, needed_per_s));
    }
    let events_rate = raw_cases.first().and_then(|c| c["eventsPerSecond"].as_f64()).unwrap_or(0.0);
    let reference = summaries.get("members directly").cloned();
    for name in ["all pods", "own namespace"] {
        let Some((lat, marker, dropped, delivered, expected)) = summaries.get(name).cloned() else { continue };
        let raw = raw_cases.iter().find(|c| c["case"] == name).cloned().unwrap_or(Value::Null);
        let cpu = raw["cpu"].clone();
        // Where in the window the latest deliveries were: one stall shows
        // as one bad second.
        let worst = raw["worstBySecond"].as_array().map(|v| v.iter().filter_map(Value::as_f64).collect::<Vec<_>>()).unwrap_or_default();
        let (worst_at, worst_ms) = worst.iter().copied().enumerate().fold((0, 0.0), |best, (i, ms)| if ms > best.1 { (i, ms) } else { best });
        let mut f = Figure::new("watch", &format!("watch {name}: p99 member→client"), None, "ms", lat.p99)
            .target("< 100 ms", lat.p99 < 100.0)
            .note(format!(
                "{w} clients, {events_rate:.0} events/s across the fleet; from the member's watch stream reaching the driver; {delivered} of {expected} deliveries arrived (missing ones count as infinite); CPU kubefold {:.0}%, driver {:.0}%; latest delivery {worst_ms:.0} ms, in second {worst_at} of the window; driver's 10 ms timer late by up to {:.0} ms",
                cpu["kubefold"].as_f64().unwrap_or(0.0) * 100.0,
                cpu["driver"].as_f64().unwrap_or(0.0) * 100.0,
                raw["driverTimerLateMs"]["max"].as_f64().unwrap_or(0.0)
            ));
        let k = &raw["kubefoldDuringWindow"];
        if k.is_object() {
            let at = |key: &str| k[key].as_f64().unwrap_or(0.0);
            let before = f.note.clone().unwrap_or_default();
            f = f.note(format!(
                "{before}; kubefold RSS {:.0} MiB at the start, {:.0} MiB at most, {:.0} page faults; the machine's pressure stalls: memory {:.0} ms, io (full) {:.0} ms",
                at("rssFirstMiB"),
                at("rssMaxMiB"),
                at("minorFaults") + at("majorFaults"),
                at("memoryPressureSomeMs"),
                at("ioPressureFullMs")
            ));
        }
        if let Some(per) = raw["kubefoldWatchWrites"]["linesPerMessage"].as_f64() {
            let before = f.note.clone().unwrap_or_default();
            f = f.note(format!("{before}; {per:.1} events per write to a client"));
        }
        if let Some(r) = &reference {
            f = f.reference("members' own watch, same clients", r.0.p99);
        }
        report.add(f);
        let mut f = Figure::new("watch", &format!("watch {name}: p50 member→client"), None, "ms", lat.p50);
        if let Some(r) = &reference {
            f = f.reference("members' own watch, same clients", r.0.p50);
        }
        report.add(f);
        let mut f = Figure::new("watch", &format!("watch {name}: p99 write→client"), None, "ms", marker.p99)
            .note(format!("{} marker patches ({} failed); write→member watch p99 {:.2} ms", written.len(), mark_failures, write_to_probe.p99));
        if let Some(r) = &reference {
            f = f.reference("members' own watch, same clients", r.1.p99);
        }
        report.add(f);
        report.add(Figure::new("watch", &format!("watch {name}: clients dropped"), None, "clients", dropped as f64).target("0", dropped == 0));
        if let Some((got, needed)) = throughput.get(name) {
            report.add(
                Figure::new("watch", &format!("watch {name}: events delivered/s"), None, "events/s", *got)
                    .reference("needed: events/s x matching clients", *needed)
                    .note("every line the clients received (replay included) over the window and the 3 s around it"),
            );
        }
    }
    report.raw("watch", json!({"cases": raw_cases, "writeToMemberWatch": write_to_probe, "markers": written.len(), "markerFailures": mark_failures}));
    Ok(())
}
