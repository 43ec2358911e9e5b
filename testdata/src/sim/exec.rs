//! `pods/exec`, `pods/attach` and `pods/portforward` over WebSocket, as
//! kube-apiserver serves them in front of a kubelet (Kubernetes docs
//! "Get a Shell to a Running Container", "Use Port Forwarding to Access
//! Applications in a Cluster"; KEP-4006 "Transition from SPDY to
//! WebSockets").
//!
//! - exec and attach speak the channel protocols `v5.channel.k8s.io` and
//!   `v4.channel.k8s.io`: every binary message starts with its channel,
//!   0 stdin, 1 stdout, 2 stderr, 3 error (a `Status` at the end: `Success`,
//!   or `Failure` with reason `NonZeroExitCode` and a cause `ExitCode`
//!   carrying the code, as kubelet writes it), 4 resize (`{"Width","Height"}`
//!   JSON). v5 adds the close signal: channel 255 with the channel closed
//!   (stdin) as its data. The command runs in [`super::shell`].
//! - port-forward speaks `v4.channel.k8s.io` / `portforward.k8s.io`: for
//!   the i-th port of the `ports` query, channel 2i carries data and 2i+1
//!   errors; the first message of each channel carries the port, two bytes
//!   little-endian. Each declared container port answers HTTP/1.1 requests
//!   with the pod's name; another port answers on its error channel as
//!   kubelet does when nothing listens.
//! - attach streams the container's output (its log lines from now on,
//!   [`super::logs`]) on stdout; attaching to an ephemeral container
//!   (`kubectl debug -i`) runs its command with the attached stdin.
//!
//! - port-forward also speaks SPDY/3.1 tunnelled in WebSocket, as kubectl
//!   1.31+ does (`SPDY/3.1+portforward.k8s.io`, [`super::portforward_spdy`]).
//!
//! SPDY/3.1 upgrades of HTTP itself (kubectl 1.27 to 1.30) are served by
//! [`super::exec_spdy`]; a request with neither upgrade gets 400 BadRequest.

use std::sync::{Arc, Mutex};

use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use actix_ws::{AggregatedMessage, Session};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::list::query_value;
use super::shell::{self, Io, Outcome};
use super::status::ApiError;
use super::Shared;

/// Channel protocols of exec and attach, preferred first.
const EXEC_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// Protocols of port-forward over WebSocket.
const PORTFORWARD_PROTOCOLS: [&str; 3] = ["v4.channel.k8s.io", "portforward.k8s.io", super::portforward_spdy::PROTOCOL];

/// The close frame at the end of a stream: 1000 normal closure, which
/// client-go reads as the end of every channel (without a code it reports
/// an error).
fn normal_close() -> actix_ws::CloseReason {
    actix_ws::CloseReason { code: actix_ws::CloseCode::Normal, description: None }
}

/// A streaming subresource of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// `exec`, `attach` or `portforward`.
    pub subresource: String,
}

/// The pod and subresource of `/api/v1/namespaces/{ns}/pods/{name}/{exec|attach|portforward}`.
pub fn target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match parts.as_slice() {
        ["", "api", "v1", "namespaces", ns, "pods", name, sub] if ["exec", "attach", "portforward"].contains(sub) => {
            Some(Target { namespace: ns.to_string(), name: name.to_string(), subresource: sub.to_string() })
        }
        _ => None,
    }
}

/// Serves a streaming subresource: the WebSocket upgrade, then the stream.
pub async fn serve(req: HttpRequest, payload: web::Payload, shared: Arc<Shared>, target: Target) -> HttpResponse {
    match start(req, payload, shared, target).await {
        Ok(response) => response,
        Err(error) => error.error_response(),
    }
}

async fn start(req: HttpRequest, payload: web::Payload, shared: Arc<Shared>, target: Target) -> Result<HttpResponse, ApiError> {
    if !matches!(*req.method(), actix_web::http::Method::GET | actix_web::http::Method::POST) {
        return Err(ApiError::MethodNotAllowed);
    }
    let query: Vec<(String, String)> = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::BadRequest(format!("invalid query: {e}")))?;
    let index = shared
        .catalog()
        .iter()
        .position(|r| r.group.is_empty() && r.plural == "pods")
        .ok_or(ApiError::PathNotFound)?;
    let pod = {
        let store = shared.read()?;
        super::ops::get(&store, index, Some(&target.namespace), &target.name)?.value()
    };
    let container = container(&pod, query_value(&query, "container"))?;
    if kubefold_listen::is_spdy_upgrade(&req) {
        if pod["status"]["phase"].as_str() != Some("Running") {
            return Err(ApiError::BadRequest(format!("unable to upgrade connection: container not found (\"{container}\")")));
        }
        let work = spdy_work(&shared, index, &target, &pod, &container, &query)?;
        return super::exec_spdy::start(&req, payload, work);
    }
    let websocket = req
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let protocols: &[&str] = if target.subresource == "portforward" { &PORTFORWARD_PROTOCOLS } else { &EXEC_PROTOCOLS };
    let offered = req.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let chosen = offered.split(',').map(str::trim).find(|p| protocols.contains(p)).map(str::to_string);
    let Some(chosen) = chosen.filter(|_| websocket) else {
        return Err(ApiError::BadRequest(format!(
            "Upgrade request required: {} is served over WebSocket with the subprotocols {}",
            target.subresource,
            protocols.join(", ")
        )));
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    if phase != "Running" {
        return Err(ApiError::BadRequest(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    }
    let (response, session, messages) =
        actix_ws::handle_with_protocols(&req, payload, &[chosen.as_str()]).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let messages = messages.max_frame_size(1 << 20).aggregate_continuations().max_continuation_size(16 << 20);
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let v5 = chosen == "v5.channel.k8s.io";
    match target.subresource.as_str() {
        "exec" => {
            let command: Vec<String> = query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
            if command.is_empty() {
                return Err(ApiError::BadRequest("you must specify at least 1 command".into()));
            }
            let flag = |name: &str| query_value(&query, name).is_some_and(|v| v == "true" || v == "1");
            let io_setup = Setup {
                pod: target.name.clone(),
                env: environment(&pod, &container),
                fs: shell::filesystem(&uid, &target.name, &container),
                tty: flag("tty"),
                stdin: flag("stdin"),
                v5,
            };
            actix_web::rt::spawn(exec(session, messages, io_setup, command));
        }
        // An ephemeral container (`kubectl debug -i`) runs its command on
        // attach, with the attached stdin (no command: `sh`).
        "attach" if ephemeral_command(&pod, &container).is_some() => {
            let command = ephemeral_command(&pod, &container).unwrap_or_default();
            let flag = |name: &str| query_value(&query, name).is_some_and(|v| v == "true" || v == "1");
            let io_setup = Setup {
                pod: target.name.clone(),
                env: environment(&pod, &container),
                fs: shell::filesystem(&uid, &target.name, &container),
                tty: flag("tty"),
                stdin: flag("stdin"),
                v5,
            };
            actix_web::rt::spawn(exec(session, messages, io_setup, command));
        }
        "attach" => {
            let options = super::logs::LogOptions { container: Some(container.clone()), follow: true, tail_lines: Some(0), ..Default::default() };
            let source = super::logs::source(&pod, &options)?;
            let key = super::store::key(Some(&target.namespace), &target.name);
            let lines = super::logs::stream(shared.clone(), index, key, source, options);
            actix_web::rt::spawn(attach(session, messages, lines));
        }
        // kubectl 1.31+: SPDY tunnelled in WebSocket; the ports are in its streams' headers.
        _ if chosen == super::portforward_spdy::PROTOCOL => {
            let pod = super::portforward_spdy::Pod { name: target.name.clone(), uid, ports: declared_ports(&pod) };
            actix_web::rt::spawn(super::portforward_spdy::serve(session, messages, pod));
        }
        _ => {
            let ports = ports(&query)?;
            let declared = declared_ports(&pod);
            actix_web::rt::spawn(portforward(session, messages, ports, declared, target.name.clone(), uid));
        }
    }
    Ok(response)
}

/// What an exec, attach or port-forward over a SPDY upgrade runs.
fn spdy_work(
    shared: &Arc<Shared>,
    index: usize,
    target: &Target,
    pod: &Value,
    container: &str,
    query: &[(String, String)],
) -> Result<super::exec_spdy::Work, ApiError> {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let flag = |name: &str| query_value(query, name).is_some_and(|v| v == "true" || v == "1");
    let setup = || Setup {
        pod: target.name.clone(),
        env: environment(pod, container),
        fs: shell::filesystem(&uid, &target.name, container),
        tty: flag("tty"),
        stdin: flag("stdin"),
        v5: false,
    };
    let command = match target.subresource.as_str() {
        "exec" => query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect(),
        "attach" => ephemeral_command(pod, container).unwrap_or_default(),
        _ => {
            let pod = super::portforward_spdy::Pod { name: target.name.clone(), uid, ports: declared_ports(pod) };
            return Ok(super::exec_spdy::Work::PortForward(pod));
        }
    };
    if !command.is_empty() {
        return Ok(super::exec_spdy::Work::Exec { setup: setup(), command });
    }
    if target.subresource == "exec" {
        return Err(ApiError::BadRequest("you must specify at least 1 command".into()));
    }
    let options = super::logs::LogOptions { container: Some(container.to_string()), follow: true, tail_lines: Some(0), ..Default::default() };
    let source = super::logs::source(pod, &options)?;
    let key = super::store::key(Some(&target.namespace), &target.name);
    let lines = super::logs::stream(shared.clone(), index, key, source, options);
    Ok(super::exec_spdy::Work::Attach(Box::pin(lines)))
}

/// The container a request names, or the pod's only (or default) one.
fn container(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let names: Vec<&str> = pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    // An ephemeral container (`kubectl debug`) is reached once it runs.
    let ephemeral = |name: &str| {
        pod["status"]["ephemeralContainerStatuses"].as_array().into_iter().flatten().any(|s| s["name"] == name && s["state"]["running"].is_object())
    };
    match asked.filter(|a| !a.is_empty()) {
        Some(name) if names.contains(&name) || ephemeral(name) => Ok(name.to_string()),
        Some(name) => Err(ApiError::BadRequest(format!("container {name} is not valid for pod {pod_name}"))),
        None => {
            let default = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str();
            default.or(names.first().copied()).map(str::to_string).ok_or_else(|| {
                ApiError::BadRequest(format!("a container name must be specified for pod {pod_name}"))
            })
        }
    }
}

/// The command and arguments of an ephemeral container of the pod (`sh`
/// when it names none), `None` for any other container.
fn ephemeral_command(pod: &Value, container: &str) -> Option<Vec<String>> {
    let spec = pod["spec"]["ephemeralContainers"].as_array()?.iter().find(|c| c["name"] == container)?;
    let strings = |v: &Value| -> Vec<String> { v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect() };
    let mut command = strings(&spec["command"]);
    command.extend(strings(&spec["args"]));
    if command.is_empty() {
        command.push("sh".to_string());
    }
    Some(command)
}

/// The container's environment: its `env` values and what kubelet sets.
fn environment(pod: &Value, container: &str) -> Vec<(String, String)> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let mut env = vec![
        ("PATH".to_string(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
        ("HOSTNAME".to_string(), name.to_string()),
        ("KUBERNETES_SERVICE_HOST".to_string(), "10.96.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT".to_string(), "443".to_string()),
    ];
    let spec = pod["spec"]["containers"].as_array().into_iter().flatten().find(|c| c["name"] == container);
    for var in spec.and_then(|c| c["env"].as_array()).into_iter().flatten() {
        if let (Some(k), Some(v)) = (var["name"].as_str(), var["value"].as_str()) {
            env.push((k.to_string(), v.to_string()));
        }
    }
    env.push(("HOME".to_string(), "/root".to_string()));
    env
}

/// What an exec runs with.
pub(super) struct Setup {
    /// The pod's name.
    pub(super) pod: String,
    /// The container's environment.
    pub(super) env: Vec<(String, String)>,
    /// The container's filesystem.
    pub(super) fs: Arc<Mutex<shell::Filesystem>>,
    /// `tty=true`.
    pub(super) tty: bool,
    /// `stdin=true`.
    pub(super) stdin: bool,
    /// The WebSocket protocol is v5 (its close signal).
    pub(super) v5: bool,
}

/// The Status of the error channel at the end of an exec, as kubelet writes it.
pub fn exit_status(outcome: &Outcome, command: &[String]) -> Value {
    match outcome {
        Outcome::Exit(0) => json!({"metadata": {}, "status": "Success"}),
        Outcome::Exit(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Outcome::NotFound(message) => json!({"metadata": {}, "status": "Failure", "message": message}),
    }
}

async fn exec(mut session: Session, mut messages: actix_ws::AggregatedMessageStream, setup: Setup, command: Vec<String>) {
    let (stdin_tx, stdin_rx) = mpsc::unbounded_channel::<Bytes>();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<(u8, Bytes)>();
    let size = Arc::new(Mutex::new((24u16, 80u16)));
    let mut io = Io {
        stdin: stdin_rx,
        out: out_tx,
        pod: setup.pod,
        env: setup.env,
        fs: setup.fs,
        tty: setup.tty.then(|| size.clone()),
    };
    let mut stdin_tx = if setup.stdin { Some(stdin_tx) } else { None };
    let running = shell::run(&mut io, &command, false);
    tokio::pin!(running);
    let mut outcome = None;
    let mut client_gone = false;
    loop {
        tokio::select! {
            done = &mut running, if outcome.is_none() => {
                outcome = Some(done);
            }
            message = messages.next(), if !client_gone => match message {
                Some(Ok(AggregatedMessage::Binary(data))) if !data.is_empty() => match data[0] {
                    0 => { if let Some(tx) = &stdin_tx { let _ = tx.send(data.slice(1..)); } }
                    4 => {
                        if let Ok(resize) = serde_json::from_slice::<Value>(&data[1..]) {
                            let rows = resize["Height"].as_u64().unwrap_or(24) as u16;
                            let cols = resize["Width"].as_u64().unwrap_or(80) as u16;
                            *size.lock().unwrap_or_else(|p| p.into_inner()) = (rows, cols);
                        }
                    }
                    255 if setup.v5 && data.get(1) == Some(&0) => stdin_tx = None,
                    _ => {}
                },
                Some(Ok(AggregatedMessage::Ping(p))) => { let _ = session.pong(&p).await; }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => { client_gone = true; stdin_tx = None; }
            },
            Some((channel, data)) = out_rx.recv() => {
                let mut frame = Vec::with_capacity(data.len() + 1);
                frame.push(channel);
                frame.extend_from_slice(&data);
                if session.binary(frame).await.is_err() { return; }
            }
        }
        if let Some(outcome) = &outcome {
            // Flush the output written before the end.
            while let Ok((channel, data)) = out_rx.try_recv() {
                let mut frame = vec![channel];
                frame.extend_from_slice(&data);
                if session.binary(frame).await.is_err() {
                    return;
                }
            }
            let mut frame = vec![3u8];
            frame.extend_from_slice(exit_status(outcome, &command).to_string().as_bytes());
            let _ = session.binary(frame).await;
            let _ = session.close(Some(normal_close())).await;
            return;
        }
        if client_gone && outcome.is_none() && !setup.stdin {
            // Nobody reads the output any more.
            return;
        }
    }
}

async fn attach(
    mut session: Session,
    mut messages: actix_ws::AggregatedMessageStream,
    lines: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>>,
) {
    tokio::pin!(lines);
    loop {
        tokio::select! {
            line = lines.next() => match line {
                Some(Ok(line)) => {
                    let mut frame = vec![1u8];
                    frame.extend_from_slice(&line);
                    if session.binary(frame).await.is_err() { return; }
                }
                _ => {
                    let _ = session.binary([&[3u8][..], json!({"metadata": {}, "status": "Success"}).to_string().as_bytes()].concat()).await;
                    let _ = session.close(Some(normal_close())).await;
                    return;
                }
            },
            message = messages.next() => match message {
                Some(Ok(AggregatedMessage::Ping(p))) => { let _ = session.pong(&p).await; }
                Some(Ok(AggregatedMessage::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

/// The `ports` of a port-forward request (repeated or comma-separated).
fn ports(query: &[(String, String)]) -> Result<Vec<u16>, ApiError> {
    let mut ports = Vec::new();
    for (_, value) in query.iter().filter(|(k, _)| k == "ports") {
        for p in value.split(',').filter(|p| !p.is_empty()) {
            let port = p.trim().parse::<u16>().ok().filter(|p| *p > 0);
            ports.push(port.ok_or_else(|| ApiError::BadRequest(format!("unable to parse \"{p}\" as a port: invalid port")))?);
        }
    }
    if ports.is_empty() {
        return Err(ApiError::BadRequest("query parameter \"port\" is required".into()));
    }
    Ok(ports)
}

fn declared_ports(pod: &Value) -> Vec<u16> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| p["containerPort"].as_u64())
        .filter_map(|p| u16::try_from(p).ok())
        .collect()
}

/// The answers of the HTTP responder behind a port to the requests in `buffer`
/// (complete ones are removed).
pub(super) fn http_answers(buffer: &mut Vec<u8>, pod: &str) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        if buffer.len() < end + 4 + length {
            break;
        }
        buffer.drain(..end + 4 + length);
        let body = format!("{pod}\n");
        out.extend_from_slice(
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes(),
        );
    }
    out
}

async fn portforward(
    mut session: Session,
    mut messages: actix_ws::AggregatedMessageStream,
    ports: Vec<u16>,
    declared: Vec<u16>,
    pod: String,
    uid: String,
) {
    for (i, port) in ports.iter().enumerate() {
        for channel in [2 * i as u8, 2 * i as u8 + 1] {
            let mut frame = vec![channel];
            frame.extend_from_slice(&port.to_le_bytes());
            if session.binary(frame).await.is_err() {
                return;
            }
        }
    }
    let mut buffers: Vec<Vec<u8>> = vec![Vec::new(); ports.len()];
    let mut seen_prefix = vec![false; ports.len()];
    while let Some(message) = messages.next().await {
        let data = match message {
            Ok(AggregatedMessage::Binary(data)) if !data.is_empty() => data,
            Ok(AggregatedMessage::Ping(p)) => {
                let _ = session.pong(&p).await;
                continue;
            }
            Ok(AggregatedMessage::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        };
        let channel = data[0] as usize;
        let index = channel / 2;
        if channel % 2 == 1 || index >= ports.len() {
            continue;
        }
        let mut payload = &data[1..];
        if !seen_prefix[index] {
            // The client's first frame on a channel carries the port too.
            seen_prefix[index] = true;
            if payload.len() >= 2 && u16::from_le_bytes([payload[0], payload[1]]) == ports[index] {
                payload = &payload[2..];
            }
        }
        let port = ports[index];
        let answer = if declared.contains(&port) {
            buffers[index].extend_from_slice(payload);
            let answer = http_answers(&mut buffers[index], &pod);
            if answer.is_empty() {
                continue;
            }
            (channel as u8, answer)
        } else {
            let message = format!(
                "error forwarding port {port} to pod {pod}, uid {uid}: failed to connect to localhost:{port} inside namespace: connection refused"
            );
            (channel as u8 + 1, message.into_bytes())
        };
        let mut frame = vec![answer.0];
        frame.extend_from_slice(&answer.1);
        if session.binary(frame).await.is_err() {
            return;
        }
    }
    let _ = session.close(Some(normal_close())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_pod_streaming_subresources() {
        assert_eq!(
            target("/api/v1/namespaces/default/pods/web-0/exec"),
            Some(Target { namespace: "default".into(), name: "web-0".into(), subresource: "exec".into() })
        );
        assert!(target("/api/v1/namespaces/default/pods/web-0/log").is_none());
        assert!(target("/api/v1/namespaces/default/pods/web-0").is_none());
    }

    #[test]
    fn nonzero_exit_codes_are_reported_as_kubelet_does() {
        let status = exit_status(&Outcome::Exit(3), &["sh".into(), "-c".into(), "exit 3".into()]);
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert_eq!(exit_status(&Outcome::Exit(0), &[])["status"], "Success");
    }

    #[test]
    fn the_http_responder_answers_each_complete_request() {
        let mut buffer = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab".to_vec();
        let answer = String::from_utf8(http_answers(&mut buffer, "web-0")).unwrap();
        assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 1);
        assert!(answer.ends_with("\r\n\r\nweb-0\n"));
        buffer.push(b'c');
        assert_eq!(String::from_utf8(http_answers(&mut buffer, "web-0")).unwrap().matches("200 OK").count(), 1);
        assert!(buffer.is_empty());
    }
}
