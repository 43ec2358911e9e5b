//! Replicas joining a replica on etcd: the members handed over to them
//! keep flowing. One replica syncs a fleet of members; two more join and
//! take their share of the members; then a change made on every member is
//! served by every replica, and a watch on every replica sees it. etcd's
//! history is compacted before they join (past the log's head, as another
//! writer of the etcd may): their watches of the log start from it without
//! being refused. Skips, naming what is missing, without the `etcd` binary.

#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use etcd_support::*;
use kubefold_testdata::sim::fleet::{self, FleetConfig};
use kubefold_testdata::sim::{SimConfig, Workload};
use serde_json::Value;

const MEMBERS: usize = 6;
const PODS: usize = 3000;

/// Compacts etcd's history at its current revision, as an operator (or
/// etcd's own `--auto-compaction-retention`, or a kube-apiserver sharing
/// the etcd) does: after it, a watch from an older revision is refused.
/// Another writer's keys go first (as a kube-apiserver sharing the etcd
/// writes): etcd's revision is then past the log's head.
fn compact_etcd(etcd: &Etcd) -> u64 {
    use base64::Engine as _;
    let client = reqwest::blocking::Client::new();
    let b64 = base64::engine::general_purpose::STANDARD;
    for i in 0..3 {
        let put = serde_json::json!({ "key": b64.encode(format!("/registry/other/{i}")), "value": b64.encode("x") });
        assert!(client.post(format!("{}/v3/kv/put", etcd.url())).body(put.to_string()).send().unwrap().status().is_success());
    }
    let status: Value = client.post(format!("{}/v3/maintenance/status", etcd.url())).body("{}").send().unwrap().json().unwrap();
    let revision: u64 = status["header"]["revision"].as_str().unwrap().parse().unwrap();
    let compacted = client.post(format!("{}/v3/kv/compaction", etcd.url())).body(format!(r#"{{"revision":"{revision}","physical":true}}"#)).send().unwrap();
    assert!(compacted.status().is_success(), "etcd compacts at {revision}");
    revision
}

/// `(replica id, owned members)` of `/admin/v1/replicas` on `kf`.
fn owners(kf: &Kubefold) -> Vec<(String, Vec<String>)> {
    let view = kf.get_json("/admin/v1/replicas");
    let items = view["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|r| {
            let owned = r["owned"].as_array().map(|o| o.iter().filter_map(|m| m.as_str().map(String::from)).collect()).unwrap_or_default();
            (r["id"].as_str().unwrap_or_default().to_string(), owned)
        })
        .collect()
}

/// The number of pods `kf` serves.
fn pod_count(kf: &Kubefold) -> usize {
    let (code, body) = kf.get("/api/v1/pods");
    if code != 200 {
        return 0;
    }
    serde_json::from_str::<Value>(&body).ok().and_then(|l| l["items"].as_array().map(|i| i.len())).unwrap_or(0)
}

/// A watch of every pod on `url` from `rv`, in the background: the
/// `(name, marker annotation)` of every event it receives until the test
/// ends, and whether it ended with an ERROR event.
fn watch_markers(url: String, rv: u64) -> Arc<Mutex<(BTreeSet<(String, String)>, Option<String>)>> {
    let seen = Arc::new(Mutex::new((BTreeSet::new(), None)));
    let into = seen.clone();
    std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(600)).build().unwrap();
        let response = client.get(format!("{url}/api/v1/pods?watch=true&resourceVersion={rv}")).send().expect("watch starts");
        assert_eq!(response.status().as_u16(), 200);
        for line in BufReader::new(response).lines() {
            let Ok(line) = line else { break };
            let Ok(event) = serde_json::from_str::<Value>(&line) else { break };
            let mut seen = into.lock().unwrap();
            if event["type"] == "ERROR" {
                seen.1 = Some(event.to_string());
                break;
            }
            let meta = &event["object"]["metadata"];
            if let (Some(name), Some(marker)) = (meta["name"].as_str(), meta["annotations"]["test.kubefold.io/marker"].as_str()) {
                seen.0.insert((name.to_string(), marker.to_string()));
            }
        }
    });
    seen
}

/// One replica syncs six members; two replicas join and the members are
/// spread over the three (settled in `/admin/v1/replicas`); then a pod of
/// every member is changed on the member: each replica serves every change
/// (a get of the pod), and a watch on each replica from before the changes
/// receives every one, within a generous bound.
#[test]
fn members_handed_to_joining_replicas_keep_their_changes_flowing() {
    let Some(etcd) = Etcd::start() else { return };
    let fleet = fleet::start(FleetConfig {
        clusters: MEMBERS,
        pods: PODS,
        member: SimConfig { workload: Workload::Empty, ..SimConfig::default() },
        ..FleetConfig::default()
    })
    .expect("the fleet starts");
    let (tmp, _) = data_dir();
    let members_file = tmp.path().join("members");
    std::fs::write(&members_file, fleet.url_lines()).unwrap();
    let members_file = members_file.to_str().unwrap().to_string();
    let dirs: Vec<_> = (0..3).map(|_| data_dir()).collect();
    let etcd_url = etcd.url();
    let serve = |i: usize| {
        let id = format!("r{}", i + 1);
        Kubefold::serve(&dirs[i].1, &[], &["--clusters-file", &members_file, "--etcd-servers", &etcd_url, "--etcd-lease-ttl", "3", "--etcd-replica-id", &id])
    };
    let first = serve(0);
    let logs = Arc::new(Mutex::new(vec![first.log_handle()]));
    let dump_logs = logs.clone();
    let _dump = Dump(Box::new(move || {
        for (i, log) in dump_logs.lock().unwrap().iter().enumerate() {
            eprintln!("r{}'s log:\n{}", i + 1, log.lock().unwrap());
        }
    }));
    wait_for(Duration::from_secs(300), "r1 serving every pod", || pod_count(&first) == PODS);
    // etcd's history up to now is compacted away: the replicas that join
    // build their copies from etcd's current keys.
    compact_etcd(&etcd);

    let (second, third) = (serve(1), serve(2));
    logs.lock().unwrap().extend([second.log_handle(), third.log_handle()]);
    let replicas = [&first, &second, &third];
    for kf in replicas {
        wait_for(Duration::from_secs(300), "every replica serving every pod", || pod_count(kf) == PODS);
    }
    // Settled: the three replicas, each owning members, every member owned
    // once, the same over two lease renewals.
    let mut last = Vec::new();
    wait_for(Duration::from_secs(120), "ownership settled over three replicas", || {
        let now = owners(&first);
        let owned: usize = now.iter().map(|(_, o)| o.len()).sum();
        let settled = now.len() == 3 && now.iter().all(|(_, o)| !o.is_empty()) && owned == MEMBERS && now == last;
        last = now;
        std::thread::sleep(Duration::from_secs(2));
        settled
    });
    for kf in replicas {
        kf.wait_ready();
    }

    // Watches on every replica from its current resourceVersion.
    let watches: Vec<_> = replicas.iter().map(|kf| watch_markers(kf.url.clone(), listed(&kf.get_json("/api/v1/pods?limit=1")).1)).collect();
    std::thread::sleep(Duration::from_secs(1));

    // A change on every member, made on the member itself.
    let client = reqwest::blocking::Client::new();
    let per = PODS / MEMBERS;
    let mut changes = Vec::new();
    for (m, member) in fleet.members().iter().enumerate() {
        for k in 0..3 {
            let i = (m * 7 + k * 131) % per;
            let marker = format!("{}-{k}", member.name);
            let patched = client
                .patch(format!("{}/api/v1/namespaces/load-{}/pods/load-{i}", member.url(), i % 10))
                .header("Content-Type", "application/merge-patch+json")
                .body(format!(r#"{{"metadata":{{"annotations":{{"test.kubefold.io/marker":"{marker}"}}}}}}"#))
                .send()
                .unwrap();
            assert_eq!(patched.status().as_u16(), 200, "the member {} accepts the change", member.name);
            changes.push((format!("load-{}", i % 10), format!("load-{i}_{}", member.name), marker));
        }
    }

    // Every replica serves every change, and its watch received it.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (r, kf) in replicas.iter().enumerate() {
        for (namespace, name, marker) in &changes {
            let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
            let served = |kf: &Kubefold| kf.get_json(&path)["metadata"]["annotations"]["test.kubefold.io/marker"].as_str() == Some(marker.as_str());
            while !served(kf) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            if !served(kf) {
                let marker_of = |n: &str, p: &str| kf.get_json(&format!("/api/v1/namespaces/{n}/pods/{p}"))["metadata"]["annotations"]["test.kubefold.io/marker"].clone();
                let missing: Vec<&String> = changes.iter().filter(|(n, p, m)| marker_of(n, p).as_str() != Some(m.as_str())).map(|(_, _, m)| m).collect();
                panic!("r{} does not serve the change {marker} of {name} (owners {:?}); changes it does not serve: {missing:?}", r + 1, owners(kf));
            }
        }
    }
    for (r, watch) in watches.iter().enumerate() {
        loop {
            let (seen, error) = watch.lock().unwrap().clone();
            assert_eq!(error, None, "the watch on r{} ended with an error", r + 1);
            let missing: Vec<&String> = changes.iter().filter(|(_, n, m)| !seen.contains(&(n.clone(), m.clone()))).map(|(_, _, m)| m).collect();
            if missing.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "the watch on r{} did not receive {missing:?}", r + 1);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // The compaction cost the joining replicas nothing: they follow etcd's
    // watch from the revision their copy was read at, which etcd still has.
    let texts: Vec<String> = logs.lock().unwrap().iter().map(|log| log.lock().unwrap().clone()).collect();
    for (r, log) in texts.iter().enumerate() {
        let failed: Vec<&str> = log.lines().filter(|l| l.contains("The etcd watch failed")).take(3).collect();
        assert!(failed.is_empty(), "r{}'s watch of etcd failed without a fault: {failed:?}", r + 1);
    }
    for kf in [third, second, first] {
        kf.stop();
    }
}
