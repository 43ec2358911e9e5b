//! `pods/exec`, `pods/attach` and `pods/portforward` over SPDY/3.1
//! upgrades of HTTP/1.1, as kubelet serves them behind kube-apiserver to
//! kubectl 1.27 to 1.29 (exec, attach, cp) and up to 1.30 (port-forward):
//! the streaming protocol of `k8s.io/apimachinery/pkg/util/httpstream/spdy`
//! (Kubernetes docs "Get a Shell to a Running Container", "Use Port
//! Forwarding to Access Applications in a Cluster"; KEP-4006 describes
//! it as what WebSockets replace).
//!
//! The client asks with `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the
//! subprotocols it speaks in `X-Stream-Protocol-Version`; the answer is
//! 101 with the one chosen (`v4.channel.k8s.io` for exec and attach,
//! `portforward.k8s.io` for port-forward). The connection then carries a
//! SPDY/3.1 session ([`super::spdy`]) in which the client opens one stream
//! per channel, named by its `streamType` header:
//! - exec and attach: `error` (at the end a `Status`, as kubelet writes
//!   it: `Success`, or `NonZeroExitCode` with the code), `stdin` (when
//!   asked with `stdin=true`; its end is stdin's end), `stdout`, `stderr`
//!   (not with a TTY) and `resize` (with `tty=true`: `{"Width","Height"}`
//!   JSON objects). The command starts once every stream asked for is
//!   open; at its end stdout and stderr are ended, then the error stream.
//! - port-forward: per forwarded connection a pair of streams `error` and
//!   `data` with the headers `port` and `requestID`, served by
//!   [`super::portforward_spdy`] as in the WebSocket tunnel.
//!
//! The listener ([`kubefold_listen`]) shows such an upgrade to actix-web as
//! a WebSocket one, so the bytes after the handshake are the request's
//! payload; [`kubefold_listen::is_spdy_upgrade`] tells which it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures::channel::mpsc as futures_mpsc;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::exec::{exit_status, Setup};
use super::shell::{self, Io};
use super::spdy::{self, Deflater, Frame, Inflater};
use super::status::ApiError;

/// The subprotocols of exec and attach over SPDY this simulator speaks.
pub(super) const EXEC_PROTOCOLS: [&str; 1] = ["v4.channel.k8s.io"];
/// The subprotocol of port-forward over SPDY.
pub(super) const PORTFORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// What runs in an upgraded session.
pub(super) enum Work {
    /// A command, with its stdin, stdout, stderr and terminal.
    Exec {
        /// Its environment and flags.
        setup: Setup,
        /// The command line.
        command: Vec<String>,
    },
    /// The container's output from now on, until the client leaves.
    Attach(futures::stream::LocalBoxStream<'static, Result<Bytes, std::convert::Infallible>>),
    /// Port-forward to the pod.
    PortForward(super::portforward_spdy::Pod),
}

/// The subprotocol chosen among those the client offers in its
/// `X-Stream-Protocol-Version` headers (each may list several).
fn negotiate(req: &HttpRequest, served: &[&str]) -> Option<&'static str> {
    let offered: Vec<String> = req
        .headers()
        .get_all("x-stream-protocol-version")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_string()).collect::<Vec<_>>())
        .collect();
    [PORTFORWARD_PROTOCOL].into_iter().chain(EXEC_PROTOCOLS).find(|p| served.contains(p) && offered.iter().any(|o| o == p))
}

/// Answers the upgrade with 101 and runs `work` in the session.
pub(super) fn start(req: &HttpRequest, payload: web::Payload, work: Work) -> Result<HttpResponse, ApiError> {
    let served: &[&str] = if matches!(work, Work::PortForward(_)) { &[PORTFORWARD_PROTOCOL] } else { &EXEC_PROTOCOLS };
    let Some(protocol) = negotiate(req, served) else {
        return Err(ApiError::BadRequest(format!(
            "unable to upgrade connection: unable to negotiate protocol: the server supports {}",
            served.join(", ")
        )));
    };
    let (out, body) = futures_mpsc::channel::<Bytes>(64);
    let session = Session { payload, buffer: BytesMut::new(), out, inflater: Inflater::default(), deflater: Deflater::default() };
    match work {
        Work::Exec { setup, command } => {
            actix_web::rt::spawn(exec(session, Some((setup, command)), None));
        }
        Work::Attach(lines) => {
            actix_web::rt::spawn(exec(session, None, Some(lines)));
        }
        Work::PortForward(pod) => {
            actix_web::rt::spawn(portforward(session, pod));
        }
    }
    Ok(HttpResponse::build(StatusCode::SWITCHING_PROTOCOLS)
        .upgrade(kubefold_listen::SPDY)
        .insert_header(("X-Stream-Protocol-Version", protocol))
        .streaming(body.map(Ok::<_, actix_web::Error>)))
}

/// One side of a SPDY session: the client's bytes in, frames out.
struct Session {
    payload: web::Payload,
    buffer: BytesMut,
    out: futures_mpsc::Sender<Bytes>,
    inflater: Inflater,
    deflater: Deflater,
}

impl Session {
    /// The client's next frame; `None` once it is gone (or speaks no SPDY).
    async fn next(&mut self) -> Option<Frame> {
        loop {
            match spdy::parse(&mut self.buffer) {
                Ok(Some(frame)) => return Some(frame),
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(%error, "The client does not speak SPDY/3.1; closing the session.");
                    let _ = self.send(spdy::id_and_value(spdy::GOAWAY, 0, 1)).await;
                    return None;
                }
            }
            match self.payload.next().await {
                Some(Ok(bytes)) => self.buffer.extend_from_slice(&bytes),
                _ => return None,
            }
        }
    }

    /// Sends a frame; false once the client is gone.
    async fn send(&mut self, frame: Bytes) -> bool {
        self.out.send(frame).await.is_ok()
    }
}

/// The streams of an exec or attach, by `streamType`.
#[derive(Default)]
struct Streams {
    by_type: HashMap<String, u32>,
}

impl Streams {
    fn id(&self, kind: &str) -> Option<u32> {
        self.by_type.get(kind).copied()
    }
}

/// The stream types an exec or attach asks for (kubelet's expected streams).
fn expected(stdin: bool, tty: bool) -> Vec<&'static str> {
    let mut kinds = vec!["error", "stdout"];
    if stdin {
        kinds.push("stdin");
    }
    if tty {
        kinds.push("resize");
    } else {
        kinds.push("stderr");
    }
    kinds
}

/// What a frame of the client means to an exec or attach.
enum Input {
    /// A new stream was opened (and answered).
    Opened,
    /// Bytes on a stream (the frame's FIN flag says whether it ends it).
    Data(u32, Bytes),
    /// The client reset a stream.
    Ended(u32),
    /// Nothing for the command.
    Nothing,
}

/// Handles the session's control frames; returns what the frame means.
async fn input(session: &mut Session, streams: &mut Streams, frame: Frame) -> Option<Input> {
    match frame {
        Frame::Control { kind: spdy::SYN_STREAM, payload, .. } => {
            let id = spdy::stream_id(&payload).ok()?;
            let headers = session.inflater.headers(spdy::syn_stream_block(&payload).ok()?).ok()?;
            let kind = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("streamtype")).map(|(_, v)| v.clone()).unwrap_or_default();
            let reply = spdy::syn_reply(id, &session.deflater.block(&[]));
            if !session.send(reply).await {
                return None;
            }
            streams.by_type.insert(kind, id);
            Some(Input::Opened)
        }
        Frame::Control { kind: spdy::HEADERS, payload, .. } => {
            session.inflater.headers(payload.get(4..)?).ok()?;
            Some(Input::Nothing)
        }
        Frame::Control { kind: spdy::PING, flags, payload } => session.send(spdy::control(spdy::PING, flags, &payload)).await.then_some(Input::Nothing),
        Frame::Control { kind: spdy::GOAWAY, .. } => None,
        Frame::Control { kind: spdy::RST_STREAM, payload, .. } => Some(Input::Ended(spdy::stream_id(&payload).ok()?)),
        Frame::Control { .. } => Some(Input::Nothing),
        Frame::Data { stream_id, data, .. } => {
            if !data.is_empty() && !session.send(spdy::id_and_value(spdy::WINDOW_UPDATE, stream_id, data.len() as u32)).await {
                return None;
            }
            Some(Input::Data(stream_id, data))
        }
    }
}

/// Runs an exec (`command`) or an attach (`lines`) in the session.
async fn exec(
    mut session: Session,
    command: Option<(Setup, Vec<String>)>,
    lines: Option<futures::stream::LocalBoxStream<'static, Result<Bytes, std::convert::Infallible>>>,
) {
    let (stdin_flag, tty) = command.as_ref().map_or((false, false), |(s, _)| (s.stdin, s.tty));
    let mut streams = Streams::default();
    // Every stream asked for is open before the command starts, as kubelet waits for them.
    let wanted = expected(stdin_flag, tty);
    let mut early: Vec<(u32, Bytes, bool)> = Vec::new();
    while !wanted.iter().all(|k| streams.id(k).is_some()) {
        let Some(frame) = session.next().await else { return };
        let fin = matches!(&frame, Frame::Data { flags, .. } if flags & spdy::FLAG_FIN != 0);
        match input(&mut session, &mut streams, frame).await {
            None => return,
            Some(Input::Data(id, data)) => early.push((id, data, fin)),
            Some(Input::Ended(id)) => early.push((id, Bytes::new(), true)),
            Some(_) => {}
        }
    }
    let stdout = streams.id("stdout");
    let stderr = streams.id("stderr");
    let error = streams.id("error");
    let (stdin_tx, stdin_rx) = mpsc::unbounded_channel::<Bytes>();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<(u8, Bytes)>();
    let size = Arc::new(Mutex::new((24u16, 80u16)));
    let mut stdin_tx = if stdin_flag { Some(stdin_tx) } else { None };
    let to_stream = |channel: u8| if channel == 2 { stderr } else { stdout };
    let (stdin_id, resize_id) = (streams.id("stdin"), streams.id("resize"));
    let terminal = size.clone();
    let running = async {
        match command {
            Some((setup, command)) => {
                let mut io = Io { stdin: stdin_rx, out: out_tx, pod: setup.pod, env: setup.env, fs: setup.fs, tty: setup.tty.then(|| size.clone()) };
                let outcome = shell::run(&mut io, &command, false).await;
                exit_status(&outcome, &command)
            }
            None => {
                let _keep = (stdin_rx, out_tx.clone());
                let mut lines = lines.expect("an attach streams the container's output");
                while let Some(Ok(line)) = lines.next().await {
                    if out_tx.send((1, line)).is_err() {
                        break;
                    }
                }
                json!({"metadata": {}, "status": "Success"})
            }
        }
    };
    tokio::pin!(running);
    let feed = |id: u32, data: Bytes, fin: bool, stdin_tx: &mut Option<mpsc::UnboundedSender<Bytes>>| {
        if Some(id) == stdin_id {
            if let Some(tx) = stdin_tx.as_ref().filter(|_| !data.is_empty()) {
                let _ = tx.send(data.clone());
            }
            if fin {
                *stdin_tx = None;
            }
        } else if Some(id) == resize_id {
            for object in serde_json::Deserializer::from_slice(&data).into_iter::<Value>().flatten() {
                let rows = object["Height"].as_u64().unwrap_or(24) as u16;
                let cols = object["Width"].as_u64().unwrap_or(80) as u16;
                *terminal.lock().unwrap_or_else(|p| p.into_inner()) = (rows, cols);
            }
        }
    };
    for (id, data, fin) in early.drain(..) {
        feed(id, data, fin, &mut stdin_tx);
    }
    let mut status = None;
    let mut client_gone = false;
    loop {
        tokio::select! {
            done = &mut running, if status.is_none() => status = Some(done),
            frame = session.next(), if !client_gone => match frame {
                Some(frame) => {
                    let fin = matches!(&frame, Frame::Data { flags, .. } if flags & spdy::FLAG_FIN != 0);
                    match input(&mut session, &mut streams, frame).await {
                        None => client_gone = true,
                        Some(Input::Data(id, data)) => feed(id, data, fin, &mut stdin_tx),
                        Some(Input::Ended(id)) => feed(id, Bytes::new(), true, &mut stdin_tx),
                        Some(_) => {}
                    }
                }
                None => {
                    client_gone = true;
                    stdin_tx = None;
                }
            },
            Some((channel, data)) = out_rx.recv() => {
                if let Some(id) = to_stream(channel) {
                    if !session.send(spdy::data(id, false, &data)).await { return; }
                }
            }
        }
        if client_gone {
            // Nobody reads the output any more.
            return;
        }
        if let Some(status) = &status {
            // The output written before the end, then the ends.
            while let Ok((channel, data)) = out_rx.try_recv() {
                if let Some(id) = to_stream(channel) {
                    if !session.send(spdy::data(id, false, &data)).await {
                        return;
                    }
                }
            }
            for id in [stdout, stderr].into_iter().flatten() {
                if !session.send(spdy::data(id, true, &[])).await {
                    return;
                }
            }
            if let Some(id) = error {
                if status["status"] != "Success" {
                    let _ = session.send(spdy::data(id, false, status.to_string().as_bytes())).await;
                }
                let _ = session.send(spdy::data(id, true, &[])).await;
            }
            // The client closes the connection once it has read the ends.
            while session.next().await.is_some() {}
            return;
        }
    }
}

/// Serves port-forward in the session until the client closes it.
async fn portforward(mut session: Session, pod: super::portforward_spdy::Pod) {
    let mut streams = HashMap::new();
    while let Some(frame) = session.next().await {
        let mut out = Vec::new();
        if super::portforward_spdy::handle(frame, &mut session.inflater, &mut session.deflater, &mut streams, &pod, &mut out).is_err() {
            let _ = session.send(spdy::id_and_value(spdy::GOAWAY, 0, 1)).await;
            return;
        }
        for frame in out {
            if !session.send(frame).await {
                return;
            }
        }
    }
}
