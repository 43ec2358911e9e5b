//! OpenAPI documents as kubectl reads them: `kubectl explain` prints the
//! upstream descriptions of built-in types and a CRD's schema, against the
//! simulator and through kubefold; strict field validation refuses unknown
//! fields; `kubectl edit` validates on the server and succeeds; kubefold's
//! additions are described; a member's schema change shows through kubefold.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{kubectl, wait_for};
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::{json, Value};

/// A demo-workload simulator that also serves widgets.example.com.
fn crd_member(name: &str, seed: u64) -> SimHandle {
    kubefold_testdata::start(SimConfig { name: name.into(), workload: Workload::Demo, seed, crds: true, ..SimConfig::default() })
        .expect("simulator starts")
}

fn get_json(url: &str) -> Value {
    let (code, body) = common::http_get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn kubectl_ok(server: &str, args: &[&str]) -> String {
    let mut all = vec!["--server", server];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = kubectl(&all, None);
    assert!(ok, "kubectl {args:?} failed: {stderr}");
    stdout
}

/// A manifest of a Deployment whose container names a field no schema has.
const UNKNOWN_FIELD_DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: strict
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: strict}
  template:
    metadata:
      labels: {app: strict}
    spec:
      containers:
      - name: web
        image: nginx
        imagePort: 80
";

#[test]
fn the_simulator_serves_the_kubernetes_schemas_of_its_types_and_its_crds() {
    let sim = crd_member("member1", 1);
    let url = sim.url();

    // The index: one document per group-version, addressed with its hash.
    let index = get_json(&format!("{url}/openapi/v3"));
    let core = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap();
    assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{index}");
    assert!(index["paths"]["apis/example.com/v1"]["serverRelativeURL"].is_string(), "{index}");

    // api/v1: the Pod schema with its kind and references to its parts.
    let doc = get_json(&format!("{url}{core}"));
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "kind": "Pod", "version": "v1"}]));
    assert_eq!(pod["properties"]["spec"]["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1.PodSpec");
    for referenced in ["io.k8s.api.core.v1.PodSpec", "io.k8s.api.core.v1.Container", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"] {
        assert!(schemas.contains_key(referenced), "{referenced} missing");
    }
    assert!(!schemas.contains_key("io.k8s.api.apps.v1.Deployment"), "api/v1 holds only what it needs");
    let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));

    // The CRD's schema, its metadata an ObjectMeta.
    let widgets = get_json(&format!("{url}/openapi/v3/apis/example.com/v1"));
    let widget = &widgets["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(widget["properties"]["spec"]["properties"]["color"]["description"], "The widget's color.");
    assert_eq!(widget["x-kubernetes-group-version-kind"][0]["kind"], "Widget");

    // Swagger 2.0 with definitions.
    let v2 = get_json(&format!("{url}/openapi/v2"));
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(v2["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");

    require_kubectl!();
    let containers = kubectl_ok(&url, &["explain", "pod.spec.containers"]);
    assert!(containers.contains("List of containers belonging to the pod."), "{containers}");
    assert!(containers.contains("imagePullPolicy"), "{containers}");
    let replicas = kubectl_ok(&url, &["explain", "deployment.spec.replicas"]);
    assert!(replicas.contains("Number of desired pods."), "{replicas}");
    let spec = kubectl_ok(&url, &["explain", "widgets.spec"]);
    assert!(spec.contains("WidgetSpec is the desired state of a widget.") && spec.contains("The widget's color."), "{spec}");

    // Strict field validation: kubectl validates on the server, which
    // refuses the unknown field.
    let (ok, _, stderr) = kubectl(&["--server", &url, "create", "-f", "-"], Some(UNKNOWN_FIELD_DEPLOYMENT));
    assert!(!ok, "a Deployment with an unknown field was created");
    assert!(stderr.contains(r#"strict decoding error: unknown field "spec.template.spec.containers[0].imagePort""#), "{stderr}");
    let (ok, _, stderr) = kubectl(&["--server", &url, "create", "-f", "-"], Some(&UNKNOWN_FIELD_DEPLOYMENT.replace("        imagePort: 80\n", "")));
    assert!(ok, "{stderr}");
    sim.stop();
}

/// Runs `kubectl edit` with a scripted editor (under a timeout: an edit
/// that fails validation reopens the editor forever).
fn scripted_edit(server: &str, args: &[&str], sed: &str) -> (bool, String) {
    let home = tempfile::tempdir().unwrap();
    let editor = home.path().join("editor.sh");
    std::fs::write(&editor, format!("#!/bin/sh\nsed -i '{sed}' \"$1\"\n")).unwrap();
    Command::new("chmod").arg("+x").arg(&editor).status().unwrap();
    let out = Command::new("timeout")
        .args(["60", "kubectl", "--server", server, "edit"])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .env("EDITOR", &editor)
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn edit_validates_on_the_simulator() {
    require_kubectl!();
    let sim = crd_member("member1", 1);
    let (ok, out) = scripted_edit(&sim.url(), &["-n", "default", "configmap", "kube-root-ca.crt"], "s/^data:$/data:\\n  edited: \"yes\"/");
    assert!(ok, "{out}");
    let cm = get_json(&format!("{}/api/v1/namespaces/default/configmaps/kube-root-ca.crt", sim.url()));
    assert_eq!(cm["data"]["edited"], "yes", "{cm}");
    sim.stop();
}
