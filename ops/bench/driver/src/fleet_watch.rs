//! The fleet's watch fan-out (part of `--fleet`): churn across every member
//! of the simulator (1,000 events/s in all at full size), 1,000 watch
//! clients on kubefold, each watching the pods of its own namespace over
//! the whole fleet (`load-{i % 10}`: a tenth of the fleet's events each),
//! and one probe watch per member in the driver: an event's latency runs
//! from the moment the member's own stream delivers it to the driver to
//! its receipt by each client.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hyper::Method;
use serde_json::json;

use crate::http::Client;
use crate::load::{self, LineKind, WatchGroup};
use crate::procs::Proc;
use crate::report::{Figure, Report};
use crate::stats::summary;
use crate::watch::{list_rv, run_watch_case};
use crate::Ctx;

/// The sizes of the fan-out measure.
pub struct FanOut {
    /// Watch clients on kubefold.
    pub clients: usize,
    /// Events per second across the fleet.
    pub events_per_sec: f64,
}

/// kubefold's histogram of commit durations (a batch's ingest to its
/// publication, `kubefold_commit_duration_seconds`): cumulative counts by
/// upper bound.
async fn commit_buckets(addr: SocketAddr) -> Option<Vec<(String, f64)>> {
    let (status, page) = crate::http::get_once(addr, "/metrics", Duration::from_secs(5)).await.ok()?;
    if status != 200 {
        return None;
    }
    let page = String::from_utf8_lossy(&page);
    let buckets = page
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("kubefold_commit_duration_seconds_bucket{le=\"")?;
            let (le, rest) = rest.split_once("\"}")?;
            Some((le.to_string(), rest.trim().parse::<f64>().ok()?))
        })
        .collect::<Vec<_>>();
    (!buckets.is_empty()).then_some(buckets)
}

/// Sets every member's churn so that the fleet makes `per_sec` changes a second in all.
async fn set_churn(members: &[(String, SocketAddr)], per_sec: f64) -> usize {
    let each = per_sec / members.len().max(1) as f64;
    let body = bytes::Bytes::from(format!("{{\"perSecond\":{each}}}"));
    let mut failed = 0;
    for (_, addr) in members {
        let mut client = Client::new(*addr);
        if !matches!(client.request(Method::PUT, "/sim/churn", "application/json", body.clone()).await, Ok((200, _))) {
            failed += 1;
        }
    }
    failed
}

/// Measures the fan-out on a synced kubefold (`kubefold`, at `addr`) over
/// `members` of the simulator `sim`, and adds its figures to `report`.
pub async fn run(ctx: &Ctx, report: &mut Report, plan: &FanOut, kubefold: &Proc, sim: &Proc, members: &[(String, SocketAddr)]) -> Result<()> {
    let addr = kubefold.addr();
    let base = Instant::now();
    // Probes first: one watch per member, from its current resourceVersion.
    let (probe_stop_tx, probe_stop_rx) = tokio::sync::watch::channel(false);
    let probe_group = Arc::new(WatchGroup { base, connected: Default::default(), stop: probe_stop_rx, finders: load::Finders::new() });
    let mut probes = Vec::with_capacity(members.len());
    for (name, member) in members {
        let Some(cluster) = load::member_index(name.as_bytes()) else {
            anyhow::bail!("member {name}: not named memberN");
        };
        let rv = list_rv(*member, "/api/v1/pods?limit=1").await?;
        probes.push(tokio::spawn(load::watch_client(
            probe_group.clone(),
            *member,
            format!("/api/v1/pods?watch=1&resourceVersion={rv}"),
            LineKind::Member { cluster },
        )));
    }
    while probe_group.connected.load(std::sync::atomic::Ordering::Relaxed) < members.len() && base.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let churn_failed = set_churn(members, plan.events_per_sec).await;
    // Let the churn reach kubefold before the clients start from its head.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let head = list_rv(addr, "/api/v1/pods?limit=1").await?;
    let clients: Vec<_> = (0..plan.clients)
        .map(|i| (addr, format!("/api/v1/namespaces/load-{}/pods?watch=1&resourceVersion={head}", i % 10), LineKind::Kubefold))
        .collect();
    let commits_before = commit_buckets(addr).await;
    let case = run_watch_case(ctx, "fleet own namespace", base, clients, kubefold, std::slice::from_ref(sim)).await;
    let commits = commit_buckets(addr).await.map(|after| {
        let before = commits_before.unwrap_or_default();
        after.iter().map(|(le, n)| (le.clone(), n - before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, m)| *m))).collect::<Vec<_>>()
    });
    if let Some(commits) = &commits {
        let shown: Vec<String> = commits.iter().map(|(le, n)| format!("<={le}: {n:.0}")).collect();
        eprintln!("  fleet watch fan-out: kubefold's commits (ingest to publication) by seconds, cumulative: {}", shown.join(", "));
    }
    set_churn(members, 0.0).await;
    let _ = probe_stop_tx.send(true);
    let mut probe_logs = Vec::with_capacity(probes.len());
    for p in probes {
        if let Ok(Ok(log)) = tokio::time::timeout(Duration::from_secs(10), p).await {
            probe_logs.push(log);
        }
    }
    let case = case?;

    // When each event left its member, and its namespace.
    let mut left_member: HashMap<u64, u64> = HashMap::new();
    let mut probes_ended = 0;
    for l in &probe_logs {
        for &(key, t) in &l.received {
            left_member.entry(key).or_insert(t);
        }
        probes_ended += usize::from(l.ended_early);
    }
    let namespace_of: HashMap<u64, u8> = probe_logs.iter().flat_map(|l| l.namespaces.iter().copied()).collect();
    let (t0, t1) = case.window;
    let in_window = |t: u64| t >= t0 && t < t1;
    let mut per_namespace: HashMap<u8, u64> = HashMap::new();
    let mut events = 0u64;
    for (key, t) in &left_member {
        if in_window(*t) {
            events += 1;
            if let Some(ns) = namespace_of.get(key) {
                *per_namespace.entry(*ns).or_default() += 1;
            }
        }
    }
    let (mut latencies, mut delivered, mut expected) = (Vec::new(), 0u64, 0u64);
    // The same latencies by the second of the window their event left its
    // member in: a tail spread evenly and one from a few stalls differ here.
    let mut by_second: Vec<Vec<f64>> = vec![Vec::new(); ((t1 - t0) / 1_000_000_000 + 1) as usize];
    // Each event's first receipt by any client: what the way to kubefold's
    // fan-out took (the member's stream, the watcher, the commit, the tick),
    // apart from what handing it to every client took after.
    let mut first: HashMap<u64, u64> = HashMap::new();
    for log in &case.logs {
        for &(key, t) in &log.received {
            first.entry(key).and_modify(|f| *f = (*f).min(t)).or_insert(t);
        }
    }
    let mut spread = Vec::new();
    for (i, log) in case.logs.iter().enumerate() {
        for &(key, t) in &log.received {
            let Some(&t_left) = left_member.get(&key) else { continue };
            if in_window(t_left) {
                delivered += 1;
                spread.push((t - first[&key]) as f64 / 1e6);
                let ms = (t as f64 - t_left as f64) / 1e6;
                latencies.push(ms);
                by_second[((t_left - t0) / 1_000_000_000) as usize].push(ms);
            }
        }
        expected += per_namespace.get(&((i % 10) as u8)).copied().unwrap_or(0);
    }
    // Deliveries that never arrived count as infinitely late.
    let missing = expected.saturating_sub(delivered);
    latencies.extend(std::iter::repeat_n(f64::INFINITY, missing as usize));
    let lat = summary(latencies);
    let first_lat = summary(
        first.iter().filter_map(|(key, &t)| left_member.get(key).filter(|&&l| in_window(l)).map(|&l| (t as f64 - l as f64) / 1e6)).collect(),
    );
    let spread = summary(spread);
    eprintln!(
        "  fleet watch fan-out: to the first client p50 {:.1} ms, p99 {:.1} ms; after the first, p50 {:.1} ms, p99 {:.1} ms",
        first_lat.p50, first_lat.p99, spread.p50, spread.p99
    );
    let seconds: Vec<[f64; 4]> = by_second
        .into_iter()
        .map(|v| {
            let s = summary(v);
            [s.n as f64, (s.p50 * 10.0).round() / 10.0, (s.p99 * 10.0).round() / 10.0, (s.max * 10.0).round() / 10.0]
        })
        .collect();
    let worst: Vec<String> = {
        let mut order: Vec<usize> = (0..seconds.len()).collect();
        order.sort_by(|&a, &b| seconds[b][2].total_cmp(&seconds[a][2]));
        // With the time of day, to line them up with the children's logs.
        let window_start = std::time::SystemTime::now() - base.elapsed() + Duration::from_nanos(t0);
        order
            .iter()
            .take(5)
            .map(|&i| {
                let at = window_start + Duration::from_secs(i as u64);
                let of_day = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() % 86_400);
                format!("{i} s ({:02}:{:02}:{:02} UTC): p99 {} ms", of_day / 3600, of_day / 60 % 60, of_day % 60, seconds[i][2])
            })
            .collect()
    };
    eprintln!("  fleet watch fan-out: worst seconds of the window: {}", worst.join(", "));
    let dropped = case.logs.iter().filter(|l| l.ended_early || l.errors > 0 || l.status != 200).count();
    let window_s = (t1 - t0) as f64 / 1e9;
    let rate = events as f64 / window_s;
    let per_write = case.writes.map(|(m, l)| l / m);
    eprintln!(
        "  fleet watch fan-out: {} clients, {rate:.0} events/s; {delivered} of {expected} deliveries, p50 {:.2} ms, p99 {:.2} ms; {dropped} dropped; CPU kubefold {:.0}%",
        case.logs.len(),
        lat.p50,
        lat.p99,
        case.kubefold_cpu * 100.0
    );
    report.add(
        Figure::new("fleet", "watch fan-out: p99 member→client", None, "ms", lat.p99)
            .target("< 100 ms, none dropped", lat.p99 < 100.0 && dropped == 0 && missing == 0)
            .note(format!(
                "{} clients, each its own namespace over all {} members; {rate:.0} events/s across the fleet over {window_s:.0} s; p50 {:.2} ms; {delivered} of {expected} deliveries (missing ones count as infinite); {dropped} clients dropped; CPU kubefold {:.0}%, driver {:.0}%{}",
                case.logs.len(),
                members.len(),
                lat.p50,
                case.kubefold_cpu * 100.0,
                case.driver_cpu * 100.0,
                per_write.map_or(String::new(), |p| format!("; {p:.1} events per write to a client"))
            )),
    );
    report.add(Figure::new("fleet", "watch fan-out: clients dropped", None, "clients", dropped as f64).target("0", dropped == 0));
    if churn_failed > 0 || probes_ended > 0 {
        report.note(format!("fleet watch fan-out: churn not set on {churn_failed} members; {probes_ended} member probe watches ended early"));
    }
    report.raw(
        "fleetWatch",
        json!({
            "clients": case.logs.len(), "eventsPerSecond": rate, "windowSeconds": window_s,
            "deliveries": delivered, "expectedDeliveries": expected, "latencyFromMemberWatch": lat, "dropped": dropped,
            "cpu": {"kubefold": case.kubefold_cpu, "driver": case.driver_cpu},
            "eventsPerWrite": per_write, "churnFailed": churn_failed, "probesEndedEarly": probes_ended,
            "commitsBySeconds": commits, "toFirstClient": first_lat, "afterFirstClient": spread,
            "bySecond": {"columns": ["deliveries", "p50 ms", "p99 ms", "max ms"], "rows": seconds},
        }),
    );
    Ok(())
}
