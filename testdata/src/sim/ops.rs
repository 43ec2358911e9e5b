//! The write verbs (create, update, patch, delete, delete collection) with
//! the semantics of kube-apiserver's generic registry (`registry/generic/
//! registry/store.go`) and the types' strategies (`PrepareForCreate`,
//! `PrepareForUpdate`): system fields, defaults, optimistic concurrency,
//! no-op updates that do not bump the resource version, status
//! subresources, graceful pod deletion, finalizers, and cascading deletion.
//!
//! These are synchronous functions over the [`Store`]; the HTTP layer calls
//! them under the store's write lock, and tests call them directly.

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

/// Checks `apiVersion` and `kind` of a body against the URL's type and fills them in.
fn check_type_meta(resource: &ResourceType, body: &mut Value) -> Result<()> {
    if !body.is_object() {
        return Err(ApiError::BadRequest(format!(
            "Object '{}' is not a valid {}: the body must be a JSON object",
            resource.kind, resource.kind
        )));
    }
    let expected = resource.api_version();
    if let Some(api_version) = body["apiVersion"].as_str().filter(|s| !s.is_empty()) {
        if api_version != expected {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({expected})"
            )));
        }
    }
    if let Some(kind) = body["kind"].as_str().filter(|s| !s.is_empty()) {
        if kind != resource.kind {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                resource.kind
            )));
        }
    }
    body["apiVersion"] = json!(expected);
    body["kind"] = json!(resource.kind);
    Ok(())
}

/// Sets or checks `metadata.namespace` against the URL's namespace.
fn set_namespace(resource: &ResourceType, body: &mut Value, namespace: Option<&str>) -> Result<()> {
    let meta = meta_mut(body);
    if !resource.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let Some(namespace) = namespace else {
        return Err(ApiError::BadRequest("the namespace of the object is required".into()));
    };
    match meta.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(ns) if ns != namespace => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        )),
        _ => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
    }
}

/// NamespaceLifecycle admission: the namespace must exist and not be terminating.
fn check_namespace(store: &Store, resource: &ResourceType, namespace: &str, name: &str) -> Result<()> {
    let Some(namespaces) = store.resource_index("", "v1", "namespaces") else { return Ok(()) };
    match store.get(namespaces, namespace) {
        None => Err(ApiError::NotFound {
            resource: Resource { group: String::new(), plural: "namespaces".into() },
            name: namespace.into(),
        }),
        Some(ns) if ns.field("status.phase") == Some("Terminating") => Err(ApiError::Forbidden {
            resource: Resource::of(resource),
            name: name.into(),
            message: format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                Resource::of(resource).qualified()
            ),
        }),
        Some(_) => Ok(()),
    }
}

/// Validation of a new object or an update (`old`).
fn validate(resource: &ResourceType, object: &Value, old: Option<&Value>) -> Result<()> {
    let name = meta_str(object, "name").unwrap_or_default();
    let mut causes =
        validation::metadata_causes(validation::name_rule(&resource.group, &resource.plural), object);
    causes.extend(validation::type_causes(&resource.group, &resource.plural, object));
    if let Some(old) = old {
        causes.extend(immutability_causes(resource, old, object));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// The pod fields an update may change (`ValidatePodUpdate`).
const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn immutability_causes(resource: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if is(resource, "", "pods") {
        let mask = |spec: &Value, tolerations: &Value| {
            let mut spec = spec.clone();
            for list in ["containers", "initContainers"] {
                if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for c in containers {
                        c["image"] = Value::Null;
                    }
                }
            }
            if let Some(map) = spec.as_object_mut() {
                map.remove("activeDeadlineSeconds");
                map.remove("terminationGracePeriodSeconds");
                map.insert("tolerations".into(), tolerations.clone());
            }
            spec
        };
        let old_tolerations = old["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
        let new_tolerations = new["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
        let only_added = old_tolerations.iter().all(|t| new_tolerations.contains(t));
        let shown = if only_added { old["spec"]["tolerations"].clone() } else { new["spec"]["tolerations"].clone() };
        if mask(&old["spec"], &old["spec"]["tolerations"]) != mask(&new["spec"], &shown) {
            causes.push(Cause::forbidden("spec", POD_UPDATE_FORBIDDEN));
        }
    }
    if resource.group == "apps" && old["spec"]["selector"] != new["spec"]["selector"] {
        causes.push(Cause::invalid("spec.selector", &new["spec"]["selector"].to_string(), "field is immutable"));
    }
    if is(resource, "apps", "statefulsets") {
        for field in ["serviceName", "volumeClaimTemplates", "podManagementPolicy"] {
            if old["spec"][field] != new["spec"][field] {
                causes.push(Cause::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
                break;
            }
        }
    }
    causes
}

/// QoS class of a pod spec (`qos.GetPodQOS`, simplified to cpu and memory).
fn qos_class(spec: &Value) -> &'static str {
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = &c["resources"]["requests"];
        let limits = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            let request = requests[r].as_str().or(limits[r].as_str());
            any |= request.is_some() || limits[r].is_string();
            if limits[r].as_str().is_none() || request != limits[r].as_str() {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

fn default_field(object: &mut Value, field: &str, value: Value) {
    if let Some(map) = object.as_object_mut() {
        map.entry(field.to_string()).or_insert(value);
    }
}

/// Container defaults of the v1 API (`SetDefaults_Container`).
fn default_containers(spec: &mut Value) {
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                let image = c["image"].as_str().unwrap_or_default();
                let last = image.rsplit('/').next().unwrap_or_default();
                let latest = !last.contains(':') && !image.contains('@') || image.ends_with(":latest");
                default_field(c, "imagePullPolicy", json!(if latest { "Always" } else { "IfNotPresent" }));
                default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
                default_field(c, "terminationMessagePolicy", json!("File"));
                default_field(c, "resources", json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        default_field(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

/// Pod spec defaults (`SetDefaults_PodSpec`) and what admission adds
/// (service account token volume, default tolerations).
fn default_pod_spec(store: &mut Store, spec: &mut Value, admission: bool) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_containers(spec);
    if !admission {
        return;
    }
    default_field(spec, "enableServiceLinks", json!(true));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default_field(spec, "priority", json!(0));
    let account = spec["serviceAccountName"].as_str().filter(|s| !s.is_empty()).unwrap_or("default").to_string();
    spec["serviceAccountName"] = json!(account);
    spec["serviceAccount"] = json!(account);
    if spec["tolerations"].as_array().is_none() {
        spec["tolerations"] = json!([]);
    }
    if let Some(tolerations) = spec.get_mut("tolerations").and_then(Value::as_array_mut) {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            if !tolerations.iter().any(|t| t["key"] == key) {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let automount = spec["automountServiceAccountToken"].as_bool().unwrap_or(true);
    let has_token = spec["volumes"].as_array().is_some_and(|v| {
        v.iter().any(|v| v["name"].as_str().is_some_and(|n| n.starts_with("kube-api-access-")))
    });
    if automount && !has_token {
        let volume = format!("kube-api-access-{}", workload::suffix(&mut store.rng, 5));
        if spec["volumes"].as_array().is_none() {
            spec["volumes"] = json!([]);
        }
        if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
            volumes.push(json!({
                "name": volume,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                },
            }));
        }
        for list in ["initContainers", "containers"] {
            if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in containers {
                    if c["volumeMounts"].as_array().is_none() {
                        c["volumeMounts"] = json!([]);
                    }
                    if let Some(mounts) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                        mounts.push(json!({"name": volume, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}));
                    }
                }
            }
        }
    }
}

/// Allocates a free ClusterIP in 10.96.0.0/16.
fn allocate_cluster_ip(store: &mut Store) -> String {
    use rand::Rng;
    let services = store.resource_index("", "v1", "services");
    loop {
        let ip = format!("10.96.{}.{}", store.rng.random_range(1..255), store.rng.random_range(1..255));
        let taken = services.is_some_and(|s| store.range(s, "").any(|(_, o)| o.field("spec.clusterIP") == Some(ip.as_str())));
        if !taken {
            return ip;
        }
    }
}

/// The type-specific part of `PrepareForCreate`, defaults and admission.
fn prepare_for_create(store: &mut Store, resource: &ResourceType, object: &mut Value) {
    let name = meta_str(object, "name").unwrap_or_default().to_string();
    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "pods") => {
            default_pod_spec(store, &mut object["spec"], true);
            let qos = qos_class(&object["spec"]);
            object["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        ("", "namespaces") => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
            let meta = meta_mut(object);
            if !meta.get("labels").is_some_and(Value::is_object) {
                meta.insert("labels".into(), json!({}));
            }
            meta["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        ("", "services") => {
            let spec = &mut object["spec"];
            default_field(spec, "type", json!("ClusterIP"));
            default_field(spec, "sessionAffinity", json!("None"));
            let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
            if kind != "ExternalName" {
                default_field(spec, "internalTrafficPolicy", json!("Cluster"));
                default_field(spec, "ipFamilies", json!(["IPv4"]));
                default_field(spec, "ipFamilyPolicy", json!("SingleStack"));
            }
            if kind == "NodePort" || kind == "LoadBalancer" {
                default_field(spec, "externalTrafficPolicy", json!("Cluster"));
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut() {
                    default_field(p, "protocol", json!("TCP"));
                    let port = p["port"].clone();
                    default_field(p, "targetPort", port);
                }
            }
            let needs_ip = kind != "ExternalName" && spec["clusterIP"].as_str().is_none_or(str::is_empty);
            if needs_ip {
                let ip = allocate_cluster_ip(store);
                object["spec"]["clusterIP"] = json!(ip);
                object["spec"]["clusterIPs"] = json!([ip]);
            } else if let Some(ip) = object["spec"]["clusterIP"].as_str().map(str::to_string) {
                default_field(&mut object["spec"], "clusterIPs", json!([ip]));
            }
            if kind == "NodePort" || kind == "LoadBalancer" {
                use rand::Rng;
                let mut ports = object["spec"]["ports"].as_array().cloned().unwrap_or_default();
                for p in &mut ports {
                    if p["nodePort"].as_i64().unwrap_or(0) == 0 {
                        p["nodePort"] = json!(store.rng.random_range(30000..32768));
                    }
                }
                object["spec"]["ports"] = json!(ports);
            }
            object["status"] = json!({"loadBalancer": {}});
        }
        ("apps", "deployments") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "strategy", json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "progressDeadlineSeconds", json!(600));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({});
        }
        ("apps", "replicasets") => {
            default_field(&mut object["spec"], "replicas", json!(1));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({"replicas": 0});
        }
        ("apps", "statefulsets") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "podManagementPolicy", json!("OrderedReady"));
            default_field(spec, "updateStrategy", json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "persistentVolumeClaimRetentionPolicy", json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({"replicas": 0, "availableReplicas": 0});
        }
        _ => {}
    }
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
        return Ok(Written { code: 201, body: Object::encode(&rt, &body, 0).bytes });
    }
    let change = store.put(resource, &key, body);
    if is(&rt, "", "pods") {
        store.schedule(Task::StartPod { resource, key, uid });
    } else {
        schedule_controller(store, &rt, resource, &key);
    }
    Ok(Written { code: 201, body: change.object.bytes.clone() })
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
    if record {
        let scope = managed::Scope::of(&rt, subresource == Subresource::Status);
        managed::record_scoped(&mut new, Some(&old), opts, managed::Operation::Update, &rt, scope);
    }
    finish_update(store, resource, &key, &old, new, opts)
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
        if uid != existing.uid {
            return Err(ApiError::Conflict {
                resource: Resource::of(rt),
                name: name.into(),
                detail: format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", existing.uid),
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
        let existing = store.get(resource, key).map(|o| o.bytes.clone()).unwrap_or_default();
        return Ok(Written { code: 200, body: existing });
    }
    let being_deleted = new["metadata"]["deletionTimestamp"].is_string();
    let finalizers_left = new["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let zero_grace = old["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0);
    if opts.dry_run {
        let rv = parse_rv(meta_str(old, "resourceVersion").unwrap_or("0")).unwrap_or(0);
        return Ok(Written { code: 200, body: Object::encode(&rt, &new, rv).bytes });
    }
    if being_deleted && !finalizers_left && zero_grace {
        let uid = meta_str(&new, "uid").unwrap_or_default().to_string();
        let namespace = meta_str(&new, "namespace").map(str::to_string);
        let change = store.remove(resource, key, new).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
        store.schedule(Task::CollectDependents { namespace, owner_uid: uid, orphan: false });
        return Ok(Written { code: 200, body: change.object.bytes.clone() });
    }
    let change = store.put(resource, key, new);
    if spec_changed {
        schedule_controller(store, &rt, resource, key);
    }
    Ok(Written { code: 200, body: change.object.bytes.clone() })
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
    let selector = kubefold_engine::selector::LabelSelector::from_label_selector(&object["spec"]["selector"])
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

/// The grace period a pod deletion gets (`podStrategy.CheckGracefulDelete`).
fn pod_grace_period(pod: &Value, options: &DeleteOptions) -> i64 {
    let requested = options
        .grace_period_seconds
        .unwrap_or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30));
    let unscheduled = pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
    let terminal = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if unscheduled || terminal {
        0
    } else if requested < 0 {
        1
    } else {
        requested
    }
}

/// The body of a successful delete: the object, or a `Status` for types
/// whose registry does not return the deleted object.
fn deleted_body(rt: &ResourceType, object: &Object, name: &str) -> Bytes {
    if returns_deleted_object(rt) {
        return object.bytes.clone();
    }
    let mut details = json!({"name": name, "kind": rt.plural, "uid": object.uid});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    Bytes::from(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}).to_string(),
    )
}

/// DELETE of one object.
pub fn delete(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    options: &DeleteOptions,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let namespace = if rt.namespaced { namespace } else { None };
    let key = store::key(namespace, name);
    let existing = get(store, resource, namespace, name)?;
    check_preconditions(&rt, name, &existing, options.uid.as_deref(), options.resource_version.as_deref(), false)?;
    if opts.dry_run {
        return Ok(Written { code: 200, body: deleted_body(&rt, &existing, name) });
    }
    let mut object = existing.value();
    let meta = &object["metadata"];
    let being_deleted = meta["deletionTimestamp"].is_string();
    let finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let grace = if is(&rt, "", "pods") { pod_grace_period(&object, options) } else { 0 };
    let uid = existing.uid.clone();
    if being_deleted {
        // A repeated delete: a graceful pod deletion can be shortened to 0 (force).
        if is(&rt, "", "pods") && grace == 0 && !finalizers {
            let change = store.remove(resource, &key, object).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
            return Ok(Written { code: 200, body: deleted_body(&rt, &change.object, name) });
        }
        return Ok(Written { code: 200, body: existing.bytes.clone() });
    }
    let namespace_object = is(&rt, "", "namespaces");
    let foreground = options.propagation == Propagation::Foreground;
    if finalizers || grace > 0 || namespace_object || foreground {
        let deletion = opts.now + chrono::Duration::seconds(grace);
        {
            let meta = meta_mut(&mut object);
            meta.insert("deletionTimestamp".into(), json!(ts(deletion)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if foreground {
                let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(list) = finalizers.as_array_mut() {
                    if !list.iter().any(|f| f == "foregroundDeletion") {
                        list.push(json!("foregroundDeletion"));
                    }
                }
            }
        }
        if namespace_object {
            object["status"]["phase"] = json!("Terminating");
        }
        let change = store.put(resource, &key, object);
        if namespace_object {
            store.schedule(Task::FinishNamespaceDeletion { name: name.into(), uid });
        } else if foreground {
            store.schedule(Task::ForegroundDeletion { resource, key, uid, namespace: namespace.map(str::to_string) });
        } else if grace > 0 && !finalizers {
            let after = KUBELET_DELETE_DELAY.min(Duration::from_secs(grace as u64));
            store.schedule(Task::FinishPodDeletion { resource, key, uid, after });
        }
        return Ok(Written { code: 200, body: change.object.bytes.clone() });
    }
    let change = store.remove(resource, &key, object).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
    store.schedule(Task::CollectDependents {
        namespace: namespace.map(str::to_string),
        owner_uid: uid,
        orphan: options.propagation == Propagation::Orphan,
    });
    Ok(Written { code: 200, body: deleted_body(&rt, &change.object, name) })
}

/// DELETE of a collection: deletes every selected object, answers with the
/// list of the objects as they were (`Store.DeleteCollection`).
pub fn delete_collection(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    selectors: &super::list::ListOptions,
    options: &DeleteOptions,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let selected: Vec<Arc<Object>> = store
        .range(resource, &store::prefix(namespace))
        .filter(|(_, o)| selectors.matches(o))
        .map(|(_, o)| o.clone())
        .collect();
    let mut items = Vec::with_capacity(selected.len());
    for object in &selected {
        let value = object.value();
        let ns = meta_str(&value, "namespace").map(str::to_string);
        let name = meta_str(&value, "name").unwrap_or_default().to_string();
        match delete(store, resource, ns.as_deref(), &name, options, opts) {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
        let mut item = bytes::BytesMut::new();
        object.write_list_item(&mut item);
        items.push(item.freeze());
    }
    let mut body = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
        json!(rt.list_kind()),
        json!(rt.api_version()),
        store.rv()
    )
    .into_bytes();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    Ok(Written { code: 200, body: Bytes::from(body) })
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
