//! Kubernetes protobuf at kubefold's edge, as kube-apiserver serves it
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>).
//! A protobuf request body of a built-in type is decoded to JSON before
//! anything else reads it, so names and resourceVersions are translated
//! exactly as for JSON bodies; a client whose Accept header starts with
//! `application/vnd.kubernetes.protobuf` gets the JSON kubefold serves
//! encoded as protobuf: objects and lists in the `k8s\0` + `runtime.Unknown`
//! envelope, watches as length-prefixed `WatchEvent` frames. Custom
//! resources have no protobuf form: a protobuf body is 415 and reads stay
//! JSON, as in Kubernetes. Errors stay JSON `Status` objects, which every
//! client reads.

use std::pin::Pin;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::http::header::{HeaderValue, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use kubefold_engine::resources::ResourceType;
use kubefold_engine::status::Status;
use serde_json::Value;

/// Whether objects of the type have a protobuf form (built-in types).
pub fn built_in(resource: &ResourceType) -> bool {
    kubefold_proto::has_message(&resource.api_version(), &resource.kind)
}

/// Whether the client asks for protobuf first (no `as=` conversion).
pub fn preferred(req: &HttpRequest) -> bool {
    let accept = req.headers().get(actix_web::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    kubefold_proto::prefers_protobuf(accept)
}

/// Whether the response to this request is to be protobuf (a Table, asked
/// for anywhere in Accept, stays JSON).
pub fn wanted(req: &HttpRequest, resource: &ResourceType) -> bool {
    preferred(req) && built_in(resource) && !crate::read::wants_table(req)
}

fn is_protobuf_body(req: &HttpRequest) -> bool {
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    kubefold_proto::is_protobuf(content_type)
}

fn unsupported(accepted: &str) -> Status {
    Status::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: {accepted}"))
}

/// The JSON of a protobuf request body, `None` when the body is not
/// protobuf. 415 for a custom resource's object, 400 for bytes that are not
/// a protobuf object.
pub fn request_body(req: &HttpRequest, resource: &ResourceType, subresource: Option<&str>, body: &Bytes) -> Result<Option<Bytes>, Status> {
    // A patch is never protobuf: its content type names the patch type, and
    // the patch handler refuses this one with 415.
    if !is_protobuf_body(req) || body.is_empty() || req.method() == actix_web::http::Method::PATCH {
        return Ok(None);
    }
    // A delete's DeleteOptions is built in for every type; a scale is an autoscaling/v1 Scale.
    let options_or_scale = req.method() == actix_web::http::Method::DELETE || subresource == Some("scale");
    if !built_in(resource) && !options_or_scale {
        return Err(unsupported("application/json, application/yaml"));
    }
    match kubefold_proto::decode(body) {
        Ok(object) => Ok(Some(Bytes::from(object.to_string()))),
        Err(kubefold_proto::Error::UnknownKind { .. } | kubefold_proto::Error::Unsupported(_)) => {
            Err(unsupported("application/json, application/yaml, application/vnd.kubernetes.protobuf"))
        }
        Err(e) => Err(Status::bad_request(format!("error decoding protobuf body: {e}"))),
    }
}

/// What a response holds, for its conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// One object (get, the object a write returns, a Scale, a Status).
    Object,
    /// A `*List`.
    List,
    /// A watch stream of JSON lines.
    Watch,
}

/// The response as protobuf: a successful JSON response of a client that
/// prefers protobuf, re-encoded; anything else as it is. A body that has no
/// protobuf form stays JSON.
pub async fn response(req: &HttpRequest, response: HttpResponse, served: Served, gzip_lists: bool) -> HttpResponse {
    let json = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("application/json"));
    if !response.status().is_success() || !json || response.headers().contains_key(CONTENT_ENCODING) {
        return response;
    }
    let (response, body) = response.into_parts();
    if served == Served::List {
        return list_response(req, response, body, gzip_lists).await;
    }
    if served == Served::Watch {
        let frames = watch_frames(body_stream(body));
        let mut response = response.set_body(BoxBody::new(actix_web::body::BodyStream::new(frames)));
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kubefold_proto::WATCH_MEDIA_TYPE));
        return response;
    }
    let bytes = match actix_web::body::to_bytes(body).await {
        Ok(bytes) => bytes,
        Err(e) => return crate::respond::status(&Status::internal(format!("reading the response body: {e}"))),
    };
    let encoded = web::block(move || {
        let encoded = serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| kubefold_proto::Error::Malformed(e.to_string()))
            .and_then(|v| kubefold_proto::encode(&v));
        (bytes, encoded)
    })
    .await;
    let (bytes, encoded) = match encoded {
        Ok(done) => done,
        Err(e) => return crate::respond::status(&Status::internal(e.to_string())),
    };
    match encoded {
        Ok(protobuf) => {
            let mut response = response.set_body(BoxBody::new(protobuf));
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kubefold_proto::MEDIA_TYPE));
            response
        }
        Err(error) => {
            tracing::debug!(%error, "Response has no protobuf form; served as JSON.");
            response.set_body(BoxBody::new(bytes))
        }
    }
}

/// A list as protobuf, encoded item by item as the JSON list's chunks
/// arrive (on a blocking thread, reading them from a channel), so neither
/// the whole JSON text nor a second copy of the protobuf body is held; the
/// pieces are sent (and gzipped, when asked, piece by piece into one gzip
/// member) as they are. The envelope starts with the length of the list
/// message, as kube-apiserver's does, so the first byte leaves when the last
/// item is encoded. A list that has no protobuf form after all (an object
/// whose JSON does not fit its message) is a 500 Status naming the field,
/// as kube-apiserver answers a list it cannot encode.
async fn list_response(req: &HttpRequest, response: HttpResponse<()>, body: BoxBody, gzip_lists: bool) -> HttpResponse {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let encoding = web::block(move || {
        let mut rx = rx;
        let mut encoder = kubefold_proto::ListEncoder::default();
        while let Some(chunk) = rx.blocking_recv() {
            encoder.push(&chunk)?;
        }
        encoder.finish()
    });
    let feed = async move {
        let mut chunks = body_stream(body);
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => {
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
                Err(error) => {
                    // The reader sees the list end early and fails to parse it.
                    tracing::warn!(%error, "Reading the JSON list to encode as protobuf failed.");
                    break;
                }
            }
        }
    };
    let (encoded, ()) = futures::join!(encoding, feed);
    let pieces = match encoded {
        Ok(Ok(pieces)) => pieces,
        Ok(Err(error)) => return crate::respond::status(&Status::internal(format!("encoding the list as protobuf: {error}"))),
        Err(error) => return crate::respond::status(&Status::internal(error.to_string())),
    };
    let length: usize = pieces.iter().map(Vec::len).sum();
    let gzip = gzip_lists && length > crate::gzip::THRESHOLD_BYTES && crate::gzip::accepted(req.headers());
    let mut response = if gzip {
        // Each piece deflated when it is sent, joined into one member.
        let mut member = Some(crate::gzip::Member::default());
        let parts = pieces.into_iter().map(Some).chain(std::iter::once(None)).map(move |piece| match (piece, member.as_mut()) {
            (Some(piece), Some(m)) => Bytes::from(m.add(crate::gzip::Piece::deflate(&piece))),
            _ => member.take().map(|m| Bytes::copy_from_slice(&m.end())).unwrap_or_default(),
        });
        let body = std::iter::once(Bytes::from_static(&crate::gzip::Member::HEADER)).chain(parts);
        response.set_body(BoxBody::new(actix_web::body::BodyStream::new(futures::stream::iter(body.map(Ok::<_, actix_web::Error>)))))
    } else {
        let stream = futures::stream::iter(pieces.into_iter().map(|p| Ok::<_, actix_web::Error>(Bytes::from(p))));
        response.set_body(BoxBody::new(actix_web::body::SizedStream::new(length as u64, stream)))
    };
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kubefold_proto::MEDIA_TYPE));
    if gzip {
        response.headers_mut().insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        response.headers_mut().insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    response
}

/// A response body as a stream of chunks.
fn body_stream(body: BoxBody) -> impl Stream<Item = Result<Bytes, actix_web::Error>> + Unpin {
    let mut body = Box::pin(body);
    futures::stream::poll_fn(move |cx| {
        if matches!(body.size(), BodySize::None) {
            return std::task::Poll::Ready(None);
        }
        Pin::new(&mut body).as_mut().poll_next(cx).map(|chunk| chunk.map(|c| c.map_err(|e| actix_web::error::ErrorInternalServerError(e.to_string()))))
    })
}

/// Turns a stream of JSON watch lines (`{"type":..,"object":..}\n`) into
/// protobuf watch frames (4-byte big-endian length, `WatchEvent`). An event
/// without a protobuf form ends the stream with an ERROR event (the client
/// relists), as kube-apiserver ends a watch it cannot encode.
pub fn watch_frames<S>(lines: S) -> impl Stream<Item = Result<Bytes, actix_web::Error>>
where
    S: Stream<Item = Result<Bytes, actix_web::Error>> + Unpin,
{
    futures::stream::unfold((lines, BytesMut::new(), false), |(mut lines, mut pending, done)| async move {
        if done {
            return None;
        }
        loop {
            let chunk = match lines.next().await? {
                Ok(chunk) => chunk,
                Err(e) => return Some((Err(e), (lines, pending, true))),
            };
            pending.extend_from_slice(&chunk);
            let mut out = BytesMut::new();
            while let Some(end) = memchr::memchr(b'\n', &pending) {
                let line = pending.split_to(end + 1);
                match kubefold_proto::watch_line_frame(&line) {
                    Ok(frame) => out.extend_from_slice(&frame),
                    Err(error) => {
                        tracing::warn!(%error, "Watch event has no protobuf form; the watch ends.");
                        let status = Status::internal(format!("encoding a watch event as protobuf: {error}"));
                        if let Ok(frame) = kubefold_proto::watch_frame("ERROR", &status.to_json()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn watch_lines_become_frames_whatever_their_chunking() {
        let lines = b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"}}}\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\"}}}\n";
        // Split mid-line, byte by byte.
        let chunks: Vec<Result<Bytes, actix_web::Error>> = lines.iter().map(|b| Ok(Bytes::copy_from_slice(&[*b]))).collect();
        let frames: Vec<u8> = watch_frames(futures::stream::iter(chunks))
            .map(|c| c.unwrap().to_vec())
            .collect::<Vec<_>>()
            .await
            .concat();
        let (first, rest) = kubefold_proto::split_frame(&frames).unwrap();
        let (kind, object) = kubefold_proto::decode_watch_event(first).unwrap();
        assert_eq!(kind, "ADDED");
        assert_eq!(object["metadata"]["name"], "a");
        let (second, rest) = kubefold_proto::split_frame(rest).unwrap();
        let (kind, object) = kubefold_proto::decode_watch_event(second).unwrap();
        assert_eq!((kind.as_str(), &object["metadata"]["resourceVersion"]), ("BOOKMARK", &Value::from("9")));
        assert!(rest.is_empty());
        // An event that does not fit its type ends the watch with an ERROR.
        let bad: Vec<Result<Bytes, actix_web::Error>> = vec![Ok(Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":7}}}\n{\"type\":\"ADDED\"}\n"))];
        let frames: Vec<u8> = watch_frames(futures::stream::iter(bad)).map(|c| c.unwrap().to_vec()).collect::<Vec<_>>().await.concat();
        let (only, rest) = kubefold_proto::split_frame(&frames).unwrap();
        assert!(rest.is_empty());
        let (kind, status) = kubefold_proto::decode_watch_event(only).unwrap();
        assert_eq!((kind.as_str(), status["code"].as_i64()), ("ERROR", Some(500)));
    }
}
