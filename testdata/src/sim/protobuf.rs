//! Kubernetes protobuf bodies, as kube-apiserver reads and writes them
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>):
//! built-in types accept a protobuf body on create, update and their
//! subresources, and a client whose Accept header starts with
//! `application/vnd.kubernetes.protobuf` gets protobuf for get, list, watch
//! and the object a write returns. Custom resources have no protobuf form:
//! a protobuf body is refused with 415 and reads stay JSON, as in Kubernetes.
//!
//! CBOR (KEP-4222) is answered as kube-apiserver answers it with its CBOR
//! feature off ([`refuse_cbor`]): 415 for a CBOR body (client-go falls back
//! to JSON), 406 for an Accept header that names only CBOR.

use actix_web::{HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use kubefold_engine::resources::ResourceType;
use serde_json::Value;

use super::status::{ApiError, Result};

/// The media types a write body may have, as the 415 message lists them.
const ACCEPTED_BODIES: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// The media types a custom resource's write body may have.
const ACCEPTED_CUSTOM_BODIES: &str = "application/json, application/yaml";

/// Whether the type has a protobuf form (built-in types do).
pub fn built_in(resource: &ResourceType) -> bool {
    kubefold_proto::has_message(&resource.api_version(), &resource.kind)
}

/// Decodes a protobuf write body to the object's JSON; 415 for a custom
/// resource, 400 for bytes that are not a protobuf object.
pub fn decode(resource: &ResourceType, subresource: Option<&str>, body: &[u8]) -> Result<Value> {
    // The scale subresource's body is an autoscaling/v1 Scale, built in for every type.
    if !built_in(resource) && subresource != Some("scale") {
        return Err(ApiError::UnsupportedMediaType(ACCEPTED_CUSTOM_BODIES.into()));
    }
    kubefold_proto::decode(body).map_err(|e| match e {
        kubefold_proto::Error::UnknownKind { .. } | kubefold_proto::Error::Unsupported(_) => {
            ApiError::UnsupportedMediaType(ACCEPTED_BODIES.into())
        }
        other => ApiError::BadRequest(format!("error decoding protobuf body: {other}")),
    })
}

/// Whether the client asks for protobuf first.
pub fn preferred(req: &HttpRequest) -> bool {
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
    kubefold_proto::prefers_protobuf(accept)
}

/// The response of one object (a get, or the object a write returns):
/// protobuf when the client prefers it and the object has a protobuf form,
/// else the JSON as it is.
pub fn object_response(req: &HttpRequest, code: u16, json: Bytes) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(code).unwrap_or(actix_web::http::StatusCode::OK);
    if preferred(req) {
        if let Some(body) = serde_json::from_slice::<Value>(&json).ok().and_then(|v| kubefold_proto::encode(&v).ok()) {
            return HttpResponse::build(status).content_type(kubefold_proto::MEDIA_TYPE).body(body);
        }
    }
    HttpResponse::build(status).content_type("application/json").body(json)
}

/// Encodes a whole JSON list body (the `*List` message in the envelope).
pub async fn list_response<S, E>(body: S) -> Result<HttpResponse>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut body = body;
    let mut json = BytesMut::new();
    while let Some(chunk) = body.next().await {
        json.extend_from_slice(&chunk.map_err(|e| ApiError::Internal(e.to_string()))?);
    }
    let encoded = actix_web::web::block(move || {
        kubefold_proto::encode_json_list(&json).map_err(|e| ApiError::Internal(format!("encoding the list as protobuf: {e}")))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(HttpResponse::Ok().content_type(kubefold_proto::MEDIA_TYPE).body(encoded))
}

/// Turns a stream of JSON watch lines (`{"type":..,"object":..}\n`) into
/// protobuf watch frames (4-byte big-endian length, `WatchEvent`). An event
/// without a protobuf form ends the stream with an ERROR event, as
/// kube-apiserver ends a watch it cannot encode (the client relists).
pub fn watch_frames<S>(lines: S) -> impl Stream<Item = std::result::Result<Bytes, std::convert::Infallible>>
where
    S: Stream<Item = std::result::Result<Bytes, std::convert::Infallible>> + Unpin,
{
    futures::stream::unfold((lines, BytesMut::new(), false), |(mut lines, mut pending, done)| async move {
        if done {
            return None;
        }
        loop {
            let Ok(chunk) = lines.next().await?;
            pending.extend_from_slice(&chunk);
            let mut out = BytesMut::new();
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line = pending.split_to(end + 1);
                match kubefold_proto::watch_line_frame(&line) {
                    Ok(frame) => out.extend_from_slice(&frame),
                    Err(error) => {
                        tracing::warn!(%error, "Watch event has no protobuf form; the watch ends.");
                        let status = ApiError::Internal(format!("encoding a watch event as protobuf: {error}")).to_status();
                        if let Ok(frame) = kubefold_proto::watch_frame("ERROR", &serde_json::to_value(status).unwrap_or_default()) {
                            out.extend_from_slice(&frame);
                        }
                        return Some((Ok(out.freeze()), (lines, pending, true)));
                    }
                }
            }
            if !out.is_empty() {
                return Some((Ok(out.freeze()), (lines, pending, false)));
            }
        }
    })
}

/// The JSON of an options body (the `DeleteOptions` of a delete), which
/// typed clients send in protobuf too.
pub fn options_body(req: &HttpRequest, body: Bytes) -> Result<Bytes> {
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !kubefold_proto::is_protobuf(content_type) || body.is_empty() {
        return Ok(body);
    }
    let options = kubefold_proto::decode(&body).map_err(|e| ApiError::BadRequest(format!("error decoding protobuf body: {e}")))?;
    Ok(Bytes::from(options.to_string()))
}

/// Whether a media type is CBOR (`application/cbor`, `application/cbor-seq`,
/// `application/apply-patch+cbor`).
fn is_cbor(media: &str) -> bool {
    let media = media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/cbor" || media == "application/cbor-seq" || media.ends_with("+cbor")
}

/// 415 for a CBOR request body, 406 for an Accept header of CBOR only.
pub fn refuse_cbor(req: &HttpRequest) -> Result<()> {
    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if is_cbor(header("content-type")) {
        return Err(ApiError::UnsupportedMediaType(ACCEPTED_BODIES.into()));
    }
    let mut ranges = header("accept").split(',').map(str::trim).filter(|r| !r.is_empty()).peekable();
    if ranges.peek().is_some() && ranges.all(is_cbor) {
        return Err(ApiError::NotAcceptable(ACCEPTED_BODIES.into()));
    }
    Ok(())
}
