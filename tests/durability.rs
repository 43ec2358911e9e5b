//! Durability end to end: warm restart resumes member watches without a
//! relist, a watch from a pre-restart RV sees exactly what changed while
//! kubefold was down, and SIGKILL at random points never rewrites history.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn sim_request(method: reqwest::Method, url: &str, body: Option<Value>) -> Value {
    let client = reqwest::blocking::Client::new();
    let mut req = client.request(method, url);
    if let Some(b) = body {
        req = req.header("Content-Type", "application/merge-patch+json").body(b.to_string());
    }
    let resp = req.send().unwrap();
    let code = resp.status();
    let text = resp.text().unwrap();
    assert!(code.is_success(), "{url}: {code} {text}");
    serde_json::from_str(&text).unwrap()
}

fn create_pod(sim_url: &str, name: &str) {
    let client = reqwest::blocking::Client::new();
    let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":"default","labels":{"app":"downtime"}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}});
    let resp = client.post(format!("{sim_url}/api/v1/namespaces/default/pods")).json(&pod).send().unwrap();
    assert!(resp.status().is_success(), "create {name}: {}", resp.text().unwrap());
}

/// Reads a finite watch (`timeoutSeconds`) and returns its events.
fn watch_events(url: &str) -> Vec<Value> {
    let body = reqwest::blocking::Client::new().get(url).send().unwrap().text().unwrap();
    body.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn restart_resumes_member_watches_without_a_relist() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    kf.stop();
    for (_, sim) in &members {
        sim.clear_requests();
    }
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    for (name, sim) in &members {
        let requests = sim.requests();
        let collections: Vec<String> = kubefold_engine::resources::builtin().iter().map(|r| r.collection_path(None)).collect();
        // Before resuming, kubefold reads one object (`limit=1`) to learn the
        // member's current RV (a member restored from a backup is relisted);
        // a relist is a list of everything.
        let probe = |q: &str| q.split('&').any(|p| p == "limit=1");
        let probes = requests.iter().filter(|r| r.method == "GET" && !r.watch && probe(&r.query)).count();
        let lists: Vec<_> = requests.iter().filter(|r| r.method == "GET" && !r.watch && !probe(&r.query) && collections.contains(&r.path)).collect();
        assert!(probes >= 10, "{name}: every type checked the member's RV before resuming, saw {probes} probes");
        let watches = requests.iter().filter(|r| r.watch).count();
        assert!(watches >= 10, "{name}: every type resumes its watch, saw {watches} watches in {requests:?}");
        assert!(lists.is_empty(), "{name}: no relist after a warm restart, saw {lists:?}");
    }
}

#[test]
fn a_watch_from_before_the_restart_sees_exactly_what_changed_while_down() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim1 = members[0].1.url();
    create_pod(&sim1, "doomed");
    create_pod(&sim1, "changed");
    wait_for(Duration::from_secs(20), "pods ingested", || kf.get("/api/v1/namespaces/default/pods/changed_member1").0 == 200);
    let before = kf.get_json("/api/v1/pods");
    let before_rv = rv_of(&before);
    kf.stop();

    // The member's RV when kubefold went down.
    let down_at: u64 = sim_request(reqwest::Method::GET, &format!("{sim1}/api/v1/namespaces/default/pods"), None)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // While kubefold is down: one create, one change, one delete in member1.
    create_pod(&sim1, "born");
    sim_request(reqwest::Method::PATCH, &format!("{sim1}/api/v1/namespaces/default/pods/changed"), Some(json!({"metadata":{"labels":{"phase":"two"}}})));
    sim_request(reqwest::Method::DELETE, &format!("{sim1}/api/v1/namespaces/default/pods/doomed"), None);
    // Let the member's own controllers (scheduling, graceful deletion) settle.
    wait_for(Duration::from_secs(20), "deletion done in the member", || {
        reqwest::blocking::get(format!("{sim1}/api/v1/namespaces/default/pods/doomed")).unwrap().status().as_u16() == 404
    });
    std::thread::sleep(Duration::from_secs(2));
    let member_events = watch_events(&format!("{sim1}/api/v1/pods?watch=1&resourceVersion={down_at}&timeoutSeconds=1"));
    let settled_at: u64 = member_events.iter().map(|e| e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap()).max().unwrap();

    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    wait_for(Duration::from_secs(20), "kubefold caught up with the member", || {
        let status = kf.get_json("/admin/v1/clusters/member1");
        status["status"]["resources"]["v1/pods"]["checkpoint"].as_str().and_then(|c| c.parse::<u64>().ok()).is_some_and(|c| c >= settled_at)
    });
    let events = watch_events(&format!("{}/api/v1/pods?watch=1&resourceVersion={before_rv}&timeoutSeconds=2", kf.url));
    let mut last = before_rv;
    let mut seen = Vec::new();
    for e in &events {
        let rv = rv_of(&e["object"]);
        assert!(rv > last, "RVs strictly increase in a watch: {rv} after {last}");
        last = rv;
        let member_rv: u64 = e["object"]["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap().parse().unwrap();
        if member_rv > down_at && member_rv <= settled_at {
            let name = e["object"]["metadata"]["name"].as_str().unwrap();
            seen.push((e["type"].as_str().unwrap().to_string(), name.trim_end_matches("_member1").to_string()));
        }
    }
    let expected: Vec<(String, String)> = member_events
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_string(), e["object"]["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(seen, expected, "the watch from before the restart replays exactly what the member did");
    let names: std::collections::BTreeSet<&str> = expected.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names.into_iter().collect::<Vec<_>>(), vec!["born", "changed", "doomed"]);
    assert_eq!(expected.first().map(|(t, _)| t.as_str()), Some("ADDED"), "born first appears as ADDED");
    assert_eq!(seen.iter().filter(|(t, n)| t == "DELETED" && n == "doomed").count(), 1);
    let changed = kf.get_json("/api/v1/namespaces/default/pods/changed_member1");
    assert_eq!(changed["metadata"]["labels"]["phase"], "two");
}
