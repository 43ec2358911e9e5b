//! Discovery documents: `/version`, `/api` (`APIVersions`), `/apis`
//! (`APIGroupList`), `/apis/{group}` (`APIGroup`) and the legacy
//! `APIResourceList` of each group version, as kube-apiserver serves them
//! (Kubernetes docs "Discovery API"). kubectl asks for the aggregated
//! format first and falls back to these when the response is plain JSON.

use std::net::SocketAddr;

use base64::Engine as _;
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Value};

/// `/version` for `git_version` (`v1.33.1` gives major `1`, minor `33`).
pub fn version(git_version: &str) -> Value {
    let numbers: Vec<&str> = git_version.trim_start_matches('v').split(['.', '-', '+']).collect();
    let major = numbers.first().copied().unwrap_or("1");
    let minor = numbers.get(1).copied().unwrap_or("0");
    let previous_minor = minor.parse::<u32>().map(|m| m.saturating_sub(1).to_string()).unwrap_or_default();
    json!({
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": previous_minor,
        "gitVersion": git_version,
        "gitCommit": "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T08:19:08Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server: SocketAddr) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server.to_string()}],
    })
}

fn group_versions(catalog: &[ResourceType]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in catalog.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version.clone());
                }
            }
            None => groups.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    groups
}

fn group_value(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": entries, "preferredVersion": entries[0]})
}

/// `/apis`.
pub fn group_list(catalog: &[ResourceType]) -> Value {
    let groups: Vec<Value> = group_versions(catalog).iter().map(|(g, v)| group_value(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group is served.
pub fn group(catalog: &[ResourceType], name: &str) -> Option<Value> {
    let (group, versions) = group_versions(catalog).into_iter().find(|(g, _)| g == name)?;
    let mut value = group_value(&group, &versions);
    value["kind"] = json!("APIGroup");
    value["apiVersion"] = json!("v1");
    Some(value)
}

/// The verbs of a resource type.
pub fn verbs(resource: &ResourceType) -> Vec<&str> {
    if !resource.verbs.is_empty() {
        return resource.verbs.iter().map(String::as_str).collect();
    }
    let mut verbs = vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
    if resource.group.is_empty() && resource.plural == "namespaces" {
        verbs.retain(|v| *v != "deletecollection");
    }
    verbs
}

/// A stable stand-in for kube-apiserver's `storageVersionHash`.
fn storage_version_hash(resource: &ResourceType) -> String {
    let hash = resource
        .key()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    base64::engine::general_purpose::STANDARD.encode(hash.to_be_bytes())
}

/// The `APIResourceList` of a group version, if it is served.
pub fn resource_list(catalog: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = catalog.iter().filter(|r| r.group == group && r.version == version).collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in &types {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(r),
            "storageVersionHash": storage_version_hash(r),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for sub in &r.subresources {
            let entry = match sub.as_str() {
                "scale" => json!({
                    "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
                }),
                "token" => json!({
                    "name": format!("{}/token", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"],
                }),
                "eviction" => json!({
                    "name": format!("{}/eviction", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
                }),
                "log" => json!({
                    "name": format!("{}/log", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": ["get"],
                }),
                other => json!({
                    "name": format!("{}/{other}", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": ["get", "patch", "update"],
                }),
            };
            resources.push(entry);
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let mut list = json!({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources});
    if !group.is_empty() {
        // kube-apiserver sets apiVersion on group lists but not on /api/v1.
        list["apiVersion"] = json!("v1");
    }
    Some(list)
}

/// `/`: the paths the server serves.
pub fn root_paths(catalog: &[ResourceType]) -> Value {
    let mut paths = vec!["/api".to_string(), "/api/v1".to_string(), "/apis".to_string()];
    for (group, versions) in group_versions(catalog) {
        paths.push(format!("/apis/{group}"));
        for v in versions {
            paths.push(format!("/apis/{group}/{v}"));
        }
    }
    paths.extend(["/healthz", "/livez", "/readyz", "/version"].map(String::from));
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_follow_git_version() {
        let v = version("v1.33.1");
        assert_eq!((v["major"].as_str(), v["minor"].as_str()), (Some("1"), Some("33")));
        assert_eq!(v["gitVersion"], "v1.33.1");
        assert_eq!(version("v1.30.0-rc.1")["minor"], "30");
    }

    #[test]
    fn core_resource_list_has_pods_with_subresources_and_no_api_version() {
        let catalog = kubefold_engine::resources::builtin();
        let list = resource_list(&catalog, "", "v1").unwrap();
        assert_eq!(list["groupVersion"], "v1");
        assert!(list.get("apiVersion").is_none());
        let names: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert!(names.starts_with(&["pods", "pods/status", "pods/log"]));
        let pods = &list["resources"][0];
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert_eq!(pods["verbs"], json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]));
        let apps = resource_list(&catalog, "apps", "v1").unwrap();
        let scale = apps["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").unwrap();
        assert_eq!((scale["group"].as_str(), scale["kind"].as_str()), (Some("autoscaling"), Some("Scale")));
        assert!(resource_list(&catalog, "batch", "v1").is_none());
    }

    #[test]
    fn groups_list_preferred_versions() {
        let catalog = kubefold_engine::resources::builtin();
        let groups = group_list(&catalog);
        let names: Vec<&str> = groups["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["apps", "discovery.k8s.io"]);
        assert_eq!(groups["groups"][0]["preferredVersion"]["groupVersion"], "apps/v1");
        assert_eq!(group(&catalog, "apps").unwrap()["kind"], "APIGroup");
    }
}
