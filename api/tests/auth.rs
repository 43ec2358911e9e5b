//! Authentication, authorization, request limits and certificate reload over
//! real HTTPS on loopback: a minimal actix-web app behind `kubefold_api::auth::Auth`
//! and `kubefold_api::tls::server_config`, with certificates made by rcgen.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use actix_web::{web, App, HttpMessage as _, HttpRequest, HttpResponse, HttpServer};
use kubefold_api::auth::{Auth, AuthConfig, RequestAttributes, Target, User};
use kubefold_api::tls::{server_config, TlsConfig};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::{json, Value};

const VIEWER_TOKEN: &str = "viewer-token-7f3a2b";
const ADMIN_TOKEN: &str = "admin-token-91cc04";
const WRONG_TOKEN: &str = "wrong-token-55d1e9";

/// Everything written to the logs by any test of this binary.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber per test binary");
        buffer
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A CA and the PEM files of what it issues.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

/// A certificate and its key, PEM.
struct Issued {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca, dir: tempfile::tempdir().unwrap() }
    }

    fn issue(&self, sans: &[&str], common_name: &str, organization: Option<&str>) -> Issued {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, common_name);
        if let Some(o) = organization {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn ca_file(&self) -> PathBuf {
        self.file("ca.crt", &self.ca.pem())
    }

    /// Writes the serving pair; returns the TLS config over it.
    fn serving(&self, pair: &Issued, client_ca: bool) -> TlsConfig {
        let mut tls = TlsConfig::new(self.file("tls.crt", &pair.cert_pem), self.file("tls.key", &pair.key_pem));
        tls.client_ca_file = client_ca.then(|| self.ca_file());
        tls.reload_check_seconds = 0;
        tls
    }
}

fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.csv");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "# token,user,uid,groups").unwrap();
    writeln!(f, "{VIEWER_TOKEN},alice,1001,\"kubefold:viewers\"").unwrap();
    writeln!(f, "{ADMIN_TOKEN},bob,1002,\"kubefold:admins,ops\"").unwrap();
    path
}

/// Echoes who the request was authenticated as and what it asks, after an
/// optional delay (`x-test-delay-ms`).
async fn echo(req: HttpRequest) -> HttpResponse {
    if let Some(ms) = req.headers().get("x-test-delay-ms").and_then(|v| v.to_str().ok()?.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let extensions = req.extensions();
    let user = extensions.get::<User>();
    let attributes = extensions.get::<RequestAttributes>();
    let (resource, cluster) = match attributes.map(|a| &a.target) {
        Some(Target::Resource(r)) => (Some(r.resource_and_subresource()), r.cluster.clone()),
        _ => (None, None),
    };
    HttpResponse::Ok().json(json!({
        "user": user.map(|u| u.name.clone()),
        "groups": user.map(|u| u.groups.clone()),
        "verb": attributes.map(|a| a.verb.clone()),
        "resource": resource,
        "cluster": cluster,
    }))
}

/// Starts the app over HTTPS on a free loopback port.
fn start(auth: &AuthConfig, tls: &TlsConfig) -> SocketAddr {
    let auth = Auth::from_config(auth).unwrap();
    let tls = server_config(tls).unwrap();
    let server = HttpServer::new(move || App::new().wrap(auth.clone()).default_service(web::to(echo)))
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .on_connect(kubefold_api::auth::on_connect)
        .bind_rustls_0_23(("127.0.0.1", 0), tls)
        .unwrap();
    let addr = server.addrs()[0];
    actix_web::rt::spawn(server.run());
    addr
}

/// A client trusting `pki`'s CA, with a client certificate when given; every
/// request on a new connection.
fn client(pki: &Pki, addr: SocketAddr, identity: Option<&Issued>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca.pem().as_bytes()).unwrap())
        .resolve("kubefold.test", addr)
        .pool_max_idle_per_host(0)
        .tls_info(true);
    if let Some(id) = identity {
        let pem = format!("{}{}", id.cert_pem, id.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("https://kubefold.test:{}{path}", addr.port())
}

async fn call(client: &reqwest::Client, method: &str, url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = client.request(method.parse().unwrap(), url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let code = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap();
    (code, body)
}

struct Fleet {
    pki: Pki,
    addr: SocketAddr,
}

/// A server with the token file and client certificates, anonymous off.
fn secured(extra: impl FnOnce(&mut AuthConfig)) -> Fleet {
    let pki = Pki::new("kubefold test CA");
    let serving = pki.issue(&["kubefold.test"], "kubefold", None);
    let tls = pki.serving(&serving, true);
    let mut auth = AuthConfig {
        token_auth_file: Some(token_file(pki.dir.path())),
        client_ca_file: tls.client_ca_file.clone(),
        ..AuthConfig::default()
    };
    extra(&mut auth);
    let addr = start(&auth, &tls);
    Fleet { pki, addr }
}

const POD: &str = "/api/v1/namespaces/default/pods/web-0_member1";

#[actix_web::test]
async fn tokens_authenticate_and_groups_authorize() {
    let logs = logs();
    let f = secured(|_| {});
    let c = client(&f.pki, f.addr, None);

    let (code, body) = call(&c, "GET", &url(f.addr, "/api/v1/pods"), None).await;
    assert_eq!(code, 401);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    let (code, _) = call(&c, "GET", &url(f.addr, "/api/v1/pods"), Some(WRONG_TOKEN)).await;
    assert_eq!(code, 401);

    // A read-only user: 403 on PATCH, worded as kube-apiserver words it; 200 on GET.
    let (code, body) = call(&c, "PATCH", &url(f.addr, POD), Some(VIEWER_TOKEN)).await;
    assert_eq!(code, 403);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"web-0_member1\" is forbidden: User \"alice\" cannot patch resource \"pods\" in API group \"\" in the namespace \"default\"",
               "reason": "Forbidden", "details": {"name": "web-0_member1", "kind": "pods"}, "code": 403})
    );
    let (code, body) = call(&c, "GET", &url(f.addr, POD), Some(VIEWER_TOKEN)).await;
    assert_eq!(code, 200);
    assert_eq!(body["user"], "alice");
    assert_eq!(body["verb"], "get");
    assert_eq!(body["resource"], "pods");
    assert_eq!(body["cluster"], "member1");
    assert_eq!(body["groups"], json!(["kubefold:viewers", "system:authenticated"]));
    let (code, body) = call(&c, "GET", &url(f.addr, "/api/v1/pods?watch=1"), Some(VIEWER_TOKEN)).await;
    assert_eq!((code, body["verb"].as_str()), (200, Some("watch")));
    let (code, _) = call(&c, "GET", &url(f.addr, "/apis/apps/v1"), Some(VIEWER_TOKEN)).await;
    assert_eq!(code, 200, "discovery is open to authenticated users");
    let (code, body) = call(&c, "GET", &url(f.addr, "/metrics"), Some(VIEWER_TOKEN)).await;
    assert_eq!(code, 403);
    assert_eq!(body["message"], "forbidden: User \"alice\" cannot get path \"/metrics\"");

    // An admin: everything.
    let (code, body) = call(&c, "PATCH", &url(f.addr, POD), Some(ADMIN_TOKEN)).await;
    assert_eq!((code, body["user"].as_str(), body["verb"].as_str()), (200, Some("bob"), Some("patch")));
    let (code, _) = call(&c, "POST", &url(f.addr, "/admin/v1/clusters"), Some(ADMIN_TOKEN)).await;
    assert_eq!(code, 200);
    let (code, _) = call(&c, "GET", &url(f.addr, "/metrics"), Some(ADMIN_TOKEN)).await;
    assert_eq!(code, 200);

    // Health paths need no credential.
    for path in ["/livez", "/readyz", "/healthz"] {
        let (code, body) = call(&c, "GET", &url(f.addr, path), None).await;
        assert_eq!((code, &body["user"]), (200, &Value::Null), "{path}");
    }

    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(text.contains("Request forbidden."), "the logs were not captured: {text}");
    for token in [VIEWER_TOKEN, ADMIN_TOKEN, WRONG_TOKEN] {
        assert!(!text.contains(token), "a token is in the logs: {text}");
    }
}

#[actix_web::test]
async fn client_certificates_authenticate() {
    let f = secured(|_| {});
    let carol = f.pki.issue(&[], "carol", Some("kubefold:editors"));
    let c = client(&f.pki, f.addr, Some(&carol));
    let (code, body) = call(&c, "PATCH", &url(f.addr, POD), None).await;
    assert_eq!(code, 200);
    assert_eq!(body["user"], "carol");
    assert_eq!(body["groups"], json!(["kubefold:editors", "system:authenticated"]));
    let (code, body) = call(&c, "GET", &url(f.addr, "/admin/v1/stats"), None).await;
    assert_eq!(code, 403);
    assert_eq!(body["message"], "forbidden: User \"carol\" cannot get path \"/admin/v1/stats\"");
    // The certificate wins over a token, as in kube-apiserver.
    let (_, body) = call(&c, "GET", &url(f.addr, POD), Some(ADMIN_TOKEN)).await;
    assert_eq!(body["user"], "carol");

    // A certificate of another CA is refused during the handshake.
    let other = Pki::new("other CA");
    let mallory = other.issue(&[], "mallory", Some("kubefold:admins"));
    let c = client(&f.pki, f.addr, Some(&mallory));
    let result = c.get(url(f.addr, POD)).send().await;
    let error = format!("{:?}", result.expect_err("a certificate of an unknown CA was accepted"));
    assert!(error.contains("UnknownCA"), "refused for another reason: {error}");
}

#[actix_web::test]
async fn anonymous_access() {
    // Enabled beside authenticators: anonymous gets /version and what rules grant.
    let f = secured(|a| {
        a.anonymous = Some(true);
        a.rules = serde_saphyr::from_str("[{users: ['system:anonymous'], verbs: [get], resources: [configmaps], clusters: [member2]}]").unwrap();
    });
    let c = client(&f.pki, f.addr, None);
    let (code, body) = call(&c, "GET", &url(f.addr, "/version"), None).await;
    assert_eq!((code, body["user"].as_str()), (200, Some("system:anonymous")));
    assert_eq!(body["groups"], json!(["system:unauthenticated"]));
    let (code, body) = call(&c, "GET", &url(f.addr, "/api/v1/pods"), None).await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
    let (code, _) = call(&c, "GET", &url(f.addr, "/clusters/member2/api/v1/namespaces/a/configmaps/c"), None).await;
    assert_eq!(code, 200);
    let (code, _) = call(&c, "GET", &url(f.addr, "/clusters/member1/api/v1/namespaces/a/configmaps/c"), None).await;
    assert_eq!(code, 403);
    // A wrong token is still refused.
    let (code, _) = call(&c, "GET", &url(f.addr, "/version"), Some(WRONG_TOKEN)).await;
    assert_eq!(code, 401);

    // No authenticator at all: authentication is off.
    let pki = Pki::new("open CA");
    let tls = pki.serving(&pki.issue(&["kubefold.test"], "kubefold", None), false);
    let addr = start(&AuthConfig::default(), &tls);
    let c = client(&pki, addr, None);
    let (code, body) = call(&c, "DELETE", &url(addr, "/admin/v1/clusters/member1"), None).await;
    assert_eq!((code, body["user"].as_str()), (200, Some("system:anonymous")));
}

#[actix_web::test]
async fn requests_in_flight_are_limited_per_client() {
    let f = secured(|a| a.max_requests_in_flight_per_client = 1);
    let c = client(&f.pki, f.addr, None);
    let slow = {
        let request = c.get(url(f.addr, POD)).bearer_auth(ADMIN_TOKEN).header("x-test-delay-ms", "1500");
        actix_web::rt::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let response = c.get(url(f.addr, POD)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["details"]["retryAfterSeconds"], 1);
    // Another client is not affected.
    let (code, _) = call(&c, "GET", &url(f.addr, POD), Some(VIEWER_TOKEN)).await;
    assert_eq!(code, 200);
    assert_eq!(slow.await.unwrap().unwrap().status().as_u16(), 200);
    let (code, _) = call(&c, "GET", &url(f.addr, POD), Some(ADMIN_TOKEN)).await;
    assert_eq!(code, 200, "the slot was not released");
}

/// The certificate the server presents to a new client (a new client: a
/// resumed TLS session would show the certificate of the session it resumes).
async fn served_certificate(pki: &Pki, addr: SocketAddr) -> Vec<u8> {
    let response = client(pki, addr, None).get(url(addr, "/healthz")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let info = response.extensions().get::<reqwest::tls::TlsInfo>().expect("tls info");
    info.peer_certificate().expect("a server certificate").to_vec()
}

#[actix_web::test]
async fn serving_certificate_is_reloaded() {
    let pki = Pki::new("reload CA");
    let first = pki.issue(&["kubefold.test"], "first", None);
    let tls = pki.serving(&first, false);
    let addr = start(&AuthConfig::default(), &tls);
    assert_eq!(served_certificate(&pki, addr).await, first.der);

    let second = pki.issue(&["kubefold.test"], "second-with-a-longer-name", None);
    pki.serving(&second, false);
    assert_eq!(served_certificate(&pki, addr).await, second.der);

    // An invalid new certificate: the previous one is still served.
    std::fs::write(&tls.cert_file, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n").unwrap();
    assert_eq!(served_certificate(&pki, addr).await, second.der);
}
