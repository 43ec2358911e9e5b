//! Churn over real HTTP: changes flow at the configured rate, the pod count
//! stays stable, and reads stay consistent while it runs — every page of a
//! paginated list is read at the first page's version, and a list plus the
//! watch from its version reproduce the exact state at any later version
//! (what an informer relies on; Kubernetes docs "API Concepts").

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{get, rv, Watch};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::Value;

fn churning() -> kubefold_testdata::SimHandle {
    common::start(SimConfig {
        workload: Workload::Demo,
        pods: 2000,
        churn_per_sec: 400.0,
        history: 200_000,
        ..SimConfig::default()
    })
}

/// `namespace/name -> resourceVersion` of a list's items.
fn state(list: &Value) -> BTreeMap<String, u64> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let key = format!("{}/{}", i["metadata"]["namespace"].as_str().unwrap(), i["metadata"]["name"].as_str().unwrap());
            (key, rv(i))
        })
        .collect()
}

#[tokio::test]
async fn paginated_lists_are_consistent_under_churn() {
    let sim = churning();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut pages = BTreeMap::new();
    let mut token: Option<String> = None;
    let mut first_rv = None;
    loop {
        let path = match &token {
            Some(t) => format!("/api/v1/pods?limit=250&continue={t}"),
            None => "/api/v1/pods?limit=250".to_string(),
        };
        let page = get(&sim, &path).await;
        assert_eq!(page.code, 200, "{}", page.body);
        let page_rv = rv(&page.body);
        assert_eq!(*first_rv.get_or_insert(page_rv), page_rv, "every page at the first page's version");
        pages.extend(state(&page.body));
        tokio::time::sleep(Duration::from_millis(30)).await;
        match page.body["metadata"]["continue"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let at = first_rv.unwrap();
    let exact = get(&sim, &format!("/api/v1/pods?resourceVersion={at}&resourceVersionMatch=Exact")).await;
    assert_eq!(exact.code, 200);
    assert_eq!(pages, state(&exact.body));
    let now = get(&sim, "/api/v1/pods").await;
    assert!(rv(&now.body) > at, "churn went on");
    let count = state(&now.body).len() as i64;
    assert!((count - 2016).abs() <= 1, "{count}");
}

#[tokio::test]
async fn list_then_watch_reproduces_the_state_at_every_version() {
    let sim = churning();
    let list = get(&sim, "/api/v1/pods?limit=500").await;
    // Follow the pages like a reflector.
    let list_rv = rv(&list.body);
    let mut cache = state(&list.body);
    let mut token = list.body["metadata"]["continue"].as_str().map(str::to_string);
    while let Some(t) = token {
        let page = get(&sim, &format!("/api/v1/pods?limit=500&continue={t}")).await;
        cache.extend(state(&page.body));
        token = page.body["metadata"]["continue"].as_str().map(str::to_string);
    }
    let mut watch = Watch::open(&sim, &format!("/api/v1/pods?watch=1&resourceVersion={list_rv}&allowWatchBookmarks=true")).await;
    let started = Instant::now();
    let mut last = list_rv;
    let mut counts = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(2) {
        let Some(event) = watch.next(Duration::from_secs(2)).await else { break };
        let kind = event["type"].as_str().unwrap().to_string();
        *counts.entry(kind.clone()).or_insert(0) += 1;
        let object = &event["object"];
        let version = rv(object);
        assert!(version > last || kind == "BOOKMARK", "versions increase: {version} after {last}");
        last = version;
        if kind == "BOOKMARK" {
            continue;
        }
        let key = format!("{}/{}", object["metadata"]["namespace"].as_str().unwrap(), object["metadata"]["name"].as_str().unwrap());
        match kind.as_str() {
            "ADDED" | "MODIFIED" => {
                cache.insert(key, version);
            }
            "DELETED" => {
                cache.remove(&key);
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(counts.get("MODIFIED").copied().unwrap_or(0) > 100, "{counts:?}");
    assert!(counts.get("ADDED").copied().unwrap_or(0) > 10, "{counts:?}");
    assert!(counts.get("DELETED").copied().unwrap_or(0) > 10, "{counts:?}");
    let exact = get(&sim, &format!("/api/v1/pods?resourceVersion={last}&resourceVersionMatch=Exact")).await;
    assert_eq!(cache, state(&exact.body));
}
