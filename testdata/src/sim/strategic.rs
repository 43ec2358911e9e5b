//! Strategic merge patch (`application/strategic-merge-patch+json`), as
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it to built-in
//! types; see the Kubernetes docs "Update API Objects in Place Using kubectl
//! patch" and the design note "Strategic Merge Patch"
//! (community/contributors/devel/sig-api-machinery/strategic-merge-patch.md).
//!
//! Maps merge like a JSON merge patch (`null` deletes). Lists merge as their
//! field's `patchStrategy` says ([`schema`]): by `patchMergeKey` (containers
//! by `name`, ports by `containerPort`, volumeMounts by `mountPath`,
//! conditions by `type` ...), as a union for primitive lists with strategy
//! merge (finalizers), else they are replaced. Directives: `$patch:
//! replace|delete|merge` on maps and list items, `$retainKeys`,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`.

use serde_json::{Map, Value};

use super::schema::{self, PatchStrategy};
use super::status::{ApiError, Result};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch body to `target`, an object of
/// `(group, kind)`. On error `target` is unchanged.
pub fn patch(kind: (&str, &str), target: &mut Value, body: &[u8]) -> Result<()> {
    let patch: Value = serde_json::from_slice(body).map_err(|_| ApiError::BadRequest("invalid JSON document".into()))?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::BadRequest(
            "json: cannot unmarshal array into Go value of type map[string]interface {}".into(),
        ));
    };
    let mut result = match target.take() {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let original = result.clone();
    let mut names = Vec::new();
    match merge_map(kind.1, &mut result, &patch, &mut names) {
        Ok(()) => {
            *target = Value::Object(result);
            Ok(())
        }
        Err(error) => {
            *target = Value::Object(original);
            Err(error)
        }
    }
}

fn bad(message: &str) -> ApiError {
    ApiError::BadRequest(message.to_string())
}

fn merge_map(kind: &str, original: &mut Map<String, Value>, patch: &Map<String, Value>, names: &mut Vec<String>) -> Result<()> {
    match patch.get(PATCH).map(|d| d.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("replace")) => {
            let mut replaced = Map::new();
            let mut stripped = patch.clone();
            stripped.remove(PATCH);
            merge_map(kind, &mut replaced, &stripped, names)?;
            *original = replaced;
            return Ok(());
        }
        Some(Some("delete")) => {
            original.clear();
            return Ok(());
        }
        Some(other) => {
            return Err(bad(&format!("Unknown patch type: {}", other.unwrap_or_default())));
        }
    }
    let retain_keys = match patch.get(RETAIN_KEYS) {
        None => None,
        Some(Value::Array(keys)) => {
            let keys: Option<Vec<String>> = keys.iter().map(|k| k.as_str().map(str::to_string)).collect();
            Some(keys.ok_or_else(|| bad("invalid patch: retainKeys must be a list of strings"))?)
        }
        Some(_) => return Err(bad("invalid patch: retainKeys must be a list of strings")),
    };
    if let Some(keys) = &retain_keys {
        for key in patch.keys().filter(|k| !k.starts_with('$')) {
            if !keys.contains(key) {
                return Err(ApiError::PatchFailed(
                    "doesn't match the retainKeys list: the patch has fields that are not in $retainKeys".into(),
                ));
            }
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = value else {
                return Err(bad("invalid patch: $deleteFromPrimitiveList must be a list of primitives"));
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
        }
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        names.push(key.clone());
        if value.is_null() {
            original.remove(key);
        } else {
            let slot = original.entry(key.clone()).or_insert(Value::Null);
            merge_value(kind, slot, value, names)?;
        }
        names.pop();
    }
    for (key, order) in patch {
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Value::Array(order) = order else {
                return Err(bad("invalid patch: $setElementOrder must be a list"));
            };
            names.push(field.to_string());
            let path: Vec<&str> = names.iter().map(String::as_str).collect();
            let strategy = schema::list_schema(kind, &path).strategy;
            names.pop();
            if let Some(Value::Array(items)) = original.get_mut(field) {
                reorder(items, order, strategy);
            }
        }
    }
    if let Some(keys) = retain_keys {
        original.retain(|k, _| keys.contains(k));
    }
    Ok(())
}

fn merge_value(kind: &str, original: &mut Value, patch: &Value, names: &mut Vec<String>) -> Result<()> {
    match patch {
        Value::Object(patch_map) => {
            if !original.is_object() {
                *original = Value::Object(Map::new());
            }
            if let Value::Object(map) = original {
                merge_map(kind, map, patch_map, names)?;
            }
            Ok(())
        }
        Value::Array(patch_items) => {
            let path: Vec<&str> = names.iter().map(String::as_str).collect();
            let strategy = schema::list_schema(kind, &path).strategy;
            if !original.is_array() {
                *original = Value::Array(Vec::new());
                // A list new to the object: merge into nothing (strips directives).
            }
            if let Value::Array(items) = original {
                merge_list(kind, items, patch_items, strategy, names)?;
            }
            Ok(())
        }
        scalar => {
            *original = scalar.clone();
            Ok(())
        }
    }
}

fn is_directive(item: &Value, directive: &str) -> bool {
    item.get(PATCH).and_then(Value::as_str) == Some(directive)
}

fn merge_list(
    kind: &str,
    original: &mut Vec<Value>,
    patch: &[Value],
    strategy: PatchStrategy,
    names: &mut Vec<String>,
) -> Result<()> {
    match strategy {
        PatchStrategy::Replace => {
            let mut replaced = Vec::with_capacity(patch.len());
            for item in patch.iter().filter(|i| !is_directive(i, "replace")) {
                let mut value = Value::Null;
                merge_value(kind, &mut value, item, names)?;
                replaced.push(value);
            }
            *original = replaced;
        }
        PatchStrategy::MergePrimitives => {
            if patch.iter().any(|i| is_directive(i, "replace")) {
                *original = patch.iter().filter(|i| !i.is_object()).cloned().collect();
                return Ok(());
            }
            for item in patch {
                if item.is_object() || item.is_array() {
                    return Err(bad("invalid patch: merging a list of primitives expects primitives"));
                }
                if !original.contains(item) {
                    original.push(item.clone());
                }
            }
        }
        PatchStrategy::MergeByKey(key) => {
            if patch.iter().any(|i| is_directive(i, "replace")) {
                let mut replaced = Vec::new();
                for item in patch.iter().filter(|i| !is_directive(i, "replace")) {
                    let mut value = Value::Null;
                    merge_value(kind, &mut value, item, names)?;
                    replaced.push(value);
                }
                *original = replaced;
                return Ok(());
            }
            for item in patch {
                let Value::Object(item_map) = item else {
                    return Err(bad("invalid patch: a list with a merge key expects objects"));
                };
                let Some(key_value) = item_map.get(key) else {
                    return Err(ApiError::Internal(format!("map: {item} does not contain declared merge key: {key}")));
                };
                if is_directive(item, "delete") {
                    original.retain(|o| o.get(key) != Some(key_value));
                    continue;
                }
                match original.iter_mut().find(|o| o.get(key) == Some(key_value)) {
                    Some(existing) => merge_value(kind, existing, item, names)?,
                    None => {
                        let mut value = Value::Null;
                        merge_value(kind, &mut value, item, names)?;
                        original.push(value);
                    }
                }
            }
        }
    }
    Ok(())
}

/// `$setElementOrder`: the listed items first, in that order, then the
/// others in their current order.
fn reorder(items: &mut Vec<Value>, order: &[Value], strategy: PatchStrategy) {
    let same = |item: &Value, entry: &Value| match strategy {
        PatchStrategy::MergeByKey(key) => entry.get(key).is_some() && item.get(key) == entry.get(key),
        _ => item == entry,
    };
    let mut rest = std::mem::take(items);
    for entry in order {
        if let Some(position) = rest.iter().position(|item| same(item, entry)) {
            items.push(rest.remove(position));
        }
    }
    items.extend(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}, "finalizers": ["a", "b"]},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "envoy:1"},
                ],
                "tolerations": [{"key": "x", "operator": "Exists"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]},
        })
    }

    fn apply(patch_body: Value) -> Value {
        let mut target = pod();
        patch(("", "Pod"), &mut target, patch_body.to_string().as_bytes()).unwrap();
        target
    }

    #[test]
    fn containers_merge_by_name_and_nested_lists_by_their_keys() {
        let out = apply(json!({"spec": {"containers": [
            {"name": "web", "image": "nginx:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
             "ports": [{"containerPort": 443, "protocol": "TCP"}]}]}}));
        let web = &out["spec"]["containers"][0];
        assert_eq!(web["image"], "nginx:2");
        assert_eq!(web["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]));
        assert_eq!(web["ports"].as_array().unwrap().len(), 2);
        assert_eq!(out["spec"]["containers"][1]["name"], "sidecar", "untouched items stay");
    }

    #[test]
    fn lists_without_strategy_are_replaced() {
        let out = apply(json!({"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}));
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "y", "operator": "Exists"}]));
    }

    #[test]
    fn delete_and_replace_directives() {
        let out = apply(json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}));
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        let out = apply(json!({"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "only", "image": "x"}]));
        let out = apply(json!({"metadata": {"labels": {"$patch": "replace", "new": "1"}}}));
        assert_eq!(out["metadata"]["labels"], json!({"new": "1"}));
        let out = apply(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
        assert_eq!(out["status"]["conditions"][0], json!({"type": "Ready", "status": "True"}));
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn primitive_lists_union_and_delete_from_primitive_list() {
        let out = apply(json!({"metadata": {"finalizers": ["c", "a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = apply(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn set_element_order_reorders_like_kubectl_edit() {
        // kubectl edit swapping the two containers and changing an image.
        let out = apply(json!({"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}],
            "containers": [{"name": "sidecar", "image": "envoy:2"}]}}));
        let names: Vec<&str> = out["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["sidecar", "web"]);
        assert_eq!(out["spec"]["containers"][0]["image"], "envoy:2");
    }

    #[test]
    fn retain_keys_clears_other_fields() {
        let out = apply(json!({"spec": {"volumes": [{"name": "data", "hostPath": {"path": "/x"}, "$retainKeys": ["hostPath", "name"]}]}}));
        assert_eq!(out["spec"]["volumes"][0], json!({"name": "data", "hostPath": {"path": "/x"}}));
    }

    #[test]
    fn nulls_delete_and_errors_leave_the_target_unchanged() {
        let out = apply(json!({"metadata": {"labels": {"tier": null}}}));
        assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
        let mut target = pod();
        let error = patch(("", "Pod"), &mut target, br#"{"spec":{"containers":[{"image":"no-name"}]}}"#).unwrap_err();
        assert_eq!(error.code(), 500);
        assert_eq!(target, pod());
        assert_eq!(patch(("", "Pod"), &mut target, b"[1]").unwrap_err().code(), 400);
    }
}
