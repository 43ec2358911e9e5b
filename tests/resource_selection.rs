//! Runtime resource selection end to end, over simulators: a custom resource
//! selected at runtime is discovered from the members and listed by kubectl
//! with its printer columns while an open pod watch goes on; restricting
//! pods to one cluster (by name, then by cluster label) and one namespace
//! turns the others into DELETED events of an open watch; the selection
//! survives a restart; invalid selections are refused and change nothing.

mod common;

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use kubefold_engine::selection::ResourceSelection;
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::{json, Value};

/// Demo-workload simulators `member1..n` that also serve widgets.example.com.
fn crd_members(n: usize) -> Vec<(String, SimHandle)> {
    (1..=n)
        .map(|i| {
            let name = format!("member{i}");
            let sim = kubefold_testdata::start(SimConfig { name: name.clone(), workload: Workload::Demo, seed: i as u64, crds: true, ..SimConfig::default() })
                .expect("simulator starts");
            (name, sim)
        })
        .collect()
}

/// Sends `method path` with a JSON body; (code, JSON answer).
fn send(kf: &Kubefold, method: &str, path: &str, body: &str) -> (u16, Value) {
    let response = reqwest::blocking::Client::new()
        .request(method.parse().unwrap(), format!("{}{path}", kf.url))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(60))
        .send()
        .unwrap();
    let code = response.status().as_u16();
    let text = response.text().unwrap();
    (code, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path} -> {code}: {e}: {text}")))
}

/// PUTs a selection that must be accepted; returns the answer.
fn select(kf: &Kubefold, selection: &Value) -> Value {
    let (code, answer) = send(kf, "PUT", "/admin/v1/resources", &selection.to_string());
    assert_eq!(code, 200, "{answer}");
    answer
}

/// The default selection (every built-in type everywhere) as JSON rules.
fn default_rules() -> Vec<Value> {
    serde_json::to_value(ResourceSelection::default()).unwrap()["rules"].as_array().unwrap().clone()
}

/// Built-in types other than pods, from every cluster.
fn all_but_pods() -> Value {
    let mut rule = default_rules().remove(0);
    rule["resourceSelectors"].as_array_mut().unwrap().retain(|s| s["kind"] != "Pod");
    rule
}

/// An open watch whose lines (and its end, as `None`) arrive on a channel.
struct Watch {
    lines: mpsc::Receiver<Option<Value>>,
}

impl Watch {
    fn open(url: &str) -> Watch {
        let response = reqwest::blocking::Client::builder().timeout(None).build().unwrap().get(url).send().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{url}");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(response).lines().map_while(Result::ok) {
                if line.trim().is_empty() {
                    continue;
                }
                if tx.send(Some(serde_json::from_str(&line).unwrap())).is_err() {
                    return;
                }
            }
            let _ = tx.send(None);
        });
        Watch { lines: rx }
    }

    /// Events until `done` holds for the events so far; panics when the
    /// watch ends or `limit` passes.
    fn until(&self, limit: Duration, what: &str, mut done: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut events = Vec::new();
        while !done(&events) {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(event)) => events.push(event),
                Ok(None) => panic!("the watch ended while waiting for {what}"),
                Err(_) => panic!("timed out waiting for {what}; got {} events", events.len()),
            }
        }
        events
    }
}

/// `namespace/name_cluster` of every pod kubefold lists.
fn listed_pods(kf: &Kubefold) -> (u64, Vec<String>) {
    let list = kf.get_json("/api/v1/pods");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let names = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()))
        .collect();
    (rv, names)
}

/// `namespace/name_cluster` of the pods of a simulator.
fn sim_pods(sim: &SimHandle, cluster: &str) -> Vec<String> {
    let list: Value = serde_json::from_str(&http_get(&format!("{}/api/v1/pods", sim.url())).1).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}/{}_{cluster}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()))
        .collect()
}

fn event_key(event: &Value) -> String {
    format!("{}/{}", event["object"]["metadata"]["namespace"].as_str().unwrap_or(""), event["object"]["metadata"]["name"].as_str().unwrap_or(""))
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn a_selected_custom_resource_is_listed_by_kubectl_and_open_watches_go_on() {
    crate::require_kubectl!();
    let members = crd_members(2);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let server = kf.url.clone();
    let kubectl_ok = |args: &[&str]| -> String {
        let mut all = vec!["--server", server.as_str()];
        all.extend_from_slice(args);
        let (ok, stdout, stderr) = kubectl(&all, None);
        assert!(ok, "kubectl {args:?}: {stderr}");
        stdout
    };

    // Not selected: not served, although the members serve it.
    assert!(!kubectl_ok(&["api-resources"]).contains("widgets"));
    assert_eq!(kf.get("/apis/example.com/v1").0, 404);

    let (rv, _) = listed_pods(&kf);
    let pods = Watch::open(&format!("{}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=300", kf.url));

    let mut rules = default_rules();
    rules.push(json!({"resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Widget"}]}));
    let answer = select(&kf, &json!({"rules": rules}));
    assert_eq!(answer["source"], "api");
    assert_eq!(answer["deletedObjects"], 0, "adding a type deletes nothing");

    // Discovered from the members, with the CRD's printer columns.
    wait_for(Duration::from_secs(60), "widgets listed", || {
        let (ok, stdout, _) = kubectl(&["--server", &server, "get", "widgets", "-A", "--no-headers"], None);
        ok && stdout.lines().count() == 6
    });
    let table = kubectl_ok(&["get", "widgets", "-A"]);
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAMESPACE", "NAME", "CLUSTER", "COLOR", "SIZE", "READY", "AGE"], "{table}");
    let row = |name: &str| rows.iter().find(|r| r[1] == name).unwrap_or_else(|| panic!("{name} missing: {table}")).clone();
    // Sizes follow the member's seed (1 + seed % 5, plus the widget's index).
    assert_eq!(row("blue_member1")[..6], ["default", "blue_member1", "member1", "blue", "2", "true"]);
    assert_eq!(row("red_member2")[..6], ["default", "red_member2", "member2", "red", "4", "false"]);
    assert_eq!(row("green_member2")[..6], ["shop", "green_member2", "member2", "green", "5", "true"]);
    assert_eq!(row("green_member2")[6], "2d");
    let wide = kubectl_ok(&["get", "widgets", "-n", "default", "-o", "wide", "-l", "kubefold.io/cluster=member1"]);
    let wide_rows: Vec<Vec<&str>> = wide.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(wide_rows[0], ["NAME", "CLUSTER", "COLOR", "SIZE", "READY", "OWNER", "AGE"], "{wide}");
    assert_eq!(wide_rows[1][..6], ["blue_member1", "member1", "blue", "2", "true", "team-a"]);
    assert_eq!(wide_rows.len(), 3);
    let widget = kf.get_json("/apis/example.com/v1/namespaces/default/widgets/red_member1");
    assert_eq!(widget["spec"]["color"], "red");

    // Discovery follows: api-resources, short name, aggregated and legacy documents.
    let resources = kubectl_ok(&["api-resources", "--api-group", "example.com"]);
    let line: Vec<&str> = resources.lines().find(|l| l.starts_with("widgets")).unwrap_or_else(|| panic!("{resources}")).split_whitespace().collect();
    assert_eq!(line, ["widgets", "wg", "example.com/v1", "true", "Widget"]);
    assert_eq!(kubectl_ok(&["get", "wg", "-n", "shop", "--no-headers"]).lines().count(), 2);
    let admin = kf.get_json("/admin/v1/resources");
    let item = admin["items"].as_array().unwrap().iter().find(|r| r["resource"] == "widgets").unwrap();
    assert_eq!(item["clusters"], json!({"member1": 3, "member2": 3}));
    assert_eq!(item["printerColumns"], json!(["Color", "Size", "Ready", "Owner"]));
    assert_eq!(admin["pending"], json!([]));

    // The pod watch opened before the change was not closed: a pod deleted
    // in member1 now arrives on it.
    let victim = sim_pods(&members[0].1, "member1").into_iter().find(|p| p.starts_with("shop/")).unwrap();
    let (ns, name) = victim.split_once('/').unwrap();
    let bare = name.strip_suffix("_member1").unwrap();
    let (code, _) = send(&kf, "DELETE", &format!("/clusters/member1/api/v1/namespaces/{ns}/pods/{bare}"), "{}");
    assert!(code == 200 || code == 202, "delete answered {code}");
    pods.until(Duration::from_secs(30), "the deleted pod on the old watch", |events| {
        events.iter().any(|e| event_key(e) == victim && e["type"] != "ADDED")
    });

    // Deselecting the type: its objects become DELETED events, discovery drops it.
    let widgets = Watch::open(&format!("{}/apis/example.com/v1/widgets?watch=1&resourceVersion={}", kf.url, listed_pods(&kf).0));
    let answer = select(&kf, &json!({"rules": default_rules()}));
    assert_eq!(answer["deletedObjects"], 6);
    let deleted = widgets.until(Duration::from_secs(30), "six DELETED widgets", |events| events.iter().filter(|e| e["type"] == "DELETED").count() == 6);
    assert!(deleted.iter().all(|e| e["type"] == "DELETED"), "{deleted:?}");
    assert_eq!(kf.get("/apis/example.com/v1").0, 404);
    assert!(!kubectl_ok(&["api-resources"]).contains("widgets"));
}

#[test]
fn deselected_clusters_and_namespaces_become_deleted_events_and_the_selection_persists() {
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(
        &config,
        format!(
            "clusters:\n  - name: member1\n    url: {}\n    labels: {{env: prod}}\n  - name: member2\n    url: {}\n    labels: {{env: dev}}\n",
            members[0].1.url(),
            members[1].1.url()
        ),
    )
    .unwrap();
    let serve = || Kubefold::serve(&dir, &[], &["--config", config.to_str().unwrap()]);
    let kf = serve();
    kf.wait_ready();
    let (sim1, sim2) = (&members[0].1, &members[1].1);
    let all: Vec<String> = sorted([sim_pods(sim1, "member1"), sim_pods(sim2, "member2")].concat());
    wait_for(Duration::from_secs(30), "every pod listed", || sorted(listed_pods(&kf).1) == all);
    let before = kf.get_json("/admin/v1/resources");
    assert_eq!(before["source"], "default");

    // Invalid selections: a Status, and nothing changes.
    for (body, code, reason, message) in [
        ("{\"rules\": [", 400, "BadRequest", "invalid resource selection: EOF while parsing"),
        (r#"{"rules": [{"resourceSelector": []}]}"#, 400, "BadRequest", "invalid resource selection: unknown field `resourceSelector`"),
        (
            r#"{"rules": [{"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "Not_A_Namespace"}]}]}"#,
            422,
            "Invalid",
            "resource selection is invalid: rules[0].resourceSelectors[0].namespace: Invalid value: \"Not_A_Namespace\"",
        ),
        (
            r#"{"rules": [{"targetCluster": {"labelSelector": {"matchExpressions": [{"key": "env", "operator": "In"}]}}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}]}]}"#,
            422,
            "Invalid",
            "resource selection is invalid: rules[0].targetCluster.labelSelector: Invalid value",
        ),
    ] {
        let (got, status) = send(&kf, "PUT", "/admin/v1/resources", body);
        assert_eq!((got, status["kind"].as_str(), status["reason"].as_str()), (code, Some("Status"), Some(reason)), "{body}: {status}");
        assert!(status["message"].as_str().unwrap().starts_with(message), "{body}: {status}");
    }
    assert_eq!(kf.get_json("/admin/v1/resources"), before, "refused selections change nothing");
    assert_eq!(sorted(listed_pods(&kf).1), all);

    // Pods of member1's namespace default only (by cluster name).
    let (rv, _) = listed_pods(&kf);
    let watch = Watch::open(&format!("{}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=300", kf.url));
    let by_name = json!({"rules": [
        {"targetCluster": {"clusterNames": ["member1"]}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "default"}]},
        all_but_pods(),
    ]});
    let kept: Vec<String> = all.iter().filter(|p| p.starts_with("default/") && p.ends_with("_member1")).cloned().collect();
    assert!(!kept.is_empty() && kept.len() < all.len());
    let gone: Vec<String> = all.iter().filter(|p| !kept.contains(p)).cloned().collect();
    let answer = select(&kf, &by_name);
    assert_eq!(answer["deletedObjects"].as_u64(), Some(gone.len() as u64));
    let pods_item = answer["items"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap().clone();
    assert_eq!(pods_item["watched"], json!({"member1": ["default"]}));
    let events = watch.until(Duration::from_secs(30), "DELETED events of the deselected pods", |events| {
        events.iter().filter(|e| e["type"] == "DELETED").count() >= gone.len()
    });
    let deleted: Vec<String> = sorted(events.iter().filter(|e| e["type"] == "DELETED").map(event_key).collect());
    assert_eq!(deleted, gone);
    assert_eq!(sorted(listed_pods(&kf).1), kept);
    assert_eq!(kf.get_json("/api/v1/namespaces/shop/pods")["items"], json!([]));
    let nodes_member2 = kf.get_json("/api/v1/nodes?labelSelector=kubefold.io%2Fcluster%3Dmember2")["items"].as_array().unwrap().len();
    assert_eq!(nodes_member2, 3, "other types keep every cluster");

    // Pods of namespace shop of the clusters labelled env=dev (member2).
    let by_label = json!({"rules": [
        {"targetCluster": {"labelSelector": {"matchLabels": {"env": "dev"}}}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "shop"}]},
        all_but_pods(),
    ]});
    let wanted: Vec<String> = all.iter().filter(|p| p.starts_with("shop/") && p.ends_with("_member2")).cloned().collect();
    assert!(!wanted.is_empty());
    let answer = select(&kf, &by_label);
    assert_eq!(answer["deletedObjects"].as_u64(), Some(kept.len() as u64));
    let events = watch.until(Duration::from_secs(60), "member2's shop pods ADDED and member1's DELETED", |events| {
        let added = events.iter().filter(|e| e["type"] == "ADDED" && wanted.contains(&event_key(e))).count();
        let deleted = events.iter().filter(|e| e["type"] == "DELETED" && kept.contains(&event_key(e))).count();
        added == wanted.len() && deleted == kept.len()
    });
    assert!(events.iter().all(|e| e["type"] != "ERROR"), "{events:?}");
    wait_for(Duration::from_secs(30), "only member2's shop pods listed", || sorted(listed_pods(&kf).1) == wanted);
    let selection = kf.get_json("/admin/v1/resources")["selection"].clone();
    assert_eq!(selection, by_label);

    // A restart keeps the selection (and what it selects).
    kf.stop();
    let kf = serve();
    kf.wait_ready();
    let after = kf.get_json("/admin/v1/resources");
    assert_eq!((after["source"].as_str(), &after["selection"]), (Some("api"), &by_label));
    assert_eq!(sorted(listed_pods(&kf).1), wanted, "served from the store at once");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(sorted(listed_pods(&kf).1), wanted, "and still after the watchers resumed");
    let status = kf.get_json("/admin/v1/clusters/member1")["status"]["resources"].clone();
    assert!(status.get("v1/pods").is_none(), "member1 does not watch pods: {status}");
}
