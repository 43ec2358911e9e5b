//! The write verbs (create, update, patch, delete, delete collection) with
//! the semantics of kube-apiserver's generic registry (`registry/generic/
//! registry/store.go`) and the types' strategies (`PrepareForCreate`,
//! `PrepareForUpdate`): system fields, defaults, optimistic concurrency,
//! no-op updates that do not bump the resource version, status
//! subresources, graceful pod deletion, finalizers, and cascading deletion.
//!
//! These are synchronous functions over the [`Store`]; the HTTP layer calls
//! them under the store's write lock, and tests call them directly.
//!
//! - this module: the options of a write, get, create, update, patch and scale;
//! - `strategy`: the types' strategies (defaults, validation, immutable fields);
//! - `delete`: delete and delete collection.
//! - `ephemeral`: `pods/ephemeralcontainers` (`kubectl debug`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Map, Value};

use super::controllers::Task;
use super::list::{parse_bool, parse_rv, query_value};
use super::managed;
use super::patch::{self, PatchType};
use super::status::{ApiError, Cause, Resource, Result};
use super::store::{self, Object, Store};
use super::validation;
use crate::workload;

mod delete;
pub mod ephemeral;
mod strategy;

pub use self::delete::*;
use self::strategy::*;

/// Options of one write request.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldManager` (required for server-side apply).
    pub field_manager: Option<String>,
    /// `force` (server-side apply: take over conflicting fields).
    pub force: bool,
    /// The clock of the write.
    pub now: DateTime<Utc>,
    /// The manager of writes without `fieldManager`: the User-Agent's
    /// product name, as kube-apiserver derives it (`kubectl`, `kube-rs`).
    pub default_manager: String,
}

impl WriteOptions {
    /// A plain write at `now`.
    pub fn at(now: DateTime<Utc>) -> WriteOptions {
        WriteOptions { dry_run: false, field_manager: None, force: false, now, default_manager: "unknown".into() }
    }

    /// The manager recorded in managedFields.
    pub fn manager(&self) -> String {
        self.field_manager.clone().unwrap_or_else(|| self.default_manager.clone())
    }

    /// Parses `dryRun`, `fieldManager` and `force` from the query.
    pub fn from_query(query: &[(String, String)], now: DateTime<Utc>) -> Result<WriteOptions> {
        let dry_run = match query_value(query, "dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
                )))
            }
        };
        let field_manager = query_value(query, "fieldManager").filter(|m| !m.is_empty()).map(str::to_string);
        if field_manager.as_ref().is_some_and(|m| m.len() > 128) {
            return Err(ApiError::invalid_list_options(vec![Cause::invalid(
                "fieldManager",
                field_manager.as_deref().unwrap_or_default(),
                "must be no more than 128 characters",
            )]));
        }
        let force = parse_bool("force", query_value(query, "force").unwrap_or_default())?;
        Ok(WriteOptions { dry_run, field_manager, force, now, default_manager: "unknown".into() })
    }
}

/// The part of an object a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself (its status is kept when the type has a status subresource).
    Main,
    /// `/status`: only the status changes.
    Status,
    /// `/scale`: an `autoscaling/v1` Scale view of `spec.replicas`.
    Scale,
    /// `pods/ephemeralcontainers`: only `spec.ephemeralContainers` changes.
    EphemeralContainers,
}

/// The answer of a write: HTTP code and body.
#[derive(Debug, Clone)]
pub struct Written {
    /// 200 or 201.
    pub code: u16,
    /// The JSON body.
    pub body: Bytes,
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the object now, its dependents in the background (default).
    Background,
    /// Delete the dependents first, then the object.
    Foreground,
    /// Delete the object and keep its dependents (without the owner reference).
    Orphan,
}

/// `DeleteOptions` from the body and the query.
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy` (or the deprecated `orphanDependents`).
    pub propagation: Propagation,
}

impl DeleteOptions {
    /// Parses a `DeleteOptions` body (may be empty) and the query parameters.
    pub fn parse(body: &[u8], query: &[(String, String)]) -> Result<(DeleteOptions, bool)> {
        let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
        };
        let mut grace_period_seconds = value["gracePeriodSeconds"].as_i64();
        if let Some(g) = query_value(query, "gracePeriodSeconds").filter(|g| !g.is_empty()) {
            grace_period_seconds = Some(g.parse().map_err(|_| {
                ApiError::BadRequest(format!("gracePeriodSeconds: strconv.ParseInt: parsing \"{g}\": invalid syntax"))
            })?);
        }
        let policy = query_value(query, "propagationPolicy")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .or_else(|| value["propagationPolicy"].as_str().map(str::to_string));
        let orphan = match query_value(query, "orphanDependents") {
            Some(o) if !o.is_empty() => Some(parse_bool("orphanDependents", o)?),
            _ => value["orphanDependents"].as_bool(),
        };
        let propagation = match (policy.as_deref(), orphan) {
            (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
            (Some("Foreground"), _) => Propagation::Foreground,
            (Some("Background") | None, _) => Propagation::Background,
            (Some(other), _) => {
                return Err(ApiError::BadRequest(format!(
                    "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                )))
            }
        };
        let dry_run = value["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All"));
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        Ok((
            DeleteOptions {
                grace_period_seconds,
                uid: text(&value["preconditions"]["uid"]),
                resource_version: text(&value["preconditions"]["resourceVersion"]),
                propagation,
            },
            dry_run,
        ))
    }
}

impl Default for DeleteOptions {
    fn default() -> Self {
        DeleteOptions { grace_period_seconds: None, uid: None, resource_version: None, propagation: Propagation::Background }
    }
}

/// How long the simulated kubelet takes at most to confirm a graceful pod
/// deletion (a real one waits for the containers to stop, up to the grace period).
pub const KUBELET_DELETE_DELAY: Duration = Duration::from_secs(1);

/// `metav1.Time` of `now`.
fn ts(now: DateTime<Utc>) -> String {
    workload::ts(now)
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    match object["metadata"].as_object_mut() {
        Some(meta) => meta,
        None => unreachable!("metadata was just made an object"),
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object["metadata"][field].as_str().filter(|s| !s.is_empty())
}

/// Whether kube-apiserver maintains `metadata.generation` for the type.
pub fn has_generation(resource: &ResourceType) -> bool {
    matches!(
        (resource.group.as_str(), resource.plural.as_str()),
        ("", "pods") | ("apps", _) | ("discovery.k8s.io", "endpointslices")
    )
}

/// Whether DELETE answers with the deleted object (`ReturnDeletedObject`)
/// rather than a `Status`.
fn returns_deleted_object(resource: &ResourceType) -> bool {
    matches!((resource.group.as_str(), resource.plural.as_str()), ("", "pods" | "services" | "namespaces"))
}

fn is(resource: &ResourceType, group: &str, plural: &str) -> bool {
    resource.group == group && resource.plural == plural
}

/// The object at `namespace/name` or 404.
pub fn get(store: &Store, resource: usize, namespace: Option<&str>, name: &str) -> Result<Arc<Object>> {
    store
        .get(resource, &store::key(namespace, name))
        .cloned()
        .ok_or_else(|| ApiError::NotFound { resource: Resource::of(store.resource(resource)), name: name.into() })
}

/// POST of a new object (201 Created).
pub fn create(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    body: Value,
    opts: &WriteOptions,
) -> Result<Written> {
    create_inner(store, resource, namespace, body, opts, None)
}

/// A create whose managedFields are given (server-side apply creating the object).
pub fn create_managed(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    body: Value,
    opts: &WriteOptions,
    entries: Vec<managed::Entry>,
) -> Result<Written> {
    create_inner(store, resource, namespace, body, opts, Some(entries))
}

fn create_inner(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    mut body: Value,
    opts: &WriteOptions,
    entries: Option<Vec<managed::Entry>>,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    check_type_meta(&rt, &mut body)?;
    set_namespace(&rt, &mut body, namespace)?;
    if meta_str(&body, "name").is_none() {
        if let Some(base) = meta_str(&body, "generateName").map(str::to_string) {
            // names.SimpleNameGenerator: at most 58 characters of the base, 5 random ones.
            let base: String = base.chars().take(58).collect();
            let name = format!("{base}{}", workload::suffix(&mut store.rng, 5));
            meta_mut(&mut body).insert("name".into(), json!(name));
        }
    }
    if meta_str(&body, "resourceVersion").is_some() {
        return Err(ApiError::Internal("resourceVersion should not be set on objects to be created".into()));
    }
    let name = meta_str(&body, "name").unwrap_or_default().to_string();
    validate(&rt, &body, None)?;
    let namespace = if rt.namespaced { namespace } else { None };
    if let Some(ns) = namespace {
        check_namespace(store, &rt, ns, &name)?;
    }
    let key = store::key(namespace, &name);
    if store.get(resource, &key).is_some() {
        return Err(ApiError::AlreadyExists { resource: Resource::of(&rt), name });
    }
    let uid = workload::uid(&mut store.rng);
    {
        let meta = meta_mut(&mut body);
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(ts(opts.now)));
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "resourceVersion"] {
            meta.remove(field);
        }
        if has_generation(&rt) {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    prepare_for_create(store, &rt, &mut body);
    match entries {
        Some(entries) => managed::set_entries(&mut body, entries),
        None => {
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            managed::record(&mut body, None, opts, managed::Operation::Update, &rt);
        }
    }
    if opts.dry_run {
        return Ok(Written { code: 201, body: Object::encode(&rt, &body, 0).bytes() });
    }
    let change = store.put(resource, &key, body);
    if is(&rt, "", "pods") {
        store.schedule(Task::StartPod { resource, key, uid });
    } else {
        schedule_controller(store, &rt, resource, &key);
    }
    Ok(Written { code: 201, body: change.object.bytes() })
}

/// PUT of an object or its status.
pub fn update(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    body: Value,
    subresource: Subresource,
    opts: &WriteOptions,
) -> Result<Written> {
    update_inner(store, resource, namespace, name, body, subresource, opts, true)
}

/// An update whose body already carries its managedFields (server-side apply).
pub fn update_managed(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    body: Value,
    subresource: Subresource,
    opts: &WriteOptions,
) -> Result<Written> {
    update_inner(store, resource, namespace, name, body, subresource, opts, false)
}

#[allow(clippy::too_many_arguments)]
fn update_inner(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    mut body: Value,
    subresource: Subresource,
    opts: &WriteOptions,
    record: bool,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    if subresource == Subresource::Scale {
        return update_scale(store, resource, namespace, name, body, opts);
    }
    check_type_meta(&rt, &mut body)?;
    match meta_str(&body, "name") {
        None => {
            meta_mut(&mut body).insert("name".into(), json!(name));
        }
        Some(n) if n != name => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        Some(_) => {}
    }
    set_namespace(&rt, &mut body, namespace)?;
    let namespace = if rt.namespaced { namespace } else { None };
    let key = store::key(namespace, name);
    let Some(existing) = store.get(resource, &key).cloned() else {
        // Events are created by PUT (AllowCreateOnUpdate); other types are not.
        if is(&rt, "", "events") && subresource == Subresource::Main {
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            return create(store, resource, namespace, body, opts);
        }
        return Err(ApiError::NotFound { resource: Resource::of(&rt), name: name.into() });
    };
    check_preconditions(&rt, name, &existing, meta_str(&body, "uid"), meta_str(&body, "resourceVersion"), true)?;
    let old = existing.value();
    let mut new = merge_for_update(&rt, &old, body, subresource);
    if subresource == Subresource::EphemeralContainers {
        ephemeral::validate(&rt, name, &old, &new)?;
    }
    if record {
        let scope = managed::Scope::of(&rt, subresource == Subresource::Status);
        managed::record_scoped(&mut new, Some(&old), opts, managed::Operation::Update, &rt, scope);
    }
    let written = finish_update(store, resource, &key, &old, new, opts)?;
    if subresource == Subresource::EphemeralContainers && !opts.dry_run {
        store.schedule(Task::StartEphemeralContainers { resource, key, uid: existing.uid().into_owned() });
    }
    Ok(written)
}

/// Checks a write's uid and resourceVersion against the stored object.
fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    existing: &Object,
    uid: Option<&str>,
    rv: Option<&str>,
    stale_message: bool,
) -> Result<()> {
    if let Some(uid) = uid {
        if uid != existing.uid() {
            return Err(ApiError::Conflict {
                resource: Resource::of(rt),
                name: name.into(),
                detail: format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", existing.uid()),
            });
        }
    }
    if let Some(rv) = rv {
        let wanted = parse_rv(rv)?;
        if wanted != existing.rv {
            if stale_message {
                return Err(ApiError::stale(Resource::of(rt), name));
            }
            return Err(ApiError::Conflict {
                resource: Resource::of(rt),
                name: name.into(),
                detail: format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    existing.rv
                ),
            });
        }
    }
    Ok(())
}

/// The object an update stores: the body, with the system fields of the
/// old object and, per subresource, the old status or the old everything-but-status.
fn merge_for_update(rt: &ResourceType, old: &Value, mut body: Value, subresource: Subresource) -> Value {
    if subresource == Subresource::EphemeralContainers {
        return ephemeral::merge(old, &body);
    }
    if subresource == Subresource::Status {
        // ResetObjectMetaForStatus and the strategies' PrepareForUpdate: only status changes.
        let mut merged = old.clone();
        match body.as_object_mut().and_then(|m| m.remove("status")) {
            Some(status) => merged["status"] = status,
            None => {
                if let Some(map) = merged.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        if let Some(managed) = body["metadata"].get("managedFields").cloned() {
            merged["metadata"]["managedFields"] = managed;
        }
        return merged;
    }
    let old_meta = &old["metadata"];
    {
        let meta = meta_mut(&mut body);
        for field in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
            match old_meta.get(field) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.remove(field),
            };
        }
        if !meta.contains_key("managedFields") {
            if let Some(managed) = old_meta.get("managedFields") {
                meta.insert("managedFields".into(), managed.clone());
            }
        }
        meta.remove("selfLink");
        meta.insert("resourceVersion".into(), old_meta["resourceVersion"].clone());
    }
    if rt.subresources.iter().any(|s| s == "status") {
        match old.get("status") {
            Some(status) => body["status"] = status.clone(),
            None => {
                if let Some(map) = body.as_object_mut() {
                    map.remove("status");
                }
            }
        }
    }
    if is(rt, "", "namespaces") {
        body["spec"] = old["spec"].clone();
        let name = old_meta["name"].clone();
        let meta = meta_mut(&mut body);
        if !meta.get("labels").is_some_and(Value::is_object) {
            meta.insert("labels".into(), json!({}));
        }
        meta["labels"]["kubernetes.io/metadata.name"] = name;
    }
    if is(rt, "", "services") {
        // patchAllocatedValues: allocated IPs and node ports survive an update that omits them.
        if body["spec"]["clusterIP"].as_str().is_none_or(str::is_empty) && old["spec"]["clusterIP"].is_string() {
            body["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
            body["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        if let Some(ports) = body.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ports {
                if p["nodePort"].as_i64().unwrap_or(0) == 0 {
                    if let Some(old) = old_ports.iter().find(|o| o["port"] == p["port"] && o["nodePort"].is_number()) {
                        p["nodePort"] = old["nodePort"].clone();
                    }
                }
            }
        }
    }
    if is(rt, "", "pods") {
        default_pod_spec_for_update(&mut body["spec"], &old["spec"]);
        // Ephemeral containers change through their subresource only.
        match old["spec"].get("ephemeralContainers") {
            Some(containers) => body["spec"]["ephemeralContainers"] = containers.clone(),
            None => {
                if let Some(spec) = body["spec"].as_object_mut() {
                    spec.remove("ephemeralContainers");
                }
            }
        }
    }
    body
}

/// Defaults a client may omit on a pod update, taken from the old spec.
fn default_pod_spec_for_update(spec: &mut Value, old: &Value) {
    default_containers(spec);
    if let (Some(map), Some(old)) = (spec.as_object_mut(), old.as_object()) {
        for field in ["restartPolicy", "terminationGracePeriodSeconds", "dnsPolicy", "securityContext", "schedulerName",
                      "enableServiceLinks", "preemptionPolicy", "priority", "serviceAccount", "serviceAccountName", "nodeName"] {
            if !map.contains_key(field) {
                if let Some(value) = old.get(field) {
                    map.insert(field.into(), value.clone());
                }
            }
        }
    }
}

/// Validates and stores an updated object: bumps `generation` when the
/// spec changed, skips the write when nothing changed (as etcd3's
/// GuaranteedUpdate does), deletes an object whose last finalizer was removed.
fn finish_update(
    store: &mut Store,
    resource: usize,
    key: &str,
    old: &Value,
    mut new: Value,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    validate(&rt, &new, Some(old))?;
    let spec_changed = if is(&rt, "discovery.k8s.io", "endpointslices") {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        };
        strip(old) != strip(&new)
    } else {
        old.get("spec") != new.get("spec")
    };
    if has_generation(&rt) && spec_changed {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta_mut(&mut new).insert("generation".into(), json!(generation));
    }
    if managed::without_timestamps(&new) == managed::without_timestamps(old) {
        let existing = store.get(resource, key).map(|o| o.bytes()).unwrap_or_default();
        return Ok(Written { code: 200, body: existing });
    }
    let being_deleted = new["metadata"]["deletionTimestamp"].is_string();
    let finalizers_left = new["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let zero_grace = old["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0);
    if opts.dry_run {
        let rv = parse_rv(meta_str(old, "resourceVersion").unwrap_or("0")).unwrap_or(0);
        return Ok(Written { code: 200, body: Object::encode(&rt, &new, rv).bytes() });
    }
    if being_deleted && !finalizers_left && zero_grace {
        let uid = meta_str(&new, "uid").unwrap_or_default().to_string();
        let namespace = meta_str(&new, "namespace").map(str::to_string);
        let change = store.remove(resource, key, new).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
        store.schedule(Task::CollectDependents { namespace, owner_uid: uid, orphan: false });
        return Ok(Written { code: 200, body: change.object.bytes() });
    }
    let change = store.put(resource, key, new);
    if spec_changed {
        schedule_controller(store, &rt, resource, key);
    }
    Ok(Written { code: 200, body: change.object.bytes() })
}

/// Queues the controller of a Deployment or ReplicaSet whose spec was
/// written (created, updated, scaled).
fn schedule_controller(store: &Store, rt: &ResourceType, resource: usize, key: &str) {
    if is(rt, "apps", "deployments") {
        store.schedule(Task::SyncDeployment { resource, key: key.into() });
    } else if is(rt, "apps", "replicasets") {
        store.schedule(Task::SyncReplicaSet { resource, key: key.into() });
    }
}

/// PATCH of an object or its status or scale.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    patch_type: PatchType,
    body: &[u8],
    subresource: Subresource,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let namespace = if rt.namespaced { namespace } else { None };
    if patch_type == PatchType::Apply {
        return super::apply::apply(store, resource, namespace, name, body, subresource, opts);
    }
    let existing = get(store, resource, namespace, name)?;
    let original = match subresource {
        Subresource::Scale => scale_of(&rt, &existing.value())?,
        _ => existing.value(),
    };
    let mut patched = original.clone();
    match patch_type {
        PatchType::Merge => patch::merge_patch(&mut patched, &patch::decode_merge_patch(body)?),
        PatchType::Json => patch::json_patch(&mut patched, body)?,
        PatchType::Strategic => {
            let kind = if subresource == Subresource::Scale { ("autoscaling", "Scale") } else { (rt.group.as_str(), rt.kind.as_str()) };
            super::strategic::patch(kind, &mut patched, body)?
        }
        PatchType::Apply => unreachable!("handled above"),
    }
    // A patch may not move the object (checkName in kube-apiserver's patcher).
    if patched["metadata"]["name"] != original["metadata"]["name"] {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            patched["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    if rt.namespaced && subresource != Subresource::Scale && patched["metadata"]["namespace"] != original["metadata"]["namespace"] {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        ));
    }
    if subresource == Subresource::Scale {
        return update_scale(store, resource, namespace, name, patched, opts);
    }
    update(store, resource, namespace, name, patched, subresource, opts)
}

/// The `autoscaling/v1` Scale of a deployment, replica set or stateful set.
pub fn scale_of(rt: &ResourceType, object: &Value) -> Result<Value> {
    if !rt.subresources.iter().any(|s| s == "scale") {
        return Err(ApiError::PathNotFound);
    }
    let meta = &object["metadata"];
    let selector = super::selector::LabelSelector::from_object(&object["spec"]["selector"])
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut scale_meta = json!({
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
        "creationTimestamp": meta["creationTimestamp"],
    });
    if let Some(map) = scale_meta.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    }))
}

/// PUT of a Scale: sets `spec.replicas`, answers with the new Scale.
fn update_scale(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    scale: Value,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let existing = get(store, resource, namespace, name)?;
    if let Some(api_version) = scale["apiVersion"].as_str().filter(|s| !s.is_empty()) {
        if api_version != "autoscaling/v1" {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({api_version}) does not match the expected API version (autoscaling/v1)"
            )));
        }
    }
    if let Some(n) = meta_str(&scale, "name").filter(|n| *n != name) {
        return Err(ApiError::BadRequest(format!("the name of the object ({n}) does not match the name on the URL ({name})")));
    }
    check_preconditions(&rt, name, &existing, meta_str(&scale, "uid"), meta_str(&scale, "resourceVersion"), true)?;
    let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::Invalid {
            group: "autoscaling".into(),
            kind: "Scale".into(),
            name: name.into(),
            causes: vec![Cause::invalid("spec.replicas", &replicas.to_string(), "must be greater than or equal to 0")],
        });
    }
    let old = existing.value();
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(replicas);
    managed::record(&mut new, Some(&old), opts, managed::Operation::Update, &rt);
    let key = store::key(namespace, name);
    let written = finish_update(store, resource, &key, &old, new, opts)?;
    let stored: Value = serde_json::from_slice(&written.body).unwrap_or(Value::Null);
    let scale = scale_of(&rt, &stored)?;
    Ok(Written { code: 200, body: Bytes::from(scale.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 6, 1, 12, 0, 0).unwrap()
    }

    fn setup() -> (Store, usize, usize) {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 1000, 300, 42);
        let namespaces = store.resource_index("", "v1", "namespaces").unwrap();
        store.load(namespaces, json!({"metadata": {"name": "default", "uid": "ns"}, "status": {"phase": "Active"}}));
        store.finish_load();
        let pods = store.resource_index("", "v1", "pods").unwrap();
        let deployments = store.resource_index("apps", "v1", "deployments").unwrap();
        (store, pods, deployments)
    }

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}})
    }

    fn body(w: &Written) -> Value {
        serde_json::from_slice(&w.body).unwrap()
    }

    fn opts() -> WriteOptions {
        WriteOptions::at(now())
    }

    #[test]
    fn create_sets_system_fields_and_defaults() {
        let (mut s, pods, _) = setup();
        let w = create(&mut s, pods, Some("default"), pod("web-0"), &opts()).unwrap();
        assert_eq!(w.code, 201);
        let p = body(&w);
        assert_eq!(p["metadata"]["resourceVersion"], "301");
        assert_eq!(p["metadata"]["generation"], 1);
        assert_eq!(p["metadata"]["creationTimestamp"], "2025-06-01T12:00:00Z");
        assert_eq!(p["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        assert!(p["spec"]["volumes"][0]["name"].as_str().unwrap().starts_with("kube-api-access-"));
        let again = create(&mut s, pods, Some("default"), pod("web-0"), &opts()).unwrap_err();
        assert_eq!(again.to_string(), "pods \"web-0\" already exists");
    }

    #[test]
    fn create_generates_names_and_validates() {
        let (mut s, pods, _) = setup();
        let mut generated = pod("");
        generated["metadata"] = json!({"generateName": "web-"});
        let p = body(&create(&mut s, pods, Some("default"), generated, &opts()).unwrap());
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        let bad = create(&mut s, pods, Some("default"), pod("Web_0"), &opts()).unwrap_err();
        assert_eq!(bad.code(), 422);
        assert!(bad.to_string().starts_with("Pod \"Web_0\" is invalid: metadata.name: Invalid value: \"Web_0\": a lowercase RFC 1123 subdomain"));
        let missing_ns = create(&mut s, pods, Some("nope"), pod("x"), &opts()).unwrap_err();
        assert_eq!(missing_ns.to_string(), "namespaces \"nope\" not found");
        let mut with_rv = pod("y");
        with_rv["metadata"]["resourceVersion"] = json!("5");
        assert_eq!(create(&mut s, pods, Some("default"), with_rv, &opts()).unwrap_err().code(), 500);
    }

    #[test]
    fn update_checks_resource_version_and_skips_no_ops() {
        let (mut s, pods, _) = setup();
        let created = body(&create(&mut s, pods, Some("default"), pod("a"), &opts()).unwrap());
        let mut stale = created.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        let error = update(&mut s, pods, Some("default"), "a", stale, Subresource::Main, &opts()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Operation cannot be fulfilled on pods \"a\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let same = update(&mut s, pods, Some("default"), "a", created.clone(), Subresource::Main, &opts()).unwrap();
        assert_eq!(body(&same)["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
        let mut relabel = created.clone();
        relabel["metadata"]["labels"]["tier"] = json!("front");
        let updated = body(&update(&mut s, pods, Some("default"), "a", relabel, Subresource::Main, &opts()).unwrap());
        assert_eq!(updated["metadata"]["resourceVersion"], "302");
        assert_eq!(updated["metadata"]["generation"], 1, "labels are not spec");
        let mut image = updated.clone();
        image["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        let updated = body(&update(&mut s, pods, Some("default"), "a", image, Subresource::Main, &opts()).unwrap());
        assert_eq!(updated["metadata"]["generation"], 2);
        let mut forbidden = updated.clone();
        forbidden["spec"]["restartPolicy"] = json!("Never");
        let error = update(&mut s, pods, Some("default"), "a", forbidden, Subresource::Main, &opts()).unwrap_err();
        assert_eq!(error.code(), 422);
        assert!(error.to_string().contains("spec: Forbidden: pod updates may not change fields"));
    }

    #[test]
    fn status_and_main_updates_touch_only_their_part() {
        let (mut s, pods, _) = setup();
        let created = body(&create(&mut s, pods, Some("default"), pod("a"), &opts()).unwrap());
        let mut main = created.clone();
        main["status"]["phase"] = json!("Running");
        main["metadata"]["labels"]["x"] = json!("1");
        let after_main = body(&update(&mut s, pods, Some("default"), "a", main, Subresource::Main, &opts()).unwrap());
        assert_eq!(after_main["status"]["phase"], "Pending");
        let mut status = after_main.clone();
        status["status"]["phase"] = json!("Running");
        status["metadata"]["labels"]["y"] = json!("2");
        let after_status = body(&update(&mut s, pods, Some("default"), "a", status, Subresource::Status, &opts()).unwrap());
        assert_eq!(after_status["status"]["phase"], "Running");
        assert!(after_status["metadata"]["labels"].get("y").is_none());
    }

    #[test]
    fn patches_go_through_the_update_rules() {
        let (mut s, pods, _) = setup();
        create(&mut s, pods, Some("default"), pod("a"), &opts()).unwrap();
        let merged = patch(&mut s, pods, Some("default"), "a", PatchType::Merge, br#"{"metadata":{"labels":{"app":null,"new":"yes"}}}"#, Subresource::Main, &opts()).unwrap();
        assert_eq!(body(&merged)["metadata"]["labels"], json!({"new": "yes"}));
        let stale = patch(&mut s, pods, Some("default"), "a", PatchType::Merge, br#"{"metadata":{"resourceVersion":"1"}}"#, Subresource::Main, &opts()).unwrap_err();
        assert_eq!(stale.reason(), "Conflict");
        let json_patched = patch(&mut s, pods, Some("default"), "a", PatchType::Json, br#"[{"op":"replace","path":"/metadata/labels/new","value":"no"}]"#, Subresource::Main, &opts()).unwrap();
        assert_eq!(body(&json_patched)["metadata"]["labels"]["new"], "no");
        let missing = patch(&mut s, pods, Some("default"), "b", PatchType::Merge, b"{}", Subresource::Main, &opts()).unwrap_err();
        assert_eq!(missing.code(), 404);
        let rename = patch(&mut s, pods, Some("default"), "a", PatchType::Merge, br#"{"metadata":{"name":"b"}}"#, Subresource::Main, &opts()).unwrap_err();
        assert_eq!(rename.code(), 400);
    }

    #[test]
    fn deletes_honour_preconditions_and_return_object_or_status() {
        let (mut s, pods, deployments) = setup();
        let created = body(&create(&mut s, pods, Some("default"), pod("a"), &opts()).unwrap());
        let wrong = DeleteOptions { uid: Some("nope".into()), ..Default::default() };
        let error = delete(&mut s, pods, Some("default"), "a", &wrong, &opts()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("Operation cannot be fulfilled on pods \"a\": Precondition failed: UID in precondition: nope, UID in object meta: {}", created["metadata"]["uid"].as_str().unwrap())
        );
        let stale = DeleteOptions { resource_version: Some("1".into()), ..Default::default() };
        assert_eq!(delete(&mut s, pods, Some("default"), "a", &stale, &opts()).unwrap_err().code(), 409);
        // Unscheduled pod: deleted at once, the object is returned with the deletion's version.
        let deleted = body(&delete(&mut s, pods, Some("default"), "a", &DeleteOptions::default(), &opts()).unwrap());
        assert_eq!(deleted["metadata"]["name"], "a");
        assert_eq!(deleted["metadata"]["resourceVersion"], s.rv().to_string());
        assert!(s.get(pods, "default/a").is_none());
        let deploy = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
        create(&mut s, deployments, Some("default"), deploy, &opts()).unwrap();
        let status = body(&delete(&mut s, deployments, Some("default"), "d", &DeleteOptions::default(), &opts()).unwrap());
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["status"], "Success");
        assert_eq!(status["details"]["group"], "apps");
        assert_eq!(status["details"]["kind"], "deployments");
    }

    #[test]
    fn scheduled_pods_are_deleted_gracefully_and_finalizers_hold_objects() {
        let (mut s, pods, _) = setup();
        let mut scheduled = pod("a");
        scheduled["spec"]["nodeName"] = json!("node-1");
        create(&mut s, pods, Some("default"), scheduled, &opts()).unwrap();
        let graceful = body(&delete(&mut s, pods, Some("default"), "a", &DeleteOptions::default(), &opts()).unwrap());
        assert_eq!(graceful["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(graceful["metadata"]["deletionTimestamp"], "2025-06-01T12:00:30Z");
        assert!(s.get(pods, "default/a").is_some());
        let force = DeleteOptions { grace_period_seconds: Some(0), ..Default::default() };
        delete(&mut s, pods, Some("default"), "a", &force, &opts()).unwrap();
        assert!(s.get(pods, "default/a").is_none());

        let mut held = pod("b");
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        create(&mut s, pods, Some("default"), held, &opts()).unwrap();
        let marked = body(&delete(&mut s, pods, Some("default"), "b", &DeleteOptions::default(), &opts()).unwrap());
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert!(s.get(pods, "default/b").is_some());
        let released = patch(&mut s, pods, Some("default"), "b", PatchType::Merge, br#"{"metadata":{"finalizers":null}}"#, Subresource::Main, &opts()).unwrap();
        assert_eq!(released.code, 200);
        assert!(s.get(pods, "default/b").is_none());
    }

    #[test]
    fn scale_reads_and_writes_replicas() {
        let (mut s, _, deployments) = setup();
        let deploy = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
        create(&mut s, deployments, Some("default"), deploy, &opts()).unwrap();
        let rt = s.resource(deployments).clone();
        let scale = scale_of(&rt, &get(&s, deployments, Some("default"), "d").unwrap().value()).unwrap();
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=d");
        let w = patch(&mut s, deployments, Some("default"), "d", PatchType::Merge, br#"{"spec":{"replicas":5}}"#, Subresource::Scale, &opts()).unwrap();
        let scale = body(&w);
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["spec"]["replicas"], 5);
        let d = get(&s, deployments, Some("default"), "d").unwrap().value();
        assert_eq!(d["spec"]["replicas"], 5);
        assert_eq!(d["metadata"]["generation"], 2);
    }
}
