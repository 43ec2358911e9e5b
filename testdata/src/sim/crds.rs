//! CustomResourceDefinitions created at runtime: after every write of a
//! `customresourcedefinitions.apiextensions.k8s.io` object, each served
//! version of each definition becomes a served type (discovery, OpenAPI
//! paths, list, get, watch, create, update, patch, delete of its objects),
//! as kube-apiserver's apiextensions server starts serving a definition
//! once it is established. The definition's status is set as
//! kube-apiserver's controllers set it (`acceptedNames`, `storedVersions`,
//! the `NamesAccepted` and `Established` conditions).
//!
//! A version no longer served, or a definition deleted, keeps its type
//! served (empty once its objects are deleted) until the simulator
//! restarts: the store's types are never renumbered.

use kubefold_engine::resources::{PrinterColumn, ResourceType};
use serde_json::{json, Value};

use super::store::Store;

/// The group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// The types a definition serves: one per served version.
pub fn resource_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let strings = |v: &Value| v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
    let (group, plural, kind) = (text(&spec["group"]), text(&names["plural"]), text(&names["kind"]));
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = names["singular"].as_str().filter(|s| !s.is_empty()).map_or_else(|| kind.to_lowercase(), str::to_string);
    let mut types = Vec::new();
    for version in spec["versions"].as_array().into_iter().flatten().filter(|v| v["served"] == true) {
        let mut subresources = Vec::new();
        for sub in ["status", "scale"] {
            if version["subresources"][sub].is_object() {
                subresources.push(sub.to_string());
            }
        }
        let printer_columns = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some(PrinterColumn {
                    name: c["name"].as_str()?.to_string(),
                    type_: c["type"].as_str().unwrap_or("string").to_string(),
                    format: text(&c["format"]),
                    description: text(&c["description"]),
                    priority: c["priority"].as_i64().unwrap_or(0) as i32,
                    json_path: c["jsonPath"].as_str()?.to_string(),
                })
            })
            .collect();
        types.push(ResourceType {
            group: group.clone(),
            version: text(&version["name"]),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced: spec["scope"] == "Namespaced",
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            subresources,
            verbs: Vec::new(),
            printer_columns,
        });
    }
    types
}

/// The status kube-apiserver's controllers give an accepted definition.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let stored: Vec<Value> = crd["spec"]["versions"].as_array().into_iter().flatten().filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect();
    let condition = |kind: &str, reason: &str, message: &str| json!({"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    json!({
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": stored,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    })
}

/// Serves the types of every definition in the store that are not served
/// yet; the number of types added.
pub fn sync(store: &mut Store) -> usize {
    let Some(crds) = store.resource_index(GROUP, "v1", "customresourcedefinitions") else { return 0 };
    let definitions: Vec<Value> = store.objects(crds).map(|o| o.value()).collect();
    let mut added = 0;
    for crd in &definitions {
        let established = crd["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Established" && c["status"] == "True");
        if !established && crd["metadata"]["deletionTimestamp"].is_null() {
            let mut accepted = crd.clone();
            accepted["status"] = established_status(crd, &chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
            let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
            store.put(crds, &super::store::key(None, &name), accepted);
        }
        for resource_type in resource_types(crd) {
            if store.resource_index(&resource_type.group, &resource_type.version, &resource_type.plural).is_none() {
                tracing::info!(group = %resource_type.group, version = %resource_type.version, plural = %resource_type.plural, "Custom resource served.");
                store.add_type(resource_type);
                added += 1;
            }
        }
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gadgets() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gadgets.example.org"},
            "spec": {
                "group": "example.org", "scope": "Namespaced",
                "names": {"plural": "gadgets", "kind": "Gadget", "shortNames": ["gd"], "listKind": "GadgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1beta1", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                ],
            },
        })
    }

    #[test]
    fn each_served_version_is_a_type_with_its_names_subresources_and_columns() {
        let types = resource_types(&gadgets());
        assert_eq!(types.len(), 1, "v1beta1 is not served");
        let gadget = &types[0];
        assert_eq!((gadget.group.as_str(), gadget.version.as_str(), gadget.plural.as_str(), gadget.singular.as_str()), ("example.org", "v1", "gadgets", "gadget"));
        assert!(gadget.namespaced);
        assert_eq!(gadget.short_names, ["gd"]);
        assert_eq!(gadget.subresources, ["status"]);
        assert_eq!(gadget.printer_columns[0].json_path, ".spec.size");
        assert!(resource_types(&json!({"spec": {"names": {}}})).is_empty());
        let status = established_status(&gadgets(), "2026-01-01T00:00:00Z");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        assert_eq!(status["conditions"][1]["type"], "Established");
    }

    #[test]
    fn a_stored_definition_is_served_once() {
        let mut catalog = kubefold_engine::resources::builtin();
        catalog.extend(crate::workload::widget_types().into_iter().filter(|t| t.group == GROUP));
        let mut store = Store::new(catalog.into(), 100, 10, 1);
        let crds = store.resource_index(GROUP, "v1", "customresourcedefinitions").unwrap();
        store.put(crds, &super::super::store::key(None, "gadgets.example.org"), gadgets());
        assert_eq!(sync(&mut store), 1);
        assert_eq!(sync(&mut store), 0);
        let gadgets = store.resource_index("example.org", "v1", "gadgets").unwrap();
        assert_eq!(store.count(gadgets), 0);
        assert_eq!(store.catalog().len(), gadgets + 1);
    }
}
