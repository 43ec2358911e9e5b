//! Object validation answered with 422 Invalid, with kube-apiserver's field
//! paths and messages (`k8s.io/apimachinery/pkg/util/validation`,
//! `pkg/apis/core/validation`). The rules are those of the Kubernetes docs
//! page "Object Names and IDs" and "Labels and Selectors" (syntax and
//! character set); per-type rules cover what clients commonly trip over.

use serde_json::Value;

use super::status::Cause;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

/// The rule an object name must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain, at most 253 characters (most types).
    Subdomain,
    /// RFC 1123 label, at most 63 characters (namespaces).
    Label,
    /// RFC 1035 label, at most 63 characters (services).
    Dns1035,
}

/// The name rule of a resource type (`ValidateXName` of its registry).
pub fn name_rule(group: &str, plural: &str) -> NameRule {
    match (group, plural) {
        ("", "namespaces") => NameRule::Label,
        ("", "services") => NameRule::Dns1035,
        _ => NameRule::Subdomain,
    }
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn dns1123_label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-')
}

/// The errors of `IsDNS1123Subdomain`.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if !s.split('.').all(dns1123_label_ok) {
        errors.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*')"
        ));
    }
    errors
}

/// The errors of `IsDNS1123Label`.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !dns1123_label_ok(s) {
        errors.push(format!(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
        ));
    }
    errors
}

/// The errors of `IsDNS1035Label`.
pub fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = !b.is_empty() && b[0].is_ascii_lowercase() && dns1123_label_ok(s);
    if !ok {
        errors.push(format!(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '{DNS1035_LABEL_FMT}')"
        ));
    }
    errors
}

fn qualified_name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// The errors of `IsQualifiedName` (label and annotation keys).
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) if !name.contains('/') => (Some(prefix), name),
        Some(_) => {
            errors.push(format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errors;
        }
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_string());
        } else {
            errors.extend(dns1123_subdomain_errors(prefix).into_iter().map(|e| format!("prefix part {e}")));
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !qualified_name_part_ok(name) {
        errors.push(format!(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"
        ));
    }
    errors
}

/// The errors of `IsValidLabelValue`.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !qualified_name_part_ok(value) {
        errors.push(format!(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '{LABEL_VALUE_FMT}')"
        ));
    }
    errors
}

/// The field errors of an object's metadata: name, labels, annotations.
pub fn metadata_causes(rule: NameRule, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause::required("metadata.name", "name or generateName is required"));
    } else {
        let errors = match rule {
            NameRule::Subdomain => dns1123_subdomain_errors(name),
            NameRule::Label => dns1123_label_errors(name),
            NameRule::Dns1035 => dns1035_label_errors(name),
        };
        causes.extend(errors.iter().map(|e| Cause::invalid("metadata.name", name, e)));
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (key, value) in labels {
            for e in qualified_name_errors(key) {
                causes.push(Cause::invalid("metadata.labels", key, &e));
            }
            match value.as_str() {
                Some(v) => causes.extend(label_value_errors(v).iter().map(|e| Cause::invalid("metadata.labels", v, e))),
                None => causes.push(Cause::invalid("metadata.labels", &value.to_string(), "label values must be strings")),
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            for e in qualified_name_errors(key) {
                causes.push(Cause::invalid("metadata.annotations", key, &e));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                field: "metadata.annotations".into(),
                message: format!("Too long: may not be more than 262144 bytes (got {total})"),
            });
        }
    }
    causes
}

/// Per-type field errors of a new or updated object.
pub fn type_causes(group: &str, plural: &str, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match (group, plural) {
        ("", "pods") => containers_causes("spec", &object["spec"], &mut causes),
        ("apps", "deployments" | "replicasets" | "statefulsets") => {
            let spec = &object["spec"];
            let selector = &spec["selector"];
            if !selector.is_object() {
                causes.push(Cause::required("spec.selector", ""));
            } else if let Ok(parsed) = super::selector::LabelSelector::from_object(selector) {
                if parsed.is_empty() {
                    causes.push(Cause::invalid("spec.selector", &selector.to_string(), "empty selector is invalid for deployment"));
                }
                let labels: std::collections::BTreeMap<String, String> = spec["template"]["metadata"]["labels"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default();
                if !parsed.is_empty() && !parsed.matches_map(&labels) {
                    causes.push(Cause::invalid(
                        "spec.template.metadata.labels",
                        &serde_json::to_string(&labels).unwrap_or_default(),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            if let Some(replicas) = spec.get("replicas").and_then(Value::as_i64) {
                if replicas < 0 {
                    causes.push(Cause::invalid("spec.replicas", &replicas.to_string(), "must be greater than or equal to 0"));
                }
            }
            containers_causes("spec.template.spec", &spec["template"]["spec"], &mut causes);
        }
        _ => {}
    }
    causes
}

fn containers_causes(path: &str, spec: &Value, causes: &mut Vec<Cause>) {
    match spec["containers"].as_array() {
        Some(containers) if !containers.is_empty() => {
            let mut seen = std::collections::BTreeSet::new();
            for (i, c) in containers.iter().enumerate() {
                let name = c["name"].as_str().unwrap_or_default();
                let field = format!("{path}.containers[{i}].name");
                if name.is_empty() {
                    causes.push(Cause::required(&field, ""));
                } else {
                    for e in dns1123_label_errors(name) {
                        causes.push(Cause::invalid(&field, name, &e));
                    }
                    if !seen.insert(name.to_string()) {
                        causes.push(Cause { reason: "FieldValueDuplicate".into(), field, message: format!("Duplicate value: {}", serde_json::json!(name)) });
                    }
                }
                if c["image"].as_str().unwrap_or_default().trim().is_empty() {
                    causes.push(Cause::required(&format!("{path}.containers[{i}].image"), ""));
                }
            }
        }
        _ => causes.push(Cause::required(&format!("{path}.containers"), "")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subdomains_labels_and_dns1035() {
        assert!(dns1123_subdomain_errors("web-0.example").is_empty());
        assert!(dns1123_subdomain_errors("web-0_member1").len() == 1);
        assert!(!dns1123_subdomain_errors("Web").is_empty());
        assert!(!dns1123_subdomain_errors("-a").is_empty());
        assert_eq!(dns1123_subdomain_errors(&"a".repeat(254))[0], "must be no more than 253 characters");
        assert!(dns1123_label_errors("a.b").len() == 1);
        assert!(dns1035_label_errors("1abc").len() == 1);
        assert!(dns1035_label_errors("abc-1").is_empty());
    }

    #[test]
    fn label_keys_and_values() {
        assert!(qualified_name_errors("app.kubernetes.io/name").is_empty());
        assert!(qualified_name_errors("node-role.kubernetes.io/control-plane").is_empty());
        assert!(!qualified_name_errors("a/b/c").is_empty());
        assert!(!qualified_name_errors("-x").is_empty());
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("My_value.1").is_empty());
        assert!(!label_value_errors("has space").is_empty());
    }

    #[test]
    fn metadata_causes_name_the_field_and_value() {
        let causes = metadata_causes(NameRule::Subdomain, &json!({"metadata": {"name": "Bad_Name"}}));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
        assert!(causes[0].message.starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));
        let missing = metadata_causes(NameRule::Subdomain, &json!({"metadata": {}}));
        assert_eq!(missing[0].message, "Required value: name or generateName is required");
        let label = metadata_causes(NameRule::Subdomain, &json!({"metadata": {"name": "a", "labels": {"k": "bad value"}}}));
        assert_eq!(label[0].field, "metadata.labels");
    }

    #[test]
    fn pods_need_containers_with_images() {
        let causes = type_causes("", "pods", &json!({"spec": {}}));
        assert_eq!(causes[0].field, "spec.containers");
        let causes = type_causes("", "pods", &json!({"spec": {"containers": [{"name": "a"}]}}));
        assert_eq!(causes[0].field, "spec.containers[0].image");
        assert!(type_causes("", "pods", &json!({"spec": {"containers": [{"name": "a", "image": "nginx"}]}})).is_empty());
    }
}
