//! Schemas inside OpenAPI documents: references, the closure of the types a
//! document needs, the group-version-kind extension, Swagger 2.0
//! definitions from OpenAPI 3.0 schemas, and the paths of a resource type.
//! Shared by the simulator, which generates its documents, and kubefold,
//! which merges its members' documents.

use serde_json::{json, Map, Value};

/// How OpenAPI 3.0 documents refer to a schema.
pub const V3_REF_PREFIX: &str = "#/components/schemas/";

/// How Swagger 2.0 documents refer to a definition.
pub const V2_REF_PREFIX: &str = "#/definitions/";

/// The extension naming the kinds a schema describes.
pub const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// A hash of a document, stable across builds and releases (clients cache
/// the documents by it): the first 8 bytes of SHA-256 of its JSON, in hex.
pub fn hash(doc: &Value) -> String {
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    digest.as_ref()[..8].iter().map(|b| format!("{b:02X}")).collect()
}

/// The names of the schemas `value` refers to (`$ref` with `prefix`).
pub fn refs(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix(prefix) {
                            out.push(name.to_string());
                        }
                    }
                    _ => refs(v, prefix, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, prefix, out)),
        _ => {}
    }
}

/// The schemas of `all` named in `roots` and every schema they refer to,
/// directly or not (references of OpenAPI 3.0 form).
pub fn closure(all: &Map<String, Value>, roots: impl IntoIterator<Item = String>) -> Map<String, Value> {
    closure_with(|name| all.get(name), roots)
}

/// [`closure`] over the schemas `lookup` finds by name.
pub fn closure_with<'a>(lookup: impl Fn(&str) -> Option<&'a Value>, roots: impl IntoIterator<Item = String>) -> Map<String, Value> {
    let mut out = Map::new();
    let mut pending: Vec<String> = roots.into_iter().collect();
    while let Some(name) = pending.pop() {
        if out.contains_key(&name) {
            continue;
        }
        if let Some(schema) = lookup(&name) {
            refs(schema, V3_REF_PREFIX, &mut pending);
            out.insert(name, schema.clone());
        }
    }
    out.sort_keys();
    out
}

/// The kinds `schema` describes (its `x-kubernetes-group-version-kind`):
/// `(group, version, kind)`.
pub fn gvks(schema: &Value) -> Vec<(String, String, String)> {
    let field = |e: &Value, f: &str| e[f].as_str().unwrap_or_default().to_string();
    match &schema[GVK_EXTENSION] {
        Value::Array(entries) => entries.iter().map(|e| (field(e, "group"), field(e, "version"), field(e, "kind"))).collect(),
        e @ Value::Object(_) => vec![(field(e, "group"), field(e, "version"), field(e, "kind"))],
        _ => Vec::new(),
    }
}

/// Marks `schema` as describing `group/version, kind` (kept once).
pub fn add_gvk(schema: &mut Value, group: &str, version: &str, kind: &str) {
    let Some(map) = schema.as_object_mut() else { return };
    let entry = json!({"group": group, "kind": kind, "version": version});
    let list = map.entry(GVK_EXTENSION).or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(items) = list {
        if !items.contains(&entry) {
            items.push(entry);
        }
    }
}

/// Swagger 2.0 `definitions` from OpenAPI 3.0 schemas: references point
/// at `#/definitions/`, and a reference wrapped in a one-element `allOf`
/// (how OpenAPI 3.0 gives a referenced schema a description) becomes a
/// plain `$ref` beside that description, as kube-apiserver writes v2.
pub fn to_v2(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        let name = r.strip_prefix(V3_REF_PREFIX).unwrap_or(r);
                        out.insert(key.clone(), Value::String(format!("{V2_REF_PREFIX}{name}")));
                    }
                    ("allOf", Value::Array(items)) if items.len() == 1 && items[0].get("$ref").is_some() => {
                        if let Value::Object(inner) = to_v2(&items[0]) {
                            out.extend(inner);
                        }
                    }
                    // OpenAPI 3.0 only.
                    ("nullable", _) => {}
                    _ => {
                        out.insert(key.clone(), to_v2(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_v2).collect()),
        other => other.clone(),
    }
}

/// The group, version and resource (plural) a path of an OpenAPI document
/// addresses: `/api/v1/namespaces/{namespace}/pods/{name}/status` is
/// `("", "v1", "pods")`, `/apis/apps/v1/watch/deployments` is
/// `("apps", "v1", "deployments")`.
pub fn path_resource(path: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let rest = rest.strip_prefix(&["watch"]).unwrap_or(rest);
    let plural = match rest {
        ["namespaces", "{namespace}", plural, ..] => *plural,
        [plural, ..] => *plural,
        [] => return None,
    };
    Some((group.to_string(), version.to_string(), plural.to_string()))
}

/// `api/v1` or `apis/{group}/{version}`: the key of a group-version
/// document in the `/openapi/v3` index.
pub fn group_version_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The `/openapi/v3` index over `(key, hash)` of each group-version
/// document.
pub fn index<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    let mut paths = Map::new();
    for (key, hash) in entries {
        paths.insert(key.to_string(), json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}));
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closure_follows_references() {
        let all: Map<String, Value> = serde_json::from_value(json!({
            "a": {"properties": {"b": {"allOf": [{"$ref": "#/components/schemas/b"}]}}},
            "b": {"items": {"$ref": "#/components/schemas/c"}},
            "c": {"type": "string"},
            "d": {"type": "string"},
        }))
        .unwrap();
        let got = closure(&all, ["a".to_string()]);
        assert_eq!(got.keys().collect::<Vec<_>>(), vec!["a", "b", "c"]);
    }

    #[test]
    fn v2_definitions_use_plain_references() {
        let v3 = json!({"properties": {"spec": {"description": "S.", "allOf": [{"$ref": "#/components/schemas/x.Spec"}]}}});
        let v2 = to_v2(&v3);
        assert_eq!(v2, json!({"properties": {"spec": {"description": "S.", "$ref": "#/definitions/x.Spec"}}}));
    }

    #[test]
    fn paths_name_their_resource() {
        assert_eq!(path_resource("/api/v1/namespaces/{namespace}/pods/{name}/status"), Some(("".into(), "v1".into(), "pods".into())));
        assert_eq!(path_resource("/api/v1/namespaces/{name}"), Some(("".into(), "v1".into(), "namespaces".into())));
        assert_eq!(path_resource("/apis/apps/v1/watch/deployments"), Some(("apps".into(), "v1".into(), "deployments".into())));
        assert_eq!(path_resource("/version"), None);
    }

    #[test]
    fn gvk_is_added_once() {
        let mut s = json!({"type": "object"});
        add_gvk(&mut s, "", "v1", "Pod");
        add_gvk(&mut s, "", "v1", "Pod");
        assert_eq!(gvks(&s), vec![("".into(), "v1".into(), "Pod".into())]);
    }
}
