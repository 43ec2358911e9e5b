//! Lists over real HTTP: the list envelope, selectors, paging and
//! resourceVersion semantics, with the names the Kubernetes docs ("API
//! Concepts": "Retrieving large results sets in chunks", "Resource
//! versions") say a client sees.

mod common;

use std::time::{Duration, Instant};

use common::{demo, get, names, rv, send};
use serde_json::json;

#[tokio::test]
async fn list_envelope_has_kind_version_and_items_without_type_meta() {
    let sim = demo();
    let list = get(&sim, "/api/v1/namespaces/default/pods").await;
    assert_eq!(list.code, 200);
    assert_eq!(list.content_type, "application/json");
    assert_eq!(list.body["kind"], "PodList");
    assert_eq!(list.body["apiVersion"], "v1");
    assert!(rv(&list.body) > 300);
    assert_eq!(names(&list.body), ["web-0", "web-1", "web-2"]);
    // kube-apiserver omits kind and apiVersion in items of built-in lists (kubernetes#3030).
    assert!(list.body["items"][0].get("kind").is_none());
    assert!(list.body["metadata"].get("continue").is_none());
    // A get carries them.
    let pod = get(&sim, "/api/v1/namespaces/default/pods/web-0").await;
    assert_eq!((pod.body["kind"].as_str(), pod.body["apiVersion"].as_str()), (Some("Pod"), Some("v1")));
    let deployments = get(&sim, "/apis/apps/v1/deployments").await;
    assert_eq!(deployments.body["kind"], "DeploymentList");
    assert_eq!(deployments.body["apiVersion"], "apps/v1");
    assert_eq!(names(&deployments.body), ["coredns", "prometheus", "cache", "checkout", "frontend"]);
}

#[tokio::test]
async fn label_selectors() {
    let sim = demo();
    let frontend = get(&sim, "/api/v1/pods?labelSelector=app%3Dfrontend").await;
    let frontend_names = names(&frontend.body);
    assert_eq!(frontend_names.len(), 3);
    assert!(frontend_names.iter().all(|n| n.starts_with("frontend-")));
    let set = get(&sim, "/api/v1/pods?labelSelector=app+in+(cache,web)").await;
    let mut set_names = names(&set.body);
    set_names.retain(|n| !n.starts_with("cache-"));
    assert_eq!(set_names, ["web-0", "web-1", "web-2"]);
    assert_eq!(names(&set.body).len(), 4);
    // Pods without an `app` label: the 4 static pods and the 2 coredns pods (label k8s-app).
    let without = get(&sim, "/api/v1/pods?labelSelector=!app").await;
    assert_eq!(names(&without.body).len(), 6);
    let bad = get(&sim, "/api/v1/pods?labelSelector=app%20in%20(").await;
    assert_eq!(bad.code, 400);
    assert_eq!(bad.body["reason"], "BadRequest");
}

#[tokio::test]
async fn field_selectors() {
    let sim = demo();
    let on_node1 = get(&sim, "/api/v1/pods?fieldSelector=spec.nodeName%3Dmember1-node-1").await;
    let mut on_node1 = names(&on_node1.body);
    let coredns: Vec<String> = on_node1.iter().filter(|n| n.starts_with("coredns-")).cloned().collect();
    assert_eq!(coredns.len(), 1);
    on_node1.retain(|n| !n.starts_with("coredns-"));
    assert_eq!(
        on_node1,
        ["etcd-member1-node-1", "kube-apiserver-member1-node-1", "kube-controller-manager-member1-node-1", "kube-scheduler-member1-node-1"]
    );
    let one = get(&sim, "/api/v1/pods?fieldSelector=metadata.name%3Dweb-1,metadata.namespace%3Ddefault").await;
    assert_eq!(names(&one.body), ["web-1"]);
    let not_running = get(&sim, "/api/v1/pods?fieldSelector=status.phase!%3DRunning").await;
    assert!(names(&not_running.body).is_empty());
    let services = get(&sim, "/api/v1/services?fieldSelector=spec.type%3DNodePort").await;
    assert_eq!(names(&services.body), ["frontend"]);
    let unsupported = get(&sim, "/api/v1/pods?fieldSelector=spec.bogus%3Dx").await;
    assert_eq!(unsupported.code, 400);
    assert_eq!(unsupported.body["message"], "field label not supported: spec.bogus");
}

fn qualified(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| format!("{}/{}", i["metadata"]["namespace"].as_str().unwrap(), i["metadata"]["name"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn paging_with_limit_and_continue() {
    let sim = demo();
    let page1 = get(&sim, "/api/v1/configmaps?limit=4").await;
    assert_eq!(
        qualified(&page1.body),
        ["default/kube-root-ca.crt", "kube-node-lease/kube-root-ca.crt", "kube-public/kube-root-ca.crt", "kube-system/coredns"]
    );
    assert_eq!(page1.body["metadata"]["remainingItemCount"], 6);
    let list_rv = rv(&page1.body);
    let token = page1.body["metadata"]["continue"].as_str().unwrap().to_string();

    // A change between pages is not seen: every page is read at the first page's version.
    let created = send(&sim, "POST", "/api/v1/namespaces/monitoring/configmaps", "application/json",
        r#"{"metadata":{"name":"late"},"data":{"a":"1"}}"#).await;
    assert_eq!(created.code, 201);

    let page2 = get(&sim, &format!("/api/v1/configmaps?limit=4&continue={token}")).await;
    assert_eq!(
        qualified(&page2.body),
        ["kube-system/kube-root-ca.crt", "monitoring/kube-root-ca.crt", "monitoring/prometheus-config", "shop/checkout-settings"]
    );
    assert_eq!(rv(&page2.body), list_rv);
    assert_eq!(page2.body["metadata"]["remainingItemCount"], 2);
    let token = page2.body["metadata"]["continue"].as_str().unwrap().to_string();
    let page3 = get(&sim, &format!("/api/v1/configmaps?limit=4&continue={token}")).await;
    assert_eq!(qualified(&page3.body), ["shop/frontend-config", "shop/kube-root-ca.crt"]);
    assert!(page3.body["metadata"].get("continue").is_none());
    assert!(page3.body["metadata"].get("remainingItemCount").is_none());

    // A fresh list sees the new object.
    let fresh = get(&sim, "/api/v1/namespaces/monitoring/configmaps").await;
    assert_eq!(names(&fresh.body), ["kube-root-ca.crt", "late", "prometheus-config"]);

    let bad = get(&sim, "/api/v1/configmaps?continue=not-a-token").await;
    assert_eq!(bad.code, 400);
    assert!(bad.body["message"].as_str().unwrap().starts_with("invalid continue token"));
}

#[tokio::test]
async fn paging_with_a_selector_omits_remaining_item_count() {
    let sim = demo();
    let page = get(&sim, "/api/v1/configmaps?limit=2&labelSelector=app.kubernetes.io%2Fpart-of%3Ddemo").await;
    assert_eq!(qualified(&page.body), ["kube-system/coredns", "monitoring/prometheus-config"]);
    assert!(page.body["metadata"].get("remainingItemCount").is_none());
    let token = page.body["metadata"]["continue"].as_str().unwrap();
    let rest = get(&sim, &format!("/api/v1/configmaps?limit=2&labelSelector=app.kubernetes.io%2Fpart-of%3Ddemo&continue={token}")).await;
    assert_eq!(qualified(&rest.body), ["shop/checkout-settings", "shop/frontend-config"]);
}

#[tokio::test]
async fn resource_version_semantics() {
    let sim = common::start(kubefold_testdata::SimConfig {
        workload: kubefold_testdata::Workload::Demo,
        history: 5,
        ..Default::default()
    });
    let first = get(&sim, "/api/v1/namespaces/default/pods").await;
    let first_rv = rv(&first.body);
    let exact = get(&sim, &format!("/api/v1/namespaces/default/pods?resourceVersion={first_rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(exact.code, 200);
    assert_eq!(rv(&exact.body), first_rv);
    // Change web-0: an exact read at the old version still shows the old labels.
    let patched = send(&sim, "PATCH", "/api/v1/namespaces/default/pods/web-0", "application/merge-patch+json",
        r#"{"metadata":{"labels":{"seen":"yes"}}}"#).await;
    assert_eq!(patched.code, 200);
    let old = get(&sim, &format!("/api/v1/namespaces/default/pods?resourceVersion={first_rv}&resourceVersionMatch=Exact")).await;
    assert!(old.body["items"][0]["metadata"]["labels"].get("seen").is_none());
    let not_older = get(&sim, &format!("/api/v1/namespaces/default/pods?resourceVersion={first_rv}")).await;
    assert_eq!(not_older.body["items"][0]["metadata"]["labels"]["seen"], "yes");
    // Past the 5 retained changes, the exact read is gone.
    for i in 0..6 {
        send(&sim, "PATCH", "/api/v1/namespaces/default/pods/web-1", "application/merge-patch+json",
            &json!({"metadata": {"labels": {"i": i.to_string()}}}).to_string()).await;
    }
    let expired = get(&sim, &format!("/api/v1/namespaces/default/pods?resourceVersion={first_rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(expired.code, 410);
    assert_eq!(expired.body["reason"], "Expired");
    assert_eq!(expired.body["message"], "The resourceVersion for the provided list is too old.");
    // A version from the future: 504 after waiting about 3 seconds.
    let started = Instant::now();
    let future = get(&sim, "/api/v1/namespaces/default/pods?resourceVersion=99999999").await;
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(future.code, 504);
    assert_eq!(future.body["reason"], "Timeout");
    assert_eq!(future.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    // resourceVersionMatch without resourceVersion is 422.
    let invalid = get(&sim, "/api/v1/pods?resourceVersionMatch=NotOlderThan").await;
    assert_eq!(invalid.code, 422);
}
