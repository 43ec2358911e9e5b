//! Durability end to end: warm restart resumes member watches without a
//! relist, a watch from a pre-restart RV sees exactly what changed while
//! kubefold was down, SIGKILL at random points never rewrites history, and
//! the health checks answer while a long event log is replayed.

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

/// A start that replays a long event log (no index snapshot) listens at
/// once: `/livez` passes throughout (a liveness probe must not kill a long
/// replay), `/readyz` fails naming the replay and how far it is, any other
/// request gets a 503 `Status` with `Retry-After`; then the API takes the
/// same socket over and serves what the log held.
#[test]
fn health_checks_answer_while_the_event_log_is_replayed() {
    let pods = 20_000;
    let sim = kubefold_testdata::start(kubefold_testdata::SimConfig { name: "member1".into(), pods, ..Default::default() })
        .expect("simulator starts");
    let members = vec![("member1".to_string(), sim)];
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    kf.kill();
    // Without a snapshot the start replays every event of the log.
    let _ = std::fs::remove_file(dir.join("index.snapshot"));
    let url = dead_port_url();
    let listen = url.trim_start_matches("http://").to_string();
    let starting = {
        let dir = dir.clone();
        let listen = listen.clone();
        let clusters = cluster_flags(&members);
        std::thread::spawn(move || Kubefold::serve_at(&listen, &dir, &clusters, &[]))
    };
    let mut refused_after_answer = 0;
    let mut answered = false;
    let mut seen_replaying = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(std::time::Instant::now() < deadline, "kubefold did not become ready; saw {seen_replaying:?}");
        let Some((ready_code, ready)) = try_get(&format!("{url}/readyz?verbose")) else {
            refused_after_answer += usize::from(answered);
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        answered = true;
        let live = try_get(&format!("{url}/livez"));
        if ready.contains("[-]store-recovered failed") {
            assert_eq!(ready_code, 503, "{ready}");
            let live = live.expect("/livez answers while /readyz does");
            assert_eq!(live.0, 200, "/livez passes during the replay: {live:?}");
            if let Some((code, body)) = try_get(&format!("{url}/api/v1/pods?limit=1")) {
                if code == 503 {
                    let status: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
                    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("ServiceUnavailable")), "{body}");
                    assert!(status["message"].as_str().unwrap_or("").starts_with("kubefold is starting"), "{body}");
                }
            }
            seen_replaying.push(ready);
        } else if ready_code == 200 || ready.contains("[+]store ok") {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let kf = starting.join().expect("kubefold starts");
    assert_eq!(refused_after_answer, 0, "once listening, no connection is refused while the API takes over");
    assert!(
        seen_replaying.iter().any(|r| r.contains("replaying the event log: ") && r.contains("% (resourceVersion ")),
        "/readyz named the replay while it ran; saw {seen_replaying:?}"
    );
    let listed = kf.get_json("/api/v1/namespaces/load-3/pods");
    assert_eq!(listed["items"].as_array().unwrap().len(), pods / 10, "the replayed index serves every pod of the log");
    kf.stop();
}

/// A GET that may find nothing listening: `None` when the connection is refused.
fn try_get(url: &str) -> Option<(u16, String)> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    match client.get(url).send() {
        Ok(r) => {
            let code = r.status().as_u16();
            Some((code, r.text().unwrap_or_default()))
        }
        Err(e) if e.is_connect() => None,
        Err(e) => panic!("GET {url}: {e}"),
    }
}
