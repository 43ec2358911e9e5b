//! Forwarding requests to member clusters: a kube client per member and per
//! HTTP worker thread (each worker has its own runtime), and raw request
//! forwarding that passes the member's answer back unchanged. A request
//! made for an authenticated caller ([`Caller`]) to a member that
//! impersonates ([`kubefold_actors::cluster::ClusterSpec::impersonates`])
//! goes with the member's impersonator credentials and the caller's
//! `Impersonate-*` headers, so that the member decides and records who
//! acted; its refusal (403) comes back unchanged.

use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpRequest};
use http::{HeaderMap, Method, Request};
use kube::client::Body;
use kubefold_actors::fleet::Fleet;
use kubefold_engine::status::Status;

use crate::impersonate::Caller;

/// Headers added to a member request.
pub type ExtraHeaders = Vec<(http::HeaderName, http::HeaderValue)>;

/// The caller a forwarded request acts as, when authentication is on.
pub fn caller(req: &HttpRequest) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

/// The client of `cluster` for a request of `caller`, and the headers it
/// must carry: the impersonating client and the caller's
/// `Impersonate-*` headers when the member impersonates and there is a
/// caller, else the member's shared client and none.
pub async fn client_as(fleet: &Fleet, cluster: &str, caller: Option<&Caller>) -> Result<(kube::Client, ExtraHeaders), Status> {
    let spec = fleet.member(cluster).ok_or_else(|| {
        Status::new(404, "NotFound", format!("cluster \"{cluster}\" is not a member of this kubefold"))
    })?;
    match caller.filter(|_| spec.impersonates()) {
        Some(caller) => {
            let headers = caller.headers()?;
            let client = spec.shared_impersonating_client().await.map_err(|e| unreachable(cluster, &e.to_string()))?;
            Ok((client, headers))
        }
        None => Ok((spec.shared_client().await.map_err(|e| unreachable(cluster, &e.to_string()))?, Vec::new())),
    }
}

/// The client of `cluster` for this worker thread
/// ([`kubefold_actors::cluster::ClusterSpec::shared_client`]).
pub async fn client(fleet: &Fleet, cluster: &str) -> Result<kube::Client, Status> {
    let spec = fleet.member(cluster).ok_or_else(|| {
        Status::new(404, "NotFound", format!("cluster \"{cluster}\" is not a member of this kubefold"))
    })?;
    spec.shared_client().await.map_err(|e| unreachable(cluster, &e.to_string()))
}

/// 503 naming the cluster that could not be reached.
pub fn unreachable(cluster: &str, error: &str) -> Status {
    Status::unavailable(format!("cluster \"{cluster}\" is unreachable: {error}"))
}

/// A member's answer.
pub struct MemberResponse {
    /// HTTP status.
    pub status: u16,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl MemberResponse {
    /// Whether the member accepted the request.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Sends one request to a member and reads the whole answer.
pub async fn send(
    fleet: &Fleet,
    cluster: &str,
    method: Method,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<MemberResponse, Status> {
    send_as(fleet, cluster, None, method, path_and_query, content_type, body).await
}

/// [`send`] for `caller` ([`client_as`]).
pub async fn send_as(
    fleet: &Fleet,
    cluster: &str,
    caller: Option<&Caller>,
    method: Method,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<MemberResponse, Status> {
    let (client, headers) = client_as(fleet, cluster, caller).await?;
    let response = send_raw(&client, cluster, &headers, method, path_and_query, content_type, body).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect_bytes().await.map_err(|e| unreachable(cluster, &e.to_string()))?;
    Ok(MemberResponse { status: parts.status.as_u16(), headers: parts.headers, body })
}

/// Sends one request to a member, with `headers` besides its own, and
/// returns the streaming answer.
pub async fn send_raw(
    client: &kube::Client,
    cluster: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
    method: Method,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Response<Body>, Status> {
    let mut request = Request::builder().method(method).uri(path_and_query).header("Accept", "application/json");
    if let Some(ct) = content_type {
        request = request.header("Content-Type", ct);
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(Body::from(body)).map_err(|e| Status::bad_request(format!("cannot build member request: {e}")))?;
    client.send(request).await.map_err(|e| unreachable(cluster, &e.to_string()))
}
