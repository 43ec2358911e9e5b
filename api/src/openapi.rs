//! kubefold's OpenAPI documents, merged from its members'
//! (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-interface-definition>).
//!
//! A background task ([`spawn_refresh`]), never an HTTP worker, reads each
//! member's `/openapi/v3` index and the group-version documents of the types
//! kubefold serves, fetching a document again only when its hash in the
//! index (`serverRelativeURL`) changed. It merges them: per group-version
//! the paths of the served types and the schemas they need, one copy of a
//! type several members publish (the first member by name wins), CRDs'
//! schemas included; kubefold's additions are written into `ObjectMeta`'s
//! descriptions (qualified names, the `kubefold.io/*` annotations). It runs
//! every refresh period, and within seconds when the served types change or
//! a member reconnects. `/openapi/v2` carries the same schemas as Swagger
//! 2.0 definitions.
//!
//! Requests read the last merge only: a member that is down keeps its last
//! documents. A group-version no member has answered for yet is served
//! with the minimal document of [`kubefold_engine::openapi`] (paths and
//! `fieldValidation`, no schemas), which keeps kubectl's server-side
//! validation working.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use http::Method;
use kubefold_actors::fleet::{Fleet, SyncState};
use kubefold_engine::openapi::schemas::{self, V3_REF_PREFIX};
use kubefold_engine::openapi::{self as engine_openapi, Info};
use kubefold_engine::resources::ResourceType;
use serde_json::{Map, Value};

use crate::discovery::KUBERNETES_VERSION;

/// The `info` of kubefold's documents.
const INFO: Info<'static> = Info { title: "kubefold", version: KUBERNETES_VERSION.2 };

/// The schema whose descriptions carry kubefold's additions.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Appended to `ObjectMeta.name`'s description.
pub const NAME_ADDITION: &str = "Through kubefold, an object of a member cluster is also named by its qualified name `<name>_<cluster>` (for example `web_member1`; `_` cannot occur in a Kubernetes name), which selects the cluster; a bare name works when exactly one cluster has it. With the `qualified` name style every object is listed under its qualified name.";

/// Appended to `ObjectMeta.annotations`' description.
pub const ANNOTATIONS_ADDITION: &str = "Through kubefold, every object carries the annotations `kubefold.io/cluster` (the member cluster it comes from) and `kubefold.io/member-resource-version` (its resourceVersion in that member); `metadata.resourceVersion` is kubefold's own.";

/// How long one member request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the task looks for a change of the served types or of a
/// member's connection.
const POLL: Duration = Duration::from_secs(2);

/// How soon a member that has not published documents yet is asked again.
const RETRY: Duration = Duration::from_secs(10);

/// The merged documents, by `/openapi/v3` key (`api/v1`,
/// `apis/{group}/{version}`).
#[derive(Debug, Default)]
struct Merged {
    v3: BTreeMap<String, Arc<Value>>,
    /// The hash of each document of `v3`.
    hashes: BTreeMap<String, String>,
    /// `/openapi/v2` for the catalog of `catalog_keys`.
    v2: Option<(Vec<String>, Arc<Value>)>,
}

fn catalog_keys(catalog: &[ResourceType]) -> Vec<String> {
    catalog.iter().map(|r| r.key()).collect()
}

/// The documents kubefold serves; shared by the HTTP workers (reads) and
/// the refresh task (writes).
#[derive(Debug, Default)]
pub struct OpenApi {
    merged: RwLock<Option<Arc<Merged>>>,
}

impl OpenApi {
    /// No member's documents yet: the minimal documents are served.
    pub fn new() -> Arc<OpenApi> {
        Arc::new(OpenApi::default())
    }

    fn merged(&self) -> Option<Arc<Merged>> {
        self.merged.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, catalog: &[ResourceType], mut merged: Merged) {
        merged.hashes = merged.v3.iter().map(|(key, doc)| (key.clone(), schemas::hash(doc))).collect();
        let v2 = v2_of(catalog, |g, v| self.v3_with(&merged, catalog, g, v));
        merged.v2 = Some((catalog_keys(catalog), Arc::new(v2)));
        *self.merged.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(merged));
    }

    /// Whether some member's documents have been merged.
    pub fn has_member_documents(&self) -> bool {
        self.merged().is_some_and(|m| !m.v3.is_empty())
    }

    /// `/openapi/v3/{key}` for `group/version`; `None` when kubefold serves
    /// no type there.
    pub fn v3(&self, catalog: &[ResourceType], group: &str, version: &str) -> Option<Arc<Value>> {
        if !catalog.iter().any(|r| r.group == group && r.version == version) {
            return None;
        }
        match self.merged() {
            Some(merged) => self.v3_with(&merged, catalog, group, version),
            None => engine_openapi::openapi_v3(catalog, group, version, INFO).map(Arc::new),
        }
    }

    fn v3_with(&self, merged: &Merged, catalog: &[ResourceType], group: &str, version: &str) -> Option<Arc<Value>> {
        match merged.v3.get(&schemas::group_version_key(group, version)) {
            Some(doc) => Some(doc.clone()),
            None => engine_openapi::openapi_v3(catalog, group, version, INFO).map(Arc::new),
        }
    }

    /// `/openapi/v3`: every served group-version with the hash of its
    /// document.
    pub fn v3_index(&self, catalog: &[ResourceType]) -> Value {
        let merged = self.merged();
        let mut entries = Vec::new();
        for (group, version) in kubefold_engine::resources::served_group_versions(catalog) {
            let key = schemas::group_version_key(&group, &version);
            if let Some(hash) = merged.as_ref().and_then(|m| m.hashes.get(&key)) {
                entries.push((key, hash.clone()));
            } else if let Some(doc) = self.v3(catalog, &group, &version) {
                entries.push((key, schemas::hash(&doc)));
            }
        }
        schemas::index(entries.iter().map(|(k, h)| (k.as_str(), h.as_str())))
    }

    /// `/openapi/v2`: the paths of the served types and every schema of the
    /// v3 documents as `definitions`.
    pub fn v2(&self, catalog: &[ResourceType]) -> Arc<Value> {
        if let Some((keys, v2)) = self.merged().and_then(|m| m.v2.clone()) {
            if keys == catalog_keys(catalog) {
                return v2;
            }
        }
        Arc::new(v2_of(catalog, |g, v| self.v3(catalog, g, v)))
    }
}

/// `/openapi/v2` of `catalog` over its v3 documents (`v3`).
fn v2_of(catalog: &[ResourceType], v3: impl Fn(&str, &str) -> Option<Arc<Value>>) -> Value {
    let mut definitions = Map::new();
    for (group, version) in kubefold_engine::resources::served_group_versions(catalog) {
        if let Some(doc) = v3(&group, &version) {
            for (name, schema) in doc["components"]["schemas"].as_object().into_iter().flatten() {
                definitions.entry(name.clone()).or_insert_with(|| schemas::to_v2(schema));
            }
        }
    }
    definitions.sort_keys();
    engine_openapi::swagger(INFO, engine_openapi::all_paths(catalog), definitions)
}

/// What one member last published: its index (key → `serverRelativeURL`)
/// and the documents fetched, each with the URL it was fetched from.
#[derive(Debug, Default)]
struct MemberDocuments {
    documents: BTreeMap<String, (String, Arc<Value>)>,
}

/// What makes the task refresh at once: the served types, the members, and
/// each member's connected watchers and reconnects.
fn signature(fleet: &Fleet) -> Vec<String> {
    let mut out: Vec<String> = fleet.catalog().iter().map(|r| r.key()).collect();
    out.sort();
    for (cluster, watchers) in fleet.status() {
        let synced = watchers.values().filter(|w| w.state == SyncState::Synced).count();
        let reconnects: u64 = watchers.values().map(|w| w.reconnects + w.relists).sum();
        out.push(format!("{cluster}:{synced}:{reconnects}"));
    }
    let mut names = fleet.member_names();
    names.sort();
    out.extend(names);
    out
}

/// Starts the refresh task on the current (actix) runtime; it ends when
/// `openapi` is dropped (the server stopped).
pub fn spawn_refresh(fleet: Arc<Fleet>, openapi: &Arc<OpenApi>, period: Duration) {
    let openapi = Arc::downgrade(openapi);
    actix_web::rt::spawn(run(fleet, openapi, period));
}

async fn run(fleet: Arc<Fleet>, openapi: Weak<OpenApi>, period: Duration) {
    let mut members: BTreeMap<String, MemberDocuments> = BTreeMap::new();
    let mut last: Option<(Vec<String>, Instant)> = None;
    loop {
        let Some(target) = openapi.upgrade() else { return };
        let now = signature(&fleet);
        // A member that has not answered yet is asked again soon.
        let unanswered = fleet.member_names().iter().any(|m| members.get(m).is_none_or(|d| d.documents.is_empty()));
        let due = match &last {
            None => true,
            Some((seen, at)) => *seen != now || at.elapsed() >= period || (unanswered && at.elapsed() >= RETRY),
        };
        if due {
            refresh(&fleet, &mut members).await;
            let catalog = fleet.catalog();
            let merged = merge(&catalog, &members);
            if !merged.v3.is_empty() {
                target.set(&catalog, merged);
            }
            last = Some((signature(&fleet), Instant::now()));
        }
        drop(target);
        tokio::time::sleep(POLL).await;
    }
}

/// GET of a member's path, its JSON body; `None` (logged) when the member
/// does not answer in time or with 200.
async fn fetch(fleet: &Fleet, cluster: &str, path: &str) -> Option<Value> {
    let answer = tokio::time::timeout(FETCH_TIMEOUT, crate::members::send(fleet, cluster, Method::GET, path, None, Vec::new())).await;
    match answer {
        Ok(Ok(response)) if response.is_success() => match serde_json::from_slice(&response.body) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::warn!(%cluster, %path, %error, "A member's OpenAPI document is not JSON.");
                None
            }
        },
        Ok(Ok(response)) => {
            tracing::debug!(%cluster, %path, status = response.status, "A member did not serve an OpenAPI document.");
            None
        }
        Ok(Err(status)) => {
            tracing::debug!(%cluster, %path, message = %status.message, "Cannot fetch a member's OpenAPI document.");
            None
        }
        Err(_) => {
            tracing::debug!(%cluster, %path, "A member's OpenAPI document took too long.");
            None
        }
    }
}

/// Reads every member's index and fetches the documents of the served
/// group-versions whose URL (hash) changed. A member that does not answer
/// keeps what it published last; a member gone from the fleet is dropped.
async fn refresh(fleet: &Fleet, members: &mut BTreeMap<String, MemberDocuments>) {
    let names: BTreeSet<String> = fleet.member_names().into_iter().collect();
    members.retain(|name, _| names.contains(name));
    let served: BTreeSet<String> = kubefold_engine::resources::served_group_versions(&fleet.catalog()).iter().map(|(g, v)| schemas::group_version_key(g, v)).collect();
    // A document is named by its URL, whose `hash` is the hash of its
    // content: members that publish the same URL share one copy, fetched
    // once (a thousand members of one version are one document, not a
    // thousand parsed copies of a few MB each).
    let mut known: HashMap<(String, String), Arc<Value>> = HashMap::new();
    for docs in members.values() {
        for (key, (url, document)) in &docs.documents {
            known.insert((key.clone(), url.clone()), document.clone());
        }
    }
    for cluster in names {
        let Some(index) = fetch(fleet, &cluster, "/openapi/v3").await else { continue };
        let entry = members.entry(cluster.clone()).or_default();
        let Some(paths) = index["paths"].as_object() else { continue };
        entry.documents.retain(|key, _| paths.contains_key(key) && served.contains(key));
        for (key, value) in paths.iter().filter(|(key, _)| served.contains(*key)) {
            let Some(url) = value["serverRelativeURL"].as_str() else { continue };
            if entry.documents.get(key).is_some_and(|(fetched, _)| fetched == url) {
                continue;
            }
            let name = (key.clone(), url.to_string());
            if let Some(document) = known.get(&name) {
                entry.documents.insert(key.clone(), (url.to_string(), document.clone()));
                continue;
            }
            if let Some(document) = fetch(fleet, &cluster, url).await {
                tracing::info!(%cluster, %key, "Fetched a member's OpenAPI document.");
                let document = Arc::new(document);
                known.insert(name, document.clone());
                entry.documents.insert(key.clone(), (url.to_string(), document));
            }
        }
    }
}

/// The merged documents of the served group-versions that some member
/// published.
fn merge(catalog: &[ResourceType], members: &BTreeMap<String, MemberDocuments>) -> Merged {
    let mut merged = Merged::default();
    for (group, version) in kubefold_engine::resources::served_group_versions(catalog) {
        let key = schemas::group_version_key(&group, &version);
        let published: Vec<&Value> = members.values().filter_map(|m| m.documents.get(&key).map(|(_, d)| d.as_ref())).collect();
        if published.is_empty() {
            continue;
        }
        let served: Vec<&ResourceType> = catalog.iter().filter(|r| r.group == group && r.version == version).collect();
        merged.v3.insert(key, Arc::new(merge_group_version(&served, &published)));
    }
    merged
}

/// One group-version's document from the members' documents of it: the
/// paths of the `served` types, their kinds' schemas and every schema those
/// refer to, each once, with kubefold's additions.
fn merge_group_version(served: &[&ResourceType], published: &[&Value]) -> Value {
    let mut paths = Map::new();
    let mut all = Map::new();
    for doc in published {
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let is_served = schemas::path_resource(path).is_some_and(|(g, v, plural)| served.iter().any(|r| r.group == g && r.version == v && r.plural == plural));
            if is_served && !paths.contains_key(path) {
                paths.insert(path.clone(), item.clone());
            }
        }
        for (name, schema) in doc["components"]["schemas"].as_object().into_iter().flatten() {
            all.entry(name.clone()).or_insert_with(|| schema.clone());
        }
    }
    let mut roots = Vec::new();
    schemas::refs(&Value::Object(paths.clone()), V3_REF_PREFIX, &mut roots);
    for (name, schema) in &all {
        let kinds = schemas::gvks(schema);
        let wanted = kinds.iter().any(|(g, v, k)| served.iter().any(|r| r.group == *g && r.version == *v && (r.kind == *k || format!("{}List", r.kind) == *k)));
        if wanted {
            roots.push(name.clone());
        }
    }
    let mut components = schemas::closure(&all, roots);
    if let Some(meta) = components.get_mut(OBJECT_META) {
        describe_additions(meta);
    }
    engine_openapi::document(INFO, paths, components)
}

/// Adds kubefold's sentences to `ObjectMeta`'s `name` and `annotations`.
fn describe_additions(meta: &mut Value) {
    for (field, addition) in [("name", NAME_ADDITION), ("annotations", ANNOTATIONS_ADDITION)] {
        if let Some(property) = meta["properties"].get_mut(field).and_then(Value::as_object_mut) {
            let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
            if !description.contains(addition) {
                let joined = if description.is_empty() { addition.to_string() } else { format!("{description} {addition}") };
                property.insert("description".into(), Value::String(joined));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::resources::builtin;
    use serde_json::json;

    fn member_doc(extra_schema: &str) -> Value {
        json!({
            "openapi": "3.0.0",
            "paths": {
                "/api/v1/namespaces/{namespace}/pods/{name}": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Pod"}}}}}}},
                "/api/v1/namespaces/{namespace}/secrets/{name}": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Secret"}}}}}}},
            },
            "components": {"schemas": {
                "io.k8s.api.core.v1.Pod": {"x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}], "properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}}},
                "io.k8s.api.core.v1.Secret": {"x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Secret"}]},
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"properties": {"name": {"description": "Name must be unique."}, "annotations": {"description": "Annotations."}}},
                extra_schema: {"type": "string"},
            }},
        })
    }

    #[test]
    fn merge_keeps_served_types_once_with_kubefolds_additions() {
        let catalog = builtin();
        let served: Vec<&ResourceType> = catalog.iter().filter(|r| r.group.is_empty()).collect();
        let (a, b) = (member_doc("a.Unused"), member_doc("b.Unused"));
        let doc = merge_group_version(&served, &[&a, &b]);
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        assert_eq!(paths, vec!["/api/v1/namespaces/{namespace}/pods/{name}"], "secrets are not served");
        let names: Vec<&String> = doc["components"]["schemas"].as_object().unwrap().keys().collect();
        assert_eq!(names, vec!["io.k8s.api.core.v1.Pod", OBJECT_META]);
        let name = doc["components"]["schemas"][OBJECT_META]["properties"]["name"]["description"].as_str().unwrap();
        assert!(name.starts_with("Name must be unique. ") && name.contains("`<name>_<cluster>`"), "{name}");
        let annotations = doc["components"]["schemas"][OBJECT_META]["properties"]["annotations"]["description"].as_str().unwrap();
        assert!(annotations.contains("kubefold.io/cluster") && annotations.contains("kubefold.io/member-resource-version"));
    }

    #[test]
    fn minimal_documents_before_any_member_answered() {
        let catalog = builtin();
        let openapi = OpenApi::new();
        let doc = openapi.v3(&catalog, "", "v1").unwrap();
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["parameters"].is_array());
        assert!(openapi.v3(&catalog, "batch", "v1").is_none());
        let mut members = BTreeMap::new();
        let mut docs = MemberDocuments::default();
        docs.documents.insert("api/v1".into(), ("/openapi/v3/api/v1?hash=1".into(), Arc::new(member_doc("x"))));
        members.insert("member1".to_string(), docs);
        let before = openapi.v3_index(&catalog);
        openapi.set(&catalog, merge(&catalog, &members));
        let after = openapi.v3_index(&catalog);
        assert_ne!(before["paths"]["api/v1"], after["paths"]["api/v1"], "the hash follows the document");
        assert_eq!(before["paths"]["apis/apps/v1"], after["paths"]["apis/apps/v1"], "apps/v1 is still the minimal document");
        assert!(openapi.v2(&catalog)["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    }
}
