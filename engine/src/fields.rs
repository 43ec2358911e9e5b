//! The fields each resource type can be selected by with `fieldSelector`,
//! as kube-apiserver registers them.
//!
//! Two sources in kube-apiserver define them: the field label conversion
//! functions (`pkg/apis/core/v1/conversion.go`, `AddFieldLabelConversionFunc`)
//! decide which fields a selector may name, and the registries'
//! `ToSelectableFields`/`GetAttrs` (`pkg/registry/*/strategy.go`) compute
//! their values from an object. Types without a conversion function accept
//! only `metadata.name` and `metadata.namespace`
//! (`runtime.DefaultMetaV1FieldSelectorConversion`). The public list is in the
//! Kubernetes docs page "Field Selectors"
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/#list-of-supported-fields>).

use crate::json::Json;

use crate::selector::{FieldSelector, Result, SelectorError};
use crate::keep::Keep;

/// Types that accept only object metadata fields.
const METADATA_ONLY: &[&str] = &["metadata.name", "metadata.namespace"];

/// `pod.ToSelectableFields` and the v1 Pod field label conversion, which
/// also accepts `status.podIPs` (never in the field set, so it reads as
/// `""`) and `spec.host`, an alias of `spec.nodeName` for old clients.
const POD: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    "spec.host",
];

/// `node.NodeToSelectableFields`: nodes are cluster-scoped.
const NODE: &[&str] = &["metadata.name", "spec.unschedulable"];

/// `event.ToSelectableFields` (core/v1 field names).
const EVENT: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// `secret.SelectableFields`.
const SECRET: &[&str] = &["metadata.name", "metadata.namespace", "type"];

/// `namespace.NamespaceToSelectableFields`: namespaces are cluster-scoped.
const NAMESPACE: &[&str] = &["metadata.name", "status.phase"];

/// `replicaset.ReplicaSetToSelectableFields` and its ReplicationController twin.
const REPLICAS: &[&str] = &["metadata.name", "metadata.namespace", "status.replicas"];

/// `service.SelectableFields`.
const SERVICE: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.clusterIP",
    "spec.type",
];

/// `job.JobToSelectableFields`.
const JOB: &[&str] = &["metadata.name", "metadata.namespace", "status.successful"];

/// `certificates.SelectableFields`: CSRs are cluster-scoped.
const CSR: &[&str] = &["metadata.name", "spec.signerName"];

/// The registered fields of a type, or `None` for types kube-apiserver
/// registers no field label conversion for.
fn registered(group: &str, plural: &str) -> Option<&'static [&'static str]> {
    Some(match (group, plural) {
        ("", "pods") => POD,
        ("", "nodes") => NODE,
        ("", "events") => EVENT,
        ("", "secrets") => SECRET,
        ("", "namespaces") => NAMESPACE,
        ("", "services") => SERVICE,
        ("", "replicationcontrollers") | ("apps", "replicasets") => REPLICAS,
        ("batch", "jobs") => JOB,
        ("certificates.k8s.io", "certificatesigningrequests") => CSR,
        _ => return None,
    })
}

/// What [`extract`] reads of an object of a type, for a pruned parse
/// ([`crate::scan::prune`] of each top-level member named here);
/// `metadata.name` and `metadata.namespace` are read apart.
pub fn keep(group: &str, plural: &str) -> &'static Keep {
    use Keep::{All, Fields};
    static POD_KEEP: Keep = Fields(&[
        (
            "spec",
            Fields(&[
                ("nodeName", All),
                ("restartPolicy", All),
                ("schedulerName", All),
                ("serviceAccountName", All),
                ("hostNetwork", All),
            ]),
        ),
        ("status", Fields(&[("phase", All), ("podIP", All), ("podIPs", All), ("nominatedNodeName", All)])),
    ]);
    static NODE_KEEP: Keep = Fields(&[("spec", Fields(&[("unschedulable", All)]))]);
    static EVENT_KEEP: Keep =
        Fields(&[("involvedObject", All), ("reason", All), ("reportingComponent", All), ("source", All), ("type", All)]);
    static SECRET_KEEP: Keep = Fields(&[("type", All)]);
    static NAMESPACE_KEEP: Keep = Fields(&[("status", Fields(&[("phase", All)]))]);
    static REPLICAS_KEEP: Keep = Fields(&[("status", Fields(&[("replicas", All)]))]);
    static SERVICE_KEEP: Keep = Fields(&[("spec", Fields(&[("clusterIP", All), ("type", All)]))]);
    static JOB_KEEP: Keep = Fields(&[("status", Fields(&[("succeeded", All)]))]);
    static CSR_KEEP: Keep = Fields(&[("spec", Fields(&[("signerName", All)]))]);
    static NOTHING: Keep = Fields(&[]);
    match (group, plural) {
        ("", "pods") => &POD_KEEP,
        ("", "nodes") => &NODE_KEEP,
        ("", "events") => &EVENT_KEEP,
        ("", "secrets") => &SECRET_KEEP,
        ("", "namespaces") => &NAMESPACE_KEEP,
        ("", "services") => &SERVICE_KEEP,
        ("", "replicationcontrollers") | ("apps", "replicasets") => &REPLICAS_KEEP,
        ("batch", "jobs") => &JOB_KEEP,
        ("certificates.k8s.io", "certificatesigningrequests") => &CSR_KEEP,
        _ => &NOTHING,
    }
}

/// Fields `fieldSelector` accepts for a type: always metadata.name and metadata.namespace (namespaced types), plus the type's own.
///
/// Cluster-scoped types with their own list (nodes, namespaces) do not
/// accept `metadata.namespace`, as in kube-apiserver; any other type accepts
/// both metadata fields.
pub fn selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    registered(group, plural).unwrap_or(METADATA_ONLY)
}

/// Extracts those fields from an object as (field, value) pairs, values formatted as kube-apiserver does (booleans "true"/"false", missing -> "").
///
/// Missing numbers read as `"0"` and missing booleans as `"false"`, the Go
/// zero values kube-apiserver formats. `status.podIPs` is not extracted
/// (kube-apiserver accepts it but never sets it, so it matches only `""`).
pub fn extract<J: Json>(group: &str, plural: &str, object: &J) -> Vec<(String, String)> {
    let of = Computed::of(group, plural);
    selectable_fields(group, plural)
        .iter()
        .filter_map(|field| {
            field_value(of, field, object).map(|value| (field.to_string(), value))
        })
        .collect()
}

/// The types whose fields are not all read as plain strings at their
/// paths, told apart once per object rather than by names for each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Computed {
    Pod,
    Node,
    Job,
    Event,
    Other,
}

impl Computed {
    fn of(group: &str, plural: &str) -> Computed {
        match (group, plural) {
            ("", "pods") => Computed::Pod,
            ("", "nodes") => Computed::Node,
            ("batch", "jobs") => Computed::Job,
            ("", "events") => Computed::Event,
            _ => Computed::Other,
        }
    }
}

/// Rejects selectors that use unsupported fields like kube-apiserver: error message `field label not supported: <field>`.
///
/// Types without a registered list fail with kube-apiserver's other
/// message, `"<field>" is not a known field selector: only
/// "metadata.name", "metadata.namespace"`. The first unsupported term (in
/// the selector's sorted order) is reported.
pub fn validate(group: &str, plural: &str, selector: &FieldSelector) -> Result<()> {
    let registered = registered(group, plural);
    let accepted = registered.unwrap_or(METADATA_ONLY);
    match selector
        .requirements
        .iter()
        .find(|r| !accepted.contains(&r.field.as_str()))
    {
        None => Ok(()),
        Some(unsupported) if registered.is_some() => {
            Err(SelectorError::UnsupportedField(unsupported.field.clone()))
        }
        Some(unsupported) => Err(SelectorError::UnknownField(unsupported.field.clone())),
    }
}

/// The value of one selectable field, `None` for a field never set.
fn field_value<J: Json>(of: Computed, field: &str, object: &J) -> Option<String> {
    let text = |pointer: &str| {
        object.walk(pointer)
            .and_then(J::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let boolean = |pointer: &str| {
        object.walk(pointer)
            .and_then(J::as_bool)
            .unwrap_or(false)
            .to_string()
    };
    let integer = |pointer: &str| {
        object.walk(pointer)
            .and_then(J::as_i64)
            .unwrap_or(0)
            .to_string()
    };
    let value = match (of, field) {
        (Computed::Pod, "spec.hostNetwork") => boolean("/spec/hostNetwork"),
        (Computed::Pod, "spec.host") => text("/spec/nodeName"),
        (Computed::Pod, "status.podIPs") => return None,
        // The internal Pod keeps only `podIPs`; v1 `podIP` is its first entry.
        (Computed::Pod, "status.podIP") => match object.walk("/status/podIPs/0/ip")
            .and_then(J::as_str)
        {
            Some(ip) => ip.to_string(),
            None => text("/status/podIP"),
        },
        (Computed::Node, "spec.unschedulable") => boolean("/spec/unschedulable"),
        (_, "status.replicas") => integer("/status/replicas"),
        (Computed::Job, "status.successful") => integer("/status/succeeded"),
        // `source` is the reporting component of old and new events alike.
        (Computed::Event, "source") => {
            match object.walk("/source/component").and_then(J::as_str) {
                Some(component) if !component.is_empty() => component.to_string(),
                _ => text("/reportingComponent"),
            }
        }
        _ => field
            .split('.')
            .try_fold(object, |value, member| value.get(member))
            .and_then(J::as_str)
            .unwrap_or_default()
            .to_string(),
    };
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn lists_the_fields_kube_apiserver_registers() {
        assert_eq!(
            selectable_fields("", "pods"),
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
                "spec.host",
            ]
        );
        assert_eq!(
            selectable_fields("", "nodes"),
            &["metadata.name", "spec.unschedulable"]
        );
        assert_eq!(
            selectable_fields("", "namespaces"),
            &["metadata.name", "status.phase"]
        );
        assert_eq!(
            selectable_fields("", "secrets"),
            &["metadata.name", "metadata.namespace", "type"]
        );
        assert_eq!(
            selectable_fields("", "services"),
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.clusterIP",
                "spec.type"
            ]
        );
        assert_eq!(
            selectable_fields("apps", "replicasets"),
            &["metadata.name", "metadata.namespace", "status.replicas"]
        );
        assert_eq!(selectable_fields("", "events").len(), 13);
        for (group, plural) in [
            ("apps", "deployments"),
            ("", "configmaps"),
            ("discovery.k8s.io", "endpointslices"),
        ] {
            assert_eq!(
                selectable_fields(group, plural),
                &["metadata.name", "metadata.namespace"]
            );
        }
    }

    #[test]
    fn extracts_pod_fields() {
        // The fields of kubernetes/api testdata/HEAD/core.v1.Pod.json.
        let pod = json!({
            "metadata": {"name": "nameValue", "namespace": "namespaceValue"},
            "spec": {
                "nodeName": "nodeNameValue", "restartPolicy": "restartPolicyValue",
                "schedulerName": "schedulerNameValue", "serviceAccountName": "serviceAccountNameValue",
                "hostNetwork": true
            },
            "status": {
                "phase": "phaseValue", "podIP": "podIPValue", "podIPs": [{"ip": "ipValue"}],
                "nominatedNodeName": "nominatedNodeNameValue"
            }
        });
        assert_eq!(
            extract("", "pods", &pod),
            pairs(&[
                ("metadata.name", "nameValue"),
                ("metadata.namespace", "namespaceValue"),
                ("spec.nodeName", "nodeNameValue"),
                ("spec.restartPolicy", "restartPolicyValue"),
                ("spec.schedulerName", "schedulerNameValue"),
                ("spec.serviceAccountName", "serviceAccountNameValue"),
                ("spec.hostNetwork", "true"),
                ("status.phase", "phaseValue"),
                ("status.podIP", "ipValue"),
                ("status.nominatedNodeName", "nominatedNodeNameValue"),
                ("spec.host", "nodeNameValue"),
            ])
        );
    }

    #[test]
    fn extracts_zero_values_for_missing_fields() {
        let pending = json!({
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"restartPolicy": "Always", "schedulerName": "default-scheduler"},
            "status": {"phase": "Pending", "podIP": "10.0.0.7"}
        });
        let fields = extract("", "pods", &pending);
        let get = |name: &str| {
            fields
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("spec.nodeName"), Some(""));
        assert_eq!(get("spec.hostNetwork"), Some("false"));
        assert_eq!(get("status.podIP"), Some("10.0.0.7"));
        assert_eq!(get("status.podIPs"), None);
        assert_eq!(
            extract("apps", "replicasets", &json!({"metadata": {"name": "rs"}}))[2],
            ("status.replicas".into(), "0".into())
        );
        assert_eq!(
            extract("", "nodes", &json!({"metadata": {"name": "n1"}})),
            pairs(&[("metadata.name", "n1"), ("spec.unschedulable", "false")])
        );
    }

    #[test]
    fn extracts_fields_of_other_types() {
        // Values from the kubernetes/api testdata fixtures of each type.
        let event = json!({
            "metadata": {"name": "nameValue", "namespace": "namespaceValue"},
            "involvedObject": {
                "kind": "kindValue", "namespace": "namespaceValue", "name": "nameValue", "uid": "uidValue",
                "apiVersion": "apiVersionValue", "resourceVersion": "resourceVersionValue", "fieldPath": "fieldPathValue"
            },
            "reason": "reasonValue", "source": {"component": "componentValue", "host": "hostValue"},
            "type": "typeValue", "reportingComponent": "reportingComponentValue"
        });
        assert_eq!(
            extract("", "events", &event),
            pairs(&[
                ("metadata.name", "nameValue"),
                ("metadata.namespace", "namespaceValue"),
                ("involvedObject.kind", "kindValue"),
                ("involvedObject.namespace", "namespaceValue"),
                ("involvedObject.name", "nameValue"),
                ("involvedObject.uid", "uidValue"),
                ("involvedObject.apiVersion", "apiVersionValue"),
                ("involvedObject.resourceVersion", "resourceVersionValue"),
                ("involvedObject.fieldPath", "fieldPathValue"),
                ("reason", "reasonValue"),
                ("reportingComponent", "reportingComponentValue"),
                ("source", "componentValue"),
                ("type", "typeValue"),
            ])
        );
        // events.k8s.io-style events have no source.component: source is the reporting controller.
        let new_style =
            json!({"metadata": {"name": "e"}, "reportingComponent": "kubelet", "source": {}});
        assert!(extract("", "events", &new_style).contains(&("source".into(), "kubelet".into())));

        let node = json!({"metadata": {"name": "nameValue", "namespace": "namespaceValue"}, "spec": {"unschedulable": true}});
        assert_eq!(
            extract("", "nodes", &node),
            pairs(&[
                ("metadata.name", "nameValue"),
                ("spec.unschedulable", "true")
            ])
        );
        let namespace = json!({"metadata": {"name": "team-a"}, "status": {"phase": "Terminating"}});
        assert_eq!(
            extract("", "namespaces", &namespace),
            pairs(&[("metadata.name", "team-a"), ("status.phase", "Terminating")])
        );
        let service = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"clusterIP": "10.96.0.10", "type": "ClusterIP"}});
        assert_eq!(
            extract("", "services", &service),
            pairs(&[
                ("metadata.name", "web"),
                ("metadata.namespace", "default"),
                ("spec.clusterIP", "10.96.0.10"),
                ("spec.type", "ClusterIP")
            ])
        );
        let secret = json!({"metadata": {"name": "token", "namespace": "default"}, "type": "kubernetes.io/tls"});
        assert_eq!(
            extract("", "secrets", &secret)[2],
            ("type".into(), "kubernetes.io/tls".into())
        );
        let replicaset = json!({"metadata": {"name": "web-5d4f", "namespace": "default"}, "status": {"replicas": 3}});
        assert_eq!(
            extract("apps", "replicasets", &replicaset)[2],
            ("status.replicas".into(), "3".into())
        );
        let deployment =
            json!({"metadata": {"name": "web", "namespace": "default"}, "status": {"replicas": 3}});
        assert_eq!(
            extract("apps", "deployments", &deployment),
            pairs(&[("metadata.name", "web"), ("metadata.namespace", "default")])
        );
    }

    #[test]
    fn selectors_match_extracted_fields() {
        let pod = json!({
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"nodeName": "node-1", "restartPolicy": "Always"},
            "status": {"phase": "Running"}
        });
        let fields = extract("", "pods", &pod);
        let cases = [
            ("status.phase=Running", true),
            ("status.phase!=Running,spec.restartPolicy=Always", false),
            ("spec.nodeName=node-1,metadata.namespace=default", true),
            ("spec.host=node-1", true),
            ("spec.hostNetwork=false", true),
            ("status.nominatedNodeName=", true),
            ("status.podIPs=10.0.0.1", false),
        ];
        for (input, selected) in cases {
            let selector = FieldSelector::parse(input).unwrap();
            validate("", "pods", &selector).unwrap();
            assert_eq!(selector.matches_pairs(&fields), selected, "{input}");
        }
    }

    #[test]
    fn rejects_unsupported_fields_like_kube_apiserver() {
        let cases = [
            ("", "pods", "spec.nodeName=a,status.phase=Running", None),
            ("", "pods", "spec.containers=a", Some("field label not supported: spec.containers")),
            ("", "nodes", "metadata.namespace=default", Some("field label not supported: metadata.namespace")),
            ("", "nodes", "spec.unschedulable=true", None),
            ("", "namespaces", "status.phase=Active", None),
            ("", "events", "type=Warning,involvedObject.kind=Pod", None),
            ("", "events", "message=x", Some("field label not supported: message")),
            ("", "services", "spec.type=NodePort", None),
            // Sorted order: `a.b` comes before `status.phase`.
            ("", "pods", "status.phase=Running,a.b=c", Some("field label not supported: a.b")),
            ("apps", "deployments", "metadata.name=web", None),
            (
                "apps",
                "deployments",
                "status.replicas=1",
                Some("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""),
            ),
            (
                "networking.k8s.io",
                "ingresses",
                "foo.bar=baz",
                Some("\"foo.bar\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""),
            ),
        ];
        for (group, plural, input, expected) in cases {
            let selector = FieldSelector::parse(input).unwrap();
            let result = validate(group, plural, &selector).map_err(|e| e.to_string());
            assert_eq!(result.err().as_deref(), expected, "{plural}: {input}");
        }
        assert!(validate("", "pods", &FieldSelector::default()).is_ok());
    }
}
