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

/// PUT of a JSON body; (code, answer).
fn put(url: &str, body: &Value) -> (u16, String) {
    let response = reqwest::blocking::Client::new()
        .put(url)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(60))
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

#[test]
fn kubefold_serves_its_members_schemas_with_its_additions_and_follows_their_changes() {
    let members = vec![("member1".to_string(), crd_member("member1", 1)), ("member2".to_string(), crd_member("member2", 2))];
    let (_tmp, dir) = common::data_dir();
    let kf = common::Kubefold::serve(&dir, &common::cluster_flags(&members), &["--openapi-refresh-seconds", "2"]);
    kf.wait_ready();
    let server = kf.url.clone();

    // widgets.example.com selected beside the built-in types.
    let mut rules = serde_json::to_value(kubefold_engine::selection::ResourceSelection::default()).unwrap()["rules"].as_array().unwrap().clone();
    rules.push(json!({"resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Widget"}]}));
    let (code, answer) = put(&format!("{server}/admin/v1/resources"), &json!({"rules": rules}));
    assert_eq!(code, 200, "{answer}");

    // The members' documents, merged: each served group-version once in the
    // index, the widget's schema from its CRD.
    let widget_doc = || -> Option<Value> {
        let index = kf.get_json("/openapi/v3");
        let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str()?.to_string();
        let doc = kf.get_json(&url);
        doc["components"]["schemas"].get("com.example.v1.Widget").is_some().then_some(doc)
    };
    wait_for(Duration::from_secs(60), "the widget schema served by kubefold", || widget_doc().is_some());
    let index = kf.get_json("/openapi/v3");
    let core = kf.get_json(index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap());
    let schemas = core["components"]["schemas"].as_object().unwrap();
    assert_eq!(schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    let meta = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
    let name = meta["name"]["description"].as_str().unwrap();
    assert!(name.starts_with("Name must be unique within a namespace.") && name.contains("qualified name `<name>_<cluster>`"), "{name}");
    let annotations = meta["annotations"]["description"].as_str().unwrap();
    assert!(annotations.contains("kubefold.io/cluster") && annotations.contains("kubefold.io/member-resource-version"), "{annotations}");
    assert!(core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    let v2 = kf.get_json("/openapi/v2");
    assert_eq!(v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["items"]["$ref"], "#/definitions/io.k8s.api.core.v1.Container");

    // A member that is down blocks nothing: the cached merge is served.
    let mut members = members;
    let (_, member2) = members.pop().unwrap();
    let (_, member1) = members.pop().unwrap();
    member2.stop();
    let started = std::time::Instant::now();
    assert_eq!(kf.get_json("/openapi/v3")["paths"]["api/v1"], index["paths"]["api/v1"]);
    assert!(started.elapsed() < Duration::from_secs(5));

    require_kubectl!();
    let spec = kubectl_ok(&server, &["explain", "pod.spec"]);
    assert!(spec.contains("PodSpec is a description of a pod."), "{spec}");
    let widgets = kubectl_ok(&server, &["explain", "widgets"]);
    assert!(widgets.contains("Widget is an example custom resource."), "{widgets}");
    let qualified = kubectl_ok(&server, &["explain", "pod.metadata.name"]);
    assert!(qualified.contains("<name>_<cluster>"), "{qualified}");

    // Strict field validation through kubefold, by the member.
    let manifest = UNKNOWN_FIELD_DEPLOYMENT.replace("name: strict\n", "name: strict_member1\n");
    let (ok, _, stderr) = kubectl(&["--server", &server, "create", "-f", "-"], Some(&manifest));
    assert!(!ok, "a Deployment with an unknown field was created");
    assert!(stderr.contains(r#"strict decoding error: unknown field "spec.template.spec.containers[0].imagePort""#), "{stderr}");

    // kubectl edit validates on the server and succeeds.
    let (ok, out) = scripted_edit(&server, &["-n", "default", "configmap", "kube-root-ca.crt_member1"], "s/^data:$/data:\\n  edited: \"yes\"/");
    assert!(ok, "{out}");
    let cm = get_json(&format!("{}/api/v1/namespaces/default/configmaps/kube-root-ca.crt", member1.url()));
    assert_eq!(cm["data"]["edited"], "yes", "{cm}");

    // The member's CRD gains a field: kubefold's document follows.
    let crd_url = format!("{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", member1.url());
    let mut crd = get_json(&crd_url);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["shape"] =
        json!({"description": "The widget's shape.", "type": "string"});
    let (code, answer) = put(&crd_url, &crd);
    assert_eq!(code, 200, "{answer}");
    wait_for(Duration::from_secs(30), "the new widget field through kubefold", || {
        let (ok, stdout, _) = kubectl(&["--server", &server, "explain", "widgets.spec.shape"], None);
        ok && stdout.contains("The widget's shape.")
    });
    kf.stop();
    member1.stop();
}
