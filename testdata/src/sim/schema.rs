//! What the simulator knows of the built-in types' schemas: how each list
//! field merges. Strategic merge patch reads the Go struct tags
//! `patchStrategy`/`patchMergeKey`; server-side apply reads the OpenAPI
//! markers `x-kubernetes-list-type`/`x-kubernetes-list-map-keys`. Both are
//! transcribed here from `k8s.io/api` (core/v1, apps/v1, discovery/v1) for
//! the fields of the types the simulator serves.
//!
//! Paths are field names from the object root, list levels left out
//! (`spec.containers.ports`). A pod spec is found at `spec` of a Pod and at
//! `spec.template.spec` of the apps/v1 controllers.

/// How a list merges in server-side apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// `listType=map`: items are identified by these key fields.
    Map(&'static [&'static str]),
    /// `listType=set`: a set of scalars.
    Set,
    /// `listType=atomic` (the default): the list is replaced as a whole.
    Atomic,
}

/// How a list merges in strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchStrategy {
    /// `patchStrategy=merge` with `patchMergeKey`: items merge by that key.
    MergeByKey(&'static str),
    /// `patchStrategy=merge` on a list of scalars: union.
    MergePrimitives,
    /// No strategy: the patch's list replaces the original.
    Replace,
}

/// The merge rules of one list field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListSchema {
    /// Server-side apply.
    pub list_type: ListType,
    /// Strategic merge patch.
    pub strategy: PatchStrategy,
    /// `patchStrategy=merge,retainKeys` on the list's items (`$retainKeys`).
    pub retain_keys: bool,
}

const ATOMIC: ListSchema = ListSchema { list_type: ListType::Atomic, strategy: PatchStrategy::Replace, retain_keys: false };

const fn keyed(keys: &'static [&'static str], merge_key: &'static str) -> ListSchema {
    ListSchema { list_type: ListType::Map(keys), strategy: PatchStrategy::MergeByKey(merge_key), retain_keys: false }
}

/// The path relative to the object's pod spec, if it is inside one.
fn in_pod_spec<'a>(kind: &str, path: &'a [&'a str]) -> Option<&'a [&'a str]> {
    match kind {
        "Pod" => path.strip_prefix(&["spec"][..]),
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" | "PodTemplate" => {
            path.strip_prefix(&["spec", "template", "spec"][..])
        }
        _ => None,
    }
}

fn pod_spec_list(path: &[&str]) -> ListSchema {
    const CONTAINERS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
    match path {
        [c] if CONTAINERS.contains(c) => keyed(&["name"], "name"),
        [c, "ports"] if CONTAINERS.contains(c) => keyed(&["containerPort", "protocol"], "containerPort"),
        [c, "env"] if CONTAINERS.contains(c) => keyed(&["name"], "name"),
        [c, "volumeMounts"] if CONTAINERS.contains(c) => keyed(&["mountPath"], "mountPath"),
        [c, "volumeDevices"] if CONTAINERS.contains(c) => keyed(&["devicePath"], "devicePath"),
        [c, "resources", "claims"] if CONTAINERS.contains(c) => {
            ListSchema { list_type: ListType::Map(&["name"]), strategy: PatchStrategy::Replace, retain_keys: false }
        }
        ["volumes"] => ListSchema { retain_keys: true, ..keyed(&["name"], "name") },
        ["resourceClaims"] => ListSchema { retain_keys: true, ..keyed(&["name"], "name") },
        ["imagePullSecrets"] => keyed(&["name"], "name"),
        ["schedulingGates"] => keyed(&["name"], "name"),
        ["hostAliases"] => keyed(&["ip"], "ip"),
        ["topologySpreadConstraints"] => keyed(&["topologyKey", "whenUnsatisfiable"], "topologyKey"),
        _ => ATOMIC,
    }
}

/// The merge rules of the list at `path` in an object of `kind`.
pub fn list_schema(kind: &str, path: &[&str]) -> ListSchema {
    if let Some(rest) = in_pod_spec(kind, path) {
        return pod_spec_list(rest);
    }
    match (kind, path) {
        (_, ["metadata", "finalizers"]) | (_, ["spec", "template", "metadata", "finalizers"]) => {
            ListSchema { list_type: ListType::Set, strategy: PatchStrategy::MergePrimitives, retain_keys: false }
        }
        (_, ["metadata", "ownerReferences"]) | (_, ["spec", "template", "metadata", "ownerReferences"]) => {
            keyed(&["uid"], "uid")
        }
        ("Pod", ["status", "conditions"]) => keyed(&["type"], "type"),
        ("Pod", ["status", "podIPs"] | ["status", "hostIPs"]) => keyed(&["ip"], "ip"),
        ("Service", ["spec", "ports"]) => keyed(&["port", "protocol"], "port"),
        ("Service", ["status", "conditions"]) => keyed(&["type"], "type"),
        ("Node", ["spec", "podCIDRs"]) => {
            ListSchema { list_type: ListType::Set, strategy: PatchStrategy::MergePrimitives, retain_keys: false }
        }
        ("Node", ["status", "conditions"] | ["status", "addresses"]) => keyed(&["type"], "type"),
        ("Namespace", ["status", "conditions"]) => keyed(&["type"], "type"),
        ("Deployment" | "ReplicaSet" | "StatefulSet", ["status", "conditions"]) => keyed(&["type"], "type"),
        _ => ATOMIC,
    }
}

/// Whether the object at `path` is a map of arbitrary keys (labels,
/// resource quantities, ConfigMap data) rather than a struct: its entries
/// are owned one by one in server-side apply.
pub fn is_map_field(kind: &str, path: &[&str]) -> bool {
    let Some(last) = path.last() else { return false };
    match *last {
        "labels" | "annotations" | "nodeSelector" | "matchLabels" | "limits" | "requests" | "capacity"
        | "allocatable" | "data" | "binaryData" | "allocatedResources" | "volumeAttributes" | "parameters" => true,
        "selector" => kind == "Service" && path == ["spec", "selector"],
        _ => false,
    }
}

/// Whether the object at `path` is atomic (replaced as a whole): a
/// `metav1.LabelSelector` (`structType=atomic`) such as a controller's `spec.selector`.
pub fn is_atomic_struct(kind: &str, path: &[&str]) -> bool {
    matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet") && path == ["spec", "selector"]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_specs_in_pods_and_templates_share_rules() {
        assert_eq!(list_schema("Pod", &["spec", "containers"]).strategy, PatchStrategy::MergeByKey("name"));
        assert_eq!(
            list_schema("Deployment", &["spec", "template", "spec", "containers", "ports"]).list_type,
            ListType::Map(&["containerPort", "protocol"])
        );
        assert!(list_schema("Pod", &["spec", "volumes"]).retain_keys);
        assert_eq!(list_schema("Pod", &["spec", "tolerations"]), ATOMIC);
        assert_eq!(list_schema("Pod", &["spec", "containers", "volumeMounts"]).strategy, PatchStrategy::MergeByKey("mountPath"));
    }

    #[test]
    fn metadata_and_status_lists() {
        assert_eq!(list_schema("ConfigMap", &["metadata", "finalizers"]).list_type, ListType::Set);
        assert_eq!(list_schema("Node", &["status", "conditions"]).strategy, PatchStrategy::MergeByKey("type"));
        assert_eq!(list_schema("Service", &["spec", "ports"]).strategy, PatchStrategy::MergeByKey("port"));
        assert_eq!(list_schema("EndpointSlice", &["endpoints"]), ATOMIC);
        assert!(is_map_field("Pod", &["metadata", "labels"]));
        assert!(is_map_field("Service", &["spec", "selector"]));
        assert!(!is_map_field("Deployment", &["spec", "selector"]));
    }
}
