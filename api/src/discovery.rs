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

/// Verbs of a type on the aggregated API: all of kubefold's, or for a type
/// discovered from a member, those of them the member serves.
fn verbs(r: &ResourceType) -> Vec<&'static str> {
    let all = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
    all.into_iter().filter(|v| r.verbs.is_empty() || r.verbs.iter().any(|m| m == v)).collect()
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
            "verbs": verbs(r),
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

/// The Content-Type of aggregated discovery documents.
pub const AGGREGATED_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client asked for aggregated discovery (kubectl 1.30+ does,
/// falling back to the legacy documents otherwise).
pub fn wants_aggregated(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=APIGroupDiscoveryList") && first.contains("v=v2") && !first.contains("v=v2beta1"))
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`): `/api` when `core`,
/// `/apis` otherwise, with every resource, its verbs, short names,
/// categories and subresources in one document.
/// <https://kubernetes.io/docs/concepts/overview/kubernetes-api/#aggregated-discovery>
pub fn aggregated(catalog: &[ResourceType], core: bool) -> Value {
    let mut groups: Vec<(String, Vec<(String, Vec<Value>)>)> = Vec::new();
    for r in catalog.iter().filter(|r| r.group.is_empty() == core) {
        let mut resource = json!({
            "resource": r.plural,
            "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
            "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": r.singular,
            "verbs": verbs(r),
        });
        if !r.short_names.is_empty() {
            resource["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            resource["categories"] = json!(r.categories);
        }
        let subresources: Vec<Value> = r
            .subresources
            .iter()
            .map(|sub| {
                let (kind, group, version, verbs) = match sub.as_str() {
                    "scale" => ("Scale", "autoscaling", "v1", vec!["get", "patch", "update"]),
                    "log" => ("Pod", "", "v1", vec!["get"]),
                    _ => (r.kind.as_str(), r.group.as_str(), r.version.as_str(), vec!["get", "patch", "update"]),
                };
                json!({"subresource": sub, "responseKind": {"group": group, "version": version, "kind": kind}, "verbs": verbs})
            })
            .collect();
        if !subresources.is_empty() {
            resource["subresources"] = Value::Array(subresources);
        }
        let group = match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some(g) => g,
            None => {
                groups.push((r.group.clone(), Vec::new()));
                groups.last_mut().unwrap_or_else(|| unreachable!())
            }
        };
        match group.1.iter_mut().find(|(v, _)| *v == r.version) {
            Some((_, resources)) => resources.push(resource),
            None => group.1.push((r.version.clone(), vec![resource])),
        }
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .into_iter()
                .map(|(version, resources)| json!({"version": version, "resources": resources, "freshness": "Current"}))
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The `info` of kubefold's OpenAPI documents.
const OPENAPI_INFO: kubefold_engine::openapi::Info<'static> =
    kubefold_engine::openapi::Info { title: "kubefold", version: KUBERNETES_VERSION.2 };

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_index(catalog: &[ResourceType]) -> Value {
    kubefold_engine::openapi::openapi_v3_index(catalog)
}

/// `/openapi/v3/{api/v1 | apis/g/v}` (see [`kubefold_engine::openapi`]).
pub fn openapi_v3(catalog: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    kubefold_engine::openapi::openapi_v3(catalog, group, version, OPENAPI_INFO)
}

/// `/openapi/v2` in protobuf.
pub fn openapi_v2_protobuf() -> Vec<u8> {
    kubefold_engine::openapi::openapi_v2_protobuf(OPENAPI_INFO)
}

/// `/openapi/v2`.
pub fn openapi_v2(catalog: &[ResourceType]) -> Value {
    kubefold_engine::openapi::openapi_v2(catalog, OPENAPI_INFO)
}

#[cfg(test)]
mod aggregated_tests {
    use super::*;
    use kubefold_engine::resources::builtin;

    #[test]
    fn aggregated_discovery_lists_every_type_once() {
        let cat = builtin();
        let core = aggregated(&cat, true);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        let v1 = &core["items"][0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["responseKind"]["kind"], "Pod");
        assert_eq!(pods["categories"], json!(["all"]));
        let groups = aggregated(&cat, false);
        let names: Vec<_> = groups["items"].as_array().unwrap().iter().map(|g| g["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["apps", "discovery.k8s.io"]);
        assert!(wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"));
        assert!(!wants_aggregated("application/json"));
    }

    #[test]
    fn openapi_v2_protobuf_is_well_formed() {
        let doc = openapi_v2_protobuf();
        // swagger = "2.0"
        assert_eq!(&doc[..5], &[0x0a, 3, b'2', b'.', b'0']);
        // info: title "kubefold", version "v1.33.1"
        assert_eq!(doc[5], 0x12);
        assert_eq!(doc[6] as usize, 2 + 8 + 2 + 7);
        assert_eq!(&doc[7..17], b"\x0a\x08kubefold");
        // empty paths
        assert_eq!(&doc[doc.len() - 2..], &[0x42, 0]);
    }

    #[test]
    fn openapi_v3_carries_gvk_and_field_validation() {
        let cat = builtin();
        let idx = openapi_v3_index(&cat);
        assert!(idx["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap().starts_with("/openapi/v3/apis/apps/v1?hash="));
        let doc = openapi_v3(&cat, "", "v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert!(openapi_v3(&cat, "batch", "v1").is_none());
    }
}
