//! Patches of the PATCH verb: JSON merge patch (RFC 7386) and JSON patch
//! (RFC 6902), as kube-apiserver applies them (`evanphx/json-patch`); the
//! strategic merge patch and server-side apply live in their own modules.
//!
//! See the Kubernetes docs "Update API Objects in Place Using kubectl patch"
//! and "API Concepts" (section "Patch") for the content types.

use serde_json::{Map, Value};

use super::status::{ApiError, Result};

/// The patch content types kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply; also `+cbor`-less JSON, which is YAML).
    Apply,
}

/// The accepted media types, in kube-apiserver's order, for the 415 message.
pub const ACCEPTED: &str = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json";

impl PatchType {
    /// The patch type of a `Content-Type` header (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Result<PatchType> {
        let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            _ => Err(ApiError::UnsupportedMediaType(ACCEPTED.into())),
        }
    }
}

/// Applies a JSON merge patch (RFC 7386) to `target`: objects merge
/// recursively, `null` deletes a key, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(map) = target {
                for (key, value) in fields {
                    if value.is_null() {
                        map.remove(key);
                    } else {
                        merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Decodes a merge patch body (400 when it is not JSON).
pub fn decode_merge_patch(body: &[u8]) -> Result<Value> {
    serde_json::from_slice(body).map_err(|_| ApiError::BadRequest("Invalid JSON Patch".into()))
}

/// Applies a JSON patch (RFC 6902) document to `target`.
///
/// A body that is not an array of operations is 400 BadRequest; an
/// operation that does not apply is 422 (`ApiError::PatchFailed`), as in
/// kube-apiserver. Operations apply in order to a copy: on error `target`
/// is unchanged.
pub fn json_patch(target: &mut Value, body: &[u8]) -> Result<()> {
    let operations: Vec<Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(ops)) => ops,
        Ok(_) => {
            return Err(ApiError::BadRequest(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
            ))
        }
        Err(e) => return Err(ApiError::BadRequest(format!("invalid JSON patch: {e}"))),
    };
    if operations.len() > 10_000 {
        return Err(ApiError::RequestEntityTooLarge(10_000));
    }
    let mut doc = target.clone();
    for operation in &operations {
        apply_operation(&mut doc, operation)?;
    }
    *target = doc;
    Ok(())
}

fn failed(message: String) -> ApiError {
    ApiError::PatchFailed(message)
}

fn apply_operation(doc: &mut Value, operation: &Value) -> Result<()> {
    let op = operation["op"].as_str().unwrap_or_default();
    let path = operation["path"]
        .as_str()
        .ok_or_else(|| failed(format!("{op} operation missing path: {operation}")))?;
    match op {
        "add" => {
            let value = operation.get("value").ok_or_else(|| failed(format!("add operation missing value: {path}")))?;
            add(doc, path, value.clone())
        }
        "remove" => remove(doc, path).map(|_| ()),
        "replace" => {
            let value =
                operation.get("value").ok_or_else(|| failed(format!("replace operation missing value: {path}")))?;
            let slot = pointer_mut(doc, path)
                .ok_or_else(|| failed(format!("replace operation does not apply: doc is missing key: {path}")))?;
            *slot = value.clone();
            Ok(())
        }
        "move" => {
            let from = operation["from"].as_str().ok_or_else(|| failed("move operation missing from".into()))?;
            if path.starts_with(&format!("{from}/")) {
                return Err(failed(format!("move operation: cannot move {from} into its own child {path}")));
            }
            let value = remove(doc, from)?;
            add(doc, path, value)
        }
        "copy" => {
            let from = operation["from"].as_str().ok_or_else(|| failed("copy operation missing from".into()))?;
            let value = pointer(doc, from)
                .cloned()
                .ok_or_else(|| failed(format!("copy operation does not apply: doc is missing from path: {from}")))?;
            add(doc, path, value)
        }
        "test" => {
            let expected = operation.get("value").cloned().unwrap_or(Value::Null);
            match pointer(doc, path) {
                Some(actual) if *actual == expected => Ok(()),
                None if expected.is_null() => Ok(()),
                _ => Err(failed(format!("testing value {path} failed: test failed"))),
            }
        }
        other => Err(failed(format!("Unexpected kind: {other}"))),
    }
}

/// The unescaped tokens of a JSON pointer (`~1` is `/`, `~0` is `~`).
fn tokens(path: &str) -> Result<Vec<String>> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(failed(format!("JSON pointer must be empty or start with a \"/\": {path}")));
    };
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn index(token: &str, len: usize, allow_end: bool) -> Option<usize> {
    if token == "-" {
        return allow_end.then_some(len);
    }
    if token.len() > 1 && token.starts_with('0') {
        return None;
    }
    let i: usize = token.parse().ok()?;
    let limit = if allow_end { len } else { len.saturating_sub(1) };
    (i <= limit && (allow_end || len > 0)).then_some(i)
}

fn pointer<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = doc;
    for token in tokens(path).ok()? {
        current = match current {
            Value::Object(map) => map.get(&token)?,
            Value::Array(items) => items.get(index(&token, items.len(), false)?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn pointer_mut<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut current = doc;
    for token in tokens(path).ok()? {
        current = match current {
            Value::Object(map) => map.get_mut(&token)?,
            Value::Array(items) => {
                let i = index(&token, items.len(), false)?;
                items.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(current)
}

/// Splits a path into its parent's path and its last token.
fn parent_and_last(path: &str) -> Result<(String, String)> {
    let mut toks = tokens(path)?;
    let last = toks.pop().ok_or_else(|| failed("cannot operate on the document root".into()))?;
    let parent = toks.iter().map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1"))).collect();
    Ok((parent, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<()> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_and_last(path)?;
    let container = pointer_mut(doc, &parent)
        .ok_or_else(|| failed(format!("add operation does not apply: doc is missing path: \"{path}\"")))?;
    match container {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let i = index(&last, items.len(), true)
                .ok_or_else(|| failed(format!("add operation does not apply: index out of bounds: {path}")))?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err(failed(format!("add operation does not apply: doc is missing path: \"{path}\""))),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value> {
    let (parent, last) = parent_and_last(path)?;
    let missing = || failed(format!("remove operation does not apply: doc is missing path: \"{path}\""));
    let container = pointer_mut(doc, &parent).ok_or_else(missing)?;
    match container {
        Value::Object(map) => map.remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let i = index(&last, items.len(), false).filter(|&i| i < items.len()).ok_or_else(missing)?;
            Ok(items.remove(i))
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386_examples() {
        // RFC 7386 section 3, the full example.
        let mut target = json!({"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
                                "tags": ["example", "sample"], "content": "This will be unchanged"});
        let patch = json!({"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": null},
                           "tags": ["example"]});
        merge_patch(&mut target, &patch);
        assert_eq!(
            target,
            json!({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
                   "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})
        );
        // Appendix A cases.
        let mut t = json!({"a": "b"});
        merge_patch(&mut t, &json!({"a": {"bb": {"ccc": null}}}));
        assert_eq!(t, json!({"a": {"bb": {}}}));
        let mut t = json!(["a", "b"]);
        merge_patch(&mut t, &json!({"a": "c"}));
        assert_eq!(t, json!({"a": "c"}));
    }

    #[test]
    fn json_patch_follows_rfc6902_examples() {
        let mut doc = json!({"foo": ["bar", "baz"]});
        json_patch(&mut doc, br#"[{"op": "add", "path": "/foo/1", "value": "qux"}]"#).unwrap();
        assert_eq!(doc, json!({"foo": ["bar", "qux", "baz"]}));
        json_patch(&mut doc, br#"[{"op": "remove", "path": "/foo/1"}, {"op": "add", "path": "/foo/-", "value": 1}]"#).unwrap();
        assert_eq!(doc, json!({"foo": ["bar", "baz", 1]}));
        let mut doc = json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}});
        json_patch(&mut doc, br#"[{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]"#).unwrap();
        assert_eq!(doc, json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}));
        let mut doc = json!({"a/b": 1, "m~n": 2});
        json_patch(&mut doc, br#"[{"op": "replace", "path": "/a~1b", "value": 3}, {"op": "copy", "from": "/m~0n", "path": "/c"}]"#).unwrap();
        assert_eq!(doc, json!({"a/b": 3, "m~n": 2, "c": 2}));
    }

    #[test]
    fn failing_operations_are_422_and_leave_the_target_unchanged() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}});
        let before = doc.clone();
        let error = json_patch(
            &mut doc,
            br#"[{"op": "add", "path": "/metadata/labels/b", "value": "2"}, {"op": "remove", "path": "/metadata/annotations/x"}]"#,
        )
        .unwrap_err();
        assert_eq!(error.code(), 422);
        assert_eq!(doc, before);
        let error = json_patch(&mut doc, br#"[{"op": "test", "path": "/metadata/labels/a", "value": "2"}]"#).unwrap_err();
        assert_eq!(error.code(), 422);
        assert_eq!(json_patch(&mut doc, br#"{"op": "add"}"#).unwrap_err().code(), 400);
    }

    #[test]
    fn content_types() {
        assert_eq!(PatchType::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(), PatchType::Merge);
        assert_eq!(PatchType::from_content_type("application/json-patch+json").unwrap(), PatchType::Json);
        assert_eq!(PatchType::from_content_type("application/json").unwrap_err().code(), 415);
    }
}
