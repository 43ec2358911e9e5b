//! The resource metrics API, `metrics.k8s.io/v1beta1`, as metrics-server
//! serves it behind kube-apiserver: `PodMetrics` (per container CPU and
//! memory usage) and `NodeMetrics`, each with the `timestamp` of the scrape
//! and the `window` the usage was measured over, read with get and list
//! (namespaced and across namespaces, with label and field selectors), and
//! the group in discovery. `kubectl top` reads it.
//!
//! Kubernetes docs, "Resource metrics pipeline":
//! <https://kubernetes.io/docs/tasks/debug/debug-cluster/resource-metrics-pipeline/>
//! (the API is `metrics.k8s.io`, served by metrics-server; usage is CPU in
//! cores and memory working set in bytes, each sample with a timestamp and
//! a window).
//!
//! The usage is derived from the workload: every container of a running
//! pod uses a share of its requests (or a small amount without requests),
//! chosen from its pod's uid and its name, so a pod's numbers are the same
//! in every read; a node uses what its pods use plus the system's share.
//! Pods that are not running have no metrics, as with metrics-server.

use actix_web::http::Method;
use actix_web::HttpResponse;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::list::query_value;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Resource, Result};
use super::store::{self, Store};

/// The group of the resource metrics API.
pub const GROUP: &str = "metrics.k8s.io";
/// Its one version.
pub const VERSION: &str = "v1beta1";
/// How often metrics-server scrapes kubelets by default (`--metric-resolution`, 15 s):
/// the window of every sample and the step of its timestamp.
const RESOLUTION_SECS: i64 = 15;

/// A path of the resource metrics API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/apis/metrics.k8s.io`: the `APIGroup`.
    Group,
    /// `/apis/metrics.k8s.io/v1beta1`: the `APIResourceList`.
    ResourceList,
    /// `.../pods`, `.../namespaces/{ns}/pods[/{name}]`.
    Pods {
        /// The namespace, `None` for all.
        namespace: Option<String>,
        /// One pod's metrics.
        name: Option<String>,
    },
    /// `.../nodes[/{name}]`.
    Nodes {
        /// One node's metrics.
        name: Option<String>,
    },
}

/// The route of a path under `/apis/metrics.k8s.io`, `None` for any other
/// path (and for paths this API does not serve, which are 404 as any).
pub fn route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let owned = |s: &&str| Some(s.to_string());
    match parts.as_slice() {
        ["", "apis", GROUP] => Some(Route::Group),
        ["", "apis", GROUP, VERSION] => Some(Route::ResourceList),
        ["", "apis", GROUP, VERSION, "pods"] => Some(Route::Pods { namespace: None, name: None }),
        ["", "apis", GROUP, VERSION, "namespaces", ns, "pods"] if !ns.is_empty() => Some(Route::Pods { namespace: owned(ns), name: None }),
        ["", "apis", GROUP, VERSION, "namespaces", ns, "pods", name] if !ns.is_empty() && !name.is_empty() => {
            Some(Route::Pods { namespace: owned(ns), name: owned(name) })
        }
        ["", "apis", GROUP, VERSION, "nodes"] => Some(Route::Nodes { name: None }),
        ["", "apis", GROUP, VERSION, "nodes", name] if !name.is_empty() => Some(Route::Nodes { name: owned(name) }),
        _ => None,
    }
}

/// The group as `/apis` lists it.
pub fn group_entry() -> Value {
    let version = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"name": GROUP, "versions": [version.clone()], "preferredVersion": version})
}

/// `/apis/metrics.k8s.io/v1beta1`, as metrics-server registers it.
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
        ],
    })
}

/// Answers a request of the resource metrics API (GET only, 405 otherwise).
pub fn serve(method: &Method, store: &Store, route: Route, query: &[(String, String)], now: DateTime<Utc>) -> Result<HttpResponse> {
    if method != Method::GET {
        return Err(ApiError::MethodNotAllowed);
    }
    if query_value(query, "watch").is_some_and(|w| w == "true" || w == "1") {
        return Err(ApiError::MethodNotAllowed);
    }
    let body = match route {
        Route::Group => {
            let mut group = group_entry();
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            group
        }
        Route::ResourceList => resource_list(),
        Route::Pods { namespace, name } => pods(store, namespace.as_deref(), name.as_deref(), query, now)?,
        Route::Nodes { name } => nodes(store, name.as_deref(), query, now)?,
    };
    Ok(HttpResponse::Ok().content_type("application/json").body(body.to_string()))
}

/// The label and field selectors of a list; 400 when one does not parse.
fn selectors(query: &[(String, String)]) -> Result<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(query_value(query, "labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(format!("unable to parse requirement: {}", e.0)))?;
    let fields = FieldSelector::parse(query_value(query, "fieldSelector").unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(e.0))?;
    Ok((labels, fields))
}

fn not_found(plural: &str, name: &str) -> ApiError {
    ApiError::NotFound { resource: Resource { group: GROUP.into(), plural: plural.into() }, name: name.into() }
}

/// When the current sample was taken: now, down to the resolution.
fn sample_time(now: DateTime<Utc>) -> DateTime<Utc> {
    let seconds = now.timestamp() - now.timestamp().rem_euclid(RESOLUTION_SECS);
    DateTime::from_timestamp(seconds, 0).unwrap_or(now)
}

fn rfc3339(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": {}, "items": items})
}

fn pods(store: &Store, namespace: Option<&str>, name: Option<&str>, query: &[(String, String)], now: DateTime<Utc>) -> Result<Value> {
    let index = store.resource_index("", "v1", "pods").ok_or(ApiError::PathNotFound)?;
    if let (Some(namespace), Some(name)) = (namespace, name) {
        let pod = store.get(index, &store::key(Some(namespace), name)).map(|o| o.value());
        return match pod.as_ref().and_then(|pod| pod_metrics(pod, now)) {
            Some(mut metrics) => {
                metrics["kind"] = json!("PodMetrics");
                metrics["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
                Ok(metrics)
            }
            None => Err(not_found("pods", name)),
        };
    }
    let (labels, fields) = selectors(query)?;
    let items = store
        .range(index, &store::prefix(namespace))
        .filter(|(_, o)| labels.matches_pairs(&o.labels()))
        .filter_map(|(_, o)| {
            let pod = o.value();
            let meta = &pod["metadata"];
            let pairs = [
                ("metadata.name".to_string(), meta["name"].as_str().unwrap_or_default().to_string()),
                ("metadata.namespace".to_string(), meta["namespace"].as_str().unwrap_or_default().to_string()),
            ];
            if !fields.matches_pairs(&pairs) {
                return None;
            }
            pod_metrics(&pod, now)
        })
        .collect();
    Ok(list("PodMetricsList", items))
}

fn nodes(store: &Store, name: Option<&str>, query: &[(String, String)], now: DateTime<Utc>) -> Result<Value> {
    let node_index = store.resource_index("", "v1", "nodes").ok_or(ApiError::PathNotFound)?;
    let pod_index = store.resource_index("", "v1", "pods").ok_or(ApiError::PathNotFound)?;
    // What the running pods use, per node.
    let mut used: std::collections::HashMap<String, Usage> = std::collections::HashMap::new();
    for (_, object) in store.range(pod_index, &store::prefix(None)) {
        let pod = object.value();
        let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else { continue };
        if let Some(usage) = running_usage(&pod) {
            used.entry(node.to_string()).or_default().add(usage.into_iter().map(|(_, u)| u).sum());
        }
    }
    let metrics = |node: &Value| {
        let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
        let mut usage = system_usage(node_name);
        usage.add(used.get(node_name).copied().unwrap_or_default());
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(node_name));
        metadata.insert("creationTimestamp".into(), json!(rfc3339(now)));
        if let Some(labels) = node["metadata"]["labels"].as_object() {
            metadata.insert("labels".into(), Value::Object(labels.clone()));
        }
        json!({
            "metadata": metadata,
            "timestamp": rfc3339(sample_time(now)),
            "window": format!("{RESOLUTION_SECS}s"),
            "usage": usage.to_value(),
        })
    };
    if let Some(name) = name {
        let node = store.get(node_index, &store::key(None, name)).map(|o| o.value()).ok_or_else(|| not_found("nodes", name))?;
        let mut answer = metrics(&node);
        answer["kind"] = json!("NodeMetrics");
        answer["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
        return Ok(answer);
    }
    let (labels, fields) = selectors(query)?;
    let items = store
        .range(node_index, &store::prefix(None))
        .filter(|(_, o)| labels.matches_pairs(&o.labels()))
        .map(|(_, o)| o.value())
        .filter(|node| fields.matches_pairs(&[("metadata.name".into(), node["metadata"]["name"].as_str().unwrap_or_default().into())]))
        .map(|node| metrics(&node))
        .collect();
    Ok(list("NodeMetricsList", items))
}

/// CPU in nanocores and memory (working set) in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU, nanocores.
    pub nanocores: u64,
    /// Memory working set, bytes.
    pub bytes: u64,
}

impl Usage {
    fn add(&mut self, other: Usage) {
        self.nanocores += other.nanocores;
        self.bytes += other.bytes;
    }

    /// As metrics-server writes it: CPU in `n`, memory in `Ki`.
    fn to_value(self) -> Value {
        json!({"cpu": format!("{}n", self.nanocores), "memory": format!("{}Ki", self.bytes / 1024)})
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), |mut total, u| {
            total.add(u);
            total
        })
    }
}

/// FNV-1a of `parts`, each followed by a separator.
fn hash(parts: &[&str]) -> u64 {
    parts.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, part| {
        part.bytes().chain([0u8]).fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    })
}

/// A value in `[low, high]` chosen by `seed`.
fn between(seed: u64, low: u64, high: u64) -> u64 {
    low + seed % (high - low + 1)
}

/// A CPU quantity in millicores (`250m`, `1`, `0.5`).
fn cpu_millis(quantity: &str) -> Option<u64> {
    match quantity.strip_suffix('m') {
        Some(millis) => millis.parse().ok(),
        None => quantity.parse::<f64>().ok().filter(|c| *c >= 0.0).map(|c| (c * 1000.0) as u64),
    }
}

/// A memory quantity in bytes (`128Mi`, `1Gi`, `500M`, `1000`).
fn memory_bytes(quantity: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return number.parse::<u64>().ok().map(|n| n * factor);
        }
    }
    quantity.parse().ok()
}

/// What one container uses: a share of its requests (20 to 80 % of CPU, 40
/// to 90 % of memory), or without requests 1 to 40 millicores and 8 to
/// 96 MiB; the same for the same pod and container every time.
pub fn container_usage(pod_uid: &str, container: &Value) -> Usage {
    let name = container["name"].as_str().unwrap_or_default();
    let seed = hash(&[pod_uid, name]);
    let requests = &container["resources"]["requests"];
    let millis = match requests["cpu"].as_str().and_then(cpu_millis).filter(|m| *m > 0) {
        Some(request) => request * between(seed, 20, 80) / 100,
        None => between(seed, 1, 40),
    };
    let bytes = match requests["memory"].as_str().and_then(memory_bytes).filter(|b| *b > 0) {
        Some(request) => request / 100 * between(seed >> 16, 40, 90),
        None => between(seed >> 16, 8, 96) << 20,
    };
    // Nanocores with a stable fraction below the millicore.
    Usage { nanocores: millis.max(1) * 1_000_000 + (seed >> 32) % 1_000_000, bytes: bytes + ((seed >> 40) % 1024) * 1024 }
}

/// Each container's usage of a running pod; `None` when the pod is not running.
fn running_usage(pod: &Value) -> Option<Vec<(String, Usage)>> {
    if pod["status"]["phase"].as_str() != Some("Running") || !pod["metadata"]["deletionTimestamp"].is_null() {
        return None;
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let containers = pod["spec"]["containers"].as_array()?;
    Some(containers.iter().map(|c| (c["name"].as_str().unwrap_or_default().to_string(), container_usage(uid, c))).collect())
}

/// What a node's system (kubelet, runtime, kernel) uses: 60 to 180
/// millicores and 400 to 900 MiB.
fn system_usage(node: &str) -> Usage {
    let seed = hash(&[node, "system"]);
    Usage { nanocores: between(seed, 60, 180) * 1_000_000 + (seed >> 32) % 1_000_000, bytes: between(seed >> 16, 400, 900) << 20 }
}

/// The `PodMetrics` of a running pod (without kind and apiVersion, as a list item).
fn pod_metrics(pod: &Value, now: DateTime<Utc>) -> Option<Value> {
    let containers: Vec<Value> = running_usage(pod)?
        .into_iter()
        .map(|(name, usage)| json!({"name": name, "usage": usage.to_value()}))
        .collect();
    let meta = &pod["metadata"];
    let mut metadata = Map::new();
    metadata.insert("name".into(), meta["name"].clone());
    metadata.insert("namespace".into(), meta["namespace"].clone());
    metadata.insert("creationTimestamp".into(), json!(rfc3339(now)));
    if let Some(labels) = meta["labels"].as_object() {
        metadata.insert("labels".into(), Value::Object(labels.clone()));
    }
    Some(json!({
        "metadata": metadata,
        "timestamp": rfc3339(sample_time(now)),
        "window": format!("{RESOLUTION_SECS}s"),
        "containers": containers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_the_metrics_api() {
        assert_eq!(route("/apis/metrics.k8s.io"), Some(Route::Group));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/"), Some(Route::ResourceList));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/pods"), Some(Route::Pods { namespace: None, name: None }));
        assert_eq!(
            route("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0"),
            Some(Route::Pods { namespace: Some("default".into()), name: Some("web-0".into()) })
        );
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/nodes/n1"), Some(Route::Nodes { name: Some("n1".into()) }));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta2/pods"), None);
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-0/log"), None);
        assert_eq!(route("/api/v1/pods"), None);
    }

    #[test]
    fn quantities_are_read_as_kubernetes_writes_them() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(memory_bytes("128Mi"), Some(128 << 20));
        assert_eq!(memory_bytes("1Gi"), Some(1 << 30));
        assert_eq!(memory_bytes("500M"), Some(500_000_000));
        assert_eq!(memory_bytes("4096"), Some(4096));
        assert_eq!(memory_bytes("x"), None);
    }

    #[test]
    fn a_container_uses_a_stable_share_of_its_requests() {
        let container = json!({"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}});
        let usage = container_usage("uid-1", &container);
        assert_eq!(usage, container_usage("uid-1", &container), "the same pod reads the same");
        assert!((20_000_000..81_000_000).contains(&usage.nanocores), "{usage:?}");
        assert!((128 << 20) * 40 / 100 <= usage.bytes && usage.bytes <= (128 << 20) * 91 / 100, "{usage:?}");
        let other = container_usage("uid-2", &container);
        assert_ne!(usage, other, "another pod differs");
        let bare = container_usage("uid-1", &json!({"name": "sidecar"}));
        assert!((1_000_000..41_000_000).contains(&bare.nanocores) && (8 << 20..97 << 20).contains(&bare.bytes), "{bare:?}");
    }

    #[test]
    fn only_running_pods_have_metrics_with_a_timestamp_and_window() {
        let now = DateTime::parse_from_rfc3339("2026-01-02T03:04:29Z").unwrap().with_timezone(&Utc);
        let pod = json!({
            "metadata": {"name": "web-0", "namespace": "default", "uid": "u", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx"}, {"name": "log"}]},
            "status": {"phase": "Running"},
        });
        let metrics = pod_metrics(&pod, now).unwrap();
        assert_eq!(metrics["timestamp"], "2026-01-02T03:04:15Z");
        assert_eq!(metrics["window"], "15s");
        assert_eq!(metrics["metadata"]["labels"]["app"], "web");
        let names: Vec<&str> = metrics["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["nginx", "log"]);
        assert!(metrics["containers"][0]["usage"]["cpu"].as_str().unwrap().ends_with('n'));
        assert!(metrics["containers"][0]["usage"]["memory"].as_str().unwrap().ends_with("Ki"));
        let mut pending = pod.clone();
        pending["status"]["phase"] = json!("Pending");
        assert!(pod_metrics(&pending, now).is_none());
    }
}
