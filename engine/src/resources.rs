//! The catalog of resource types kubefold aggregates and the simulator serves.
//!
//! Each entry carries what discovery needs (group, version, plural, kind,
//! namespaced, short names, categories) so that `/api`, `/apis` and
//! `kubectl api-resources` can be answered from one table.

use serde::{Deserialize, Serialize};

/// One API resource type, named as Kubernetes discovery names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceType {
    /// API group; empty for the core (legacy) group.
    pub group: String,
    /// API version inside the group, e.g. `v1`.
    pub version: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl short names, e.g. `po`.
    pub short_names: Vec<String>,
    /// Discovery categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Subresources the type has (`status`, `scale`, `log`).
    pub subresources: Vec<String>,
    /// Verbs the member serves, as its discovery says; empty for the
    /// built-in types (every verb kubefold serves).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    /// The CRD's `additionalPrinterColumns` for this version, when the type
    /// is a custom resource whose definition the member shows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub printer_columns: Vec<PrinterColumn>,
}

/// One `additionalPrinterColumns` entry of a CustomResourceDefinition
/// version (`apiextensions.k8s.io/v1` `CustomResourceColumnDefinition`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    /// Column header, e.g. `Color`.
    pub name: String,
    /// OpenAPI type of the cells: `string`, `integer`, `number`, `boolean`, `date`.
    #[serde(rename = "type")]
    pub type_: String,
    /// OpenAPI format, e.g. `int32`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub format: String,
    /// What the column shows.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// 0 for default output; higher for `-o wide` only.
    #[serde(default)]
    pub priority: i32,
    /// A simple JSONPath into the object, e.g. `.spec.replicas`.
    pub json_path: String,
}

/// A resource type as a selection names it: `apiVersion` and `kind`
/// (`v1` `Pod`, `example.com/v1` `Widget`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeRef {
    /// `v1`, `apps/v1`, `example.com/v1`.
    pub api_version: String,
    /// `Pod`, `Widget`.
    pub kind: String,
}

impl TypeRef {
    /// A reference to `kind` of `api_version`.
    pub fn new(api_version: &str, kind: &str) -> TypeRef {
        TypeRef { api_version: api_version.to_string(), kind: kind.to_string() }
    }

    /// Group and version: `("", "v1")`, `("apps", "v1")`.
    pub fn group_version(&self) -> (&str, &str) {
        match self.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", self.api_version.as_str()),
        }
    }

    /// Whether `resource` is the type this names.
    pub fn names(&self, resource: &ResourceType) -> bool {
        let (group, version) = self.group_version();
        resource.group == group && resource.version == version && resource.kind == self.kind
    }
}

impl std::fmt::Display for TypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

impl ResourceType {
    /// `apiVersion` as written in objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// A stable key naming the type in the store and in logs: `v1/pods`,
    /// `apps/v1/deployments`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.api_version(), self.plural)
    }

    /// The path prefix of the type's group version: `/api/v1` or `/apis/apps/v1`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The collection path, all namespaces when `namespace` is `None`.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => {
                format!("{}/namespaces/{}/{}", self.group_version_path(), ns, self.plural)
            }
            _ => format!("{}/{}", self.group_version_path(), self.plural),
        }
    }

    /// `kind` of the list type, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The `apiVersion`/`kind` reference to this type.
    pub fn type_ref(&self) -> TypeRef {
        TypeRef { api_version: self.api_version(), kind: self.kind.clone() }
    }

    /// Whether the type is one of [`builtin`] (with its built-in printer).
    pub fn is_builtin(&self) -> bool {
        builtin().iter().any(|b| b.key() == self.key() && b.kind == self.kind)
    }
}

#[allow(clippy::too_many_arguments)]
fn entry(
    group: &str,
    version: &str,
    plural: &str,
    singular: &str,
    kind: &str,
    namespaced: bool,
    short_names: &[&str],
    categories: &[&str],
    subresources: &[&str],
) -> ResourceType {
    let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
    ResourceType {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: singular.into(),
        kind: kind.into(),
        namespaced,
        short_names: strings(short_names),
        categories: strings(categories),
        subresources: strings(subresources),
        verbs: Vec::new(),
        printer_columns: Vec::new(),
    }
}

/// The group-versions of `catalog`, in order, once each.
pub fn served_group_versions(catalog: &[ResourceType]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in catalog {
        if !out.iter().any(|(g, v)| *g == r.group && *v == r.version) {
            out.push((r.group.clone(), r.version.clone()));
        }
    }
    out
}

/// The built-in resource types of the skeleton, in discovery order.
///
/// Short names and categories are those kube-apiserver 1.33 reports
/// (`kubectl api-resources`).
pub fn builtin() -> Vec<ResourceType> {
    vec![
        entry("", "v1", "pods", "pod", "Pod", true, &["po"], &["all"], &["status", "log"]),
        entry("", "v1", "nodes", "node", "Node", false, &["no"], &[], &["status"]),
        entry("", "v1", "namespaces", "namespace", "Namespace", false, &["ns"], &[], &["status"]),
        entry("", "v1", "services", "service", "Service", true, &["svc"], &["all"], &["status"]),
        entry("", "v1", "configmaps", "configmap", "ConfigMap", true, &["cm"], &[], &[]),
        entry("", "v1", "events", "event", "Event", true, &["ev"], &[], &[]),
        entry("apps", "v1", "deployments", "deployment", "Deployment", true, &["deploy"], &["all"], &["status", "scale"]),
        entry("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true, &["rs"], &["all"], &["status", "scale"]),
        entry("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true, &["sts"], &["all"], &["status", "scale"]),
        entry("discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", true, &[], &[], &[]),
    ]
}

/// Finds a type of `catalog` by group, version and plural.
pub fn find<'a>(catalog: &'a [ResourceType], group: &str, version: &str, plural: &str) -> Option<&'a ResourceType> {
    catalog
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Finds a type of `catalog` by its [`ResourceType::key`].
pub fn find_by_key<'a>(catalog: &'a [ResourceType], key: &str) -> Option<&'a ResourceType> {
    catalog.iter().find(|r| r.key() == key)
}

/// The type `type_ref` names, as a member's discovery document of its group
/// version (`/api/v1`, `/apis/{group}/{version}`: an `APIResourceList`)
/// describes it, with the `additionalPrinterColumns` of its version when
/// `crd` (the member's `CustomResourceDefinition` of that type) is given.
/// `Err` says why the member does not serve it as kubefold needs (absent, or
/// without list and watch).
pub fn from_discovery(type_ref: &TypeRef, resource_list: &serde_json::Value, crd: Option<&serde_json::Value>) -> Result<ResourceType, String> {
    use serde_json::Value;
    let (group, version) = type_ref.group_version();
    let resources = resource_list.get("resources").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let text = |r: &Value, field: &str| r.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
    let strings = |r: &Value, field: &str| -> Vec<String> {
        r.get(field)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let entry = resources
        .iter()
        .find(|r| text(r, "kind") == type_ref.kind && !text(r, "name").contains('/'))
        .ok_or_else(|| format!("the member does not serve {type_ref}"))?;
    let plural = text(entry, "name");
    let verbs = strings(entry, "verbs");
    if !verbs.iter().any(|v| v == "list") || !verbs.iter().any(|v| v == "watch") {
        return Err(format!("the member does not list and watch {type_ref} (verbs {verbs:?})"));
    }
    let subresources = resources
        .iter()
        .filter_map(|r| text(r, "name").strip_prefix(&format!("{plural}/")).map(str::to_string))
        .collect();
    let singular = match text(entry, "singularName") {
        s if s.is_empty() => type_ref.kind.to_lowercase(),
        s => s,
    };
    let printer_columns = crd
        .filter(|crd| crd.pointer("/spec/group").and_then(Value::as_str) == Some(group))
        .filter(|crd| crd.pointer("/spec/names/plural").and_then(Value::as_str) == Some(plural.as_str()))
        .and_then(|crd| crd.pointer("/spec/versions").and_then(Value::as_array))
        .and_then(|versions| versions.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(version)))
        .and_then(|v| v.get("additionalPrinterColumns").cloned())
        .and_then(|columns| serde_json::from_value(columns).ok())
        .unwrap_or_default();
    Ok(ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        plural,
        singular,
        kind: type_ref.kind.clone(),
        namespaced: entry.get("namespaced").and_then(Value::as_bool).unwrap_or(false),
        short_names: strings(entry, "shortNames"),
        categories: strings(entry, "categories"),
        subresources,
        verbs,
        printer_columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_keys_follow_kubernetes_layout() {
        let cat = builtin();
        let pods = find(&cat, "", "v1", "pods").unwrap();
        assert_eq!(pods.key(), "v1/pods");
        assert_eq!(pods.collection_path(Some("default")), "/api/v1/namespaces/default/pods");
        assert_eq!(pods.collection_path(None), "/api/v1/pods");
        let deploy = find(&cat, "apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.collection_path(Some("ns")), "/apis/apps/v1/namespaces/ns/deployments");
        let nodes = find_by_key(&cat, "v1/nodes").unwrap();
        assert_eq!(nodes.collection_path(Some("ignored")), "/api/v1/nodes");
        assert_eq!(nodes.list_kind(), "NodeList");
    }

    #[test]
    fn custom_types_come_from_member_discovery_and_their_crd() {
        let list = serde_json::json!({"kind": "APIResourceList", "groupVersion": "example.com/v1", "resources": [
            {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
             "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"], "shortNames": ["wg"], "categories": ["all"]},
            {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget", "verbs": ["get", "patch", "update"]},
            {"name": "gadgets", "singularName": "gadget", "namespaced": false, "kind": "Gadget", "verbs": ["get"]}
        ]});
        let crd = serde_json::json!({"spec": {"group": "example.com", "names": {"plural": "widgets"}, "versions": [
            {"name": "v1beta1", "additionalPrinterColumns": [{"name": "Old", "type": "string", "jsonPath": ".spec.old"}]},
            {"name": "v1", "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 0}]}
        ]}});
        let widget = from_discovery(&TypeRef::new("example.com/v1", "Widget"), &list, Some(&crd)).unwrap();
        assert_eq!(widget.key(), "example.com/v1/widgets");
        assert!(widget.namespaced);
        assert_eq!((widget.short_names.as_slice(), widget.categories.as_slice()), (&["wg".to_string()][..], &["all".to_string()][..]));
        assert_eq!(widget.subresources, ["status"]);
        assert_eq!(widget.printer_columns.len(), 1);
        assert_eq!((widget.printer_columns[0].name.as_str(), widget.printer_columns[0].json_path.as_str()), ("Color", ".spec.color"));
        assert!(!widget.is_builtin());
        let bare = from_discovery(&TypeRef::new("example.com/v1", "Widget"), &list, None).unwrap();
        assert!(bare.printer_columns.is_empty());
        let err = from_discovery(&TypeRef::new("example.com/v1", "Gadget"), &list, None).unwrap_err();
        assert!(err.contains("does not list and watch"), "{err}");
        let err = from_discovery(&TypeRef::new("example.com/v1", "Sprocket"), &list, None).unwrap_err();
        assert_eq!(err, "the member does not serve example.com/v1/Sprocket");
    }
}
