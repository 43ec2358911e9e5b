//! End to end: simulators → watcher actors → aggregator → sled → HTTP, read
//! with reqwest and with kubectl, across a restart.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn rv(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("resourceVersion {v} is not an integer"))
}

#[test]
fn kubectl_get_pods_all_namespaces_shows_every_cluster() {
    crate::require_kubectl!();
    let members = demo_members(3, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();

    let (ok, out, err) = kubectl(&["--server", &kf.url, "get", "pods", "-A"], None);
    assert!(ok, "kubectl failed: {err}");
    let header = out.lines().next().unwrap();
    assert!(header.contains("NAMESPACE") && header.contains("NAME") && header.contains("CLUSTER"), "{header}");
    for cluster in ["member1", "member2", "member3"] {
        let qualified = format!("web-0_{cluster}");
        let line = out.lines().find(|l| l.split_whitespace().nth(1) == Some(qualified.as_str()));
        let line = line.unwrap_or_else(|| panic!("{qualified} missing from:\n{out}"));
        assert_eq!(line.split_whitespace().next(), Some("default"), "{line}");
        assert_eq!(line.split_whitespace().nth(2), Some(cluster), "CLUSTER column: {line}");
    }

    let (ok, out, err) = kubectl(&["--server", &kf.url, "get", "pods", "-A", "-o", "json"], None);
    assert!(ok, "kubectl failed: {err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let items = list["items"].as_array().unwrap();
    assert!(items.len() >= 9, "expected pods of three clusters, got {}", items.len());
    // kubectl -o json merges pages into a List; ask kubefold itself for the list RV.
    let direct = kf.get_json("/api/v1/pods");
    let list_rv = rv(&direct["metadata"]["resourceVersion"]);
    let mut clusters = std::collections::BTreeSet::new();
    for item in direct["items"].as_array().unwrap() {
        let cluster = item["metadata"]["annotations"]["kubefold.io/cluster"].as_str().expect("cluster annotation");
        clusters.insert(cluster.to_string());
        let name = item["metadata"]["name"].as_str().unwrap();
        assert!(name.ends_with(&format!("_{cluster}")), "{name} is not qualified with {cluster}");
        assert!(rv(&item["metadata"]["resourceVersion"]) <= list_rv);
        assert!(item["metadata"]["annotations"]["kubefold.io/member-resource-version"].is_string());
    }
    assert_eq!(clusters.len(), 3);
    for item in items {
        assert!(item["metadata"]["annotations"]["kubefold.io/cluster"].is_string());
    }
}

#[test]
fn kubectl_watch_prints_a_pod_created_in_a_member() {
    crate::require_kubectl!();
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();

    let mut watch = Command::new("timeout")
        .args(["60", "kubectl", "--server", &kf.url, "get", "pods", "-A", "-w", "--no-headers"])
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The watch lists first: wait until the current pods are printed.
    let first = rx.recv_timeout(Duration::from_secs(30)).expect("watch prints the current pods");
    assert!(first.contains("_member"), "{first}");

    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"watched-pod","namespace":"default","labels":{"app":"watched"}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}}"#;
    let sim_url = members[1].1.url();
    let (ok, _, err) = kubectl(&["--server", &sim_url, "create", "-f", "-"], Some(pod));
    assert!(ok, "create in member2: {err}");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("watched-pod_member2") => {
                assert!(line.contains("member2"), "{line}");
                break;
            }
            Ok(line) => seen.push(line),
            Err(_) => panic!("watch never printed watched-pod_member2; saw {} lines", seen.len()),
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn restart_serves_from_the_store_before_any_member_is_reachable() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let before = kf.get_json("/api/v1/pods");
    let before_rv = rv(&before["metadata"]["resourceVersion"]);
    let names = |list: &Value| -> Vec<String> {
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
    };
    let before_names = names(&before);
    kf.stop();
    for (_, sim) in members {
        sim.stop();
    }

    // Members now point at ports where nothing listens.
    let dead = vec![("member1".to_string(), dead_port_url()), ("member2".to_string(), dead_port_url())];
    let kf = Kubefold::serve(&dir, &dead, &[]);
    let after = kf.get_json("/api/v1/pods");
    assert!(rv(&after["metadata"]["resourceVersion"]) >= before_rv, "head RV went back");
    assert_eq!(names(&after), before_names);
    let (code, _) = kf.get("/api/v1/namespaces/default/pods/web-0_member1");
    assert_eq!(code, 200);
    let (code, body) = kf.get("/readyz?verbose");
    assert_eq!(code, 503, "no member is synced: {body}");
    assert!(body.contains("[-]cluster-member1"), "{body}");
}

#[test]
fn http_reads_follow_kubernetes_rules() {
    let members = demo_members(3, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();

    // A qualified name gets one object; a bare name in three clusters is ambiguous.
    let pod = kf.get_json("/api/v1/namespaces/default/pods/web-1_member3");
    assert_eq!(pod["metadata"]["name"], "web-1_member3");
    assert_eq!(pod["kind"], "Pod");
    let (code, body) = kf.get("/api/v1/namespaces/default/pods/web-1");
    assert_eq!(code, 409, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Conflict");
    for c in ["web-1_member1", "web-1_member2", "web-1_member3"] {
        assert!(status["message"].as_str().unwrap().contains(c), "{body}");
    }
    let (code, body) = kf.get("/api/v1/namespaces/default/pods/nope_member1");
    assert_eq!(code, 404);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["reason"], "NotFound");

    // Per-cluster paths serve original names of one member.
    let one = kf.get_json("/clusters/member2/api/v1/namespaces/default/pods");
    let items = one["items"].as_array().unwrap();
    assert!(!items.is_empty());
    assert!(items.iter().all(|i| i["metadata"]["annotations"]["kubefold.io/cluster"] == "member2"));
    assert!(items.iter().any(|i| i["metadata"]["name"] == "web-0"));

    // The cluster search key selects clusters.
    let sel = kf.get_json("/api/v1/pods?labelSelector=kubefold.io%2Fcluster%20in%20(member1,member3)");
    let clusters: std::collections::BTreeSet<_> = sel["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["annotations"]["kubefold.io/cluster"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(clusters.into_iter().collect::<Vec<_>>(), vec!["member1", "member3"]);

    // Pages of 4 cover the whole list exactly once.
    let full = kf.get_json("/api/v1/pods");
    let all: Vec<String> = full["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = kf.get_json(&format!("/api/v1/pods?limit=4&continue={token}"));
        paged.extend(page["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    assert_eq!(paged, all);

    // A watch from a list RV replays nothing old, and from 0 sends every object as ADDED.
    let client = reqwest::blocking::Client::new();
    let body = client
        .get(format!("{}/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1", kf.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let events: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let in_default = kf.get_json("/api/v1/namespaces/default/pods")["items"].as_array().unwrap().len();
    assert_eq!(events.len(), in_default);
    assert!(events.iter().all(|e| e["type"] == "ADDED"));

    // Bad input gets a Status.
    let (code, body) = kf.get("/api/v1/pods?labelSelector=a%20in%20(b");
    assert_eq!(code, 400, "{body}");
    let (code, _) = kf.get("/api/v1/frobs");
    assert_eq!(code, 404);
    let (code, _) = kf.get("/api/v1/pods?resourceVersion=abc");
    assert_eq!(code, 400);
}

/// kubefold's established TCP connections to `port` on loopback: the
/// sockets of `/proc/net/tcp` to that port whose inodes are among the
/// process's open files.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|row| {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let remote_port = cols[2].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 01: ESTABLISHED.
            cols[3] == "01" && remote_port == Some(port) && inodes.contains(cols[9])
        })
        .count()
}

/// kube-apiserver serves HTTP/2 and client-go multiplexes a client's
/// watches and requests over one connection ("kube-apiserver ...
/// `--http2-max-streams-per-connection`: the limit that the server gives
/// to clients for the maximum number of streams in an HTTP/2 connection",
/// https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/).
/// A member with `h2c: true` gets all of kubefold's watches on one
/// connection (of its one watcher thread), and they stream: the member's
/// churn reaches kubefold. A member without it, over HTTP/1.1, holds a
/// connection for each watched type.
#[test]
fn a_members_watches_share_one_http2_connection_and_over_http1_hold_one_each() {
    let members = demo_members(2, 20.0);
    let (_tmp, dir) = data_dir();
    let (_config_dir, config) = config_file(&format!(
        "watcherThreads: 1\nclusters:\n  - {{name: member1, url: \"{}\", h2c: true}}\n  - {{name: member2, url: \"{}\"}}\n",
        members[0].1.url(),
        members[1].1.url()
    ));
    let kf = Kubefold::serve(&dir, &[], &["--config", &config]);
    kf.wait_ready();
    assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");

    let types = kf.get_json("/admin/v1/clusters/member2")["status"]["resources"].as_object().map(|r| r.len()).expect("member2's watched types");
    let (h2, h1) = (connections_to(kf.pid(), members[0].1.addr().port()), connections_to(kf.pid(), members[1].1.addr().port()));
    // One a kubefold thread that talks to the member: the watchers' and the
    // estimator resolver's (which reads the member's Services).
    assert!(h2 <= 2, "member1 (h2c): one connection for every watch, {h2} held; member2 (HTTP/1.1) has {h1}");
    assert!(h1 >= types, "member2 over HTTP/1.1 holds a connection a watched type ({types} types): {h1}");
    kf.stop();
}

/// A member served over TLS, as kube-apiserver is, is offered `h2` first
/// (ALPN) and speaks HTTP/2, so its watches share one connection and
/// stream its churn; `kubectl exec` through kubefold still reaches it,
/// since the upgrade of exec asks the member for HTTP/1.1, as client-go's
/// SPDY and WebSocket dialers do.
#[test]
fn a_member_over_tls_speaks_http2_through_alpn_and_exec_still_upgrades() {
    crate::require_kubectl!();
    let tmp = tempfile::tempdir().unwrap();
    let pki = TestPki::write(tmp.path());
    let tls = kubefold_testdata::SimTls { cert_pem: std::fs::read_to_string(&pki.cert_file).unwrap(), key_pem: std::fs::read_to_string(&pki.key_file).unwrap() };
    let sim = kubefold_testdata::start(kubefold_testdata::SimConfig {
        name: "member1".into(),
        workload: kubefold_testdata::Workload::Demo,
        churn_per_sec: 20.0,
        tls: Some(tls),
        ..kubefold_testdata::SimConfig::default()
    })
    .expect("simulator starts");
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let (_dir_tmp, dir) = data_dir();
    let (_config_dir, config) = config_file(&format!(
        "watcherThreads: 1\nclusters:\n  - {{name: member1, url: \"{}\", caFile: \"{}\"}}\n",
        sim.url(),
        pki.ca_file.display()
    ));
    let kf = Kubefold::serve(&dir, &[], &["--config", &config]);
    kf.wait_ready();

    let checkpoint = || {
        kf.get_json("/admin/v1/clusters/member1")["status"]["resources"]["v1/pods"]["checkpoint"].as_str().and_then(|c| c.parse::<u64>().ok()).unwrap_or(0)
    };
    let first = checkpoint();
    wait_for(Duration::from_secs(30), "the member's pod changes streaming in", || checkpoint() > first);
    let pods = kf.get_json("/api/v1/namespaces/default/pods");
    assert!(pods["items"].as_array().unwrap().iter().any(|p| p["metadata"]["name"] == "web-0_member1"), "{pods}");

    let held = connections_to(kf.pid(), sim.addr().port());
    assert!(held <= 2, "every watch of the member on one connection a thread: {held} held");

    let (ok, out, err) = kubectl(&["--server", &kf.url, "exec", "-n", "default", "web-0_member1", "--", "hostname"], None);
    assert!(ok, "kubectl exec through kubefold: {err}");
    assert_eq!(out, "web-0\n");
    kf.stop();
}
