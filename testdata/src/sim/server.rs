//! The HTTP layer: every request is recorded in the request log, parsed
//! into a [`Route`] and translated to a discovery document, a read of the
//! store (get, list, watch, logs) or a write verb of [`ops`]; errors become
//! `Status` responses. No Kubernetes rule lives here. The [`faults`] in force
//! are applied here: before a request, to list bodies and to watch bodies.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::Method;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use bytes::{Bytes, BytesMut};
use chrono::Utc;
use futures::StreamExt;
use kubefold_engine::resources::ResourceType;
use serde_json::Value;

use super::access;
use super::audit;
use super::discovery;
use super::faults::{self, Faults};
use super::list::{self, parse_bool, parse_rv, query_value, ListOptions, RvMatch};
use super::logs;
use super::protobuf;
use super::reviews;
use super::ops::{self, DeleteOptions, Subresource, WriteOptions, Written};
use super::patch::PatchType;
use super::path::{self, ResourcePath, Route};
use super::status::{ApiError, Result};
use super::store;
use super::table::{self, TableFormat};
use super::watch::{self, WatchFilter};
use super::{RequestRecord, Shared};

/// kube-apiserver's limit on request bodies (`MaxRequestBodyBytes`, 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// The request log keeps at most this many records; beyond it the oldest
/// tenth is dropped (long benchmarks must not grow it without bound).
pub const REQUEST_LOG_LIMIT: usize = 100_000;

/// How long a read waits for a resource version the simulator has not reached.
const RV_WAIT: Duration = Duration::from_secs(3);

/// The one handler of the simulator's HTTP server: with an access policy
/// or an audit log, each request is admitted ([`access`]) and recorded
/// ([`audit`]) around [`serve`].
pub async fn dispatch(req: HttpRequest, payload: web::Payload, shared: web::Data<Arc<Shared>>) -> HttpResponse {
    serve_member(req, payload, shared.get_ref().clone()).await
}

/// Answers a request to the member `shared` (a fleet's server picks the
/// member by the address the request came in on): admitted and recorded
/// as [`dispatch`] says, then served.
pub async fn serve_member(req: HttpRequest, payload: web::Payload, shared: Arc<Shared>) -> HttpResponse {
    if req.path().starts_with("/sim/") || (shared.policy.is_none() && shared.audit.is_none()) {
        return serve(req, payload, shared).await;
    }
    let received = Utc::now();
    let admitted = match &shared.policy {
        Some(policy) => policy.admit(req.headers(), req.method(), req.path(), req.query_string()),
        // Every request is allowed; the audit log still names the user
        // a request impersonates.
        None => Ok(access::Identity { user: access::UserInfo::anonymous(), impersonated: access::impersonation(req.headers()).ok().flatten() }),
    };
    let (identity, response) = match admitted {
        Ok(identity) => {
            req.extensions_mut().insert(identity.clone());
            (Some(identity), serve(req.clone(), payload, shared.clone()).await)
        }
        Err(access::Refusal::Unauthorized) => {
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
            (None, json(401, status.to_string()))
        }
        Err(access::Refusal::BadRequest(message)) => (None, ApiError::BadRequest(message).error_response()),
        Err(access::Refusal::Forbidden(identity, error)) => {
            tracing::debug!(user = %identity.effective().username, path = %req.path(), %error, "Request forbidden.");
            (Some(identity), error.error_response())
        }
    };
    if let Some(log) = &shared.audit {
        let query = req.query_string();
        let attributes = access::Attributes::of(req.method(), req.path(), query);
        let long_running = attributes.as_ref().is_some_and(|a| a.verb == "watch" || matches!(a.subresource.as_deref(), Some("exec" | "attach" | "portforward")))
            || (req.path().ends_with("/log") && query.contains("follow=true"));
        let agent = req.headers().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
        log.record(&audit::Entry {
            identity: identity.as_ref(),
            method: req.method(),
            path: req.path(),
            query,
            source_ip: req.peer_addr().map(|a| a.ip().to_string()),
            user_agent: agent,
            code: response.status().as_u16(),
            long_running,
            received,
        });
    }
    response
}

/// Serves an admitted request.
async fn serve(req: HttpRequest, payload: web::Payload, shared: Arc<Shared>) -> HttpResponse {
    let query_string = req.query_string().to_string();
    let pairs: Vec<(String, String)> = web::Query::<Vec<(String, String)>>::from_query(&query_string)
        .map(|q| q.into_inner())
        .unwrap_or_default();
    let watch = req.path().contains("/watch/")
        || query_value(&pairs, "watch").is_some_and(|w| parse_bool("watch", w).unwrap_or(false));
    let own = req.path().starts_with("/sim/");
    if let Some(target) = super::exec::target(req.path()) {
        return super::exec::serve(req, payload, shared, target).await;
    }
    // The body of a write is read here so that the log can show it (a
    // DeleteOptions, a patch); reads and the simulator's own endpoints
    // stream theirs.
    let mut payload = RequestBody::Pending(payload);
    let mut logged_body = String::new();
    if !own && !matches!(*req.method(), Method::GET | Method::HEAD) {
        let body = match payload.read().await {
            Ok(body) => body,
            Err(error) => return error.error_response(),
        };
        logged_body = String::from_utf8_lossy(&body).into_owned();
        payload = RequestBody::Read(body);
    }
    let record = RequestRecord {
        method: req.method().to_string(),
        path: req.path().to_string(),
        query: query_string,
        watch,
        elapsed_ms: shared.started.elapsed().as_millis() as u64,
        body: logged_body,
    };
    tracing::trace!(method = %record.method, path = %record.path, query = %record.query, "Request.");
    if !own {
        if shared.config.fleet_member {
            // A fleet's members keep no log: a thousand of them would hold it a thousand times.
        } else if let Ok(mut log) = shared.requests.lock() {
            if log.len() >= REQUEST_LOG_LIMIT {
                log.drain(..REQUEST_LOG_LIMIT / 10);
            }
            log.push(record);
        }
        if shared.faults.active() {
            if let Some(answer) = faults::before_request(&shared.faults).await {
                return answer;
            }
        }
    }
    match handle(&req, payload, shared).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(method = %req.method(), path = %req.path(), code = error.code(), %error, "Request failed.");
            error.error_response()
        }
    }
}

fn json(code: u16, body: impl Into<Bytes>) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(code).unwrap_or(actix_web::http::StatusCode::OK);
    HttpResponse::build(status).content_type("application/json").body(body.into())
}

fn json_value(value: &Value) -> HttpResponse {
    json(200, value.to_string())
}

/// The Table format of a request, when its Accept header asks for Tables.
fn table_format(req: &HttpRequest, resource: &kubefold_engine::resources::ResourceType, query: &[(String, String)]) -> Result<Option<TableFormat>> {
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if table::requested(accept) {
        TableFormat::new(resource, query).map(Some)
    } else {
        Ok(None)
    }
}

fn written(req: &HttpRequest, w: Written) -> HttpResponse {
    protobuf::object_response(req, w.code, w.body)
}

fn get_only(method: &Method, response: impl FnOnce() -> Result<HttpResponse>) -> Result<HttpResponse> {
    if method == Method::GET || method == Method::HEAD {
        response()
    } else {
        Err(ApiError::MethodNotAllowed)
    }
}

/// A request body: still arriving, or already read (and logged).
enum RequestBody {
    /// Not read yet.
    Pending(web::Payload),
    /// Read in full.
    Read(Bytes),
}

impl RequestBody {
    /// The whole body, within kube-apiserver's size limit.
    async fn read(&mut self) -> Result<Bytes> {
        let payload = match self {
            RequestBody::Read(body) => return Ok(body.clone()),
            RequestBody::Pending(payload) => payload,
        };
        let mut body = BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
            if body.len() + chunk.len() > MAX_BODY {
                return Err(ApiError::RequestEntityTooLarge(MAX_BODY));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }
}

async fn read_body(mut payload: RequestBody) -> Result<Bytes> {
    payload.read().await
}

fn content_type(req: &HttpRequest) -> String {
    req.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// Decodes a create or update body (JSON, YAML with a YAML content type,
/// protobuf for built-in types).
fn decode_object(req: &HttpRequest, rt: &ResourceType, subresource: Option<&str>, body: &[u8]) -> Result<Value> {
    let media = content_type(req);
    if media.starts_with("application/yaml") {
        return serde_saphyr::from_slice(body).map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")));
    }
    if kubefold_proto::is_protobuf(&media) {
        return protobuf::decode(rt, subresource, body);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}")))
}

/// Write options from the query, the default manager from the User-Agent
/// (its product name, as kube-apiserver's `prefixFromUserAgent`).
fn write_options(req: &HttpRequest, query: &[(String, String)]) -> Result<WriteOptions> {
    let mut opts = WriteOptions::from_query(query, shared_now(req))?;
    let agent = req.headers().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let product = agent.split('/').next().unwrap_or_default().trim();
    if !product.is_empty() {
        opts.default_manager = product.chars().take(128).collect();
    }
    Ok(opts)
}

/// The member's clock (the clock skew fault moves it).
fn shared_now(req: &HttpRequest) -> chrono::DateTime<Utc> {
    if let Some(shared) = req.app_data::<web::Data<Arc<Shared>>>() {
        return shared.now();
    }
    // A fleet's member, which its server put into the request.
    req.extensions().get::<Arc<Shared>>().map_or_else(Utc::now, |shared| shared.now())
}

/// Waits until the store reaches `rv`, or 504 after 3 seconds (the watch
/// cache's `waitUntilFreshAndBlock`).
async fn wait_for_rv(shared: &Shared, rv: u64) -> Result<()> {
    let mut head = shared.read()?.head();
    if *head.borrow() >= rv {
        return Ok(());
    }
    let reached = matches!(tokio::time::timeout(RV_WAIT, head.wait_for(|h| *h >= rv)).await, Ok(Ok(_)));
    if reached {
        Ok(())
    } else {
        let current = *head.borrow();
        Err(ApiError::TooLargeResourceVersion { requested: rv, current })
    }
}

async fn handle(req: &HttpRequest, payload: RequestBody, shared: Arc<Shared>) -> Result<HttpResponse> {
    let query: Vec<(String, String)> = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::BadRequest(format!("invalid query: {e}")))?;
    let method = req.method().clone();
    let catalog = shared.catalog();
    if !req.path().starts_with("/sim/") {
        protobuf::refuse_cbor(req)?;
    }
    if let Some(route) = super::metrics::route(req.path()) {
        let store = shared.read()?;
        return super::metrics::serve(&method, &store, route, &query, shared.now());
    }
    match path::parse(req.path()) {
        Route::Root => get_only(&method, || Ok(json_value(&discovery::root_paths(&catalog)))),
        Route::Version => get_only(&method, || Ok(json_value(&discovery::version(&shared.config.git_version)))),
        Route::CoreVersions => {
            let server = req.app_config().local_addr();
            get_only(&method, || Ok(json_value(&discovery::core_versions(server))))
        }
        Route::GroupList => get_only(&method, || {
            let mut groups = discovery::group_list(&catalog);
            if let Some(list) = groups["groups"].as_array_mut() {
                list.push(super::metrics::group_entry());
            }
            Ok(json_value(&groups))
        }),
        Route::Group(group) => get_only(&method, || {
            discovery::group(&catalog, &group).map(|g| json_value(&g)).ok_or(ApiError::PathNotFound)
        }),
        Route::ResourceList { group, version } => get_only(&method, || {
            discovery::resource_list(&catalog, &group, &version).map(|l| json_value(&l)).ok_or(ApiError::PathNotFound)
        }),
        Route::Health => get_only(&method, || Ok(HttpResponse::Ok().content_type("text/plain; charset=utf-8").body("ok"))),
        Route::RequestLog => request_log(&method, &shared),
        Route::Faults => faults_endpoint(&method, payload, &shared).await,
        Route::Churn => churn_endpoint(&method, payload, &shared).await,
        Route::Restore => restore_endpoint(&method, payload, &shared).await,
        Route::Burst => burst_endpoint(&method, payload, shared).await,
        // kubectl's `explain` and its default `--validate=strict` read these
        // (up to 1.29 /openapi/v2 in protobuf only); see `super::openapi`.
        Route::OpenApiV2 => {
            let accept = req.headers().get(actix_web::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
            if method == Method::GET && accept.contains("protobuf") && !accept.contains("json") {
                let info = kubefold_engine::openapi::Info { title: "Kubernetes", version: &shared.config.git_version };
                return Ok(HttpResponse::Ok()
                    .content_type("application/octet-stream")
                    .body(kubefold_engine::openapi::openapi_v2_protobuf(info)));
            }
            get_only(&method, || Ok(json_value(&super::openapi::v2(&shared)?)))
        }
        Route::OpenApiV3Index => get_only(&method, || Ok(json_value(&super::openapi::v3_index(&shared)?))),
        Route::OpenApiV3 { group, version } => get_only(&method, || {
            super::openapi::v3(&shared, &group, &version)?.map(|d| json_value(&d)).ok_or(ApiError::PathNotFound)
        }),
        Route::NotFound => Err(ApiError::PathNotFound),
        Route::Resource(path) => resource(req, payload, shared, path, query).await,
    }
}

fn request_log(method: &Method, shared: &Shared) -> Result<HttpResponse> {
    let mut log = shared.requests.lock().map_err(|_| ApiError::Internal("request log poisoned".into()))?;
    match *method {
        Method::GET => Ok(json(200, serde_json::to_vec(&*log).unwrap_or_default())),
        Method::DELETE => {
            log.clear();
            Ok(json(200, "[]"))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// A JSON body of a `/sim/*` endpoint (empty: `{}`).
async fn admin_body<T: serde::de::DeserializeOwned>(payload: RequestBody) -> Result<T> {
    let body = read_body(payload).await?;
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &body };
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid body: {e}")))
}

/// `GET`/`PUT /sim/faults`.
async fn faults_endpoint(method: &Method, payload: RequestBody, shared: &Shared) -> Result<HttpResponse> {
    match *method {
        Method::GET => Ok(json_value(&serde_json::to_value(shared.faults.faults()).unwrap_or_default())),
        Method::PUT => {
            let faults: Faults = admin_body(payload).await?;
            faults.validate().map_err(ApiError::BadRequest)?;
            if shared.config.fleet_member && faults.offline.is_some() {
                return Err(ApiError::BadRequest(
                    "the offline fault needs a simulator of its own (kubefold sim without --clusters): a fleet's members share one server".into(),
                ));
            }
            tracing::info!(cluster = %shared.config.name, faults = %serde_json::to_string(&faults).unwrap_or_default(), "Faults set.");
            shared.faults.replace(faults.clone());
            Ok(json_value(&serde_json::to_value(faults).unwrap_or_default()))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// The body of `PUT /sim/churn`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ChurnRate {
    per_second: f64,
}

/// `GET`/`PUT /sim/churn`.
async fn churn_endpoint(method: &Method, payload: RequestBody, shared: &Shared) -> Result<HttpResponse> {
    match *method {
        Method::GET => Ok(json_value(&serde_json::json!({"perSecond": *shared.churn_rate.borrow()}))),
        Method::PUT => {
            let rate: ChurnRate = admin_body(payload).await?;
            if !rate.per_second.is_finite() || rate.per_second < 0.0 {
                return Err(ApiError::BadRequest(format!("perSecond must be 0 or more, not {}", rate.per_second)));
            }
            shared.churn_rate.send_replace(rate.per_second);
            Ok(json_value(&serde_json::json!({"perSecond": rate.per_second})))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// The body of `POST /sim/restore`.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
struct Restore {
    /// The first resource version of the restored objects.
    resource_version: Option<u64>,
}

/// `POST /sim/restore`.
async fn restore_endpoint(method: &Method, payload: RequestBody, shared: &Shared) -> Result<HttpResponse> {
    if *method != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let restore: Restore = admin_body(payload).await?;
    let (before, after) = super::restore(shared, restore.resource_version);
    Ok(json_value(&serde_json::json!({"before": before.to_string(), "after": after.to_string()})))
}

/// The body of `POST /sim/burst`.
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
#[derive(Default)]
struct Burst {
    /// Pods to create.
    pods: usize,
    /// Small ConfigMaps to create.
    config_maps: usize,
}

/// `POST /sim/burst`.
async fn burst_endpoint(method: &Method, payload: RequestBody, shared: Arc<Shared>) -> Result<HttpResponse> {
    if *method != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let burst: Burst = admin_body(payload).await?;
    let rv = web::block(move || {
        let rv = super::churn::burst(&shared, burst.pods);
        if burst.config_maps > 0 {
            super::churn::burst_config_maps(&shared, burst.config_maps)
        } else {
            rv
        }
    })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json_value(&serde_json::json!({"resourceVersion": rv.to_string()})))
}

/// A resource request; a write of a CustomResourceDefinition then serves
/// the types it defines ([`super::crds`]).
async fn resource(
    req: &HttpRequest,
    payload: RequestBody,
    shared: Arc<Shared>,
    path: ResourcePath,
    query: Vec<(String, String)>,
) -> Result<HttpResponse> {
    let definition = path.group == super::crds::GROUP && path.plural == "customresourcedefinitions" && !matches!(*req.method(), Method::GET | Method::HEAD);
    let response = resource_request(req, payload, shared.clone(), path, query).await?;
    if definition && response.status().is_success() {
        super::crds::sync(&mut *shared.write()?);
    }
    Ok(response)
}

async fn resource_request(
    req: &HttpRequest,
    payload: RequestBody,
    shared: Arc<Shared>,
    path: ResourcePath,
    query: Vec<(String, String)>,
) -> Result<HttpResponse> {
    let Some(index) = shared.catalog().iter().position(|r| r.group == path.group && r.version == path.version && r.plural == path.plural)
    else {
        return Err(ApiError::PathNotFound);
    };
    let rt = shared.catalog()[index].clone();
    if path.namespace.is_some() && !rt.namespaced {
        return Err(ApiError::PathNotFound);
    }
    let namespace = path.namespace.as_deref();
    let method = req.method().clone();
    let watch = path.watch_prefix || parse_bool("watch", query_value(&query, "watch").unwrap_or_default())?;
    if reviews::is_review(&rt) {
        return match (&method, &path.name, &path.subresource) {
            (&Method::POST, None, None) if !path.watch_prefix => {
                let body = read_body(payload).await?;
                let mut review = reviews::answer(&rt, decode_object(req, &rt, None, &body)?)?;
                if let Some(policy) = &shared.policy {
                    reviews::decide(policy, req.extensions().get::<access::Identity>(), &rt, &mut review);
                }
                Ok(protobuf::object_response(req, 201, review.to_string().into()))
            }
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    let subresource = match path.subresource.as_deref() {
        None => None,
        Some(sub) if rt.subresources.iter().any(|s| s == sub) => Some(sub.to_string()),
        Some(_) => return Err(ApiError::PathNotFound),
    };
    let Some(name) = path.name.clone() else {
        // The collection.
        return match method {
            Method::GET if watch => start_watch(req, shared, index, namespace, None, &query).await,
            Method::GET => list_objects(req, shared, index, namespace, &query, path.watch_prefix).await,
            Method::POST if !path.watch_prefix => {
                if rt.namespaced && namespace.is_none() {
                    return Err(ApiError::MethodNotAllowed);
                }
                let body = read_body(payload).await?;
                let object = decode_object(req, &rt, None, &body)?;
                super::openapi::check_fields(&shared, &rt, &query, &object)?;
                let opts = write_options(req, &query)?;
                let mut store = shared.write()?;
                Ok(written(req, ops::create(&mut store, index, namespace, object, &opts)?))
            }
            Method::DELETE if !path.watch_prefix && discovery::verbs(&rt).contains(&"deletecollection") => {
                let body = protobuf::options_body(req, read_body(payload).await?)?;
                let selectors = ListOptions::parse(&query, false, &rt)?;
                let (options, dry_run) = DeleteOptions::parse(&body, &query)?;
                let mut opts = write_options(req, &query)?;
                opts.dry_run |= dry_run;
                let mut store = shared.write()?;
                Ok(written(req, ops::delete_collection(&mut store, index, namespace, &selectors, &options, &opts)?))
            }
            _ => Err(ApiError::MethodNotAllowed),
        };
    };
    if path.watch_prefix {
        // Deprecated /watch/.../{name}: a watch of one object.
        return match method {
            Method::GET => start_watch(req, shared, index, namespace, Some(&name), &query).await,
            _ => Err(ApiError::MethodNotAllowed),
        };
    }
    let sub = match subresource.as_deref() {
        None => Subresource::Main,
        Some("status") => Subresource::Status,
        Some("scale") => Subresource::Scale,
        Some("ephemeralcontainers") => Subresource::EphemeralContainers,
        Some("log") => {
            return match method {
                Method::GET => pod_log(shared, index, namespace, &name, &query),
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        Some(sub @ ("token" | "eviction")) => {
            if method != Method::POST {
                return Err(ApiError::MethodNotAllowed);
            }
            let body = read_body(payload).await?;
            let request = decode_object(req, &rt, Some(sub), &body)?;
            let namespace = namespace.unwrap_or_default();
            let answer = if sub == "token" {
                reviews::token(&*shared.read()?, index, namespace, &name, &request, shared.now())?
            } else {
                let opts = write_options(req, &query)?;
                reviews::evict(&mut *shared.write()?, index, namespace, &name, &request, &opts)?
            };
            return Ok(protobuf::object_response(req, 201, answer.to_string().into()));
        }
        Some(_) => return Err(ApiError::PathNotFound),
    };
    match method {
        Method::GET if watch => start_watch(req, shared, index, namespace, Some(&name), &query).await,
        Method::GET => {
            if let Some(rv) = query_value(&query, "resourceVersion").filter(|v| !v.is_empty() && *v != "0") {
                wait_for_rv(&shared, parse_rv(rv)?).await?;
            }
            let object = ops::get(&*shared.read()?, index, namespace, &name)?;
            if sub == Subresource::Scale {
                return Ok(protobuf::object_response(req, 200, ops::scale_of(&rt, &object.value())?.to_string().into()));
            }
            if let Some(format) = table_format(req, &rt, &query)? {
                let value = object.value();
                let metadata = serde_json::json!({"resourceVersion": value["metadata"]["resourceVersion"]});
                let table = format.table(&[value], metadata, true, Utc::now());
                return Ok(HttpResponse::Ok().content_type(table::CONTENT_TYPE).body(table.to_string()));
            }
            Ok(protobuf::object_response(req, 200, object.bytes()))
        }
        Method::PUT => {
            let body = read_body(payload).await?;
            let object = decode_object(req, &rt, subresource.as_deref(), &body)?;
            if sub != Subresource::Scale {
                super::openapi::check_fields(&shared, &rt, &query, &object)?;
            }
            let opts = write_options(req, &query)?;
            let mut store = shared.write()?;
            Ok(written(req, ops::update(&mut store, index, namespace, &name, object, sub, &opts)?))
        }
        Method::PATCH => {
            let patch_type = PatchType::from_content_type(&content_type(req))?;
            let body = read_body(payload).await?;
            if patch_type != PatchType::Json && sub != Subresource::Scale {
                if let Ok(patch) = serde_saphyr::from_slice::<Value>(&body) {
                    super::openapi::check_fields(&shared, &rt, &query, &patch)?;
                }
            }
            let opts = write_options(req, &query)?;
            if opts.force && patch_type != PatchType::Apply {
                return Err(ApiError::Invalid {
                    group: "meta.k8s.io".into(),
                    kind: "PatchOptions".into(),
                    name: String::new(),
                    causes: vec![super::status::Cause::forbidden("force", "may not be specified for non-apply patch")],
                });
            }
            let mut store = shared.write()?;
            Ok(written(req, ops::patch(&mut store, index, namespace, &name, patch_type, &body, sub, &opts)?))
        }
        Method::DELETE if sub == Subresource::Main => {
            let body = protobuf::options_body(req, read_body(payload).await?)?;
            let (options, dry_run) = DeleteOptions::parse(&body, &query)?;
            let mut opts = write_options(req, &query)?;
            opts.dry_run |= dry_run;
            let mut store = shared.write()?;
            Ok(written(req, ops::delete(&mut store, index, namespace, &name, &options, &opts)?))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

async fn list_objects(
    req: &HttpRequest,
    shared: Arc<Shared>,
    index: usize,
    namespace: Option<&str>,
    query: &[(String, String)],
    watch_prefix: bool,
) -> Result<HttpResponse> {
    let rt = shared.catalog()[index].clone();
    let options = ListOptions::parse(query, watch_prefix, &rt)?;
    if let Some(rv) = options.minimum_rv()? {
        wait_for_rv(&shared, rv).await?;
    }
    let page = {
        let store = shared.read()?;
        list::list(&store, index, namespace, &options)?
    };
    if let Some(format) = table_format(req, &rt, query)? {
        let mut metadata = serde_json::json!({"resourceVersion": page.rv.to_string()});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = serde_json::json!(token);
        }
        if let Some(count) = page.remaining_item_count {
            metadata["remainingItemCount"] = serde_json::json!(count);
        }
        let objects: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
        let table = format.table(&objects, metadata, true, Utc::now());
        return Ok(HttpResponse::Ok().content_type(table::CONTENT_TYPE).body(table.to_string()));
    }
    let body = faults::list_body(&shared.faults, faults::infallible(list::list_body(&rt, page)));
    if protobuf::preferred(req) && protobuf::built_in(&rt) {
        return protobuf::list_response(Box::pin(body)).await;
    }
    Ok(HttpResponse::Ok().content_type("application/json").streaming(body))
}

async fn start_watch(
    req: &HttpRequest,
    shared: Arc<Shared>,
    index: usize,
    namespace: Option<&str>,
    name: Option<&str>,
    query: &[(String, String)],
) -> Result<HttpResponse> {
    let rt = shared.catalog()[index].clone();
    let mut options = ListOptions::parse(query, true, &rt)?;
    if let Some(name) = name {
        let selector = format!("metadata.name={name}");
        let extra = super::selector::FieldSelector::parse(&selector).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        options.field_selector.terms.extend(extra.terms);
    }
    if options.send_initial_events == Some(true) && options.resource_version_match == Some(RvMatch::NotOlderThan) {
        if let Some(rv) = options.resource_version.as_deref().filter(|rv| *rv != "0") {
            wait_for_rv(&shared, parse_rv(rv)?).await?;
        }
    }
    if let Some(refused) = faults::refused_watch(&shared.faults, &options, shared.read()?.rv()) {
        return Ok(refused);
    }
    if shared.faults.active() && shared.faults.faults().ignore_send_initial_events {
        // kube-apiserver before 1.27: the parameters are unknown, the watch starts now with the state.
        options.send_initial_events = None;
        options.resource_version_match = None;
    }
    let streaming_list = options.send_initial_events == Some(true);
    let filter = WatchFilter { resource: index, prefix: store::prefix(namespace), options };
    let (start, receiver) = {
        let store = shared.read()?;
        watch::begin(&store, &filter)?
    };
    let interval = shared.config.bookmark_interval.max(Duration::from_millis(10));
    let format = table_format(req, &rt, query)?;
    let protobuf = format.is_none() && protobuf::preferred(req) && protobuf::built_in(&rt);
    let body = watch::stream(shared.clone(), &rt, filter, start, receiver, interval, format);
    let (body, content_type) = if protobuf {
        (protobuf::watch_frames(Box::pin(body)).left_stream(), kubefold_proto::WATCH_MEDIA_TYPE)
    } else {
        (body.right_stream(), "application/json")
    };
    let body = faults::watch_body(&shared.faults, body);
    let body = if streaming_list { faults::list_body(&shared.faults, body).left_stream() } else { body.right_stream() };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "no-cache, private"))
        .streaming(body))
}

fn pod_log(
    shared: Arc<Shared>,
    index: usize,
    namespace: Option<&str>,
    name: &str,
    query: &[(String, String)],
) -> Result<HttpResponse> {
    let options = logs::LogOptions::parse(query)?;
    let pod = {
        let store = shared.read()?;
        ops::get(&store, index, namespace, name)?.value()
    };
    let source = logs::source(&pod, &options)?;
    let key = store::key(namespace, name);
    let body = logs::stream(shared, index, key, source, options);
    Ok(HttpResponse::Ok().content_type("text/plain").streaming(body))
}
