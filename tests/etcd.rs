//! kubefold replicas over a real etcd (`--etcd-servers`): one replica
//! syncing two members and rebuilding its copy from etcd; two replicas over
//! one etcd, each watching one member, serving one sequence of
//! resourceVersions (the same list at the same resourceVersion, a watch
//! resumed on the other replica with no gap and no duplicate, an edit with
//! read-your-writes, a consistent read on the other replica), and an etcd
//! restart. Skips, naming what is missing, without the `etcd` binary.

#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use etcd_support::*;
use serde_json::Value;

/// One replica on etcd syncs two members; a second start on an empty data
/// dir rebuilds the same state from etcd alone, at the same resourceVersion.
#[test]
fn one_replica_on_etcd_syncs_two_members_and_rebuilds_from_etcd() {
    let Some(etcd) = Etcd::start() else { return };
    let members = demo_members(2, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &["--etcd-servers", &etcd.url()]);
    kf.wait_ready();
    assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");
    let (pods, rv) = listed(&kf.get_json("/api/v1/pods"));
    assert!(pods.iter().any(|(n, _)| n.ends_with("_member1")) && pods.iter().any(|(n, _)| n.ends_with("_member2")), "{pods:?}");
    // Every resourceVersion is etcd's revision of its transaction with the
    // event's place in it: far above the count of events.
    assert!(rv > 1 << 12, "resourceVersion {rv} is derived from an etcd revision");
    kf.stop();

    // An empty data dir and no member: everything comes from etcd (named
    // in the config file this time).
    let (_dir2, data2) = data_dir();
    let (_config_dir, config) = config_file(&format!("etcd:\n  servers: [\"{}\"]\n  prefix: /kubefold\n", etcd.url()));
    let replica = Kubefold::serve(&data2, &[], &["--config", &config]);
    wait_for(Duration::from_secs(30), "the rebuilt replica at the same head", || {
        let (code, body) = replica.get("/api/v1/pods");
        code == 200 && serde_json::from_str::<Value>(&body).map(|l| listed(&l)).is_ok_and(|(p, r)| p == pods && r == rv)
    });
    let exact = replica.get_json(&format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact"));
    assert_eq!(listed(&exact), (pods, rv));
}

/// Two replicas over one etcd, member1 watched by A and member2 by B.
#[test]
fn two_replicas_serve_one_sequence_of_resource_versions() {
    let Some(mut etcd) = Etcd::start() else { return };
    let members = demo_members(2, 4.0);
    let flags = cluster_flags(&members);
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let a = Kubefold::serve(&data_a, &flags[..1], &["--etcd-servers", &etcd.url()]);
    let b = Kubefold::serve(&data_b, &flags[1..], &["--etcd-servers", &etcd.url()]);
    a.wait_ready();
    b.wait_ready();
    // Each replica serves both members, whichever watches them.
    for kf in [&a, &b] {
        wait_for(Duration::from_secs(60), "both members' pods on both replicas", || {
            let (pods, _) = listed(&kf.get_json("/api/v1/pods"));
            pods.iter().any(|(n, _)| n.ends_with("_member1")) && pods.iter().any(|(n, _)| n.ends_with("_member2"))
        });
    }

    // The same list at the same resourceVersion on both.
    let (_, rv) = listed(&a.get_json("/api/v1/pods"));
    let path = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    wait_for(Duration::from_secs(30), "B at A's resourceVersion", || b.get(&path).0 == 200);
    assert_eq!(listed(&a.get_json(&path)), listed(&b.get_json(&path)), "one list at resourceVersion {rv}");
    // Each replica says which log it follows and how far it applied it.
    let shared = |kf: &Kubefold| kf.get_json("/admin/v1/stats")["sharedLog"].clone();
    assert_eq!(shared(&a)["log"], shared(&b)["log"]);
    assert!(shared(&a)["log"].as_str().is_some_and(|l| l.contains("prefix /kubefold")), "{}", shared(&a));
    for kf in [&a, &b] {
        assert!(shared(kf)["appliedRevision"].as_u64().is_some_and(|r| r >= rv >> 12), "{} at {rv}", shared(kf));
    }

    // A watch on A from rv; then one on B from the 5th event it saw: B
    // sends exactly what A sent after it, no gap, no duplicate.
    let on_a = watch_events(&format!("{}/api/v1/pods?watch=true&resourceVersion={rv}", a.url), 12, Duration::from_secs(60));
    assert!(on_a.len() >= 12, "churn makes events: {on_a:?}");
    assert!(on_a.windows(2).all(|w| w[0].2 < w[1].2), "ordered: {on_a:?}");
    let resumed_at = on_a[4].2;
    let on_b = watch_events(&format!("{}/api/v1/pods?watch=true&resourceVersion={resumed_at}", b.url), 7, Duration::from_secs(60));
    assert_eq!(on_b, on_a[5..12].to_vec(), "resumed on B after {resumed_at}");

    // An edit through B (of the member it watches) is read back on B at
    // once, and by a consistent read on A.
    let (pods, _) = listed(&b.get_json("/api/v1/namespaces/default/pods?labelSelector=kubefold.io/cluster%3Dmember2"));
    // Not one of the pods the member's churn creates and deletes.
    let name = &pods.iter().find(|(n, _)| !n.starts_with("churn-") && !n.starts_with("load-")).expect("a pod of member2 the churn leaves alone").0;
    let client = reqwest::blocking::Client::new();
    let patched = client
        .patch(format!("{}/api/v1/namespaces/default/pods/{name}", b.url))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"edited":"through-b"}}}"#)
        .send()
        .unwrap();
    assert_eq!(patched.status().as_u16(), 200);
    let label = |kf: &Kubefold| kf.get_json(&format!("/api/v1/namespaces/default/pods/{name}"))["metadata"]["labels"]["edited"].clone();
    assert_eq!(label(&b), "through-b", "read-your-writes on B");
    assert_eq!(label(&a), "through-b", "a consistent read on A waits for etcd's head");

    // etcd restarts: both replicas go on, and agree again.
    etcd.kill();
    std::thread::sleep(Duration::from_secs(1));
    etcd.run();
    let (_, before) = listed(&a.get_json("/api/v1/pods"));
    wait_for(Duration::from_secs(60), "new events after the etcd restart", || {
        let (code, body) = b.get("/api/v1/pods");
        code == 200 && serde_json::from_str::<Value>(&body).map(|l| listed(&l).1).is_ok_and(|r| r > before)
    });
    let (_, rv) = listed(&b.get_json("/api/v1/pods"));
    let path = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    wait_for(Duration::from_secs(30), "A at B's resourceVersion", || a.get(&path).0 == 200);
    assert_eq!(listed(&a.get_json(&path)), listed(&b.get_json(&path)), "one list at resourceVersion {rv} after the restart");
}

/// The log itself: a batch too large for one etcd transaction is split
/// within etcd's limits, its checkpoint in the last part only; a second
/// writer fenced on an older head is refused and writes nothing; a
/// catch-up and a watch give every event back in order, numbered by
/// revision and place; a consistent read of the head names the last event.
#[test]
fn the_etcd_log_splits_batches_fences_writers_and_reads_back_in_order() {
    use kubefold_engine::event::{EventType, StoredEvent};
    use kubefold_engine::{object, resources};
    use kubefold_store::shared::{revision_of, SharedError, SharedLog};
    let Some(etcd) = Etcd::start() else { return };
    let options = kubefold_etcd::EtcdOptions { servers: vec![etcd.url()], prefix: "/test".into(), ..Default::default() };
    let (one, two) = (kubefold_etcd::EtcdLog::connect(&options).unwrap(), kubefold_etcd::EtcdLog::connect(&options).unwrap());
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let events: Vec<StoredEvent> = (0..300u64)
        .map(|i| {
            let raw = format!(r#"{{"metadata":{{"name":"p{i}","namespace":"default","resourceVersion":"{i}"}},"spec":{{"nodeName":"n{i}"}}}}"#);
            StoredEvent::new(i + 1, EventType::Added, "v1/pods", "m1", 0, object::ingest(&pods, "m1", raw.as_bytes()).unwrap())
        })
        .collect();
    let checkpoints = vec![("m1".to_string(), "v1/pods".to_string(), "299".to_string())];
    let (mut at, mut fence, mut parts) = (0, 0, Vec::new());
    while at < events.len() {
        let (taken, revision) = one.commit_part(&events[at..], &checkpoints, &[], fence).unwrap();
        assert!((1..kubefold_etcd::MAX_TXN_OPS).contains(&taken), "{taken} events in one transaction");
        parts.push((revision, taken));
        at += taken;
        fence = revision;
    }
    assert!(parts.len() >= 3, "300 events take several transactions: {parts:?}");
    let stale = two.commit_part(&events[..1], &[], &[], parts[0].0);
    assert!(matches!(stale, Err(SharedError::Fenced(_))), "a writer behind the head is fenced out: {stale:?}");

    let caught = two.catch_up(0).unwrap();
    assert_eq!(caught.head_revision, fence);
    assert_eq!(caught.batches.iter().map(|b| (b.revision, b.events.len())).collect::<Vec<_>>(), parts, "nothing of the fenced writer");
    for (n, batch) in caught.batches.iter().enumerate() {
        let last = n + 1 == caught.batches.len();
        assert_eq!(batch.checkpoints.is_empty(), !last, "the checkpoint is in the last transaction only");
        assert!(batch.events.iter().all(|e| revision_of(e.rv) == batch.revision));
    }
    let read: Vec<&StoredEvent> = caught.batches.iter().flat_map(|b| &b.events).collect();
    assert_eq!(read.iter().map(|e| e.key.name.as_str()).collect::<Vec<_>>(), events.iter().map(|e| e.key.name.as_str()).collect::<Vec<_>>());
    assert!(read.windows(2).all(|w| w[0].rv < w[1].rv), "resourceVersions in log order");
    assert!(read.iter().zip(&events).all(|(r, e)| r.body.json == e.body.json && r.member_rv == e.member_rv), "records round-trip");
    let later = two.catch_up(parts[0].0).unwrap();
    assert_eq!(later.batches.len(), parts.len() - 1, "a catch-up from a transaction reads only those after it");
    let head = futures::executor::block_on(two.current_rv()).unwrap();
    assert_eq!(head, read.last().unwrap().rv, "the head names the last event");

    // A watch from the first transaction delivers the others as they were committed.
    let mut watch = two.watch(parts[0].0);
    let watched = futures::executor::block_on(two.spawn(async move {
        let mut got = Vec::new();
        while got.len() < parts.len() - 1 {
            let next = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.expect("the watch delivers within 30 s");
            got.extend(next.unwrap().into_iter().map(|b| (b.revision, b.events.len())));
        }
        (got, parts)
    }))
    .unwrap();
    assert_eq!(watched.0, watched.1[1..].to_vec());
}

/// Bodies in etcd are compressed with one dictionary per type, shared by
/// every replica: the first replica to commit enough pods records the
/// pods' dictionary; a replica that connected before learns it from its
/// catch-up, one that proposes its own later uses the recorded one instead,
/// and one that connects afterwards reads it when it connects. The records
/// are less than half the size of the same bodies compressed one by one.
#[test]
fn bodies_in_etcd_share_one_dictionary_per_type() {
    use kubefold_engine::event::{EventType, StoredEvent};
    use kubefold_engine::{object, resources};
    use kubefold_store::shared::SharedLog;
    let Some(etcd) = Etcd::start() else { return };
    let options = kubefold_etcd::EtcdOptions { servers: vec![etcd.url()], prefix: "/dicts-test".into(), ..Default::default() };
    let connect = || kubefold_etcd::EtcdLog::connect(&options).unwrap();
    let (one, two, three) = (connect(), connect(), connect());
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let pod = |i: u64, node: &str| {
        let raw = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i}","namespace":"default","uid":"6f1c2b9e-{i:04}-4a7d-9c1e-{i:012}","resourceVersion":"{i}","labels":{{"app":"web","pod-template-hash":"5d8f7c9b{h}"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5d8f7c9b{h}","uid":"0b7e4d21-{h:04}-47c8-8f5e-3a9d0c6b1e2f","controller":true}}]}},"spec":{{"containers":[{{"name":"web","image":"nginx:1.27","ports":[{{"containerPort":80,"protocol":"TCP"}}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}}}}}}],"nodeName":"{node}","restartPolicy":"Always","schedulerName":"default-scheduler"}},"status":{{"phase":"Running","podIP":"10.0.{a}.{b}"}}}}"#,
            h = i % 10,
            a = i / 256,
            b = i % 256
        );
        StoredEvent::new(i, EventType::Added, "v1/pods", "m1", 0, object::ingest(&pods, "m1", raw.as_bytes()).unwrap())
    };
    let first: Vec<StoredEvent> = (1..=100).map(|i| pod(i, "node-a")).collect();
    let (mut at, mut fence) = (0, 0);
    while at < first.len() {
        let (taken, revision) = one.commit_part(&first[at..], &[], &[], fence).unwrap();
        at += taken;
        fence = revision;
    }
    let dict = etcd_get(&etcd, "/dicts-test/dicts/v1/pods").expect("the pods' dictionary is recorded in etcd");
    assert!(dict.len() >= 4096, "a dictionary of the first bodies: {} bytes", dict.len());

    // The records: less than half of the same bodies compressed alone.
    let range = etcd_post(&etcd, "/v3/kv/range", serde_json::json!({ "key": base64_of("/dicts-test/e/"), "range_end": base64_of("/dicts-test/e0") }));
    let stored: usize = range["kvs"].as_array().unwrap().iter().map(|kv| kv["value"].as_str().unwrap().len() * 3 / 4).sum();
    let alone: usize = first.iter().map(|e| kubefold_store::encode_event(e).unwrap().len()).sum();
    assert!(stored * 2 < alone, "records with the dictionary take {stored} bytes, {alone} compressed alone");

    // Two connected before the dictionary existed: its catch-up decodes.
    let caught = two.catch_up(0).unwrap();
    let read: Vec<&StoredEvent> = caught.batches.iter().flat_map(|b| &b.events).collect();
    assert_eq!(read.len(), first.len());
    assert!(read.iter().zip(&first).all(|(r, e)| r.body.json == e.body.json), "bodies round-trip through the dictionary");

    // A third replica, connected before the dictionary existed and not
    // caught up since, commits other bodies: it proposes a dictionary of
    // its own, finds one recorded, and uses that one.
    let second: Vec<StoredEvent> = (101..=200).map(|i| pod(i, "node-b")).collect();
    let (mut head, mut at) = (fence, 0);
    while at < second.len() {
        let (taken, revision) = three.commit_part(&second[at..], &[], &[], head).unwrap();
        at += taken;
        head = revision;
    }
    assert_eq!(etcd_get(&etcd, "/dicts-test/dicts/v1/pods").as_deref(), Some(dict.as_str()), "a recorded dictionary never changes");
    // And a replica connecting now reads it at once.
    let four = connect();
    let all: Vec<StoredEvent> = four.catch_up(0).unwrap().batches.into_iter().flat_map(|b| b.events).collect();
    assert_eq!(all.len(), 200);
    assert!(all.iter().zip(first.iter().chain(&second)).all(|(r, e)| r.body.json == e.body.json && r.key == e.key));
}

/// Runs `kubefold serve ARGS` that must refuse to start: its exit status
/// and what it printed on stderr (killed, and the test failed, after 60 s).
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubefold")).arg("serve").args(["--listen", "127.0.0.1:0"]).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            assert!(!status.success(), "kubefold {args:?} must not start: {err}");
            return err;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("kubefold {args:?} did not refuse within 60 s");
}

/// A data dir is a copy of one log: one written without etcd is refused by
/// a replica, a replica's copy is refused without etcd, and a copy older
/// than etcd's compaction (retention compacts etcd too, deleting a deleted
/// pod's events) is moved aside and rebuilt from etcd: the same list at the
/// same resourceVersion, without the pod (a copy caught up from its old
/// head would keep it: its deletion is compacted away).
#[test]
fn copies_are_checked_against_etcd_and_a_stale_one_is_rebuilt() {
    let Some(etcd) = Etcd::start() else { return };
    let members = demo_members(1, 0.0);
    let flags = cluster_flags(&members);

    // kubefold's own history is not a copy of etcd's.
    let (_ds, data_s) = data_dir();
    let alone = Kubefold::serve(&data_s, &flags, &[]);
    alone.wait_ready();
    alone.stop();
    let err = refused(&["--data-dir", data_s.to_str().unwrap(), "--etcd-servers", &etcd.url()]);
    assert!(err.contains("written without --etcd-servers"), "{err}");

    let (_dc, data_c) = data_dir();
    let c = Kubefold::serve(&data_c, &[], &["--etcd-servers", &etcd.url()]);
    let (_config_dir, config) = config_file("retention: {maxAgeSeconds: 1, compactionIntervalSeconds: 1}\n");
    let (_da, data_a) = data_dir();
    let a = Kubefold::serve(&data_a, &flags, &["--etcd-servers", &etcd.url(), "--config", &config]);
    a.wait_ready();
    wait_for(Duration::from_secs(60), "C serving member1's pods", || listed(&c.get_json("/api/v1/pods")).0.len() > 1);
    let (_, c_head) = listed(&c.get_json("/api/v1/pods"));
    c.stop();
    let err = refused(&["--data-dir", data_c.to_str().unwrap()]);
    assert!(err.contains("copy of an etcd log"), "{err}");

    let a = std::sync::Arc::new(a);
    let a_logs = a.clone();
    let _logs = Dump(Box::new(move || eprintln!("A's log:\n{}", a_logs.logs())));
    // A pod deleted through A, then retention compacts etcd past C's copy.
    let (pods, _) = listed(&a.get_json("/api/v1/namespaces/default/pods"));
    let doomed = pods.first().expect("a pod in default").0.clone();
    let deleted = reqwest::blocking::Client::new().delete(format!("{}/api/v1/namespaces/default/pods/{doomed}", a.url)).send().unwrap();
    assert!(deleted.status().is_success(), "delete {doomed}: {}", deleted.status());
    wait_for(Duration::from_secs(30), "the deletion on A", || !listed(&a.get_json("/api/v1/pods")).0.iter().any(|(n, _)| n == &doomed));
    wait_for(Duration::from_secs(90), "etcd compacted past C's head", || {
        etcd_get(&etcd, "/kubefold/compacted").and_then(|f| f.parse::<u64>().ok()).is_some_and(|f| f > c_head)
    });
    let c = std::sync::Arc::new(Kubefold::serve(&data_c, &[], &["--etcd-servers", &etcd.url()]));
    let c_logs = c.clone();
    let _c_dump = Dump(Box::new(move || eprintln!("C's log:\n{}", c_logs.logs())));
    wait_for(Duration::from_secs(10), "the stale copy moved aside", || c.logs().contains("moved aside"));
    assert!(std::fs::read_dir(&data_c).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("stale-")));
    // The member settles (its controllers replace the pod): C then serves A's list.
    let same = || {
        let (code, body) = c.get("/api/v1/pods");
        code == 200 && serde_json::from_str::<Value>(&body).is_ok_and(|l| listed(&l) == listed(&a.get_json("/api/v1/pods")))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !same() {
        assert!(Instant::now() < deadline, "C serves A's list at A's resourceVersion: C {:?}, A {:?}\nC: {}", listed(&c.get_json("/api/v1/pods")), listed(&a.get_json("/api/v1/pods")), c.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (rebuilt, _) = listed(&c.get_json("/api/v1/pods"));
    assert!(rebuilt.len() > 1 && !rebuilt.iter().any(|(n, _)| n == &doomed), "{doomed} is gone from the rebuilt copy: {rebuilt:?}");
}

/// What the ownership loop asked of a test's members.
#[derive(Default)]
struct Recorded {
    taken: std::sync::Mutex<Vec<String>>,
    released: std::sync::Mutex<Vec<String>>,
}

impl kubefold_etcd::MemberControl for Recorded {
    fn take(&self, member: String) -> futures::future::BoxFuture<'static, ()> {
        self.taken.lock().unwrap().push(member);
        Box::pin(async {})
    }

    fn release(&self, member: String) -> futures::future::BoxFuture<'static, ()> {
        self.released.lock().unwrap().push(member);
        Box::pin(async {})
    }

    fn applied_revision(&self) -> u64 {
        0
    }

    fn learn(&self, _member: String, _spec: Vec<u8>) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn forget(&self, _member: String) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn remove(&self, member: String) -> futures::future::BoxFuture<'static, Result<(), String>> {
        self.released.lock().unwrap().push(member);
        Box::pin(async { Ok(()) })
    }
}

/// etcd's JSON gateway: `POST path body`, the answer as JSON.
fn etcd_post(etcd: &Etcd, path: &str, body: Value) -> Value {
    reqwest::blocking::Client::new().post(format!("{}{path}", etcd.url())).body(body.to_string()).send().unwrap().json().unwrap()
}

/// A member's changes are written only by the replica holding its owner
/// key under its lease: once that lease is gone (revoked here, as etcd does
/// when it expires) the old owner's next commit is refused by etcd itself,
/// before its own loop has noticed, and writes nothing; the ownership loop
/// then stops the member's watchers, and another replica takes it.
#[test]
fn a_member_is_written_only_under_its_owners_lease() {
    use kubefold_engine::event::{EventType, StoredEvent};
    use kubefold_engine::{object, resources};
    use kubefold_store::shared::{SharedError, SharedLog};
    let Some(etcd) = Etcd::start() else { return };
    let options = kubefold_etcd::EtcdOptions { servers: vec![etcd.url()], prefix: "/fence".into(), ..Default::default() };
    let (one, two) = (kubefold_etcd::EtcdLog::connect(&options).unwrap(), kubefold_etcd::EtcdLog::connect(&options).unwrap());
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let event = |i: u64| {
        let raw = format!(r#"{{"metadata":{{"name":"p{i}","namespace":"default","resourceVersion":"{i}"}}}}"#);
        StoredEvent::new(i, EventType::Added, "v1/pods", "m1", 0, object::ingest(&pods, "m1", raw.as_bytes()).unwrap())
    };
    let membership = |log: &std::sync::Arc<kubefold_etcd::EtcdLog>, id: &str, control: std::sync::Arc<Recorded>| {
        let options = kubefold_etcd::MembershipOptions { id: id.into(), address: format!("{id}:443"), ttl: Duration::from_secs(30), members: vec!["m1".into()] };
        kubefold_etcd::Membership::start(log, options, control)
    };
    let control_one = std::sync::Arc::new(Recorded::default());
    let one_membership = membership(&one, "one", control_one.clone());
    wait_for(Duration::from_secs(30), "replica one owning m1", || control_one.taken.lock().unwrap().contains(&"m1".to_string()));
    assert_eq!(etcd_get(&etcd, "/fence/owners/m1").as_deref(), Some("one"));
    assert_eq!(one.owned_members(), ["m1"]);
    let head = one.catch_up(0).unwrap().head_revision;
    let (_, written) = one.commit_part(&[event(1)], &[("m1".into(), "v1/pods".into(), "1".into())], &[], head).expect("the owner writes");

    // The lease goes (as when it expires): its owner key with it.
    let owner = etcd_post(&etcd, "/v3/kv/range", serde_json::json!({ "key": base64_of("/fence/owners/m1") }));
    let lease = owner["kvs"][0]["lease"].as_str().expect("the owner key is under a lease").to_string();
    etcd_post(&etcd, "/v3/lease/revoke", serde_json::json!({ "ID": lease }));
    let stale = one.commit_part(&[event(3)], &[], &[], written);
    assert!(matches!(&stale, Err(SharedError::NotOwner(m)) if m == "m1"), "the old owner is fenced out: {stale:?}");
    let caught = two.catch_up(0).unwrap();
    assert_eq!(caught.head_revision, written, "nothing of the refused commit");
    assert_eq!(caught.batches.iter().map(|b| b.events.len()).sum::<usize>(), 1);
    wait_for(Duration::from_secs(30), "one's watchers of m1 stopped", || control_one.released.lock().unwrap().contains(&"m1".to_string()));

    // One resigns (its lease revoked): two, configured with m1 too, takes it
    // and writes where one stopped.
    futures::executor::block_on(one_membership.resign());
    let control_two = std::sync::Arc::new(Recorded::default());
    let _two_membership = membership(&two, "two", control_two.clone());
    wait_for(Duration::from_secs(30), "replica two owning m1", || etcd_get(&etcd, "/fence/owners/m1").as_deref() == Some("two"));
    wait_for(Duration::from_secs(30), "two starting m1's watchers", || control_two.taken.lock().unwrap().contains(&"m1".to_string()));
    two.commit_part(&[event(4)], &[], &[], written).expect("the new owner writes");
    let refused = one.commit_part(&[event(5)], &[], &[], two.catch_up(0).unwrap().head_revision);
    assert!(matches!(refused, Err(SharedError::NotOwner(_))), "{refused:?}");
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The replica id owning `member` (its owner key in etcd).
fn owner_of(etcd: &Etcd, member: &str) -> Option<String> {
    etcd_get(etcd, &format!("/kubefold/owners/{member}"))
}

/// The relists of `member`'s pods on `kf`, and whether its pods are synced.
fn pods_watcher(kf: &Kubefold, member: &str) -> (u64, bool) {
    let status = kf.get_json(&format!("/admin/v1/clusters/{member}"));
    let pods = &status["status"]["resources"]["v1/pods"];
    (pods["relists"].as_u64().unwrap_or(u64::MAX), pods["state"] == "synced")
}

/// Three members, every replica configured with all of them, lease TTL 3 s:
/// each member is owned (and watched) by exactly one replica, an edit
/// through a replica that does not own the member is read back there at
/// once, the members of a replica killed with SIGKILL are taken over by the
/// other within the TTL and resume their watches from the checkpoints in
/// etcd (no relist), a watch started before the kill on a third replica
/// and one on the survivor from the same resourceVersion see the same
/// ordered events, and when the killed replica comes back its members move
/// back to it, again without a relist.
#[test]
fn members_are_owned_through_leases_and_taken_over_when_a_replica_dies() {
    let Some(etcd) = Etcd::start() else { return };
    let members = demo_members(3, 4.0);
    let flags = cluster_flags(&members);
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let lease = ["--etcd-servers", &etcd.url(), "--etcd-lease-ttl", "3"];
    let (_da, data_a) = data_dir();
    let (_db, data_b) = data_dir();
    let (_dc, data_c) = data_dir();
    let serve = |id: &str, data: &std::path::Path| Kubefold::serve(data, &flags, &[&lease[..], &["--etcd-replica-id", id]].concat());
    let (a, b) = (serve("a", &data_a), serve("b", &data_b));
    // C serves only (no member in its configuration).
    let c = Kubefold::serve(&data_c, &[], &["--etcd-servers", &etcd.url(), "--etcd-replica-id", "c"]);
    let logs = [a.log_handle(), b.log_handle()];
    let _dump = Dump(Box::new(move || eprintln!("A's log:\n{}\nB's log:\n{}", logs[0].lock().unwrap(), logs[1].lock().unwrap())));
    // Settled: every member owned by a or b, the same over two lease renewals
    // (a may take them all before b registers, then hand b its share).
    let mut owners: Vec<String> = Vec::new();
    wait_for(Duration::from_secs(60), "every member owned by a or b, settled", || {
        let now: Vec<String> = names.iter().filter_map(|m| owner_of(&etcd, m)).filter(|o| o == "a" || o == "b").collect();
        let settled = now.len() == names.len() && now == owners;
        owners = now;
        std::thread::sleep(Duration::from_secs(2));
        settled
    });
    // Each replica watches exactly the members it owns.
    for (member, owner) in names.iter().zip(&owners) {
        let (mine, other) = if owner == "a" { (&a, &b) } else { (&b, &a) };
        wait_for(Duration::from_secs(60), "the owner synced", || pods_watcher(mine, member).1);
        assert_eq!(other.get(&format!("/admin/v1/clusters/{member}")).1.contains("\"v1/pods\""), false, "{member} is watched by its owner only");
    }
    let (_, head) = listed(&c.get_json("/api/v1/pods"));
    assert!(head > 0);
    // The operations view, on any replica: who is there and who owns what.
    let replicas = c.get_json("/admin/v1/replicas");
    let items = replicas["items"].as_array().unwrap();
    assert_eq!(items.iter().map(|r| r["id"].as_str().unwrap()).collect::<Vec<_>>(), ["a", "b", "c"], "{replicas}");
    for r in items {
        let owned: Vec<String> = r["owned"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().to_string()).collect();
        let expected: Vec<String> = names.iter().zip(&owners).filter(|(_, o)| *o == r["id"].as_str().unwrap()).map(|(m, _)| m.clone()).collect();
        assert_eq!(owned, expected, "{r}");
        assert!(r["leaseRemainingSeconds"].as_u64().is_some_and(|s| s <= 15) && r["address"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{r}");
        assert!(r["appliedRevision"].as_u64().is_some(), "{r}");
    }
    // The same as a table: `kubefold admin replicas`.
    let table = Command::new(env!("CARGO_BIN_EXE_kubefold")).args(["admin", "--server", &c.url, "replicas"]).output().unwrap();
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let table = String::from_utf8(table.stdout).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert!(rows[0].starts_with("ID") && rows[0].contains("LEASE") && rows[0].contains("APPLIED-REVISION") && rows[0].contains("MEMBERS"), "{table}");
    for (id, row) in ["a", "b", "c"].iter().zip(&rows[1..]) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], *id, "{table}");
        let mine: Vec<&str> = names.iter().zip(&owners).filter(|(_, o)| o == id).map(|(m, _)| m.as_str()).collect();
        let expected = if mine.is_empty() { vec!["0".to_string()] } else { vec![mine.len().to_string(), mine.join(",")] };
        assert_eq!(cells[cells.len() - expected.len()..], expected[..], "{table}");
    }
    // The console's fleet page shows the same: each replica and what it owns.
    let (code, page) = c.get("/ui/fleet");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<dd>etcd, shared by 3 replicas</dd>"), "{page}");
    for id in ["a", "b", "c"] {
        let mine: Vec<&str> = names.iter().zip(&owners).filter(|(_, o)| o.as_str() == id).map(|(m, _)| m.as_str()).collect();
        let row = page.split(&format!("<tr data-replica=\"{id}\"><td>{id}</td>")).nth(1).and_then(|r| r.split("</tr>").next());
        let row = row.unwrap_or_else(|| panic!("replica {id} in the console: {page}"));
        assert!(row.ends_with(&format!("<td class=\"owned\">{}</td>", mine.join(", "))), "{id}: {row}");
    }
    let metrics = a.get("/metrics").1;
    let owned_by_a = owners.iter().filter(|o| *o == "a").count();
    assert!(metrics.contains(&format!("kubefold_etcd_owned_members {owned_by_a}")), "a's metrics name the {owned_by_a} members it owns");
    assert!(metrics.contains("kubefold_etcd_applied_revision "), "a's applied revision is a metric");

    // An edit through the replica that does not own the member: read back there at once.
    let (member, owner) = names.iter().zip(&owners).next().unwrap();
    let other = if owner == "a" { &b } else { &a };
    let (pods, _) = listed(&other.get_json(&format!("/api/v1/namespaces/default/pods?labelSelector=kubefold.io/cluster%3D{member}")));
    let name = &pods.iter().find(|(n, _)| !n.starts_with("churn-") && !n.starts_with("load-")).expect("a pod the churn leaves alone").0;
    let patched = reqwest::blocking::Client::new()
        .patch(format!("{}/api/v1/namespaces/default/pods/{name}", other.url))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"edited":"elsewhere"}}}"#)
        .send()
        .unwrap();
    assert_eq!(patched.status().as_u16(), 200);
    assert_eq!(other.get_json(&format!("/api/v1/namespaces/default/pods/{name}"))["metadata"]["labels"]["edited"], "elsewhere", "read-your-writes on a replica that does not own {member}");

    // The owner of member1 dies (SIGKILL): the other takes every member.
    let victim_id = owners[0].clone();
    let survivor_id = if victim_id == "a" { "b" } else { "a" };
    let (victim, survivor) = if victim_id == "a" { (a, b) } else { (b, a) };
    let (_, from) = listed(&c.get_json("/api/v1/pods"));
    victim.kill();
    let killed = Instant::now();
    wait_for(Duration::from_secs(30), "the survivor owning every member", || names.iter().all(|m| owner_of(&etcd, m).as_deref() == Some(survivor_id)));
    assert!(killed.elapsed() < Duration::from_secs(30), "taken over within the lease TTL (3 s) and a generous margin");
    for (member, _) in names.iter().zip(&owners).filter(|(_, o)| **o == victim_id) {
        wait_for(Duration::from_secs(60), "the taken-over member synced on the survivor", || pods_watcher(&survivor, member).1);
        assert_eq!(pods_watcher(&survivor, member).0, 0, "{member} resumed its watch on {survivor_id} from etcd's checkpoint: no relist");
    }
    assert_converged(&survivor, &members, "/api/v1/pods", "v1/pods");

    // The same events, in order, on C and B from before the kill.
    let on_c = watch_events(&format!("{}/api/v1/pods?watch=true&resourceVersion={from}", c.url), 15, Duration::from_secs(60));
    let on_b = watch_events(&format!("{}/api/v1/pods?watch=true&resourceVersion={from}", survivor.url), 15, Duration::from_secs(60));
    assert_eq!(on_c.len(), 15, "churn goes on across the takeover: {on_c:?}");
    assert!(on_c.windows(2).all(|w| w[0].2 < w[1].2), "ordered, no duplicate: {on_c:?}");
    assert_eq!(on_b, on_c, "one stream on every replica");

    // The killed replica comes back (as a new pod would, on an empty data
    // dir): its members move back to it.
    let (_dv, fresh) = data_dir();
    let back = serve(&victim_id, &fresh);
    let back_logs = back.log_handle();
    let _dump_back = Dump(Box::new(move || eprintln!("The restarted replica's log:\n{}", back_logs.lock().unwrap())));
    wait_for(Duration::from_secs(60), "the members back with their first owners", || names.iter().zip(&owners).all(|(m, o)| owner_of(&etcd, m).as_deref() == Some(o.as_str())));
    for (member, _) in names.iter().zip(&owners).filter(|(_, o)| **o == victim_id) {
        wait_for(Duration::from_secs(60), "the member synced on its first owner again", || pods_watcher(&back, member).1);
        assert_eq!(pods_watcher(&back, member).0, 0, "{member} moved back to {victim_id} without a relist");
    }
    // Every replica serves the same list at the same resourceVersion.
    let a = back;
    let (_, rv) = listed(&a.get_json("/api/v1/pods"));
    let path = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    for kf in [&survivor, &c] {
        wait_for(Duration::from_secs(30), "at a's resourceVersion", || kf.get(&path).0 == 200);
        assert_eq!(listed(&kf.get_json(&path)), listed(&a.get_json(&path)), "one list at resourceVersion {rv}");
    }
}
