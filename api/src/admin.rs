//! Admin REST (`/admin/v1`): member clusters (list, get, register, update,
//! remove, status), the resource selection (which types are aggregated from
//! which clusters and namespaces) and the types served, stats, compaction
//! and backup. Registrations and the selection persist in the store;
//! credentials are never returned, and kubeconfig files of registered
//! members must be in the directories of [`AdminConfig`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use actix::Addr;
use actix_web::{web, HttpResponse};
use kubefold_actors::aggregator::{Aggregator, Backup, Compact};
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::fleet::SyncState;
use kubefold_actors::supervisor::{AddCluster, DropCluster, ForgetCluster, KnowCluster, SetSelection, Supervisor};
use kubefold_engine::resources::TypeRef;
use kubefold_engine::selection::{NamespaceFilter, ResourceSelection};
use kubefold_engine::status::Status;
use serde_json::{json, Value};

use crate::{respond, ApiState};

/// Handles of the actors the admin API drives.
#[derive(Clone)]
pub struct Control {
    /// Starts and stops watchers.
    pub supervisor: Addr<Supervisor>,
    /// Compaction and backup.
    pub aggregator: Addr<Aggregator>,
    /// The estimator resolver, told about member changes.
    pub resolver: Option<Addr<kubefold_actors::resolver::Resolver>>,
}

impl Control {
    /// Tells the resolver the current member list.
    fn members_changed(&self, members: Vec<String>) {
        if let Some(r) = &self.resolver {
            r.do_send(kubefold_actors::resolver::SetMembers(members));
        }
    }
}

/// Serialises changes of the registry across HTTP workers.
static REGISTRY_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The store key of the registered clusters.
pub const REGISTRY_KEY: &str = kubefold_actors::cluster::REGISTRY_META_KEY;

/// Reads the registered clusters from the store.
pub fn registered(state: &ApiState) -> Result<Vec<ClusterSpec>, Status> {
    read_registry(state.fleet.store())
}

/// Reads the registered clusters from a store.
pub fn read_registry(store: &kubefold_store::Store) -> Result<Vec<ClusterSpec>, Status> {
    let bytes = store.meta_or_init(REGISTRY_KEY, || b"[]".to_vec()).map_err(|e| Status::internal(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| Status::internal(format!("cluster registry is unreadable: {e}")))
}

fn write_registry(state: &ApiState, clusters: &[ClusterSpec]) -> Result<(), Status> {
    let bytes = serde_json::to_vec(clusters).map_err(|e| Status::internal(e.to_string()))?;
    state.fleet.store().put_meta(REGISTRY_KEY, &bytes).map_err(store_write_failed)
}

/// The Status of an edit the store could not write: 507 Insufficient
/// Storage when the disk is full, 503 for another storage fault; the
/// message names the cause and that reads go on.
pub fn store_write_failed(e: kubefold_store::Error) -> Status {
    let cause = e.cause();
    let message = format!("store: {}: the change was not saved; reads go on, retry once the data dir's disk is writable again ({e})", cause.describe());
    match cause {
        kubefold_store::Cause::NoSpace => Status::new(507, "InsufficientStorage", message),
        _ => Status::new(503, "ServiceUnavailable", message),
    }
}

fn control(state: &ApiState) -> Result<&Control, Status> {
    state.control.as_ref().ok_or_else(|| Status::unavailable("cluster management is not available in this process"))
}

/// Status of one cluster: its connection, per-type sync state and object
/// counts, checkpoints, last error, reconnects.
fn cluster_status(state: &ApiState, cluster: &str) -> Value {
    // This member's part of the status table alone: copying the whole
    // table for each member made a list of 1,000 members copy 10 million
    // watcher statuses (seconds of an HTTP worker, gets on it waiting).
    let watchers = state.fleet.status_of(cluster);
    let snapshot = state.fleet.snapshot();
    let mut resources = BTreeMap::new();
    let mut synced = !watchers.is_empty();
    let mut stale = false;
    let mut last_error: Option<String> = None;
    let (mut reconnects, mut relists, mut events) = (0u64, 0u64, 0u64);
    let mut lag = std::time::Duration::ZERO;
    for (resource, w) in &watchers {
        lag = lag.max(w.lag());
        synced &= w.state == SyncState::Synced;
        stale |= w.state == SyncState::Stale;
        if w.last_error.is_some() {
            last_error = w.last_error.clone();
        }
        reconnects += w.reconnects;
        relists += w.relists;
        events += w.events;
        resources.insert(resource.clone(), json!({
            "state": w.state,
            "objects": snapshot.count_cluster(resource, cluster),
            "checkpoint": w.checkpoint,
            "lastError": w.last_error,
            "relists": w.relists,
            "reconnects": w.reconnects,
            "events": w.events,
            "lagSeconds": w.lag().as_secs_f64(),
        }));
    }
    let karmada = state.fleet.karmada().get(cluster);
    let mut reason: Option<String> = None;
    let phase = match &karmada {
        // Karmada's Pull-mode members are often out of the control plane's
        // reach: one kubefold cannot reach says so.
        Some(k) if k.is_pull() && !synced && last_error.is_some() => {
            reason = last_error.clone();
            "Unreachable"
        }
        Some(k) if k.not_ready() => {
            reason = k.ready.as_ref().map(|r| if r.message.is_empty() { r.reason.clone() } else { format!("{}: {}", r.reason, r.message) });
            "NotReady"
        }
        _ if synced => "Synced",
        _ if stale => "Stale",
        _ => "Connecting",
    };
    let mut status = json!({
        "phase": phase,
        "synced": synced,
        "stale": stale,
        "lastError": last_error,
        "reconnects": reconnects,
        "relists": relists,
        "events": events,
        "lagSeconds": lag.as_secs_f64(),
        "resources": resources,
    });
    if let Some(reason) = reason {
        status["reason"] = json!(reason);
    }
    if let Some(karmada) = karmada {
        status["karmada"] = json!(karmada);
    }
    status
}

fn cluster_json(state: &ApiState, spec: &ClusterSpec, source: &str) -> Value {
    json!({"spec": spec.redacted(), "source": source, "status": cluster_status(state, &spec.name)})
}

/// Every member cluster: configured (config file, flags) and registered
/// (API; over a shared log, those recorded there too).
async fn all_clusters(state: &ApiState) -> Result<Vec<(ClusterSpec, &'static str)>, Status> {
    let mut registered: std::collections::BTreeSet<String> = registered(state)?.into_iter().map(|s| s.name).collect();
    if let Some(shared) = state.fleet.shared() {
        let recorded = shared.members().await.map_err(|e| Status::unavailable(format!("cannot read the shared log's members: {e}")))?;
        registered.extend(recorded.into_keys());
    }
    let mut out = Vec::new();
    for name in state.fleet.member_names() {
        let Some(spec) = state.fleet.member(&name) else { continue };
        let source = if registered.contains(&name) { "api" } else { "config" };
        out.push((spec, source));
    }
    Ok(out)
}

/// `GET /admin/v1/clusters`: every member, in the order of their names;
/// with `limit`, a page of at most that many and, when more follow,
/// `metadata.continue` (pass it as `continue` for the next page) and
/// `metadata.remainingItemCount`, as Kubernetes lists page.
pub async fn list_clusters(state: web::Data<ApiState>, req: actix_web::HttpRequest) -> HttpResponse {
    let page = match ClusterPage::parse(req.query_string()) {
        Ok(page) => page,
        Err(s) => return respond::status(&s),
    };
    let mut clusters = match all_clusters(&state).await {
        Ok(clusters) => clusters,
        Err(s) => return respond::status(&s),
    };
    // Off the HTTP worker: at 1,000 members the page is about 1.6 MB of
    // JSON, built in a tenth of a second or more, and the worker's other
    // connections (gets, watches) would wait for it.
    let built = web::block(move || {
        clusters.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let (clusters, metadata) = page.cut(&clusters);
        let items: Vec<Value> = clusters.iter().map(|(s, src)| cluster_json(&state, s, src)).collect();
        json!({"metadata": metadata, "items": items}).to_string()
    })
    .await;
    match built {
        Ok(body) => respond::json_bytes(body.into_bytes()),
        Err(e) => respond::status(&Status::internal(e.to_string())),
    }
}

/// `limit` and `continue` of a list of members.
#[derive(Debug, Default, PartialEq, Eq)]
struct ClusterPage {
    /// At most this many (0: all).
    limit: usize,
    /// After this member's name.
    after: Option<String>,
}

impl ClusterPage {
    fn parse(query: &str) -> Result<ClusterPage, Status> {
        let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
            .map_err(|e| Status::bad_request(format!("invalid query: {e}")))?
            .into_inner();
        let mut page = ClusterPage::default();
        for (key, value) in pairs {
            match key.as_str() {
                "limit" => {
                    page.limit = value
                        .parse()
                        .map_err(|_| Status::bad_request(format!("limit: {value:?} is not a non-negative integer")))?;
                }
                "continue" if !value.is_empty() => {
                    let name = continue_name(&value)
                        .ok_or_else(|| Status::bad_request("continue key is not valid: it is not one this server gave"))?;
                    page.after = Some(name);
                }
                _ => {}
            }
        }
        Ok(page)
    }

    /// The page of `sorted` (sorted by name) and the list's metadata.
    fn cut<'a, T>(&self, sorted: &'a [(ClusterSpec, T)]) -> (&'a [(ClusterSpec, T)], Value) {
        let start = match &self.after {
            Some(after) => sorted.partition_point(|(s, _)| s.name.as_str() <= after.as_str()),
            None => 0,
        };
        let rest = &sorted[start..];
        if self.limit == 0 || rest.len() <= self.limit {
            return (rest, json!({}));
        }
        let page = &rest[..self.limit];
        let last = page.last().map(|(s, _)| s.name.as_str()).unwrap_or_default();
        (page, json!({"continue": continue_token(last), "remainingItemCount": rest.len() - self.limit}))
    }
}

/// The continue token after the member `name`: opaque to clients (base64url of `c1:<name>`).
fn continue_token(name: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("c1:{name}"))
}

/// The member name of a continue token, when it is one.
fn continue_name(token: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
    let name = String::from_utf8(bytes).ok()?.strip_prefix("c1:")?.to_string();
    kubefold_engine::names::is_valid_cluster_name(&name).then_some(name)
}

/// `GET /admin/v1/clusters/{name}`.
pub async fn get_cluster(state: web::Data<ApiState>, name: web::Path<String>) -> HttpResponse {
    match all_clusters(&state).await {
        Ok(clusters) => match clusters.iter().find(|(s, _)| s.name == *name) {
            Some((s, src)) => respond::json(&cluster_json(&state, s, src)),
            None => respond::status(&Status::not_found("admin.kubefold.io", "clusters", &name)),
        },
        Err(s) => respond::status(&s),
    }
}

/// The settings of the admin API (`admin:` in the config file).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Directories holding the kubeconfig files that members registered
    /// through the admin API may name (`kubeconfig`); any other path is
    /// refused (422), so that the API reads no other file of the host. A
    /// member may always be registered with its kubeconfig inline
    /// (`kubeconfigData`) or with `url`. Unset: the directories of the
    /// kubeconfig files of the configured `clusters`, none when they use none.
    #[serde(default)]
    pub kubeconfig_dirs: Option<Vec<PathBuf>>,
}

impl AdminConfig {
    /// The directories registered kubeconfigs may be in: `kubeconfigDirs`,
    /// or those of the configured members' kubeconfig files.
    pub fn kubeconfig_dirs(&self, configured: &[ClusterSpec]) -> Vec<PathBuf> {
        match &self.kubeconfig_dirs {
            Some(dirs) => dirs.clone(),
            None => {
                let mut dirs: Vec<PathBuf> = configured
                    .iter()
                    .filter_map(|c| c.kubeconfig.as_deref())
                    .map(|k| match k.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                        _ => PathBuf::from("."),
                    })
                    .collect();
                dirs.sort();
                dirs.dedup();
                dirs
            }
        }
    }
}

/// Checks that a registered member's kubeconfig file is in one of `allowed`
/// (symbolic links and `..` resolved). The refusal names the path given,
/// never a word of the file.
fn check_kubeconfig_path(cluster: &str, path: &Path, allowed: &[PathBuf]) -> Result<(), Status> {
    let resolved = std::fs::canonicalize(path).ok().or_else(|| {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some(std::fs::canonicalize(parent).ok()?.join(path.file_name()?))
    });
    let inside = resolved.is_some_and(|file| allowed.iter().filter_map(|d| std::fs::canonicalize(d).ok()).any(|d| file.starts_with(d)));
    if inside {
        return Ok(());
    }
    let dirs = if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    };
    Err(Status::new(
        422,
        "Invalid",
        format!(
            "cluster {cluster:?}: kubeconfig {} is not in a directory allowed for registered clusters (admin.kubeconfigDirs: {dirs}); give the kubeconfig inline as kubeconfigData",
            path.display()
        ),
    )
    .with_details("admin.kubefold.io", "clusters", cluster))
}

fn parse_spec(state: &ApiState, body: &[u8]) -> Result<ClusterSpec, Status> {
    let spec: ClusterSpec = serde_json::from_slice(body).map_err(|e| Status::bad_request(format!("invalid cluster: {e}")))?;
    if !kubefold_engine::names::is_valid_cluster_name(&spec.name) {
        return Err(Status::new(422, "Invalid", format!("cluster name {:?} must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)", spec.name)));
    }
    spec.check_target().map_err(|e| Status::new(422, "Invalid", e))?;
    if let Some(path) = &spec.kubeconfig {
        check_kubeconfig_path(&spec.name, path, &state.config.kubeconfig_dirs)?;
    }
    if let Some(path) = &spec.impersonator_token_file {
        // A file whose contents go to a member as a credential: the same
        // directories as kubeconfigs.
        check_kubeconfig_path(&spec.name, path, &state.config.kubeconfig_dirs).map_err(|_| {
            Status::new(
                422,
                "Invalid",
                format!("cluster {:?}: impersonatorTokenFile {} is not in a directory of admin.kubeconfigDirs; give impersonatorToken instead", spec.name, path.display()),
            )
            .with_details("admin.kubefold.io", "clusters", &spec.name)
        })?;
    }
    Ok(spec)
}

/// `POST /admin/v1/clusters`: registers a cluster and starts watching it.
pub async fn register_cluster(state: web::Data<ApiState>, payload: web::Payload) -> HttpResponse {
    let _guard = REGISTRY_LOCK.lock().await;
    let result = async {
        let body = crate::read_body(payload).await?;
        let mut spec = parse_spec(&state, &body)?;
        spec.restore_redacted(None).map_err(|e| Status::new(422, "Invalid", e))?;
        let exists = || Status::new(409, "AlreadyExists", format!("cluster \"{}\" already exists", spec.name));
        if state.fleet.member(&spec.name).is_some() {
            return Err(exists());
        }
        if let Some(shared) = state.fleet.shared() {
            // A replica of several: recorded in the shared log, where every
            // replica reads it and one of them watches it.
            let recorded = serde_json::to_vec(&spec).map_err(|e| Status::internal(e.to_string()))?;
            let added = shared.add_member(&spec.name, recorded).await.map_err(|e| Status::unavailable(format!("cannot record the cluster in the shared log: {e}")))?;
            if !added {
                return Err(exists());
            }
            let control = control(&state)?;
            control.supervisor.send(KnowCluster(spec.clone())).await.map_err(|e| Status::internal(e.to_string()))?;
            control.members_changed(state.fleet.member_names());
            return Ok(HttpResponse::Created().content_type(respond::JSON).body(cluster_json(&state, &spec, "api").to_string()));
        }
        let mut registry = registered(&state)?;
        registry.push(spec.clone());
        write_registry(&state, &registry)?;
        let control = control(&state)?;
        control.supervisor.send(AddCluster(spec.clone())).await.map_err(|e| Status::internal(e.to_string()))?;
        control.members_changed(state.fleet.member_names());
        Ok(HttpResponse::Created().content_type(respond::JSON).body(cluster_json(&state, &spec, "api").to_string()))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// `PUT /admin/v1/clusters/{name}`: changes a registered cluster; its watchers reconnect.
pub async fn update_cluster(state: web::Data<ApiState>, name: web::Path<String>, payload: web::Payload) -> HttpResponse {
    let _guard = REGISTRY_LOCK.lock().await;
    let result = async {
        let body = crate::read_body(payload).await?;
        let mut spec = parse_spec(&state, &body)?;
        if spec.name != *name {
            return Err(Status::bad_request(format!("the name in the body ({}) does not match the URL ({name})", spec.name)));
        }
        let mut registry = registered(&state)?;
        match registry.iter_mut().find(|s| s.name == *name) {
            Some(existing) => {
                // A spec read from this API and sent back keeps its credentials.
                spec.restore_redacted(Some(existing)).map_err(|e| Status::new(422, "Invalid", e))?;
                *existing = spec.clone()
            }
            None if recorded(&state, &name).await? => {
                return Err(Status::conflict(format!(
                    "cluster \"{name}\" is recorded in the shared log of the replicas; remove it and register it again to change it"
                )))
            }
            None if state.fleet.member(&name).is_some() => {
                return Err(Status::conflict(format!("cluster \"{name}\" comes from the configuration file; change it there")))
            }
            None => return Err(Status::not_found("admin.kubefold.io", "clusters", &name)),
        }
        write_registry(&state, &registry)?;
        control(&state)?.supervisor.send(AddCluster(spec.clone())).await.map_err(|e| Status::internal(e.to_string()))?;
        Ok(respond::json(&cluster_json(&state, &spec, "api")))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// Whether `name` is a member recorded in the shared log (false without one).
async fn recorded(state: &ApiState, name: &str) -> Result<bool, Status> {
    let Some(shared) = state.fleet.shared() else { return Ok(false) };
    let members = shared.members().await.map_err(|e| Status::unavailable(format!("cannot read the shared log's members: {e}")))?;
    Ok(members.contains_key(name))
}

/// `DELETE /admin/v1/clusters/{name}`: stops watching; its objects become DELETED events.
pub async fn remove_cluster(state: web::Data<ApiState>, name: web::Path<String>) -> HttpResponse {
    let _guard = REGISTRY_LOCK.lock().await;
    let result = async {
        if let Some(shared) = state.fleet.shared() {
            let marked = shared.remove_member(&name).await.map_err(|e| Status::unavailable(format!("cannot remove the cluster from the shared log: {e}")))?;
            if marked {
                return remove_recorded(&state, shared.as_ref(), &name).await;
            }
        }
        if state.fleet.member(&name).is_none() {
            return Err(Status::not_found("admin.kubefold.io", "clusters", &name));
        }
        let mut registry = registered(&state)?;
        registry.retain(|s| s.name != *name);
        write_registry(&state, &registry)?;
        let control = control(&state)?;
        let deleted = control
            .supervisor
            .send(DropCluster(name.to_string()))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        control.members_changed(state.fleet.member_names());
        Ok(respond::json(&json!({"name": *name, "deletedObjects": deleted})))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// How long a removal through the shared log is awaited before 504.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The objects of `cluster` in this replica's index.
fn objects_of(state: &ApiState, cluster: &str) -> usize {
    let snapshot = state.fleet.snapshot();
    snapshot.resource_keys().iter().map(|r| snapshot.count_cluster(r, cluster)).sum()
}

/// A member recorded in the shared log, marked for removal: its owner
/// (whichever replica) stops its watchers, commits its objects' deletions
/// and deletes the record. Answers once the record is gone and this
/// replica applied the deletions; 504 Timeout if that takes longer than
/// [`REMOVAL_WAIT`] (the removal goes on).
async fn remove_recorded(state: &ApiState, shared: &dyn kubefold_store::shared::SharedLog, name: &str) -> Result<HttpResponse, Status> {
    let before = objects_of(state, name);
    let deadline = tokio::time::Instant::now() + REMOVAL_WAIT;
    loop {
        let members = shared.members().await.map_err(|e| Status::unavailable(format!("cannot read the shared log's members: {e}")))?;
        if !members.contains_key(name) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Status::new(
                504,
                "Timeout",
                format!("cluster \"{name}\" is being removed: its owner has not finished deleting its objects yet (the removal goes on)"),
            )
            .with_details("admin.kubefold.io", "clusters", name));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    state.wait_consistent().await?;
    let control = control(state)?;
    // Forgotten here at once (the ownership loop would in its next round).
    control.supervisor.send(ForgetCluster(name.to_string())).await.map_err(|e| Status::internal(e.to_string()))?;
    control.members_changed(state.fleet.member_names());
    Ok(respond::json(&json!({"name": name, "deletedObjects": before.saturating_sub(objects_of(state, name))})))
}

/// The store key of the resource selection set through this API.
pub const SELECTION_KEY: &str = "resource-selection";

/// Reads the resource selection set through the admin API, if any.
pub fn read_selection(store: &kubefold_store::Store) -> Result<Option<ResourceSelection>, Status> {
    match store.meta(SELECTION_KEY).map_err(|e| Status::internal(e.to_string()))? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Status::internal(format!("stored resource selection is unreadable: {e}"))),
    }
}

/// The selection, where it comes from, the types served with their object
/// counts per member and where they are watched, and the selected types
/// not discovered from any member yet.
fn resources_json(state: &ApiState) -> Result<Value, Status> {
    let snapshot = state.fleet.snapshot();
    let selection = state.fleet.selection();
    let source = if read_selection(state.fleet.store())?.is_some() {
        "api"
    } else if *selection == ResourceSelection::default() {
        "default"
    } else {
        "config"
    };
    let members: Vec<ClusterSpec> = state.fleet.member_names().iter().filter_map(|c| state.fleet.member(c)).collect();
    let plans: Vec<(String, BTreeMap<TypeRef, NamespaceFilter>)> =
        members.iter().map(|m| (m.name.clone(), selection.plan(&m.name, &m.labels))).collect();
    let catalog = state.fleet.catalog();
    let items: Vec<Value> = catalog
        .iter()
        .map(|r| {
            let clusters: BTreeMap<&str, usize> = plans.iter().map(|(c, _)| (c.as_str(), snapshot.count_cluster(&r.key(), c))).collect();
            let watched: BTreeMap<&str, Vec<String>> = plans
                .iter()
                .filter_map(|(c, plan)| {
                    let namespaces = match plan.get(&r.type_ref())? {
                        NamespaceFilter::All => vec!["*".to_string()],
                        NamespaceFilter::Only(set) => set.iter().cloned().collect(),
                    };
                    Some((c.as_str(), namespaces))
                })
                .collect();
            let mut item = json!({
                "apiVersion": r.api_version(), "kind": r.kind, "resource": r.plural, "namespaced": r.namespaced,
                "objects": snapshot.len(&r.key()), "clusters": clusters, "watched": watched,
            });
            if !r.is_builtin() {
                item["printerColumns"] = json!(r.printer_columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
            }
            item
        })
        .collect();
    let pending: Vec<Value> = selection
        .types()
        .into_iter()
        .filter(|t| !catalog.iter().any(|r| t.names(r)))
        .map(|t| json!({"apiVersion": t.api_version, "kind": t.kind}))
        .collect();
    Ok(json!({"selection": *selection, "source": source, "items": items, "pending": pending}))
}

/// `GET /admin/v1/resources`: the selection, the aggregated types and their
/// object counts.
pub async fn resources(state: web::Data<ApiState>) -> HttpResponse {
    resources_json(&state).map_or_else(|s| respond::status(&s), |v| respond::json(&v))
}

fn parse_selection(body: &[u8]) -> Result<ResourceSelection, Status> {
    let selection: ResourceSelection =
        serde_json::from_slice(body).map_err(|e| Status::bad_request(format!("invalid resource selection: {e}")))?;
    selection.validate().map_err(|e| Status::new(422, "Invalid", e.to_string()))?;
    Ok(selection)
}

/// `PUT /admin/v1/resources`: replaces the resource selection (persisted).
/// Watchers start and stop at once; objects no longer selected become
/// DELETED events; discovery follows.
pub async fn set_resources(state: web::Data<ApiState>, payload: web::Payload) -> HttpResponse {
    let _guard = REGISTRY_LOCK.lock().await;
    let result = async {
        let body = crate::read_body(payload).await?;
        let selection = parse_selection(&body)?;
        let control = control(&state)?;
        let bytes = serde_json::to_vec(&selection).map_err(|e| Status::internal(e.to_string()))?;
        state.fleet.store().put_meta(SELECTION_KEY, &bytes).map_err(store_write_failed)?;
        let deleted = control
            .supervisor
            .send(SetSelection(selection))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut doc = resources_json(&state)?;
        doc["deletedObjects"] = json!(deleted);
        Ok(respond::json(&doc))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// `GET /admin/v1/stats`.
pub async fn stats(state: web::Data<ApiState>) -> HttpResponse {
    let snapshot = state.fleet.snapshot();
    let store = state.fleet.store();
    let mut doc = json!({
        "headResourceVersion": snapshot.head_rv(),
        "compactedResourceVersion": state.fleet.compacted_rv(),
        "objects": snapshot.total(),
        "events": store.event_count(),
        "dataDirBytes": store.size_on_disk().unwrap_or(0),
        "watches": crate::watch::open_watches(),
        "watchClientsByUserAgent": crate::watch::watch_clients_by_user_agent(),
        "clusters": state.fleet.member_names().len(),
    });
    if let Some(shared) = state.fleet.shared() {
        // This replica's place in the log shared with the others (etcd).
        doc["sharedLog"] = json!({
            "log": shared.identity(),
            "appliedRevision": state.fleet.shared_applied_revision(),
        });
    }
    if let Some((cause, message)) = store.fault() {
        doc["storeFault"] = json!({
            "cause": cause.label(),
            "reason": format!("store: {}", cause.describe()),
            "message": message,
            "action": cause.advice(),
        });
    }
    respond::json(&doc)
}

/// `GET /admin/v1/replicas`: on etcd, every replica registered on the
/// log (id, address, lease, applied revision and lag) and the members each
/// owns; 404 for a kubefold that is not a replica.
pub async fn replicas(state: web::Data<ApiState>) -> HttpResponse {
    let Some(shared) = state.fleet.shared() else {
        return respond::status(&Status::new(404, "NotFound", "this kubefold is not one of several replicas (it runs without --etcd-servers)".to_string()));
    };
    match shared.replicas().await {
        Ok(replicas) => {
            let items: Vec<Value> = replicas
                .into_iter()
                .map(|r| {
                    json!({
                        "id": r.id,
                        "address": r.address,
                        "lease": r.lease,
                        "leaseRemainingSeconds": r.lease_remaining_seconds,
                        "appliedRevision": r.applied_revision,
                        "lagRevisions": r.lag_revisions,
                        "members": r.members,
                        "owned": r.owned,
                    })
                })
                .collect();
            respond::json(&json!({
                "log": shared.identity(),
                "appliedRevision": state.fleet.shared_applied_revision(),
                "items": items,
            }))
        }
        Err(e) => respond::status(&Status::unavailable(format!("cannot read the replicas from the shared log: {e}"))),
    }
}

/// `POST /admin/v1/compact`.
pub async fn compact(state: web::Data<ApiState>) -> HttpResponse {
    let result = async {
        let stats = control(&state)?.aggregator.send(Compact).await.map_err(|e| Status::internal(e.to_string()))?.map_err(|e| Status::internal(e.to_string()))?;
        Ok::<_, Status>(respond::json(&json!(stats)))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// `POST /admin/v1/backup`: a consistent backup (taken by the aggregator
/// between two commits), streamed as `application/octet-stream`. The
/// credentials of registered members are left out unless the query has
/// `includeCredentials=true`.
pub async fn backup(state: web::Data<ApiState>, req: actix_web::HttpRequest) -> HttpResponse {
    let result = async {
        let query: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string()).map_err(|e| Status::bad_request(e.to_string()))?;
        let include_credentials = match query.iter().find(|(k, _)| k == "includeCredentials").map(|(_, v)| v.as_str()) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(Status::bad_request(format!("includeCredentials must be true or false, not {other:?}"))),
        };
        let path = control(&state)?.aggregator.send(Backup { include_credentials }).await.map_err(|e| Status::internal(e.to_string()))?.map_err(|e| Status::internal(e.to_string()))?;
        let file = tokio::fs::File::open(&path).await.map_err(|e| Status::internal(e.to_string()))?;
        // The file is already open; removing it now frees the space when the stream ends.
        let _ = std::fs::remove_file(&path);
        let stream = tokio_util::io::ReaderStream::new(file);
        Ok::<_, Status>(HttpResponse::Ok().content_type("application/octet-stream").streaming(stream))
    }
    .await;
    result.unwrap_or_else(|s| respond::status(&s))
}

/// Registers the admin routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/v1/clusters", web::get().to(list_clusters))
        .route("/admin/v1/clusters", web::post().to(register_cluster))
        .route("/admin/v1/clusters/{name}", web::get().to(get_cluster))
        .route("/admin/v1/clusters/{name}", web::put().to(update_cluster))
        .route("/admin/v1/clusters/{name}", web::delete().to(remove_cluster))
        .route("/admin/v1/resources", web::get().to(resources))
        .route("/admin/v1/resources", web::put().to(set_resources))
        .route("/admin/v1/stats", web::get().to(stats))
        .route("/admin/v1/replicas", web::get().to(replicas))
        .route("/admin/v1/compact", web::post().to(compact))
        .route("/admin/v1/backup", web::post().to(backup));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<(ClusterSpec, ())> {
        // Out of order and with names that sort differently as numbers.
        (1..=n).rev().map(|i| (ClusterSpec::from_url(&format!("member{i}"), "http://127.0.0.1:1"), ())).collect()
    }

    fn names<T>(page: &[(ClusterSpec, T)]) -> Vec<&str> {
        page.iter().map(|(s, _)| s.name.as_str()).collect()
    }

    #[test]
    fn member_lists_page_with_limit_and_continue_until_every_member_was_seen_once() {
        let mut all = members(12);
        all.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let mut seen = Vec::new();
        let mut query = "limit=5".to_string();
        let mut pages = 0;
        loop {
            let page = ClusterPage::parse(&query).unwrap();
            let (items, metadata) = page.cut(&all);
            assert!(items.len() <= 5);
            seen.extend(names(items).into_iter().map(str::to_string));
            pages += 1;
            match metadata["continue"].as_str() {
                Some(token) => {
                    assert_eq!(metadata["remainingItemCount"], json!(12 - seen.len()));
                    query = format!("limit=5&continue={token}");
                }
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let expected: Vec<String> = names(&all).into_iter().map(str::to_string).collect();
        assert_eq!(seen, expected, "every member once, in name order");
        let (everything, metadata) = ClusterPage::parse("").unwrap().cut(&all);
        assert_eq!((everything.len(), metadata), (12, json!({})), "no limit: the whole list");
    }

    #[test]
    fn bad_limits_and_continue_tokens_are_400() {
        for query in ["limit=-1", "limit=x", "continue=member3", "continue=!!"] {
            let status = ClusterPage::parse(query).unwrap_err();
            assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"), "{query}");
        }
    }
}
