//! Watch streams over real HTTP, as the Kubernetes docs "API Concepts"
//! describe them: chunked, one JSON event per line; synthetic ADDED events
//! for `resourceVersion` 0 or unset; replay after `N`; 410 Expired as an
//! ERROR event for a version older than the history; bookmarks; timeouts;
//! selector semantics of the watch cache.

mod common;

use std::time::{Duration, Instant};

use common::{demo, get, rv, send, summary, Watch};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

async fn label(sim: &kubefold_testdata::SimHandle, pod: &str, key: &str, value: &str) -> u64 {
    let answer = send(sim, "PATCH", &format!("/api/v1/namespaces/default/pods/{pod}"), "application/merge-patch+json",
        &json!({"metadata": {"labels": {key: value}}}).to_string()).await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    rv(&answer.body)
}

fn pairs(events: &[serde_json::Value]) -> Vec<(String, String)> {
    events.iter().map(summary).collect()
}

fn s(t: &str, n: &str) -> (String, String) {
    (t.to_string(), n.to_string())
}

#[tokio::test]
async fn watch_from_zero_sends_the_current_state_then_changes() {
    let sim = demo();
    let mut watch = Watch::open(&sim, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0").await;
    assert_eq!(watch.code, 200);
    assert_eq!(watch.transfer_encoding, "chunked");
    let initial = watch.take(3, WAIT).await;
    assert_eq!(pairs(&initial), [s("ADDED", "web-0"), s("ADDED", "web-1"), s("ADDED", "web-2")]);
    assert_eq!(initial[0]["object"]["kind"], "Pod");
    assert_eq!(initial[0]["object"]["apiVersion"], "v1");
    let changed = label(&sim, "web-1", "touched", "yes").await;
    let event = watch.next(WAIT).await.expect("an event");
    assert_eq!(summary(&event), s("MODIFIED", "web-1"));
    assert_eq!(rv(&event["object"]), changed);
    // Other namespaces are not in this stream.
    send(&sim, "PATCH", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/merge-patch+json",
        r#"{"data":{"x":"1"}}"#).await;
    assert!(watch.next(Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn watch_without_resource_version_also_starts_with_the_current_state() {
    let sim = demo();
    let mut watch = Watch::open(&sim, "/api/v1/namespaces/default/pods?watch=true").await;
    assert_eq!(pairs(&watch.take(3, WAIT).await), [s("ADDED", "web-0"), s("ADDED", "web-1"), s("ADDED", "web-2")]);
}

#[tokio::test]
async fn watch_from_a_version_replays_later_changes() {
    let sim = demo();
    let list = get(&sim, "/api/v1/namespaces/default/pods").await;
    let from = rv(&list.body);
    let modified = label(&sim, "web-0", "a", "1").await;
    let created = send(&sim, "POST", "/api/v1/namespaces/default/pods", "application/json",
        r#"{"metadata":{"name":"extra"},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}"#).await;
    assert_eq!(created.code, 201);
    let deleted = send(&sim, "DELETE", "/api/v1/namespaces/default/pods/extra?gracePeriodSeconds=0", "application/json", "").await;
    assert_eq!(deleted.code, 200);
    let mut watch = Watch::open(&sim, &format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}")).await;
    let events = watch.take(3, WAIT).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(summary(&events[0]), s("MODIFIED", "web-0"));
    assert_eq!(rv(&events[0]["object"]), modified);
    assert_eq!(summary(&events[1]), s("ADDED", "extra"));
    assert_eq!(summary(&events[2]), s("DELETED", "extra"));
    let versions: Vec<u64> = events.iter().map(|e| rv(&e["object"])).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]) && versions[0] > from, "{versions:?}");
}

#[tokio::test]
async fn watch_from_a_version_older_than_the_history_gets_410_as_an_error_event() {
    let sim = common::start(SimConfig { workload: Workload::Demo, history: 5, ..SimConfig::default() });
    let from = rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body);
    for i in 0..8 {
        label(&sim, "web-2", "i", &i.to_string()).await;
    }
    let head = from + 8;
    let mut watch = Watch::open(&sim, &format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}")).await;
    assert_eq!(watch.code, 200);
    let event = watch.next(WAIT).await.expect("an ERROR event");
    assert_eq!(event["type"], "ERROR");
    let status = &event["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    // Changes after head-5 are retained: the oldest deliverable is head-4, "(head-5)" is printed.
    assert_eq!(status["message"], format!("too old resource version: {from} ({})", head - 5));
    assert!(watch.ended(WAIT).await, "the stream ends after the error");
}

#[tokio::test]
async fn bookmarks_carry_only_the_resource_version() {
    let sim = common::start(SimConfig {
        workload: Workload::Demo,
        bookmark_interval: Duration::from_millis(200),
        ..SimConfig::default()
    });
    let from = rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body);
    let mut watch = Watch::open(
        &sim,
        &format!("/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}"),
    )
    .await;
    let bookmark = watch.next(WAIT).await.expect("a bookmark");
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"], json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": from.to_string()}}));
    // A change elsewhere moves the next bookmark's version past it.
    let other = send(&sim, "PATCH", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/merge-patch+json",
        r#"{"data":{"x":"1"}}"#).await;
    let next = watch.next(WAIT).await.expect("another bookmark");
    assert_eq!(next["type"], "BOOKMARK");
    assert_eq!(rv(&next["object"]), rv(&other.body));
    // Without allowWatchBookmarks there are none.
    let mut quiet = Watch::open(&sim, &format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={}", rv(&other.body))).await;
    assert!(quiet.next(Duration::from_millis(600)).await.is_none());
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let sim = demo();
    let started = Instant::now();
    let mut watch = Watch::open(&sim, "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1").await;
    assert_eq!(watch.take(3, WAIT).await.len(), 3);
    assert!(watch.ended(WAIT).await);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4), "{elapsed:?}");
}

#[tokio::test]
async fn selectors_turn_changes_into_added_and_deleted() {
    let sim = demo();
    let from = rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body);
    let mut watch =
        Watch::open(&sim, &format!("/api/v1/namespaces/default/pods?watch=1&labelSelector=app%3Dweb&resourceVersion={from}")).await;
    let left = label(&sim, "web-0", "app", "other").await;
    let event = watch.next(WAIT).await.expect("DELETED");
    assert_eq!(summary(&event), s("DELETED", "web-0"));
    assert_eq!(event["object"]["metadata"]["labels"]["app"], "web", "the last matching state");
    assert_eq!(rv(&event["object"]), left);
    label(&sim, "web-0", "tier", "x").await;
    label(&sim, "web-0", "app", "web").await;
    let event = watch.next(WAIT).await.expect("ADDED");
    assert_eq!(summary(&event), s("ADDED", "web-0"));
    let mut by_field = Watch::open(&sim, "/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3Dweb-2").await;
    assert_eq!(pairs(&by_field.take(1, WAIT).await), [s("ADDED", "web-2")]);
    assert!(by_field.next(Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let sim = demo();
    let mut watch = Watch::open(
        &sim,
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .await;
    let events = watch.take(4, WAIT).await;
    assert_eq!(pairs(&events[..3]), [s("ADDED", "web-0"), s("ADDED", "web-1"), s("ADDED", "web-2")]);
    assert_eq!(events[3]["type"], "BOOKMARK");
    assert_eq!(events[3]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let bad = get(&sim, "/api/v1/pods?watch=1&sendInitialEvents=true").await;
    assert_eq!(bad.code, 422);
}

#[tokio::test]
async fn stopping_the_simulator_ends_open_watches() {
    let sim = demo();
    let mut watch = Watch::open(&sim, "/api/v1/pods?watch=1").await;
    assert!(!watch.take(5, WAIT).await.is_empty());
    let started = Instant::now();
    sim.stop();
    assert!(watch.ended(WAIT).await);
    assert!(started.elapsed() < Duration::from_secs(5));
}
