//! Writes over real HTTP: create, update, patches, delete, their errors
//! (Kubernetes `Status` objects with kube-apiserver's codes and messages),
//! subresources, logs, and the request log.

mod common;

use std::time::Duration;

use common::{demo, get, rv, send};
use serde_json::json;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"job-1","labels":{"app":"job"}},
  "spec":{"containers":[{"name":"main","image":"busybox:1.36","ports":[{"containerPort":8080}]}]}}"#;

#[tokio::test]
async fn create_sets_system_fields_and_rejects_duplicates() {
    let sim = demo();
    let head = rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body);
    let created = send(&sim, "POST", "/api/v1/namespaces/default/pods", "application/json", POD).await;
    assert_eq!(created.code, 201);
    let pod = &created.body;
    assert_eq!(rv(pod), head + 1);
    assert_eq!(pod["metadata"]["generation"], 1);
    assert_eq!(pod["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(pod["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["metadata"]["managedFields"][0]["manager"], "unknown", "no User-Agent, no fieldManager");
    let again = send(&sim, "POST", "/api/v1/namespaces/default/pods", "application/json", POD).await;
    assert_eq!(again.code, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");
    assert_eq!(again.body["message"], "pods \"job-1\" already exists");
    assert_eq!(again.body["details"], json!({"name": "job-1", "kind": "pods"}));
    // The simulated scheduler and kubelet start it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let running = get(&sim, "/api/v1/namespaces/default/pods/job-1").await;
    assert_eq!(running.body["status"]["phase"], "Running");
    assert!(running.body["spec"]["nodeName"].as_str().unwrap().starts_with("member1-node-"));
}

#[tokio::test]
async fn generate_name_and_validation() {
    let sim = demo();
    let generated = send(&sim, "POST", "/api/v1/namespaces/shop/configmaps?fieldManager=tests", "application/json",
        r#"{"metadata":{"generateName":"settings-"},"data":{"k":"v"}}"#).await;
    assert_eq!(generated.code, 201);
    let name = generated.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("settings-") && name.len() == "settings-".len() + 5, "{name}");
    assert_eq!(generated.body["metadata"]["managedFields"][0]["manager"], "tests");
    let invalid = send(&sim, "POST", "/api/v1/namespaces/shop/configmaps", "application/json",
        r#"{"metadata":{"name":"Bad_Name"}}"#).await;
    assert_eq!(invalid.code, 422);
    assert_eq!(invalid.body["reason"], "Invalid");
    assert_eq!(
        invalid.body["message"],
        "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    assert_eq!(invalid.body["details"]["causes"][0]["field"], "metadata.name");
    let no_namespace = send(&sim, "POST", "/api/v1/namespaces/nowhere/configmaps", "application/json",
        r#"{"metadata":{"name":"x"}}"#).await;
    assert_eq!(no_namespace.code, 404);
    assert_eq!(no_namespace.body["message"], "namespaces \"nowhere\" not found");
    let all_namespaces = send(&sim, "POST", "/api/v1/pods", "application/json", POD).await;
    assert_eq!(all_namespaces.code, 405);
    let not_json = send(&sim, "POST", "/api/v1/namespaces/shop/configmaps", "application/json", "{").await;
    assert_eq!(not_json.code, 400);
}

#[tokio::test]
async fn update_with_a_stale_resource_version_conflicts() {
    let sim = demo();
    let current = get(&sim, "/api/v1/namespaces/shop/configmaps/checkout-settings").await.body;
    let mut first = current.clone();
    first["data"]["currency"] = json!("USD");
    let updated = send(&sim, "PUT", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json", &first.to_string()).await;
    assert_eq!(updated.code, 200);
    assert!(rv(&updated.body) > rv(&current));
    let mut stale = current.clone();
    stale["data"]["currency"] = json!("GBP");
    let conflict = send(&sim, "PUT", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json", &stale.to_string()).await;
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.body["reason"], "Conflict");
    assert_eq!(
        conflict.body["message"],
        "Operation cannot be fulfilled on configmaps \"checkout-settings\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // An update that changes nothing keeps the resource version.
    let same = send(&sim, "PUT", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json", &updated.body.to_string()).await;
    assert_eq!(rv(&same.body), rv(&updated.body));
    let renamed = send(&sim, "PUT", "/api/v1/namespaces/shop/configmaps/other", "application/json", &updated.body.to_string()).await;
    assert_eq!(renamed.code, 400);
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let sim = demo();
    let path = "/api/v1/namespaces/default/pods/web-0";
    let merge = send(&sim, "PATCH", path, "application/merge-patch+json",
        r#"{"metadata":{"labels":{"app":null,"tier":"web"}}}"#).await;
    assert_eq!(merge.code, 200);
    assert!(merge.body["metadata"]["labels"].get("app").is_none());
    assert_eq!(merge.body["metadata"]["labels"]["tier"], "web");
    let json_patch = send(&sim, "PATCH", path, "application/json-patch+json",
        r#"[{"op":"add","path":"/metadata/annotations","value":{"note":"x"}},{"op":"replace","path":"/metadata/labels/tier","value":"db"}]"#).await;
    assert_eq!(json_patch.code, 200);
    assert_eq!(json_patch.body["metadata"]["annotations"], json!({"note": "x"}));
    assert_eq!(json_patch.body["metadata"]["labels"]["tier"], "db");
    let failing = send(&sim, "PATCH", path, "application/json-patch+json",
        r#"[{"op":"remove","path":"/metadata/labels/missing"}]"#).await;
    assert_eq!(failing.code, 422);
    // Strategic merge patch: the container is merged by name, only its image changes.
    let strategic = send(&sim, "PATCH", path, "application/strategic-merge-patch+json",
        r#"{"spec":{"containers":[{"name":"web","image":"docker.io/library/nginx:1.28.0"}]}}"#).await;
    assert_eq!(strategic.code, 200, "{}", strategic.body);
    let containers = strategic.body["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["image"], "docker.io/library/nginx:1.28.0");
    assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
    assert_eq!(strategic.body["metadata"]["generation"], 2);
    let forbidden = send(&sim, "PATCH", path, "application/merge-patch+json", r#"{"spec":{"restartPolicy":"Never"}}"#).await;
    assert_eq!(forbidden.code, 422);
    let unknown = send(&sim, "PATCH", path, "application/json", "{}").await;
    assert_eq!(unknown.code, 415);
    assert_eq!(unknown.body["reason"], "UnsupportedMediaType");
    let stale = send(&sim, "PATCH", path, "application/merge-patch+json", r#"{"metadata":{"resourceVersion":"1"}}"#).await;
    assert_eq!(stale.code, 409);
    let missing = send(&sim, "PATCH", "/api/v1/namespaces/default/pods/nope", "application/merge-patch+json", "{}").await;
    assert_eq!(missing.code, 404);
    assert_eq!(missing.body["message"], "pods \"nope\" not found");
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_conflicts() {
    let sim = demo();
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n";
    let path = "/api/v1/namespaces/default/configmaps/applied";
    let created = send(&sim, "PATCH", &format!("{path}?fieldManager=alice"), "application/apply-patch+yaml", config).await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["data"], json!({"a": "1"}));
    let other = config.replace("a: \"1\"", "a: \"2\"");
    let conflict = send(&sim, "PATCH", &format!("{path}?fieldManager=bob"), "application/apply-patch+yaml", &other).await;
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.body["message"], "Apply failed with 1 conflict: conflict with \"alice\": .data.a");
    assert_eq!(conflict.body["details"]["causes"][0]["reason"], "FieldManagerConflict");
    let forced = send(&sim, "PATCH", &format!("{path}?fieldManager=bob&force=true"), "application/apply-patch+yaml", &other).await;
    assert_eq!(forced.code, 200);
    assert_eq!(forced.body["data"]["a"], "2");
    let no_manager = send(&sim, "PATCH", path, "application/apply-patch+yaml", config).await;
    assert_eq!(no_manager.code, 422);
}

#[tokio::test]
async fn status_and_scale_subresources() {
    let sim = demo();
    let scale = get(&sim, "/apis/apps/v1/namespaces/shop/deployments/frontend/scale").await;
    assert_eq!(scale.body["kind"], "Scale");
    assert_eq!(scale.body["apiVersion"], "autoscaling/v1");
    assert_eq!(scale.body["spec"]["replicas"], 3);
    assert_eq!(scale.body["status"]["selector"], "app=frontend");
    let mut new_scale = scale.body.clone();
    new_scale["spec"]["replicas"] = json!(5);
    let scaled = send(&sim, "PUT", "/apis/apps/v1/namespaces/shop/deployments/frontend/scale", "application/json", &new_scale.to_string()).await;
    assert_eq!(scaled.code, 200);
    assert_eq!(scaled.body["spec"]["replicas"], 5);
    let stale = send(&sim, "PUT", "/apis/apps/v1/namespaces/shop/deployments/frontend/scale", "application/json", &new_scale.to_string()).await;
    assert_eq!(stale.code, 409);
    let deployment = get(&sim, "/apis/apps/v1/namespaces/shop/deployments/frontend").await;
    assert_eq!(deployment.body["spec"]["replicas"], 5);
    assert_eq!(deployment.body["metadata"]["generation"], 2);
    let patched = send(&sim, "PATCH", "/apis/apps/v1/namespaces/default/statefulsets/web/scale", "application/merge-patch+json",
        r#"{"spec":{"replicas":1}}"#).await;
    assert_eq!(patched.body["spec"]["replicas"], 1);
    // Status: only status changes through /status, never through the object.
    let status = send(&sim, "PATCH", "/apis/apps/v1/namespaces/shop/deployments/frontend/status", "application/merge-patch+json",
        r#"{"status":{"observedGeneration":2},"metadata":{"labels":{"ignored":"yes"}}}"#).await;
    assert_eq!(status.code, 200);
    assert_eq!(status.body["status"]["observedGeneration"], 2);
    assert!(status.body["metadata"]["labels"].get("ignored").is_none());
    let main = send(&sim, "PATCH", "/apis/apps/v1/namespaces/shop/deployments/frontend", "application/merge-patch+json",
        r#"{"status":{"observedGeneration":9}}"#).await;
    assert_eq!(main.body["status"]["observedGeneration"], 2);
    assert_eq!(get(&sim, "/api/v1/namespaces/shop/configmaps/frontend-config/scale").await.code, 404);
}

#[tokio::test]
async fn delete_with_preconditions_returns_object_or_status() {
    let sim = demo();
    let cm = get(&sim, "/api/v1/namespaces/shop/configmaps/checkout-settings").await.body;
    let uid = cm["metadata"]["uid"].as_str().unwrap();
    let wrong_uid = send(&sim, "DELETE", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json",
        r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}"#).await;
    assert_eq!(wrong_uid.code, 409);
    assert_eq!(
        wrong_uid.body["message"],
        format!("Operation cannot be fulfilled on configmaps \"checkout-settings\": Precondition failed: UID in precondition: 00000000-0000-0000-0000-000000000000, UID in object meta: {uid}")
    );
    let wrong_rv = send(&sim, "DELETE", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json",
        r#"{"preconditions":{"resourceVersion":"1"}}"#).await;
    assert_eq!(wrong_rv.code, 409);
    let ok = send(&sim, "DELETE", "/api/v1/namespaces/shop/configmaps/checkout-settings", "application/json",
        &json!({"preconditions": {"uid": uid, "resourceVersion": cm["metadata"]["resourceVersion"]}}).to_string()).await;
    assert_eq!(ok.code, 200);
    assert_eq!(ok.body["kind"], "Status");
    assert_eq!(ok.body["status"], "Success");
    assert_eq!(ok.body["details"], json!({"name": "checkout-settings", "kind": "configmaps", "uid": uid}));
    assert_eq!(get(&sim, "/api/v1/namespaces/shop/configmaps/checkout-settings").await.code, 404);
    // A scheduled pod is deleted gracefully: the pod comes back with deletionTimestamp, then goes.
    let graceful = send(&sim, "DELETE", "/api/v1/namespaces/default/pods/web-2", "application/json", r#"{"propagationPolicy":"Background"}"#).await;
    assert_eq!(graceful.code, 200);
    assert_eq!(graceful.body["kind"], "Pod");
    assert!(graceful.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(graceful.body["metadata"]["deletionGracePeriodSeconds"], 30);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&sim, "/api/v1/namespaces/default/pods/web-2").await.code, 404);
}

#[tokio::test]
async fn pod_logs() {
    let sim = demo();
    let client = common::client();
    let url = format!("{}/api/v1/namespaces/default/pods/web-0/log?tailLines=3&timestamps=true", sim.url());
    let text = client.get(&url).send().await.unwrap().text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.contains(" \"GET ") && l.starts_with("20")), "{text}");
    let two = get(&sim, "/api/v1/namespaces/kube-system/pods/etcd-member1-node-1/log?container=nope").await;
    assert_eq!(two.code, 400);
    assert_eq!(two.body["message"], "container nope is not valid for pod etcd-member1-node-1");
    // follow: a new line about every second.
    let mut response = client
        .get(format!("{}/api/v1/namespaces/default/pods/web-1/log?follow=true&tailLines=0", sim.url()))
        .send()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut received = String::new();
    while received.lines().count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(3), response.chunk()).await.unwrap().unwrap().unwrap();
        received.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(started.elapsed() >= Duration::from_millis(900), "{received}");
}

#[tokio::test]
async fn the_request_log_records_every_request() {
    let sim = demo();
    sim.clear_requests();
    get(&sim, "/api/v1/pods?limit=10").await;
    let mut watch = common::Watch::open(&sim, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0").await;
    watch.take(3, Duration::from_secs(5)).await;
    send(&sim, "PATCH", "/api/v1/namespaces/default/pods/web-0", "application/merge-patch+json", "{}").await;
    let records = sim.requests();
    let summary: Vec<(String, String, bool)> = records.iter().map(|r| (r.method.clone(), r.path.clone(), r.watch)).collect();
    assert_eq!(
        summary,
        [
            ("GET".to_string(), "/api/v1/pods".to_string(), false),
            ("GET".to_string(), "/api/v1/namespaces/default/pods".to_string(), true),
            ("PATCH".to_string(), "/api/v1/namespaces/default/pods/web-0".to_string(), false),
        ]
    );
    assert_eq!(records[0].query, "limit=10");
    let over_http = get(&sim, "/sim/requests").await;
    let over_http: Vec<kubefold_testdata::RequestRecord> = serde_json::from_value(over_http.body).unwrap();
    assert_eq!(over_http, records, "GET /sim/requests is not itself recorded");
    assert_eq!(send(&sim, "DELETE", "/sim/requests", "application/json", "").await.code, 200);
    assert!(sim.requests().is_empty());
}

#[tokio::test]
async fn dry_run_validates_without_storing() {
    let sim = demo();
    let head = rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body);
    let created = send(&sim, "POST", "/api/v1/namespaces/default/pods?dryRun=All", "application/json", POD).await;
    assert_eq!(created.code, 201);
    assert_eq!(created.body["metadata"]["name"], "job-1");
    assert_eq!(get(&sim, "/api/v1/namespaces/default/pods/job-1").await.code, 404);
    let deleted = send(&sim, "DELETE", "/api/v1/namespaces/default/pods/web-0?dryRun=All", "application/json", "").await;
    assert_eq!(deleted.code, 200);
    assert_eq!(get(&sim, "/api/v1/namespaces/default/pods/web-0").await.code, 200);
    let invalid = send(&sim, "POST", "/api/v1/namespaces/default/pods?dryRun=All", "application/json", r#"{"metadata":{"name":"x"},"spec":{}}"#).await;
    assert_eq!(invalid.code, 422);
    assert_eq!(invalid.body["details"]["causes"][0]["field"], "spec.containers");
    assert_eq!(rv(&get(&sim, "/api/v1/namespaces/default/pods").await.body), head);
}

#[tokio::test]
async fn delete_collection_deletes_what_the_selector_selects() {
    let sim = demo();
    let deleted = send(&sim, "DELETE", "/api/v1/namespaces/shop/configmaps?labelSelector=app.kubernetes.io%2Fpart-of%3Ddemo", "application/json", "").await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "ConfigMapList");
    assert_eq!(common::names(&deleted.body), ["checkout-settings", "frontend-config"]);
    let left = get(&sim, "/api/v1/namespaces/shop/configmaps").await;
    assert_eq!(common::names(&left.body), ["kube-root-ca.crt"]);
    assert_eq!(send(&sim, "DELETE", "/api/v1/namespaces", "application/json", "").await.code, 405);
}

#[tokio::test]
async fn deleting_a_namespace_terminates_it_then_removes_its_contents() {
    let sim = demo();
    let deleted = send(&sim, "DELETE", "/api/v1/namespaces/monitoring", "application/json", "").await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "Namespace");
    assert_eq!(deleted.body["status"]["phase"], "Terminating");
    let refused = send(&sim, "POST", "/api/v1/namespaces/monitoring/configmaps", "application/json", r#"{"metadata":{"name":"late"}}"#).await;
    assert_eq!(refused.code, 403);
    assert_eq!(refused.body["reason"], "Forbidden");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(get(&sim, "/api/v1/namespaces/monitoring").await.code, 404);
    assert!(common::names(&get(&sim, "/api/v1/namespaces/monitoring/pods").await.body).is_empty());
}

#[tokio::test]
async fn deleting_a_deployment_cascades_in_the_background() {
    let sim = demo();
    let status = send(&sim, "DELETE", "/apis/apps/v1/namespaces/shop/deployments/checkout", "application/json",
        r#"{"propagationPolicy":"Background"}"#).await;
    assert_eq!(status.code, 200);
    assert_eq!(status.body["kind"], "Status");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let replicasets = common::names(&get(&sim, "/apis/apps/v1/namespaces/shop/replicasets").await.body);
    assert!(replicasets.iter().all(|n| !n.starts_with("checkout-")), "{replicasets:?}");
    let pods = common::names(&get(&sim, "/api/v1/namespaces/shop/pods").await.body);
    assert!(pods.iter().all(|n| !n.starts_with("checkout-")), "{pods:?}");
}
