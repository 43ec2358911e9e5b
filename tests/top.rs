//! `kubectl top` across the fleet: kubefold serves `metrics.k8s.io/v1beta1`
//! by asking its members' metrics API (the simulator's, derived from its
//! workload) in parallel. Two members, then one stopped: it is left out
//! with a warning naming it, and the other's metrics are still served.
//! A `metadata.name` field selector on a qualified name reaches its member.
//! kubectl 1.33 and 1.27.

mod common;

use common::*;
use serde_json::Value;

/// The names of a metrics list's items.
fn item_names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

/// GET on a simulator.
fn member_get(url: &str, path: &str) -> Value {
    let (code, body) = http_get(&format!("{url}{path}"));
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// A GET whose `Warning` headers are read too.
fn get_with_warnings(url: &str) -> (u16, Value, Vec<String>) {
    let response = reqwest::blocking::Client::new().get(url).send().unwrap();
    let code = response.status().as_u16();
    let warnings = response.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    (code, response.json().unwrap_or(Value::Null), warnings)
}

#[test]
fn the_metrics_api_of_the_fleet_is_its_members_with_qualified_names() {
    let members = demo_members(2, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let member1 = members[0].1.url();

    // Discovery names the group, as metrics-server's APIService does.
    let groups = kf.get_json("/apis");
    assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["preferredVersion"]["groupVersion"] == "metrics.k8s.io/v1beta1"));
    let resources = kf.get_json("/apis/metrics.k8s.io/v1beta1");
    let kinds: Vec<&str> = resources["resources"].as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["NodeMetrics", "PodMetrics"]);

    // Every member's running pods, qualified; each exactly as its member reports it.
    let direct = member_get(&member1, "/apis/metrics.k8s.io/v1beta1/pods");
    let (code, fleet, warnings) = get_with_warnings(&format!("{}/apis/metrics.k8s.io/v1beta1/pods", kf.url));
    assert_eq!((code, fleet["kind"].as_str()), (200, Some("PodMetricsList")), "{fleet}");
    assert!(warnings.is_empty(), "{warnings:?}");
    let names = item_names(&fleet);
    let from = |cluster: &str| names.iter().filter(|n| n.ends_with(&format!("_{cluster}"))).count();
    assert_eq!(from("member1"), direct["items"].as_array().unwrap().len(), "{names:?}");
    assert!(from("member2") > 0 && from("member1") + from("member2") == names.len(), "{names:?}");
    let web0 = fleet["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "web-0_member1").expect("web-0_member1");
    let web0_direct = member_get(&member1, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0");
    assert_eq!(web0["containers"], web0_direct["containers"]);
    assert_eq!(web0["metadata"]["annotations"]["kubefold.io/cluster"], "member1");
    assert!(web0["timestamp"].is_string() && web0["window"].is_string(), "{web0}");

    // Label selectors: the cluster condition picks members, the rest goes to them.
    let (_, web, _) = get_with_warnings(&format!("{}/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb", kf.url));
    let mut web_names = item_names(&web);
    web_names.sort();
    assert_eq!(web_names, ["web-0_member1", "web-0_member2", "web-1_member1", "web-1_member2", "web-2_member1", "web-2_member2"]);
    let (_, one, _) = get_with_warnings(&format!(
        "{}/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb,kubefold.io%2Fcluster%3Dmember2",
        kf.url
    ));
    assert_eq!(item_names(&one), ["web-0_member2", "web-1_member2", "web-2_member2"]);

    // Get: a qualified name asks its member; a bare name held by both is ambiguous.
    let got = kf.get_json("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0_member2");
    assert_eq!((got["kind"].as_str(), got["metadata"]["name"].as_str()), (Some("PodMetrics"), Some("web-0_member2")));
    let (code, body) = kf.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0");
    assert!(code == 409 && body.contains("web-0_member1") && body.contains("web-0_member2"), "{code} {body}");
    let (code, body) = kf.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nothing_member1");
    assert!(code == 404 && body.contains("\"reason\":\"NotFound\""), "{code} {body}");
    let node = kf.get_json("/apis/metrics.k8s.io/v1beta1/nodes/member2-node-1_member2");
    assert_eq!(node["kind"], "NodeMetrics");
    assert!(node["usage"]["cpu"].as_str().unwrap().ends_with('n'), "{node}");

    // Member 2 stops: left out, named in a warning; member 1 still served.
    let mut members = members;
    let (_, member2) = members.remove(1);
    member2.stop();
    let (code, fleet, warnings) = get_with_warnings(&format!("{}/apis/metrics.k8s.io/v1beta1/pods", kf.url));
    assert_eq!(code, 200, "{fleet}");
    assert!(!item_names(&fleet).is_empty() && item_names(&fleet).iter().all(|n| n.ends_with("_member1")), "{fleet}");
    assert!(warnings.len() == 1 && warnings[0].contains("member2"), "{warnings:?}");
    let (code, body) = kf.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0_member2");
    assert!(code == 503 && body.contains("member2"), "{code} {body}");

    // kubectl top, as a user runs it.
    for minor in ["1.33", "1.27"] {
        if kubectl_missing(&[minor]).is_some() {
            println!("SKIPPED: kubectl {minor} is not installed");
            continue;
        }
        let bin = kubectl_version(minor);
        let top = |args: &[&str]| {
            let mut all = vec!["--server", kf.url.as_str()];
            all.extend_from_slice(args);
            kubectl_bin(&bin, &all, None)
        };
        let (ok, out, err) = top(&["top", "pods", "-A"]);
        assert!(ok, "{minor} top pods -A: {out}{err}");
        let header: Vec<&str> = out.lines().next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(header, ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"], "{minor}: {out}");
        assert!(out.lines().any(|l| l.split_whitespace().take(2).eq(["default", "web-0_member1"])), "{minor}: {out}");
        assert!(!out.contains("_member2"), "{minor}: {out}");
        assert!(err.contains("member2"), "{minor}: the warning names the member left out: {err}");

        let (ok, out, err) = top(&["top", "pod", "web-0_member1", "-n", "default"]);
        assert!(ok, "{minor} top pod: {out}{err}");
        let row: Vec<&str> = out.lines().nth(1).unwrap_or_default().split_whitespace().collect();
        assert!(row.len() == 3 && row[0] == "web-0_member1" && row[1].ends_with('m') && row[2].ends_with("Mi"), "{minor}: {out}");

        // A field selector on a qualified name asks that member for its name.
        let (ok, out, err) = top(&["top", "pod", "-n", "default", "--field-selector", "metadata.name=web-0_member1"]);
        assert!(ok, "{minor} top pod --field-selector: {out}{err}");
        let rows: Vec<&str> = out.lines().skip(1).collect();
        assert!(rows.len() == 1 && rows[0].starts_with("web-0_member1 "), "{minor}: {out}{err}");

        let (ok, out, err) = top(&["top", "nodes"]);
        assert!(ok, "{minor} top nodes: {out}{err}");
        // member1's three nodes with their share of the allocatable;
        // kubectl shows nodes without metrics (member2's) as unknown.
        let rows: Vec<&str> = out.lines().skip(1).collect();
        let member1: Vec<&&str> = rows.iter().filter(|r| r.contains("_member1")).collect();
        assert!(member1.len() == 3 && member1.iter().all(|r| r.contains('%')), "{minor}: {out}");
        assert!(rows.iter().filter(|r| r.contains("_member2")).all(|r| r.contains("<unknown>")), "{minor}: {out}");

        let (ok, out, err) = top(&["top", "pod", "web-0_member2", "-n", "default"]);
        assert!(!ok && err.contains("member2"), "{minor}: a stopped member's pod: {out}{err}");
    }
    kf.stop();
}
