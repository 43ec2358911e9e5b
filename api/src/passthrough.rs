//! Pass-through under `/clusters/{c}/`: what kubefold does not aggregate
//! (a type outside the resource selection, a type kubefold does not know,
//! a subresource or verb it does not serve) is proxied to that member as it
//! is, with the member's credentials, so that a kubeconfig whose server is
//! `.../clusters/member1` is a complete kubectl for that member. The
//! member's discovery and OpenAPI documents are served there too (kubefold's
//! own when the member does not answer). kubefold's aggregated types stay
//! served from the index.
//!
//! Authorization happens before (kubefold's rules decide whether the
//! caller may do it); the caller's own credentials and impersonation
//! headers are never forwarded: the request reaches the member with the
//! member's credentials and only the headers that describe its body and
//! the answer wanted, or, on a member that impersonates, with its
//! impersonator credentials and the `Impersonate-*` headers kubefold sets
//! for the authenticated caller ([`members::client_as`]). The request body is read whole (at most
//! [`crate::MAX_BODY_BYTES`], about what kube-apiserver takes); the answer
//! is streamed back as it comes (a watch, a log), with its status and the
//! headers that describe it.

use std::time::Duration;

use actix_web::http::header::{HeaderName, ACCEPT, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;
use kubefold_engine::status::Status;

use crate::members;
use crate::ApiState;

/// How long a member's discovery or OpenAPI document is waited for before
/// kubefold's own is served: a member that is slow or unreachable never
/// holds discovery under `/clusters/{c}` for long.
const MEMBER_DOCUMENT_WAIT: Duration = Duration::from_secs(2);

/// Response headers passed back from the member.
const ANSWER_HEADERS: [&str; 5] = ["content-type", "warning", "retry-after", "audit-id", "cache-control"];

/// The member `c` and the rest of the raw path of a request under
/// `/clusters/{c}/...`.
pub fn cluster_scope(raw_path: &str) -> Option<(&str, &str)> {
    let rest = raw_path.strip_prefix("/clusters/")?;
    let (cluster, tail) = rest.split_once('/')?;
    (!cluster.is_empty() && !tail.is_empty()).then_some((cluster, &rest[cluster.len()..]))
}

/// Forwards the request to `cluster` as it is (its path without
/// `/clusters/{c}`, its query, method, body, `Accept` and `Content-Type`)
/// and streams the member's answer back.
pub async fn forward(req: &HttpRequest, state: &ApiState, cluster: &str, body: &Bytes) -> Result<HttpResponse, Status> {
    let response = send(req, state, cluster, body).await?;
    let (parts, body) = response.into_parts();
    let mut answer = answer_builder(&parts);
    let stream = http_body_util::BodyExt::into_data_stream(body)
        .map(|chunk| chunk.map_err(|e| actix_web::error::ErrorBadGateway(e.to_string())));
    Ok(answer.streaming(stream))
}

/// The member's own document (discovery, OpenAPI) for a GET under
/// `/clusters/{c}`; `None` when the member does not serve it or does not
/// answer within [`MEMBER_DOCUMENT_WAIT`], and kubefold's document is
/// served instead.
pub async fn member_document(req: &HttpRequest, state: &ApiState, cluster: &str) -> Option<HttpResponse> {
    state.fleet.member(cluster)?;
    let fetch = async {
        let response = send(req, state, cluster, &Bytes::new()).await?;
        let (parts, body) = response.into_parts();
        let bytes = body.collect_bytes().await.map_err(|e| members::unreachable(cluster, &e.to_string()))?;
        Ok::<_, Status>((parts, bytes))
    };
    match tokio::time::timeout(MEMBER_DOCUMENT_WAIT, fetch).await {
        Ok(Ok((parts, bytes))) if parts.status.is_success() => Some(answer_builder(&parts).body(bytes)),
        Ok(Ok((parts, _))) => {
            tracing::debug!(cluster, path = req.path(), code = parts.status.as_u16(), "Member does not serve the document; serving kubefold's.");
            None
        }
        Ok(Err(status)) => {
            tracing::debug!(cluster, path = req.path(), message = %status.message, "Member document unavailable; serving kubefold's.");
            None
        }
        Err(_) => {
            tracing::debug!(cluster, path = req.path(), "Member document not received in time; serving kubefold's.");
            None
        }
    }
}

/// The member request of `req`.
async fn send(req: &HttpRequest, state: &ApiState, cluster: &str, body: &Bytes) -> Result<http::Response<kube::client::Body>, Status> {
    let (_, tail) = cluster_scope(req.path()).ok_or_else(Status::path_not_found)?;
    let mut target = tail.to_string();
    if !req.query_string().is_empty() {
        target.push('?');
        target.push_str(req.query_string());
    }
    let method = http::Method::from_bytes(req.method().as_str().as_bytes())
        .map_err(|_| Status::method_not_allowed(format!("{} is not supported", req.method())))?;
    let (client, headers) = members::client_as(&state.fleet, cluster, members::caller(req).as_ref()).await?;
    let mut request = http::Request::builder().method(method).uri(&target);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    request = request.header("Accept", accept);
    if let Some(content_type) = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        request = request.header("Content-Type", content_type);
    }
    let request = request
        .body(kube::client::Body::from(body.clone()))
        .map_err(|e| Status::bad_request(format!("cannot forward the request to cluster \"{cluster}\": {e}")))?;
    tracing::debug!(cluster, method = %req.method(), path = %target, "Passing the request through to the member.");
    client.send(request).await.map_err(|e| members::unreachable(cluster, &e.to_string()))
}

/// The response head of a member's answer: its status and the headers that
/// describe it.
fn answer_builder(parts: &http::response::Parts) -> actix_web::HttpResponseBuilder {
    let code = StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut answer = HttpResponse::build(code);
    for name in ANSWER_HEADERS {
        for value in parts.headers.get_all(name) {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), actix_web::http::header::HeaderValue::from_bytes(value.as_bytes())) {
                answer.append_header((name, value));
            }
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::cluster_scope;

    #[test]
    fn cluster_scopes_keep_the_raw_rest_of_the_path() {
        assert_eq!(cluster_scope("/clusters/member1/api/v1/secrets"), Some(("member1", "/api/v1/secrets")));
        assert_eq!(cluster_scope("/clusters/m/apis/x.io/v1/namespaces/a%2Db/things"), Some(("m", "/apis/x.io/v1/namespaces/a%2Db/things")));
        assert_eq!(cluster_scope("/clusters/member1"), None);
        assert_eq!(cluster_scope("/clusters//api"), None);
        assert_eq!(cluster_scope("/api/v1/pods"), None);
    }
}
