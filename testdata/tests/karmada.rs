//! `kubefold sim --karmada`: a Karmada control plane with the `Cluster` and
//! `ResourceRegistry` CustomResourceDefinitions, their schemas and objects.

mod common;

use common::{get, send, start};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::json;

fn karmada() -> kubefold_testdata::SimHandle {
    start(SimConfig { name: "karmada".into(), workload: Workload::Empty, karmada: true, ..SimConfig::default() })
}

#[tokio::test]
async fn serves_karmadas_crds_with_their_schemas() {
    let sim = karmada();
    let crd = get(&sim, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusters.cluster.karmada.io").await;
    assert_eq!(crd.code, 200, "{}", crd.body);
    let schema = &crd.body["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(crd.body["spec"]["scope"], "Cluster");
    assert_eq!(schema["properties"]["spec"]["required"], json!(["syncMode"]));
    assert_eq!(schema["properties"]["spec"]["properties"]["syncMode"]["enum"], json!(["Push", "Pull"]));
    assert!(schema["properties"]["spec"]["properties"]["secretRef"]["properties"]["namespace"].is_object());
    let rr = get(&sim, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/resourceregistries.search.karmada.io").await;
    assert_eq!(rr.code, 200, "{}", rr.body);
    let selectors = &rr.body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["resourceSelectors"];
    assert_eq!(selectors["items"]["required"], json!(["apiVersion", "kind"]));
    // Discovery lists both types, cluster-scoped.
    let discovery = get(&sim, "/apis/cluster.karmada.io/v1alpha1").await;
    assert_eq!(discovery.code, 200, "{}", discovery.body);
    let clusters = discovery.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "clusters").cloned().unwrap();
    assert_eq!(clusters["kind"], "Cluster");
    assert_eq!(clusters["namespaced"], false);
    let discovery = get(&sim, "/apis/search.karmada.io/v1alpha1").await;
    assert!(discovery.body["resources"].as_array().unwrap().iter().any(|r| r["name"] == "resourceregistries" && r["shortNames"] == json!(["rr"])), "{}", discovery.body);
}

#[tokio::test]
async fn clusters_secrets_and_resource_registries_are_created_and_edited() {
    let sim = karmada();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member1", "namespace": "karmada-cluster"}, "data": {"token": "dG9rZW4="}});
    let created = send(&sim, "POST", "/api/v1/namespaces/karmada-cluster/secrets", "application/json", &secret.to_string()).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let cluster = json!({
        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "member1"},
        "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:6443", "secretRef": {"namespace": "karmada-cluster", "name": "member1"}},
    });
    let created = send(&sim, "POST", "/apis/cluster.karmada.io/v1alpha1/clusters", "application/json", &cluster.to_string()).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let listed = get(&sim, "/apis/cluster.karmada.io/v1alpha1/clusters").await;
    assert_eq!(listed.body["kind"], "ClusterList");
    assert_eq!(listed.body["items"][0]["spec"]["apiEndpoint"], "https://127.0.0.1:6443");
    let patched = send(&sim, "PATCH", "/apis/cluster.karmada.io/v1alpha1/clusters/member1", "application/merge-patch+json", r#"{"spec":{"insecureSkipTLSVerification":true}}"#).await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["spec"]["insecureSkipTLSVerification"], true);
    let registry = json!({
        "apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": {"name": "pods"},
        "spec": {"targetCluster": {"clusterNames": ["member1"]}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}]},
    });
    let created = send(&sim, "POST", "/apis/search.karmada.io/v1alpha1/resourceregistries", "application/json", &registry.to_string()).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let got = get(&sim, "/apis/search.karmada.io/v1alpha1/resourceregistries/pods").await;
    assert_eq!(got.body["spec"]["resourceSelectors"][0]["kind"], "Pod");
}
