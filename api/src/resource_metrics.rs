//! The resource metrics API of the fleet, `metrics.k8s.io/v1beta1`
//! (`kubectl top`): `PodMetrics` and `NodeMetrics`, read from the members'
//! own metrics API (metrics-server behind each member's apiserver) in
//! parallel and merged, with names qualified as everywhere else.
//!
//! Kubernetes docs, "Resource metrics pipeline":
//! <https://kubernetes.io/docs/tasks/debug/debug-cluster/resource-metrics-pipeline/>
//!
//! - list and get of `pods` (in a namespace or across namespaces) and of
//!   `nodes`; the label selector's `kubefold.io/cluster` condition chooses
//!   the members asked, the rest of it and the field selector are passed on.
//! - A member that is down, slow (over [`MEMBER_TIMEOUT`]) or has no
//!   metrics API is left out of a list, with a `Warning` header naming it.
//! - A qualified name (`web-0_member1`) asks its member; a bare name asks
//!   every member and is answered when exactly one has it (409 Conflict
//!   naming the candidates otherwise), as every get at the fleet level.
//! - The group is in kubefold's discovery (legacy and aggregated), so
//!   kubectl finds the API: `pods` when pods are in the resource
//!   selection, `nodes` when nodes are (404 otherwise). Under `/clusters/{c}` the member's metrics API
//!   is passed through as it is (see [`crate::passthrough`]).

use std::time::Duration;

use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse};
use kubefold_engine::names::{self, NameStyle, RequestedName};
use kubefold_engine::object::CLUSTER_ANNOTATION;
use kubefold_engine::resources::ResourceType;
use kubefold_engine::selector::{FieldRequirement, FieldSelector, LabelSelector};
use kubefold_engine::status::Status;
use serde_json::{json, Value};

use crate::query::CLUSTER_SEARCH_KEY;
use crate::{members, respond, ApiState};

/// The group of the resource metrics API.
pub const GROUP: &str = "metrics.k8s.io";
/// Its version.
pub const VERSION: &str = "v1beta1";
/// How long one member may take to answer before it is left out.
pub const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);

/// A path of the resource metrics API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/apis/metrics.k8s.io`: the `APIGroup`.
    Group,
    /// `/apis/metrics.k8s.io/v1beta1`: the `APIResourceList`.
    ResourceList,
    /// `pods`, all namespaces or one, or one pod.
    Pods {
        /// The namespace, `None` for all.
        namespace: Option<String>,
        /// The pod, as requested.
        name: Option<String>,
    },
    /// `nodes`, or one node.
    Nodes {
        /// The node, as requested.
        name: Option<String>,
    },
}

impl Route {
    /// `pods` or `nodes`, `None` for discovery.
    fn plural(&self) -> Option<&'static str> {
        match self {
            Route::Pods { .. } => Some("pods"),
            Route::Nodes { .. } => Some("nodes"),
            _ => None,
        }
    }
}

/// The route of a decoded path at the top level, `None` for other paths.
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

fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// The metrics resources served over `catalog`: `pods` when core pods are
/// in the resource selection, `nodes` when core nodes are (the metrics
/// describe objects kubefold serves, under the same names).
pub fn served(catalog: &[ResourceType]) -> Vec<&'static str> {
    let selected = |plural: &str| catalog.iter().any(|r| r.group.is_empty() && r.plural == plural);
    ["nodes", "pods"].into_iter().filter(|p| selected(p)).collect()
}

/// `(kind, namespaced)` of a metrics resource.
fn kind_of(plural: &str) -> (&'static str, bool) {
    if plural == "pods" {
        ("PodMetrics", true)
    } else {
        ("NodeMetrics", false)
    }
}

/// Adds the group to `/apis` when a metrics resource is served: the legacy
/// `APIGroupList`, or the aggregated `APIGroupDiscoveryList` when `aggregated`.
pub fn add_to_groups(document: &mut Value, aggregated: bool, catalog: &[ResourceType]) {
    let served = served(catalog);
    if served.is_empty() {
        return;
    }
    let entry = if aggregated {
        let resources: Vec<Value> = served
            .iter()
            .map(|plural| {
                let (kind, namespaced) = kind_of(plural);
                json!({
                    "resource": plural,
                    "responseKind": {"group": GROUP, "version": VERSION, "kind": kind},
                    "scope": if namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": "",
                    "verbs": ["get", "list"],
                })
            })
            .collect();
        json!({
            "metadata": {"name": GROUP},
            "versions": [{"version": VERSION, "resources": resources, "freshness": "Current"}],
        })
    } else {
        group_entry()
    };
    let list = if aggregated { "items" } else { "groups" };
    if let Some(items) = document[list].as_array_mut() {
        items.push(entry);
    }
}

fn group_entry() -> Value {
    let version = json!({"groupVersion": group_version(), "version": VERSION});
    json!({"name": GROUP, "versions": [version.clone()], "preferredVersion": version})
}

fn resource_list(served: &[&str]) -> Value {
    let resources: Vec<Value> = served
        .iter()
        .map(|plural| {
            let (kind, namespaced) = kind_of(plural);
            json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version(), "resources": resources})
}

/// What one member answered.
enum Answer {
    /// 200 with its JSON.
    Found(Value),
    /// 404: no such object, or no metrics API.
    NotFound,
    /// Down, slow, or another error; the reason.
    Failed(String),
}

/// Asks one member for `path_and_query` within [`MEMBER_TIMEOUT`].
async fn ask(state: &ApiState, cluster: &str, path_and_query: &str) -> Answer {
    let request = members::send(&state.fleet, cluster, http::Method::GET, path_and_query, None, Vec::new());
    match tokio::time::timeout(MEMBER_TIMEOUT, request).await {
        Err(_) => Answer::Failed(format!("no answer within {MEMBER_TIMEOUT:?}")),
        // "cluster \"c\" is unreachable: ..." without the cluster, which the warning names.
        Ok(Err(status)) => {
            let prefix = format!("cluster \"{cluster}\" is ");
            Answer::Failed(status.message.strip_prefix(&prefix).unwrap_or(&status.message).to_string())
        }
        Ok(Ok(response)) if response.status == 404 => Answer::NotFound,
        Ok(Ok(response)) if response.is_success() => match serde_json::from_slice(&response.body) {
            Ok(value) => Answer::Found(value),
            Err(e) => Answer::Failed(format!("its answer is not JSON: {e}")),
        },
        Ok(Ok(response)) => {
            let message = serde_json::from_slice::<Value>(&response.body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_default();
            Answer::Failed(format!("HTTP {} {message}", response.status).trim_end().to_string())
        }
    }
}

/// The `Warning` header value of a member left out.
fn left_out(cluster: &str, why: &str) -> String {
    let why = why.replace('"', "'");
    format!("299 - \"cluster {cluster} is left out of the metrics: {why}\"")
}

/// An item as the fleet serves it: its name qualified (by the name style)
/// and its member in the annotation `kubefold.io/cluster`.
fn fleet_item(mut item: Value, cluster: &str, style: NameStyle) -> Value {
    if style == NameStyle::Qualified {
        if let Some(name) = item["metadata"]["name"].as_str() {
            item["metadata"]["name"] = json!(names::qualify(name, cluster));
        }
    }
    if !item["metadata"]["annotations"].is_object() {
        item["metadata"]["annotations"] = json!({});
    }
    item["metadata"]["annotations"][CLUSTER_ANNOTATION] = json!(cluster);
    item
}

/// The field selector `cluster` is asked with, `None` when none of its
/// objects can be selected. Names in the fleet are qualified: a
/// `metadata.name` term with a qualified name (`web-0_member1`) becomes the
/// member's name for its member; for another member, `=` selects nothing
/// there (not asked) and `!=` everything (the term is dropped). A bare name
/// is passed on as it is, as a bare name's get asks every member. With
/// original names the selector is passed on unchanged.
fn member_fields(selector: &FieldSelector, cluster: &str, style: NameStyle) -> Option<FieldSelector> {
    if style != NameStyle::Qualified {
        return Some(selector.clone());
    }
    let mut requirements = Vec::with_capacity(selector.requirements.len());
    for requirement in &selector.requirements {
        let RequestedName::Qualified { name, cluster: of } = names::parse(&requirement.value) else {
            requirements.push(requirement.clone());
            continue;
        };
        if requirement.field != "metadata.name" {
            requirements.push(requirement.clone());
        } else if of == cluster {
            requirements.push(FieldRequirement { value: name.to_string(), ..requirement.clone() });
        } else if !requirement.negated {
            return None;
        }
    }
    Some(FieldSelector { requirements })
}

/// Answers a request of the resource metrics API at the fleet level.
pub async fn serve(req: &HttpRequest, state: &ApiState, route: Route) -> Result<HttpResponse, Status> {
    if req.method() != Method::GET {
        return Err(Status::method_not_allowed(format!("the server does not allow this method on the requested resource: {}", req.method())));
    }
    let query: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string())
        .map_err(|e| Status::bad_request(format!("invalid query: {e}")))?;
    let value = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    if value("watch").is_some_and(|w| w == "true" || w == "1") {
        return Err(Status::method_not_allowed("watch is not supported on the resource metrics API"));
    }
    let served = served(&state.fleet.catalog());
    if served.is_empty() {
        return Err(Status::path_not_found());
    }
    let plural = match route.plural() {
        Some(plural) if served.contains(&plural) => plural,
        Some(_) => return Err(Status::path_not_found()),
        None if route == Route::Group => {
            let mut group = group_entry();
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            return Ok(respond::json(&group));
        }
        None => return Ok(respond::json(&resource_list(&served))),
    };
    let (namespace, name) = match &route {
        Route::Pods { namespace, name } => (namespace.clone(), name.clone()),
        Route::Nodes { name } => (None, name.clone()),
        _ => (None, None),
    };
    let collection = match &namespace {
        Some(ns) => format!("/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}"),
        None => format!("/apis/{GROUP}/{VERSION}/{plural}"),
    };
    let style = state.fleet.name_style();
    let mut members = state.fleet.member_names();
    members.sort();
    if let Some(name) = name {
        return get(state, &collection, plural, &name, members, style).await;
    }
    // The cluster condition chooses the members; the rest goes to them.
    let mut labels = LabelSelector::parse(value("labelSelector").unwrap_or(""))
        .map_err(|e| Status::bad_request(format!("unable to parse requirement: {e}")))?;
    let clusters = labels.take_key(CLUSTER_SEARCH_KEY);
    members.retain(|m| clusters.iter().all(|r| r.matches_value(Some(m))));
    let mut forwarded: Vec<(&str, String)> = Vec::new();
    if !labels.is_empty() {
        forwarded.push(("labelSelector", labels.to_string()));
    }
    let fields = FieldSelector::parse(value("fieldSelector").unwrap_or(""))
        .map_err(|e| Status::bad_request(format!("invalid field selector: {e}")))?;
    // Each member is asked with its own field selector (names translated);
    // one that cannot hold a selected object is not asked.
    let asked: Vec<(String, String)> = members
        .iter()
        .filter_map(|m| {
            let fields = member_fields(&fields, m, style)?;
            let mut query = forwarded.clone();
            if !fields.is_empty() {
                query.push(("fieldSelector", fields.to_string()));
            }
            let query = serde_urlencoded::to_string(&query).unwrap_or_default();
            Some((m.clone(), if query.is_empty() { collection.clone() } else { format!("{collection}?{query}") }))
        })
        .collect();
    let members: Vec<String> = asked.iter().map(|(m, _)| m.clone()).collect();
    let answers = futures::future::join_all(asked.iter().map(|(m, path)| ask(state, m, path))).await;
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for (cluster, answer) in members.iter().zip(answers) {
        match answer {
            Answer::Found(list) => {
                let list_items = list["items"].as_array().cloned().unwrap_or_default();
                items.extend(list_items.into_iter().map(|item| fleet_item(item, cluster, style)));
            }
            Answer::NotFound => warnings.push(left_out(cluster, "it serves no metrics API (metrics.k8s.io/v1beta1)")),
            Answer::Failed(why) => warnings.push(left_out(cluster, &why)),
        }
    }
    items.sort_by(|a, b| {
        let key = |v: &Value| (v["metadata"]["namespace"].as_str().unwrap_or_default().to_string(), v["metadata"]["name"].as_str().unwrap_or_default().to_string());
        key(a).cmp(&key(b))
    });
    let kind = if plural == "pods" { "PodMetricsList" } else { "NodeMetricsList" };
    let list = json!({"kind": kind, "apiVersion": group_version(), "metadata": {}, "items": items});
    let mut response = respond::json(&list);
    for warning in warnings {
        if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&warning) {
            response.headers_mut().append(actix_web::http::header::WARNING, value);
        }
    }
    Ok(response)
}

/// One object: from its member (qualified name) or the one member that has it.
async fn get(state: &ApiState, collection: &str, plural: &str, name: &str, members: Vec<String>, style: NameStyle) -> Result<HttpResponse, Status> {
    let not_found = || Status::not_found(GROUP, plural, name);
    let (member_name, asked) = match names::parse(name) {
        RequestedName::Qualified { name: member_name, cluster } => {
            if !members.iter().any(|m| m == cluster) {
                return Err(not_found());
            }
            (member_name.to_string(), vec![cluster.to_string()])
        }
        RequestedName::Bare(bare) => (bare.to_string(), members),
    };
    let path = format!("{collection}/{member_name}");
    let answers = futures::future::join_all(asked.iter().map(|m| ask(state, m, &path))).await;
    let mut found = Vec::new();
    let mut failed = Vec::new();
    for (cluster, answer) in asked.iter().zip(answers) {
        match answer {
            Answer::Found(object) => found.push((cluster.clone(), object)),
            Answer::NotFound => {}
            Answer::Failed(why) => failed.push((cluster.clone(), why)),
        }
    }
    match found.len() {
        1 => {
            let (cluster, object) = found.remove(0);
            let mut response = respond::json(&fleet_item(object, &cluster, style));
            for (cluster, why) in failed {
                if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&left_out(&cluster, &why)) {
                    response.headers_mut().append(actix_web::http::header::WARNING, value);
                }
            }
            Ok(response)
        }
        0 => match failed.as_slice() {
            // The one member asked is down: say so rather than "not found".
            [(cluster, why)] if asked.len() == 1 => {
                Err(Status::unavailable(format!("the metrics of cluster \"{cluster}\" cannot be read: {why}")))
            }
            _ => Err(not_found()),
        },
        _ => {
            let candidates: Vec<String> = found.iter().map(|(c, _)| names::qualify(&member_name, c)).collect();
            Err(Status::conflict(format!(
                "{plural}.{GROUP} \"{name}\" is ambiguous: it exists in {} clusters; use one of the qualified names: {}",
                found.len(),
                candidates.join(", ")
            ))
            .with_details(GROUP, plural, name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_the_metrics_api() {
        assert_eq!(route("/apis/metrics.k8s.io/"), Some(Route::Group));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1"), Some(Route::ResourceList));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/pods"), Some(Route::Pods { namespace: None, name: None }));
        assert_eq!(
            route("/apis/metrics.k8s.io/v1beta1/namespaces/a/pods/web-0_m1"),
            Some(Route::Pods { namespace: Some("a".into()), name: Some("web-0_m1".into()) })
        );
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/nodes"), Some(Route::Nodes { name: None }));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/nodes/n_m1"), Some(Route::Nodes { name: Some("n_m1".into()) }));
        assert_eq!(route("/apis/metrics.k8s.io/v1beta1/namespaces/a/pods/p/x"), None);
        assert_eq!(route("/apis/metrics.k8s.io/v1/pods"), None);
        assert_eq!(route("/api/v1/pods"), None);
    }

    #[test]
    fn qualified_names_in_field_selectors_are_the_members() {
        let selector = |s: &str| FieldSelector::parse(s).unwrap();
        let asked = |s: &str, cluster: &str| member_fields(&selector(s), cluster, NameStyle::Qualified).map(|f| f.to_string());
        assert_eq!(asked("metadata.name=web-0_member1", "member1").as_deref(), Some("metadata.name=web-0"));
        assert_eq!(asked("metadata.name=web-0_member1", "member2"), None);
        assert_eq!(asked("metadata.name!=web-0_member1", "member1").as_deref(), Some("metadata.name!=web-0"));
        assert_eq!(asked("metadata.name!=web-0_member1", "member2").as_deref(), Some(""));
        assert_eq!(asked("metadata.name=web-0,metadata.namespace=a_b", "member2").as_deref(), Some("metadata.name=web-0,metadata.namespace=a_b"));
        let original = member_fields(&selector("metadata.name=web-0_member1"), "member2", NameStyle::Original).unwrap();
        assert_eq!(original.to_string(), "metadata.name=web-0_member1");
    }

    #[test]
    fn items_carry_their_member() {
        let item = json!({"metadata": {"name": "web-0", "namespace": "default"}, "containers": []});
        let qualified = fleet_item(item.clone(), "member1", NameStyle::Qualified);
        assert_eq!(qualified["metadata"]["name"], "web-0_member1");
        assert_eq!(qualified["metadata"]["annotations"][CLUSTER_ANNOTATION], "member1");
        let original = fleet_item(item, "member1", NameStyle::Original);
        assert_eq!(original["metadata"]["name"], "web-0");
        assert!(left_out("member2", "connection \"refused\"").contains("cluster member2 is left out"));
    }

    #[test]
    fn discovery_lists_the_group_in_both_forms() {
        let catalog = kubefold_engine::resources::builtin();
        let mut legacy = json!({"kind": "APIGroupList", "groups": []});
        add_to_groups(&mut legacy, false, &catalog);
        assert_eq!(legacy["groups"][0]["preferredVersion"]["groupVersion"], "metrics.k8s.io/v1beta1");
        let mut aggregated = json!({"kind": "APIGroupDiscoveryList", "items": []});
        add_to_groups(&mut aggregated, true, &catalog);
        let resources = &aggregated["items"][0]["versions"][0]["resources"];
        assert_eq!(resources[1]["responseKind"]["kind"], "PodMetrics");
        assert_eq!(resources[0]["scope"], "Cluster");
    }

    #[test]
    fn metrics_follow_the_resource_selection() {
        let catalog = kubefold_engine::resources::builtin();
        assert_eq!(served(&catalog), ["nodes", "pods"]);
        let pods_only: Vec<ResourceType> = catalog.iter().filter(|r| r.plural != "nodes").cloned().collect();
        assert_eq!(resource_list(&served(&pods_only))["resources"].as_array().unwrap().len(), 1);
        let none: Vec<ResourceType> = catalog.iter().filter(|r| r.plural == "configmaps").cloned().collect();
        let mut legacy = json!({"kind": "APIGroupList", "groups": []});
        add_to_groups(&mut legacy, false, &none);
        assert_eq!(legacy["groups"], json!([]));
    }
}
