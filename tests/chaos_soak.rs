//! The chaos soak (ignored: long; run it with `ops/chaos/run`):
//! `CHAOS_MINUTES` (default 10) of every fault kubefold handles, in turn,
//! over churning members under watch, list and get load, with an ingest
//! burst half way and hostile clients throughout. The CI-sized load tests
//! are in `tests/load.rs`; the clients both use in `tests/chaos/load.rs`.

mod chaos;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos::load::*;
use chaos::*;
use common::*;
use kubefold_testdata::sim::faults::{Corruption, CorruptionKind, Faults, Offline, OfflineMode};

/// The soak: `CHAOS_MINUTES` (default 10) of rotating member faults over
/// three churning members with 2,000 load pods each, under 20 checking
/// watch clients, 500 light watches and list/get load, with a 50,000-pod
/// burst half way, a slow client throughout, and hostile clients
/// throughout (200 dropped watches whose selector matches nothing and 100
/// idle connections every few seconds, [`HostileClients`]). After each fault: reads
/// were served during it, and kubefold converges once it is cleared. At
/// the end: exact convergence, every watch client consistent, no list or
/// get failed or hung, each kind's p99 latency within Kubernetes' SLO
/// ([`ReadKind`]), every hostile watch answered and kubefold's descriptors
/// back where they were once the hostile clients stop. Prints a summary.
#[test]
#[ignore = "long: run with ops/chaos/run"]
fn chaos_soak() {
    let minutes: f64 = std::env::var("CHAOS_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(10.0);
    let soak_started = Instant::now();
    let deadline = soak_started + Duration::from_secs_f64(minutes * 60.0);
    let fleet = Fleet::start(3, 20.0, |c| {
        c.pods = 2000;
        c.bookmark_interval = Duration::from_secs(5);
    });
    let kf = &fleet.kf;
    let pid = fleet.pid();
    let baseline = rss_kib(pid).0;
    let clients: Vec<WatchClient> = (0..20).map(|_| WatchClient::start(&kf.url)).collect();
    // A slow client for the whole soak.
    let (from, _) = kubefold_pods(kf);
    let mut slow = std::net::TcpStream::connect(kf.url.trim_start_matches("http://")).unwrap();
    std::io::Write::write_all(&mut slow, format!("GET /api/v1/pods?watch=1&resourceVersion={from} HTTP/1.1\r\nHost: kubefold\r\n\r\n").as_bytes()).unwrap();
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let light: Vec<Arc<WatchStats>> = (0..watches_that_fit(500)).map(|_| Arc::new(WatchStats::default())).collect();
    let epoch = Instant::now();
    let http = reqwest::Client::builder().http1_only().build().unwrap();
    let readers = rt.block_on(async {
        for (i, s) in light.iter().enumerate() {
            let path = if i % 2 == 0 { "/api/v1/pods" } else { "/api/v1/namespaces/default/pods" };
            tokio::spawn(light_watch(http.clone(), kf.url.clone(), path.to_string(), from, s.clone(), epoch, stop.clone()));
            if i % 50 == 49 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        (0..4).map(|_| tokio::spawn(read_load(http.clone(), kf.url.clone(), 3, stop.clone()))).collect::<Vec<_>>()
    });
    let rss_stop = Arc::new(AtomicBool::new(false));
    let max_rss_mib: u64 = std::env::var("CHAOS_MAX_RSS_MIB").ok().and_then(|m| m.parse().ok()).unwrap_or(4096);
    let killed = Arc::new(AtomicBool::new(false));
    let sampler = guarded_rss_sampler(pid, rss_stop.clone(), max_rss_mib * 1024, killed.clone());
    // Hostile clients throughout: dropped watches that match nothing, idle
    // connections. Descriptors must come back to this once they stop.
    let fds_before = open_fds(pid);
    let hostile = HostileClients::start(&kf.url);

    let rotation: Vec<(&str, Faults, Duration)> = vec![
        ("latency 300 ms + jitter 700 ms", Faults { latency_ms: 300, latency_jitter_ms: 700, watch_close_after_ms: Some(5000), ..Faults::default() }, Duration::from_secs(20)),
        ("30% 500", Faults { error_rate: 0.3, watch_close_after_ms: Some(2000), ..Faults::default() }, Duration::from_secs(20)),
        ("30% 503", Faults { error_rate: 0.3, error_code: 503, watch_close_after_ms: Some(2000), ..Faults::default() }, Duration::from_secs(20)),
        ("30% 429 Retry-After 1", Faults { throttle_rate: 0.3, retry_after_secs: 1, watch_close_after_ms: Some(2000), ..Faults::default() }, Duration::from_secs(20)),
        ("watch resets after 20 events", Faults { watch_reset_after_events: Some(20), ..Faults::default() }, Duration::from_secs(20)),
        ("watch closes after 2 s", Faults { watch_close_after_ms: Some(2000), ..Faults::default() }, Duration::from_secs(20)),
        ("410 storm, streaming lists reset half the time", Faults { expire_watches: true, list_reset_rate: 0.5, ..Faults::default() }, Duration::from_secs(20)),
        ("no bookmarks", Faults { no_bookmarks: true, watch_close_after_ms: Some(3000), ..Faults::default() }, Duration::from_secs(30)),
        ("offline (refused) for 2 minutes", Faults { offline: Some(Offline { mode: OfflineMode::Refuse, for_ms: None }), ..Faults::default() }, Duration::from_secs(120)),
        ("offline (hang) for 30 s", Faults { offline: Some(Offline { mode: OfflineMode::Hang, for_ms: None }), ..Faults::default() }, Duration::from_secs(30)),
        ("clock 50 years ahead", Faults { clock_skew_secs: 50 * 365 * 86_400, ..Faults::default() }, Duration::from_secs(20)),
        ("objects without names (every 7th event)", Faults { corrupt_events: Some(Corruption { kind: CorruptionKind::NoName, every: 7 }), ..Faults::default() }, Duration::from_secs(20)),
        ("objects over 1.5 MB (every 50th event)", Faults { corrupt_events: Some(Corruption { kind: CorruptionKind::Huge, every: 50 }), ..Faults::default() }, Duration::from_secs(20)),
        ("duplicate events", Faults { corrupt_events: Some(Corruption { kind: CorruptionKind::Duplicate, every: 1 }), ..Faults::default() }, Duration::from_secs(20)),
        ("every request 503", Faults { error_rate: 1.0, error_code: 503, watch_close_after_ms: Some(1000), ..Faults::default() }, Duration::from_secs(20)),
        ("invalid UTF-8 (every 13th event)", Faults { corrupt_events: Some(Corruption { kind: CorruptionKind::InvalidUtf8, every: 13 }), ..Faults::default() }, Duration::from_secs(20)),
        ("out-of-order events", Faults { corrupt_events: Some(Corruption { kind: CorruptionKind::OutOfOrder, every: 1 }), ..Faults::default() }, Duration::from_secs(20)),
    ];
    #[derive(Default)]
    struct Outcome {
        runs: u32,
        failures: Vec<String>,
        slowest_convergence: Duration,
    }
    let outcomes: Mutex<std::collections::BTreeMap<String, Outcome>> = Default::default();
    let mut round = 0usize;
    let mut burst_done = false;
    let half = soak_started + (deadline - soak_started) / 2;
    while Instant::now() + Duration::from_secs(60) < deadline && !killed.load(Ordering::Relaxed) {
        let (name, fault, dwell) = rotation[round % rotation.len()].clone();
        let member = format!("member{}", round % 3 + 1);
        round += 1;
        let sim = fleet.sim(&member);
        let mut failures = Vec::new();
        sim.set_faults(fault);
        let fault_started = Instant::now();
        while fault_started.elapsed() < dwell.min(deadline.saturating_duration_since(Instant::now())) {
            std::thread::sleep(Duration::from_secs(2));
            if let Err(e) = probe_reads(kf, &member) {
                failures.push(format!("reads during the fault: {e}"));
            }
        }
        sim.set_faults(Faults::default());
        let cleared = Instant::now();
        let converged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assert_converged(kf, &fleet.members, "/api/v1/pods", "v1/pods")));
        if let Err(panic) = converged {
            let message = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            failures.push(format!("convergence: {message}"));
        }
        let took = cleared.elapsed();
        let now = epoch.elapsed().as_millis() as u64;
        let silent = light.iter().filter(|s| now.saturating_sub(s.last_heard_ms.load(Ordering::Relaxed)) > 15_000).count();
        if silent > 0 {
            failures.push(format!("{silent} light watches silent for 15 s"));
        }
        eprintln!(
            "[{:>5.1} min] {name} on {member}: {} (converged {took:?} after clearing), RSS {} MiB",
            soak_started.elapsed().as_secs_f64() / 60.0,
            if failures.is_empty() { "ok".to_string() } else { failures.join("; ") },
            rss_kib(pid).0 / 1024
        );
        {
            let mut outcomes = outcomes.lock().unwrap();
            let o = outcomes.entry(name.to_string()).or_default();
            o.runs += 1;
            o.slowest_convergence = o.slowest_convergence.max(took);
            o.failures.extend(failures);
        }
        if !burst_done && Instant::now() > half {
            burst_done = true;
            let started = Instant::now();
            fleet.sim("member2").burst(50_000);
            let member = member_objects(fleet.sim("member2"), "/api/v1/pods").1.len();
            let absorbed = (0..1200).any(|_| {
                std::thread::sleep(Duration::from_millis(250));
                let (code, body) = kf.get("/admin/v1/clusters/member2");
                let held = serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|s| s["status"]["resources"]["v1/pods"]["objects"].as_u64());
                killed.load(Ordering::Relaxed) || (code == 200 && held.unwrap_or(0) >= member as u64)
            });
            eprintln!(
                "[{:>5.1} min] burst of 50,000 pods in member2: {} in {:?}, RSS {} MiB",
                soak_started.elapsed().as_secs_f64() / 60.0,
                if absorbed { "absorbed" } else { "NOT absorbed" },
                started.elapsed(),
                rss_kib(pid).0 / 1024
            );
        }
    }

    // The end: quiet members, exact state, consistent clients.
    for (_, sim) in &fleet.members {
        sim.set_churn(0.0);
    }
    let mut end_failures = Vec::new();
    let hostile = hostile.stop();
    if hostile.unanswered > 0 {
        end_failures.push(format!("{} of {} hostile watches not answered within 5 s", hostile.unanswered, hostile.watches));
    }
    let fds_back = (0..80).any(|_| {
        std::thread::sleep(Duration::from_millis(250));
        open_fds(pid) <= fds_before + 50
    });
    let fds_after = open_fds(pid);
    if !fds_back {
        end_failures.push(format!("descriptors {fds_after} after the hostile clients stopped, {fds_before} before"));
    }
    if killed.load(Ordering::Relaxed) || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        rss_stop.store(true, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        let peak = sampler.join().unwrap();
        let logs = kf.logs();
        let tail: Vec<&str> = logs.lines().rev().take(20).collect();
        panic!(
            "chaos soak: kubefold died after {:.1} minutes (RSS peak {} MiB, limit {max_rss_mib} MiB); its last log lines:\n{}",
            soak_started.elapsed().as_secs_f64() / 60.0,
            peak / 1024,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    for (name, sim) in &fleet.members {
        wait_member_quiet(sim, Duration::from_secs(1));
        let exact = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assert_same_objects(kf, name, sim, "/api/v1/pods", Duration::from_secs(120))));
        if exact.is_err() {
            end_failures.push(format!("{name}: pods differ from the member"));
        }
    }
    let mut client_summary = (0u64, 0u64, 0usize, Duration::ZERO);
    for (i, client) in clients.iter().enumerate() {
        let agreed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assert_watch_client_agrees(kf, client, &format!("watch client {i}"))));
        if agreed.is_err() {
            end_failures.push(format!("watch client {i} disagrees with kubefold's list"));
        }
        let seen = client.seen();
        client_summary.0 += seen.events;
        client_summary.1 += seen.lists;
        client_summary.2 += seen.violations.len();
        client_summary.3 = client_summary.3.max(seen.longest_silence);
    }
    stop.store(true, Ordering::Relaxed);
    let mut reads = Reads::default();
    rt.block_on(async {
        for r in readers {
            reads.add(r.await.unwrap());
        }
    });
    rss_stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let light_events: u64 = light.iter().map(|s| s.events.load(Ordering::Relaxed)).sum();
    let light_violations: u64 = light.iter().map(|s| s.violations.load(Ordering::Relaxed)).sum();
    let metrics = kf.get("/metrics").1;
    let slow_closed = metric_in(&metrics, "kubefold_watch_slow_closed_total", &[]);
    let stats = kf.get_json("/admin/v1/stats");

    println!("\n=== chaos soak summary ({:.1} minutes, {round} fault rounds) ===", soak_started.elapsed().as_secs_f64() / 60.0);
    for (name, o) in outcomes.lock().unwrap().iter() {
        let verdict = if o.failures.is_empty() { "ok".to_string() } else { format!("FAILED: {}", o.failures.join("; ")) };
        println!("  {name:<48} x{:<3} slowest convergence {:>8.1?}  {verdict}", o.runs, o.slowest_convergence);
    }
    println!("  head RV {}, objects {}, events retained {}", stats["headResourceVersion"], stats["objects"], stats["events"]);
    println!("  kubefold RSS: baseline {} MiB, peak {} MiB, end {} MiB", baseline / 1024, peak / 1024, rss_kib(pid).0 / 1024);
    println!(
        "  20 checking watch clients: {} events, {} lists, {} RV violations, longest silence {:?}",
        client_summary.0, client_summary.1, client_summary.2, client_summary.3
    );
    println!("  {} light watches: {light_events} events, {light_violations} RV violations", light.len());
    println!("  list/get: {} requests, {} failed: {:?}", reads.requests(), reads.failures.len(), &reads.failures[..reads.failures.len().min(5)]);
    println!("  list/get latency: {}", reads.summary());
    let over_slo = reads.over_slo();
    println!("  slow client (reads nothing): kubefold_watch_slow_closed_total = {slow_closed}");
    println!(
        "  hostile clients: {} rounds, {} dropped watches matching nothing ({} unanswered), {} idle connections; descriptors {fds_before} before, {fds_after} after",
        hostile.rounds, hostile.watches, hostile.unanswered, hostile.idle
    );
    println!("  end state: {}", if end_failures.is_empty() { "converged exactly, every client consistent".to_string() } else { end_failures.join("; ") });
    let failed: Vec<String> = outcomes.lock().unwrap().iter().filter(|(_, o)| !o.failures.is_empty()).map(|(n, _)| n.clone()).collect();
    if !failed.is_empty() || !end_failures.is_empty() {
        let logs = kf.logs();
        let tail: Vec<&str> = logs.lines().rev().filter(|l| l.contains("WARN") || l.contains("ERROR")).take(30).collect();
        println!("  kubefold's last warnings and errors:");
        for line in tail.into_iter().rev() {
            println!("    {line}");
        }
    }
    drop(slow);
    assert!(
        failed.is_empty() && end_failures.is_empty() && client_summary.2 == 0 && light_violations == 0 && reads.failures.is_empty() && over_slo.is_empty(),
        "chaos soak failed: rounds {failed:?}, end {end_failures:?}, {} RV violations, {light_violations} light-watch RV violations, {} reads failed, latency over the SLO: {over_slo:?}",
        client_summary.2,
        reads.failures.len()
    );
}
