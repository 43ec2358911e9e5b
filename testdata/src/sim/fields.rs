//! The fields each built-in type can be selected by (`fieldSelector`) and
//! their values, the simulator's own copy of kube-apiserver's rules (the
//! field label conversions of `pkg/apis/*/v1/conversion.go` and the
//! registries' `ToSelectableFields`), kept apart from kubefold's so that the
//! end-to-end tests compare two independent answers. The public list is in
//! the Kubernetes docs page "Field Selectors", section "List of supported
//! fields"
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/#list-of-supported-fields>).

use serde_json::Value;

use super::selector::{FieldSelector, SelectorError};

/// How the value of a field is read from an object.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// The string at the field's own path; `""` when absent.
    Text,
    /// The string at another path (an alias).
    TextAt(&'static [&'static str]),
    /// A boolean at a path, `"true"` or `"false"` (absent: `"false"`).
    Boolean(&'static [&'static str]),
    /// An integer at a path (absent: `"0"`).
    Integer(&'static [&'static str]),
    /// `status.podIP`: the first of `status.podIPs`, else `status.podIP`.
    PodIp,
    /// An event's `source`: `source.component`, else `reportingComponent`.
    EventSource,
    /// Accepted in a selector but never set: reads as `""`.
    Never,
}

/// `(field, how its value is read)` of the types kube-apiserver registers
/// selectable fields for; `None` for every other type, which accepts only
/// `metadata.name` and `metadata.namespace`.
fn registered(group: &str, plural: &str) -> Option<&'static [(&'static str, Read)]> {
    use Read::*;
    Some(match (group, plural) {
        ("", "pods") => &[
            ("metadata.name", Text),
            ("metadata.namespace", Text),
            ("spec.nodeName", Text),
            ("spec.restartPolicy", Text),
            ("spec.schedulerName", Text),
            ("spec.serviceAccountName", Text),
            ("spec.hostNetwork", Boolean(&["spec", "hostNetwork"])),
            ("status.phase", Text),
            ("status.podIP", PodIp),
            ("status.podIPs", Never),
            ("status.nominatedNodeName", Text),
            // The v1 name of `spec.nodeName` for old clients.
            ("spec.host", TextAt(&["spec", "nodeName"])),
        ],
        ("", "nodes") => &[("metadata.name", Text), ("spec.unschedulable", Boolean(&["spec", "unschedulable"]))],
        ("", "events") => &[
            ("metadata.name", Text),
            ("metadata.namespace", Text),
            ("involvedObject.kind", Text),
            ("involvedObject.namespace", Text),
            ("involvedObject.name", Text),
            ("involvedObject.uid", Text),
            ("involvedObject.apiVersion", Text),
            ("involvedObject.resourceVersion", Text),
            ("involvedObject.fieldPath", Text),
            ("reason", Text),
            ("reportingComponent", Text),
            ("source", EventSource),
            ("type", Text),
        ],
        ("", "secrets") => &[("metadata.name", Text), ("metadata.namespace", Text), ("type", Text)],
        ("", "namespaces") => &[("metadata.name", Text), ("status.phase", Text)],
        ("", "services") => &[
            ("metadata.name", Text),
            ("metadata.namespace", Text),
            ("spec.clusterIP", Text),
            ("spec.type", Text),
        ],
        ("", "replicationcontrollers") | ("apps", "replicasets") => &[
            ("metadata.name", Text),
            ("metadata.namespace", Text),
            ("status.replicas", Integer(&["status", "replicas"])),
        ],
        ("batch", "jobs") => &[
            ("metadata.name", Text),
            ("metadata.namespace", Text),
            ("status.successful", Integer(&["status", "succeeded"])),
        ],
        ("certificates.k8s.io", "certificatesigningrequests") => &[("metadata.name", Text), ("spec.signerName", Text)],
        _ => return None,
    })
}

/// What every other type accepts.
const METADATA: &[(&str, Read)] = &[("metadata.name", Read::Text), ("metadata.namespace", Read::Text)];

/// Refuses a selector naming a field its type cannot be selected by, with
/// kube-apiserver's message (for the first such term in the selector's order).
pub fn validate(group: &str, plural: &str, selector: &FieldSelector) -> Result<(), SelectorError> {
    let fields = registered(group, plural);
    let accepted = fields.unwrap_or(METADATA);
    let Some(term) = selector.terms.iter().find(|t| !accepted.iter().any(|(field, _)| *field == t.field)) else {
        return Ok(());
    };
    Err(SelectorError(match fields {
        Some(_) => format!("field label not supported: {}", term.field),
        None => format!("\"{}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"", term.field),
    }))
}

/// The selectable fields of an object of a type with their values, as
/// kube-apiserver formats them (a field it never sets is left out, so it
/// reads as `""`).
pub fn extract(group: &str, plural: &str, object: &Value) -> Vec<(String, String)> {
    let at = |path: &[&str]| path.iter().try_fold(object, |value, member| value.get(member));
    let text = |path: &[&str]| at(path).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = Vec::new();
    for (field, read) in registered(group, plural).unwrap_or(METADATA) {
        let own_path: Vec<&str> = field.split('.').collect();
        let value = match read {
            Read::Text => text(&own_path),
            Read::TextAt(path) => text(path),
            Read::Boolean(path) => at(path).and_then(Value::as_bool).unwrap_or(false).to_string(),
            Read::Integer(path) => at(path).and_then(Value::as_i64).unwrap_or(0).to_string(),
            Read::PodIp => match at(&["status", "podIPs"]).and_then(|ips| ips.get(0)).and_then(|ip| ip.get("ip")).and_then(Value::as_str) {
                Some(ip) => ip.to_string(),
                None => text(&["status", "podIP"]),
            },
            Read::EventSource => match at(&["source", "component"]).and_then(Value::as_str) {
                Some(component) if !component.is_empty() => component.to_string(),
                _ => text(&["reportingComponent"]),
            },
            Read::Never => continue,
        };
        out.push((field.to_string(), value));
    }
    out
}
