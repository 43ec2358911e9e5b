//! Protobuf bodies against the simulator, as against kube-apiserver: creates
//! and updates of built-in types with `application/vnd.kubernetes.protobuf`
//! bodies (the Kubernetes fixtures, and the real kubectl 1.33, which sends
//! them for `kubectl create configmap|deployment|namespace`), protobuf gets,
//! lists and watches for a client that prefers protobuf, and 415 for a
//! protobuf body to a custom resource.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{client, demo, start};
use futures::StreamExt;
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::{json, Value};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kubernetes-api-testdata");

/// (fixture, collection path) of the fixtures the simulator serves.
const CREATES: [(&str, &str); 10] = [
    ("apps.v1.Deployment", "/apis/apps/v1/namespaces/default/deployments"),
    ("apps.v1.ReplicaSet", "/apis/apps/v1/namespaces/default/replicasets"),
    ("apps.v1.StatefulSet", "/apis/apps/v1/namespaces/default/statefulsets"),
    ("core.v1.ConfigMap", "/api/v1/namespaces/default/configmaps"),
    ("core.v1.Event", "/api/v1/namespaces/default/events"),
    ("core.v1.Namespace", "/api/v1/namespaces"),
    ("core.v1.Node", "/api/v1/nodes"),
    ("core.v1.Pod", "/api/v1/namespaces/default/pods"),
    ("core.v1.Service", "/api/v1/namespaces/default/services"),
    ("discovery.k8s.io.v1.EndpointSlice", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"),
];

/// A fixture made creatable: a valid name, the path's namespace, no
/// resourceVersion, uid, deletion or owner fields (placeholders upstream).
fn creatable(fixture: &str, name: &str) -> Value {
    let mut object: Value = serde_json::from_slice(&std::fs::read(format!("{FIXTURES}/{fixture}.json")).unwrap()).unwrap();
    let metadata = object["metadata"].as_object_mut().unwrap();
    metadata.insert("name".into(), json!(name));
    for field in ["generateName", "resourceVersion", "uid", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields", "creationTimestamp", "generation"] {
        metadata.remove(field);
    }
    if fixture != "core.v1.Namespace" && fixture != "core.v1.Node" {
        metadata.insert("namespace".into(), json!("default"));
    } else {
        metadata.remove("namespace");
    }
    // The fixtures come from a Kubernetes newer than the 1.35 .proto files
    // the codec reads: both bodies carry the fields 1.35 knows (the codec's
    // own tests list the newer ones it leaves out).
    kubefold_proto::decode(&kubefold_proto::encode(&object).unwrap()).unwrap()
}

async fn post(sim: &SimHandle, path: &str, content_type: &str, body: Vec<u8>) -> (u16, String, Vec<u8>) {
    let response = client()
        .post(format!("{}{path}", sim.url()))
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (code, content_type, response.bytes().await.unwrap().to_vec())
}

/// An object without what the server sets on create (and the name).
fn without_server_fields(mut object: Value) -> Value {
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in ["name", "uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"] {
            metadata.remove(field);
        }
        // The namespace controller's label repeats the name.
        if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("kubernetes.io/metadata.name");
        }
    }
    object
}

#[tokio::test]
async fn a_protobuf_create_stores_what_the_json_create_stores() {
    let sim = demo();
    let mut created = 0;
    for (fixture, path) in CREATES {
        let by_json = creatable(fixture, "from-json");
        let by_protobuf = creatable(fixture, "from-protobuf");
        let body = kubefold_proto::encode(&by_protobuf).unwrap();
        let (code, _, json_answer) = post(&sim, path, "application/json", serde_json::to_vec(&by_json).unwrap()).await;
        let (pb_code, pb_type, pb_answer) = post(&sim, path, PROTOBUF, body).await;
        assert_eq!(pb_code, code, "{fixture}: {}", String::from_utf8_lossy(&pb_answer));
        assert_eq!(pb_type, "application/json", "{fixture}: the client asked for JSON");
        let json_answer: Value = serde_json::from_slice(&json_answer).unwrap();
        let pb_answer: Value = serde_json::from_slice(&pb_answer).unwrap();
        if code != 201 {
            // The simulator's validation refuses the fuzzer's placeholder
            // values for this type: the same Status for both bodies.
            assert_eq!(pb_answer["reason"], json_answer["reason"], "{fixture}");
            continue;
        }
        created += 1;
        let item = |name: &str| format!("{}{path}/{name}", sim.url());
        let stored_json: Value = client().get(item("from-json")).send().await.unwrap().json().await.unwrap();
        let stored_pb: Value = client().get(item("from-protobuf")).send().await.unwrap().json().await.unwrap();
        assert_eq!(without_server_fields(stored_pb), without_server_fields(stored_json), "{fixture}");
    }
    eprintln!("{created} of {} fixtures created with both bodies", CREATES.len());
    assert!(created >= 5, "only {created} fixtures could be created");
}

#[tokio::test]
async fn protobuf_updates_and_subresources() {
    let sim = demo();
    let url = format!("{}/apis/apps/v1/namespaces/shop/deployments/frontend", sim.url());
    let mut deployment: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
    deployment["metadata"]["labels"]["tier"] = json!("web");
    let response = client()
        .put(&url)
        .header("content-type", PROTOBUF)
        .header("accept", "application/vnd.kubernetes.protobuf, application/json")
        .body(kubefold_proto::encode(&deployment).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    let updated = kubefold_proto::decode(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(updated["metadata"]["labels"]["tier"], "web");
    assert_eq!(updated["kind"], "Deployment");
    // The scale subresource: an autoscaling/v1 Scale in protobuf.
    let scale: Value = client().get(format!("{url}/scale")).send().await.unwrap().json().await.unwrap();
    let mut scale = scale;
    scale["spec"]["replicas"] = json!(4);
    let response = client()
        .put(format!("{url}/scale"))
        .header("content-type", PROTOBUF)
        .body(kubefold_proto::encode(&scale).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{}", response.text().await.unwrap());
    let stored: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(stored["spec"]["replicas"], 4);
    // The status subresource. The simulator's deployment controller writes
    // the status after the scale as well: a PUT that meets its write gets
    // 409 Conflict and is sent again on the newer object, and the answer to
    // the PUT (not a later read, which the controller may have overtaken)
    // shows what was stored.
    let mut answer = None;
    for _ in 0..20 {
        let mut status: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
        status["status"]["observedGeneration"] = json!(99);
        let response = client()
            .put(format!("{url}/status"))
            .header("content-type", PROTOBUF)
            .body(kubefold_proto::encode(&status).unwrap())
            .send()
            .await
            .unwrap();
        if response.status().as_u16() == 409 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert_eq!(response.status().as_u16(), 200, "{}", response.text().await.unwrap());
        answer = Some(response.json::<Value>().await.unwrap());
        break;
    }
    let stored = answer.expect("the status PUT stored within 20 tries");
    assert_eq!(stored["status"]["observedGeneration"], 99);
    // Bytes that are not protobuf: 400, nothing stored.
    let response = client().post(format!("{}/api/v1/namespaces/default/configmaps", sim.url())).header("content-type", PROTOBUF).body("k8s\0\x0a\x05").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "BadRequest");
}

#[tokio::test]
async fn protobuf_body_to_a_custom_resource_is_415() {
    let sim = start(SimConfig { workload: Workload::Demo, seed: 7, crds: true, ..SimConfig::default() });
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    // A body claiming to be a built-in type does not make a widget one.
    let body = kubefold_proto::encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}})).unwrap();
    let (code, _, answer) = post(&sim, "/apis/example.com/v1/namespaces/default/widgets", PROTOBUF, body).await;
    assert_eq!(code, 415, "{}", String::from_utf8_lossy(&answer));
    let status: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status["reason"], "UnsupportedMediaType");
    assert!(!status["message"].as_str().unwrap().contains("protobuf"), "{status}");
    // Reads of custom resources stay JSON for a client that prefers protobuf.
    let (code, _, _) = post(&sim, "/apis/example.com/v1/namespaces/default/widgets", "application/json", widget.to_string().into_bytes()).await;
    assert_eq!(code, 201);
    let response = client().get(format!("{}/apis/example.com/v1/namespaces/default/widgets", sim.url())).header("accept", "application/vnd.kubernetes.protobuf, application/json").send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
}

#[tokio::test]
async fn protobuf_get_list_and_watch() {
    let sim = demo();
    let accept = "application/vnd.kubernetes.protobuf, application/json";
    let json_list: Value = client().get(format!("{}/api/v1/pods", sim.url())).send().await.unwrap().json().await.unwrap();
    let response = client().get(format!("{}/api/v1/pods?resourceVersion={}&resourceVersionMatch=Exact", sim.url(), json_list["metadata"]["resourceVersion"].as_str().unwrap())).header("accept", accept).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.starts_with(b"k8s\0"));
    let list = kubefold_proto::decode(&bytes).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["metadata"]["resourceVersion"], json_list["metadata"]["resourceVersion"]);
    let names = |l: &Value| l["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(names(&list), names(&json_list));
    assert_eq!(list["items"][0]["spec"], json_list["items"][0]["spec"]);
    // One object.
    let response = client().get(format!("{}/api/v1/namespaces/default/pods/web-0", sim.url())).header("accept", accept).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], PROTOBUF);
    let pod = kubefold_proto::decode(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(pod["metadata"]["name"], "web-0");
    // A watch: length-prefixed WatchEvent frames.
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let response = client()
        .get(format!("{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}", sim.url()))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    let mut stream = response.bytes_stream();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}, "data": {"a": "1"}});
    let (code, _, _) = post(&sim, "/api/v1/namespaces/default/configmaps", "application/json", cm.to_string().into_bytes()).await;
    assert_eq!(code, 201);
    let mut buffer = Vec::new();
    let event = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some((frame, _)) = kubefold_proto::split_frame(&buffer) {
                return kubefold_proto::decode_watch_event(frame).unwrap();
            }
            buffer.extend_from_slice(&stream.next().await.expect("stream open").unwrap());
        }
    })
    .await
    .expect("a watch event within 10 s");
    assert_eq!(event.0, "ADDED");
    assert_eq!(event.1["metadata"]["name"], "watched");
    assert_eq!(event.1["data"], json!({"a": "1"}));
}

fn kubectl_133() -> Option<&'static str> {
    let path = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
    if std::path::Path::new(path).exists() {
        Some(path)
    } else {
        eprintln!("{path} not found: skipping the kubectl protobuf creates");
        None
    }
}

#[test]
fn kubectl_133_typed_creates_send_protobuf_and_succeed() {
    let Some(kubectl) = kubectl_133() else { return };
    let sim = demo();
    let run = |args: &[&str]| {
        let output = Command::new(kubectl)
            .arg("--server")
            .arg(sim.url())
            .arg("--request-timeout=10s")
            .args(args)
            .env("KUBECONFIG", "/dev/null")
            .output()
            .expect("kubectl runs");
        (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (ok, out, err) = run(&["create", "configmap", "settings", "-n", "default", "--from-literal=color=blue"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "configmap/settings created");
    let (ok, out, err) = run(&["create", "namespace", "team-a"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "namespace/team-a created");
    let (ok, out, err) = run(&["create", "deployment", "api", "-n", "team-a", "--image=nginx:1.27", "--replicas=2"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "deployment.apps/api created");
    let (_, out, _) = run(&["get", "cm", "settings", "-o", "jsonpath={.data.color}"]);
    assert_eq!(out, "blue");
    let (_, out, _) = run(&["get", "deploy", "api", "-n", "team-a", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"]);
    assert_eq!(out, "2 nginx:1.27");
    // kubectl sent protobuf, as the request log shows.
    let log: Vec<Value> = reqwest::blocking::get(format!("{}/sim/requests", sim.url())).unwrap().json().unwrap();
    let creates = log.iter().filter(|r| r["method"] == "POST" && r["body"].as_str().unwrap_or_default().starts_with("k8s\0")).count();
    assert_eq!(creates, 3, "three protobuf creates in the request log");
}

#[tokio::test]
async fn a_protobuf_delete_options_body_is_read() {
    let sim = demo();
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "not-the-uid"}});
    let response = client()
        .delete(format!("{}/api/v1/namespaces/default/pods/web-0", sim.url()))
        .header("content-type", PROTOBUF)
        .body(kubefold_proto::encode(&options).unwrap())
        .send()
        .await
        .unwrap();
    // The precondition was read: the uid does not match.
    assert_eq!(response.status().as_u16(), 409, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn cbor_is_refused_so_clients_fall_back_to_json() {
    let sim = demo();
    // A CBOR body (the bytes of a CBOR map): 415, nothing created.
    let (code, content_type, answer) = post(&sim, "/api/v1/namespaces/default/configmaps", "application/cbor", vec![0xd9, 0xd9, 0xf7, 0xa0]).await;
    assert_eq!(code, 415);
    assert_eq!(content_type, "application/json");
    let status: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("UnsupportedMediaType")));
    // An Accept of CBOR only: 406; CBOR then JSON: JSON.
    let response = client().get(format!("{}/api/v1/namespaces/default/pods", sim.url())).header("accept", "application/cbor").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 406);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
    let response = client().get(format!("{}/api/v1/namespaces/default/pods", sim.url())).header("accept", "application/cbor, application/json").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
}
