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
//! says why. Once the index is recovered this server stops and the API's
//! own takes over the same listening socket, so no connection is refused
//! in between.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use kubefold_engine::status::Status;

use crate::tls::TlsConfig;
use crate::ServerError;

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
    handle: ServerHandle,
    task: actix_web::rt::task::JoinHandle<std::io::Result<()>>,
}

impl StartingServer {
    /// Serves `listener` (a clone of it: the socket stays open after
    /// [`StartingServer::stop`]) until stopped, over TLS when `tls` is set,
    /// as the API itself will.
    pub fn start(listener: &TcpListener, tls: Option<&TlsConfig>, progress: StartProgress) -> Result<StartingServer, ServerError> {
        let tls = tls.map(crate::tls::server_config).transpose().map_err(ServerError::Tls)?;
        let listener = listener.try_clone().map_err(ServerError::Bind)?;
        let progress = web::Data::new(progress);
        let http = HttpServer::new(move || App::new().app_data(progress.clone()).default_service(web::to(answer)))
            .workers(1)
            // Each answer closes its connection, so that no connection
            // outlives this server: the API takes over with none open.
            .keep_alive(actix_web::http::KeepAlive::Disabled)
            // kubefold's own shutdown handling is installed later; a signal
            // now ends the process as it did before there was a listener.
            .disable_signals()
            .shutdown_timeout(1);
        let http = match tls {
            Some(tls) => http.listen_rustls_0_23(listener, tls),
            None => http.listen(listener),
        }
        .map_err(ServerError::Bind)?;
        let server = http.run();
        let handle = server.handle();
        let task = actix_web::rt::spawn(server);
        Ok(StartingServer { handle, task })
    }

    /// Stops accepting and lets the requests it took finish (each answer is
    /// immediate); connections not yet accepted wait in the listening
    /// socket's backlog for the API.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.task.await;
    }
}

/// Whether the query asks for every check (`?verbose`, `?verbose=...`).
fn verbose(req: &HttpRequest) -> bool {
    req.query_string().split('&').any(|p| p == "verbose" || p.starts_with("verbose="))
}

async fn answer(req: HttpRequest, progress: web::Data<StartProgress>) -> HttpResponse {
    let path = req.path();
    let check = ["livez", "healthz", "readyz"].into_iter().find(|c| {
        let prefix = format!("/{c}");
        path == prefix || path.starts_with(&format!("{prefix}/"))
    });
    let now = progress.get();
    match check {
        Some("readyz") => {
            let line = format!("[-]store-recovered failed: {now}");
            let body = if verbose(&req) { format!("[+]ping ok\n{line}\nreadyz check failed\n") } else { line };
            HttpResponse::ServiceUnavailable().content_type("text/plain").body(body)
        }
        Some(check) => {
            let body = if verbose(&req) { format!("[+]ping ok\n{check} check passed\n") } else { "ok".to_string() };
            HttpResponse::Ok().content_type("text/plain").body(body)
        }
        None => {
            let mut status = Status::new(503, "ServiceUnavailable", format!("kubefold is starting: {now}"));
            status.details = Some(kubefold_engine::status::StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
            crate::respond::status(&status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test;

    #[actix_web::test]
    async fn answers_health_checks_and_refuses_the_rest_with_a_status() {
        let progress = StartProgress::default();
        progress.set("replaying the event log: 40% (resourceVersion 400 of 1000, about 3 s left)");
        let app = test::init_service(App::new().app_data(web::Data::new(progress)).default_service(web::to(answer))).await;
        for path in ["/livez", "/healthz", "/livez/ping"] {
            let response = test::call_service(&app, test::TestRequest::get().uri(path).to_request()).await;
            assert_eq!(response.status(), 200, "{path}");
        }
        let response = test::call_service(&app, test::TestRequest::get().uri("/readyz?verbose").to_request()).await;
        assert_eq!(response.status(), 503);
        let body = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
        assert!(body.contains("[-]store-recovered failed: replaying the event log: 40%"), "{body}");
        assert!(body.ends_with("readyz check failed\n"), "{body}");
        let response = test::call_service(&app, test::TestRequest::get().uri("/api/v1/pods").to_request()).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers().get("Retry-After").unwrap(), "1");
        let status: serde_json::Value = serde_json::from_slice(&test::read_body(response).await).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert!(status["message"].as_str().unwrap().starts_with("kubefold is starting: replaying the event log"), "{status}");
    }
}
