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
