//! The Karmada control-plane workload (`kubefold sim --karmada`): the
//! CustomResourceDefinitions of Karmada's `Cluster`
//! (`cluster.karmada.io/v1alpha1`) and `ResourceRegistry`
//! (`search.karmada.io/v1alpha1`) with their schemas, written from Karmada's
//! API reference, and the namespaces `karmada-system` and `karmada-cluster`
//! (where karmadactl keeps the members' Secrets).

use chrono::Duration;
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Value};

use super::objects::{metadata, namespace};
use super::{ts, Cluster};

/// The served types of a Karmada control plane: `clusters` and
/// `resourceregistries`, and `customresourcedefinitions` when
/// `with_crd_type` (the `--crds` workload serves it already).
pub fn karmada_types(with_crd_type: bool) -> Vec<ResourceType> {
    let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
    let resource_type = |group: &str, plural: &str, singular: &str, kind: &str, short: &[&str], categories: &[&str]| ResourceType {
        group: group.into(),
        version: if group == "apiextensions.k8s.io" { "v1" } else { "v1alpha1" }.into(),
        plural: plural.into(),
        singular: singular.into(),
        kind: kind.into(),
        namespaced: false,
        short_names: strings(short),
        categories: strings(categories),
        subresources: strings(&["status"]),
        verbs: Vec::new(),
        printer_columns: Vec::new(),
    };
    let mut types = Vec::new();
    if with_crd_type {
        types.push(resource_type("apiextensions.k8s.io", "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", &["crd", "crds"], &["api-extensions"]));
    }
    types.push(resource_type("cluster.karmada.io", "clusters", "cluster", "Cluster", &[], &["karmada-io"]));
    types.push(resource_type("search.karmada.io", "resourceregistries", "resourceregistry", "ResourceRegistry", &["rr"], &["karmada-io"]));
    types
}

/// The objects of a Karmada control plane: the two CRDs and the namespaces
/// `karmada-system` and `karmada-cluster`.
pub fn karmada(cluster: &Cluster) -> Vec<Value> {
    let mut ids = cluster.rng(11);
    let born = cluster.now - Duration::days(3);
    let mut objects = vec![
        namespace(&mut ids, "karmada-system", born, &[]),
        namespace(&mut ids, "karmada-cluster", born, &[]),
    ];
    for (group, plural, singular, kind, short, schema, columns) in [
        ("cluster.karmada.io", "clusters", "cluster", "Cluster", json!([]), cluster_schema(), cluster_columns()),
        ("search.karmada.io", "resourceregistries", "resourceregistry", "ResourceRegistry", json!(["rr"]), resource_registry_schema(), json!([])),
    ] {
        let mut meta = metadata(&mut ids, None, &format!("{plural}.{group}"), born);
        meta.insert("generation".into(), json!(1));
        let names = json!({"plural": plural, "singular": singular, "kind": kind, "listKind": format!("{kind}List"), "shortNames": short, "categories": ["karmada-io"]});
        objects.push(json!({
            "kind": "CustomResourceDefinition",
            "apiVersion": "apiextensions.k8s.io/v1",
            "metadata": meta,
            "spec": {
                "group": group,
                "names": names,
                "scope": "Cluster",
                "versions": [{
                    "name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }],
                "conversion": {"strategy": "None"},
            },
            "status": {
                "acceptedNames": names,
                "storedVersions": ["v1alpha1"],
                "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "lastTransitionTime": ts(born)}],
            },
        }));
    }
    objects
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn object(description: &str, properties: Value) -> Value {
    json!({"type": "object", "description": description, "properties": properties})
}

/// A reference to a Secret (`LocalSecretReference` of Karmada).
fn secret_ref(description: &str) -> Value {
    let mut reference = object(description, json!({
        "namespace": string("Namespace is the namespace for the resource being referenced."),
        "name": string("Name is the name of resource being referenced."),
    }));
    reference["required"] = json!(["name", "namespace"]);
    reference
}

fn conditions() -> Value {
    json!({
        "type": "array",
        "description": "Conditions is an array of current cluster conditions.",
        "items": {
            "type": "object",
            "required": ["type", "status", "reason", "message", "lastTransitionTime"],
            "properties": {
                "type": string("type of condition in CamelCase."),
                "status": {"type": "string", "enum": ["True", "False", "Unknown"], "description": "status of the condition."},
                "reason": string("reason contains a programmatic identifier indicating the reason for the condition's last transition."),
                "message": string("message is a human readable message indicating details about the transition."),
                "lastTransitionTime": {"type": "string", "format": "date-time", "description": "lastTransitionTime is the last time the condition transitioned from one status to another."},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            },
        },
    })
}

fn cluster_columns() -> Value {
    json!([
        {"name": "Version", "type": "string", "jsonPath": ".status.kubernetesVersion"},
        {"name": "Mode", "type": "string", "jsonPath": ".spec.syncMode"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "APIEndpoint", "type": "string", "jsonPath": ".spec.apiEndpoint", "priority": 1},
    ])
}

/// The schema of `Cluster` (cluster.karmada.io/v1alpha1).
fn cluster_schema() -> Value {
    let taint = object("The node this Taint is attached to has the \"effect\" on any pod that does not tolerate the Taint.", json!({
        "key": string("Required. The taint key to be applied to a node."),
        "value": string("The taint value corresponding to the taint key."),
        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"], "description": "Required. The effect of the taint on pods that do not tolerate the taint."},
        "timeAdded": {"type": "string", "format": "date-time"},
    }));
    let spec = {
        let mut spec = object("Spec represents the specification of the desired behavior of member cluster.", json!({
            "id": {"type": "string", "maxLength": 128, "description": "ID is the unique identifier for the cluster."},
            "syncMode": {"type": "string", "enum": ["Push", "Pull"], "description": "SyncMode describes how a cluster syncs resources from karmada control plane."},
            "apiEndpoint": string("The API endpoint of the member cluster. This can be a hostname, hostname:port, IP or IP:port."),
            "secretRef": secret_ref("SecretRef represents the secret that contains mandatory credentials to access the member cluster. The secret should hold credentials as follows: - secret.data.token - secret.data.caBundle"),
            "impersonatorSecretRef": secret_ref("ImpersonatorSecretRef represents the secret that contains the token of impersonator. The secret should hold credentials as follows: - secret.data.token"),
            "insecureSkipTLSVerification": {"type": "boolean", "description": "InsecureSkipTLSVerification indicates that the karmada control plane should not confirm the validity of the serving certificate of the cluster it is connecting to."},
            "proxyURL": string("ProxyURL is the proxy URL for the cluster. If not empty, the karmada control plane will use this proxy to talk to the cluster."),
            "proxyHeader": {"type": "object", "additionalProperties": {"type": "string"}, "description": "ProxyHeader is the HTTP header required by proxy server."},
            "provider": string("Provider represents the cloud provider name of the member cluster."),
            "region": string("Region represents the region in which the member cluster is located."),
            "zone": string("Zone represents the zone in which the member cluster is located. Deprecated: This field was never been used by Karmada."),
            "zones": strings("Zones represents the failure zones(also called availability zones) of the member cluster."),
            "taints": {"type": "array", "items": taint, "description": "Taints attached to the member cluster."},
            "resourceModels": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "ResourceModels is the list of resource modeling in this cluster."},
        }));
        spec["required"] = json!(["syncMode"]);
        spec
    };
    let status = object("Status represents the status of member cluster.", json!({
        "kubernetesVersion": string("KubernetesVersion represents version of the member cluster."),
        "apiEnablements": {"type": "array", "description": "APIEnablements represents the list of APIs installed on the member cluster.", "items": object("APIEnablement is a list of API resource.", json!({
            "groupVersion": string("GroupVersion is the group and version this APIEnablement is for."),
            "resources": {"type": "array", "items": object("APIResource specifies the name and kind names for the resource.", json!({"name": string("Name is the plural name of the resource."), "kind": string("Kind is the kind for the resource.")}))},
        }))},
        "conditions": conditions(),
        "nodeSummary": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "NodeSummary represents the summary of nodes status in the member cluster."},
        "resourceSummary": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "ResourceSummary represents the summary of resources in the member cluster."},
        "remedyActions": strings("RemedyActions represents the remedy actions that needs to be performed on the cluster."),
    }));
    let mut schema = object("Cluster represents the desired state and status of a member cluster.", json!({
        "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
        "kind": string("Kind is a string value representing the REST resource this object represents."),
        "metadata": {"type": "object"},
        "spec": spec,
        "status": status,
    }));
    schema["required"] = json!(["spec"]);
    schema
}

/// The schema of `ResourceRegistry` (search.karmada.io/v1alpha1).
fn resource_registry_schema() -> Value {
    let requirement = |description: &str| {
        let mut r = object(description, json!({
            "key": string("key is the label key that the selector applies to."),
            "operator": string("operator represents a key's relationship to a set of values."),
            "values": strings("values is an array of string values."),
        }));
        r["required"] = json!(["key", "operator"]);
        r
    };
    let label_selector = object("LabelSelector is a filter to select member clusters by labels.", json!({
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "matchLabels is a map of {key,value} pairs."},
        "matchExpressions": {"type": "array", "items": requirement("A label selector requirement."), "description": "matchExpressions is a list of label selector requirements. The requirements are ANDed."},
    }));
    let field_selector = object("FieldSelector is a filter to select member clusters by fields. The key(field) of the match expression should be 'provider', 'region', or 'zone', and the operator of the match expression should be 'In' or 'NotIn'.", json!({
        "matchExpressions": {"type": "array", "items": requirement("A node selector requirement."), "description": "A list of field selector requirements."},
    }));
    let target_cluster = object("TargetCluster specifies the clusters where the cache system collect resource from.", json!({
        "clusterNames": strings("ClusterNames is the list of clusters to be selected."),
        "exclude": strings("ExcludedClusters is the list of clusters to be ignored."),
        "labelSelector": label_selector,
        "fieldSelector": field_selector,
    }));
    let mut resource_selector = object("ResourceSelector specifies the resources type and its scope.", json!({
        "apiVersion": string("APIVersion represents the API version of the target resources."),
        "kind": string("Kind represents the kind of the target resources."),
        "namespace": string("Namespace of the target resource. Default is empty, which means all namespaces."),
    }));
    resource_selector["required"] = json!(["apiVersion", "kind"]);
    let mut spec = object("Spec represents the desired behavior of ResourceRegistry.", json!({
        "targetCluster": target_cluster,
        "resourceSelectors": {"type": "array", "items": resource_selector, "description": "ResourceSelectors specifies the resources type that should be cached by cache system."},
        "backendStore": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "BackendStoreConfig specifies backend store."},
    }));
    spec["required"] = json!(["resourceSelectors", "targetCluster"]);
    let status = object("Status represents the status of ResourceRegistry.", json!({"conditions": conditions()}));
    let mut schema = object("ResourceRegistry represents the configuration of the cache scope, mainly describes which resources in which clusters should be cached.", json!({
        "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
        "kind": string("Kind is a string value representing the REST resource this object represents."),
        "metadata": {"type": "object"},
        "spec": spec,
        "status": status,
    }));
    schema["required"] = json!(["spec"]);
    schema
}
