//! The audit log, as kube-apiserver writes it: each request the policy
//! ([`policy`]) records becomes `audit.k8s.io/v1` `Event`s, one JSON line
//! each ([`log`]), at the stages `RequestReceived`, `ResponseStarted` (for
//! long-running requests) and `ResponseComplete`, with who (the
//! authenticated user and the one impersonated), what (verb, URI, object
//! reference and the member cluster as the `kubefold.io/cluster`
//! annotation), the answer's code and, at the `Request` and
//! `RequestResponse` levels, the request's and response's objects. Secret
//! contents and tokens are never written ([`log::redact`]).
//!
//! [`Audit`] is an actix-web middleware outside authentication: it sees
//! requests refused there too, and reads who a request was from the
//! extensions authentication left.

pub mod log;
pub mod policy;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{BodySize, BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::HttpMessage;
use futures::future::{ready, LocalBoxFuture, Ready};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub use log::{redact, LogFile};
pub use policy::{Level, Policy, PolicyError, Stage};

use crate::auth::User;
use crate::request::RequestInfo;

/// The annotation of an event naming the member cluster the request acted on.
pub const CLUSTER_ANNOTATION: &str = "kubefold.io/cluster";

/// Request bodies larger than this are not recorded (the event says nothing of them).
const MAX_RECORDED_BODY: usize = 1 << 20;
/// Response bodies larger than this (or of unknown size) are not recorded.
const MAX_RECORDED_RESPONSE: u64 = 4 << 20;

/// Audit settings (`audit:` in the config file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditConfig {
    /// The audit log file (`--audit-log-path`); unset: no audit log.
    #[serde(default)]
    pub log_path: Option<PathBuf>,
    /// kube-apiserver's audit policy file, `audit.k8s.io/v1` `Policy`
    /// (`--audit-policy-file`). Unset: every request at `Metadata`.
    #[serde(default)]
    pub policy_file: Option<PathBuf>,
    /// Megabytes the log grows to before it is rotated
    /// (`--audit-log-maxsize`); 0: never rotated.
    #[serde(default)]
    pub log_max_size: u64,
    /// Rotated files kept (`--audit-log-maxbackup`); 0: all.
    #[serde(default)]
    pub log_max_backup: usize,
}

/// Who a request was really from, when it impersonated another user (put in
/// the request extensions by authentication; the impersonated [`User`] is
/// there too).
#[derive(Debug, Clone)]
pub struct Impersonator(pub User);

/// The member a request acted on, when the handler chose it (a create
/// placed by a rule, an edit of a qualified name); put in the request
/// extensions for the audit log.
#[derive(Debug, Clone)]
pub struct ActedOn(pub String);

#[derive(Debug)]
struct Inner {
    policy: Policy,
    log: LogFile,
    /// Whether any rule records bodies.
    records_bodies: bool,
}

/// The audit middleware; a no-op without `logPath`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    inner: Option<Arc<Inner>>,
}

/// Why the audit log cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy file is unusable.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The log file cannot be opened.
    #[error("cannot open audit log {path}: {source}")]
    LogUnwritable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Audit {
    /// Opens the log and reads the policy.
    pub fn from_config(config: &AuditConfig) -> Result<Audit, Error> {
        let Some(path) = &config.log_path else { return Ok(Audit::default()) };
        let policy = match &config.policy_file {
            Some(file) => Policy::read(file)?,
            None => Policy::metadata_for_all(),
        };
        let log = LogFile::open(path, config.log_max_size, config.log_max_backup)
            .map_err(|source| Error::LogUnwritable { path: path.clone(), source })?;
        tracing::info!(path = %path.display(), rules = policy.rules.len(), "Audit log enabled.");
        Ok(Audit { inner: Some(Arc::new(Inner { records_bodies: policy.highest_level() >= Level::Request, policy, log })) })
    }
}

impl<S, B> Transform<S, ServiceRequest> for Audit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B, BoxBody>>;
    type Error = actix_web::Error;
    type Transform = AuditMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(AuditMiddleware { service, audit: self.clone() }))
    }
}

/// The per-worker service of [`Audit`].
#[derive(Debug)]
pub struct AuditMiddleware<S> {
    service: S,
    audit: Audit,
}

/// What is known of a request when it arrives.
struct Received {
    audit_id: String,
    timestamp: chrono::DateTime<chrono::Utc>,
    uri: String,
    source_ip: Option<String>,
    user_agent: Option<String>,
    info: RequestInfo,
    /// The request body as read by the handler, when it may be recorded.
    body: Option<Rc<RefCell<Option<Vec<u8>>>>>,
}

impl<S, B> Service<ServiceRequest> for AuditMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B, BoxBody>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, mut req: ServiceRequest) -> Self::Future {
        let Some(inner) = self.audit.inner.clone() else {
            let response = self.service.call(req);
            return Box::pin(async move { Ok(response.await?.map_into_left_body()) });
        };
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let audit_id = header("Audit-ID").filter(|id| !id.is_empty() && id.len() <= 128).unwrap_or_else(new_audit_id);
        let user_agent = header("User-Agent");
        let info = RequestInfo::of(&req.extensions(), req.method(), req.path(), req.query_string());
        let edits = matches!(req.method().as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
        let body = (inner.records_bodies && edits).then(|| {
            let captured = Rc::new(RefCell::new(Some(Vec::new())));
            let into = captured.clone();
            let payload = req.take_payload().map(move |chunk| {
                if let Ok(bytes) = &chunk {
                    let mut held = into.borrow_mut();
                    let over = held.as_ref().is_some_and(|h| h.len() + bytes.len() > MAX_RECORDED_BODY);
                    match over {
                        true => *held = None,
                        false => {
                            if let Some(h) = held.as_mut() {
                                h.extend_from_slice(bytes)
                            }
                        }
                    }
                }
                chunk
            });
            let payload: std::pin::Pin<Box<dyn futures::Stream<Item = Result<bytes::Bytes, actix_web::error::PayloadError>>>> = Box::pin(payload);
            req.set_payload(Payload::from(payload));
            captured
        });
        let received = Received {
            audit_id,
            timestamp: chrono::Utc::now(),
            uri: match req.query_string() {
                "" => req.path().to_string(),
                q => format!("{}?{q}", req.path()),
            },
            source_ip: req.peer_addr().map(|a| a.ip().to_string()),
            user_agent,
            info,
            body,
        };
        let response = self.service.call(req);
        Box::pin(async move {
            let mut response = response.await?;
            if let Ok(value) = HeaderValue::from_str(&received.audit_id) {
                response.headers_mut().insert(HeaderName::from_static("audit-id"), value);
            }
            let (user, impersonator, cluster) = {
                let extensions = response.request().extensions();
                let cluster = extensions.get::<ActedOn>().map(|c| c.0.clone());
                (extensions.get::<User>().cloned(), extensions.get::<Impersonator>().map(|i| i.0.clone()), cluster)
            };
            // The policy sees the authenticated caller, as kube-apiserver's
            // (its audit filter runs before impersonation).
            let caller = impersonator.clone().or_else(|| user.clone());
            let no_user = User { name: String::new(), uid: String::new(), groups: Vec::new() };
            let (level, omitted) = inner.policy.level(caller.as_ref().unwrap_or(&no_user), &received.info);
            if level == Level::None {
                return Ok(response.map_into_left_body());
            }
            let cluster = cluster.or_else(|| received.info.member().map(str::to_string));
            let mut event = base_event(&received, level, caller.as_ref(), impersonator.as_ref().and(user.as_ref()), cluster.as_deref());
            if level >= Level::Request {
                if let Some(object) = received.body.as_ref().and_then(|b| b.borrow().as_deref().and_then(|b| serde_json::from_slice::<Value>(b).ok())) {
                    let mut object = object;
                    redact(&mut object, &received.info.resource);
                    event["requestObject"] = object;
                }
            }
            let received_omitted = omitted.contains(&Stage::RequestReceived);
            let write = {
                let inner = inner.clone();
                move |event: &mut Value, stage: Stage| {
                    if !omitted.contains(&stage) {
                        event["stage"] = json!(stage);
                        event["stageTimestamp"] = json!(timestamp(chrono::Utc::now()));
                        inner.log.append(event);
                        metrics::counter!("kubefold_audit_events_total", "stage" => stage_name(stage)).increment(1);
                    }
                }
            };
            if !received_omitted {
                let mut first = event.clone();
                first["stage"] = json!(Stage::RequestReceived);
                first["stageTimestamp"] = json!(timestamp(received.timestamp));
                for field in ["requestObject"] {
                    first.as_object_mut().map(|o| o.remove(field));
                }
                inner.log.append(&first);
                metrics::counter!("kubefold_audit_events_total", "stage" => "RequestReceived").increment(1);
            }
            let code = response.status().as_u16();
            event["responseStatus"] = json!({"metadata": {}, "code": code});
            let long_running = crate::auth::is_long_running(&received.info);
            if long_running {
                write(&mut event, Stage::ResponseStarted);
            }
            let json_response = response
                .headers()
                .get(actix_web::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/json"));
            let record_response = level == Level::RequestResponse && !long_running && json_response;
            let resource = received.info.resource.clone();
            // The last stage is written when the body has been sent (or dropped).
            let on_end: Box<dyn FnOnce(Option<Vec<u8>>)> = Box::new(move |body| {
                if let Some(mut object) = body.and_then(|b| serde_json::from_slice::<Value>(&b).ok()) {
                    redact(&mut object, &resource);
                    event["responseObject"] = object;
                }
                write(&mut event, Stage::ResponseComplete)
            });
            let recorded = record_response.then(Vec::new);
            Ok(response.map_body(|_, body| BoxBody::new(Finished { body: BoxBody::new(body), recorded, ended: false, on_end: Some(on_end) })).map_into_right_body())
        })
    }
}

/// A response body that calls `on_end` when it is dropped: after its last
/// byte was written, or when the client went away. With `recorded`, it
/// keeps a copy of the body (up to a limit) and hands it to `on_end` if the
/// body was sent in full.
struct Finished {
    body: BoxBody,
    recorded: Option<Vec<u8>>,
    ended: bool,
    on_end: Option<Box<dyn FnOnce(Option<Vec<u8>>)>>,
}

impl MessageBody for Finished {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<bytes::Bytes, Self::Error>>> {
        let this = &mut *self;
        let next = std::pin::Pin::new(&mut this.body).poll_next(cx);
        match &next {
            std::task::Poll::Ready(Some(Ok(chunk))) => {
                if this.recorded.as_ref().is_some_and(|r| (r.len() + chunk.len()) as u64 > MAX_RECORDED_RESPONSE) {
                    this.recorded = None;
                }
                if let Some(recorded) = this.recorded.as_mut() {
                    recorded.extend_from_slice(chunk);
                }
            }
            std::task::Poll::Ready(None) => this.ended = true,
            _ => {}
        }
        next
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        if let Some(on_end) = self.on_end.take() {
            on_end(self.recorded.take().filter(|_| self.ended));
        }
    }
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::RequestReceived => "RequestReceived",
        Stage::ResponseStarted => "ResponseStarted",
        Stage::ResponseComplete => "ResponseComplete",
        Stage::Panic => "Panic",
    }
}

/// A random UUID (version 4), as kube-apiserver's audit IDs.
fn new_audit_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// RFC 3339 with microseconds, as audit events carry (`MicroTime`).
fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn user_info(user: &User) -> Value {
    let mut info = Map::new();
    info.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        info.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), json!(user.groups));
    }
    Value::Object(info)
}

/// The fields every event of a request shares.
fn base_event(received: &Received, level: Level, user: Option<&User>, impersonated: Option<&User>, cluster: Option<&str>) -> Value {
    let info = &received.info;
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": level,
        "auditID": received.audit_id,
        "requestURI": received.uri,
        "verb": info.verb,
        "user": user.map_or_else(|| json!({}), user_info),
        "sourceIPs": received.source_ip.iter().collect::<Vec<_>>(),
        "requestReceivedTimestamp": timestamp(received.timestamp),
    });
    if let Some(impersonated) = impersonated {
        event["impersonatedUser"] = user_info(impersonated);
    }
    if let Some(agent) = &received.user_agent {
        event["userAgent"] = json!(agent);
    }
    if info.is_resource_request {
        let mut object = Map::new();
        object.insert("resource".into(), json!(info.resource));
        for (field, value) in [("namespace", &info.namespace), ("name", &info.name), ("subresource", &info.subresource)] {
            if let Some(value) = value {
                object.insert(field.into(), json!(value));
            }
        }
        if !info.api_group.is_empty() {
            object.insert("apiGroup".into(), json!(info.api_group));
        }
        object.insert("apiVersion".into(), json!(info.api_version));
        event["objectRef"] = Value::Object(object);
    }
    if let Some(cluster) = cluster {
        event["annotations"] = json!({ CLUSTER_ANNOTATION: cluster });
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::{test as web_test, web, App, HttpResponse};

    fn lines(path: &std::path::Path) -> Vec<Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[actix_web::test]
    async fn an_edit_is_recorded_at_its_stages_with_its_objects_and_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  verbs: [get]\n- level: RequestResponse\n").unwrap();
        let path = dir.path().join("audit.log");
        let audit = Audit::from_config(&AuditConfig { log_path: Some(path.clone()), policy_file: Some(policy), ..AuditConfig::default() }).unwrap();
        let app = web_test::init_service(
            App::new()
                .wrap_fn(|req, srv| {
                    req.extensions_mut().insert(User { name: "alice".into(), uid: "1".into(), groups: vec!["system:authenticated".into()] });
                    req.extensions_mut().insert(Impersonator(User { name: "admin".into(), uid: String::new(), groups: vec!["kubefold:admins".into()] }));
                    req.extensions_mut().insert(ActedOn("member1".into()));
                    srv.call(req)
                })
                .wrap(audit)
                .default_service(web::to(|body: web::Bytes| async move {
                    let mut object: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
                    object["metadata"]["uid"] = json!("u1");
                    HttpResponse::Created().content_type("application/json").body(object.to_string())
                })),
        )
        .await;
        let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}});
        let req = web_test::TestRequest::post().uri("/api/v1/namespaces/ns/secrets?fieldManager=x").insert_header(("Audit-ID", "id-1")).set_json(&secret).to_request();
        let response = web_test::call_service(&app, req).await;
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers().get("audit-id").unwrap(), "id-1");
        let answer: Value = web_test::read_body_json(response).await;
        assert_eq!(answer["data"]["password"], "aHVudGVyMg==", "the client still gets its answer");
        let got = web_test::call_service(&app, web_test::TestRequest::get().uri("/api/v1/namespaces/ns/secrets/s").to_request()).await;
        drop(web_test::read_body(got).await);
        let events = lines(&path);
        assert_eq!(events.len(), 2, "RequestReceived and ResponseComplete of the create, nothing of the get: {events:?}");
        let (first, last) = (&events[0], &events[1]);
        assert_eq!((first["stage"].as_str(), last["stage"].as_str()), (Some("RequestReceived"), Some("ResponseComplete")));
        assert_eq!(last["auditID"], "id-1");
        assert_eq!(last["verb"], "create");
        assert_eq!(last["requestURI"], "/api/v1/namespaces/ns/secrets?fieldManager=x");
        assert_eq!(last["user"]["username"], "admin");
        assert_eq!(last["impersonatedUser"]["username"], "alice");
        assert_eq!(last["objectRef"], json!({"resource": "secrets", "namespace": "ns", "apiVersion": "v1"}));
        assert_eq!(last["annotations"][CLUSTER_ANNOTATION], "member1");
        assert_eq!(last["responseStatus"]["code"], 201);
        assert_eq!(last["requestObject"]["metadata"]["name"], "s");
        assert_eq!(last["responseObject"]["metadata"]["uid"], "u1");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("aHVudGVyMg==") && !text.contains("password"), "secret data in the audit log: {text}");
    }

    #[actix_web::test]
    async fn a_watch_is_recorded_when_it_starts_and_when_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let audit = Audit::from_config(&AuditConfig { log_path: Some(path.clone()), ..AuditConfig::default() }).unwrap();
        let app = web_test::init_service(App::new().wrap(audit).default_service(web::to(|| async {
            HttpResponse::Ok().content_type("application/json").streaming(futures::stream::iter([Ok::<_, actix_web::Error>(bytes::Bytes::from_static(b"{}\n"))]))
        })))
        .await;
        let response = web_test::call_service(&app, web_test::TestRequest::get().uri("/api/v1/pods?watch=true").to_request()).await;
        let stages = |path: &std::path::Path| lines(path).iter().map(|e| e["stage"].as_str().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(stages(&path), ["RequestReceived", "ResponseStarted"], "the watch's response has started");
        drop(web_test::read_body(response).await);
        assert_eq!(stages(&path), ["RequestReceived", "ResponseStarted", "ResponseComplete"]);
        let last = &lines(&path)[2];
        assert_eq!((last["verb"].as_str(), last["level"].as_str(), last["user"].clone()), (Some("watch"), Some("Metadata"), json!({})));
        assert!(last.get("responseObject").is_none());
    }

    #[test]
    fn audit_ids_are_uuids() {
        let id = new_audit_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_audit_id());
    }
}
