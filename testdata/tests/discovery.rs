//! Discovery documents served by the simulator, checked against what
//! kube-apiserver serves (Kubernetes docs "Discovery API").

mod common;

use common::{demo, get, send};
use serde_json::json;

#[tokio::test]
async fn version_reports_the_configured_git_version() {
    let sim = common::start(kubefold_testdata::SimConfig { git_version: "v1.32.4".into(), ..Default::default() });
    let version = get(&sim, "/version").await;
    assert_eq!(version.code, 200);
    assert_eq!(version.body["gitVersion"], "v1.32.4");
    assert_eq!(version.body["major"], "1");
    assert_eq!(version.body["minor"], "32");
    assert_eq!(version.body["platform"], "linux/amd64");
}

#[tokio::test]
async fn core_and_group_discovery() {
    let sim = demo();
    let api = get(&sim, "/api").await;
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], json!(["v1"]));
    assert_eq!(api.body["serverAddressByClientCIDRs"][0]["serverAddress"], sim.addr().to_string());

    let core = get(&sim, "/api/v1").await;
    assert_eq!(core.body["kind"], "APIResourceList");
    assert_eq!(core.body["groupVersion"], "v1");
    let resources = core.body["resources"].as_array().unwrap();
    let find = |name: &str| resources.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(find("pods")["shortNames"], json!(["po"]));
    assert_eq!(find("pods")["categories"], json!(["all"]));
    assert_eq!(find("pods")["namespaced"], true);
    assert_eq!(find("pods")["kind"], "Pod");
    assert_eq!(find("pods/log")["verbs"], json!(["get"]));
    assert_eq!(find("pods/status")["verbs"], json!(["get", "patch", "update"]));
    assert_eq!(find("nodes")["namespaced"], false);
    assert_eq!(find("namespaces")["verbs"], json!(["create", "delete", "get", "list", "patch", "update", "watch"]));

    let groups = get(&sim, "/apis").await;
    assert_eq!(groups.body["kind"], "APIGroupList");
    let names: Vec<&str> = groups.body["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "apps", "discovery.k8s.io", "rbac.authorization.k8s.io", "batch", "scheduling.k8s.io", "policy",
            "networking.k8s.io", "autoscaling", "authorization.k8s.io", "authentication.k8s.io",
            // The resource metrics API, as metrics-server registers it.
            "metrics.k8s.io",
        ]
    );
    // autoscaling/v2 preferred, v1 served too, as kube-apiserver.
    let autoscaling = get(&sim, "/apis/autoscaling").await;
    assert_eq!(autoscaling.body["preferredVersion"]["groupVersion"], "autoscaling/v2");
    assert_eq!(autoscaling.body["versions"].as_array().unwrap().len(), 2);
    // Reviews are created only; pods are evicted and service accounts issue tokens.
    let reviews = get(&sim, "/apis/authorization.k8s.io/v1").await;
    let ssar = reviews.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "selfsubjectaccessreviews").unwrap();
    assert_eq!(ssar["verbs"], json!(["create"]));
    assert_eq!(find("pods/eviction")["group"], "policy");
    assert_eq!(find("serviceaccounts/token")["kind"], "TokenRequest");

    let apps = get(&sim, "/apis/apps/v1").await;
    assert_eq!(apps.body["groupVersion"], "apps/v1");
    let scale = apps.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").unwrap();
    assert_eq!(scale["group"], "autoscaling");
    assert_eq!(scale["version"], "v1");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(get(&sim, "/apis/apps").await.body["preferredVersion"]["groupVersion"], "apps/v1");
}

#[tokio::test]
async fn unknown_paths_are_status_404() {
    let sim = demo();
    for path in ["/apis/storage.k8s.io/v1", "/apis/apps/v1/cronjobs", "/openapi/v3/apis/storage.k8s.io/v1", "/api/v1/namespaces/default/nodes"] {
        let answer = get(&sim, path).await;
        assert_eq!(answer.code, 404, "{path}");
        assert_eq!(answer.body["kind"], "Status", "{path}");
        assert_eq!(answer.body["reason"], "NotFound");
    }
    let post = send(&sim, "POST", "/version", "application/json", "{}").await;
    assert_eq!(post.code, 405);
    assert_eq!(post.body["reason"], "MethodNotAllowed");
    assert_eq!(get(&sim, "/healthz").await.code, 200);
}

/// kubectl's default `--validate=strict` reads the OpenAPI documents before
/// edit, create and apply: they list every served path with its operations
/// and the `fieldValidation` parameter.
#[tokio::test]
async fn openapi_documents_list_the_served_paths() {
    let sim = demo();
    let index = get(&sim, "/openapi/v3").await;
    assert_eq!(index.code, 200);
    let url = index.body["paths"]["api/v1"]["serverRelativeURL"].as_str().expect("api/v1 in the index").to_string();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    assert!(index.body["paths"]["apis/apps/v1"].is_object());
    let core = get(&sim, "/openapi/v3/api/v1").await;
    assert_eq!(core.code, 200);
    let pods = &core.body["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
    assert_eq!(pods["patch"]["x-kubernetes-group-version-kind"]["kind"], "Pod");
    assert!(pods["put"]["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    let v2 = get(&sim, "/openapi/v2").await;
    assert_eq!(v2.code, 200);
    assert_eq!(v2.body["swagger"], "2.0");
    assert!(v2.body["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["get"].is_object());
}
