//! `metadata.managedFields`: which manager owns which fields, in the
//! `FieldsV1` format, as kube-apiserver's field manager keeps it
//! (`k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager`,
//! `sigs.k8s.io/structured-merge-diff`). See the Kubernetes docs page
//! "Server-Side Apply" (section "Field Management").
//!
//! A field path is a list of `FieldsV1` elements: `f:<field>`,
//! `k:{"name":"x"}` (an item of a keyed list), `v:<json>` (an item of a
//! set), `i:<index>`. Updates take ownership of the fields they change;
//! apply owns exactly the fields of its configuration.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Map, Value};

use super::ops::WriteOptions;
use super::schema::{self, ListType};

/// One field path in `FieldsV1` elements.
pub type Path = Vec<String>;

/// A set of field paths.
pub type FieldSet = BTreeSet<Path>;

/// `operation` of a managedFields entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Create, update or a non-apply patch.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Which part of an object a manager wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The object; its status is not owned when the type has a status subresource.
    Main {
        /// Whether the type has a status subresource.
        has_status: bool,
    },
    /// The `status` subresource: only status.
    Status,
}

impl Scope {
    /// The scope of a write to `resource` (`status` subresource or not).
    pub fn of(resource: &ResourceType, status: bool) -> Scope {
        if status {
            Scope::Status
        } else {
            Scope::Main { has_status: resource.subresources.iter().any(|s| s == "status") }
        }
    }

    fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Status => Some("status"),
            Scope::Main { .. } => None,
        }
    }

    /// Whether a top-level field belongs to this scope.
    fn covers(self, field: &str) -> bool {
        match self {
            Scope::Main { has_status } => !(has_status && field == "status"),
            Scope::Status => field == "status",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `manager`.
    pub manager: String,
    /// `operation`.
    pub operation: Operation,
    /// `apiVersion`.
    pub api_version: String,
    /// `time`.
    pub time: Option<String>,
    /// `subresource`.
    pub subresource: Option<String>,
    /// `fieldsV1`, decoded.
    pub fields: FieldSet,
}

impl Entry {
    /// How kube-apiserver names the manager in conflict messages (`printManager`).
    pub fn describe(&self) -> String {
        let mut name = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            name = format!("{name} with subresource {sub:?}");
        }
        match (self.operation, &self.time) {
            (Operation::Update, Some(time)) => format!("{name} using {} at {time}", self.api_version),
            (Operation::Update, None) => format!("{name} using {}", self.api_version),
            (Operation::Apply, _) => name,
        }
    }

    fn to_value(&self) -> Value {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(self.manager));
        entry.insert("operation".into(), json!(self.operation.as_str()));
        entry.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            entry.insert("time".into(), json!(time));
        }
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), encode(&self.fields));
        if let Some(sub) = &self.subresource {
            entry.insert("subresource".into(), json!(sub));
        }
        Value::Object(entry)
    }
}

/// The entries of an object's `metadata.managedFields`.
pub fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or_default().to_string(),
                    operation: if e["operation"] == "Apply" { Operation::Apply } else { Operation::Update },
                    api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
                    time: e["time"].as_str().map(str::to_string),
                    subresource: e["subresource"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
                    fields: decode(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `entries` into `metadata.managedFields` (dropping empty ones).
pub fn set_entries(object: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries.iter().filter(|e| !e.fields.is_empty()).map(Entry::to_value).collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// The object without `metadata.managedFields` (for no-op detection:
/// kube-apiserver does not write an update that changes only those).
pub fn without_timestamps(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    copy
}

/// Metadata fields no manager owns.
const IGNORED_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

fn ignored(names: &[&str], field: &str, scope: Scope) -> bool {
    match names {
        [] => field == "apiVersion" || field == "kind" || (field != "metadata" && !scope.covers(field)),
        ["metadata"] => IGNORED_METADATA.contains(&field),
        _ => false,
    }
}

/// The `k:`/`v:`/`i:` element of a list item.
fn item_element(item: &Value, list_type: ListType, index: usize) -> String {
    match list_type {
        ListType::Map(keys) => {
            let mut key = Map::new();
            for k in keys {
                if let Some(v) = item.get(*k) {
                    key.insert((*k).to_string(), v.clone());
                }
            }
            if key.is_empty() {
                format!("i:{index}")
            } else {
                format!("k:{}", Value::Object(key))
            }
        }
        ListType::Set => format!("v:{item}"),
        ListType::Atomic => format!("i:{index}"),
    }
}

/// The fields of an applied configuration (`TypedValue.ToFieldSet`).
pub fn to_field_set(kind: &str, object: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let mut names = Vec::new();
    let mut path = Vec::new();
    walk_set(kind, object, scope, &mut names, &mut path, &mut out);
    out
}

fn walk_set<'a>(kind: &str, value: &'a Value, scope: Scope, names: &mut Vec<&'a str>, path: &mut Path, out: &mut FieldSet) {
    match value {
        Value::Object(map) => {
            if !path.is_empty() && schema::is_atomic_struct(kind, names) {
                out.insert(path.clone());
                return;
            }
            let is_map = schema::is_map_field(kind, names);
            for (k, v) in map {
                if ignored(names, k, scope) {
                    continue;
                }
                names.push(k);
                path.push(format!("f:{k}"));
                walk_set(kind, v, scope, names, path, out);
                if v.is_null() || v.as_object().is_some_and(Map::is_empty) || is_map {
                    out.insert(path.clone());
                }
                path.pop();
                names.pop();
            }
        }
        Value::Array(items) => {
            let list_type = schema::list_schema(kind, names).list_type;
            if list_type == ListType::Atomic {
                out.insert(path.clone());
                return;
            }
            for (i, item) in items.iter().enumerate() {
                path.push(item_element(item, list_type, i));
                if list_type != ListType::Set {
                    walk_set(kind, item, scope, names, path, out);
                }
                out.insert(path.clone());
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

/// The fields an update sets or changes from `old` to `new` (what the
/// updating manager comes to own); `old = None` for a create.
pub fn changed_fields(kind: &str, old: Option<&Value>, new: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let zero = json!({"metadata": {}, "spec": {}, "status": {}});
    let old = old.unwrap_or(&zero);
    let mut names = Vec::new();
    let mut path = Vec::new();
    walk_diff(kind, Some(old), new, scope, &mut names, &mut path, &mut out);
    out
}

fn walk_diff<'a>(
    kind: &str,
    old: Option<&Value>,
    new: &'a Value,
    scope: Scope,
    names: &mut Vec<&'a str>,
    path: &mut Path,
    out: &mut FieldSet,
) {
    match new {
        Value::Object(map) if path.is_empty() || !schema::is_atomic_struct(kind, names) => {
            if old.is_none() && !path.is_empty() {
                out.insert(path.clone());
            }
            let old_map = old.and_then(Value::as_object);
            for (k, v) in map {
                if ignored(names, k, scope) {
                    continue;
                }
                names.push(k);
                path.push(format!("f:{k}"));
                walk_diff(kind, old_map.and_then(|m| m.get(k)), v, scope, names, path, out);
                path.pop();
                names.pop();
            }
        }
        Value::Array(items) if schema::list_schema(kind, names).list_type != ListType::Atomic => {
            let list_type = schema::list_schema(kind, names).list_type;
            if old.is_none() {
                out.insert(path.clone());
            }
            let old_items = old.and_then(Value::as_array).cloned().unwrap_or_default();
            for (i, item) in items.iter().enumerate() {
                let element = item_element(item, list_type, i);
                let old_item = old_items
                    .iter()
                    .enumerate()
                    .find(|(j, o)| item_element(o, list_type, *j) == element)
                    .map(|(_, o)| o);
                path.push(element);
                match (list_type, old_item) {
                    (ListType::Set, None) => {
                        out.insert(path.clone());
                    }
                    (ListType::Set, Some(_)) => {}
                    (_, None) => {
                        out.insert(path.clone());
                        walk_diff(kind, None, item, scope, names, path, out);
                    }
                    (_, Some(old_item)) => walk_diff(kind, Some(old_item), item, scope, names, path, out),
                }
                path.pop();
            }
        }
        _ => {
            if old != Some(new) && !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

/// Encodes a field set as a `fieldsV1` object.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for element in path {
            let child = node.entry(element.clone()).or_insert_with(|| json!({}));
            node = match child.as_object_mut() {
                Some(map) => map,
                None => unreachable!("fieldsV1 nodes are objects"),
            };
        }
        node.entry(".".to_string()).or_insert_with(|| json!({}));
    }
    // A member without children is `{}`, not `{".":{}}`.
    fn tidy(map: &mut Map<String, Value>) {
        for (key, child) in map.iter_mut() {
            if key == "." {
                continue;
            }
            if let Some(child_map) = child.as_object_mut() {
                tidy(child_map);
                if child_map.len() == 1 && child_map.contains_key(".") {
                    child_map.clear();
                }
            }
        }
    }
    tidy(&mut root);
    root.remove(".");
    Value::Object(root)
}

/// Decodes a `fieldsV1` object into a field set.
pub fn decode(fields: &Value) -> FieldSet {
    fn walk(node: &Map<String, Value>, path: &mut Path, out: &mut FieldSet) {
        for (key, child) in node {
            if key == "." {
                continue;
            }
            path.push(key.clone());
            match child.as_object() {
                Some(map) if map.is_empty() => {
                    out.insert(path.clone());
                }
                Some(map) => {
                    if map.contains_key(".") {
                        out.insert(path.clone());
                    }
                    walk(map, path, out);
                }
                None => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Some(map) = fields.as_object() {
        walk(map, &mut Vec::new(), &mut out);
    }
    out
}

/// Whether `element` names `item` (at `index`) of a list.
fn item_matches(element: &str, item: &Value, index: usize) -> bool {
    if let Some(key) = element.strip_prefix("k:") {
        let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else { return false };
        return key.iter().all(|(k, v)| item.get(k) == Some(v));
    }
    if let Some(value) = element.strip_prefix("v:") {
        return serde_json::from_str::<Value>(value).is_ok_and(|v| v == *item);
    }
    if let Some(i) = element.strip_prefix("i:") {
        return i.parse::<usize>() == Ok(index);
    }
    false
}

/// The value at a field path.
pub fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = value;
    for element in path {
        current = match (element.strip_prefix("f:"), current) {
            (Some(field), Value::Object(map)) => map.get(field)?,
            (None, Value::Array(items)) => items.iter().enumerate().find(|(i, item)| item_matches(element, item, *i))?.1,
            _ => return None,
        };
    }
    Some(current)
}

fn get_mut<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut current = value;
    for element in path {
        current = match (element.strip_prefix("f:"), current) {
            (Some(field), Value::Object(map)) => map.get_mut(field)?,
            (None, Value::Array(items)) => {
                let position = items.iter().enumerate().position(|(i, item)| item_matches(element, item, i))?;
                &mut items[position]
            }
            _ => return None,
        };
    }
    Some(current)
}

/// Removes the field or list item at a path; whether it existed.
pub fn remove(value: &mut Value, path: &[String]) -> bool {
    let Some((last, parent_path)) = path.split_last() else { return false };
    let Some(parent) = get_mut(value, parent_path) else { return false };
    match (last.strip_prefix("f:"), parent) {
        (Some(field), Value::Object(map)) => map.remove(field).is_some(),
        (None, Value::Array(items)) => {
            let before = items.len();
            let mut index = 0;
            items.retain(|item| {
                let keep = !item_matches(last, item, index);
                index += 1;
                keep
            });
            items.len() != before
        }
        _ => false,
    }
}

/// `.spec.containers[name="web"].image`, as `fieldpath.Path.String()` prints a path.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(field) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = element.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Value>(key)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(value) = element.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
        } else if let Some(index) = element.strip_prefix("i:") {
            out.push_str(&format!("[{index}]"));
        }
    }
    out
}

/// Keeps only the paths that still exist in `object`.
pub fn prune(set: &mut FieldSet, object: &Value) {
    set.retain(|path| get(object, path).is_some());
}

fn now_string(now: DateTime<Utc>) -> String {
    crate::workload::ts(now)
}

/// Records a create (`old = None`) or update by `opts`' manager in `new`'s
/// managedFields: the manager takes the fields it changed from every other
/// manager; fields that no longer exist leave every set.
pub fn record(new: &mut Value, old: Option<&Value>, opts: &WriteOptions, operation: Operation, resource: &ResourceType) {
    record_scoped(new, old, opts, operation, resource, Scope::of(resource, false));
}

/// [`record`] for a given scope (main resource or status subresource).
pub fn record_scoped(
    new: &mut Value,
    old: Option<&Value>,
    opts: &WriteOptions,
    operation: Operation,
    resource: &ResourceType,
    scope: Scope,
) {
    let manager = opts.manager();
    let changed = changed_fields(&resource.kind, old, new, scope);
    let mut list = entries(new);
    for entry in &mut list {
        entry.fields.retain(|p| !changed.contains(p));
        prune(&mut entry.fields, new);
    }
    if !changed.is_empty() {
        let subresource = scope.subresource().map(str::to_string);
        match list.iter_mut().find(|e| e.manager == manager && e.operation == operation && e.subresource == subresource) {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.time = Some(now_string(opts.now));
                entry.api_version = resource.api_version();
            }
            None => list.push(Entry {
                manager,
                operation,
                api_version: resource.api_version(),
                time: Some(now_string(opts.now)),
                subresource,
                fields: changed,
            }),
        }
    }
    set_entries(new, list);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&[&str]]) -> FieldSet {
        paths.iter().map(|p| p.iter().map(|s| s.to_string()).collect()).collect()
    }

    #[test]
    fn fields_v1_round_trips_with_dot_for_members_with_children() {
        let fields = set(&[
            &["f:metadata", "f:labels", "f:app"],
            &["f:spec", "f:containers", "k:{\"name\":\"web\"}"],
            &["f:spec", "f:containers", "k:{\"name\":\"web\"}", "f:image"],
        ]);
        let encoded = encode(&fields);
        assert_eq!(
            encoded,
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}})
        );
        assert_eq!(decode(&encoded), fields);
    }

    #[test]
    fn applied_configurations_own_leaves_items_and_map_entries() {
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "d"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        let fields = to_field_set("Deployment", &applied, Scope::Main { has_status: true });
        let expected = set(&[
            &["f:metadata", "f:labels", "f:app"],
            &["f:spec", "f:replicas"],
            &["f:spec", "f:selector"],
            &["f:spec", "f:template", "f:spec", "f:containers", "k:{\"name\":\"web\"}"],
            &["f:spec", "f:template", "f:spec", "f:containers", "k:{\"name\":\"web\"}", "f:image"],
            &["f:spec", "f:template", "f:spec", "f:containers", "k:{\"name\":\"web\"}", "f:name"],
        ]);
        assert_eq!(fields, expected);
    }

    #[test]
    fn updates_own_what_they_change() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("x:2");
        new["metadata"]["labels"]["b"] = json!("2");
        let changed = changed_fields("Pod", Some(&old), &new, Scope::Main { has_status: true });
        assert_eq!(
            changed,
            set(&[&["f:metadata", "f:labels", "f:b"], &["f:spec", "f:containers", "k:{\"name\":\"c\"}", "f:image"]])
        );
    }

    #[test]
    fn paths_navigate_and_print_like_fieldpath() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]},
                             "metadata": {"finalizers": ["x", "y"]}});
        let path: Path = vec!["f:spec".into(), "f:containers".into(), "k:{\"name\":\"b\"}".into(), "f:image".into()];
        assert_eq!(get(&pod, &path), Some(&json!("2")));
        assert_eq!(path_string(&path), ".spec.containers[name=\"b\"].image");
        assert!(remove(&mut pod, &path[..3]));
        assert_eq!(pod["spec"]["containers"].as_array().unwrap().len(), 1);
        assert!(remove(&mut pod, &["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]));
        assert_eq!(pod["metadata"]["finalizers"], json!(["y"]));
    }
}
