//! Protobuf through kubefold, as kube-apiserver serves it: creates with
//! protobuf bodies store in the member what JSON bodies store (names and
//! resourceVersions translated the same way), kubectl 1.33's typed creates
//! (which send protobuf) succeed, and a client that prefers protobuf gets a
//! protobuf list and protobuf watch frames.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PREFERS_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// (fixture, kubefold collection path, member collection path, namespaced).
const CREATES: [(&str, &str, bool); 10] = [
    ("apps.v1.Deployment", "/apis/apps/v1/namespaces/default/deployments", true),
    ("apps.v1.ReplicaSet", "/apis/apps/v1/namespaces/default/replicasets", true),
    ("apps.v1.StatefulSet", "/apis/apps/v1/namespaces/default/statefulsets", true),
    ("core.v1.ConfigMap", "/api/v1/namespaces/default/configmaps", true),
    ("core.v1.Event", "/api/v1/namespaces/default/events", true),
    ("core.v1.Namespace", "/api/v1/namespaces", false),
    ("core.v1.Node", "/api/v1/nodes", false),
    ("core.v1.Pod", "/api/v1/namespaces/default/pods", true),
    ("core.v1.Service", "/api/v1/namespaces/default/services", true),
    ("discovery.k8s.io.v1.EndpointSlice", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", true),
];

fn post(url: &str, content_type: &str, body: Vec<u8>) -> (u16, String, Vec<u8>) {
    let response = reqwest::blocking::Client::new().post(url).header("content-type", content_type).header("accept", "application/json").body(body).send().unwrap();
    let code = response.status().as_u16();
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (code, content_type, response.bytes().unwrap().to_vec())
}

/// The member's object without what the member and kubefold set on create.
fn stored(sim_url: &str, path: &str) -> Value {
    let (code, body) = http_get(&format!("{sim_url}{path}"));
    assert_eq!(code, 200, "{path}: {body}");
    let mut object: Value = serde_json::from_str(&body).unwrap();
    let metadata = object["metadata"].as_object_mut().unwrap();
    for field in ["name", "uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"] {
        metadata.remove(field);
    }
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.remove("kubernetes.io/metadata.name");
    }
    // What the member's controllers do after the create (scheduling, status)
    // and the service account volume's random name.
    object.as_object_mut().unwrap().remove("status");
    fn mask(value: &mut Value) {
        match value {
            Value::String(s) if s.starts_with("kube-api-access-") => *s = "kube-api-access".into(),
            Value::Array(items) => items.iter_mut().for_each(mask),
            Value::Object(map) => map.values_mut().for_each(mask),
            _ => {}
        }
    }
    mask(&mut object);
    object
}

#[test]
fn protobuf_creates_store_what_json_creates_store() {
    let members = demo_members(2, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let member1 = members[0].1.url();
    let mut created = 0;
    for (file, path, namespaced) in CREATES {
        // The fixtures come from a Kubernetes newer than the 1.35 .proto
        // files kubefold reads: both bodies carry the fields 1.35 knows (the
        // codec's own tests list the newer ones it leaves out).
        let object = |name: &str| {
            let mut object = fixture(&format!("{file}.json"), name);
            if !namespaced {
                object["metadata"].as_object_mut().unwrap().remove("namespace");
            }
            kubefold_proto::decode(&kubefold_proto::encode(&object).unwrap()).unwrap()
        };
        // Qualified names at the aggregated path: kubefold picks member1 and
        // strips the suffix, for both bodies alike.
        let by_json = serde_json::to_vec(&object("by-json_member1")).unwrap();
        let by_protobuf = kubefold_proto::encode(&object("by-protobuf_member1")).unwrap();
        let (code, _, json_answer) = post(&format!("{}{path}", kf.url), "application/json", by_json);
        let (pb_code, _, pb_answer) = post(&format!("{}{path}", kf.url), PROTOBUF, by_protobuf);
        let json_answer: Value = serde_json::from_slice(&json_answer).unwrap();
        let pb_answer: Value = serde_json::from_slice(&pb_answer).unwrap();
        assert_eq!(pb_code, code, "{file}: {pb_answer}");
        if code != 201 {
            // The member refuses the fuzzer's placeholder values: the same for both.
            assert_eq!(pb_answer["reason"], json_answer["reason"], "{file}");
            continue;
        }
        created += 1;
        assert_eq!(pb_answer["metadata"]["name"], "by-protobuf_member1", "{file}: served with the qualified name");
        assert_eq!(pb_answer["metadata"]["annotations"]["kubefold.io/cluster"], "member1", "{file}");
        let rv: u64 = pb_answer["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(rv > json_answer["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap(), "{file}: a global resourceVersion");
        let diff = differences(&stored(&member1, &format!("{path}/by-protobuf")), &stored(&member1, &format!("{path}/by-json")));
        assert!(diff.is_empty(), "{file}: {diff:#?}");
    }
    eprintln!("{created} of {} fixtures created through kubefold with both bodies", CREATES.len());
    assert!(created >= 5, "only {created} fixtures could be created");
    // An update with a protobuf body: the served name and the global
    // resourceVersion are translated as for JSON.
    let url = format!("{}/api/v1/namespaces/default/configmaps/by-protobuf_member1", kf.url);
    let mut cm = kf.get_json("/api/v1/namespaces/default/configmaps/by-protobuf_member1");
    cm["data"] = json!({"updated": "yes"});
    let response = reqwest::blocking::Client::new().put(&url).header("content-type", PROTOBUF).header("accept", PREFERS_PROTOBUF).body(kubefold_proto::encode(&cm).unwrap()).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    let updated = kubefold_proto::decode(&response.bytes().unwrap()).unwrap();
    assert_eq!(updated["metadata"]["name"], "by-protobuf_member1");
    assert_eq!(updated["data"], json!({"updated": "yes"}));
    assert_eq!(member_data(&member1, "by-protobuf"), json!({"updated": "yes"}));
    // A patch is never protobuf: 415, naming the patch types.
    let response = reqwest::blocking::Client::new().patch(&url).header("content-type", PROTOBUF).body(kubefold_proto::encode(&cm).unwrap()).send().unwrap();
    assert_eq!(response.status().as_u16(), 415);
    assert!(response.text().unwrap().contains("application/merge-patch+json"));
    // A stale resourceVersion in a protobuf body: 409, as with JSON.
    let response = reqwest::blocking::Client::new().put(&url).header("content-type", PROTOBUF).body(kubefold_proto::encode(&cm).unwrap()).send().unwrap();
    assert_eq!(response.status().as_u16(), 409);
}

fn member_data(sim_url: &str, name: &str) -> Value {
    let (_, body) = http_get(&format!("{sim_url}/api/v1/namespaces/default/configmaps/{name}"));
    serde_json::from_str::<Value>(&body).unwrap()["data"].clone()
}

#[test]
fn a_client_that_prefers_protobuf_gets_protobuf_lists_gets_and_watch_frames() {
    let members = demo_members(2, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let json_list = kf.get_json("/api/v1/pods");
    let rv = json_list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let response = client.get(format!("{}/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact", kf.url)).header("accept", PREFERS_PROTOBUF).header("accept-encoding", "gzip").send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    let list = kubefold_proto::decode(&response.bytes().unwrap()).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(list["items"].as_array().unwrap().len(), json_list["items"].as_array().unwrap().len());
    // Protobuf has no null, and a list's items carry no kind (as from kube-apiserver).
    let mut json_items = without_nulls(&json_list["items"]);
    for item in json_items.as_array_mut().unwrap() {
        item.as_object_mut().unwrap().retain(|k, _| k != "kind" && k != "apiVersion");
    }
    let diff = differences(&list["items"], &json_items);
    assert!(diff.is_empty(), "the protobuf list decodes to the JSON list's items: {diff:#?}");
    // A get, and a custom type's fallback: JSON for a client that prefers JSON.
    let response = client.get(format!("{}/api/v1/namespaces/default/pods/web-0_member2", kf.url)).header("accept", PREFERS_PROTOBUF).send().unwrap();
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    assert_eq!(kubefold_proto::decode(&response.bytes().unwrap()).unwrap()["metadata"]["name"], "web-0_member2");
    let response = client.get(format!("{}/api/v1/namespaces/default/pods/web-0_member2", kf.url)).header("accept", "application/json, application/vnd.kubernetes.protobuf").send().unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    // A watch: length-prefixed WatchEvent frames with global RVs and qualified names.
    let mut watch = client
        .get(format!("{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true", kf.url))
        .header("accept", PREFERS_PROTOBUF)
        .send()
        .unwrap();
    assert_eq!(watch.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched", "namespace": "default"}, "data": {"a": "1"}});
    let (code, _, _) = post(&format!("{}/api/v1/namespaces/default/configmaps", members[1].1.url()), "application/json", cm.to_string().into_bytes());
    assert_eq!(code, 201);
    let mut buffer = Vec::new();
    let event = loop {
        if let Some((frame, _)) = kubefold_proto::split_frame(&buffer) {
            break kubefold_proto::decode_watch_event(frame).unwrap();
        }
        let mut chunk = [0u8; 65536];
        let n = std::io::Read::read(&mut watch, &mut chunk).unwrap();
        assert!(n > 0, "the watch ended before its first event");
        buffer.extend_from_slice(&chunk[..n]);
    };
    assert_eq!(event.0, "ADDED");
    assert_eq!(event.1["metadata"]["name"], "watched_member2");
    assert!(event.1["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() > rv.parse::<u64>().unwrap());
    assert_eq!(event.1["data"], json!({"a": "1"}));
}

#[test]
fn kubectl_133_typed_creates_through_kubefold() {
    let bin = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
    if !std::path::Path::new(bin).exists() {
        eprintln!("{bin} not found: skipping the kubectl 1.33 protobuf creates");
        return;
    }
    let members = demo_members(2, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let server = format!("{}/clusters/member2", kf.url);
    let run = |args: &[&str]| {
        let mut all = vec!["--server", server.as_str(), "--request-timeout=20s"];
        all.extend_from_slice(args);
        kubectl_bin(bin, &all, None)
    };
    let (ok, out, err) = run(&["create", "configmap", "settings", "-n", "default", "--from-literal=color=blue"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "configmap/settings created");
    let (ok, out, err) = run(&["create", "namespace", "team-a"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "namespace/team-a created");
    let (ok, out, err) = run(&["create", "deployment", "api", "-n", "default", "--image=nginx:1.27", "--replicas=2"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "deployment.apps/api created");
    // They are in member2, and kubefold serves them with qualified names.
    let sim = members[1].1.url();
    assert_eq!(member_data(&sim, "settings"), json!({"color": "blue"}));
    let (code, _) = http_get(&format!("{sim}/api/v1/namespaces/team-a"));
    assert_eq!(code, 200);
    let (code, body) = http_get(&format!("{sim}/apis/apps/v1/namespaces/default/deployments/api"));
    assert_eq!(code, 200);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["spec"]["replicas"], 2);
    assert_eq!(kf.get_json("/api/v1/namespaces/default/configmaps/settings_member2")["data"]["color"], "blue");
    // kubefold forwards JSON to the member, whatever the client sent.
    assert!(members[1].1.requests().iter().all(|r| !r.body.starts_with("k8s\0")));
}

/// A value without its null fields (which protobuf cannot hold; null and
/// absent mean the same in Kubernetes JSON).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The paths where two values differ (for readable failures).
fn differences(a: &Value, b: &Value) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for (k, v) in x {
                    match y.get(k) {
                        Some(w) => walk(&format!("{path}.{k}"), v, w, out),
                        None => out.push(format!("{path}.{k}: only in the first: {v}")),
                    }
                }
                for (k, w) in y {
                    if !x.contains_key(k) {
                        out.push(format!("{path}.{k}: only in the second: {w}"));
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (v, w)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), v, w, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {} != {}", a.to_string().chars().take(200).collect::<String>(), b.to_string().chars().take(200).collect::<String>())),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}

#[test]
fn cbor_is_refused_so_clients_fall_back_to_json() {
    let members = demo_members(1, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let (code, content_type, body) = post(&format!("{}/clusters/member1/api/v1/namespaces/default/configmaps", kf.url), "application/cbor", vec![0xd9, 0xd9, 0xf7, 0xa0]);
    assert_eq!(code, 415);
    assert_eq!(content_type, "application/json");
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["reason"], "UnsupportedMediaType");
    let client = reqwest::blocking::Client::new();
    let response = client.get(format!("{}/api/v1/pods", kf.url)).header("accept", "application/cbor").send().unwrap();
    assert_eq!(response.status().as_u16(), 406);
    assert_eq!(response.json::<Value>().unwrap()["reason"], "NotAcceptable");
    let response = client.get(format!("{}/api/v1/pods", kf.url)).header("accept", "application/cbor, application/json").send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    // Nothing reached the member.
    assert!(members[0].1.requests().iter().all(|r| r.method != "POST"));
}
