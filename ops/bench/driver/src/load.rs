//! Load generators: open-loop gets at a fixed rate, closed-loop gets at
//! saturation, and watch clients that timestamp every event they receive.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use memchr::memmem::Finder;
use rand::{Rng, SeedableRng};

use crate::http::Conn;

/// One get target: a server and a path on it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The server.
    pub addr: SocketAddr,
    /// The request path.
    pub path: String,
}

/// What a get run measured.
#[derive(Debug, Default)]
pub struct GetRun {
    /// Latencies in ms (open loop: from the scheduled send time).
    pub latencies_ms: Vec<f64>,
    /// Requests answered 200.
    pub ok: u64,
    /// Errors and non-200 answers.
    pub errors: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// A pool of open connections per server.
struct Pool {
    idle: Mutex<Vec<(SocketAddr, Conn)>>,
}

impl Pool {
    fn take(&self, addr: SocketAddr) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let i = idle.iter().position(|(a, c)| *a == addr && c.is_open())?;
        Some(idle.swap_remove(i).1)
    }

    fn put(&self, addr: SocketAddr, conn: Conn) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push((addr, conn));
    }
}

async fn get_on(pool: &Pool, target: &Target) -> bool {
    let conn = match pool.take(target.addr) {
        Some(c) => Some(c),
        None => Conn::connect(target.addr).await.ok(),
    };
    let Some(mut conn) = conn else { return false };
    match conn.get_count(&target.path, None).await {
        Ok((200, _)) => {
            pool.put(target.addr, conn);
            true
        }
        Ok(_) => {
            pool.put(target.addr, conn);
            false
        }
        Err(_) => false,
    }
}

/// Sends `rate` gets per second for `duration` (targets picked at random),
/// each at its scheduled time whatever the previous ones do (no coordinated
/// omission: latency counts from the scheduled time).
pub async fn open_loop(targets: Arc<Vec<Target>>, rate: f64, duration: Duration, warm_connections: usize) -> GetRun {
    let pool = Arc::new(Pool { idle: Mutex::new(Vec::new()) });
    let mut servers: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
    servers.sort();
    servers.dedup();
    for addr in &servers {
        for _ in 0..warm_connections.div_ceil(servers.len()).max(2) {
            if let Ok(c) = Conn::connect(*addr).await {
                pool.put(*addr, c);
            }
        }
    }
    let total = (rate * duration.as_secs_f64()) as usize;
    let results = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let errors = Arc::new(AtomicU64::new(0));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at).await;
        let target = targets[rng.random_range(0..targets.len())].clone();
        let (pool, results, errors) = (pool.clone(), results.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            if get_on(&pool, &target).await {
                let ms = (tokio::time::Instant::now() - at).as_secs_f64() * 1e3;
                results.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
            } else {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let elapsed = start.elapsed();
    let latencies_ms = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    GetRun { ok: latencies_ms.len() as u64, latencies_ms, errors: errors.load(Ordering::Relaxed), elapsed }
}

/// `connections` clients each sending gets back to back for `duration`.
pub async fn closed_loop(targets: Arc<Vec<Target>>, connections: usize, duration: Duration) -> GetRun {
    let stop_at = tokio::time::Instant::now() + duration;
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let (targets, ok, errors) = (targets.clone(), ok.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64 + 11);
            let mut conns: Vec<Option<Conn>> = Vec::new();
            let mut addrs: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
            addrs.sort();
            addrs.dedup();
            conns.resize_with(addrs.len(), || None);
            let mut latencies = Vec::new();
            while tokio::time::Instant::now() < stop_at {
                let target = &targets[rng.random_range(0..targets.len())];
                let slot = addrs.binary_search(&target.addr).unwrap_or(0);
                if !conns[slot].as_ref().is_some_and(Conn::is_open) {
                    conns[slot] = Conn::connect(target.addr).await.ok();
                }
                let Some(conn) = conns[slot].as_mut() else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let t0 = Instant::now();
                match conn.get_count(&target.path, None).await {
                    Ok((200, _)) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        latencies.push(t0.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        conns[slot] = None;
                    }
                }
            }
            latencies
        }));
    }
    let mut latencies_ms = Vec::new();
    for t in tasks {
        if let Ok(Ok(l)) = tokio::time::timeout(duration + Duration::from_secs(10), t).await {
            latencies_ms.extend(l);
        }
    }
    GetRun { latencies_ms, ok: ok.load(Ordering::Relaxed), errors: errors.load(Ordering::Relaxed), elapsed: started.elapsed() }
}

/// How a watch client finds an event's identity in a line.
#[derive(Debug, Clone, Copy)]
pub enum LineKind {
    /// A kubefold stream: cluster and member RV from kubefold's annotations.
    Kubefold,
    /// A member's own stream: the member RV is `metadata.resourceVersion`.
    Member {
        /// Index of the member (0-based).
        cluster: u64,
    },
}

/// Substring finders shared by all clients.
pub struct Finders {
    cluster: Finder<'static>,
    member_rv: Finder<'static>,
    rv: Finder<'static>,
    namespace: Finder<'static>,
}

impl Finders {
    /// The finders of the fields the clients read.
    pub fn new() -> Finders {
        Finders {
            cluster: Finder::new(b"\"kubefold.io/cluster\":\"").into_owned(),
            member_rv: Finder::new(b"\"kubefold.io/member-resource-version\":\"").into_owned(),
            rv: Finder::new(b"\"resourceVersion\":\"").into_owned(),
            namespace: Finder::new(b"\"namespace\":\"load-").into_owned(),
        }
    }
}

/// An event's identity: member index in the top 16 bits, member RV below.
pub fn event_key(cluster: u64, member_rv: u64) -> u64 {
    (cluster << 48) | (member_rv & ((1 << 48) - 1))
}

/// `memberK` → K-1.
pub fn member_index(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"member")?;
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    n.checked_sub(1)
}

fn quoted_after<'a>(line: &'a [u8], finder: &Finder<'_>) -> Option<&'a [u8]> {
    let start = finder.find(line)? + finder.needle().len();
    let len = memchr::memchr(b'"', &line[start..])?;
    Some(&line[start..start + len])
}

fn parse_u64(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// What one line of a watch stream is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// An object event with this key.
    Event(u64),
    /// A BOOKMARK.
    Bookmark,
    /// An ERROR event.
    Error,
    /// Something else.
    Other,
}

/// Classifies one line of a watch stream.
pub fn classify(line: &[u8], kind: LineKind, finders: &Finders) -> Line {
    let head = &line[..line.len().min(24)];
    if memchr::memmem::find(head, b"\"BOOKMARK\"").is_some() {
        return Line::Bookmark;
    }
    if memchr::memmem::find(head, b"\"ERROR\"").is_some() {
        return Line::Error;
    }
    let key = match kind {
        LineKind::Kubefold => {
            let cluster = quoted_after(line, &finders.cluster).and_then(member_index);
            let rv = quoted_after(line, &finders.member_rv).and_then(parse_u64);
            cluster.zip(rv).map(|(c, rv)| event_key(c, rv))
        }
        LineKind::Member { cluster } => quoted_after(line, &finders.rv).and_then(parse_u64).map(|rv| event_key(cluster, rv)),
    };
    key.map_or(Line::Other, Line::Event)
}

/// What one watch client saw.
#[derive(Debug, Default)]
pub struct WatchLog {
    /// (event key, receipt time in ns since the run's base instant).
    pub received: Vec<(u64, u64)>,
    /// HTTP status of the watch.
    pub status: u16,
    /// ERROR events received.
    pub errors: u64,
    /// Whether the stream ended (or failed) before it was told to stop.
    pub ended_early: bool,
    /// Why it ended early.
    pub end_reason: Option<String>,
    /// Lines received.
    pub lines: u64,
    /// Bytes received.
    pub bytes: u64,
    /// (event key, N of namespace load-N), from members' streams only.
    pub namespaces: Vec<(u64, u8)>,
}

/// Shared state of a set of watch clients.
pub struct WatchGroup {
    /// Receipt times count from here.
    pub base: Instant,
    /// Clients whose response headers arrived.
    pub connected: AtomicUsize,
    /// Set to stop every client.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// Field finders.
    pub finders: Finders,
}

/// One watch client: opens the stream, timestamps every event line until
/// told to stop.
pub async fn watch_client(group: Arc<WatchGroup>, addr: SocketAddr, path: String, kind: LineKind) -> WatchLog {
    let mut log = WatchLog::default();
    let mut stop = group.stop.clone();
    let result: Result<()> = async {
        let mut conn = Conn::connect(addr).await?;
        let response = conn.send(Method::GET, &path, Some("application/json"), None, Bytes::new()).await?;
        log.status = response.status().as_u16();
        group.connected.fetch_add(1, Ordering::Relaxed);
        let mut body = response.into_body();
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = stop.changed() => return Ok(()),
            };
            let Some(frame) = frame else {
                log.ended_early = true;
                log.end_reason = Some("stream ended".into());
                return Ok(());
            };
            let frame = frame?;
            let Some(data) = frame.data_ref() else { continue };
            let now = group.base.elapsed().as_nanos() as u64;
            log.bytes += data.len() as u64;
            let mut rest: &[u8] = data;
            if !pending.is_empty() {
                match memchr::memchr(b'\n', rest) {
                    Some(i) => {
                        pending.extend_from_slice(&rest[..i]);
                        rest = &rest[i + 1..];
                        let line = std::mem::take(&mut pending);
                        record(&mut log, &line, kind, &group.finders, now);
                    }
                    None => {
                        pending.extend_from_slice(rest);
                        continue;
                    }
                }
            }
            while let Some(i) = memchr::memchr(b'\n', rest) {
                record(&mut log, &rest[..i], kind, &group.finders, now);
                rest = &rest[i + 1..];
            }
            pending.extend_from_slice(rest);
        }
    }
    .await;
    if let Err(e) = result {
        if !*group.stop.borrow() {
            log.ended_early = true;
            log.end_reason = Some(e.to_string());
        }
    }
    log
}

fn record(log: &mut WatchLog, line: &[u8], kind: LineKind, finders: &Finders, now: u64) {
    if line.is_empty() {
        return;
    }
    log.lines += 1;
    match classify(line, kind, finders) {
        Line::Event(key) => {
            log.received.push((key, now));
            if let LineKind::Member { .. } = kind {
                if let Some(at) = finders.namespace.find(line) {
                    if let Some(d) = line.get(at + finders.namespace.needle().len()).filter(|d| d.is_ascii_digit()) {
                        log.namespaces.push((key, d - b'0'));
                    }
                }
            }
        }
        Line::Error => log.errors += 1,
        Line::Bookmark | Line::Other => {}
    }
}

/// The value of the next marker annotation: unique in the driver's process.
/// Every measure picks its pods in the same seeded order, so a serial that
/// started again at each measure wrote a later measure's markers with the
/// values the earlier one left on those pods: no-op patches, which a member
/// answers 200 with the object unchanged (no new resourceVersion, no watch
/// event), and the watch clients waited for events that never happen.
fn next_marker() -> u64 {
    static MARKERS: AtomicU64 = AtomicU64::new(0);
    MARKERS.fetch_add(1, Ordering::Relaxed) + 1
}

/// The merge patch that writes marker `serial`.
fn marker_patch(serial: u64) -> String {
    format!("{{\"metadata\":{{\"annotations\":{{\"bench.kubefold.io/marker\":\"{serial}\"}}}}}}")
}

/// Marker writes: `rate` merge patches per second to random load pods of the
/// members, each recorded as (event key, send time) once the member answers
/// with the new resourceVersion. A pod the member's churn has deleted (404)
/// is not a failure: another pod is picked at once (up to 5 tries a tick).
/// Each marker's value is new in the process ([`next_marker`]), so every
/// patch changes its pod, also when a pod is picked again.
pub async fn marker_writes(
    members: Vec<SocketAddr>,
    pods_per_member: usize,
    rate: f64,
    base: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<(u64, u64)>, u64) {
    let mut clients: Vec<crate::http::Client> = members.iter().map(|a| crate::http::Client::new(*a)).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let mut sent = Vec::new();
    let mut failures = 0;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return (sent, failures),
        }
        let mut tries = 0;
        let written = loop {
            tries += 1;
            let m = rng.random_range(0..clients.len());
            let i = rng.random_range(0..pods_per_member.max(1));
            let path = format!("/api/v1/namespaces/load-{}/pods/load-{i}", i % 10);
            let body = marker_patch(next_marker());
            let t = base.elapsed().as_nanos() as u64;
            match clients[m].request(Method::PATCH, &path, "application/merge-patch+json", Bytes::from(body)).await {
                Ok((200, reply)) => {
                    let rv = serde_json::from_slice::<serde_json::Value>(&reply)
                        .ok()
                        .and_then(|v| v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse::<u64>().ok()));
                    break rv.map(|rv| (event_key(m as u64, rv), t));
                }
                Ok((404, _)) if tries < 5 => continue,
                _ => break None,
            }
        };
        match written {
            Some(marker) => sent.push(marker),
            None => failures += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_value_is_never_written_twice() {
        // Two measures, one after the other, as the --etcd run makes them:
        // the second's values differ from the first's, so its patches of the
        // same pods change them (a member ignores a patch that changes nothing).
        let first: Vec<u64> = (0..50).map(|_| next_marker()).collect();
        let second: Vec<u64> = (0..50).map(|_| next_marker()).collect();
        let all: std::collections::HashSet<u64> = first.iter().chain(&second).copied().collect();
        assert_eq!(all.len(), 100, "{first:?} {second:?}");
        let patch: serde_json::Value = serde_json::from_str(&marker_patch(second[0])).unwrap();
        assert_eq!(patch["metadata"]["annotations"]["bench.kubefold.io/marker"], second[0].to_string());
    }

    #[test]
    fn lines_are_classified_by_their_annotations() {
        let f = Finders::new();
        let kubefold = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"load-1_member3","resourceVersion":"99","annotations":{"kubefold.io/cluster":"member3","kubefold.io/member-resource-version":"1234"}}}}"#;
        assert_eq!(classify(kubefold, LineKind::Kubefold, &f), Line::Event(event_key(2, 1234)));
        let member = br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"load-1","resourceVersion":"77"}}}"#;
        assert_eq!(classify(member, LineKind::Member { cluster: 4 }, &f), Line::Event(event_key(4, 77)));
        assert_eq!(classify(br#"{"type":"BOOKMARK","object":{}}"#, LineKind::Kubefold, &f), Line::Bookmark);
        assert_eq!(classify(br#"{"type":"ERROR","object":{}}"#, LineKind::Kubefold, &f), Line::Error);
        assert_eq!(member_index(b"member10"), Some(9));
        assert_eq!(member_index(b"other"), None);
    }
}
