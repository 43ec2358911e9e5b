//! Retention and compaction: reads and watches older than the compaction
//! floor get 410 Expired (as an ERROR event inside a watch stream, as HTTP
//! 410 for lists and continue tokens); everything from the floor on still
//! reads exactly; removed clusters' objects become DELETED events.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn post(url: &str) -> (u16, String) {
    let resp = reqwest::blocking::Client::new().post(url).send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

#[test]
fn history_older_than_the_floor_is_expired() {
    let members = demo_members(1, 0.0);
    let (tmp, dir) = data_dir();
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(&config, "retention:\n  maxEvents: 5\n  maxAgeSeconds: 86400\n  compactionIntervalSeconds: 3600\n").unwrap();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", config.to_str().unwrap()]);
    kf.wait_ready();
    let sim = members[0].1.url();

    let old = kf.get_json("/api/v1/pods?limit=2");
    let old_rv = rv_of(&old);
    let token = old["metadata"]["continue"].as_str().unwrap().to_string();
    // Objects created and deleted (superseded history), then more than five
    // events after that.
    let client = reqwest::blocking::Client::new();
    let create = |name: &str| {
        let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"namespace":"default"},"data":{"k":name}});
        let resp = client.post(format!("{sim}/api/v1/namespaces/default/configmaps")).json(&cm).send().unwrap();
        assert!(resp.status().is_success());
    };
    for i in 0..8 {
        create(&format!("c{i}"));
    }
    for i in 0..4 {
        let resp = client.delete(format!("{sim}/api/v1/namespaces/default/configmaps/c{i}")).send().unwrap();
        assert!(resp.status().is_success());
    }
    for i in 0..6 {
        create(&format!("d{i}"));
    }
    wait_for(Duration::from_secs(20), "configmaps ingested", || kf.get("/api/v1/namespaces/default/configmaps/d5_member1").0 == 200);
    let head = rv_of(&kf.get_json("/api/v1/configmaps"));

    let (code, body) = post(&format!("{}/admin/v1/compact", kf.url));
    assert_eq!(code, 200, "{body}");
    let stats: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["floor"].as_u64(), Some(head - 5), "{stats}");
    assert!(stats["removed"].as_u64().unwrap() >= 8, "the created-then-deleted configmaps' events go: {stats}");

    // A watch from before the floor: 200, then one ERROR event 410 Expired.
    let resp = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&resourceVersion={old_rv}&timeoutSeconds=5", kf.url)).unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let lines: Vec<Value> = resp.text().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");

    // Exact lists and continue tokens older than the floor: HTTP 410.
    let (code, body) = kf.get(&format!("/api/v1/pods?resourceVersion={old_rv}&resourceVersionMatch=Exact"));
    assert_eq!(code, 410, "{body}");
    let (code, body) = kf.get(&format!("/api/v1/pods?limit=2&continue={token}"));
    assert_eq!(code, 410, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["reason"], "Expired");

    // From the floor on, history is exact: the state at floor has c0..c(8-5-?)
    // exactly as the events up to it say.
    let floor = head - 5;
    let at_floor = kf.get_json(&format!("/api/v1/namespaces/default/configmaps?resourceVersion={floor}&resourceVersionMatch=Exact"));
    let names_at_floor: Vec<String> = at_floor["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    let created_by_floor: Vec<String> = kf.get_json("/api/v1/namespaces/default/configmaps")["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| rv_of(i) <= floor)
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names_at_floor, created_by_floor);
    let watch = reqwest::blocking::get(format!("{}/api/v1/configmaps?watch=1&resourceVersion={floor}&timeoutSeconds=1", kf.url)).unwrap().text().unwrap();
    let newer = kf.get_json("/api/v1/configmaps")["items"].as_array().unwrap().iter().filter(|i| rv_of(i) > floor).count();
    assert!(newer > 0);
    assert_eq!(watch.lines().count(), newer, "every retained event after the floor: {watch}");

    // Compaction survives a restart: the floor is persisted.
    kf.stop();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", config.to_str().unwrap()]);
    let (code, _) = kf.get(&format!("/api/v1/pods?resourceVersion={old_rv}&resourceVersionMatch=Exact"));
    assert_eq!(code, 410);
    assert_eq!(kf.get_json("/admin/v1/stats")["compactedResourceVersion"].as_u64(), Some(floor));
}

#[test]
fn removing_a_cluster_turns_its_objects_into_deleted_events() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let before = rv_of(&kf.get_json("/api/v1/pods"));
    let member2_pods = kf.get_json("/api/v1/pods?labelSelector=kubefold.io%2Fcluster%3Dmember2")["items"].as_array().unwrap().len();
    let resp = reqwest::blocking::Client::new().delete(format!("{}/admin/v1/clusters/member2", kf.url)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let events = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&resourceVersion={before}&timeoutSeconds=1", kf.url)).unwrap().text().unwrap();
    let deleted: Vec<Value> = events.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|e| e["type"] == "DELETED").collect();
    assert_eq!(deleted.len(), member2_pods);
    assert!(deleted.iter().all(|e| e["object"]["metadata"]["annotations"]["kubefold.io/cluster"] == "member2"));
    assert!(kf.get_json("/api/v1/pods?labelSelector=kubefold.io%2Fcluster%3Dmember2")["items"].as_array().unwrap().is_empty());
    assert_eq!(kf.get("/admin/v1/clusters/member2").0, 404);
    // A stopped member keeps its objects, marked stale.
    let mut members = members;
    let (_, m1) = members.remove(0);
    m1.stop();
    wait_for(Duration::from_secs(30), "member1 stale", || {
        kf.get_json("/admin/v1/clusters/member1")["status"]["stale"] == true
    });
    assert!(!kf.get_json("/api/v1/pods?labelSelector=kubefold.io%2Fcluster%3Dmember1")["items"].as_array().unwrap().is_empty());
}

/// A list streaming while compaction passes its version is written whole
/// and stays the list of its snapshot: kube-apiserver never ends a list
/// response early because etcd compacted (only a later page's continue
/// token can expire). The list outgrows every buffer on its way (42 MB of
/// pods against a few MB of socket and kubefold's buffers), its client stops
/// reading after the first part, every pod is changed and compacted away
/// meanwhile, then the client reads on. The same for a watch's initial
/// state (`sendInitialEvents=true`), read slowly meanwhile: every object
/// of its snapshot arrives as ADDED before the initial-events-end bookmark.
#[test]
fn lists_and_initial_watch_states_streaming_while_compaction_passes_them_are_whole() {
    const PODS: usize = 6_000;
    let sim = kubefold_testdata::start(kubefold_testdata::SimConfig { name: "member1".into(), pods: PODS, ..Default::default() }).unwrap();
    let members = vec![("member1".to_string(), sim)];
    let (tmp, dir) = data_dir();
    let config = tmp.path().join("kubefold.yaml");
    // The client pauses its list while every pod changes, which takes more
    // than the default stall limit (60 s) on a slow machine: kubefold would
    // then close the stalled list, and this test is about one that goes on.
    std::fs::write(&config, "clientStallTimeoutSeconds: 0\nretention:\n  maxEvents: 5\n  maxAgeSeconds: 86400\n  compactionIntervalSeconds: 3600\n").unwrap();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", config.to_str().unwrap()]);
    kf.wait_ready();
    let sim = &members[0].1;
    let load_pods = |list: &Value| list["items"].as_array().unwrap().iter().filter(|p| p["metadata"]["namespace"].as_str().unwrap().starts_with("load-")).count();
    wait_for(Duration::from_secs(120), "the pods synced", || load_pods(&kf.get_json("/api/v1/pods?limit=100000")) == PODS);

    let mut list = reqwest::blocking::Client::builder().timeout(None).build().unwrap().get(format!("{}/api/v1/pods", kf.url)).send().unwrap();
    assert_eq!(list.status().as_u16(), 200);
    let mut body = vec![0u8; 256 << 10];
    std::io::Read::read_exact(&mut list, &mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    let list_rv: u64 = text.split("\"resourceVersion\":\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();

    // Sets the label `changed` of `count` pods at the member and waits
    // until kubefold has the last of them (one watch: in order).
    let pods: Value = reqwest::blocking::get(format!("{}/api/v1/pods", sim.url())).unwrap().json().unwrap();
    let relabel = |count: usize, value: &str| {
        let mut last = String::new();
        for pod in pods["items"].as_array().unwrap().iter().take(count) {
            let mut pod = pod.clone();
            pod["apiVersion"] = "v1".into();
            pod["kind"] = "Pod".into();
            pod["metadata"]["labels"]["changed"] = value.into();
            last = format!("/api/v1/namespaces/{}/pods/{}_member1", pod["metadata"]["namespace"].as_str().unwrap(), pod["metadata"]["name"].as_str().unwrap());
            sim.put_object(pod).unwrap();
        }
        wait_for(Duration::from_secs(120), "the changes ingested", || kf.get(&last).1.contains(&format!("\"changed\":\"{value}\"")));
    };

    // Every pod changes at the member, and kubefold takes it in.
    relabel(usize::MAX, "yes");
    let (code, stats) = post(&format!("{}/admin/v1/compact", kf.url));
    assert_eq!(code, 200, "{stats}");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert!(stats["floor"].as_u64().unwrap() > list_rv, "compaction passed the list's version: {stats}");
    assert!(stats["kept"].as_u64().unwrap() >= 2 * PODS as u64, "the listed versions, superseded, are kept while the list is written: {stats}");

    // The client reads on: the whole list of its snapshot.
    std::io::Read::read_to_end(&mut list, &mut body).unwrap_or_else(|e| panic!("the list broke off: {e}; kubefold: {}", kf.logs()));
    let list: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("the list is not whole JSON ({} bytes): {e}", body.len()));
    assert_eq!(rv_of(&list), list_rv);
    let items = list["items"].as_array().unwrap();
    assert_eq!(load_pods(&list), PODS);
    assert!(items.iter().all(|p| rv_of(p) <= list_rv && p["metadata"]["labels"].get("changed").is_none()), "every item as of the list's version");
    // Once it is written, the next compaction removes what the list held.
    relabel(1, "again");
    let (code, stats) = post(&format!("{}/admin/v1/compact", kf.url));
    assert_eq!(code, 200, "{stats}");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    // (Those the five retained events after the floor replaced stay.)
    assert!(stats["removed"].as_u64().unwrap() >= PODS as u64 - 5, "released with the list: {stats}");

    // A watch's initial state (alone now: the list above held the same
    // records) while every pod changes a third time and compaction passes.
    // The watch's reader takes about 1.3 MB/s (its buffers never stay full
    // long enough for it to count as too slow) until told to hurry.
    let hurry = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .get(format!("{}/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", kf.url))
        .send()
        .unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    let watcher = {
        let hurry = hurry.clone();
        std::thread::spawn(move || -> Result<usize, String> {
            let mut reader = std::io::BufReader::new(watch);
            let (mut added, mut unpaced) = (0usize, 0usize);
            loop {
                let mut line = String::new();
                if std::io::BufRead::read_line(&mut reader, &mut line).map_err(|e| e.to_string())? == 0 {
                    return Err(format!("the watch ended before its initial-events-end bookmark, after {added} pods"));
                }
                unpaced += line.len();
                if unpaced >= 64 << 10 && !hurry.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    unpaced = 0;
                }
                let event: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
                let pod = &event["object"];
                match event["type"].as_str() {
                    Some("ADDED") if pod["metadata"]["namespace"].as_str().is_some_and(|ns| ns.starts_with("load-")) => {
                        if pod["metadata"]["labels"]["changed"] == "third" {
                            return Err(format!("an initial ADDED event is newer than the watch's snapshot: {line}"));
                        }
                        added += 1;
                    }
                    Some("ADDED") => {}
                    Some("BOOKMARK") if pod["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" => return Ok(added),
                    _ => return Err(format!("before the initial-events-end bookmark: {line}")),
                }
            }
        })
    };

    relabel(usize::MAX, "third");
    let (code, stats) = post(&format!("{}/admin/v1/compact", kf.url));
    assert_eq!(code, 200, "{stats}");
    hurry.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(watcher.join().unwrap(), Ok(PODS), "every pod of the watch's snapshot arrives as ADDED; compaction: {stats}");
}
