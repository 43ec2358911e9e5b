//! Support of the fault and load tests (`tests/faults.rs`, `tests/load.rs`):
//! a kubefold over simulated members with one-second bookmarks, watch
//! clients that record what they see and check it as they go, read probes
//! with timeouts, member status and metrics, the exact-state check, and the
//! child's memory.

#![allow(dead_code)]

pub mod load;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::Value;

use crate::common::*;

/// Seconds between kubefold's watch bookmarks in these tests: a watch
/// client hears from kubefold at least this often, so a longer silence is
/// a stall.
pub const BOOKMARK_SECS: u64 = 1;

/// How long a get (and a watch's start) may take while a member misbehaves.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the list of every pod may take while a member misbehaves: the
/// Kubernetes API call latency SLO for cluster-wide lists (p99 under 30 s,
/// kubernetes/community sig-scalability/slos/api_call_latency.md). After
/// the soak's burst that list is 56,000 pods, 200 MB of JSON, read every
/// 2 s beside the other load on 2 cores.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// kubefold over simulated members, stopped on drop.
pub struct Fleet {
    /// kubefold.
    pub kf: Kubefold,
    /// The members, `member1..n`.
    pub members: Vec<(String, SimHandle)>,
    /// kubefold's data dir.
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Fleet {
    /// `n` demo members (churn `churn_per_sec` each, `tweak` applied to
    /// every member's config) and a kubefold over them, ready.
    pub fn start(n: usize, churn_per_sec: f64, tweak: impl Fn(&mut SimConfig)) -> Fleet {
        Fleet::start_with(n, churn_per_sec, tweak, &[])
    }

    /// [`Fleet::start`] with extra `kubefold serve` arguments.
    pub fn start_with(n: usize, churn_per_sec: f64, tweak: impl Fn(&mut SimConfig), extra: &[&str]) -> Fleet {
        let fleet = Fleet::launch(n, churn_per_sec, tweak, extra);
        fleet.kf.wait_ready();
        fleet
    }

    /// [`Fleet::start_with`] without waiting for kubefold to be ready.
    pub fn launch(n: usize, churn_per_sec: f64, tweak: impl Fn(&mut SimConfig), extra: &[&str]) -> Fleet {
        let members: Vec<(String, SimHandle)> = (1..=n)
            .map(|i| {
                let name = format!("member{i}");
                let mut config = SimConfig {
                    name: name.clone(),
                    workload: Workload::Demo,
                    churn_per_sec,
                    seed: i as u64,
                    ..SimConfig::default()
                };
                tweak(&mut config);
                let sim = kubefold_testdata::start(config).expect("simulator starts");
                (name, sim)
            })
            .collect();
        let (tmp, dir) = data_dir();
        let bookmarks = BOOKMARK_SECS.to_string();
        let mut args = vec!["--bookmark-interval-seconds", bookmarks.as_str()];
        args.extend_from_slice(extra);
        let kf = Kubefold::serve(&dir, &cluster_flags(&members), &args);
        Fleet { kf, members, dir, _tmp: tmp }
    }

    /// The member called `name`.
    pub fn sim(&self, name: &str) -> &SimHandle {
        &self.members.iter().find(|(n, _)| n == name).expect("member exists").1
    }

    /// kubefold's process id (found by its unique data dir).
    pub fn pid(&self) -> u32 {
        kubefold_pid(&self.dir)
    }
}

/// A blocking client with a total timeout.
pub fn client(timeout: Duration) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(timeout).build().unwrap()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `namespace/name` of an object.
pub fn key_of(o: &Value) -> String {
    format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap_or(""), o["metadata"]["name"].as_str().unwrap_or(""))
}

/// The reads a client makes while a member misbehaves, each within its
/// timeout: the list of every pod ([`LIST_TIMEOUT`]), a get of `cluster`'s pod
/// `web-0`, and a watch from just before the list's version (which must
/// replay and end).
pub fn probe_reads(kf: &Kubefold, cluster: &str) -> Result<(), String> {
    let http = client(READ_TIMEOUT);
    let started = std::time::Instant::now();
    // reqwest names only the step that failed; its sources say why (a
    // timeout, a connection reset, a body cut short).
    let why = |e: reqwest::Error| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        format!("{text} (after {:.1?})", started.elapsed())
    };
    let list = client(LIST_TIMEOUT).get(format!("{}/api/v1/pods", kf.url)).send().map_err(|e| format!("list: {}", why(e)))?;
    if list.status() != 200 {
        return Err(format!("list answered {}", list.status()));
    }
    // The body is read whole within the timeout (kubefold's part), then
    // parsed keeping only the names and the list's version (the test's
    // part: a 200 MB list parsed into `Value` every 2 s would compete with
    // kubefold for the same 2 cores).
    let body = list.bytes().map_err(|e| format!("list body: {}", why(e)))?;
    let list: ListNames = serde_json::from_slice(&body).map_err(|e| format!("list body: {e}"))?;
    drop(body);
    let from = list.metadata.resource_version.parse::<u64>().unwrap_or(0).saturating_sub(3);
    // web-0 of the demo workload: churn never deletes it.
    let name = ("default".to_string(), format!("web-0_{cluster}"));
    if !list.items.iter().any(|o| o.metadata.name == name.1) {
        return Err(format!("{} missing from the list", name.1));
    }
    let get = http
        .get(format!("{}/api/v1/namespaces/{}/pods/{}", kf.url, name.0, name.1))
        .send()
        .map_err(|e| format!("get {}/{}: {e}", name.0, name.1))?;
    if get.status() != 200 {
        return Err(format!("get {}/{} answered {}", name.0, name.1, get.status()));
    }
    let watch = http
        .get(format!("{}/api/v1/pods?watch=1&resourceVersion={from}&timeoutSeconds=1", kf.url))
        .send()
        .map_err(|e| format!("watch: {e}"))?;
    if watch.status() != 200 {
        return Err(format!("watch answered {}", watch.status()));
    }
    let body = watch.text().map_err(|e| format!("watch body: {e}"))?;
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line).map_err(|e| format!("watch line {line}: {e}"))?;
        if event["type"] == "ERROR" {
            return Err(format!("watch from {from} failed: {line}"));
        }
    }
    Ok(())
}

/// The parts of a list [`probe_reads`] checks; serde skips the rest.
#[derive(serde::Deserialize)]
struct ListNames {
    metadata: ListMeta,
    items: Vec<NamedItem>,
}

#[derive(serde::Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
}

#[derive(serde::Deserialize)]
struct NamedItem {
    metadata: ItemMeta,
}

#[derive(serde::Deserialize)]
struct ItemMeta {
    #[serde(default)]
    name: String,
}

/// Asserts [`probe_reads`].
pub fn assert_reads_served(kf: &Kubefold, cluster: &str, during: &str) {
    if let Err(e) = probe_reads(kf, cluster) {
        panic!("{during}: kubefold did not serve reads: {e}");
    }
}

/// `status` of `/admin/v1/clusters/{cluster}`.
pub fn status(kf: &Kubefold, cluster: &str) -> Value {
    kf.get_json(&format!("/admin/v1/clusters/{cluster}"))["status"].clone()
}

/// A status counter (`relists`, `reconnects`, `events`) of a cluster.
pub fn status_count(kf: &Kubefold, cluster: &str, field: &str) -> u64 {
    status(kf, cluster)[field].as_u64().unwrap_or(0)
}

/// The value of a Prometheus series of `/metrics` whose labels include
/// every `labels` pair (0 when absent).
pub fn metric(kf: &Kubefold, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (code, text) = kf.get("/metrics");
    assert_eq!(code, 200, "/metrics: {text}");
    metric_in(&text, name, labels)
}

/// [`metric`] over an exposition text.
pub fn metric_in(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What a [`WatchClient`] saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The state it reconstructed: `namespace/name` to kubefold RV.
    pub objects: BTreeMap<String, u64>,
    /// The last RV it reached (event, bookmark or list).
    pub last_rv: u64,
    /// ADDED, MODIFIED and DELETED events.
    pub events: u64,
    /// BOOKMARK events.
    pub bookmarks: u64,
    /// Lists made (the first, and after 410).
    pub lists: u64,
    /// Watch requests made.
    pub watches: u64,
    /// ERROR events and failed requests.
    pub errors: Vec<String>,
    /// RVs not strictly increasing, or lists going back.
    pub violations: Vec<String>,
    /// The longest silence of an open watch.
    pub longest_silence: Duration,
    /// When it last heard from kubefold.
    pub last_heard: Option<Instant>,
}

/// A client that lists pods, then watches from the list's RV with
/// bookmarks, resuming from the last RV when a watch ends and relisting on
/// 410, as an informer does; it checks that RVs strictly increase.
pub struct WatchClient {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WatchClient {
    /// Starts one against `url` (`/api/v1/pods`, all namespaces).
    pub fn start(url: &str) -> WatchClient {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, url) = (seen.clone(), stop.clone(), url.to_string());
        let thread = std::thread::spawn(move || watch_loop(&url, &s, &st));
        WatchClient { seen, stop, thread: Some(thread) }
    }

    /// What it saw so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// Stops it and returns what it saw.
    pub fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen()
    }
}

impl Drop for WatchClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn watch_loop(url: &str, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let http = client(Duration::from_secs(25));
    'list: while !stop.load(Ordering::Relaxed) {
        let (rv, objects) = match paged_list(&http, url, "/api/v1/pods") {
            Ok(list) => list,
            Err(e) => {
                seen.lock().unwrap().errors.push(format!("list: {e}"));
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        {
            let mut s = seen.lock().unwrap();
            if rv < s.last_rv {
                let v = format!("list at {rv} after RV {}", s.last_rv);
                s.violations.push(v);
            }
            s.last_rv = rv;
            s.lists += 1;
            s.objects = objects;
            s.last_heard = Some(Instant::now());
        }
        loop {
            if stop.load(Ordering::Relaxed) {
                break 'list;
            }
            let from = seen.lock().unwrap().last_rv;
            seen.lock().unwrap().watches += 1;
            let response = http
                .get(format!("{url}/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds=15"))
                .send();
            let response = match response {
                Ok(r) if r.status() == 200 => r,
                Ok(r) => {
                    seen.lock().unwrap().errors.push(format!("watch answered {}", r.status()));
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Err(e) => {
                    seen.lock().unwrap().errors.push(format!("watch: {e}"));
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            };
            seen.lock().unwrap().last_heard = Some(Instant::now());
            for line in BufReader::new(response).lines() {
                if stop.load(Ordering::Relaxed) {
                    break 'list;
                }
                let line = match line {
                    Ok(l) => l,
                    Err(e) => {
                        seen.lock().unwrap().errors.push(format!("watch body: {e}"));
                        break;
                    }
                };
                if line.trim().is_empty() {
                    continue;
                }
                let mut s = seen.lock().unwrap();
                let now = Instant::now();
                if let Some(last) = s.last_heard {
                    s.longest_silence = s.longest_silence.max(now - last);
                }
                s.last_heard = Some(now);
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    s.violations.push(format!("unreadable line: {line}"));
                    continue;
                };
                let object = &event["object"];
                let rv = rv_of(object);
                match event["type"].as_str().unwrap_or_default() {
                    "BOOKMARK" => {
                        if rv < s.last_rv {
                            let v = format!("bookmark {rv} after RV {}", s.last_rv);
                            s.violations.push(v);
                        }
                        s.last_rv = s.last_rv.max(rv);
                        s.bookmarks += 1;
                    }
                    "ERROR" => {
                        s.errors.push(format!("ERROR event: {object}"));
                        if object["code"] == 410 {
                            drop(s);
                            continue 'list;
                        }
                        break;
                    }
                    event_type => {
                        if rv <= s.last_rv {
                            let v = format!("{event_type} {} at RV {rv} after RV {}", key_of(object), s.last_rv);
                            s.violations.push(v);
                        }
                        s.last_rv = s.last_rv.max(rv);
                        s.events += 1;
                        if event_type == "DELETED" {
                            s.objects.remove(&key_of(object));
                        } else {
                            s.objects.insert(key_of(object), rv);
                        }
                    }
                }
            }
        }
    }
}

/// A list in pages of 500, as informers list: the list RV and
/// `namespace/name` to RV. A 410 on a continue token restarts it.
pub fn paged_list(http: &reqwest::blocking::Client, url: &str, path: &str) -> Result<(u64, BTreeMap<String, u64>), String> {
    let mut objects = BTreeMap::new();
    let mut list_rv = 0;
    let mut token: Option<String> = None;
    loop {
        let mut request = http.get(format!("{url}{path}")).query(&[("limit", "500")]);
        if let Some(t) = &token {
            request = request.query(&[("continue", t.as_str())]);
        }
        let page: Value = request
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .map_err(|e| e.to_string())?;
        if token.is_none() {
            list_rv = rv_of(&page);
        }
        objects.extend(page["items"].as_array().into_iter().flatten().map(|o| (key_of(o), rv_of(o))));
        match page["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t.to_string()),
            None => return Ok((list_rv, objects)),
        }
    }
}

/// kubefold's pods, `namespace/name` to RV, and the list RV.
pub fn kubefold_pods(kf: &Kubefold) -> (u64, BTreeMap<String, u64>) {
    paged_list(&client(Duration::from_secs(60)), &kf.url, "/api/v1/pods").unwrap_or_else(|e| panic!("list kubefold's pods: {e}"))
}

/// Checks what a watch client saw: no RV violation, and its reconstructed
/// state equal to kubefold's list once it reached the list's RV (waits up
/// to 30 s for it to catch up).
pub fn assert_watch_client_agrees(kf: &Kubefold, client: &WatchClient, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (list_rv, listed) = kubefold_pods(kf);
        let seen = client.seen();
        assert!(seen.violations.is_empty(), "{name}: RVs not strictly increasing: {:?}", &seen.violations[..seen.violations.len().min(5)]);
        if seen.last_rv == list_rv && seen.objects == listed {
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = listed.iter().filter(|(k, v)| seen.objects.get(*k) != Some(*v)).take(5).collect();
            let extra: Vec<_> = seen.objects.iter().filter(|(k, v)| listed.get(*k) != Some(*v)).take(5).collect();
            panic!(
                "{name}: the watch client's state at RV {} differs from kubefold's list at {list_rv}: list has {missing:?}, client has {extra:?}; errors {:?}",
                seen.last_rv,
                &seen.errors[seen.errors.len().saturating_sub(5)..]
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A member's objects of a type, key to member RV, and its list RV.
pub fn member_objects(sim: &SimHandle, resource_path: &str) -> (u64, BTreeMap<String, u64>) {
    let (code, body) = http_get(&format!("{}{resource_path}", sim.url()));
    assert_eq!(code, 200, "member list {resource_path}: {body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    (rv_of(&list), list["items"].as_array().unwrap().iter().map(|o| (key_of(o), rv_of(o))).collect())
}

/// kubefold's objects of a member and type, key to member RV.
pub fn kubefold_objects(kf: &Kubefold, cluster: &str, resource_path: &str) -> BTreeMap<String, u64> {
    let list = kf.get_json(&format!("/clusters/{cluster}{resource_path}"));
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let member_rv = o["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap_or("0");
            (key_of(o), member_rv.parse().unwrap_or(0))
        })
        .collect()
}

/// The exact check for a quiet member (no churn): kubefold holds exactly
/// the member's objects of the type, each at the member's RV, within
/// `limit`. Stronger than `assert_converged`, which lets kubefold hold an
/// object at a member RV above the member's list (as after an RV reset).
pub fn assert_same_objects(kf: &Kubefold, cluster: &str, sim: &SimHandle, resource_path: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (_, member) = member_objects(sim, resource_path);
        let mine = kubefold_objects(kf, cluster, resource_path);
        if member == mine {
            return;
        }
        if Instant::now() > deadline {
            let wrong: Vec<String> = member
                .iter()
                .filter(|(k, v)| mine.get(*k) != Some(*v))
                .take(5)
                .map(|(k, v)| format!("{k}: member {v}, kubefold {:?}", mine.get(k)))
                .collect();
            let extra: Vec<&String> = mine.keys().filter(|k| !member.contains_key(*k)).take(5).collect();
            panic!(
                "{cluster}{resource_path}: kubefold differs from the member after {limit:?}: {wrong:?}, only in kubefold {extra:?}; status {}",
                status(kf, cluster)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until a member has had no change for `quiet` (its controllers
/// settled), at most 20 s.
pub fn wait_member_quiet(sim: &SimHandle, quiet: Duration) {
    let mut last = sim.resource_version();
    let mut since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    while since.elapsed() < quiet && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let rv = sim.resource_version();
        if rv != last {
            last = rv;
            since = Instant::now();
        }
    }
}

/// The pid of the `kubefold serve` child whose data dir is `dir`.
pub fn kubefold_pid(dir: &std::path::Path) -> u32 {
    let out = std::process::Command::new("pgrep").arg("-f").arg("--").arg(format!("--data-dir {}", dir.display())).output().expect("pgrep runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<u32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert_eq!(pids.len(), 1, "one kubefold serves {}: {text}", dir.display());
    pids[0]
}

/// Resident memory of a process in KiB (`VmRSS`), and its peak (`VmHWM`).
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The soft and hard limits of open files of this process.
pub fn open_files_limits() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default();
    let field = |i: usize| line.split_whitespace().nth(i).and_then(|v| v.parse().ok()).unwrap_or(1024);
    (field(3), field(4))
}

/// A JSON request to a member (create/patch/delete), asserting success.
pub fn member_request(method: reqwest::Method, url: &str, content_type: &str, body: Value) -> Value {
    let response = client(Duration::from_secs(10))
        .request(method, url)
        .header("Content-Type", content_type)
        .body(body.to_string())
        .send()
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let code = response.status();
    let text = response.text().unwrap_or_default();
    assert!(code.is_success(), "{url}: {code} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// Sets a label on a member's pod (one new member RV); returns the RV.
pub fn label_pod(sim: &SimHandle, namespace: &str, name: &str, key: &str, value: &str) -> u64 {
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    let pod = member_request(
        reqwest::Method::PATCH,
        &format!("{}/api/v1/namespaces/{namespace}/pods/{name}", sim.url()),
        "application/merge-patch+json",
        patch,
    );
    rv_of(&pod)
}

/// Open descriptors of a process.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// What [`HostileClients`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostileStats {
    /// Rounds run.
    pub rounds: u64,
    /// Watches opened (and dropped) with a selector matching nothing.
    pub watches: u64,
    /// Of them, those not answered 200 within 5 s.
    pub unanswered: u64,
    /// Idle connections opened (that never sent a byte), held 3 s, dropped.
    pub idle: u64,
}

/// Hostile clients beside the soak's load, in rounds until stopped: 200
/// watches whose selector matches nothing, each dropped once answered
/// (FIN after the response head, as a client that gave up), and 100
/// connections that never send a byte, held 3 s and dropped.
pub struct HostileClients {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<HostileStats>>,
}

impl HostileClients {
    /// Starts them against kubefold at `url` (`http://HOST:PORT`).
    pub fn start(url: &str) -> HostileClients {
        let addr = url.trim_start_matches("http://").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut stats = HostileStats::default();
            while !stopping.load(Ordering::Relaxed) {
                stats.rounds += 1;
                let mut watches = Vec::new();
                for _ in 0..200 {
                    stats.watches += 1;
                    let Ok(mut conn) = std::net::TcpStream::connect(&addr) else {
                        stats.unanswered += 1;
                        continue;
                    };
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = write!(conn, "GET /api/v1/pods?watch=1&labelSelector=hostile%3Dnone HTTP/1.1\r\nHost: kubefold\r\nUser-Agent: hostile/1.0\r\n\r\n");
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    if !head.starts_with(b"HTTP/1.1 200") {
                        stats.unanswered += 1;
                    }
                    watches.push(conn);
                }
                for conn in watches {
                    let _ = conn.shutdown(std::net::Shutdown::Write);
                }
                let idle: Vec<_> = (0..100).filter_map(|_| std::net::TcpStream::connect(&addr).ok()).collect();
                stats.idle += idle.len() as u64;
                std::thread::sleep(Duration::from_secs(3));
                drop(idle);
                std::thread::sleep(Duration::from_secs(2));
            }
            stats
        });
        HostileClients { stop, thread: Some(thread) }
    }

    /// Stops them (after the round under way) and says what they did.
    pub fn stop(mut self) -> HostileStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default()
    }
}

impl Drop for HostileClients {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
