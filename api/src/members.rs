//! Forwarding requests to member clusters: a kube client per member and per
//! HTTP worker thread (each worker has its own runtime), and raw request
//! forwarding that passes the member's answer back unchanged.

use actix_web::web::Bytes;
use http::{HeaderMap, Method, Request};
use kube::client::Body;
use kubefold_actors::fleet::Fleet;
use kubefold_engine::status::Status;

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
    let client = client(fleet, cluster).await?;
    let response = send_raw(&client, cluster, method, path_and_query, content_type, body).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect_bytes().await.map_err(|e| unreachable(cluster, &e.to_string()))?;
    Ok(MemberResponse { status: parts.status.as_u16(), headers: parts.headers, body })
}

/// Sends one request to a member and returns the streaming answer.
pub async fn send_raw(
    client: &kube::Client,
    cluster: &str,
    method: Method,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Response<Body>, Status> {
    let mut request = Request::builder().method(method).uri(path_and_query).header("Accept", "application/json");
    if let Some(ct) = content_type {
        request = request.header("Content-Type", ct);
    }
    let request = request.body(Body::from(body)).map_err(|e| Status::bad_request(format!("cannot build member request: {e}")))?;
    client.send(request).await.map_err(|e| unreachable(cluster, &e.to_string()))
}
