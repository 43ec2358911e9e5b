//! kubefold's HTTP surface (actix-web): the Kubernetes API over the merged
//! index, health endpoints and metrics. Handlers translate only: request →
//! snapshot read → response or Kubernetes `Status`.
//!
//! - [`request`]: what a request asks for ([`RequestInfo`]), parsed once for every layer.
//! - [`path`]: parsing of Kubernetes API paths.
//! - [`karmada_path`]: the API also served under Karmada's proxy paths.
//! - [`query`]: reads below the HTTP layer: list, get and watch parameters,
//!   scopes and selectors, paging, list bodies, snapshots of the past, watches.
//! - [`audit`]: the audit log (`audit.k8s.io/v1` events, kube-apiserver's policy).
//! - [`admin`]: `/admin/v1` (clusters, resources, stats, compaction, backup).
//! - [`connections`]: open connections against the descriptors the process may open.
//! - [`discovery`]: `/version`, `/api`, `/apis` documents.
//! - [`openapi`]: the OpenAPI documents, merged from the members'.
//! - [`estimators`]: `/admin/v1/estimators`, the scheduler-estimator endpoints.
//! - [`read`]: list and get over HTTP (JSON and Table, gzip).
//! - [`gzip`]: gzip response encoding of lists.
//! - [`watch`]: watch streams over HTTP.
//! - [`watch_budget`]: what the watches of one client may hold unread.
//! - [`edit`]: edits forwarded to the owning member, read-your-writes.
//! - [`members`]: kube clients of the members and raw forwarding.
//! - [`placement`]: the member of a new object that names none.
//! - [`passthrough`]: what kubefold does not serve under `/clusters/{c}`, proxied to the member.
//! - [`decode`]: request bodies decoded off the HTTP workers, within a budget.
//! - [`auth`]: authentication, authorization, per-client limits.
//! - [`tls`]: the HTTPS listener's certificates and client-certificate verification.
//! - [`impersonate`]: `Impersonate-*` headers (`kubectl --as`).
//! - [`health`]: `/healthz`, `/livez`, `/readyz`, `/metrics`.
//! - [`series`]: the catalog of metric series, their zeros and the scrape-time ones.
//! - [`starting`]: what the API answers while the store is opened and replayed.
//! - [`cbor`]: CBOR refused (415 for bodies, 406 for a CBOR-only Accept).
//! - [`protobuf`]: protobuf request bodies and responses of built-in types.
//! - [`resource_metrics`]: `metrics.k8s.io` of the fleet (`kubectl top`), asked of the members.
//! - [`respond`]: Status errors and JSON responses.
//! - [`unserved`]: Status answers for what is not served yet (streaming subresources).
//! - [`reviews`]: access and identity reviews (`kubectl auth can-i`, `whoami`).
//! - [`console`]: the web console under `/ui` (fleet and search).

pub mod admin;
pub mod audit;
pub mod connections;
pub mod decode;
pub mod discovery;
pub mod edit;
pub mod estimators;
pub mod gzip;
pub mod health;
pub mod auth;
pub mod impersonate;
pub mod karmada_path;
pub mod cbor;
pub mod console;
pub mod members;
pub mod passthrough;
pub mod openapi;
pub mod path;
pub mod placement;
pub mod protobuf;
pub mod query;
pub mod read;
pub mod resource_metrics;
pub mod respond;
pub mod series;
pub mod stream_proxy;
pub mod request;
pub mod starting;
pub mod reviews;
pub mod tls;
pub mod unserved;
pub mod watch;
pub mod watch_budget;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::Method;
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse};
use kubefold_actors::fleet::Fleet;
use kubefold_engine::index::Index;
use kubefold_engine::resources;
use kubefold_engine::status::Status;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::path::{ApiPath, ResourcePath};
pub use crate::request::RequestInfo;
use crate::query::{Query, ReadAt};

/// Seconds an idle kept-alive connection stays open (see [`server`]).
pub const IDLE_CONNECTION_SECS: u64 = 90;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Settings of the HTTP surface.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// actix-web worker threads.
    pub workers: usize,
    /// Interval of watch bookmarks (`allowWatchBookmarks=true`).
    pub bookmark_interval: Duration,
    /// A watch takes newly committed events at most once per this interval
    /// and writes them together (zero: each commit at once); see
    /// `query::watch::Watch::run`.
    pub watch_flush_interval: Duration,
    /// Lower bound of the randomised default watch timeout.
    pub min_watch_timeout: Duration,
    /// How long a read waits for a resourceVersion the index has not reached
    /// yet before 504 "Too large resource version" (kube-apiserver's watch
    /// cache waits 3 s).
    pub rv_wait: Duration,
    /// How long an edit waits for kubefold to ingest the member's change
    /// before it answers anyway (with a Warning header).
    pub write_wait: Duration,
    /// How long a client may take no byte of a response (or leave sent
    /// bytes unacknowledged) before its connection is closed; `None`: never.
    pub client_stall_timeout: Option<Duration>,
    /// gzip lists over 128 KiB for clients that accept it (kube-apiserver's
    /// APIResponseCompression), see [`gzip`].
    pub compress_lists: bool,
    /// Authentication and authorization.
    pub auth: auth::AuthConfig,
    /// The audit log.
    pub audit: audit::AuditConfig,
    /// TLS; plain HTTP when absent.
    pub tls: Option<tls::TlsConfig>,
    /// Rules choosing the member of a new object that names none.
    pub placement: Vec<placement::PlacementRule>,
    /// Descriptors kept for the process's own use beyond what connections
    /// may take (see [`connections`]); `None`: a tenth of the open-files
    /// limit, at least 64.
    pub file_descriptor_reserve: Option<usize>,
    /// Directories holding the kubeconfig files members registered through
    /// the admin API may name ([`admin::AdminConfig`]).
    pub kubeconfig_dirs: Vec<std::path::PathBuf>,
    /// How often the members' OpenAPI documents are read again (see
    /// [`openapi`]).
    pub openapi_refresh: Duration,
    /// How long a forwarded stream (exec, attach, port-forward, proxy) may
    /// pass no byte either way before it is closed (kubelet's default, 4 h;
    /// see [`stream_proxy`]).
    pub stream_idle_timeout: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 2,
            bookmark_interval: Duration::from_secs(60),
            watch_flush_interval: Duration::from_millis(20),
            min_watch_timeout: Duration::from_secs(1800),
            rv_wait: Duration::from_secs(3),
            write_wait: Duration::from_secs(10),
            client_stall_timeout: Some(Duration::from_secs(60)),
            compress_lists: true,
            auth: auth::AuthConfig::default(),
            audit: audit::AuditConfig::default(),
            tls: None,
            placement: Vec::new(),
            file_descriptor_reserve: None,
            kubeconfig_dirs: Vec::new(),
            openapi_refresh: Duration::from_secs(60),
            stream_idle_timeout: Duration::from_secs(4 * 3600),
        }
    }
}

/// What every HTTP worker shares.
pub struct ApiState {
    /// The read view.
    pub fleet: Arc<Fleet>,
    /// Settings.
    pub config: ApiConfig,
    /// Key of the continue-token checksum.
    pub token_secret: Vec<u8>,
    /// Prometheus exporter, when installed.
    pub metrics: Option<PrometheusHandle>,
    /// Actors the admin API drives (absent in read-only setups).
    pub control: Option<admin::Control>,
    /// The scheduler-estimator endpoint table.
    pub estimators: Arc<kubefold_actors::resolver::Estimators>,
    /// The OpenAPI documents, merged from the members'.
    pub openapi: Arc<openapi::OpenApi>,
    snapshots: query::snapshot::Snapshots,
}

impl ApiState {
    /// State over `fleet`.
    pub fn new(fleet: Arc<Fleet>, config: ApiConfig, token_secret: Vec<u8>, metrics: Option<PrometheusHandle>) -> ApiState {
        ApiState { fleet, config, token_secret, metrics, control: None, estimators: kubefold_actors::resolver::Estimators::new(), openapi: openapi::OpenApi::new(), snapshots: query::snapshot::Snapshots::new() }
    }

    /// Waits until the index reaches `rv`, up to `rv_wait`; 504 Timeout
    /// "Too large resource version" with Retry-After after that.
    pub async fn wait_for_rv(&self, rv: u64) -> Result<(), Status> {
        query::snapshot::wait_for_rv(&self.fleet, rv, self.config.rv_wait).await
    }

    /// A consistent read (`resourceVersion` unset) on a replica of several:
    /// waits until this replica has applied the head the shared log has
    /// now (read linearizably), as kube-apiserver's consistent reads from
    /// its cache do; 503 when the log cannot be read. At once without a
    /// shared log.
    pub async fn wait_consistent(&self) -> Result<(), Status> {
        let Some(shared) = self.fleet.shared() else { return Ok(()) };
        let rv = shared.current_rv().await.map_err(|e| Status::unavailable(format!("cannot read the shared log's head for a consistent read: {e}")))?;
        self.wait_for_rv(rv).await
    }

    /// The index as of `rv`: the live snapshot, a cached one, or the live one
    /// rewound through the event log. 410 when `rv` left the retained history.
    pub fn snapshot_at(&self, rv: u64) -> Result<Arc<Index>, Status> {
        self.snapshots.at(&self.fleet, rv)
    }

    /// What lists read: the fleet, the snapshots of the past, the
    /// continue tokens' key.
    pub fn reader(&self) -> query::Reader<'_> {
        query::Reader { fleet: &self.fleet, snapshots: &self.snapshots, token_secret: &self.token_secret }
    }
}

/// Marks a request routed to a type kubefold serves: its metrics carry
/// its verb and type ([`RequestInfo::metrics_verb`], [`RequestInfo::type_key`]).
#[derive(Debug, Clone, Copy)]
struct ServedType;

/// Reads a request body up to [`MAX_BODY_BYTES`]; 413 RequestEntityTooLarge
/// beyond, as kube-apiserver answers.
pub(crate) async fn read_body(mut payload: web::Payload) -> Result<web::Bytes, Status> {
    use futures::StreamExt;
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Status::bad_request(format!("cannot read the request body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(Status::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {MAX_BODY_BYTES}")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

async fn dispatch(req: HttpRequest, payload: web::Payload, state: web::Data<ApiState>) -> HttpResponse {
    let state = state.into_inner();
    let started = std::time::Instant::now();
    // A streaming subresource of a pod, service or node is forwarded to
    // its member ([`stream_proxy`]), any other one answered at once
    // ([`unserved`]), before a body is waited for: an upgrade request's
    // body lasts as long as its connection. Elsewhere a WebSocket upgrade
    // (or CONNECT) request has no body: actix-http hands everything after
    // its head on as an endless payload (the frames it expects), and
    // waiting for its end never answered, so such a request is answered
    // as it is and the connection closed after. A SPDY/3.1 upgrade looks
    // like a WebSocket one here (`kubefold_listen`); other upgrades (h2c)
    // keep their body as any request.
    let websocket = req
        .headers()
        .get(actix_web::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    let info = RequestInfo::of(&req.extensions(), req.method(), req.path(), req.query_string());
    let result = match (stream_proxy::target(&info), info.decoded_path.as_deref().and_then(unserved::streaming)) {
        (Some(Ok(target)), _) => stream_proxy::forward(&req, payload, &state, target).await,
        (Some(Err(status)), _) | (None, Some(status)) => Err(status),
        (None, None) => {
            let body = if websocket || req.method() == Method::CONNECT {
                drop(payload);
                Ok(web::Bytes::new())
            } else {
                read_body(payload).await
            };
            match body {
                Ok(body) => route(&req, &state, &info, &body).await,
                Err(status) => Err(status),
            }
        }
    };
    let response = match result {
        Ok(r) => r,
        Err(status) => {
            if status.code >= 500 {
                tracing::error!(method = %req.method(), path = %req.path(), code = status.code, message = %status.message, "Request failed.");
            } else {
                tracing::debug!(method = %req.method(), path = %req.path(), code = status.code, reason = %status.reason, "Request refused.");
            }
            respond::status(&status)
        }
    };
    let served = req.extensions().get::<ServedType>().is_some();
    let (verb, resource) = if served { (info.metrics_verb(req.method()), info.type_key()) } else { ("other", String::new()) };
    let code = response.status().as_u16().to_string();
    metrics::counter!("kubefold_requests_total", "verb" => verb, "resource" => resource.clone(), "code" => code).increment(1);
    if verb != "watch" {
        metrics::histogram!("kubefold_request_duration_seconds", "verb" => verb, "resource" => resource).record(started.elapsed().as_secs_f64());
    }
    response
}

async fn route(req: &HttpRequest, state: &Arc<ApiState>, info: &RequestInfo, body: &web::Bytes) -> Result<HttpResponse, Status> {
    if info.decoded_path.is_none() {
        return Err(Status::bad_request("invalid path: encoded slashes and bad escapes are not allowed"));
    }
    if info.cluster.is_none() {
        if let Some(metrics_route) = info.decoded_path.as_deref().and_then(resource_metrics::route) {
            return resource_metrics::serve(req, state, metrics_route).await;
        }
    }
    let served = state.fleet.catalog();
    let catalog: &[resources::ResourceType] = &served;
    let is_namespaced = |g: &str, v: &str, r: &str| resources::find(catalog, g, v, r).is_some_and(|t| t.namespaced);
    let scoped_cluster = info.cluster.clone();
    if let Some(cluster) = &scoped_cluster {
        if state.fleet.member(cluster).is_none() {
            return Err(Status::new(404, "NotFound", format!("cluster \"{cluster}\" is not a member of this kubefold"))
                .with_details("", "clusters", cluster));
        }
    }
    let parsed = match &info.api_path {
        Some(ApiPath::Resource(_)) => info.resource_path(is_namespaced).map(ApiPath::Resource),
        other => other.clone(),
    };
    let Some(parsed) = parsed else {
        return match &scoped_cluster {
            Some(cluster) => passthrough::forward(req, state, cluster, body).await,
            None => Err(Status::path_not_found()),
        };
    };
    // Under /clusters/{c}, the member's own discovery and OpenAPI documents.
    if let (Some(cluster), false, true) = (&scoped_cluster, matches!(parsed, ApiPath::Resource(_) | ApiPath::Version), req.method() == Method::GET) {
        if let Some(document) = passthrough::member_document(req, state, cluster).await {
            return Ok(document);
        }
    }
    cbor::refuse(req)?;
    if !matches!(parsed, ApiPath::Resource(_)) && req.method() != Method::GET {
        return Err(Status::method_not_allowed(format!("the server does not allow this method on the requested resource: {}", req.method())));
    }
    let accept = req.headers().get(actix_web::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let aggregated = discovery::wants_aggregated(accept);
    // Discovery lists the reviews beside the served types.
    let with_reviews: Vec<resources::ResourceType> = catalog.iter().cloned().chain(reviews::review_types()).collect();
    let catalog: &[resources::ResourceType] = match parsed {
        ApiPath::CoreVersions { .. } | ApiPath::Groups { .. } | ApiPath::Group { .. } | ApiPath::GroupVersion { .. } => &with_reviews,
        _ => catalog,
    };
    match parsed {
        ApiPath::Version => Ok(respond::json(&discovery::version())),
        ApiPath::CoreVersions { .. } if aggregated => Ok(respond::aggregated(&discovery::aggregated(catalog, true))),
        ApiPath::Groups { .. } if aggregated => {
            let mut groups = discovery::aggregated(catalog, false);
            resource_metrics::add_to_groups(&mut groups, true, catalog);
            Ok(respond::aggregated(&groups))
        }
        ApiPath::CoreVersions { .. } => Ok(respond::json(&discovery::core_versions())),
        ApiPath::Groups { .. } => {
            let mut groups = discovery::groups(catalog);
            resource_metrics::add_to_groups(&mut groups, false, catalog);
            Ok(respond::json(&groups))
        }
        // kubectl up to 1.29 asks for /openapi/v2 in protobuf only (for
        // strategic merge patch metadata); it gets a valid document without
        // definitions and falls back to its built-in schemas for those types.
        ApiPath::OpenApiV2 if accept.contains("protobuf") && !accept.contains("json") => Ok(HttpResponse::Ok()
            // kube-openapi answers this Accept with application/octet-stream
            // (Go's mime parser rejects the `@` of the requested type).
            .content_type("application/octet-stream")
            .body(discovery::openapi_v2_protobuf())),
        ApiPath::OpenApiV2 => Ok(respond::json(&state.openapi.v2(catalog))),
        ApiPath::OpenApiV3Index => Ok(respond::json(&state.openapi.v3_index(catalog))),
        ApiPath::OpenApiV3 { group, version } => {
            state.openapi.v3(catalog, &group, &version).map(|d| respond::json(&d)).ok_or_else(Status::path_not_found)
        }
        ApiPath::Group { group, .. } => discovery::group(catalog, &group)
            .or_else(|| karmada_path::group(&group))
            .map(|d| respond::json(&d))
            .ok_or_else(Status::path_not_found),
        ApiPath::GroupVersion { group, version, .. } => discovery::resource_list(catalog, &group, &version)
            .or_else(|| karmada_path::resource_list(&group, &version))
            .map(|d| respond::json(&d))
            .ok_or_else(Status::path_not_found),
        ApiPath::Resource(path) if reviews::is_review(&path) => reviews::serve(req, state, &path, body).await,
        ApiPath::Resource(path) => {
            // Protobuf at the edge: a body decoded to JSON first, the JSON answer encoded last.
            let Some(served_type) = resources::find(catalog, &path.group, &path.version, &path.resource).cloned() else {
                return resource(req, state, path, body).await;
            };
            let converted = protobuf::request_body(req, &served_type, path.subresource.as_deref(), body)?;
            let response = resource(req, state, path, converted.as_ref().unwrap_or(body)).await?;
            if !protobuf::wanted(req, &served_type) {
                return Ok(response);
            }
            let served = match info.metrics_verb(req.method()) {
                "watch" => protobuf::Served::Watch,
                "list" => protobuf::Served::List,
                _ => protobuf::Served::Object,
            };
            Ok(protobuf::response(req, response, served, state.config.compress_lists).await)
        }
    }
}

// Streaming subresources that reach the resource handler (neither
// forwarded by `stream_proxy` nor answered by `unserved`) are answered at
// once with 400 BadRequest, as kube-apiserver answers a request it cannot
// upgrade.
use unserved::STREAMING_SUBRESOURCES;

async fn resource(req: &HttpRequest, state: &Arc<ApiState>, path: ResourcePath, body: &web::Bytes) -> Result<HttpResponse, Status> {
    let served = state.fleet.catalog();
    let catalog: &[resources::ResourceType] = &served;
    let Some(resource) = resources::find(catalog, &path.group, &path.version, &path.resource).cloned() else {
        return match &path.cluster {
            // A type kubefold does not aggregate: the member serves it.
            Some(cluster) => passthrough::forward(req, state, cluster, body).await,
            None => Err(Status::path_not_found().with_details(&path.group, &path.resource, path.name.as_deref().unwrap_or(""))),
        };
    };
    if !resource.namespaced && path.namespace.is_some() {
        return Err(Status::path_not_found());
    }
    if let Some(sub) = path.subresource.as_deref().filter(|s| STREAMING_SUBRESOURCES.contains(s)) {
        return Err(Status::bad_request(format!(
            "the {sub} subresource streams over an upgraded connection (WebSocket or SPDY), which kubefold forwards only for pods, services and nodes: use the member cluster's API server for {sub}"
        )));
    }
    let query = Query::parse(req.query_string())?;
    req.extensions_mut().insert(ServedType);
    let member = path.cluster.clone();
    let scope = query::Scope::new(resource, &path, state.fleet.name_style());
    match (req.method().clone(), path.name.as_deref(), path.subresource.as_deref()) {
        (Method::GET, None, None) if query.is_watch()? => {
            let send_initial = query.watch_send_initial_events()?;
            match (send_initial, query.resource_version()?) {
                (Some(true), Some(n)) => state.wait_for_rv(n).await?,
                (_, None) => state.wait_consistent().await?,
                _ => {}
            }
            let agent = req.headers().get(actix_web::http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown");
            let socket = req.conn_data::<watch::ConnectionSocket>().cloned();
            let client = req.extensions().get::<auth::Client>().map(|c| c.0.clone());
            watch::watch(state.clone(), scope, &query, send_initial, read::wants_table(req), agent, client.as_deref(), socket)
        }
        (Method::GET, None, None) => {
            let read_at = query.list_read_at()?;
            match read_at {
                ReadAt::NotOlderThan(n) | ReadAt::Exact(n) => state.wait_for_rv(n).await?,
                ReadAt::Latest if query.continue_token.as_deref().is_none_or(|t| t.is_empty()) => state.wait_consistent().await?,
                _ => {}
            }
            read::list(state, req, &scope, &query, read_at)
        }
        (Method::GET, Some(name), None | Some("status")) => {
            match query.get_read_at()? {
                ReadAt::NotOlderThan(n) => state.wait_for_rv(n).await?,
                ReadAt::Latest => state.wait_consistent().await?,
                _ => {}
            }
            read::get(state, req, &scope, name, &query)
        }
        (Method::GET, Some(name), Some("scale")) => edit::get_scale(state, req, &scope, name).await,
        // `kubectl debug`: the pod, read as it is and edited on its member.
        (Method::GET, Some(name), Some("ephemeralcontainers")) if member.is_none() && is_core_pods(&scope.resource) => {
            read::get(state, req, &scope, name, &query)
        }
        (Method::PUT, Some(name), sub @ Some("ephemeralcontainers")) if member.is_none() && is_core_pods(&scope.resource) => {
            edit::update(state, req, &scope, name, sub, body).await
        }
        (Method::PATCH, Some(name), sub @ Some("ephemeralcontainers")) if member.is_none() && is_core_pods(&scope.resource) => {
            edit::patch(state, req, &scope, name, sub, body).await
        }
        (Method::GET, Some(name), Some("log")) if scope.resource.plural == "pods" => edit::log(state, req, &scope, name).await,
        (Method::PUT, Some(name), sub @ (None | Some("status") | Some("scale"))) => {
            edit::update(state, req, &scope, name, sub, body).await
        }
        (Method::PATCH, Some(name), sub @ (None | Some("status") | Some("scale"))) => {
            edit::patch(state, req, &scope, name, sub, body).await
        }
        (Method::DELETE, Some(name), None) => edit::delete(state, req, &scope, name, body).await,
        (Method::DELETE, None, None) => edit::delete_collection(state, req, &scope, body).await,
        (Method::POST, None, None) => edit::create(state, req, &scope, body).await,
        (Method::POST, Some(name), Some(sub)) if member.is_none() && scope.resource.subresources.iter().any(|s| s == sub) => {
            edit::create_subresource(state, req, &scope, name, sub, body).await
        }
        // A verb or subresource kubefold does not serve: the member does.
        _ if member.is_some() => passthrough::forward(req, state, member.as_deref().unwrap_or_default(), body).await,
        (method, _, sub) => Err(match sub {
            // `/namespaces/{ns}/{type}` of a type kubefold does not serve.
            Some(sub) if scope.resource.plural == "namespaces" && scope.resource.group.is_empty() => {
                Status::path_not_found().with_details(&path.group, sub, "")
            }
            // With details, as kube-apiserver names the type (kubectl debug reads them).
            Some(sub) if !scope.resource.subresources.iter().any(|s| s == sub) => Status::new(
                404,
                "NotFound",
                format!("{}/{sub} is not served at the fleet level; under /clusters/<cluster> it is passed through to the member", scope.resource.plural),
            )
            .with_details(&scope.resource.group, &scope.resource.plural, ""),
            _ => Status::method_not_allowed(format!("{method} is not supported on {}", req.path())),
        }),
    }
}

/// Whether a type is the core group's pods.
fn is_core_pods(resource: &resources::ResourceType) -> bool {
    resource.group.is_empty() && resource.plural == "pods"
}

/// Why the HTTP server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The authentication configuration is unusable.
    #[error("authentication: {0}")]
    Auth(#[source] auth::Error),
    /// The audit log cannot be set up.
    #[error("audit: {0}")]
    Audit(#[source] audit::Error),
    /// The TLS configuration is unusable.
    #[error("tls: {0}")]
    Tls(#[source] tls::Error),
    /// The listener could not be bound.
    #[error("cannot listen: {0}")]
    Bind(#[source] std::io::Error),
}

/// Builds the HTTP server over `state`; returns it (to be awaited) and the
/// addresses it listens on. With `listener` (bound by [`starting::bind`]
/// and served meanwhile by [`starting::StartingServer`]) it serves that
/// socket; otherwise it binds `state.config.listen`.
pub fn server(state: Arc<ApiState>, listener: Option<std::net::TcpListener>) -> Result<(Server, Vec<SocketAddr>), ServerError> {
    let config = state.config.clone();
    let authenticator = auth::Auth::from_config(&config.auth).map_err(ServerError::Auth)?;
    if authenticator.is_open() {
        tracing::warn!(listen = %config.listen, "No authenticator configured: every client has full access.");
    }
    let audit = audit::Audit::from_config(&config.audit).map_err(ServerError::Audit)?;
    let tls = config.tls.as_ref().map(tls::server_config).transpose().map_err(ServerError::Tls)?;
    if tls.is_none() {
        tracing::warn!(listen = %config.listen, "Serving plain HTTP: configure tls for anything but loopback.");
    }
    let estimator_table = web::Data::from(state.estimators.clone());
    openapi::spawn_refresh(state.fleet.clone(), &state.openapi, config.openapi_refresh);
    let stall_timeout = config.client_stall_timeout;
    let limits = connections::ConnectionLimits::of_process(config.file_descriptor_reserve);
    let workers = config.workers.max(1);
    tracing::info!(connections = limits.total, served_in_full = limits.full, "Connections limited by the open-files limit.");
    let open_connections = connections::Connections::new(limits);
    let data = web::Data::from(state);
    let app = move || {
        App::new()
            .app_data(data.clone())
            // etcd's default request limit is 1.5 MiB; leave room for YAML and patches.
            .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
            .wrap(authenticator.clone())
            // Reviews are answered by the same authorizer.
            .app_data(web::Data::new(authenticator.clone()))
            // Outside authentication: refused requests are recorded too.
            .wrap(audit.clone())
            // Every request is described once, before authentication reads it.
            .wrap(actix_web::middleware::from_fn(request::describe))
            .wrap(actix_web::middleware::from_fn(connections::overflow_lane))
            // The console's shell and assets, before authentication (they hold no data).
            .wrap(actix_web::middleware::from_fn(console::shell))
            // Karmada's proxy paths made plain before any layer reads the path.
            .wrap(actix_web::middleware::from_fn(karmada_path::strip))
            .route("/healthz", web::get().to(health::healthz))
            .route("/livez", web::get().to(health::healthz))
            .route("/readyz", web::get().to(health::readyz))
            .route("/metrics", web::get().to(health::metrics))
            .app_data(estimator_table.clone())
            .configure(estimators::configure)
            .configure(admin::configure)
            .configure(console::configure)
            .default_service(web::to(dispatch))
    };
    let on_connect: kubefold_listen::OnConnect = Arc::new(move |connection, data| {
        auth::on_connect(connection, data);
        limit_stalls(connection, stall_timeout);
        let open = open_connections.open();
        // A connection of the overflow lane serves no watch: it goes
        // without the second descriptor.
        if !open.overflow {
            if let Some(tcp) = tcp_of(connection) {
                if let Some(socket) = watch::ConnectionSocket::of(tcp) {
                    data.insert(socket);
                }
            }
        }
        data.insert(open);
    });
    // A client that connects and never sends its ClientHello holds a
    // pending handshake until the timeout; at most `maxPendingHandshakes`
    // are pending at once (per worker, its share), beyond which accept
    // waits, while established connections are served as ever.
    let tls = match (tls, &config.tls) {
        (Some(tls), Some(t)) => {
            actix_tls::accept::max_concurrent_tls_connect(t.max_pending_handshakes.div_ceil(workers).max(1));
            Some((tls, Duration::from_secs(t.handshake_timeout_seconds.max(1))))
        }
        _ => None,
    };
    let options = kubefold_listen::Options {
        // An idle kept-alive connection stays open 90 s, as kube-apiserver's
        // (k8s.io/apiserver/pkg/server/secure_serving.go: `IdleTimeout: 90 *
        // time.Second`, matching the keep-alive of Go's http.DefaultTransport
        // and so client-go's). actix's default of 5 s closed connections that
        // clients still held as reusable: a request sent on one as it closed
        // failed before reaching kubefold.
        keep_alive: Some(Duration::from_secs(IDLE_CONNECTION_SECS)),
        // Small writes (a watch event, the end of a streamed list) go out at
        // once rather than waiting for the client's delayed ACK (up to 40 ms on
        // Linux), as Go's net/http, and so kube-apiserver, does for every TCP
        // connection (`net.TCPConn.SetNoDelay` defaults to true).
        tcp_nodelay: true,
        // A long list is sent in chunks of a few hundred KB, each copied into
        // the connection's write buffer. actix fills that buffer with chunks
        // until it holds this many bytes, and replaces a buffer grown past this
        // size (floor 128 KiB) with a new one once written out: at the default
        // every chunk went to fresh memory, and the copy cost more than the
        // socket write. At 1 MiB the buffer is mostly reused (100k pods, lists
        // alternating: 203 vs 251 ms median, CPU 270 vs 330 ms). It is also
        // what a slow client can hold here beyond its watch's queue, so it is
        // not larger: 4 MiB kept the buffer through a whole list (168.7 vs
        // 178.8 ms median, 15 lists each) but let every slow watcher hold 4 MiB.
        // An idle connection keeps at most this much.
        h1_write_buffer_size: Some(1 << 20),
        // kubefold's own clients keep HTTP/1.1 for now: its watch
        // streaming and upgrades are built and measured on it.
        http2: false,
        tls,
        on_connect: Some(on_connect),
    };
    let listener = match listener {
        Some(listener) => listener,
        None => starting::bind(config.listen)?,
    };
    let addrs = vec![listener.local_addr().map_err(ServerError::Bind)?];
    // The listener of kubefold-listen: HttpServer's, over connections that
    // let SPDY/3.1 upgrades (kubectl 1.27 to 1.30 streams) reach
    // `stream_proxy` as WebSocket ones do.
    let builder = kubefold_listen::Server::build()
        .workers(workers)
        // Accept stops once the connections that fit the descriptors are open
        // (per worker; see `connections`).
        .max_concurrent_connections(limits.total.div_ceil(workers))
        .shutdown_timeout(2);
    let http = kubefold_listen::listen(builder, listener, options, app).map_err(ServerError::Bind)?;
    Ok((http.run(), addrs))
}

/// Closes a connection whose client stops taking bytes (its receive window
/// stays closed) or stops acknowledging them for `timeout`: the kernel's
/// `TCP_USER_TIMEOUT`, which covers both ("or buffered data may remain
/// untransmitted (due to zero window size)", tcp(7)). actix-http has no
/// write timeout, so without it a client that stops reading keeps its
/// response forever: a list's snapshot pinned against compaction, a Table
/// or gzip list's producer threads, actix's write buffer. kube-apiserver ends such a list
/// at its request timeout (`--request-timeout`, 1 minute) and closes a
/// watch whose client stops reading once the watch's buffer is full; here a
/// client that reads, however slowly, is never cut.
fn limit_stalls(connection: &dyn std::any::Any, timeout: Option<Duration>) {
    let Some(timeout) = timeout else { return };
    let Some(tcp) = tcp_of(connection) else { return };
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(timeout)) {
        tracing::warn!(error = %e, "Cannot bound how long a client may stall its connection.");
    }
}

/// The TCP socket under an accepted connection, plain or TLS.
fn tcp_of(connection: &dyn std::any::Any) -> Option<&actix_web::rt::net::TcpStream> {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    match connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        Some(tcp) => Some(tcp),
        None => connection.downcast_ref::<Tls>().map(|tls| tls.get_ref().0),
    }
}

#[cfg(test)]
mod tests {
    #[actix_web::test]
    async fn accepted_connections_are_closed_when_their_client_stalls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let timeout = |s: &tokio::net::TcpStream| socket2::SockRef::from(s).tcp_user_timeout().unwrap();
        assert_eq!(timeout(&accepted), None);
        super::limit_stalls(&accepted, None);
        assert_eq!(timeout(&accepted), None);
        super::limit_stalls(&accepted, Some(std::time::Duration::from_secs(7)));
        assert_eq!(timeout(&accepted), Some(std::time::Duration::from_secs(7)));
        // Another kind of connection is left alone.
        super::limit_stalls(&"not a socket", Some(std::time::Duration::from_secs(7)));
        assert_eq!(timeout(&client), None);
    }
}
