//! Port-forward over SPDY/3.1 tunnelled in WebSocket, as kubectl 1.31 and
//! later speak it (subprotocol `SPDY/3.1+portforward.k8s.io`, KEP-4006):
//! the WebSocket's binary messages carry a SPDY session's bytes
//! ([`super::spdy`]). For each local connection kubectl opens two streams
//! (SYN_STREAM with the headers `streamType` `error` or `data`, `port` and
//! `requestID`), each answered with a SYN_REPLY. The data stream reaches
//! the pod's port: a declared container port answers HTTP/1.1 requests
//! with the pod's name; another gets kubelet's message on the error
//! stream. When the client ends its data stream, both streams are ended.

use std::collections::HashMap;

use actix_ws::{AggregatedMessage, Session};
use bytes::BytesMut;
use futures::StreamExt;

use super::spdy::{self, Deflater, Frame, Inflater};

/// The WebSocket subprotocol of the tunnel.
pub const PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// What a stream of the session is.
#[derive(Debug, Clone)]
pub(super) struct Stream {
    /// `data` or `error`.
    kind: String,
    port: u16,
    request: String,
    /// Bytes of an HTTP request not answered yet.
    buffer: Vec<u8>,
}

/// The pod behind the session.
pub struct Pod {
    /// Its name (what the HTTP responder answers).
    pub name: String,
    /// Its uid (in kubelet's error message).
    pub uid: String,
    /// Its declared container ports.
    pub ports: Vec<u16>,
}

/// Serves the session until the client closes it.
pub async fn serve(mut session: Session, mut messages: actix_ws::AggregatedMessageStream, pod: Pod) {
    let mut buffer = BytesMut::new();
    let mut inflater = Inflater::default();
    let mut deflater = Deflater::default();
    let mut streams: HashMap<u32, Stream> = HashMap::new();
    'session: while let Some(message) = messages.next().await {
        match message {
            Ok(AggregatedMessage::Binary(data)) => buffer.extend_from_slice(&data),
            Ok(AggregatedMessage::Ping(p)) => {
                let _ = session.pong(&p).await;
                continue;
            }
            Ok(AggregatedMessage::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        }
        loop {
            let frame = match spdy::parse(&mut buffer) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%error, "Port-forward session is not SPDY; closing it.");
                    let _ = session.binary(spdy::id_and_value(spdy::GOAWAY, 0, 1)).await;
                    break 'session;
                }
            };
            let mut out = Vec::new();
            if handle(frame, &mut inflater, &mut deflater, &mut streams, &pod, &mut out).is_err() {
                let _ = session.binary(spdy::id_and_value(spdy::GOAWAY, 0, 1)).await;
                break 'session;
            }
            for frame in out {
                if session.binary(frame).await.is_err() {
                    break 'session;
                }
            }
        }
    }
    let _ = session.close(None).await;
}

/// The error stream of the same request as `data`.
fn error_stream_of(streams: &HashMap<u32, Stream>, data: &Stream) -> Option<u32> {
    streams.iter().find(|(_, s)| s.kind == "error" && s.request == data.request && s.port == data.port).map(|(id, _)| *id)
}

/// Handles one frame from the client; the frames to send back in `out`.
pub(super) fn handle(
    frame: Frame,
    inflater: &mut Inflater,
    deflater: &mut Deflater,
    streams: &mut HashMap<u32, Stream>,
    pod: &Pod,
    out: &mut Vec<bytes::Bytes>,
) -> Result<(), spdy::Error> {
    match frame {
        Frame::Control { kind: spdy::SYN_STREAM, payload, .. } => {
            let id = spdy::stream_id(&payload)?;
            let headers = inflater.headers(spdy::syn_stream_block(&payload)?)?;
            let header = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()).unwrap_or_default();
            let stream = Stream { kind: header("streamtype"), port: header("port").parse().unwrap_or(0), request: header("requestid"), buffer: Vec::new() };
            out.push(spdy::syn_reply(id, &deflater.block(&[])));
            if stream.kind == "data" && !pod.ports.contains(&stream.port) {
                // Nothing listens: kubelet's message on the error stream, and both end.
                let message = format!(
                    "error forwarding port {} to pod {}, uid {}: failed to connect to localhost:{} inside namespace: connection refused",
                    stream.port, pod.name, pod.uid, stream.port
                );
                if let Some(error_id) = error_stream_of(streams, &stream) {
                    out.push(spdy::data(error_id, false, message.as_bytes()));
                    out.push(spdy::data(error_id, true, &[]));
                    streams.remove(&error_id);
                }
                out.push(spdy::data(id, true, &[]));
                return Ok(());
            }
            streams.insert(id, stream);
        }
        Frame::Control { kind: spdy::HEADERS, payload, .. } => {
            // Keeps the compression context in step.
            inflater.headers(payload.get(4..).ok_or(spdy::Error::Truncated("HEADERS"))?)?;
        }
        Frame::Control { kind: spdy::PING, payload, flags } => out.push(spdy::control(spdy::PING, flags, &payload)),
        Frame::Control { kind: spdy::RST_STREAM, payload, .. } => {
            streams.remove(&spdy::stream_id(&payload)?);
        }
        Frame::Control { .. } => {}
        Frame::Data { stream_id, flags, data } => {
            let Some(stream) = streams.get_mut(&stream_id) else { return Ok(()) };
            if !data.is_empty() {
                // What the client may send next (flow control, 64 KiB windows).
                out.push(spdy::id_and_value(spdy::WINDOW_UPDATE, stream_id, data.len() as u32));
            }
            if stream.kind == "data" {
                stream.buffer.extend_from_slice(&data);
                let answer = super::exec::http_answers(&mut stream.buffer, &pod.name);
                if !answer.is_empty() {
                    for chunk in answer.chunks(32 * 1024) {
                        out.push(spdy::data(stream_id, false, chunk));
                    }
                }
            }
            if flags & spdy::FLAG_FIN != 0 {
                let Some(stream) = streams.remove(&stream_id) else { return Ok(()) };
                if stream.kind == "data" {
                    out.push(spdy::data(stream_id, true, &[]));
                    if let Some(error_id) = error_stream_of(streams, &stream) {
                        out.push(spdy::data(error_id, true, &[]));
                        streams.remove(&error_id);
                    }
                } else {
                    // The client's side of the error stream ended; ours stays
                    // open until its data stream ends.
                    streams.insert(stream_id, stream);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's SYN_STREAM of `id` with `headers`.
    fn syn_stream(deflater: &mut Deflater, id: u32, headers: &[(&str, &str)]) -> Frame {
        let mut payload = Vec::new();
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&0u32.to_be_bytes());
        payload.extend_from_slice(&[0, 0]);
        payload.extend_from_slice(&deflater.block(headers));
        Frame::Control { kind: spdy::SYN_STREAM, flags: 0, payload: payload.into() }
    }

    fn frames(bytes: &[bytes::Bytes]) -> Vec<Frame> {
        let mut buffer = BytesMut::new();
        bytes.iter().for_each(|b| buffer.extend_from_slice(b));
        std::iter::from_fn(|| spdy::parse(&mut buffer).unwrap()).collect()
    }

    #[test]
    fn a_request_on_a_declared_port_is_answered_with_the_pods_name() {
        let pod = Pod { name: "web-0".into(), uid: "u".into(), ports: vec![80] };
        let (mut client, mut inflater, mut deflater, mut streams, mut out) = (Deflater::default(), Inflater::default(), Deflater::default(), HashMap::new(), Vec::new());
        for (id, kind) in [(1, "error"), (3, "data")] {
            let frame = syn_stream(&mut client, id, &[("streamtype", kind), ("port", "80"), ("requestid", "0")]);
            handle(frame, &mut inflater, &mut deflater, &mut streams, &pod, &mut out).unwrap();
        }
        let request = Frame::Data { stream_id: 3, flags: 0, data: "GET / HTTP/1.1\r\nHost: x\r\n\r\n".into() };
        handle(request, &mut inflater, &mut deflater, &mut streams, &pod, &mut out).unwrap();
        handle(Frame::Data { stream_id: 3, flags: spdy::FLAG_FIN, data: Default::default() }, &mut inflater, &mut deflater, &mut streams, &pod, &mut out).unwrap();
        let answered = frames(&out);
        let replies: Vec<u32> = answered
            .iter()
            .filter_map(|f| match f {
                Frame::Control { kind: spdy::SYN_REPLY, payload, .. } => Some(spdy::stream_id(payload).unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(replies, [1, 3]);
        let body: Vec<u8> = answered
            .iter()
            .filter_map(|f| match f {
                Frame::Data { stream_id: 3, data, .. } => Some(data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(String::from_utf8_lossy(&body).ends_with("\r\n\r\nweb-0\n"), "{}", String::from_utf8_lossy(&body));
        let fins: Vec<u32> = answered
            .iter()
            .filter_map(|f| match f {
                Frame::Data { stream_id, flags, .. } if flags & spdy::FLAG_FIN != 0 => Some(*stream_id),
                _ => None,
            })
            .collect();
        assert_eq!(fins, [3, 1], "the data stream, then its error stream, end");
        assert!(streams.is_empty());
    }

    #[test]
    fn a_port_nothing_listens_on_gets_kubelets_error() {
        let pod = Pod { name: "web-0".into(), uid: "u".into(), ports: vec![80] };
        let (mut client, mut inflater, mut deflater, mut streams, mut out) = (Deflater::default(), Inflater::default(), Deflater::default(), HashMap::new(), Vec::new());
        for (id, kind) in [(1, "error"), (3, "data")] {
            let frame = syn_stream(&mut client, id, &[("streamtype", kind), ("port", "81"), ("requestid", "7")]);
            handle(frame, &mut inflater, &mut deflater, &mut streams, &pod, &mut out).unwrap();
        }
        let error: Vec<u8> = frames(&out)
            .iter()
            .filter_map(|f| match f {
                Frame::Data { stream_id: 1, data, .. } => Some(data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(String::from_utf8_lossy(&error).contains("failed to connect to localhost:81 inside namespace"));
        let mut ping = Vec::new();
        handle(Frame::Control { kind: spdy::PING, flags: 0, payload: 9u32.to_be_bytes().to_vec().into() }, &mut inflater, &mut deflater, &mut streams, &pod, &mut ping).unwrap();
        assert_eq!(frames(&ping), [Frame::Control { kind: spdy::PING, flags: 0, payload: 9u32.to_be_bytes().to_vec().into() }]);
    }
}
