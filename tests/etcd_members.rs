//! Members added through the admin API of kubefold replicas over a real
//! etcd: recorded there, served by every replica and watched by exactly
//! one; removed through any replica, their objects deleted once for all;
//! still members after a replica restarts. Skips, naming what is missing,
//! without the `etcd` binary.

#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use etcd_support::*;
use serde_json::{json, Value};

/// The replica id owning `member` (its owner key in etcd).
fn owner_of(etcd: &Etcd, member: &str) -> Option<String> {
    etcd_get(etcd, &format!("/kubefold/owners/{member}"))
}

/// The replicas that say they own `member` in the operations view of `kf`.
fn owners_in_view(kf: &Kubefold, member: &str) -> Vec<String> {
    let view = kf.get_json("/admin/v1/replicas");
    let items = view["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|r| r["owned"].as_array().is_some_and(|o| o.iter().any(|m| m == member)))
        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The names of `member`'s pods that `kf` lists, and the list's resourceVersion.
fn pods_of(kf: &Kubefold, member: &str) -> (BTreeSet<String>, u64) {
    let (pods, rv) = listed(&kf.get_json(&format!("/api/v1/pods?labelSelector=kubefold.io/cluster%3D{member}")));
    (pods.into_iter().map(|(n, _)| n).collect(), rv)
}

/// Whether `kf` runs a pods watcher of `member` (only its owner does).
fn watches(kf: &Kubefold, member: &str) -> bool {
    kf.get(&format!("/admin/v1/clusters/{member}")).1.contains("\"v1/pods\"")
}

fn post(kf: &Kubefold, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::blocking::Client::new().post(format!("{}{path}", kf.url)).json(&body).send().unwrap();
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

fn delete(kf: &Kubefold, path: &str) -> (u16, Value) {
    let response = reqwest::blocking::Client::builder().timeout(Duration::from_secs(90)).build().unwrap().delete(format!("{}{path}", kf.url)).send().unwrap();
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

/// Two replicas over one etcd (lease TTL 3 s), no member configured: a
/// member registered through A is recorded in etcd and served by both at
/// one resourceVersion, watched by exactly one; a second registration of
/// its name on B is 409; removed through B, its objects leave both lists
/// and a watch on each replica sees every one DELETED once; a member added
/// beside it is still there after B restarts on an empty data dir.
#[test]
fn members_added_through_the_admin_api_belong_to_every_replica() {
    let Some(etcd) = Etcd::start() else { return };
    let members = demo_members(2, 0.0);
    let flags = cluster_flags(&members);
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let serve = |id: &str, data: &std::path::Path| {
        Kubefold::serve(data, &[], &["--etcd-servers", &etcd.url(), "--etcd-lease-ttl", "3", "--etcd-replica-id", id])
    };
    let (a, b) = (serve("a", &data_a), serve("b", &data_b));
    let logs = [a.log_handle(), b.log_handle()];
    let _dump = Dump(Box::new(move || eprintln!("A's log:\n{}\nB's log:\n{}", logs[0].lock().unwrap(), logs[1].lock().unwrap())));
    wait_for(Duration::from_secs(30), "both replicas registered", || a.get_json("/admin/v1/replicas")["items"].as_array().is_some_and(|i| i.len() == 2));

    // Registered through A: recorded in etcd, credentials and all.
    let spec = |n: usize| json!({"name": flags[n].0, "url": flags[n].1, "token": "member-secret"});
    let (code, created) = post(&a, "/admin/v1/clusters", spec(0));
    assert_eq!(code, 201, "{created}");
    let recorded: Value = serde_json::from_str(&etcd_get(&etcd, "/kubefold/members/member1").expect("the member is recorded in etcd")).unwrap();
    assert_eq!((recorded["url"].as_str(), recorded["token"].as_str()), (Some(flags[0].1.as_str()), Some("member-secret")), "{recorded}");
    // Its name is taken on every replica.
    for kf in [&a, &b] {
        wait_for(Duration::from_secs(30), "the member known on both replicas", || kf.get("/admin/v1/clusters/member1").0 == 200);
        let (code, status) = post(kf, "/admin/v1/clusters", spec(0));
        assert_eq!((code, status["reason"].as_str()), (409, Some("AlreadyExists")), "{status}");
        assert_eq!(kf.get_json("/admin/v1/clusters/member1")["source"], "api");
    }

    // Watched by exactly one replica, the one the operations view names.
    wait_for(Duration::from_secs(30), "member1 owned", || owner_of(&etcd, "member1").is_some());
    let owner_id = owner_of(&etcd, "member1").unwrap();
    // Rendezvous hashing gives member1 to A: B, removing it below, does not own it.
    assert_eq!(owner_id, "a");
    let (owner, other) = (&a, &b);
    assert_converged(owner, &members[..1], "/api/v1/pods", "v1/pods");
    for kf in [&a, &b] {
        assert_eq!(owners_in_view(kf, "member1"), [owner_id.clone()], "one owner in {}'s view", kf.url);
    }
    assert!(watches(owner, "member1") && !watches(other, "member1"), "member1 is watched by {owner_id} only");
    // Served by both at the same resourceVersion.
    let (pods, rv) = pods_of(owner, "member1");
    assert!(!pods.is_empty());
    let exact = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    wait_for(Duration::from_secs(30), "the other replica at the owner's resourceVersion", || other.get(&exact).0 == 200);
    assert_eq!(listed(&a.get_json(&exact)), listed(&b.get_json(&exact)), "one list at resourceVersion {rv}");

    // A second member, registered through B, stays to the end.
    assert_eq!(post(&b, "/admin/v1/clusters", spec(1)).0, 201);
    wait_for(Duration::from_secs(60), "member2's pods on A", || !pods_of(&a, "member2").0.is_empty());

    // Every object of member1, of all types, as its owner counts them.
    let status = owner.get_json("/admin/v1/clusters/member1");
    let objects: u64 = status["status"]["resources"].as_object().unwrap().values().map(|r| r["objects"].as_u64().unwrap()).sum();
    assert!(objects > pods.len() as u64, "{status}");

    // Removed through B: a watch on each replica from before the removal
    // sees each of member1's pods DELETED once, and nothing else.
    let (_, from) = listed(&a.get_json("/api/v1/pods"));
    let watchers: Vec<_> = [&a, &b]
        .iter()
        .map(|kf| {
            let url = format!("{}/api/v1/pods?watch=true&resourceVersion={from}&labelSelector=kubefold.io/cluster%3Dmember1", kf.url);
            std::thread::spawn(move || watch_events(&url, usize::MAX, Duration::from_secs(30)))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let (code, removed) = delete(&b, "/admin/v1/clusters/member1");
    assert_eq!(code, 200, "{removed}");
    assert_eq!(removed["deletedObjects"].as_u64(), Some(objects), "{removed}");
    assert_eq!(b.get("/admin/v1/clusters/member1").0, 404, "gone at once on the replica that removed it");
    for kf in [&a, &b] {
        wait_for(Duration::from_secs(30), "member1 gone", || kf.get("/admin/v1/clusters/member1").0 == 404);
        assert_eq!(pods_of(kf, "member1").0, BTreeSet::new(), "member1's pods gone from {}", kf.url);
        assert!(!pods_of(kf, "member2").0.is_empty(), "member2 stays on {}", kf.url);
    }
    assert_eq!(etcd_get(&etcd, "/kubefold/members/member1"), None, "the record is gone");
    assert_eq!(owner_of(&etcd, "member1"), None, "nobody owns it");
    assert_eq!(delete(&a, "/admin/v1/clusters/member1").0, 404);
    for watcher in watchers {
        let events = watcher.join().unwrap();
        assert!(events.iter().all(|(kind, _, _)| kind == "DELETED"), "{events:?}");
        let names: Vec<&String> = events.iter().map(|(_, n, _)| n).collect();
        assert_eq!(names.iter().copied().cloned().collect::<BTreeSet<_>>(), pods, "each pod DELETED: {events:?}");
        assert_eq!(names.len(), pods.len(), "each pod DELETED once: {events:?}");
    }

    // B restarts on an empty data dir: member2 is still a member there,
    // watched by exactly one replica.
    b.stop();
    let (_dc, data_c) = data_dir();
    let b = serve("b", &data_c);
    let back_logs = b.log_handle();
    let _dump_back = Dump(Box::new(move || eprintln!("The restarted B's log:\n{}", back_logs.lock().unwrap())));
    wait_for(Duration::from_secs(30), "member2 known on the restarted B", || b.get("/admin/v1/clusters/member2").0 == 200);
    assert_eq!(b.get_json("/admin/v1/clusters/member2")["source"], "api");
    assert_eq!(b.get("/admin/v1/clusters/member1").0, 404);
    wait_for(Duration::from_secs(60), "member2 owned by one live replica", || {
        let owners = owners_in_view(&b, "member2");
        owners.len() == 1 && owner_of(&etcd, "member2").is_some_and(|o| owners[0] == o)
    });
    let owner2 = owner_of(&etcd, "member2").unwrap();
    let (owner, other) = if owner2 == "a" { (&a, &b) } else { (&b, &a) };
    wait_for(Duration::from_secs(60), "member2 watched by its owner", || watches(owner, "member2"));
    assert!(!watches(other, "member2"), "member2 is watched by {owner2} only");
    let (_, rv) = listed(&a.get_json("/api/v1/pods"));
    let exact = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    wait_for(Duration::from_secs(30), "B at A's resourceVersion", || b.get(&exact).0 == 200);
    assert_eq!(listed(&a.get_json(&exact)), listed(&b.get_json(&exact)), "one list at resourceVersion {rv} after the restart");
    assert_eq!(pods_of(&b, "member2").0.len(), pods_of(&a, "member2").0.len());
}
