//! Watches on the fan-out by type and namespace: each receives exactly the
//! events of its scope, in order, while other namespaces and types churn;
//! a watch behind its channel's bound is closed with 410; bookmarks carry
//! the fleet's head even on a quiet type; resuming after other types'
//! events replays exactly the watch's own. Watches run in process, on a
//! fleet whose events the test publishes itself.

use std::sync::Arc;
use std::time::Duration;

use kubefold_actors::fleet::{Fleet, Publisher, NAMESPACE_FANOUT_CAPACITY};
use kubefold_engine::event::{EventType, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_engine::object::ingest;
use kubefold_engine::resources::{self, ResourceType};
use kubefold_store::{Options, Store};
use serde_json::Value;
use tokio::sync::mpsc;

use super::params::Query;
use super::scope::Scope;
use super::watch::{open, Message, Settings};

/// A fleet with nothing in it, and its publisher.
struct TestFleet {
    _dir: tempfile::TempDir,
    fleet: Arc<Fleet>,
    publisher: Publisher,
    head: u64,
}

fn resource(plural: &str) -> ResourceType {
    resources::find(&resources::builtin(), "", "v1", plural).unwrap().clone()
}

impl TestFleet {
    fn new() -> TestFleet {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &Options::default()).unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::at(0), 0);
        let publisher = fleet.take_publisher().unwrap();
        TestFleet { _dir: dir, fleet, publisher, head: 0 }
    }

    /// Publishes one commit: an ADDED event per `(plural, namespace, name)`
    /// (namespace empty: cluster-scoped), numbered on from the head; returns
    /// the new head.
    fn commit(&mut self, objects: &[(&str, &str, &str)]) -> u64 {
        let events = objects
            .iter()
            .map(|(plural, namespace, name)| {
                self.head += 1;
                let raw = match *namespace {
                    "" => format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{}"}}}}"#, self.head),
                    ns => format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{}"}}}}"#, self.head),
                };
                let resource = resource(plural);
                let ingested = ingest(&resource, "m1", raw.as_bytes()).unwrap();
                StoredEvent::new(self.head, EventType::Added, &resource.key(), "m1", 0, ingested)
            })
            .collect();
        self.publisher.publish(Index::at(self.head), events);
        self.head
    }

    /// Opens a watch of `plural` in `namespace` (or every namespace) with
    /// `query`, and runs it; returns its messages.
    fn watch(&self, plural: &str, namespace: Option<&str>, query: Query) -> mpsc::Receiver<Message> {
        let settings = Settings {
            bookmark_interval: Duration::from_millis(300),
            flush_interval: Duration::from_millis(20),
            min_timeout: Duration::from_secs(60),
            client_budget_bytes: 0,
        };
        let scope = Scope { resource: resource(plural), cluster: None, namespace: namespace.map(str::to_string), qualified: true };
        let opened = open(self.fleet.clone(), settings, scope, &query, None, false, None).unwrap();
        actix_web::rt::spawn(opened.running.run());
        opened.messages
    }
}

/// A watch from `rv` (with bookmarks when `bookmarks`).
fn from(rv: u64, bookmarks: bool) -> Query {
    Query {
        resource_version: Some(rv.to_string()),
        allow_watch_bookmarks: bookmarks.then(|| "true".to_string()),
        ..Query::default()
    }
}

/// Reads a watch's lines until `enough` says so; panics after 5 s (a
/// watch that never sends what it should would otherwise hang the test).
async fn read_until(messages: &mut mpsc::Receiver<Message>, mut enough: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
    let mut lines = Vec::new();
    while !enough(&lines) {
        let message = tokio::time::timeout(Duration::from_secs(5), messages.recv())
            .await
            .unwrap_or_else(|_| panic!("the watch sent no more within 5 s; so far: {lines:?}"));
        let Some((message, _)) = message else { panic!("the watch ended; so far: {lines:?}") };
        for line in message {
            lines.push(serde_json::from_slice(&line).unwrap());
        }
    }
    lines
}

/// `type name@rv` of each line (`BOOKMARK @rv` for bookmarks).
fn summary(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|line| {
            let object = &line["object"];
            let name = object["metadata"]["name"].as_str().unwrap_or("");
            format!("{} {name}@{}", line["type"].as_str().unwrap(), object["metadata"]["resourceVersion"].as_str().unwrap_or(""))
        })
        .collect()
}

fn count(kind: &'static str) -> impl Fn(&[Value]) -> usize {
    move |lines| lines.iter().filter(|l| l["type"] == kind).count()
}

/// A watch of one namespace's pods gets exactly that namespace's pods, in
/// order, while other namespaces and types churn in the same commits; a
/// watch of pods in every namespace gets every pod and nothing else. They
/// count as open watches while they run, and their channels go with them.
#[actix_web::test]
async fn watches_get_exactly_their_scope_in_order_while_others_churn() {
    let mut fleet = TestFleet::new();
    let start = fleet.commit(&[("pods", "a", "before")]);
    let mut in_a = fleet.watch("pods", Some("a"), from(start, false));
    let mut all_pods = fleet.watch("pods", None, from(start, false));
    let mut nodes = fleet.watch("nodes", None, from(start, false));
    assert_eq!(fleet.fleet.watchers(), 3);
    let mut want_a = Vec::new();
    let mut want_all = Vec::new();
    for round in 0..20 {
        let at = fleet.head;
        fleet.commit(&[
            ("configmaps", "a", &format!("cm{round}")),
            ("pods", "b", &format!("b{round}")),
            ("pods", "a", &format!("a{round}")),
            ("nodes", "", &format!("n{round}")),
            ("pods", "c", &format!("c{round}")),
        ]);
        want_a.push(format!("ADDED a{round}_m1@{}", at + 3));
        want_all.extend([format!("ADDED b{round}_m1@{}", at + 2), format!("ADDED a{round}_m1@{}", at + 3), format!("ADDED c{round}_m1@{}", at + 5)]);
        if round % 5 == 0 {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    let got_a = read_until(&mut in_a, |l| count("ADDED")(l) >= want_a.len()).await;
    assert_eq!(summary(&got_a), want_a);
    let got_all = read_until(&mut all_pods, |l| count("ADDED")(l) >= want_all.len()).await;
    assert_eq!(summary(&got_all), want_all);
    let got_nodes = read_until(&mut nodes, |l| count("ADDED")(l) >= 20).await;
    assert!(summary(&got_nodes).iter().all(|s| s.starts_with("ADDED n")), "{got_nodes:?}");
    // Nothing more came: a last commit of another namespace's pods and
    // then one of namespace a is what the watch of a sees next.
    fleet.commit(&[("pods", "b", "late-b"), ("configmaps", "a", "late-cm")]);
    let head = fleet.commit(&[("pods", "a", "late-a")]);
    let next = read_until(&mut in_a, |l| !l.is_empty()).await;
    assert_eq!(summary(&next), [format!("ADDED late-a_m1@{head}")]);

    drop((in_a, all_pods, nodes));
    for _ in 0..500 {
        if fleet.fleet.watchers() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fleet.fleet.watchers(), 0, "the watches ended with their clients");
    assert_eq!(fleet.fleet.published().fanout_channels(), 0, "no channel outlives its watches");
}

/// A watch that falls more than its channel's bound behind is closed with
/// a 410 ERROR saying how far; a watch of another namespace in the same
/// burst is not.
#[actix_web::test]
async fn a_watch_behind_its_channel_bound_is_closed_with_410() {
    let mut fleet = TestFleet::new();
    let start = fleet.commit(&[("pods", "a", "first")]);
    let mut slow = fleet.watch("pods", Some("a"), from(start, false));
    let mut other = fleet.watch("pods", Some("b"), from(start, false));
    // One commit, published before either watch's task runs (this test's
    // runtime has one thread): the watch of a is 100 events behind its bound.
    let names: Vec<String> = (0..NAMESPACE_FANOUT_CAPACITY + 100).map(|i| format!("p{i}")).collect();
    let mut objects: Vec<(&str, &str, &str)> = names.iter().map(|n| ("pods", "a", n.as_str())).collect();
    objects.push(("pods", "b", "only-b"));
    let head = fleet.commit(&objects);
    let closed = read_until(&mut slow, |l| !l.is_empty()).await;
    assert_eq!(closed.len(), 1, "{:?}", summary(&closed));
    assert_eq!(closed[0]["type"], "ERROR");
    assert_eq!(closed[0]["object"]["code"], 410);
    assert_eq!(closed[0]["object"]["reason"], "Expired");
    let message = closed[0]["object"]["message"].as_str().unwrap();
    assert!(message.starts_with("watch fell 100 events behind"), "{message}");
    let got = read_until(&mut other, |l| !l.is_empty()).await;
    assert_eq!(summary(&got), [format!("ADDED only-b_m1@{head}")]);
}

/// A bookmark of a type nothing happens to carries the fleet's head (at
/// least the head when it was due), after every event of the watch's own
/// type; a watch resumed from it, or from an RV in the middle of other
/// types' events, gets exactly the events of its type after it.
#[actix_web::test]
async fn bookmarks_of_a_quiet_type_carry_the_fleets_head_and_resume_from_there() {
    let mut fleet = TestFleet::new();
    let start = fleet.commit(&[("configmaps", "a", "cm0")]);
    let mut quiet = fleet.watch("configmaps", Some("a"), from(start, true));
    let own = fleet.commit(&[("pods", "a", "p1"), ("configmaps", "a", "cm1")]);
    let mut head = own;
    for i in 0..50 {
        head = fleet.commit(&[("pods", "a", &format!("q{i}")), ("configmaps", "b", &format!("other{i}"))]);
    }
    let lines = read_until(&mut quiet, |l| count("BOOKMARK")(l) >= 1).await;
    let got = summary(&lines);
    assert_eq!(got[0], format!("ADDED cm1_m1@{own}"), "{got:?}");
    assert_eq!(got.len(), 2, "{got:?}");
    let bookmark: u64 = lines[1]["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert_eq!(lines[1]["type"], "BOOKMARK");
    assert!(bookmark >= head, "the bookmark at {bookmark} is behind the fleet's head {head}");

    // Resumed from the bookmark: only what comes after it.
    let mut resumed = fleet.watch("configmaps", Some("a"), from(bookmark, false));
    fleet.commit(&[("pods", "a", "later"), ("configmaps", "b", "later-b")]);
    let after = fleet.commit(&[("configmaps", "a", "cm2")]);
    let lines = read_until(&mut resumed, |l| !l.is_empty()).await;
    assert_eq!(summary(&lines), [format!("ADDED cm2_m1@{after}")]);

    // Resumed from an RV among other types' events (replayed from the
    // recent events): exactly its type's events after it.
    let mut replayed = fleet.watch("configmaps", Some("a"), from(own + 3, false));
    let lines = read_until(&mut replayed, |l| !l.is_empty()).await;
    assert_eq!(summary(&lines), [format!("ADDED cm2_m1@{after}")]);
    let mut all_configmaps = fleet.watch("configmaps", None, from(own + 3, false));
    // other{i} was committed at own + 2i + 2: other0 is not after own + 3.
    let mut want: Vec<String> = (1..50).map(|i| format!("ADDED other{i}_m1@{}", own + 2 * i + 2)).collect();
    want.extend([format!("ADDED later-b_m1@{}", after - 1), format!("ADDED cm2_m1@{after}")]);
    let lines = read_until(&mut all_configmaps, |l| count("ADDED")(l) >= want.len()).await;
    assert_eq!(summary(&lines), want);
}
