//! WatchList (streaming lists, "Streaming lists" in the Kubernetes API
//! Concepts) as real clients use it: client-go 1.35 by default, a kube-rs
//! reflector in streaming-list mode, and the Python client. A watch with
//! `sendInitialEvents=true` streams every object as ADDED, then a BOOKMARK
//! annotated `k8s.io/initial-events-end: "true"`, then the changes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client};
use serde_json::{json, Value};

/// The query client-go 1.35 sends for an informer's initial state.
const CLIENT_GO_WATCH_LIST: &str = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// `namespace/name` → resourceVersion of the pods kubefold lists, and the list's RV.
fn kubefold_pods(kf: &Kubefold) -> (BTreeMap<String, u64>, u64) {
    let list = kf.get_json("/api/v1/pods");
    let pods = list["items"].as_array().unwrap().iter().map(|p| (key(p), rv(p))).collect();
    (pods, list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap())
}

/// [`kubefold_pods`] once it stays the same for a second.
fn settled(kf: &Kubefold) -> (BTreeMap<String, u64>, u64) {
    let mut last = kubefold_pods(kf);
    for _ in 0..30 {
        std::thread::sleep(Duration::from_secs(1));
        let now = kubefold_pods(kf);
        if now.0 == last.0 {
            return now;
        }
        last = now;
    }
    panic!("the pods kept changing: {last:?}");
}

fn key(object: &Value) -> String {
    format!("{}/{}", object["metadata"]["namespace"].as_str().unwrap_or(""), object["metadata"]["name"].as_str().unwrap())
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn create_pod(member: &str, name: &str) {
    let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":"default"},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}});
    let r = reqwest::blocking::Client::new().post(format!("{member}/api/v1/namespaces/default/pods")).json(&pod).send().unwrap();
    assert!(r.status().is_success(), "create {name}: {}", r.text().unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_in_streaming_list_mode_follows_a_churning_fleet() {
    let members = Arc::new(demo_members(2, 2.0));
    let (_tmp, dir) = data_dir();
    let flags = cluster_flags(&members);
    let kf = Arc::new(
        tokio::task::spawn_blocking(move || {
            let kf = Kubefold::serve(&dir, &flags, &[]);
            kf.wait_ready();
            kf
        })
        .await
        .unwrap(),
    );

    let client = Client::try_from(kube::Config::new(kf.url.parse().unwrap())).unwrap();
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store();
    // The watcher's events in order, by kind.
    let seen = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let log = seen.clone();
    let stream = watcher(api, watcher::Config::default().streaming_lists())
        .default_backoff()
        .inspect(move |e| {
            let kind = match e {
                Ok(watcher::Event::Init) => "Init",
                Ok(watcher::Event::InitApply(_)) => "InitApply",
                Ok(watcher::Event::InitDone) => "InitDone",
                Ok(watcher::Event::Apply(_)) => "Apply",
                Ok(watcher::Event::Delete(_)) => "Delete",
                Err(_) => "Error",
            };
            log.lock().unwrap().push(kind);
        })
        .reflect(writer)
        .applied_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    // The store is ready at InitDone only: without the initial-events-end
    // bookmark this never happens.
    tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready())
        .await
        .expect("the reflector got its initial-events-end bookmark (InitDone) within 30 s")
        .unwrap();
    {
        let seen = seen.lock().unwrap();
        let done = seen.iter().position(|k| *k == "InitDone").unwrap();
        assert_eq!(seen[0], "Init", "{seen:?}");
        assert!(seen[1..done].iter().all(|k| *k == "InitApply"), "only InitApply before InitDone: {seen:?}");
        assert!(done > 10, "the initial events carried the demo pods: {seen:?}");
        assert!(!seen.contains(&"Error"), "{seen:?}");
    }

    let reflected = |store: &reflector::Store<Pod>| -> BTreeMap<String, u64> {
        store
            .state()
            .iter()
            .map(|p| {
                let m = &p.metadata;
                (format!("{}/{}", m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap()), m.resource_version.as_ref().unwrap().parse().unwrap())
            })
            .collect()
    };
    // While the members churn, the store equals kubefold's list at some
    // moment (the same names at the same resourceVersions).
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let mut converged = false;
    for _ in 0..300 {
        let k = kf.clone();
        let (listed, _) = tokio::task::spawn_blocking(move || kubefold_pods(&k)).await.unwrap();
        let mine = reflected(&store);
        if mine == listed {
            converged = true;
            break;
        }
        last = (mine, listed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(converged, "the reflector's store never equalled kubefold's list:\nstore: {:?}\nlist: {:?}", last.0, last.1);

    // It keeps following: a pod created, then deleted, in member2.
    let member2 = members[1].1.url();
    let m2 = member2.clone();
    tokio::task::spawn_blocking(move || create_pod(&m2, "streamed")).await.unwrap();
    let present = |store: &reflector::Store<Pod>| reflected(store).contains_key("default/streamed_member2");
    for _ in 0..300 {
        if present(&store) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(present(&store), "a pod created in member2 after the initial events reached the store");
    let m2 = member2.clone();
    tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new().delete(format!("{m2}/api/v1/namespaces/default/pods/streamed")).send().unwrap();
    })
    .await
    .unwrap();
    for _ in 0..300 {
        if !present(&store) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!present(&store), "its deletion reached the store");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.iter().filter(|k| **k == "Init").count(), 1, "one initial state, no relist: {seen:?}");
        assert_eq!(seen.iter().filter(|k| **k == "InitDone").count(), 1, "{seen:?}");
    }
    task.abort();
    let kf = Arc::try_unwrap(kf).ok().unwrap();
    tokio::task::spawn_blocking(move || kf.stop()).await.unwrap();
}

/// An open watch: its lines, decoded as its `Content-Encoding` says.
struct WatchStream {
    lines: Box<dyn BufRead>,
}

impl WatchStream {
    fn open(kf: &Kubefold, query: &str, gzip: bool) -> WatchStream {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let mut req = client.get(format!("{}/api/v1/pods?{query}", kf.url)).header("Accept", "application/json");
        if gzip {
            req = req.header("Accept-Encoding", "gzip");
        }
        let resp = req.send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{query}");
        let gzipped = resp.headers().get("content-encoding").is_some_and(|v| v == "gzip");
        let body: Box<dyn Read> = if gzipped { Box::new(flate2::read::GzDecoder::new(resp)) } else { Box::new(resp) };
        WatchStream { lines: Box::new(BufReader::new(body)) }
    }

    fn next(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.lines.read_line(&mut line).unwrap() > 0, "the watch ended early");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Reads the initial events: every ADDED up to the initial-events-end
    /// bookmark, checked in order; returns the objects and the bookmark's RV.
    fn initial_events(&mut self) -> (BTreeMap<String, u64>, u64) {
        let mut added = BTreeMap::new();
        loop {
            let event = self.next();
            let object = &event["object"];
            match event["type"].as_str().unwrap() {
                "ADDED" => {
                    assert!(added.insert(key(object), rv(object)).is_none(), "one ADDED per object: {event}");
                }
                "BOOKMARK" => {
                    assert_eq!(object["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "the first bookmark ends the initial events: {event}");
                    assert_eq!(object["kind"], "Pod", "{event}");
                    let at = rv(object);
                    assert!(added.values().all(|rv| *rv <= at), "no initial object is newer than the bookmark at {at}: {added:?}");
                    return (added, at);
                }
                other => panic!("{other} before the initial-events-end bookmark: {event}"),
            }
        }
    }
}

#[test]
fn client_go_watch_list_query_with_and_without_resource_version_and_gzip() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let (listed, list_rv) = kubefold_pods(&kf);
    assert!(listed.len() > 10, "{listed:?}");

    // Without a resourceVersion: the most recent state, then the changes.
    let mut watch = WatchStream::open(&kf, CLIENT_GO_WATCH_LIST, false);
    let (added, bookmark) = watch.initial_events();
    assert_eq!(added, listed, "every pod kubefold lists, at its resourceVersion, as ADDED");
    assert!(bookmark >= list_rv, "bookmark at {bookmark}, list at {list_rv}");
    create_pod(&members[0].1.url(), "after-bookmark");
    let event = loop {
        let event = watch.next();
        if event["type"] != "BOOKMARK" {
            break event;
        }
    };
    assert_eq!((event["type"].as_str(), key(&event["object"]).as_str()), (Some("ADDED"), "default/after-bookmark_member1"), "{event}");
    assert!(rv(&event["object"]) > bookmark, "a change after the initial events is newer than their bookmark: {event}");
    drop(watch);

    // With a recent resourceVersion (the list's, before that change): the
    // state not older than it, so including the change (once the member
    // has also started the new pod: its status changes then).
    let (listed, now) = settled(&kf);
    let mut watch = WatchStream::open(&kf, &format!("{CLIENT_GO_WATCH_LIST}&resourceVersion={list_rv}"), false);
    let (added, bookmark) = watch.initial_events();
    assert_eq!(added, listed, "with resourceVersion={list_rv}");
    assert!(bookmark >= now && bookmark >= list_rv, "bookmark at {bookmark}, asked {list_rv}, list at {now}");
    drop(watch);

    // gzip when asked, with and without a resourceVersion.
    for query in [CLIENT_GO_WATCH_LIST.to_string(), format!("{CLIENT_GO_WATCH_LIST}&resourceVersion={now}")] {
        let mut watch = WatchStream::open(&kf, &query, true);
        let (added, bookmark) = watch.initial_events();
        assert_eq!(added, listed, "Accept-Encoding: gzip, {query}");
        assert!(bookmark >= now, "{query}: bookmark at {bookmark}");
    }

    // kube-apiserver validates the options and answers 422 Invalid
    // (`errors.NewInvalid` of `ListOptions`, as for every invalid list or
    // watch option): sendInitialEvents needs resourceVersionMatch=NotOlderThan
    // and allowWatchBookmarks=true ("Streaming lists", API Concepts).
    for (query, field) in [
        ("watch=1&sendInitialEvents=true&allowWatchBookmarks=true", "resourceVersionMatch"),
        ("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true", "resourceVersionMatch"),
        ("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", "allowWatchBookmarks"),
    ] {
        let (code, body) = kf.get(&format!("/api/v1/pods?{query}"));
        let status: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{query}: {e}: {body}"));
        assert_eq!((code, status["kind"].as_str(), status["reason"].as_str()), (422, Some("Status"), Some("Invalid")), "{query}: {body}");
        assert!(status["message"].as_str().unwrap().contains(field), "{query}: {body}");
    }
    kf.stop();
}

/// The Python client's watch with `send_initial_events`: prints each
/// event as a JSON line until the initial-events-end bookmark.
const PYTHON_WATCH: &str = r#"
import json, sys
import kubernetes
config = kubernetes.client.Configuration()
config.host = sys.argv[1]
v1 = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))
w = kubernetes.watch.Watch()
for event in w.stream(v1.list_pod_for_all_namespaces, send_initial_events=True,
                      resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=5):
    meta = event["raw_object"]["metadata"]
    print(json.dumps({"type": event["type"], "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                      "initialEventsEnd": (meta.get("annotations") or {}).get("k8s.io/initial-events-end")}), flush=True)
    if event["type"] == "BOOKMARK" and (meta.get("annotations") or {}).get("k8s.io/initial-events-end") == "true":
        w.stop()
"#;

/// What the Python test needs and could not get: `None` when
/// `import kubernetes` works (installing it with pip when missing).
fn python_kubernetes_missing() -> Option<String> {
    let importable = || Command::new("python3").args(["-c", "import kubernetes"]).output().is_ok_and(|o| o.status.success());
    if Command::new("python3").arg("--version").output().is_err() {
        return Some("python3 is not installed".to_string());
    }
    if importable() {
        return None;
    }
    let install = Command::new("timeout")
        .args(["300", "python3", "-m", "pip", "install", "--user", "--quiet", "--disable-pip-version-check", "kubernetes"])
        .output();
    if importable() {
        return None;
    }
    let why = match install {
        Ok(o) => String::from_utf8_lossy(&o.stderr).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").to_string(),
        Err(e) => e.to_string(),
    };
    Some(format!("the Python package kubernetes is not installed and `pip install --user kubernetes` failed: {why}"))
}

#[test]
fn python_client_watch_with_send_initial_events() {
    if let Some(missing) = python_kubernetes_missing() {
        println!("SKIPPED: {missing}");
        return;
    }
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let (listed, _) = kubefold_pods(&kf);
    let script = tmp.path().join("watch_list.py");
    std::fs::write(&script, PYTHON_WATCH).unwrap();
    let out = Command::new("timeout").arg("60").arg("python3").arg(&script).arg(&kf.url).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Python watch failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let end = events.iter().position(|e| e["type"] == "BOOKMARK" && e["initialEventsEnd"] == "true").unwrap_or_else(|| panic!("no initial-events-end bookmark: {stdout}"));
    let added: BTreeSet<String> = events[..end]
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "ADDED", "{stdout}");
            format!("{}/{}", e["namespace"].as_str().unwrap(), e["name"].as_str().unwrap())
        })
        .collect();
    assert_eq!(added, listed.keys().cloned().collect::<BTreeSet<_>>(), "every pod as ADDED before the bookmark");
    assert_eq!(end, listed.len(), "each pod once");
    kf.stop();
}
