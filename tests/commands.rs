//! The commands as operators run them: `kubefold demo`, `kubefold sim`,
//! `kubefold resolve`, and `kubefold serve` with a member reached through a
//! kubeconfig context, with the estimator metrics, periodic re-probing and a
//! SIGHUP reload of the estimator section. Every process runs the real
//! binary in a temporary working directory, on free loopback ports, and is
//! stopped (and checked gone) before the test ends.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{demo_members, http_get, kubectl, wait_for, Kubefold};
use serde_json::{json, Value};

/// A kubefold child process whose every stdout line is kept.
struct Process {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    logs: Arc<Mutex<String>>,
}

impl Process {
    /// Starts `kubefold ARGS` in `cwd`.
    fn start(args: &[&str], cwd: &Path) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubefold"))
            .args(args)
            .current_dir(cwd)
            .env("RUST_LOG", "info,sled=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubefold starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let logs = common::capture(child.stderr.take().unwrap());
        Process { child, lines, logs }
    }

    /// The rest of the first stdout line starting with `prefix`.
    fn line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self.lines.lock().unwrap().iter().find_map(|l| l.strip_prefix(prefix)) {
                return line.to_string();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("kubefold exited ({status}) before printing {prefix:?}: {}", self.logs.lock().unwrap());
            }
            assert!(Instant::now() < deadline, "kubefold never printed {prefix:?}: {:?}", self.lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits (SIGKILL after 30 s); returns whether it exited cleanly.
    fn stop(&mut self) -> bool {
        let _ = Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A loopback port nothing listens on (just released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `host:port` of an `http://host:port` URL.
fn authority(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may hold spaces.
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            children.push(child);
        }
    }
    children
}

fn get_json(url: &str) -> Value {
    let (code, body) = http_get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn post_json(url: &str, body: &Value) {
    let response = reqwest::blocking::Client::new().post(url).json(body).send().unwrap();
    let code = response.status().as_u16();
    assert!(matches!(code, 200 | 201), "POST {url}: {code} {}", response.text().unwrap_or_default());
}

fn rv(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("resourceVersion {v} is not an integer"))
}

/// The estimator table of the kubefold at `url`.
fn estimators(url: &str) -> Vec<Value> {
    get_json(&format!("{url}/admin/v1/estimators")).as_array().cloned().unwrap_or_default()
}

fn row<'a>(rows: &'a [Value], cluster: &str) -> &'a Value {
    rows.iter().find(|r| r["cluster"] == cluster).unwrap_or(&Value::Null)
}

/// Polls the estimator table until `want` holds; returns it and how long it took.
fn wait_table(url: &str, within: Duration, what: &str, want: impl Fn(&[Value]) -> bool) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    loop {
        let rows = estimators(url);
        if want(&rows) {
            return (rows, started.elapsed());
        }
        assert!(started.elapsed() < within, "the estimator table never showed {what}: {rows:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a `?watch=true` stream on a thread of its own, one JSON value per
/// line, each with the time it arrived.
fn watch_lines(url: &str) -> mpsc::Receiver<(Instant, Value)> {
    let (tx, rx) = mpsc::channel();
    let response = reqwest::blocking::Client::builder().timeout(None).build().unwrap().get(url).send().unwrap();
    assert_eq!(response.status().as_u16(), 200, "GET {url}");
    std::thread::spawn(move || {
        for line in BufReader::new(response).lines().map_while(Result::ok) {
            if line.trim().is_empty() {
                continue;
            }
            if tx.send((Instant::now(), serde_json::from_str(&line).expect("a JSON line"))).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first event satisfying `want` within `within`, and when it arrived.
fn expect_event(events: &mpsc::Receiver<(Instant, Value)>, within: Duration, what: &str, want: impl Fn(&Value) -> bool) -> (Instant, Value) {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok((at, event)) if want(&event) => return (at, event),
            Ok((_, event)) => seen.push(event),
            Err(_) => break,
        }
    }
    panic!("no watch event {what} within {within:?}; saw {seen:#?}");
}

/// Rows of a table printed like `kubectl get` (cells start under their
/// header's first letter; a cell may hold spaces), keyed by header.
fn parse_printed_table(text: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines.next().expect("a header line");
    let mut starts = Vec::new();
    let mut previous = ' ';
    for (i, c) in header.char_indices() {
        if c != ' ' && previous == ' ' {
            starts.push(i);
        }
        previous = c;
    }
    let names: Vec<String> = starts.iter().enumerate().map(|(k, &s)| header[s..*starts.get(k + 1).unwrap_or(&header.len())].trim().to_string()).collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            names
                .iter()
                .enumerate()
                .map(|(k, name)| {
                    let from = starts[k].min(line.len());
                    let to = starts.get(k + 1).map_or(line.len(), |&e| e.min(line.len()));
                    (name.clone(), line[from..to].trim().to_string())
                })
                .collect()
        })
        .collect()
}

#[test]
fn kubefold_demo_serves_three_members_and_its_estimator_table_follows_a_kubectl_edit() {
    crate::require_kubectl!();
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let mut demo = Process::start(&["demo", "--listen", &listen], cwd.path());
    let url = demo.line("kubefold listening on ");
    assert_eq!(url, format!("http://{listen}"));
    let members: Vec<String> = (1..=3).map(|i| demo.line(&format!("member cluster member{i}: "))).collect();
    // `control plane karmada: URL (estimator stand-in of member1 on ADDR)`.
    let control_plane_line = demo.line("control plane karmada: ");
    let (control_plane, rest) = control_plane_line.split_once(' ').unwrap();
    let stand_in: SocketAddr = rest.trim_start_matches("(estimator stand-in of member1 on ").trim_end_matches(')').parse().unwrap();
    // Printed after the control plane's line: waited for, not read at once.
    let edit = format!("kubectl --server {control_plane} -n karmada-system edit service karmada-scheduler-estimator-member1");
    wait_for(Duration::from_secs(60), "the demo's edit hint", || demo.lines.lock().unwrap().iter().any(|l| l.contains(&edit)));
    wait_for(Duration::from_secs(90), "the demo ready", || http_get(&format!("{url}/readyz")).0 == 200);
    println!("kubefold demo: listening after start, ready {:?} after start", started.elapsed());
    assert!(cwd.path().join("kubefold-data").is_dir(), "the demo keeps its data in ./kubefold-data");

    // Issue 2: kubectl get pods -A shows every member, CLUSTER column, qualified names.
    let server = url.as_str();
    let kubectl_at = |args: &[&str]| {
        let mut all = vec!["--server", server];
        all.extend_from_slice(args);
        let (ok, out, err) = kubectl(&all, None);
        assert!(ok, "kubectl {args:?}: {err}");
        out
    };
    let table = parse_printed_table(&kubectl_at(&["get", "pods", "-A"]));
    let clusters: BTreeSet<&str> = table.iter().map(|r| r["CLUSTER"].as_str()).collect();
    assert_eq!(clusters, BTreeSet::from(["member1", "member2", "member3"]));
    for r in &table {
        assert!(r["NAME"].ends_with(&format!("_{}", r["CLUSTER"])), "{r:?} is not qualified by its cluster");
    }
    for cluster in ["member1", "member2", "member3"] {
        assert!(table.iter().any(|r| r["NAMESPACE"] == "default" && r["NAME"] == format!("web-0_{cluster}")), "web-0_{cluster} missing");
    }
    let listed: Value = serde_json::from_str(&kubectl_at(&["get", "pods", "-A", "-o", "json"])).unwrap();
    // kubectl -o json merges pages into a List; kubefold's head comes after it.
    let head = rv(&get_json(&format!("{url}/api/v1/pods?limit=1"))["metadata"]["resourceVersion"]);
    let items = listed["items"].as_array().unwrap();
    assert!(!items.is_empty());
    for item in items {
        let cluster = item["metadata"]["annotations"]["kubefold.io/cluster"].as_str().expect("the cluster annotation");
        assert!(clusters.contains(cluster));
        assert!(rv(&item["metadata"]["resourceVersion"]) <= head, "item RV above the list RV {head}");
    }

    // Issue 6: member1 ExternalName to the stand-in (reachable), member2
    // ClusterIP (unreachable, and says why), member3 DNS fallback.
    let (rows, took) = wait_table(&url, Duration::from_secs(30), "member1 and member2 probed", |rows| {
        rows.len() == 3 && row(rows, "member1")["probe"]["reachable"] == true && row(rows, "member2")["probe"]["reachable"] == false
    });
    println!("estimator table probed {took:?} after the demo was ready");
    assert_eq!(row(&rows, "member1")["rule"], "externalName");
    assert_eq!(row(&rows, "member1")["addresses"], json!([stand_in.to_string()]));
    assert_eq!(row(&rows, "member2")["rule"], "clusterIP");
    assert_eq!(row(&rows, "member2")["addresses"], json!(["127.0.0.42:10352"]));
    assert_eq!(row(&rows, "member2")["probe"]["failure"], "connect");
    let error = row(&rows, "member2")["probe"]["error"].as_str().unwrap();
    assert!(error.starts_with("127.0.0.42:10352: ") && error.contains("refused"), "{error}");
    assert_eq!(row(&rows, "member3")["rule"], "dnsFallback");
    assert_eq!(row(&rows, "member3")["addresses"][0], "karmada-scheduler-estimator-member3.karmada-system.svc.cluster.local:10352");

    // kubectl edit of member1's Service on the control plane (a scripted
    // editor moves targetPort to a closed port); the watch stream follows.
    // The simulator serves no OpenAPI document: no client-side validation.
    let events = watch_lines(&format!("{url}/admin/v1/estimators?watch=true"));
    for _ in 0..3 {
        expect_event(&events, Duration::from_secs(5), "the current table", |e| e["type"] == "ADDED");
    }
    let moved = free_port();
    let editor = home.path().join("editor.sh");
    std::fs::write(&editor, format!("#!/bin/sh\nsed -i 's/targetPort: {}$/targetPort: {moved}/' \"$1\"\n", stand_in.port())).unwrap();
    Command::new("chmod").arg("+x").arg(&editor).status().unwrap();
    let edit_started = Instant::now();
    let out = Command::new("timeout")
        .args(["60", "kubectl", "--server", control_plane, "-n", "karmada-system", "edit", "service", "karmada-scheduler-estimator-member1"])
        .env("KUBECONFIG", "/dev/null")
        .env("TMPDIR", home.path())
        .env("HOME", home.path())
        .env("EDITOR", &editor)
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl edit: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("edited"), "{}", String::from_utf8_lossy(&out.stdout));
    let edited = edit_started.elapsed();
    let moved_address = json!([format!("127.0.0.1:{moved}")]);
    let (arrived, _) = expect_event(&events, Duration::from_secs(10), "member1 moved", |e| {
        e["type"] == "MODIFIED" && e["object"]["cluster"] == "member1" && e["object"]["addresses"] == moved_address
    });
    println!(
        "kubectl edit ran {edited:?} (start to exit); the watch stream delivered the change {:?} after the edit started",
        arrived - edit_started
    );
    let (probed_at, probed) = expect_event(&events, Duration::from_secs(10), "member1 unreachable at its new address", |e| {
        e["object"]["cluster"] == "member1" && e["object"]["addresses"] == moved_address && e["object"]["probe"]["reachable"] == false
    });
    assert_eq!(probed["object"]["probe"]["failure"], "connect");
    println!("member1 probed unreachable at its new address {:?} after the edit started", probed_at - edit_started);

    // Everything the demo started lives in its process and dies with it.
    assert_eq!(children_of(demo.pid()), Vec::<u32>::new(), "the demo runs no child processes");
    let mut addresses = vec![authority(&url), authority(control_plane), stand_in];
    addresses.extend(members.iter().map(|m| authority(m)));
    for addr in &addresses {
        assert!(accepts(*addr), "{addr} is not listening while the demo runs");
    }
    let stopping = Instant::now();
    assert!(demo.stop(), "the demo exits cleanly on SIGTERM: {}", demo.logs.lock().unwrap());
    println!("demo stopped in {:?}", stopping.elapsed());
    for addr in &addresses {
        assert!(!accepts(*addr), "{addr} still listens after the demo stopped");
    }
}

#[test]
fn kubefold_sim_serves_version_the_demo_workload_and_extra_pods() {
    crate::require_kubectl!();
    let cwd = tempfile::tempdir().unwrap();
    let pods = |url: &str| -> Vec<Value> { get_json(&format!("{url}/api/v1/pods"))["items"].as_array().unwrap().clone() };
    let mut plain = Process::start(&["sim", "--name", "m", "--listen", "127.0.0.1:0", "--workload", "demo"], cwd.path());
    let mut more = Process::start(&["sim", "--name", "m", "--listen", "127.0.0.1:0", "--workload", "demo", "--pods", "50"], cwd.path());
    let plain_url = plain.line("kubefold sim: cluster m listening on ");
    let url = more.line("kubefold sim: cluster m listening on ");
    assert_ne!(authority(&url).port(), 0, "the sim reports the port it picked");

    let version = get_json(&format!("{url}/version"));
    assert_eq!(version["gitVersion"], "v1.33.1");
    assert_eq!((version["major"].as_str(), version["minor"].as_str()), (Some("1"), Some("33")));

    let demo_pods = pods(&plain_url);
    let all_pods = pods(&url);
    assert_eq!(all_pods.len(), demo_pods.len() + 50, "--pods 50 adds 50 pods to the demo workload");
    let key = |p: &Value| format!("{}/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap());
    let names: BTreeSet<String> = all_pods.iter().map(key).collect();
    for web in ["default/web-0", "default/web-1", "default/web-2"] {
        assert!(names.contains(web), "{web} missing");
    }
    for pod in demo_pods.iter().filter(|p| p["metadata"]["namespace"] == "default" && p["metadata"]["name"].as_str().unwrap().starts_with("web-")) {
        assert!(names.contains(&key(pod)));
    }
    let namespaces: BTreeSet<&str> = all_pods.iter().map(|p| p["metadata"]["namespace"].as_str().unwrap()).collect();
    assert!(namespaces.len() > 1, "pods spread over namespaces: {namespaces:?}");
    for pod in &all_pods {
        assert!(pod["spec"]["containers"].as_array().is_some_and(|c| !c.is_empty()), "{} has no containers", key(pod));
        assert!(pod["status"]["phase"].is_string(), "{} has no phase", key(pod));
    }
    let statefulsets = get_json(&format!("{url}/apis/apps/v1/namespaces/default/statefulsets"));
    assert!(statefulsets["items"].as_array().unwrap().iter().any(|s| s["metadata"]["name"] == "web"));
    assert!(!get_json(&format!("{url}/api/v1/nodes"))["items"].as_array().unwrap().is_empty());
    let (ok, out, err) = kubectl(&["--server", &url, "get", "pods", "-A"], None);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), all_pods.len() + 1, "kubectl lists every pod");

    for (sim, url) in [(&mut plain, &plain_url), (&mut more, &url)] {
        assert!(sim.stop(), "the sim exits cleanly on SIGTERM");
        assert!(!accepts(authority(url)), "{url} still listens");
    }
}

#[test]
fn a_member_given_as_kubeconfig_and_context_is_served_through_that_context() {
    let members = demo_members(1, 0.0);
    let sim = &members[0].1;
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: right\n  cluster:\n    server: {}\n- name: wrong\n  cluster:\n    server: {dead}\nusers:\n- name: someone\n  user: {{}}\ncontexts:\n- name: right\n  context:\n    cluster: right\n    user: someone\n- name: wrong\n  context:\n    cluster: wrong\n    user: someone\ncurrent-context: wrong\n",
            sim.url()
        ),
    )
    .unwrap();
    let flag = format!("{}#right", kubeconfig.display());
    let kf = Kubefold::serve(&dir.path().join("data"), &[("member1".to_string(), flag)], &[]);
    let started = Instant::now();
    kf.wait_ready();
    println!("member1 synced through the kubeconfig context in {:?}", started.elapsed());
    let member: BTreeSet<String> = get_json(&format!("{}/api/v1/pods", sim.url()))["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}/{}_member1", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()))
        .collect();
    let served = kf.get_json("/api/v1/pods");
    let mine: BTreeSet<String> = served["items"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|p| assert_eq!(p["metadata"]["annotations"]["kubefold.io/cluster"], "member1"))
        .map(|p| format!("{}/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert!(!member.is_empty());
    assert_eq!(mine, member, "kubefold serves the pods of the cluster of context `right`, not the current context");
    kf.stop();
    for (_, sim) in members {
        sim.stop();
    }
}

/// A kubefold config with members `member1..3` (unreachable: only their
/// estimators matter here) and the given `estimator` section.
fn write_config(path: &Path, estimator: &str) {
    let dead = |_| format!("http://127.0.0.1:{}", free_port());
    let clusters: Vec<String> = (1..=3).map(|i| format!("- {{name: member{i}, url: '{}'}}", dead(i))).collect();
    std::fs::write(path, format!("clusters:\n{}\nestimator:\n{estimator}", clusters.join("\n"))).unwrap();
}

/// The value of the series `name{labels}` in a Prometheus text page.
fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

#[test]
fn estimator_metrics_count_endpoints_by_rule_probe_failures_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = TcpListener::bind("127.0.0.1:0").unwrap();
    let stand_in_addr = stand_in.local_addr().unwrap();
    let closed = free_port();
    let config = dir.path().join("kubefold.yaml");
    write_config(
        &config,
        &format!("  timeout: 1s\n  probeIntervalSeconds: 1\n  probeDnsNames: false\n  static:\n    member1: '{stand_in_addr}'\n    member2: '127.0.0.1:{closed}'\n"),
    );
    let kf = Kubefold::serve(&dir.path().join("data"), &[], &["--config", config.to_str().unwrap()]);
    let (rows, took) = wait_table(&kf.url, Duration::from_secs(20), "both static entries probed", |rows| {
        row(rows, "member1")["probe"]["reachable"] == true && row(rows, "member2")["probe"]["reachable"] == false
    });
    println!("static entries probed {took:?} after start");
    assert_eq!(row(&rows, "member3")["rule"], "dnsFallback");
    assert_eq!(row(&rows, "member3")["probe"]["failure"], "skipped");

    let page = kf.get("/metrics").1;
    let endpoints = |rule: &str| metric(&page, &format!("kubefold_estimator_endpoints{{rule=\"{rule}\"}}"));
    assert_eq!(endpoints("static"), Some(2.0), "{page}");
    assert_eq!(endpoints("dnsFallback"), Some(1.0));
    for rule in ["externalName", "clusterIP", "headless"] {
        assert_eq!(endpoints(rule), Some(0.0), "{rule}");
    }
    let failures = |page: &str, cluster: &str| metric(page, &format!("kubefold_estimator_probe_failures_total{{cluster=\"{cluster}\"}}"));
    let first = failures(&page, "member2").expect("member2's failures counted");
    assert!(first >= 1.0);
    // Exported at zero from the start (Prometheus instrumentation guide).
    assert_eq!(failures(&page, "member1"), Some(0.0), "a reachable estimator has no failures");
    assert_eq!(failures(&page, "member3"), Some(0.0), "a skipped probe is no failure");
    let probes = metric(&page, "kubefold_estimator_probe_duration_seconds_count").expect("the probe latency histogram");
    assert!(probes >= 3.0, "{probes} probes");
    let seconds = metric(&page, "kubefold_estimator_probe_duration_seconds_sum").unwrap();
    assert!(seconds >= 0.0 && seconds < probes * 1.5, "each probe within the 1 s timeout: {seconds} s over {probes}");
    assert!(
        ["1", "1.0"].iter().any(|le| page.contains(&format!("kubefold_estimator_probe_duration_seconds_bucket{{le=\"{le}\"}}"))),
        "buckets up to the timeout: {page}"
    );
    println!("probe latency: {:.2} ms average over {probes} probes", seconds / probes * 1000.0);

    // Periodic probes keep counting.
    wait_for(Duration::from_secs(10), "more probe failures of member2", || failures(&kf.get("/metrics").1, "member2").is_some_and(|n| n > first));
    drop(stand_in);
    kf.stop();
}

#[test]
fn periodic_probes_follow_an_estimator_that_stops_and_starts_listening_at_the_same_address() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = stand_in.local_addr().unwrap();
    let config = dir.path().join("kubefold.yaml");
    write_config(&config, &format!("  timeout: 1s\n  probeIntervalSeconds: 1\n  probeDnsNames: false\n  static:\n    member1: '{addr}'\n"));
    let kf = Kubefold::serve(&dir.path().join("data"), &[], &["--config", config.to_str().unwrap()]);
    let at_addr = |rows: &[Value], reachable: bool| {
        row(rows, "member1")["addresses"] == json!([addr.to_string()]) && row(rows, "member1")["probe"]["reachable"] == reachable
    };
    wait_table(&kf.url, Duration::from_secs(20), "member1 reachable", |rows| at_addr(rows, true));

    drop(stand_in);
    let (rows, took) = wait_table(&kf.url, Duration::from_secs(10), "member1 unreachable", |rows| at_addr(rows, false));
    assert_eq!(row(&rows, "member1")["probe"]["failure"], "connect");
    println!("a stopped estimator was reported unreachable {took:?} later (probe interval 1 s)");

    let again = TcpListener::bind(addr).expect("the same address again");
    let (_, took) = wait_table(&kf.url, Duration::from_secs(10), "member1 reachable again", |rows| at_addr(rows, true));
    println!("a restarted estimator was reported reachable {took:?} later");
    drop(again);
    kf.stop();
}

#[test]
fn sighup_reloads_the_estimator_section_and_an_invalid_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = TcpListener::bind("127.0.0.1:0").unwrap();
    let stand_in_addr = stand_in.local_addr().unwrap();
    let closed = free_port();
    let config = dir.path().join("kubefold.yaml");
    write_config(&config, &format!("  timeout: 1s\n  probeIntervalSeconds: 1\n  probeDnsNames: false\n  static:\n    member2: '127.0.0.1:{closed}'\n"));
    let mut kf = Kubefold::serve(&dir.path().join("data"), &[], &["--config", config.to_str().unwrap()]);
    let dns = |prefix: &str| format!("{prefix}-member3.karmada-system.svc.cluster.local:10352");
    wait_table(&kf.url, Duration::from_secs(20), "the initial table", |rows| {
        row(rows, "member2")["probe"]["reachable"] == false && row(rows, "member3")["addresses"][0] == dns("karmada-scheduler-estimator")
    });
    let hangup = |pid: u32| assert!(Command::new("kill").arg("-HUP").arg(pid.to_string()).status().unwrap().success());

    // A new prefix and a new static entry.
    write_config(
        &config,
        &format!("  servicePrefix: estimator\n  timeout: 1s\n  probeIntervalSeconds: 1\n  probeDnsNames: false\n  static:\n    member2: '{stand_in_addr}'\n"),
    );
    hangup(kf.pid());
    let (rows, took) = wait_table(&kf.url, Duration::from_secs(10), "the reloaded section", |rows| {
        row(rows, "member2")["addresses"] == json!([stand_in_addr.to_string()])
            && row(rows, "member2")["probe"]["reachable"] == true
            && row(rows, "member3")["addresses"][0] == dns("estimator")
    });
    println!("SIGHUP reload visible in the admin API (member2 probed reachable) {took:?} after the signal");
    assert_eq!(row(&rows, "member2")["rule"], "static");
    assert_eq!(row(&rows, "member1")["addresses"][0], dns("estimator").replace("member3", "member1"));

    // An invalid file: logged, nothing changes, kubefold keeps running.
    std::fs::write(&config, "estimator:\n  port: 0\n").unwrap();
    hangup(kf.pid());
    wait_for(Duration::from_secs(10), "the reload failure logged", || kf.logs().contains("Config reload failed"));
    let logs = kf.logs();
    let failure = logs.lines().find(|l| l.contains("Config reload failed")).unwrap();
    assert!(failure.contains("port"), "the log says what is wrong: {failure}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(kf.running(), "an invalid file does not stop kubefold");
    assert_eq!(kf.get("/healthz").0, 200);
    let after = estimators(&kf.url);
    assert_eq!(row(&after, "member2")["addresses"], json!([stand_in_addr.to_string()]));
    assert_eq!(row(&after, "member3")["addresses"][0], dns("estimator"));
    let page = kf.get("/metrics").1;
    assert_eq!(metric(&page, "kubefold_config_reloads_total{result=\"success\"}"), Some(1.0), "{page}");
    assert_eq!(metric(&page, "kubefold_config_reloads_total{result=\"failure\"}"), Some(1.0));
    drop(stand_in);
    kf.stop();
}

#[test]
fn kubefold_resolve_prints_the_table_of_a_simulated_control_plane() {
    use kubefold_testdata::{SimConfig, Workload};
    let sim = kubefold_testdata::start(SimConfig { name: "karmada".into(), workload: Workload::Empty, ..SimConfig::default() }).unwrap();
    let cp = sim.url();
    let stand_in = TcpListener::bind("127.0.0.1:0").unwrap();
    let stand_in_port = stand_in.local_addr().unwrap().port();
    post_json(&format!("{cp}/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karmada-system"}}));
    let service = |cluster: &str, spec: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("karmada-scheduler-estimator-{cluster}"), "namespace": "karmada-system"}, "spec": spec})
    };
    let services = format!("{cp}/api/v1/namespaces/karmada-system/services");
    post_json(&services, &service("member1", json!({"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": stand_in_port}]})));
    post_json(&services, &service("member2", json!({"type": "ClusterIP", "clusterIP": "127.0.0.42", "ports": [{"port": 10352, "targetPort": 10352}]})));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubefold.yaml");
    write_config(&config, &format!("  controlPlane: {{name: karmada, url: '{cp}'}}\n  timeout: 1s\n  probeDnsNames: false\n"));

    let resolve = |extra: &[&str]| {
        let started = Instant::now();
        let out = Command::new("timeout")
            .arg("60")
            .arg(env!("CARGO_BIN_EXE_kubefold"))
            .args(["resolve", "--config", config.to_str().unwrap()])
            .args(extra)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "kubefold resolve {extra:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        println!("kubefold resolve {extra:?} took {:?}:\n{stdout}", started.elapsed());
        parse_printed_table(&stdout)
    };
    let rows = resolve(&[]);
    let cell = |cluster: &str, column: &str| -> String {
        rows.iter().find(|r| r["CLUSTER"] == cluster).unwrap_or_else(|| panic!("no row {cluster}"))[column].clone()
    };
    assert_eq!(rows.iter().map(|r| r["CLUSTER"].as_str()).collect::<Vec<_>>(), ["member1", "member2", "member3"]);
    assert_eq!((cell("member1", "RULE"), cell("member1", "ADDRESSES"), cell("member1", "REACHABLE")), ("externalName".into(), format!("127.0.0.1:{stand_in_port}"), "yes".into()));
    assert!(cell("member1", "LATENCY").ends_with("ms"));
    assert_eq!(cell("member1", "ERROR"), "");
    assert_eq!((cell("member2", "RULE"), cell("member2", "ADDRESSES"), cell("member2", "REACHABLE")), ("clusterIP".into(), "127.0.0.42:10352".into(), "no".into()));
    let error = cell("member2", "ERROR");
    assert!(error.starts_with("127.0.0.42:10352: ") && error.contains("refused"), "{error}");
    let dns = |s: &str| format!("karmada-scheduler-estimator-member3.karmada-system.{s}:10352");
    assert_eq!(
        (cell("member3", "RULE"), cell("member3", "ADDRESSES"), cell("member3", "REACHABLE")),
        ("dnsFallback".into(), format!("{},{}", dns("svc.cluster.local"), dns("svc")), "not probed".into())
    );

    let only = resolve(&["--cluster", "member2"]);
    assert_eq!(only.len(), 1, "--cluster restricts the table");
    assert_eq!((only[0]["CLUSTER"].as_str(), only[0]["RULE"].as_str(), only[0]["REACHABLE"].as_str()), ("member2", "clusterIP", "no"));
    drop(stand_in);
    sim.stop();
}

/// A PromQL expression of the Grafana dashboard with its variables set to
/// match everything.
fn dashboard_query(expr: &str) -> String {
    expr.replace("$instance", ".+").replace("$cluster", ".+").replace("$__rate_interval", "30s")
}

/// Every PromQL expression of `ops/grafana/kubefold.json`, with its panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    fn walk(panel: &Value, out: &mut Vec<(String, String)>) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push((panel["title"].as_str().unwrap_or("").to_string(), expr.to_string()));
            }
        }
        for inner in panel["panels"].as_array().into_iter().flatten() {
            walk(inner, out);
        }
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/grafana/kubefold.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    walk(&dashboard, &mut out);
    out
}

/// A real Prometheus (Debian's `prometheus` package) scrapes the idle
/// demo: `promtool` accepts the alert rules, every query of the Grafana
/// dashboard returns data (so no panel is empty on a fresh install), and
/// every alert rule evaluates without error.
#[test]
fn a_real_prometheus_scraping_the_demo_answers_every_dashboard_query_and_evaluates_every_alert_rule() {
    let (Ok(prometheus), Ok(promtool)) = (which("prometheus"), which("promtool")) else {
        println!("SKIPPED: prometheus and promtool are not installed (Debian package `prometheus`; .ci/run installs it)");
        return;
    };
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/prometheus/alerts.yaml");
    let checked = Command::new(&promtool).arg("check").arg("rules").arg(&rules).output().unwrap();
    assert!(checked.status.success(), "promtool check rules: {}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));

    let cwd = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut demo = Process::start(&["demo", "--listen", &listen], cwd.path());
    let url = demo.line("kubefold listening on ");
    wait_for(Duration::from_secs(90), "the demo ready", || http_get(&format!("{url}/readyz")).0 == 200);

    let prom_dir = tempfile::tempdir().unwrap();
    let config = prom_dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{rules:?}]\nscrape_configs:\n  - job_name: kubefold\n    static_configs: [{{targets: [{listen:?}]}}]\n",
            rules = rules.display().to_string(),
        ),
    )
    .unwrap();
    let prom_listen = format!("127.0.0.1:{}", free_port());
    let mut prom = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", prom_dir.path().join("data").display()))
        .arg(format!("--web.listen-address={prom_listen}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus starts");
    let prom_logs = common::capture(prom.stderr.take().unwrap());
    let query = |expr: &str| -> Value {
        let url = reqwest::Url::parse_with_params(&format!("http://{prom_listen}/api/v1/query"), &[("query", expr)]).unwrap();
        reqwest::blocking::get(url).ok().and_then(|r| r.json().ok()).unwrap_or(Value::Null)
    };
    let result = (|| {
        wait_for(Duration::from_secs(60), "prometheus scraping kubefold", || query("up{job=\"kubefold\"}")["data"]["result"][0]["value"][1] == "1");
        // Some client traffic, as a dashboard would see on an idle fleet.
        for path in ["/api/v1/pods", "/apis/apps/v1/deployments", "/api/v1/namespaces/default/pods?limit=5"] {
            assert_eq!(http_get(&format!("{url}{path}")).0, 200);
        }
        let queries = dashboard_queries();
        assert!(queries.len() >= 20, "the dashboard has its queries: {queries:?}");
        let mut empty = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            empty.clear();
            for (title, expr) in &queries {
                let answer = query(&dashboard_query(expr));
                assert_ne!(answer["status"], "error", "{title}: {expr}: {answer}");
                if answer["data"]["result"].as_array().is_none_or(|r| r.is_empty()) {
                    empty.push(format!("{title}: {expr}"));
                }
            }
            if empty.is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        assert!(empty.is_empty(), "dashboard queries without data on the demo:\n{}", empty.join("\n"));
        // Every alert rule evaluated, without error.
        wait_for(Duration::from_secs(30), "every alert rule evaluated", || {
            let rules: Value = reqwest::blocking::get(format!("http://{prom_listen}/api/v1/rules")).ok().and_then(|r| r.json().ok()).unwrap_or(Value::Null);
            let all: Vec<&Value> = rules["data"]["groups"].as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array().into_iter().flatten()).collect();
            for rule in &all {
                assert_ne!(rule["health"], "err", "alert rule {} fails: {}", rule["name"], rule["lastError"]);
            }
            all.len() >= 10 && all.iter().all(|r| r["health"] == "ok")
        });
        let firing = query("ALERTS{alertstate=\"firing\"}");
        assert_eq!(firing["data"]["result"].as_array().map(Vec::len), Some(0), "alerts firing on a healthy demo: {firing}");
    })
    .let_unwind();
    let _ = prom.kill();
    let _ = prom.wait();
    assert!(demo.stop(), "the demo stops cleanly on SIGTERM");
    if let Err(panic) = result {
        eprintln!("prometheus log:\n{}", prom_logs.lock().unwrap());
        std::panic::resume_unwind(panic);
    }
}

/// The path of a program on PATH.
fn which(program: &str) -> Result<std::path::PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| p.is_file()))
        .ok_or_else(|| format!("{program} not on PATH"))
}

/// Runs a closure, catching a panic so that the caller can stop its
/// processes before it goes on.
trait LetUnwind<T> {
    fn let_unwind(self) -> std::thread::Result<T>;
}

impl<T, F: FnOnce() -> T + std::panic::UnwindSafe> LetUnwind<T> for F {
    fn let_unwind(self) -> std::thread::Result<T> {
        std::panic::catch_unwind(self)
    }
}

/// `--bind-address` and `--secure-port`, as kube-apiserver names them, set
/// where `kubefold serve` listens; either may be given alone, and neither
/// with `--listen`.
#[test]
fn serve_listens_where_bind_address_and_secure_port_say() {
    let cwd = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = cwd.path().join("data");
    let mut kf = Process::start(&["serve", "--data-dir", data.to_str().unwrap(), "--bind-address", "127.0.0.1", "--secure-port", &port.to_string()], cwd.path());
    let url = kf.line("kubefold listening on ");
    assert_eq!(url, format!("http://127.0.0.1:{port}"));
    assert_eq!(http_get(&format!("{url}/livez")).0, 200);
    assert!(kf.stop());
    // Port 0 picks one, on the default address.
    let mut any = Process::start(&["serve", "--data-dir", data.to_str().unwrap(), "--secure-port", "0"], cwd.path());
    let url = any.line("kubefold listening on ");
    assert!(url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"), "{url}");
    assert!(any.stop());
    let both = Command::new(env!("CARGO_BIN_EXE_kubefold")).args(["serve", "--listen", "127.0.0.1:0", "--secure-port", "1"]).output().unwrap();
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"), "{}", String::from_utf8_lossy(&both.stderr));
}

/// The storage alerts fire as their unit tests say (`promtool test rules
/// ops/prometheus/alerts_test.yaml`): commits failing by cause, commits
/// stalling for seconds.
#[test]
fn the_storage_alert_rules_pass_their_promtool_unit_tests() {
    let Ok(promtool) = which("promtool") else {
        println!("SKIPPED: promtool is not installed (Debian package `prometheus`; .ci/run installs it)");
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/prometheus");
    let tested = Command::new(&promtool).args(["test", "rules", "alerts_test.yaml"]).current_dir(&dir).output().unwrap();
    assert!(tested.status.success(), "promtool test rules: {}{}", String::from_utf8_lossy(&tested.stdout), String::from_utf8_lossy(&tested.stderr));
}
