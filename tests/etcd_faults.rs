//! kubefold replicas over a real etcd under faults, with churning members
//! (feature `etcd`): an etcd member and then the etcd leader stopped
//! (SIGSTOP) in a three-member cluster, a replica cut off from etcd by a
//! loopback proxy that stalls its connections, and a replica killed
//! (SIGKILL) and restarted on its own data dir, twice. In each case the replicas
//! converge to the members' state, serve the same list at the same
//! resourceVersion, and a watch from before the fault replays, on top of
//! the list it started from, into the list at its last event (no gap) with
//! its events ordered and unrepeated, the same on every replica. (SIGKILL
//! of a member's owner is in tests/etcd.rs.) Skips without `etcd`.

#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use etcd_support::*;
use kubefold_testdata::SimHandle;

/// The watch `events` from `from` on `kf`, applied to the list at `from`,
/// give the list at the last event's resourceVersion: nothing missing,
/// nothing repeated, in order.
fn assert_replays(kf: &Kubefold, from: u64, events: &[(String, String, u64)]) {
    assert!(events.windows(2).all(|w| w[0].2 < w[1].2), "ordered, no duplicate: {events:?}");
    let (start, _) = listed(&kf.get_json(&format!("/api/v1/pods?resourceVersion={from}&resourceVersionMatch=Exact")));
    let mut state: BTreeMap<String, String> = start.into_iter().collect();
    for (kind, name, rv) in events {
        match kind.as_str() {
            "DELETED" => {
                assert!(state.remove(name).is_some(), "{name} deleted at {rv} was not there");
            }
            _ => {
                state.insert(name.clone(), rv.to_string());
            }
        }
    }
    let last = events.last().map_or(from, |e| e.2);
    let (end, _) = listed(&kf.get_json(&format!("/api/v1/pods?resourceVersion={last}&resourceVersionMatch=Exact")));
    assert_eq!(state, end.into_iter().collect::<BTreeMap<_, _>>(), "the watch from {from} replays into the list at {last}");
}

/// Every replica at the same resourceVersion serves the same list.
fn assert_same_lists(replicas: &[&Kubefold]) {
    let (_, rv) = listed(&replicas[0].get_json("/api/v1/pods"));
    let path = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    let first = listed(&replicas[0].get_json(&path));
    for kf in &replicas[1..] {
        wait_for(Duration::from_secs(60), "a replica at the first's resourceVersion", || kf.get(&path).0 == 200);
        assert_eq!(listed(&kf.get_json(&path)), first, "one list at resourceVersion {rv}");
    }
}

/// The owner (replica id) of each member, once every member has one and
/// they stayed the same over two lease renewals.
fn owners(etcd: &Etcd, names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    wait_for(Duration::from_secs(60), "every member owned, settled", || {
        let now: Vec<String> = names.iter().filter_map(|m| etcd_get(etcd, &format!("/kubefold/owners/{m}"))).collect();
        let settled = now.len() == names.len() && now == out;
        out = now;
        std::thread::sleep(Duration::from_secs(2));
        settled
    });
    out
}

/// Each member's owner (replica `a` or `b`, as etcd records it) synced
/// it and serves exactly the member's pods.
fn owners_converged(etcd: &Etcd, names: &[String], members: &[(String, SimHandle)], a: &Kubefold, b: &Kubefold) {
    let now = owners(etcd, names);
    for ((member, owner), sim) in names.iter().zip(&now).zip(members) {
        let kf = if owner == "a" { a } else { b };
        wait_for(Duration::from_secs(60), "the owner synced", || kf.get_json(&format!("/admin/v1/clusters/{member}"))["status"]["synced"] == true);
        assert_converged(kf, std::slice::from_ref(sim), "/api/v1/pods", "v1/pods");
    }
}

/// A watch on `kf` from `from`: the next `n` events.
fn watch(kf: &Kubefold, from: u64, n: usize) -> Vec<(String, String, u64)> {
    watch_events(&format!("{}/api/v1/pods?watch=true&resourceVersion={from}", kf.url), n, Duration::from_secs(90))
}

#[test]
fn replicas_ride_out_a_stopped_etcd_member_and_a_stopped_leader() {
    let Some(etcd) = Etcd::cluster(3) else { return };
    let servers = etcd.iter().map(|e| e.url()).collect::<Vec<_>>().join(",");
    let members = demo_members(2, 4.0);
    let flags = cluster_flags(&members);
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let extra = |id: &'static str| vec!["--etcd-servers", &servers, "--etcd-lease-ttl", "3", "--etcd-replica-id", id];
    let a = Kubefold::serve(&data_a, &flags, &extra("a"));
    let b = Kubefold::serve(&data_b, &flags, &extra("b"));
    let logs = [a.log_handle(), b.log_handle()];
    let _dump = Dump(Box::new(move || eprintln!("A's log:\n{}\nB's log:\n{}", logs[0].lock().unwrap(), logs[1].lock().unwrap())));
    owners(&etcd[0], &names);
    wait_for(Duration::from_secs(60), "both members' pods on a", || listed(&a.get_json("/api/v1/pods")).0.len() > 10);
    let (_, from) = listed(&b.get_json("/api/v1/pods"));

    for leader in [false, true] {
        let stopped = etcd.iter().position(|e| e.is_leader() == leader).expect("a member of that role");
        etcd[stopped].signal("STOP");
        // Reads go on from memory meanwhile (resourceVersion=0: not waiting for etcd).
        for kf in [&a, &b] {
            let (code, _) = kf.get("/api/v1/pods?resourceVersion=0");
            assert_eq!(code, 200, "a replica serves while etcd member {stopped} is stopped");
        }
        std::thread::sleep(Duration::from_secs(4));
        etcd[stopped].signal("CONT");
        let (_, before) = listed(&a.get_json("/api/v1/pods?resourceVersion=0"));
        wait_for(Duration::from_secs(90), "new events on both after SIGCONT", || {
            [&a, &b].iter().all(|kf| {
                let (code, body) = kf.get("/api/v1/pods");
                code == 200 && serde_json::from_str::<serde_json::Value>(&body).map(|l| listed(&l).1).is_ok_and(|rv| rv > before)
            })
        });
    }
    owners(&etcd[0], &names);
    for (member, owner) in names.iter().zip(owners(&etcd[0], &names)) {
        let kf = if owner == "a" { &a } else { &b };
        assert_converged(kf, &members[names.iter().position(|n| n == member).unwrap()..][..1], "/api/v1/pods", "v1/pods");
    }
    assert_same_lists(&[&a, &b]);
    let on_a = watch(&a, from, 20);
    assert_eq!(on_a.len(), 20, "{on_a:?}");
    assert_replays(&a, from, &on_a);
    assert_eq!(watch(&b, from, 20), on_a, "the same stream on b");
}

/// A loopback TCP proxy to `upstream` whose connections stall (no byte
/// goes either way, the connections stay open) while `stalled` is set.
struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stalled, closed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (stall, close) = (stalled.clone(), closed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if close.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                // Without it each small gRPC frame waits for the peer's
                // delayed acknowledgement (~40 ms a request instead of ~1).
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let (stall, close) = (stall.clone(), close.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        loop {
                            while stall.load(Ordering::SeqCst) && !close.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            // Bytes read just as the stall began wait for its end.
                            while stall.load(Ordering::SeqCst) && !close.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            if to.write_all(&buf[..n]).is_err() || close.load(Ordering::SeqCst) {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, stalled, closed }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A replica cut off from etcd (its connections stall): its lease expires,
/// the other replica takes its members over and their changes keep coming;
/// the cut-off replica stops their watchers, and whatever it had in flight
/// is refused once it reaches etcd again (the owner key is the other's).
/// Afterwards it catches up and both serve the same lists.
#[test]
fn a_replica_cut_off_from_etcd_loses_its_members_and_writes_nothing_after() {
    let Some(etcd) = Etcd::start() else { return };
    let port: u16 = etcd.url().rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(port);
    let members = demo_members(3, 4.0);
    let flags = cluster_flags(&members);
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let a = Kubefold::serve(&data_a, &flags, &["--etcd-servers", &proxy.url(), "--etcd-lease-ttl", "3", "--etcd-replica-id", "a"]);
    let b = Kubefold::serve(&data_b, &flags, &["--etcd-servers", &etcd.url(), "--etcd-lease-ttl", "3", "--etcd-replica-id", "b"]);
    let logs = [a.log_handle(), b.log_handle()];
    let _dump = Dump(Box::new(move || eprintln!("A's log:\n{}\nB's log:\n{}", logs[0].lock().unwrap(), logs[1].lock().unwrap())));
    let first = owners(&etcd, &names);
    assert!(first.iter().any(|o| o == "a"), "a owns a member (rendezvous of a, b over member1..3): {first:?}");
    let a_members: Vec<&String> = names.iter().zip(&first).filter(|(_, o)| *o == "a").map(|(m, _)| m).collect();
    wait_for(Duration::from_secs(60), "a's members synced", || {
        a_members.iter().all(|m| a.get_json(&format!("/admin/v1/clusters/{m}"))["status"]["synced"] == true)
    });
    let (_, from) = listed(&b.get_json("/api/v1/pods"));

    let released = a.logs().matches("Cluster released").count();
    proxy.stalled.store(true, Ordering::SeqCst);
    // a stops its watchers by itself once its lease is past renewal, its
    // requests to etcd bounded by the lease (TTL 3 s): not after etcd's
    // 15 s request timeout.
    wait_for(Duration::from_secs(8), "a's watchers stopped within 8 s of the stall", || a.logs().matches("Cluster released").count() >= released + a_members.len());
    wait_for(Duration::from_secs(30), "b owning every member", || names.iter().all(|m| etcd_get(&etcd, &format!("/kubefold/owners/{m}")).as_deref() == Some("b")));
    for member in &a_members {
        wait_for(Duration::from_secs(60), "the member synced on b", || b.get_json(&format!("/admin/v1/clusters/{member}"))["status"]["synced"] == true);
    }
    std::thread::sleep(Duration::from_secs(3));
    proxy.stalled.store(false, Ordering::SeqCst);

    // a is back: registered again, it may take members back; whichever
    // writes, both converge and agree.
    wait_for(Duration::from_secs(60), "a registered again", || a.logs().matches("Registered as a replica in etcd").count() >= 2);
    owners_converged(&etcd, &names, &members, &a, &b);
    assert_same_lists(&[&a, &b]);
    let on_b = watch(&b, from, 25);
    assert_eq!(on_b.len(), 25, "{on_b:?}");
    assert_replays(&b, from, &on_b);
    assert_eq!(watch(&a, from, 25), on_b, "the same stream on a");
    // Anything a wrote for a member it no longer owned was refused: every
    // commit after the takeover is b's (a's refusals, if any, are counted).
    let refused = a.get("/metrics").1.lines().find(|l| l.starts_with("kubefold_etcd_fenced_writes_total")).map(str::to_string);
    eprintln!("a's refused commits: {refused:?}");
}

/// A replica killed (SIGKILL) under member churn and restarted on its own
/// data dir (its local copy, as a restarted process or pod keeps it), then
/// killed again while it catches up, and restarted once more: it
/// serves from the copy, resumes the log after what the copy holds, and
/// then both replicas serve the same list at the same resourceVersion, each
/// member's part equal to the member's state, and a watch from before the
/// kill replays the same on both.
#[test]
fn a_replica_restarted_on_its_own_data_dir_serves_every_object() {
    let Some(etcd) = Etcd::start() else { return };
    let members = demo_members(3, 4.0);
    let flags = cluster_flags(&members);
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let serve = |id: &str, data: &std::path::Path| Kubefold::serve(data, &flags, &["--etcd-servers", &etcd.url(), "--etcd-lease-ttl", "3", "--etcd-replica-id", id]);
    let a = serve("a", &data_a);
    let b = serve("b", &data_b);
    let logs = [a.log_handle(), b.log_handle()];
    let _dump = Dump(Box::new(move || eprintln!("A's first log:\n{}\nB's log:\n{}", logs[0].lock().unwrap(), logs[1].lock().unwrap())));
    owners(&etcd, &names);
    for kf in [&a, &b] {
        wait_for(Duration::from_secs(60), "every member's pods on the replica", || {
            let (pods, _) = listed(&kf.get_json("/api/v1/pods"));
            names.iter().all(|m| pods.iter().any(|(n, _)| n.ends_with(&format!("_{m}"))))
        });
    }
    let (_, from) = listed(&b.get_json("/api/v1/pods"));
    // The churn goes on for a while: a's copy holds changes of every kind.
    std::thread::sleep(Duration::from_secs(5));
    a.kill();
    std::thread::sleep(Duration::from_secs(2));
    // Killed again while it catches up and takes its members back, then
    // started once more: the same data dir all along.
    let a = serve("a", &data_a);
    std::thread::sleep(Duration::from_millis(1500));
    a.kill();
    let a = serve("a", &data_a);
    let again = a.log_handle();
    let _dump_again = Dump(Box::new(move || eprintln!("A's log after the restarts:\n{}", again.lock().unwrap())));

    owners_converged(&etcd, &names, &members, &a, &b);
    assert_same_lists(&[&a, &b]);
    assert_same_lists(&[&b, &a]);
    let on_b = watch(&b, from, 25);
    assert_eq!(on_b.len(), 25, "{on_b:?}");
    assert_replays(&a, from, &on_b);
    assert_eq!(watch(&a, from, 25), on_b, "the same stream on the restarted replica");
}
