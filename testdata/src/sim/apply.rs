//! Server-side apply (`PATCH` with `application/apply-patch+yaml`), as the
//! Kubernetes docs page "Server-Side Apply" describes it: the body is a
//! (partial) configuration in YAML or JSON; the object is created when it
//! does not exist; otherwise the configuration merges into it (maps by key,
//! `listType=map` lists by their keys, sets by value, atomic lists and
//! structs replaced); fields this manager applied before and no longer
//! applies are removed unless another manager owns them; setting a field
//! that another manager owns to a different value is a 409 conflict unless
//! `force=true`, which takes the field over. `fieldManager` is required.

use serde_json::{json, Value};

use super::managed::{self, Entry, FieldSet, Operation, Scope};
use super::ops::{self, Subresource, WriteOptions, Written};
use super::schema::{self, ListType};
use super::status::{ApiError, Cause, Result};
use super::store::{self, Store};

/// A 409 apply conflict, as `NewApplyConflict` builds it.
fn conflict_error(conflicts: &[(managed::Path, Entry)]) -> ApiError {
    let message = if let [(path, entry)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {}: {}", entry.describe(), managed::path_string(path))
    } else {
        let mut managers: Vec<String> = conflicts.iter().map(|(_, e)| e.describe()).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for manager in &managers {
            lines.push(format!("conflicts with {manager}:"));
            for (path, entry) in conflicts {
                if entry.describe() == *manager {
                    lines.push(format!("- {}", managed::path_string(path)));
                }
            }
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    let causes = conflicts
        .iter()
        .map(|(path, entry)| Cause {
            reason: "FieldManagerConflict".into(),
            field: managed::path_string(path),
            message: format!("conflict with {}", entry.describe()),
        })
        .collect();
    ApiError::ApplyConflict { message, causes }
}

/// Merges an applied configuration into a live object.
fn merge(kind: &str, live: &mut Value, applied: &Value, names: &mut Vec<String>) {
    let path: Vec<&str> = names.iter().map(String::as_str).collect();
    match (live, applied) {
        (Value::Object(live_map), Value::Object(applied_map)) if !schema::is_atomic_struct(kind, &path) => {
            for (key, value) in applied_map {
                if names.is_empty() && (key == "apiVersion" || key == "kind") {
                    continue;
                }
                if names.len() == 1 && names[0] == "metadata" && key == "managedFields" {
                    continue;
                }
                names.push(key.clone());
                if value.is_null() {
                    live_map.remove(key);
                } else {
                    merge(kind, live_map.entry(key.clone()).or_insert(Value::Null), value, names);
                }
                names.pop();
            }
        }
        (Value::Array(live_items), Value::Array(applied_items)) => match schema::list_schema(kind, &path).list_type {
            ListType::Atomic => *live_items = applied_items.clone(),
            ListType::Set => {
                for item in applied_items {
                    if !live_items.contains(item) {
                        live_items.push(item.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                let same = |a: &Value, b: &Value| keys.iter().all(|k| a.get(*k) == b.get(*k));
                for item in applied_items {
                    match live_items.iter_mut().find(|l| same(l, item)) {
                        Some(existing) => merge(kind, existing, item, names),
                        None => live_items.push(item.clone()),
                    }
                }
            }
        },
        (live, applied) => *live = applied.clone(),
    }
}

/// Whether the value at `path` is a leaf of a field set (compared for conflicts).
fn is_leaf(set: &FieldSet, path: &managed::Path) -> bool {
    !set.range(path.clone()..).nth(1).is_some_and(|next| next.starts_with(path))
}

/// Server-side apply of `body` to `namespace/name`.
pub fn apply(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
    subresource: Subresource,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let Some(manager) = opts.field_manager.clone() else {
        return Err(ApiError::Invalid {
            group: "meta.k8s.io".into(),
            kind: "PatchOptions".into(),
            name: String::new(),
            causes: vec![Cause::required("fieldManager", "is required for apply patch")],
        });
    };
    let mut applied: Value = serde_saphyr::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::BadRequest("error decoding YAML: the configuration must be an object".into()));
    }
    let (expected_version, expected_kind) = match subresource {
        Subresource::Scale => ("autoscaling/v1".to_string(), "Scale".to_string()),
        _ => (rt.api_version(), rt.kind.clone()),
    };
    let api_version = applied["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = applied["kind"].as_str().unwrap_or_default().to_string();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ApiError::BadRequest(format!("invalid object type: {api_version}, Kind={kind}")));
    }
    if api_version != expected_version || kind != expected_kind {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected_version})"
        )));
    }
    match applied["metadata"]["name"].as_str() {
        Some(n) if !n.is_empty() && n != name => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {
            if !applied["metadata"].is_object() {
                applied["metadata"] = json!({});
            }
            applied["metadata"]["name"] = json!(name);
        }
    }
    if subresource == Subresource::Scale {
        // The Scale's spec.replicas is the object's spec.replicas.
        let replicas = applied["spec"]["replicas"].clone();
        applied = json!({"apiVersion": rt.api_version(), "kind": rt.kind, "metadata": {"name": name},
                         "spec": {"replicas": replicas}});
    }
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let scope = Scope::of(&rt, subresource == Subresource::Status);
    let applied_set = managed::to_field_set(&rt.kind, &applied, scope);
    let namespace = if rt.namespaced { namespace } else { None };
    let key = store::key(namespace, name);
    let Some(existing) = store.get(resource, &key).cloned() else {
        if subresource != Subresource::Main {
            return Err(ApiError::NotFound { resource: super::status::Resource::of(&rt), name: name.into() });
        }
        let entry = Entry {
            manager,
            operation: Operation::Apply,
            api_version: api_version.clone(),
            time: Some(crate::workload::ts(opts.now)),
            subresource: None,
            fields: applied_set,
        };
        return ops::create_managed(store, resource, namespace, applied, opts, vec![entry]);
    };
    let live = existing.value();
    if let Some(rv) = applied["metadata"]["resourceVersion"].as_str().filter(|s| !s.is_empty()) {
        if rv != existing.rv.to_string() {
            return Err(ApiError::stale(super::status::Resource::of(&rt), name));
        }
    }
    let sub_name = match subresource {
        Subresource::Main => None,
        Subresource::Status => Some("status".to_string()),
        Subresource::Scale => Some("scale".to_string()),
        Subresource::EphemeralContainers => Some("ephemeralcontainers".to_string()),
    };
    let mut entries = managed::entries(&live);
    let is_mine = |e: &Entry| e.manager == manager && e.operation == Operation::Apply && e.subresource == sub_name;
    // Conflicts: leaves this configuration sets to a value other than the live one, owned by someone else.
    let mut conflicts = Vec::new();
    for path in &applied_set {
        if !is_leaf(&applied_set, path) {
            continue;
        }
        let (Some(wanted), Some(current)) = (managed::get(&applied, path), managed::get(&live, path)) else { continue };
        if wanted == current {
            continue;
        }
        for entry in entries.iter().filter(|e| !is_mine(e)) {
            if entry.fields.contains(path) {
                conflicts.push((path.clone(), entry.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !opts.force {
        return Err(conflict_error(&conflicts));
    }
    let mut merged = live.clone();
    merge(&rt.kind, &mut merged, &applied, &mut Vec::new());
    // Fields this manager applied before and no longer applies, owned by nobody else, go away.
    let previous: FieldSet = entries.iter().find(|e| is_mine(e)).map(|e| e.fields.clone()).unwrap_or_default();
    for path in previous.difference(&applied_set) {
        let owned_elsewhere = entries.iter().filter(|e| !is_mine(e)).any(|e| e.fields.iter().any(|p| p.starts_with(path)));
        if !owned_elsewhere {
            managed::remove(&mut merged, path);
        }
    }
    for entry in entries.iter_mut().filter(|e| !is_mine(e)) {
        if opts.force {
            for (path, _) in &conflicts {
                entry.fields.remove(path);
            }
        }
    }
    entries.retain(|e| !is_mine(e));
    entries.insert(
        0,
        Entry {
            manager,
            operation: Operation::Apply,
            api_version,
            time: Some(crate::workload::ts(opts.now)),
            subresource: sub_name,
            fields: applied_set,
        },
    );
    for entry in &mut entries {
        managed::prune(&mut entry.fields, &merged);
    }
    managed::set_entries(&mut merged, entries);
    let update_as = match subresource {
        Subresource::Status => Subresource::Status,
        _ => Subresource::Main,
    };
    let written = ops::update_managed(store, resource, namespace, name, merged, update_as, opts)?;
    if subresource == Subresource::Scale {
        let stored: Value = serde_json::from_slice(&written.body).unwrap_or(Value::Null);
        let scale = ops::scale_of(&rt, &stored)?;
        return Ok(Written { code: 200, body: bytes::Bytes::from(scale.to_string()) });
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use chrono::TimeZone;
    use kubefold_engine::resources::ResourceType;

    fn setup() -> (Store, usize) {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 1000, 300, 7);
        let namespaces = store.resource_index("", "v1", "namespaces").unwrap();
        store.load(namespaces, json!({"metadata": {"name": "default", "uid": "ns"}, "status": {"phase": "Active"}}));
        store.finish_load();
        let deployments = store.resource_index("apps", "v1", "deployments").unwrap();
        (store, deployments)
    }

    fn opts(manager: &str) -> WriteOptions {
        let mut o = WriteOptions::at(chrono::Utc.with_ymd_and_hms(2025, 6, 1, 12, 0, 0).unwrap());
        o.field_manager = Some(manager.into());
        o
    }

    const CONFIG: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n";

    fn body(w: &Written) -> Value {
        serde_json::from_slice(&w.body).unwrap()
    }

    #[test]
    fn apply_creates_then_merges_and_reports_conflicts() {
        let (mut s, d) = setup();
        let created = apply(&mut s, d, Some("default"), "web", CONFIG.as_bytes(), Subresource::Main, &opts("alice")).unwrap();
        assert_eq!(created.code, 201);
        let object = body(&created);
        assert_eq!(object["spec"]["replicas"], 2);
        assert_eq!(object["metadata"]["managedFields"][0]["manager"], "alice");
        assert_eq!(object["metadata"]["managedFields"][0]["operation"], "Apply");
        // The same configuration again changes nothing.
        let again = apply(&mut s, d, Some("default"), "web", CONFIG.as_bytes(), Subresource::Main, &opts("alice")).unwrap();
        assert_eq!(body(&again)["metadata"]["resourceVersion"], object["metadata"]["resourceVersion"]);
        // Another manager setting replicas differently conflicts.
        let bob = CONFIG.replace("replicas: 2", "replicas: 5");
        let error = apply(&mut s, d, Some("default"), "web", bob.as_bytes(), Subresource::Main, &opts("bob")).unwrap_err();
        assert_eq!(error.code(), 409);
        assert_eq!(error.to_string(), "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
        // With force it takes the field over.
        let mut forced = opts("bob");
        forced.force = true;
        let taken = body(&apply(&mut s, d, Some("default"), "web", bob.as_bytes(), Subresource::Main, &forced).unwrap());
        assert_eq!(taken["spec"]["replicas"], 5);
        // Alice drops replicas from her config: bob still owns it, it stays.
        let alice = CONFIG.replace("  replicas: 2\n", "");
        let kept = body(&apply(&mut s, d, Some("default"), "web", alice.as_bytes(), Subresource::Main, &opts("alice")).unwrap());
        assert_eq!(kept["spec"]["replicas"], 5);
    }

    #[test]
    fn fields_no_longer_applied_are_removed() {
        let (mut s, d) = setup();
        let with_label = CONFIG.replace("    app: web\nspec", "    app: web\n    tier: front\nspec");
        apply(&mut s, d, Some("default"), "web", with_label.as_bytes(), Subresource::Main, &opts("alice")).unwrap();
        let removed = body(&apply(&mut s, d, Some("default"), "web", CONFIG.as_bytes(), Subresource::Main, &opts("alice")).unwrap());
        assert_eq!(removed["metadata"]["labels"], json!({"app": "web"}));
    }

    #[test]
    fn field_manager_is_required() {
        let (mut s, d) = setup();
        let mut no_manager = opts("x");
        no_manager.field_manager = None;
        let error = apply(&mut s, d, Some("default"), "web", CONFIG.as_bytes(), Subresource::Main, &no_manager).unwrap_err();
        assert_eq!(error.code(), 422);
        assert_eq!(error.to_string(), "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch");
    }
}
