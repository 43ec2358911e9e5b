//! The upgrade-aware proxy of the streaming subresources: `pods/exec`,
//! `pods/attach`, `pods/portforward` and the `proxy` subresource of pods,
//! services and nodes are forwarded to the member that holds the object,
//! as kube-apiserver forwards them to a kubelet.
//!
//! The object's qualified name is translated (`web-0_member1` becomes
//! `web-0` on member1; under `/clusters/{c}` names are the member's). The
//! request goes to the member with the member's credentials (its token,
//! CA, client certificate, as every member request) and with the headers of
//! the upgrade (`Connection`, `Upgrade`, `Sec-WebSocket-*`,
//! `X-Stream-Protocol-Version`); on a member that impersonates, with its
//! impersonator credentials and the authenticated caller's
//! `Impersonate-*` headers instead ([`crate::members::client_as`]). When the member switches protocols, its
//! 101 answer is passed back and the bytes are copied both ways until
//! either side closes, or until nothing has passed either way for
//! [`crate::ApiConfig::stream_idle_timeout`]. The stream protocols
//! themselves are not interpreted. A member that refuses answers with its
//! own status and body. A `proxy` request without an upgrade is forwarded
//! whole, its answer streamed back.
//!
//! WebSocket upgrades (kubectl 1.30+) and SPDY/3.1 upgrades (kubectl 1.27
//! to 1.29 for exec, attach and cp, up to 1.30 for port-forward) are
//! forwarded alike. actix-http hands the bytes after a handshake on as the
//! request's payload only for WebSocket: kubefold's listener
//! ([`kubefold_listen`]) shows it a SPDY upgrade as a WebSocket one and
//! keeps the real protocol with the connection, from which the member is
//! asked for `Upgrade: SPDY/3.1` again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use kubefold_engine::status::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::request::RequestInfo;
use crate::{members, ApiState};

/// Subresources this proxy forwards.
pub const SUBRESOURCES: [&str; 4] = ["exec", "attach", "portforward", "proxy"];

/// Request headers passed to the member.
const REQUEST_HEADERS: [&str; 9] = [
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
    "accept",
    "content-type",
];

/// Answer headers passed back from the member (its `Upgrade` sets the
/// connection's upgrade, see [`forward`]).
const ANSWER_HEADERS: [&str; 6] = [
    "sec-websocket-accept",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
    "content-type",
    "warning",
];

/// Where a streaming request goes: the member and the path on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The member.
    pub cluster: String,
    /// The path on the member (names translated), without the query.
    pub path: String,
    /// The subresource (`exec`, `attach`, `portforward`, `proxy`).
    pub subresource: String,
}

/// Splits the name segment of a path (`web-0_member1`, `web-0_member1:8080`,
/// `https:web_member1:443`) into the member's segment and the member.
fn translate_name(segment: &str) -> Option<(String, String)> {
    let mut parts: Vec<String> = segment.split(':').map(str::to_string).collect();
    let at = if parts.len() == 3 { 1 } else { 0 };
    let (name, cluster) = parts[at].rsplit_once('_').map(|(n, c)| (n.to_string(), c.to_string()))?;
    if name.is_empty() || cluster.is_empty() {
        return None;
    }
    parts[at] = name;
    Some((parts.join(":"), cluster))
}

/// The resource, name and subresource a core path names when they are a
/// streaming subresource (`proxy` may be followed by more segments, which
/// kubefold's request parse does not take for a resource request).
fn streaming_parts(path: &str) -> Option<(&str, &str, &str)> {
    let segments: Vec<&str> = path.split('/').collect();
    let rest = match segments.as_slice() {
        ["", "clusters", _, rest @ ..] => rest,
        ["", rest @ ..] => rest,
        _ => return None,
    };
    let (resource, name, sub) = match rest {
        ["api", "v1", "namespaces", _, resource, name, sub, ..] => (*resource, *name, *sub),
        ["api", "v1", resource @ "nodes", name, sub, ..] => (*resource, *name, *sub),
        _ => return None,
    };
    let streaming = match resource {
        "pods" => SUBRESOURCES.contains(&sub),
        "services" | "nodes" => sub == "proxy",
        _ => false,
    };
    let extra = rest.len() > if resource == "nodes" { 5 } else { 7 };
    (streaming && !name.is_empty() && (sub == "proxy" || !extra)).then_some((resource, name, sub))
}

/// The target of a request for a streaming subresource, `None` for any
/// other request; 404 when a name is not qualified with a member.
pub fn target(info: &RequestInfo) -> Option<Result<Target, Status>> {
    let path = info.decoded_path.clone()?;
    let (resource, name, sub) = streaming_parts(&path)?;
    if let Some(rest) = path.strip_prefix("/clusters/") {
        let (cluster, tail) = rest.split_once('/')?;
        return Some(Ok(Target { cluster: cluster.to_string(), path: format!("/{tail}"), subresource: sub.to_string() }));
    }
    let Some((member_name, cluster)) = translate_name(name) else {
        return Some(Err(Status::new(
            404,
            "NotFound",
            format!("{resource} \"{name}\" not found: a name at the top level carries its member (name_cluster)"),
        )
        .with_details("", resource, name)));
    };
    let object = format!("/{resource}/{name}/");
    let at = path.find(&object)?;
    let translated = format!("{}/{}/{}/{}", &path[..at], resource, member_name, &path[at + object.len()..]);
    Some(Ok(Target { cluster, path: translated, subresource: sub.to_string() }))
}

/// Counts an open stream while it lives.
struct OpenStream(&'static str);

impl OpenStream {
    fn new(subresource: &str) -> OpenStream {
        let name = match subresource {
            "exec" => "exec",
            "attach" => "attach",
            "portforward" => "portforward",
            _ => "proxy",
        };
        metrics::gauge!("kubefold_streams", "subresource" => name).increment(1.0);
        OpenStream(name)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!("kubefold_streams", "subresource" => self.0).decrement(1.0);
    }
}

fn millis_since(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

/// Forwards a streaming request to its member.
pub async fn forward(req: &HttpRequest, payload: web::Payload, state: &ApiState, target: Target) -> Result<HttpResponse, Status> {
    let cluster = target.cluster.as_str();
    let spec = state.fleet.member(cluster).ok_or_else(|| {
        Status::new(404, "NotFound", format!("cluster \"{cluster}\" is not a member of this kubefold")).with_details("", "clusters", cluster)
    })?;
    let upgrade = req.headers().contains_key("upgrade");
    let (body, payload) = if upgrade { (Bytes::new(), Some(payload)) } else { (crate::read_body(payload).await?, None) };
    let mut uri = target.path.clone();
    if !req.query_string().is_empty() {
        uri.push('?');
        uri.push_str(req.query_string());
    }
    let method = http::Method::from_bytes(req.method().as_str().as_bytes())
        .map_err(|_| Status::method_not_allowed(format!("{} is not supported", req.method())))?;
    let mut request = http::Request::builder().method(method).uri(&uri);
    let spdy = kubefold_listen::is_spdy_upgrade(req);
    for name in REQUEST_HEADERS {
        if spdy && name == "upgrade" {
            // What the client asked for, not what actix-http was shown.
            request = request.header(name, kubefold_listen::SPDY);
            continue;
        }
        for value in req.headers().get_all(name) {
            request = request.header(name, value.as_bytes());
        }
    }
    let caller = members::caller(req).filter(|_| spec.impersonates());
    if let Some(caller) = &caller {
        for (name, value) in caller.headers()? {
            request = request.header(name, value);
        }
    }
    let request = request
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(|e| Status::bad_request(format!("cannot forward the request to cluster \"{cluster}\": {e}")))?;
    // A client of its own: the members' shared clients bound reads with a
    // timeout meant for watches, which would cut an idle stream.
    let config = match caller {
        Some(_) => spec.impersonating_config().await,
        None => spec.config().await,
    };
    let mut config = config.map_err(|e| members::unreachable(cluster, &e.to_string()))?;
    config.read_timeout = None;
    let client = kube::Client::try_from(config).map_err(|e| members::unreachable(cluster, &e.to_string()))?;
    tracing::debug!(cluster, path = %target.path, subresource = %target.subresource, "Forwarding a stream to the member.");
    let mut response = client.send(request).await.map_err(|e| members::unreachable(cluster, &e.to_string()))?;
    let code = StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut answer = HttpResponse::build(code);
    for name in ANSWER_HEADERS {
        for value in response.headers().get_all(name) {
            answer.append_header((name, value.as_bytes()));
        }
    }
    if let Some(protocol) = response.headers().get("upgrade").and_then(|v| v.to_str().ok()) {
        // `Connection: upgrade` and `Upgrade` as actix-http writes them.
        answer.upgrade(protocol.to_string());
    }
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        // A refusal (the member's Status) or a proxied answer, streamed back.
        let open = OpenStream::new(&target.subresource);
        let stream = http_body_util::BodyExt::into_data_stream(response.into_body()).map(move |chunk| {
            let _ = &open;
            chunk
                .inspect(|c| metrics::counter!("kubefold_stream_bytes_total", "direction" => "from_member").increment(c.len() as u64))
                .map_err(|e| actix_web::error::ErrorBadGateway(e.to_string()))
        });
        return Ok(answer.streaming(stream));
    }
    let Some(mut payload) = payload else {
        return Err(Status::new(502, "BadGateway", format!("cluster \"{cluster}\" switched protocols without an upgrade request")));
    };
    let upgraded = hyper::upgrade::on(&mut response).await.map_err(|e| members::unreachable(cluster, &e.to_string()))?;
    let (member_read, mut member_write) = tokio::io::split(TokioIo::new(upgraded));
    let idle = state.config.stream_idle_timeout;
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let done = CancellationToken::new();
    let open = Arc::new(OpenStream::new(&target.subresource));
    // Client to member.
    {
        let (last, done, open) = (last.clone(), done.clone(), open.clone());
        actix_web::rt::spawn(async move {
            let _open = open;
            loop {
                let chunk = tokio::select! {
                    chunk = payload.next() => chunk,
                    _ = done.cancelled() => break,
                };
                match chunk {
                    Some(Ok(chunk)) => {
                        last.store(millis_since(start), Ordering::Relaxed);
                        metrics::counter!("kubefold_stream_bytes_total", "direction" => "to_member").increment(chunk.len() as u64);
                        if member_write.write_all(&chunk).await.is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
            let _ = member_write.shutdown().await;
            done.cancel();
        });
    }
    // The idle timer.
    {
        let (last, done) = (last.clone(), done.clone());
        actix_web::rt::spawn(async move {
            loop {
                let quiet = Duration::from_millis(millis_since(start).saturating_sub(last.load(Ordering::Relaxed)));
                if quiet >= idle {
                    tracing::debug!(idle = ?idle, "Closing an idle stream.");
                    done.cancel();
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(idle - quiet) => {}
                    _ = done.cancelled() => break,
                }
            }
        });
    }
    // Member to client: the body of the 101 answer.
    let stream = futures::stream::unfold((member_read, last, done, open), move |(mut read, last, done, open)| async move {
        let mut buffer = vec![0u8; 32 * 1024];
        let n = tokio::select! {
            n = read.read(&mut buffer) => n.ok().filter(|n| *n > 0),
            _ = done.cancelled() => None,
        };
        let Some(n) = n else {
            done.cancel();
            return None;
        };
        buffer.truncate(n);
        last.store(millis_since(start), Ordering::Relaxed);
        metrics::counter!("kubefold_stream_bytes_total", "direction" => "from_member").increment(n as u64);
        Some((Ok::<_, actix_web::Error>(Bytes::from(buffer)), (read, last, done, open)))
    });
    Ok(answer.streaming(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_translated_to_the_members() {
        assert_eq!(translate_name("web-0_member1"), Some(("web-0".into(), "member1".into())));
        assert_eq!(translate_name("web-0_member1:8080"), Some(("web-0:8080".into(), "member1".into())));
        assert_eq!(translate_name("https:web_m2:443"), Some(("https:web:443".into(), "m2".into())));
        assert_eq!(translate_name("web-0"), None);
        assert_eq!(translate_name("_m"), None);
    }

    #[test]
    fn streaming_paths_name_the_member_and_its_path() {
        let info = |path: &str| RequestInfo::of(&actix_web::dev::Extensions::new(), &actix_web::http::Method::GET, path, "");
        let t = target(&info("/api/v1/namespaces/default/pods/web-0_member1/exec")).unwrap().unwrap();
        assert_eq!((t.cluster.as_str(), t.path.as_str()), ("member1", "/api/v1/namespaces/default/pods/web-0/exec"));
        let t = target(&info("/api/v1/nodes/n1_m2/proxy/stats/summary")).unwrap().unwrap();
        assert_eq!((t.cluster.as_str(), t.path.as_str()), ("m2", "/api/v1/nodes/n1/proxy/stats/summary"));
        let t = target(&info("/clusters/member1/api/v1/namespaces/a/pods/p/portforward")).unwrap().unwrap();
        assert_eq!((t.cluster.as_str(), t.path.as_str()), ("member1", "/api/v1/namespaces/a/pods/p/portforward"));
        assert_eq!(target(&info("/api/v1/namespaces/a/pods/p/exec")).unwrap().unwrap_err().code, 404);
        assert!(target(&info("/api/v1/namespaces/a/pods/p_m/log")).is_none());
        assert!(target(&info("/api/v1/namespaces/a/pods/p_m")).is_none());
        assert!(target(&info("/api/v1/namespaces/a/pods/p_m/exec/more")).is_none());
        assert!(target(&info("/apis/x.io/v1/namespaces/a/things/p_m/exec")).is_none());
        let t = target(&info("/api/v1/namespaces/a/services/https:web_m2:443/proxy/")).unwrap().unwrap();
        assert_eq!(t.path, "/api/v1/namespaces/a/services/https:web:443/proxy/");
    }
}
