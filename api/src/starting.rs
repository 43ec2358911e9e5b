//! What the API answers while kubefold starts.
//!
//! Nothing can be served from the index before the store is open and its
//! event log replayed, which takes a while on a big data dir. The listener
//! is bound first and answers meanwhile as kube-apiserver answers while its
//! post-start hooks run (<https://kubernetes.io/docs/reference/using-api/health-checks/>):
//! `/livez` and `/healthz` pass, since the process is alive and a liveness
//! probe must not restart it in the middle of its replay; `/readyz` fails
//! and names the check that is not done, with how far it is (`?verbose`
//! lists it as kube-apiserver lists its checks); every other request gets
//! 503 ServiceUnavailable with `Retry-After`, a Kubernetes `Status` that
//! says why. Once the index is recovered this server stops accepting,
//! answers the connections it took, and the API's own takes over the same
//! listening socket: no connection is refused or dropped in between (the
//! accept loop is kubefold's own, so no accepted connection can be left in
//! a queue of a server that is stopping).

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::web::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use kubefold_engine::status::Status;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tls::TlsConfig;
use crate::ServerError;

/// How long [`StartingServer::stop`] waits for the connections it accepted
/// to be answered (each answer is immediate; only a client that never sends
/// its request takes that long).
const FINISH: Duration = Duration::from_secs(1);

/// How far the start is, in words ("replaying the event log: 40% ...").
/// The starting server reads it on each request; the start writes it.
#[derive(Clone)]
pub struct StartProgress(Arc<Mutex<String>>);

impl Default for StartProgress {
    fn default() -> Self {
        StartProgress(Arc::new(Mutex::new("opening the data dir".to_string())))
    }
}

impl StartProgress {
    /// Says how far the start is.
    pub fn set(&self, text: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = text.into();
    }

    /// How far the start is.
    pub fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Binds the API's listening socket, once for the whole life of the
/// process: the starting server and then the API serve it in turn.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).map_err(ServerError::Bind)
}

/// The server that answers while kubefold starts; [`StartingServer::stop`]
/// ends it once the API is ready to take over.
pub struct StartingServer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl StartingServer {
    /// Serves `listener` (a clone of it: the socket stays open after
    /// [`StartingServer::stop`]) until stopped, over TLS when `tls` is set,
    /// as the API itself will (HTTP/1.1 only: each answer closes its
    /// connection, so that none outlives this server). Must be called
    /// within the runtime that serves the API.
    pub fn start(listener: &TcpListener, tls: Option<&TlsConfig>, progress: StartProgress) -> Result<StartingServer, ServerError> {
        let tls = match tls {
            Some(tls) => {
                let mut config = crate::tls::server_config(tls).map_err(ServerError::Tls)?;
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
            }
            None => None,
        };
        let listener = listener.try_clone().map_err(ServerError::Bind)?;
        listener.set_nonblocking(true).map_err(ServerError::Bind)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(ServerError::Bind)?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept(listener, tls, progress, stop.clone()));
        Ok(StartingServer { stop, task })
    }

    /// Stops accepting and answers the connections already accepted;
    /// connections not yet accepted wait in the listening socket's backlog
    /// for the API.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Accepts until stopped, then lets the accepted connections finish.
async fn accept(listener: tokio::net::TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, progress: StartProgress, stop: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, tls.clone(), progress.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: try again shortly.
                    tracing::debug!(error = %e, "Could not accept a connection while starting.");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let finished = tokio::time::timeout(FINISH, async { while connections.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        tracing::debug!(open = connections.len(), "Closing connections that sent no request while starting.");
    }
}

/// Answers the one request of a connection, then closes it.
async fn serve(stream: tokio::net::TcpStream, tls: Option<tokio_rustls::TlsAcceptor>, progress: StartProgress) {
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let answer = answer(req.uri().path(), req.uri().query().unwrap_or(""), &progress.get());
        async move { Ok::<_, Infallible>(answer) }
    });
    let http = hyper::server::conn::http1::Builder::new().keep_alive(false).clone();
    let served = match tls {
        Some(tls) => match tls.accept(stream).await {
            Ok(stream) => http.serve_connection(TokioIo::new(stream), service).await,
            Err(e) => {
                tracing::debug!(error = %e, "A TLS handshake failed while starting.");
                return;
            }
        },
        None => http.serve_connection(TokioIo::new(stream), service).await,
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "A connection ended abnormally while starting.");
    }
}

/// Whether the query asks for every check (`verbose`, `verbose=...`).
fn verbose(query: &str) -> bool {
    query.split('&').any(|p| p == "verbose" || p.starts_with("verbose="))
}

/// The answer to a request for `path` while the start is at `now`.
fn answer(path: &str, query: &str, now: &str) -> http::Response<Full<Bytes>> {
    let check = ["livez", "healthz", "readyz"].into_iter().find(|c| {
        let prefix = format!("/{c}");
        path == prefix || path.starts_with(&format!("{prefix}/"))
    });
    let text = |code: u16, body: String| {
        http::Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "text/plain")
            .body(Full::new(Bytes::from(body)))
            .expect("a static answer")
    };
    match check {
        Some("readyz") => {
            let line = format!("[-]store-recovered failed: {now}");
            let body = if verbose(query) { format!("[+]ping ok\n{line}\nreadyz check failed\n") } else { line };
            text(503, body)
        }
        Some(check) => text(200, if verbose(query) { format!("[+]ping ok\n{check} check passed\n") } else { "ok".to_string() }),
        None => {
            let status = Status::new(503, "ServiceUnavailable", format!("kubefold is starting: {now}"));
            http::Response::builder()
                .status(503)
                .header(http::header::CONTENT_TYPE, crate::respond::JSON)
                .header(http::header::RETRY_AFTER, "1")
                .body(Full::new(Bytes::from(status.to_json().to_string())))
                .expect("a static answer")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn body(response: http::Response<Full<Bytes>>) -> (u16, Option<String>, String) {
        let code = response.status().as_u16();
        let retry = response.headers().get("Retry-After").map(|v| v.to_str().unwrap().to_string());
        let bytes = futures::executor::block_on(http_body_util::BodyExt::collect(response.into_body())).unwrap().to_bytes();
        (code, retry, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn answers_health_checks_and_refuses_the_rest_with_a_status() {
        let now = "replaying the event log: 40% (resourceVersion 400 of 1000, about 3 s left)";
        for path in ["/livez", "/healthz", "/livez/ping"] {
            assert_eq!(answer(path, "", now).status(), 200, "{path}");
        }
        let (code, _, text) = body(answer("/readyz", "verbose", now));
        assert_eq!(code, 503);
        assert!(text.contains("[-]store-recovered failed: replaying the event log: 40%"), "{text}");
        assert!(text.ends_with("readyz check failed\n"), "{text}");
        let (code, retry, text) = body(answer("/api/v1/pods", "", now));
        assert_eq!((code, retry.as_deref()), (503, Some("1")));
        let status: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert!(status["message"].as_str().unwrap().starts_with("kubefold is starting: replaying the event log"), "{status}");
    }

    /// Clients connect all the while the starting server stops and a
    /// server of the same socket takes over (as the API does): each gets
    /// an answer from one or the other, none is refused or cut off.
    #[actix_web::test]
    async fn every_connection_is_answered_across_the_takeover() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let starting = StartingServer::start(&listener, None, StartProgress::default()).unwrap();
        let (answered, first_answers) = std::sync::mpsc::channel();
        let clients = std::thread::spawn(move || {
            (0..300)
                .map(|i| {
                    if i == 10 {
                        let _ = answered.send(());
                    }
                    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
                    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    stream.write_all(b"GET /livez HTTP/1.1\r\nHost: kubefold\r\n\r\n").map_err(|e| format!("write: {e}"))?;
                    let mut answer = String::new();
                    stream.read_to_string(&mut answer).map_err(|e| format!("read: {e}"))?;
                    let first = answer.lines().next().unwrap_or_default().to_string();
                    if first.starts_with("HTTP/1.1 200") { Ok(answer.ends_with("after")) } else { Err(format!("answer: {answer:?}")) }
                })
                .collect::<Vec<Result<bool, String>>>()
        });
        // Stopped once ten clients have had their answer.
        tokio::task::spawn_blocking(move || first_answers.recv()).await.unwrap().unwrap();
        starting.stop().await;
        // The API's stand-in: answers every connection on the same socket.
        let after = {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener.try_clone().unwrap()).unwrap();
            tokio::spawn(async move {
                loop {
                    let (mut stream, _) = listener.accept().await.unwrap();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buffer = [0u8; 1024];
                        let _ = stream.read(&mut buffer).await;
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nafter").await;
                    });
                }
            })
        };
        let results = tokio::task::spawn_blocking(move || clients.join().unwrap()).await.unwrap();
        after.abort();
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(failed.is_empty(), "{} of {} connections failed: {:?}", failed.len(), results.len(), &failed[..failed.len().min(3)]);
        let (before, after) = results.iter().fold((0, 0), |(b, a), r| if *r.as_ref().unwrap() { (b, a + 1) } else { (b + 1, a) });
        assert!(before > 0 && after > 0, "answers before the takeover ({before}) and after it ({after})");
    }
}
