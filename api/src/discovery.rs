//! Discovery documents: `/version`, `/api`, `/apis`, `/api/{v}`,
//! `/apis/{g}/{v}`, listing the aggregated resource types.
//! <https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api>

use kubefold_engine::resources::ResourceType;
use serde_json::{json, Value};

/// The Kubernetes version kubefold's API corresponds to (kubectl picks its
/// binary from `gitVersion`).
pub const KUBERNETES_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.1");

/// `/version`.
pub fn version() -> Value {
    let (major, minor, git_version) = KUBERNETES_VERSION;
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": concat!("kubefold-", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// Verbs of a type on the aggregated API.
fn verbs() -> Vec<&'static str> {
    vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
}

/// `/api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    })
}

fn group_versions(catalog: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in catalog.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => versions.push(r.version.clone()),
            Some(_) => {}
            None => groups.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    groups
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs[0].clone()})
}

/// `/apis`.
pub fn groups(catalog: &[ResourceType]) -> Value {
    let groups: Vec<Value> = group_versions(catalog).iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or `None` when no aggregated type has that group.
pub fn group(catalog: &[ResourceType], group: &str) -> Option<Value> {
    let (g, vs) = group_versions(catalog).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_json(&g, &vs);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

/// `/api/{v}` or `/apis/{g}/{v}`, or `None` when nothing is served there.
pub fn resource_list(catalog: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in catalog.iter().filter(|r| r.group == group && r.version == version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for sub in &r.subresources {
            let (kind, verbs) = match sub.as_str() {
                "scale" => ("Scale", vec!["get", "patch", "update"]),
                "log" => ("Pod", vec!["get"]),
                _ => (r.kind.as_str(), vec!["get", "patch", "update"]),
            };
            let mut e = json!({
                "name": format!("{}/{}", r.plural, sub),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if sub == "scale" {
                e["group"] = "autoscaling".into();
                e["version"] = "v1".into();
            }
            resources.push(e);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::resources::builtin;

    #[test]
    fn documents_list_the_catalog() {
        let cat = builtin();
        let apis = groups(&cat);
        let names: Vec<_> = apis["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["apps", "discovery.k8s.io"]);
        let v1 = resource_list(&cat, "", "v1").unwrap();
        let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["namespaced"], true);
        assert!(v1["resources"].as_array().unwrap().iter().any(|r| r["name"] == "pods/log"));
        assert!(resource_list(&cat, "batch", "v1").is_none());
        assert_eq!(version()["gitVersion"], "v1.33.1");
    }
}
