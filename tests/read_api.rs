//! Read-API conformance, one case per rule of the Kubernetes "API Concepts"
//! page (resource versions, chunked lists, watches, bookmarks, streaming
//! lists), selectors and names, run over HTTP against kubefold with
//! simulators as members. Expectations are what Kubernetes documents, written
//! out literally.
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/>

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

fn create_pod(sim_url: &str, ns: &str, name: &str, labels: Value) -> Value {
    let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":ns,"labels":labels},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}],"nodeName":"node-x"}});
    let resp = reqwest::blocking::Client::new().post(format!("{sim_url}/api/v1/namespaces/{ns}/pods")).json(&pod).send().unwrap();
    let code = resp.status();
    let body: Value = resp.json().unwrap();
    assert!(code.is_success(), "create {name}: {body}");
    body
}

fn watch_lines(url: &str) -> Vec<Value> {
    let body = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap().get(url).send().unwrap().text().unwrap();
    body.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

struct Fixture {
    members: Vec<(String, kubefold_testdata::SimHandle)>,
    kf: Kubefold,
    _tmp: tempfile::TempDir,
}

fn fleet(extra: &[&str]) -> Fixture {
    let members = demo_members(3, 0.0);
    let (tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), extra);
    kf.wait_ready();
    Fixture { members, kf, _tmp: tmp }
}

/// A kept-alive connection left idle for a while is still served, as
/// kube-apiserver keeps idle connections 90 s (clients reuse them for as
/// long); with a 5 s idle limit the second request found it closed.
#[test]
fn an_idle_kept_alive_connection_is_still_served() {
    use std::io::{BufRead, BufReader, Read, Write};
    let f = fleet(&[]);
    let addr = f.kf.url.trim_start_matches("http://").to_string();
    let stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut get = |path: &str| -> std::io::Result<(String, String)> {
        write!(writer, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
        let mut status = String::new();
        if reader.read_line(&mut status)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        Ok((status.trim().to_string(), String::from_utf8_lossy(&body).into_owned()))
    };
    let (status, body) = get("/version").unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(body.contains("gitVersion"), "{body}");
    std::thread::sleep(Duration::from_secs(7));
    let second = get("/version");
    assert!(matches!(&second, Ok((status, _)) if status.starts_with("HTTP/1.1 200")), "after 7 s idle: {second:?}");
}

#[test]
fn resource_version_rules_for_list_and_get() {
    let f = fleet(&[]);
    let kf = &f.kf;
    let head = rv_of(&kf.get_json("/api/v1/pods"));
    // (query, expected HTTP code, expected reason) — the table of "Semantics
    // for get and list" and of ValidateListOptions.
    let future = head + 1_000_000;
    let cases: Vec<(String, u16, &str)> = vec![
        ("".into(), 200, ""),
        ("resourceVersion=0".into(), 200, ""),
        (format!("resourceVersion={head}"), 200, ""),
        (format!("resourceVersion={head}&resourceVersionMatch=NotOlderThan"), 200, ""),
        (format!("resourceVersion={head}&resourceVersionMatch=Exact"), 200, ""),
        ("resourceVersion=0&resourceVersionMatch=NotOlderThan".into(), 200, ""),
        ("resourceVersion=0&resourceVersionMatch=Exact".into(), 422, "Invalid"),
        ("resourceVersionMatch=Exact".into(), 422, "Invalid"),
        ("resourceVersionMatch=NotOlderThan".into(), 422, "Invalid"),
        (format!("resourceVersion={head}&resourceVersionMatch=Sometimes"), 422, "Invalid"),
        ("sendInitialEvents=true".into(), 422, "Invalid"),
        ("resourceVersion=abc".into(), 400, "BadRequest"),
        ("limit=2&continue=garbage".into(), 400, "BadRequest"),
        (format!("resourceVersion={future}"), 504, "Timeout"),
        (format!("resourceVersion={future}&resourceVersionMatch=Exact"), 504, "Timeout"),
        // limit x resourceVersion: "0" is any, N without a match is Exact.
        ("limit=2".into(), 200, ""),
        ("limit=2&resourceVersion=0".into(), 200, ""),
        (format!("limit=2&resourceVersion={head}"), 200, ""),
        (format!("limit=2&resourceVersion={head}&resourceVersionMatch=Exact"), 200, ""),
        (format!("limit=2&resourceVersion={head}&resourceVersionMatch=NotOlderThan"), 200, ""),
        (format!("limit=2&resourceVersion={future}"), 504, "Timeout"),
        ("limit=2&resourceVersion=0&resourceVersionMatch=Exact".into(), 422, "Invalid"),
    ];
    for (query, code, reason) in cases {
        let (got, body) = kf.get(&format!("/api/v1/pods?{query}"));
        assert_eq!(got, code, "list ?{query}: {body}");
        if !reason.is_empty() {
            let status: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(status["kind"], "Status", "{query}");
            assert_eq!(status["reason"], reason, "{query}: {body}");
        }
    }
    // 504 carries Retry-After.
    let resp = reqwest::blocking::get(format!("{}/api/v1/namespaces/default/pods/web-0_member1?resourceVersion={future}", kf.url)).unwrap();
    assert_eq!(resp.status().as_u16(), 504);
    assert_eq!(resp.headers().get("Retry-After").unwrap(), "1");
    // get: unset, 0 and an old N all answer.
    for q in ["", "?resourceVersion=0", "?resourceVersion=1"] {
        assert_eq!(kf.get(&format!("/api/v1/namespaces/default/pods/web-0_member1{q}")).0, 200, "{q}");
    }
    // continue and a resourceVersion do not mix.
    let first = kf.get_json("/api/v1/pods?limit=2");
    let token = first["metadata"]["continue"].as_str().unwrap();
    let (code, body) = kf.get(&format!("/api/v1/pods?limit=2&continue={token}&resourceVersion={head}"));
    assert_eq!(code, 400, "{body}");
}

#[test]
fn exact_lists_and_pages_read_one_snapshot() {
    let f = fleet(&[]);
    let kf = &f.kf;
    let sim = f.members[0].1.url();
    let at = kf.get_json("/api/v1/namespaces/default/pods");
    let at_rv = rv_of(&at);
    let before = names(&at);
    let first = kf.get_json("/api/v1/pods?limit=3");
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let page_rv = rv_of(&first);
    assert_eq!(first["metadata"]["remainingItemCount"].as_u64().unwrap() as usize + 3, names(&kf.get_json("/api/v1/pods")).len());

    let member_list: Value = serde_json::from_str(&http_get(&format!("{sim}/api/v1/namespaces/default/pods")).1).unwrap();
    let (member_at, member_before) = (rv_of(&member_list), names(&member_list));
    create_pod(&sim, "default", "late-comer", json!({"app": "late"}));
    wait_for(Duration::from_secs(20), "late-comer ingested", || kf.get("/api/v1/namespaces/default/pods/late-comer_member1").0 == 200);

    // limit with resourceVersion=N and no resourceVersionMatch is Exact
    // ("Semantics for get and list"): the first page of the state at N, in
    // kubefold and in the simulated member alike.
    let paged = kf.get_json(&format!("/api/v1/namespaces/default/pods?limit=500&resourceVersion={at_rv}"));
    assert_eq!(rv_of(&paged), at_rv);
    assert_eq!(names(&paged), before);
    let newer = kf.get_json(&format!("/api/v1/namespaces/default/pods?limit=500&resourceVersion={at_rv}&resourceVersionMatch=NotOlderThan"));
    assert!(names(&newer).contains(&"late-comer_member1".to_string()), "NotOlderThan with a limit reads the latest state");
    let member_paged: Value = serde_json::from_str(&http_get(&format!("{sim}/api/v1/namespaces/default/pods?limit=500&resourceVersion={member_at}")).1).unwrap();
    assert_eq!(rv_of(&member_paged), member_at, "the simulator, too");
    assert_eq!(names(&member_paged), member_before);

    // Exact at the old RV returns the state as of that RV.
    let exact = kf.get_json(&format!("/api/v1/namespaces/default/pods?resourceVersion={at_rv}&resourceVersionMatch=Exact"));
    assert_eq!(rv_of(&exact), at_rv);
    assert_eq!(names(&exact), before);
    assert!(names(&kf.get_json("/api/v1/namespaces/default/pods")).contains(&"late-comer_member1".to_string()));

    // The remaining pages are read at the first page's snapshot: no late-comer.
    // Each page but the last says how many objects of that snapshot follow it.
    let total = first["metadata"]["remainingItemCount"].as_u64().unwrap() as usize + 3;
    let mut all = names(&first);
    let mut token = token;
    loop {
        let page = kf.get_json(&format!("/api/v1/pods?limit=3&continue={token}"));
        assert_eq!(rv_of(&page), page_rv, "every page has the first page's RV");
        all.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => {
                assert_eq!(page["metadata"]["remainingItemCount"].as_u64(), Some((total - all.len()) as u64), "after {} of {total}", all.len());
                token = t.to_string();
            }
            _ => {
                assert!(page["metadata"].get("remainingItemCount").is_none(), "{}", page["metadata"]);
                break;
            }
        }
    }
    assert_eq!(all.len(), total);
    // Pages of one namespace or one cluster count what follows them too,
    // each scope its own objects: every namespace and every cluster paged
    // at one snapshot, two objects a page (the pages after the first take
    // their scope's count from the first).
    let whole = kf.get_json(&format!("/api/v1/pods?resourceVersion={page_rv}&resourceVersionMatch=Exact"));
    let mut scopes: BTreeSet<String> = BTreeSet::new();
    for object in whole["items"].as_array().unwrap() {
        scopes.insert(format!("/api/v1/namespaces/{}/pods", object["metadata"]["namespace"].as_str().unwrap()));
        let (_, cluster) = object["metadata"]["name"].as_str().unwrap().rsplit_once('_').unwrap();
        scopes.insert(format!("/clusters/{cluster}/api/v1/pods"));
    }
    assert!(scopes.len() >= 4, "{scopes:?}");
    let mut paged_scopes = 0;
    for path in &scopes {
        let of_scope = names(&kf.get_json(&format!("{path}?resourceVersion={page_rv}&resourceVersionMatch=Exact")));
        let mut seen: Vec<String> = Vec::new();
        let mut next = format!("{path}?limit=2&resourceVersion={page_rv}&resourceVersionMatch=Exact");
        loop {
            let page = kf.get_json(&next);
            seen.extend(names(&page));
            match page["metadata"]["continue"].as_str() {
                Some(t) if !t.is_empty() => {
                    assert_eq!(page["metadata"]["remainingItemCount"].as_u64(), Some((of_scope.len() - seen.len()) as u64), "{path} after {}", seen.len());
                    next = format!("{path}?limit=2&continue={t}");
                }
                _ => break,
            }
        }
        assert_eq!(seen, of_scope, "{path}");
        paged_scopes += usize::from(of_scope.len() > 4);
    }
    assert!(paged_scopes >= 3, "scopes of more than two pages: {paged_scopes}");
    assert!(!all.contains(&"late-comer_member1".to_string()));
    let snapshot = kf.get_json(&format!("/api/v1/pods?resourceVersion={page_rv}&resourceVersionMatch=Exact"));
    assert_eq!(all, names(&snapshot));
    let unique: BTreeSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "no duplicates across pages");

    // remainingItemCount is left out when a label or field selector is set
    // (kube-apiserver counts the rest only for an unfiltered list).
    for (selector, table) in [
        ("labelSelector=%21no-such-label", false),
        ("labelSelector=kubefold.io%2Fcluster%3Dmember1", false),
        ("fieldSelector=metadata.namespace%3Ddefault", false),
        ("fieldSelector=metadata.namespace%3Ddefault", true),
        ("", false),
        ("", true),
    ] {
        let mut request = reqwest::blocking::Client::new().get(format!("{}/api/v1/pods?limit=1&{selector}", kf.url));
        if table {
            request = request.header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io");
        }
        let page: Value = request.send().unwrap().json().unwrap();
        assert!(page["metadata"]["continue"].as_str().is_some_and(|t| !t.is_empty()), "{selector}: {page}");
        let count = page["metadata"].get("remainingItemCount");
        if selector.is_empty() {
            assert!(count.and_then(Value::as_u64).is_some_and(|n| n > 0), "table={table}: {}", page["metadata"]);
        } else {
            assert!(count.is_none(), "{selector} table={table}: {}", page["metadata"]);
        }
    }

    // A modified token is refused, not served.
    let mut bytes = token.clone().into_bytes();
    let mid = bytes.len() / 2;
    bytes[mid] = if bytes[mid] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(bytes).unwrap();
    let (code, body) = kf.get(&format!("/api/v1/pods?limit=3&continue={forged}"));
    assert_eq!(code, 400, "{body}");
}

/// The sum of the `/metrics` samples of `series` (no labels).
fn metric_value(kf: &Kubefold, series: &str) -> u64 {
    let text = kf.get("/metrics").1;
    text.lines().filter_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<f64>().ok()).sum::<f64>() as u64
}

/// A watch takes events at most once per flush interval: five ConfigMaps
/// created one after another (separate commits, well within one 3 s
/// interval) reach a running watch in at most two writes, every one of
/// them, in order; the first after a quiet spell comes alone. (With the
/// interval at 0 each commit is a write of its own: five.)
#[test]
fn a_watch_gathers_the_events_of_a_flush_interval_into_one_write() {
    let f = fleet(&["--watch-flush-interval-ms", "3000"]);
    let kf = &f.kf;
    let sim = f.members[0].1.url();
    let create = |name: &str| {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        let resp = reqwest::blocking::Client::new().post(format!("{sim}/api/v1/namespaces/default/configmaps")).json(&cm).send().unwrap();
        assert!(resp.status().is_success(), "create {name}: {}", resp.text().unwrap());
    };
    let start = rv_of(&kf.get_json("/api/v1/configmaps"));
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let url = format!("{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start}&timeoutSeconds=60", kf.url);
    let response = reqwest::blocking::Client::builder().timeout(None).build().unwrap().get(&url).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(response).lines().map_while(Result::ok) {
            if !line.trim().is_empty() && tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    let seen = |e: Value| (e["type"].as_str().unwrap().to_string(), e["object"]["metadata"]["name"].as_str().unwrap().to_string());
    let before = metric_value(kf, "kubefold_watch_messages_total");
    create("flush-0");
    let first = rx.recv_timeout(Duration::from_secs(30)).expect("the first ConfigMap's event");
    assert_eq!(seen(first), ("ADDED".to_string(), "flush-0_member1".to_string()));
    assert_eq!(metric_value(kf, "kubefold_watch_messages_total") - before, 1, "the first event alone");
    for i in 1..=5 {
        create(&format!("flush-{i}"));
    }
    let got: Vec<(String, String)> = (1..=5).map(|_| seen(rx.recv_timeout(Duration::from_secs(30)).expect("all five events"))).collect();
    assert_eq!(got, (1..=5).map(|i| ("ADDED".to_string(), format!("flush-{i}_member1"))).collect::<Vec<_>>());
    let writes = metric_value(kf, "kubefold_watch_messages_total") - before - 1;
    assert!((1..=2).contains(&writes), "five events in {writes} writes");
    assert!(metric_value(kf, "kubefold_watch_lines_total") >= 6);
}

#[test]
fn watch_start_points_bookmarks_and_streaming_lists() {
    let f = fleet(&["--bookmark-interval-seconds", "1"]);
    let kf = &f.kf;
    let sim = f.members[1].1.url();
    let start = rv_of(&kf.get_json("/api/v1/pods"));
    let member_start = rv_of(&serde_json::from_str(&http_get(&format!("{sim}/api/v1/pods")).1).unwrap());
    for i in 0..3 {
        create_pod(&sim, "default", &format!("w{i}"), json!({"app": "w"}));
    }
    wait_for(Duration::from_secs(20), "pods ingested", || kf.get("/api/v1/namespaces/default/pods/w2_member2").0 == 200);
    std::thread::sleep(Duration::from_secs(2)); // the member's own controllers settle
    let member: Vec<(String, String)> = watch_lines(&format!("{sim}/api/v1/pods?watch=1&resourceVersion={member_start}&timeoutSeconds=1"))
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_string(), format!("{}_member2", e["object"]["metadata"]["name"].as_str().unwrap())))
        .collect();
    wait_for(Duration::from_secs(20), "kubefold caught up", || {
        let n = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={start}&timeoutSeconds=1", kf.url)).len();
        n >= member.len()
    });

    // From N: every event after N, in order (the member's own order), then live.
    let events = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={start}&timeoutSeconds=1", kf.url));
    let got: Vec<(String, String)> = events.iter().filter(|e| e["type"] != "BOOKMARK").map(|e| (e["type"].as_str().unwrap().to_string(), e["object"]["metadata"]["name"].as_str().unwrap().to_string())).collect();
    assert_eq!(got, member);
    // The three creates, in order; the member's controllers may change a
    // pod (bind it, start it) before the next is created.
    let added: Vec<&str> = got.iter().filter(|(t, _)| t == "ADDED").map(|(_, n)| n.as_str()).collect();
    assert_eq!(added, ["w0_member2", "w1_member2", "w2_member2"], "{got:?}");
    let rvs: Vec<u64> = events.iter().map(|e| rv_of(&e["object"])).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "strictly increasing RVs: {rvs:?}");

    // Unset: the current state as ADDED first.
    let events = watch_lines(&format!("{}/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1", kf.url));
    let listed = names(&kf.get_json("/api/v1/namespaces/default/pods"));
    let added: Vec<String> = events.iter().filter(|e| e["type"] == "ADDED").map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(added, listed);

    // Bookmarks with allowWatchBookmarks: kind, apiVersion and an RV only.
    let events = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds=3", kf.url, rv_of(&kf.get_json("/api/v1/pods"))));
    let bookmark = events.iter().find(|e| e["type"] == "BOOKMARK").expect("a bookmark within 3 s at a 1 s interval");
    assert_eq!(bookmark["object"]["kind"], "Pod");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().is_ok());
    // Without allowWatchBookmarks: none.
    let events = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={}&timeoutSeconds=2", kf.url, rv_of(&kf.get_json("/api/v1/pods"))));
    assert!(events.iter().all(|e| e["type"] != "BOOKMARK"));

    // Streaming list: the state as ADDED, then the initial-events-end bookmark.
    let events = watch_lines(&format!(
        "{}/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
        kf.url
    ));
    let end = events.iter().position(|e| e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true").expect("initial-events-end bookmark");
    assert_eq!(events[end]["type"], "BOOKMARK");
    assert_eq!(end, names(&kf.get_json("/api/v1/namespaces/default/pods")).len(), "every object first");
    assert!(events[..end].iter().all(|e| e["type"] == "ADDED"));
    let (code, body) = kf.get("/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true");
    assert_eq!(code, 422, "sendInitialEvents needs resourceVersionMatch=NotOlderThan: {body}");
}

/// Waits until no event arrives for a second (the members' controllers have
/// settled) and returns the list RV of pods then.
fn settled_rv(kf: &Kubefold) -> u64 {
    let mut last = rv_of(&kf.get_json("/api/v1/pods"));
    wait_for(Duration::from_secs(30), "members settled", || {
        std::thread::sleep(Duration::from_secs(1));
        let now = rv_of(&kf.get_json("/api/v1/pods"));
        std::mem::replace(&mut last, now) == now
    });
    last
}

#[test]
fn watch_ends_start_points_tables_and_waiting_gets() {
    crate::require_kubectl!("1.27");
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    // minRequestTimeoutSeconds: 3, so that a watch without timeoutSeconds
    // ends within a test (kube-apiserver: between min and 2 x min).
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(&config, "minRequestTimeoutSeconds: 3\n").unwrap();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", config.to_str().unwrap()]);
    kf.wait_ready();
    let sim = members[0].1.url();
    let head = settled_rv(&kf);

    // With bookmarks (default interval: a minute), a 5 s watch still gets
    // one shortly before it ends, at the current RV, and it is the last event.
    let events = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={head}&allowWatchBookmarks=true&timeoutSeconds=5", kf.url));
    let last = events.last().unwrap_or_else(|| panic!("no bookmark before the end of the watch"));
    assert_eq!(last["type"], "BOOKMARK", "{events:?}");
    assert_eq!(last["object"]["kind"], "Pod");
    assert_eq!(rv_of(&last["object"]), rv_of(&kf.get_json("/api/v1/pods")), "the bookmark carries the current RV");
    assert!(events.iter().all(|e| rv_of(&e["object"]) <= rv_of(&last["object"])));

    // Without timeoutSeconds the server picks one in [min, 2 x min).
    let started = std::time::Instant::now();
    let events = watch_lines(&format!("{}/api/v1/pods?watch=1&resourceVersion={head}", kf.url));
    let lasted = started.elapsed();
    assert!(events.iter().all(|e| e["type"] != "ERROR"), "{events:?}");
    assert!(lasted >= Duration::from_secs(3), "ended before minRequestTimeoutSeconds: {lasted:?}");
    assert!(lasted < Duration::from_secs(40), "never ended on its own: {lasted:?}");

    // resourceVersion=0: the current state as ADDED, then live events; the
    // same as a table (a Table of one row per event, column definitions on
    // the first event only, as kube-apiserver's watch handler does).
    let listed = names(&kf.get_json("/api/v1/namespaces/default/pods"));
    let url = kf.url.clone();
    let json_watch = std::thread::spawn({
        let url = url.clone();
        move || watch_lines(&format!("{url}/api/v1/namespaces/default/pods?watch=1&resourceVersion=0&timeoutSeconds=6"))
    });
    let table_watch = std::thread::spawn(move || {
        let body = reqwest::blocking::Client::new()
            .get(format!("{url}/api/v1/pods?watch=1&resourceVersion={head}&timeoutSeconds=6"))
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
            .send()
            .unwrap()
            .text()
            .unwrap();
        body.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_secs(2)); // both watches are open
    create_pod(&sim, "default", "watched", json!({"app": "watched"}));
    let events = json_watch.join().unwrap();
    let added: Vec<String> = events.iter().filter(|e| e["type"] == "ADDED").map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(&added[..listed.len()], &listed[..], "the state first");
    assert_eq!(added[listed.len()..], ["watched_member1".to_string()], "then what happens");

    let events = table_watch.join().unwrap();
    assert!(!events.is_empty(), "no table events");
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["object"]["kind"], "Table", "{event}");
        assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1", "{event}");
        assert_eq!(event["object"]["rows"].as_array().map(Vec::len), Some(1), "one row per event: {event}");
        let columns = event["object"]["columnDefinitions"].as_array().map(Vec::len).unwrap_or(0);
        if i == 0 {
            let cols: Vec<&str> = event["object"]["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
            assert_eq!(&cols[..3], &["Name", "Cluster", "Ready"], "{event}");
        } else {
            assert_eq!(columns, 0, "column definitions only on the first event: {event}");
        }
    }
    let row = &events[0]["object"]["rows"][0];
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(row["cells"][0], "watched_member1");
    assert_eq!(row["cells"][1], "member1");
    assert_eq!(row["object"]["metadata"]["name"], "watched_member1");
    // AGE is the time since creation when the event is printed (the pod was
    // created two seconds after the watch started), not a negative age
    // printed as `<invalid>`.
    let age_column = events[0]["object"]["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == "Age").unwrap();
    let age = row["cells"][age_column].as_str().unwrap_or_default();
    assert!(age.ends_with('s') && age[..age.len() - 1].parse::<u32>().is_ok_and(|s| s < 60), "age of a new pod: {age:?}");

    // A get at an RV slightly ahead waits for it and then answers: the pod
    // does not exist yet when the request arrives.
    let head = settled_rv(&kf);
    let url = format!("{}/api/v1/namespaces/default/pods/ahead_member1?resourceVersion={}", kf.url, head + 1);
    let get = std::thread::spawn(move || http_get(&url));
    std::thread::sleep(Duration::from_millis(300)); // the get is waiting
    create_pod(&sim, "default", "ahead", json!({"app": "ahead"}));
    let (code, body) = get.join().unwrap();
    assert_eq!(code, 200, "{body}");
    let pod: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(pod["metadata"]["name"], "ahead_member1");
    assert!(rv_of(&pod) > head);

    // kubectl -w (1.33 and 1.27) prints a pod created after it started, with
    // its cluster.
    for (i, bin) in ["kubectl".to_string(), kubectl_version("1.27")].into_iter().enumerate() {
        let watcher = std::process::Command::new("timeout")
            .args(["8", &bin, "--server", &kf.url, "get", "pods", "-A", "-w"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(3)); // kubectl has listed and watches
        let name = format!("kubectl-watched-{i}");
        create_pod(&members[1].1.url(), "default", &name, json!({"app": "kw"}));
        let out = watcher.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let header = text.lines().next().unwrap_or_default();
        assert!(header.split_whitespace().collect::<Vec<_>>()[..3] == ["NAMESPACE", "NAME", "CLUSTER"], "{bin}: {header}\n{}", String::from_utf8_lossy(&out.stderr));
        let qualified = format!("{name}_member2");
        let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(qualified.as_str()));
        let line = line.unwrap_or_else(|| panic!("{bin}: {qualified} not printed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(line.split_whitespace().nth(2), Some("member2"), "{line}");
        // Created three seconds after the watch began: a few seconds old.
        assert!(!line.contains("<invalid>"), "AGE of a new pod: {line}");
    }
}

#[test]
fn selectors_scope_and_names() {
    let f = fleet(&[]);
    let kf = &f.kf;
    let sim = f.members[2].1.url();
    create_pod(&sim, "default", "sel-a", json!({"tier": "front", "env": "prod"}));
    create_pod(&sim, "default", "sel-b", json!({"tier": "back", "env": "prod"}));
    create_pod(&sim, "default", "sel-c", json!({"tier": "back"}));
    wait_for(Duration::from_secs(20), "pods ingested", || kf.get("/api/v1/namespaces/default/pods/sel-c_member3").0 == 200);
    let sel = |q: &str| -> Vec<String> {
        let mut n: Vec<String> = names(&kf.get_json(&format!("/api/v1/namespaces/default/pods?labelSelector={}", urlencode(q))))
            .into_iter()
            .filter(|n| n.starts_with("sel-"))
            .collect();
        n.sort();
        n
    };
    // The examples of "Labels and Selectors", applied to three pods.
    assert_eq!(sel("tier=front"), vec!["sel-a_member3"]);
    assert_eq!(sel("tier==back"), vec!["sel-b_member3", "sel-c_member3"]);
    assert_eq!(sel("tier!=front"), vec!["sel-b_member3", "sel-c_member3"]);
    assert_eq!(sel("env in (prod,qa)"), vec!["sel-a_member3", "sel-b_member3"]);
    assert_eq!(sel("env notin (prod)"), vec!["sel-c_member3"], "notin matches objects without the label");
    assert_eq!(sel("env"), vec!["sel-a_member3", "sel-b_member3"]);
    assert_eq!(sel("!env"), vec!["sel-c_member3"]);
    assert_eq!(sel("tier=back,env=prod"), vec!["sel-b_member3"]);
    assert_eq!(sel("tier=back,kubefold.io/cluster=member3"), vec!["sel-b_member3", "sel-c_member3"]);
    assert!(sel("tier=back,kubefold.io/cluster!=member3").is_empty());
    // A selector's pages make its whole list, one cluster's too.
    for path in ["/api/v1/pods?labelSelector=tier%3Dback", "/clusters/member3/api/v1/namespaces/default/pods?labelSelector=tier%3Dback"] {
        let whole = names(&kf.get_json(path));
        let (mut paged, mut next) = (Vec::new(), format!("{path}&limit=1"));
        loop {
            let page = kf.get_json(&next);
            paged.extend(names(&page));
            match page["metadata"]["continue"].as_str() {
                Some(t) if !t.is_empty() => next = format!("{path}&limit=1&continue={t}"),
                _ => break,
            }
        }
        assert_eq!(paged, whole, "{path}");
        assert_eq!(whole.iter().filter(|n| n.starts_with("sel-")).count(), 2, "{path}: {whole:?}");
    }
    // A pod whose labels change is found by its new labels, not its old ones.
    send(reqwest::Method::PATCH, &format!("{sim}/api/v1/namespaces/default/pods/sel-c"), "application/merge-patch+json", json!({"metadata": {"labels": {"tier": "front"}}}));
    wait_for(Duration::from_secs(20), "the new label ingested", || sel("tier=front").len() == 2);
    assert_eq!(sel("tier=front"), vec!["sel-a_member3", "sel-c_member3"]);
    assert_eq!(sel("tier=back"), vec!["sel-b_member3"]);
    for bad in ["tier in (a", "=x", "x y", "!", "a=b=c", "tier in ()x"] {
        let (code, body) = kf.get(&format!("/api/v1/pods?labelSelector={}", urlencode(bad)));
        assert_eq!(code, 400, "{bad}: {body}");
    }
    // Field selectors.
    let by_node = names(&kf.get_json("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-x"));
    assert_eq!(by_node.iter().filter(|n| n.starts_with("sel-")).count(), 3);
    let (code, body) = kf.get("/api/v1/pods?fieldSelector=spec.frobnicate%3Dx");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("spec.frobnicate"), "{body}");
    let one = names(&kf.get_json("/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dsel-a_member3"));
    assert_eq!(one, vec!["sel-a_member3"]);
    // Namespaces in paths are never qualified; nodes are cluster-scoped.
    assert!(names(&kf.get_json("/api/v1/nodes")).iter().any(|n| n.starts_with("member1-node-") && n.ends_with("_member1")));
}

fn send(method: reqwest::Method, url: &str, content_type: &str, body: Value) -> Value {
    let resp = reqwest::blocking::Client::new().request(method, url).header("Content-Type", content_type).body(body.to_string()).send().unwrap();
    let code = resp.status();
    let body: Value = resp.json().unwrap();
    assert!(code.is_success(), "{url}: {body}");
    body
}

#[test]
fn per_type_field_selectors() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim = members[0].1.url();
    let post = |path: &str, body: Value| send(reqwest::Method::POST, &format!("{sim}{path}"), "application/json", body);
    // Objects that differ on every field selected below.
    let nodes: Value = serde_json::from_str(&http_get(&format!("{sim}/api/v1/nodes")).1).unwrap();
    let node = nodes["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    send(reqwest::Method::PATCH, &format!("{sim}/api/v1/nodes/{node}"), "application/merge-patch+json", json!({"spec": {"unschedulable": true}}));
    for (name, node_name) in [("fs-pending", "node-x"), ("fs-running", node.as_str())] {
        let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}],"nodeName":node_name}});
        post("/api/v1/namespaces/default/pods", pod);
    }
    for (name, kind, object, reason, kind_of_event) in
        [("fs-ev-a", "Pod", "fs-pending", "FailedScheduling", "Warning"), ("fs-ev-b", "Node", node.as_str(), "NodeNotSchedulable", "Normal")]
    {
        post("/api/v1/namespaces/default/events", json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": kind, "name": object, "namespace": "default", "apiVersion": "v1"},
            "reason": reason, "type": kind_of_event, "message": "field selector test", "source": {"component": "fs-test"},
        }));
    }
    post("/api/v1/namespaces/default/services", json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "fs-external"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"},
    }));
    post("/apis/apps/v1/namespaces/default/replicasets", json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "fs-empty"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "fs-empty"}},
                 "template": {"metadata": {"labels": {"app": "fs-empty"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    }));
    wait_for(Duration::from_secs(30), "objects ingested and fs-running running", || {
        let (code, body) = kf.get("/api/v1/namespaces/default/pods/fs-running_member1");
        code == 200
            && serde_json::from_str::<Value>(&body).unwrap()["status"]["phase"] == "Running"
            && kf.get("/apis/apps/v1/namespaces/default/replicasets/fs-empty_member1").0 == 200
            && kf.get("/api/v1/namespaces/default/events/fs-ev-b_member1").0 == 200
            && kf.get("/api/v1/namespaces/default/services/fs-external_member1").0 == 200
            && kf.get_json(&format!("/api/v1/nodes/{node}_member1"))["spec"]["unschedulable"] == true
    });
    std::thread::sleep(Duration::from_secs(1)); // the member's controllers settle

    /// What a selector means for one served item.
    type Meaning = Box<dyn Fn(&Value) -> bool>;
    // (collection, fieldSelector, meaning).
    let cases: Vec<(&str, String, Meaning)> = vec![
        ("/api/v1/pods", "spec.nodeName=node-x".into(), Box::new(|p: &Value| p["spec"]["nodeName"] == "node-x")),
        ("/api/v1/pods", format!("spec.nodeName={node}"), Box::new({ let node = node.clone(); move |p: &Value| p["spec"]["nodeName"] == node.as_str() })),
        ("/api/v1/pods", "spec.nodeName!=node-x".into(), Box::new(|p: &Value| p["spec"]["nodeName"] != "node-x")),
        ("/api/v1/pods", "status.phase=Pending".into(), Box::new(|p: &Value| p["status"]["phase"] == "Pending")),
        ("/api/v1/pods", "status.phase=Running".into(), Box::new(|p: &Value| p["status"]["phase"] == "Running")),
        ("/api/v1/pods", "status.phase!=Running,spec.nodeName=node-x".into(), Box::new(|p: &Value| p["status"]["phase"] != "Running" && p["spec"]["nodeName"] == "node-x")),
        ("/api/v1/nodes", "spec.unschedulable=true".into(), Box::new(|n: &Value| n["spec"]["unschedulable"] == true)),
        ("/api/v1/nodes", "spec.unschedulable=false".into(), Box::new(|n: &Value| n["spec"]["unschedulable"] != true)),
        ("/api/v1/events", "involvedObject.name=fs-pending".into(), Box::new(|e: &Value| e["involvedObject"]["name"] == "fs-pending")),
        ("/api/v1/events", "involvedObject.kind=Node".into(), Box::new(|e: &Value| e["involvedObject"]["kind"] == "Node")),
        ("/api/v1/events", "reason=FailedScheduling".into(), Box::new(|e: &Value| e["reason"] == "FailedScheduling")),
        ("/api/v1/events", "type=Warning".into(), Box::new(|e: &Value| e["type"] == "Warning")),
        ("/api/v1/events", "type!=Warning".into(), Box::new(|e: &Value| e["type"] != "Warning")),
        ("/api/v1/services", "spec.type=ExternalName".into(), Box::new(|s: &Value| s["spec"]["type"] == "ExternalName")),
        ("/api/v1/services", "spec.clusterIP!=".into(), Box::new(|s: &Value| s["spec"]["clusterIP"].as_str().is_some_and(|ip| !ip.is_empty()))),
        ("/apis/apps/v1/replicasets", "status.replicas=0".into(), Box::new(|r: &Value| r["status"]["replicas"].as_u64().unwrap_or(0) == 0)),
        ("/apis/apps/v1/replicasets", "status.replicas!=0".into(), Box::new(|r: &Value| r["status"]["replicas"].as_u64().unwrap_or(0) != 0)),
    ];
    for (collection, selector, expect) in &cases {
        let all = kf.get_json(collection);
        let items = all["items"].as_array().unwrap();
        let mut expected: Vec<String> = items.iter().filter(|i| expect(i)).map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
        let mut got = names(&kf.get_json(&format!("{collection}?fieldSelector={}", urlencode(selector))));
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "{collection}?fieldSelector={selector}");
        assert!(!got.is_empty() && got.len() < items.len(), "{collection}?fieldSelector={selector} must select some but not all of {}: {got:?}", items.len());
    }
    // Unsupported fields: 400 BadRequest with kube-apiserver's message.
    for (collection, selector, message) in [
        ("/api/v1/pods", "spec.frobnicate=x", "field label not supported: spec.frobnicate"),
        ("/api/v1/nodes", "status.phase=Ready", "field label not supported: status.phase"),
        ("/api/v1/events", "message=x", "field label not supported: message"),
        ("/api/v1/configmaps", "data.x=y", "\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""),
    ] {
        let (code, body) = kf.get(&format!("{collection}?fieldSelector={}", urlencode(selector)));
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!((code, &status["kind"], &status["reason"]), (400, &json!("Status"), &json!("BadRequest")), "{selector}: {body}");
        assert_eq!(status["message"], message, "{selector}");
    }
}

#[test]
fn original_name_style_and_longest_names() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let cluster = "c".repeat(63);
    let kf = Kubefold::serve(&dir, &[(cluster.clone(), members[0].1.url())], &[]);
    kf.wait_ready();
    let name = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    create_pod(&members[0].1.url(), "default", &name, json!({"long": "yes"}));
    let qualified = format!("{name}_{cluster}");
    wait_for(Duration::from_secs(20), "long pod", || kf.get(&format!("/api/v1/namespaces/default/pods/{qualified}")).0 == 200);
    let got = kf.get_json(&format!("/api/v1/namespaces/default/pods/{qualified}"));
    assert_eq!(got["metadata"]["name"], qualified);
    let listed = names(&kf.get_json("/api/v1/pods?labelSelector=long%3Dyes"));
    assert_eq!(listed, vec![qualified.clone()]);
    // Bare name unique in the fleet resolves.
    assert_eq!(kf.get(&format!("/api/v1/namespaces/default/pods/{name}")).0, 200);
    // Watch: the state from "0", then a change made by a PATCH through the
    // aggregated path, under the qualified name.
    let events = watch_lines(&format!("{}/api/v1/namespaces/default/pods?watch=1&resourceVersion=0&labelSelector=long%3Dyes&timeoutSeconds=1", kf.url));
    assert_eq!((&events[0]["type"], &events[0]["object"]["metadata"]["name"]), (&json!("ADDED"), &json!(qualified)));
    assert!(events.iter().all(|e| e["object"]["metadata"]["name"] == qualified.as_str()), "{events:?}");
    let from = rv_of(&kf.get_json("/api/v1/namespaces/default/pods"));
    let url = format!("{}/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}&labelSelector=long%3Dyes&timeoutSeconds=5", kf.url);
    let watch = std::thread::spawn(move || watch_lines(&url));
    std::thread::sleep(Duration::from_secs(1)); // the watch is open
    let patched = send(
        reqwest::Method::PATCH,
        &format!("{}/api/v1/namespaces/default/pods/{qualified}", kf.url),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"patched": "yes"}}}),
    );
    assert_eq!(patched["metadata"]["name"], qualified);
    assert_eq!(patched["metadata"]["labels"]["patched"], "yes");
    let member: Value = serde_json::from_str(&http_get(&format!("{}/api/v1/namespaces/default/pods/{name}", members[0].1.url())).1).unwrap();
    assert_eq!(member["metadata"]["labels"]["patched"], "yes", "the member holds the change");
    let events = watch.join().unwrap();
    let modified = events.iter().find(|e| e["type"] == "MODIFIED" && e["object"]["metadata"]["labels"]["patched"] == "yes");
    let modified = modified.unwrap_or_else(|| panic!("no MODIFIED event of the patch: {events:?}"));
    assert_eq!(modified["object"]["metadata"]["name"], qualified);
    assert_eq!(rv_of(&modified["object"]), rv_of(&patched), "the watch and the PATCH reply agree on the RV");
    kf.stop();

    let kf = Kubefold::serve(&dir, &[(cluster.clone(), members[0].1.url())], &["--name-style", "original"]);
    kf.wait_ready();
    let got = kf.get_json(&format!("/api/v1/namespaces/default/pods/{name}"));
    assert_eq!(got["metadata"]["name"], name);
    assert_eq!(got["metadata"]["annotations"]["kubefold.io/cluster"], cluster);
    let got = kf.get_json(&format!("/api/v1/namespaces/default/pods/{qualified}"));
    assert_eq!(got["metadata"]["name"], name, "a qualified name is always accepted");
}

#[test]
fn discovery_tables_and_kubectl_1_33() {
    crate::require_kubectl!();
    discovery_tables_and_kubectl("kubectl");
}

#[test]
fn discovery_tables_and_kubectl_1_27() {
    crate::require_kubectl!("1.27");
    discovery_tables_and_kubectl(&kubectl_version("1.27"));
}

fn discovery_tables_and_kubectl(bin: &str) {
    let f = fleet(&[]);
    let kf = &f.kf;
    // Aggregated discovery.
    let resp = reqwest::blocking::Client::new()
        .get(format!("{}/apis", kf.url))
        .header("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
        .send()
        .unwrap();
    assert!(resp.headers()["content-type"].to_str().unwrap().contains("as=APIGroupDiscoveryList"));
    let doc: Value = resp.json().unwrap();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");

    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "api-resources"], None);
    assert!(ok, "{err}");
    for (name, short) in [("pods", "po"), ("deployments", "deploy"), ("services", "svc"), ("statefulsets", "sts"), ("replicasets", "rs")] {
        let line = out.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(line.split_whitespace().nth(1) == Some(short), "{line}");
    }
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "all", "-A"], None);
    assert!(ok, "{err}");
    for kind in ["pod/", "service/", "deployment.apps/", "replicaset.apps/", "statefulset.apps/"] {
        assert!(out.contains(kind), "{kind} missing from get all:\n{out}");
    }
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "pods", "-A", "-o", "wide"], None);
    assert!(ok, "{err}");
    let header = out.lines().next().unwrap();
    for col in ["CLUSTER", "IP", "NODE", "NOMINATED NODE"] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "deploy", "-A"], None);
    assert!(ok, "{err}");
    assert!(out.lines().next().unwrap().contains("UP-TO-DATE"), "{out}");
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "pod", "web-0_member2", "-n", "default", "-o", "yaml"], None);
    assert!(ok, "{err}");
    assert!(out.contains("kubefold.io/cluster: member2"), "{out}");
    // Chunked get over more objects than a page.
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "pods", "-A", "--chunk-size=3", "--no-headers"], None);
    assert!(ok, "{err}");
    let chunked: Vec<&str> = out.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    let all = names(&kf.get_json("/api/v1/pods"));
    assert_eq!(chunked, all);
    // -l and --field-selector through kubectl.
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "pods", "-A", "--no-headers", "-l", "kubefold.io/cluster=member2"], None);
    assert!(ok, "{err}");
    assert!(!out.is_empty() && out.lines().all(|l| l.split_whitespace().nth(2) == Some("member2")), "{out}");
    let (ok, out, err) = kubectl_bin(bin, &["--server", &kf.url, "get", "pods", "-A", "--no-headers", "--field-selector", "metadata.namespace=default,status.phase=Running"], None);
    assert!(ok, "{err}");
    assert!(!out.is_empty() && out.lines().all(|l| l.starts_with("default ")), "{out}");
    // A per-cluster kubeconfig: original names of one member.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("member1.yaml");
    std::fs::write(&kubeconfig, format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: m1\n  cluster:\n    server: {}/clusters/member1\ncontexts:\n- name: m1\n  context:\n    cluster: m1\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: m1\n",
        kf.url
    )).unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", bin, "get", "pods", "-n", "default", "--no-headers"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().any(|l| l.split_whitespace().next() == Some("web-0")), "{text}");
    assert!(!text.contains("_member"), "{text}");
    // Table options.
    let table: Value = reqwest::blocking::Client::new()
        .get(format!("{}/api/v1/namespaces/default/pods?includeObject=None", kf.url))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(table["kind"], "Table");
    assert!(table["rows"][0].get("object").is_none());
    let cols: Vec<&str> = table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(&cols[..2], &["Name", "Cluster"]);
}

/// The qualified names of every pod the members hold now.
fn member_pods(members: &[(String, kubefold_testdata::SimHandle)]) -> BTreeSet<String> {
    members
        .iter()
        .flat_map(|(cluster, sim)| {
            let list: Value = serde_json::from_str(&http_get(&format!("{}/api/v1/pods", sim.url())).1).unwrap();
            names(&list).into_iter().map(move |n| format!("{n}_{cluster}"))
        })
        .collect()
}

#[test]
fn version_discovery_cluster_scope_and_table_objects() {
    let f = fleet(&[]);
    let kf = &f.kf;
    // /version: a Kubernetes-style gitVersion.
    let version = kf.get_json("/version");
    let git = version["gitVersion"].as_str().unwrap();
    assert!(git.starts_with("v1.") && git[3..].split(['.', '-', '+']).next().unwrap().parse::<u32>().is_ok(), "{version}");
    assert_eq!(version["major"], "1");
    // Short names and verbs in discovery.
    let core = kf.get_json("/api/v1");
    let resource = |name: &str| core["resources"].as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_else(|| panic!("{name} missing"));
    for (name, short) in [("pods", "po"), ("nodes", "no"), ("namespaces", "ns"), ("configmaps", "cm"), ("events", "ev"), ("services", "svc")] {
        assert!(resource(name)["shortNames"].as_array().unwrap().contains(&json!(short)), "{name}: {}", resource(name));
    }
    let verbs: BTreeSet<String> = resource("pods")["verbs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    for verb in ["get", "list", "watch", "update", "patch", "delete"] {
        assert!(verbs.contains(verb), "pods verbs {verbs:?}");
    }
    // The cluster search key with notin.
    let clusters = |selector: &str| -> BTreeSet<String> {
        kf.get_json(&format!("/api/v1/pods?labelSelector={}", urlencode(selector)))["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["annotations"]["kubefold.io/cluster"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(clusters("kubefold.io/cluster notin (member1,member3)"), BTreeSet::from(["member2".to_string()]));
    assert_eq!(clusters("kubefold.io/cluster notin (member1)"), BTreeSet::from(["member2".to_string(), "member3".to_string()]));
    // /clusters/{c}/apis/...: one member, original names.
    let deployments = kf.get_json("/clusters/member2/apis/apps/v1/deployments");
    assert!(!names(&deployments).is_empty());
    assert!(names(&deployments).iter().all(|n| !n.contains('_')), "{:?}", names(&deployments));
    assert!(deployments["items"].as_array().unwrap().iter().all(|d| d["metadata"]["annotations"]["kubefold.io/cluster"] == "member2"));
    let one = &names(&deployments)[0];
    let namespace = deployments["items"][0]["metadata"]["namespace"].as_str().unwrap();
    let got = kf.get_json(&format!("/clusters/member2/apis/apps/v1/namespaces/{namespace}/deployments/{one}"));
    assert_eq!(&got["metadata"]["name"], one.as_str());
    let group = kf.get_json("/clusters/member2/apis/apps/v1");
    assert!(group["resources"].as_array().unwrap().iter().any(|r| r["name"] == "deployments"), "{group}");
    // includeObject=Object: each row carries the whole object.
    let table: Value = reqwest::blocking::Client::new()
        .get(format!("{}/api/v1/namespaces/default/pods?includeObject=Object", kf.url))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let row = &table["rows"][0];
    assert_eq!(row["object"]["kind"], "Pod", "{row}");
    assert_eq!(row["object"]["metadata"]["name"], row["cells"][0]);
    assert!(row["object"]["spec"]["containers"].is_array(), "the whole object: {row}");
}

#[test]
fn chunked_kubectl_get_while_members_churn() {
    crate::require_kubectl!("1.27");
    let members = demo_members(3, 30.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    for bin in ["kubectl".to_string(), kubectl_version("1.27")] {
        // Every pod change while we look, to tell churn from a lost or
        // invented pod.
        let from = rv_of(&kf.get_json("/api/v1/pods"));
        let url = format!("{}/api/v1/pods?watch=1&resourceVersion={from}&timeoutSeconds=20", kf.url);
        let changes = std::thread::spawn(move || watch_lines(&url));
        let before = member_pods(&members);
        let (ok, out, err) = kubectl_bin(&bin, &["--server", &kf.url, "get", "pods", "-A", "--chunk-size=3", "--no-headers"], None);
        assert!(ok, "{bin}: {err}");
        let after = member_pods(&members);
        let printed: Vec<&str> = out.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
        let unique: BTreeSet<String> = printed.iter().map(|n| n.to_string()).collect();
        assert_eq!(unique.len(), printed.len(), "{bin}: duplicates across chunks");
        assert!(printed.len() > 3 * 3, "{bin}: more pods than one chunk: {}", printed.len());
        let changes = changes.join().unwrap();
        let changed = |event_type: &str, name: &str| changes.iter().any(|e| e["type"] == event_type && e["object"]["metadata"]["name"] == name);
        // Held by the members before and after: listed, unless deleted (and
        // perhaps recreated) meanwhile.
        for name in before.intersection(&after) {
            assert!(unique.contains(name) || changed("DELETED", name), "{bin}: {name} missing");
        }
        // Listed: held before or after, or created meanwhile.
        for name in &unique {
            assert!(before.contains(name) || after.contains(name) || changed("ADDED", name), "{bin}: {name} listed but never held");
        }
        let churned = changes.iter().filter(|e| e["type"] != "BOOKMARK").count();
        assert!(churned > 0, "{bin}: the members churned while kubectl listed");
    }
}

#[test]
fn fixtures_keep_every_field() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures/kubernetes-api-testdata");
    // Every fixture of the folder, stored in the member as etcd would hold
    // it (no admission or defaulting), then read back through kubefold.
    let cases = common::FIXTURES;
    let files = std::fs::read_dir(&fixtures).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json")).count();
    assert_eq!(files, cases.len(), "every fixture file is a case");
    for (file, gv, plural, namespaced) in cases {
        let mut fixture: Value = serde_json::from_str(&std::fs::read_to_string(fixtures.join(file)).unwrap()).unwrap();
        // The only changes made to the fixture: a valid name, and a
        // namespace that exists (none for cluster-scoped types).
        let name = format!("fixture-{plural}");
        fixture["metadata"]["name"] = json!(name);
        let meta = fixture["metadata"].as_object_mut().unwrap();
        if namespaced {
            meta.insert("namespace".into(), json!("default"));
        } else {
            meta.remove("namespace");
        }
        members[0].1.put_object(fixture.clone()).unwrap_or_else(|| panic!("{file}: the simulator lacks the type"));
        let path = if namespaced { format!("{gv}/namespaces/default/{plural}") } else { format!("{gv}/{plural}") };
        let qualified = format!("{name}_member1");
        wait_for(Duration::from_secs(20), file, || kf.get(&format!("{path}/{qualified}")).0 == 200);
        let got = kf.get_json(&format!("{path}/{qualified}"));
        let listed = kf.get_json(&path)["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == qualified.as_str()).cloned();
        let watched = watch_lines(&format!("{}{path}?watch=1&resourceVersion=0&fieldSelector=metadata.name%3D{qualified}&timeoutSeconds=1", kf.url));
        // A list item and a watch object carry no kind and apiVersion of
        // their own in a list; kube-apiserver sends both in watch events.
        let mut listed = listed.unwrap_or_else(|| panic!("{file}: not listed"));
        for (k, v) in [("kind", &fixture["kind"]), ("apiVersion", &fixture["apiVersion"])] {
            listed.as_object_mut().unwrap().entry(k).or_insert_with(|| v.clone());
        }
        assert_eq!(watched.len(), 1, "{file}: {watched:?}");
        assert_eq!(watched[0]["type"], "ADDED");
        for (how, served) in [("get", &got), ("list", &listed), ("watch", &watched[0]["object"])] {
            assert_eq!(served["metadata"]["name"], qualified, "{file} {how}");
            assert_eq!(served["metadata"]["annotations"]["kubefold.io/cluster"], "member1", "{file} {how}");
            // Fields kubefold owns: the name qualification, the global
            // resourceVersion and its kubefold.io/ annotations.
            let mut served = served.clone();
            let mut expected = fixture.clone();
            for v in [&mut served, &mut expected] {
                let meta = v["metadata"].as_object_mut().unwrap();
                meta.remove("name");
                meta.remove("resourceVersion");
                if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                    a.retain(|k, _| !k.starts_with("kubefold.io/"));
                }
            }
            if served != expected {
                panic!("{file} {how}: only kubefold's fields may differ\n{}", diff(&expected, &served));
            }
            // Field order is kept too.
            assert_eq!(served.to_string(), expected.to_string(), "{file} {how}: field order");
        }
    }
}

/// The paths at which two JSON values differ, with both sides.
fn diff(expected: &Value, got: &Value) -> String {
    fn walk(path: String, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    walk(format!("{path}.{k}"), x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (a, b)) in x.iter().zip(y).enumerate() {
                    walk(format!("{path}[{i}]"), a, b, out);
                }
            }
            _ if a != b => out.push(format!("{path}: fixture {a} served {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), expected, got, &mut out);
    out.join("\n")
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
