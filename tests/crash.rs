//! Crash safety: kubefold is killed with SIGKILL at random points under
//! churn, several times. After every restart the head RV has not gone back,
//! every event a watch client received before the crash is in the log with
//! the same RV (no RV reused for another event), and at the end the index
//! equals the members' own state.

mod common;

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    rv: u64,
    event_type: String,
    name: String,
    member_rv: String,
}

fn seen(line: &str) -> Option<Seen> {
    let e: Value = serde_json::from_str(line).ok()?;
    let o = &e["object"];
    Some(Seen {
        rv: o["metadata"]["resourceVersion"].as_str()?.parse().ok()?,
        event_type: e["type"].as_str()?.to_string(),
        name: o["metadata"]["name"].as_str()?.to_string(),
        member_rv: o["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap_or("").to_string(),
    })
}

/// Watches pods from `from` in a thread, recording every event until the stream ends.
fn record(url: String, from: u64, into: Arc<Mutex<Vec<Seen>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder().timeout(None).build().unwrap();
        let Ok(resp) = client.get(format!("{url}/api/v1/pods?watch=1&resourceVersion={from}")).send() else { return };
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { return };
            if let Some(s) = seen(&line) {
                if s.event_type != "BOOKMARK" && s.event_type != "ERROR" {
                    into.lock().unwrap().push(s);
                }
            }
        }
    })
}

#[test]
fn sigkill_at_random_points_never_rewrites_history() {
    let members = demo_members(2, 25.0);
    let (_tmp, dir) = data_dir();
    let recorded = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let mut last_head = 0u64;
    let mut rng_state = 0x2545_F491_4F6C_DD1Du64;
    let mut next_delay = || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        Duration::from_millis(300 + rng_state % 1500)
    };
    for round in 0..4 {
        let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
        let list = kf.get_json("/api/v1/pods");
        let head: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(head >= last_head, "round {round}: head RV went back from {last_head} to {head}");
        let from = recorded.lock().unwrap().last().map_or(head, |s| s.rv);
        let seen_before = recorded.lock().unwrap().len();
        let reader = record(kf.url.clone(), from, recorded.clone());
        // Crash only once this round has delivered something (machines are
        // slow at times), then at a random point after that.
        wait_for(Duration::from_secs(60), "events in this round", || recorded.lock().unwrap().len() > seen_before);
        std::thread::sleep(next_delay());
        let before = recorded.lock().unwrap().last().map_or(0, |s| s.rv);
        kf.kill();
        let _ = reader.join();
        last_head = last_head.max(before).max(head);
    }
    let events = recorded.lock().unwrap().clone();
    assert!(events.len() > 20, "the watch clients saw churn: {} events", events.len());
    let rvs: Vec<u64> = events.iter().map(|s| s.rv).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "RVs strictly increase across the resumed watches");

    // After the last crash: everything a client was told is in the log, same RV, same event.
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    let first = events[0].rv;
    let body = reqwest::blocking::Client::new()
        .get(format!("{}/api/v1/pods?watch=1&resourceVersion={}&timeoutSeconds=2", kf.url, first - 1))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let log: std::collections::BTreeMap<u64, Seen> = body.lines().filter_map(seen).map(|s| (s.rv, s)).collect();
    for s in &events {
        assert_eq!(log.get(&s.rv), Some(s), "event at RV {} as the client saw it", s.rv);
    }
    kf.wait_ready();
    assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");
}
