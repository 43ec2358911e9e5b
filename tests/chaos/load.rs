//! The load tests' own clients, shared by `tests/load.rs` and the long
//! `tests/chaos_soak.rs`: light watches that check every line they read,
//! list and get load judged by the Kubernetes API call latency SLO, RSS
//! samplers, and the watch count that fits the open-files limits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::{open_files_limits, rss_kib};

/// What one lightweight watch saw (the load test runs a thousand of them).
#[derive(Default)]
pub struct WatchStats {
    pub events: AtomicU64,
    pub bookmarks: AtomicU64,
    pub errors: AtomicU64,
    pub violations: AtomicU64,
    /// Milliseconds since the test's start when it last heard from kubefold.
    pub last_heard_ms: AtomicU64,
    pub last_rv: AtomicU64,
    /// Watch requests refused with 429 (kubefold's per-client limit of requests starting).
    pub throttled: AtomicU64,
    /// The first errors, for the failure message.
    pub first_errors: Mutex<Vec<String>>,
}

impl WatchStats {
    pub fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().unwrap();
        if first.len() < 3 {
            first.push(what);
        }
    }
}

/// The RV of an event line without decoding it: the first
/// `"resourceVersion":"N"` is the object's (metadata comes first).
pub fn line_rv(line: &[u8]) -> Option<u64> {
    let key = b"\"resourceVersion\":\"";
    let at = line.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()
}

/// A watch of `path` from `rv`, resumed from the last RV when it ends,
/// until `stop`; every line is checked (RVs strictly increase) and counted.
pub async fn light_watch(http: reqwest::Client, url: String, path: String, mut rv: u64, stats: Arc<WatchStats>, epoch: Instant, stop: Arc<AtomicBool>) {
    let heard = |stats: &WatchStats| stats.last_heard_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        let request = http.get(format!("{url}{path}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=60"));
        let response = match request.send().await {
            Ok(r) if r.status() == 200 => r,
            Ok(r) if r.status() == 429 => {
                stats.throttled.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Ok(r) => {
                stats.error(format!("watch answered {}", r.status()));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => {
                stats.error(format!("watch request: {e}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        heard(&stats);
        let mut body = response.bytes_stream();
        let mut buffer: Vec<u8> = Vec::new();
        loop {
            let chunk = tokio::select! {
                chunk = body.next() => chunk,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    if stop.load(Ordering::Relaxed) { return }
                    continue;
                }
            };
            let chunk = match chunk {
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    stats.error(format!("watch body at RV {rv}: {e}"));
                    break;
                }
                None => break,
            };
            heard(&stats);
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if line.starts_with(b"{\"type\":\"ERROR\"") {
                    stats.error(format!("at RV {rv}: {}", String::from_utf8_lossy(&line).trim()));
                    // As an informer relists: go on from the current state, not from the old RV.
                    if let Some(now) = current_rv(&http, &url).await {
                        rv = now;
                    }
                    continue;
                }
                let Some(event_rv) = line_rv(&line) else { continue };
                if line.starts_with(b"{\"type\":\"BOOKMARK\"") {
                    stats.bookmarks.fetch_add(1, Ordering::Relaxed);
                    if event_rv < rv {
                        stats.violations.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    stats.events.fetch_add(1, Ordering::Relaxed);
                    if event_rv <= rv {
                        stats.violations.fetch_add(1, Ordering::Relaxed);
                    }
                }
                rv = rv.max(event_rv);
                stats.last_rv.store(rv, Ordering::Relaxed);
            }
        }
    }
}

/// kubefold's current RV (a one-item list).
pub async fn current_rv(http: &reqwest::Client, url: &str) -> Option<u64> {
    let page: serde_json::Value = http.get(format!("{url}/api/v1/pods?limit=1")).send().await.ok()?.json().await.ok()?;
    page["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// A read that has not completed after this long hangs (a failure). A
/// slower read that completes is a latency, judged against Kubernetes'
/// SLO where a test asks for it ([`Reads::over_slo`]).
pub const READ_HANG: Duration = Duration::from_secs(60);

/// The kinds of read of the Kubernetes API call latency SLO
/// (kubernetes/community sig-scalability/slos/api_call_latency.md:
/// p99 over a period, at most 1 s for a single object, 5 s for a
/// namespace-scoped list, 30 s for a cluster-scoped list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReadKind {
    Get,
    NamespaceList,
    ClusterList,
}

impl ReadKind {
    pub fn of(path: &str) -> ReadKind {
        let path = path.split('?').next().unwrap_or(path);
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // /api/v1/namespaces/NS/pods/NAME or /apis/G/V/namespaces/NS/R/NAME
        let after_version = if parts.first() == Some(&"api") { &parts[2..] } else { &parts[3..] };
        match after_version {
            ["namespaces", _, _, _] => ReadKind::Get,
            ["namespaces", _, _] => ReadKind::NamespaceList,
            _ => ReadKind::ClusterList,
        }
    }

    pub fn slo(self) -> Duration {
        match self {
            ReadKind::Get => Duration::from_secs(1),
            ReadKind::NamespaceList => Duration::from_secs(5),
            ReadKind::ClusterList => Duration::from_secs(30),
        }
    }
}

/// What [`read_load`] saw.
#[derive(Default)]
pub struct Reads {
    /// Latency of every completed read, by kind.
    pub latencies: BTreeMap<ReadKind, Vec<Duration>>,
    /// Reads that failed: an error status, a broken connection, or no
    /// answer within [`READ_HANG`].
    pub failures: Vec<String>,
}

impl Reads {
    pub fn add(&mut self, other: Reads) {
        for (kind, mut l) in other.latencies {
            self.latencies.entry(kind).or_default().append(&mut l);
        }
        self.failures.extend(other.failures);
    }

    pub fn requests(&self) -> usize {
        self.latencies.values().map(Vec::len).sum::<usize>() + self.failures.len()
    }

    pub fn slowest(&self) -> Duration {
        self.latencies.values().flatten().max().copied().unwrap_or_default()
    }

    /// Per kind: count, p50, p99, slowest, and how many took over 10 s.
    pub fn summary(&mut self) -> String {
        let mut out = Vec::new();
        for (kind, l) in self.latencies.iter_mut() {
            l.sort_unstable();
            let at = |q: f64| l.get(((l.len() as f64 * q) as usize).min(l.len().saturating_sub(1))).copied().unwrap_or_default();
            let over_10s = l.iter().filter(|d| **d > Duration::from_secs(10)).count();
            out.push(format!("{kind:?} {} p50 {:?} p99 {:?} max {:?} (over 10 s: {over_10s})", l.len(), at(0.5), at(0.99), l.last().copied().unwrap_or_default()));
        }
        out.join("; ")
    }

    /// The kinds whose p99 is over the SLO's bound.
    pub fn over_slo(&mut self) -> Vec<String> {
        self.latencies
            .iter_mut()
            .filter_map(|(kind, l)| {
                l.sort_unstable();
                let p99 = *l.get((l.len() as f64 * 0.99) as usize)?;
                (p99 > kind.slo()).then(|| format!("{kind:?} p99 {p99:?} over {:?}", kind.slo()))
            })
            .collect()
    }
}

/// List and get requests in a loop until `stop`.
pub async fn read_load(http: reqwest::Client, url: String, clusters: usize, stop: Arc<AtomicBool>) -> Reads {
    let paths: Vec<String> = [
        "/api/v1/pods?limit=500".to_string(),
        "/api/v1/namespaces/default/pods".to_string(),
        "/api/v1/namespaces/default/pods?limit=20".to_string(),
        "/api/v1/pods?labelSelector=app%3Dweb".to_string(),
        "/apis/apps/v1/deployments".to_string(),
    ]
    .into_iter()
    .chain((1..=clusters).map(|i| format!("/api/v1/namespaces/default/pods/web-0_member{i}")))
    .collect();
    let mut reads = Reads::default();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = &paths[i % paths.len()];
        i += 1;
        let started = Instant::now();
        let result = http.get(format!("{url}{path}")).timeout(READ_HANG).send().await;
        let result = match result {
            Ok(r) if r.status() == 200 => r.bytes().await.map(|_| ()).map_err(|e| format!("{path}: {e}")),
            Ok(r) => Err(format!("{path}: {}", r.status())),
            Err(e) => Err(format!("{path}: {e}")),
        };
        match result {
            Ok(()) => reads.latencies.entry(ReadKind::of(path)).or_default().push(started.elapsed()),
            Err(e) => reads.failures.push(format!("{e} (after {:?})", started.elapsed())),
        }
    }
    reads
}

/// Samples a process's RSS every 250 ms until `stop`; returns the peak
/// (KiB). Kills it past 3 GiB, far above every bound these tests assert.
pub fn rss_sampler(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    guarded_rss_sampler(pid, stop, 3 * 1024 * 1024, Arc::new(AtomicBool::new(false)))
}

/// [`rss_sampler`] that kills the process (the kubefold this test started)
/// with SIGKILL when its RSS passes `limit_kib`, setting `killed`: a
/// runaway kubefold must not take the machine's memory (and other work on
/// it) down with it.
pub fn guarded_rss_sampler(pid: u32, stop: Arc<AtomicBool>, limit_kib: u64, killed: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            let rss = rss_kib(pid).0;
            peak = peak.max(rss);
            if rss > limit_kib && !killed.swap(true, Ordering::Relaxed) {
                eprintln!("kubefold's RSS reached {} MiB, over the {} MiB limit: killing it", rss / 1024, limit_kib / 1024);
                let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        peak
    })
}

/// The watch count that fits the open-files limits: this process takes
/// one descriptor per watch under its soft limit, kubefold two (see the
/// module's doc) under the hard limit, to which it raises its soft one.
pub fn watches_that_fit(wanted: usize) -> usize {
    let (soft, hard) = open_files_limits();
    let fit = (soft.saturating_sub(256) as usize).min(hard.saturating_sub(256) as usize / 2);
    if fit >= wanted {
        wanted
    } else {
        let fit = fit.max(10);
        eprintln!("open-files limits are {soft} (soft) and {hard} (hard): running {fit} watches instead of {wanted}");
        fit
    }
}

/// A runtime of two workers for the light watches and the read load.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}
