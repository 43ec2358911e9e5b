//! Security end to end, over TLS: no credential gets 401, a viewer gets 403
//! on PATCH naming the user and verb, an admin gets 200, a client
//! certificate authenticates, and a member's token never appears in the
//! admin API's answers or in kubefold's logs.

mod common;

use std::path::PathBuf;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::{json, Value};

const VIEWER: &str = "viewer-token-1f2e3d";
const ADMIN: &str = "admin-token-9a8b7c";
const MEMBER_SECRET: &str = "member-bearer-s3cr3t-77";

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "kubefold-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Pki { ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(), dir: tempfile::tempdir().unwrap() }
    }

    fn issue(&self, sans: &[&str], cn: &str, org: Option<&str>) -> (String, String) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn client(pki: &Pki, identity: Option<(String, String)>) -> reqwest::blocking::Client {
    let mut b = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca.pem().as_bytes()).unwrap());
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
    }
    b.build().unwrap()
}

#[test]
fn tokens_certificates_and_secrets_over_tls() {
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["127.0.0.1", "localhost"], "kubefold", None);
    let cert_file = pki.file("tls.crt", &cert);
    let key_file = pki.file("tls.key", &key);
    let ca_file = pki.file("ca.crt", &pki.ca.pem());
    let tokens = pki.file("tokens.csv", &format!("{VIEWER},alice,1001,\"kubefold:viewers\"\n{ADMIN},bob,1002,\"kubefold:admins\"\n"));
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &[
            "--tls-cert-file", cert_file.to_str().unwrap(),
            "--tls-private-key-file", key_file.to_str().unwrap(),
            "--client-ca-file", ca_file.to_str().unwrap(),
            "--token-auth-file", tokens.to_str().unwrap(),
        ],
    );
    assert!(kf.url.starts_with("https://"), "{}", kf.url);
    let anon = client(&pki, None);
    let get = |c: &reqwest::blocking::Client, path: &str, token: Option<&str>| {
        let mut r = c.get(format!("{}{path}", kf.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    assert_eq!(get(&anon, "/healthz", None).0, 200, "health is open");
    common::wait_for(std::time::Duration::from_secs(60), "ready", || get(&anon, "/readyz", None).0 == 200);
    let (code, body) = get(&anon, "/api/v1/pods", None);
    assert_eq!(code, 401, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["reason"], "Unauthorized");
    assert_eq!(get(&anon, "/api/v1/pods", Some(VIEWER)).0, 200);

    let patch = |token: &str| {
        let resp = anon
            .patch(format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url))
            .bearer_auth(token)
            .header("Content-Type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"by":"admin"}}}"#)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let (code, body) = patch(VIEWER);
    assert_eq!(code, 403, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Forbidden");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("User \"alice\"") && message.contains("cannot patch"), "{message}");
    let (code, body) = patch(ADMIN);
    assert_eq!(code, 200, "{body}");

    // A client certificate: CN is the user, O the groups.
    let carol = client(&pki, Some(pki.issue(&[], "carol", Some("kubefold:admins"))));
    assert_eq!(get(&carol, "/admin/v1/clusters", None).0, 200);
    assert_eq!(get(&carol, "/admin/v1/clusters", None).0, 200);
    assert_eq!(get(&anon, "/admin/v1/clusters", Some(VIEWER)).0, 403, "viewers do not administer");

    // A member registered with a token: never shown, never logged.
    let extra = demo_members(1, 0.0);
    let spec = json!({"name": "member9", "url": extra[0].1.url(), "token": MEMBER_SECRET});
    let resp = anon.post(format!("{}/admin/v1/clusters", kf.url)).bearer_auth(ADMIN).json(&spec).send().unwrap();
    let code = resp.status().as_u16();
    let body = resp.text().unwrap();
    assert_eq!(code, 201, "{body}");
    assert!(!body.contains(MEMBER_SECRET), "{body}");
    for path in ["/admin/v1/clusters", "/admin/v1/clusters/member9", "/admin/v1/stats"] {
        let (code, body) = get(&anon, path, Some(ADMIN));
        assert_eq!(code, 200, "{path}");
        assert!(!body.contains(MEMBER_SECRET), "{path}: {body}");
    }
    let (_, body) = get(&anon, "/admin/v1/clusters/member9", Some(ADMIN));
    assert!(body.contains("<redacted>"), "{body}");
    common::wait_for(std::time::Duration::from_secs(30), "member9 synced", || {
        serde_json::from_str::<Value>(&get(&anon, "/admin/v1/clusters/member9", Some(ADMIN)).1).unwrap()["status"]["synced"] == true
    });
    let logs = kf.logs();
    assert!(!logs.contains(MEMBER_SECRET), "a member token appeared in the logs");
    assert!(!logs.contains(ADMIN) && !logs.contains(VIEWER), "a client token appeared in the logs");
    // The data dir holding the registration is private.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    }
}

#[test]
fn a_front_proxy_names_the_user_in_headers_and_only_a_front_proxy_may() {
    let users = Pki::new();
    let proxies = Pki::new();
    let (cert, key) = users.issue(&["127.0.0.1", "localhost"], "kubefold", None);
    let cert_file = users.file("tls.crt", &cert);
    let key_file = users.file("tls.key", &key);
    let client_ca = users.file("ca.crt", &users.ca.pem());
    let proxy_ca = proxies.file("front-proxy-ca.crt", &proxies.ca.pem());
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &[
            "--tls-cert-file", cert_file.to_str().unwrap(),
            "--tls-private-key-file", key_file.to_str().unwrap(),
            "--client-ca-file", client_ca.to_str().unwrap(),
            "--requestheader-client-ca-file", proxy_ca.to_str().unwrap(),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
        ],
    );
    let send = |c: &reqwest::blocking::Client, method: &str, path: &str, headers: &[(&str, &str)]| {
        let mut r = c.request(method.parse().unwrap(), format!("{}{path}", kf.url));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if method == "POST" {
            r = r.json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}));
        }
        let resp = r.send().unwrap();
        (resp.status().as_u16(), resp.json::<Value>().unwrap_or(Value::Null))
    };
    let anon = client(&users, None);
    common::wait_for(std::time::Duration::from_secs(60), "ready", || send(&anon, "GET", "/readyz", &[]).0 == 200);
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let erin = [("X-Remote-User", "erin"), ("X-Remote-Group", "kubefold:viewers"), ("X-Remote-Group", "team-e"), ("X-Remote-Extra-Scopes", "view")];

    // The front proxy's requests are the user its headers name.
    let proxy = client(&users, Some(proxies.issue(&[], "front-proxy-client", None)));
    let (code, body) = send(&proxy, "POST", whoami, &erin);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "erin");
    assert_eq!(body["status"]["userInfo"]["groups"], json!(["kubefold:viewers", "team-e", "system:authenticated"]));
    assert_eq!(send(&proxy, "GET", "/api/v1/pods", &erin).0, 200);
    let (code, body) = send(&proxy, "DELETE", "/api/v1/namespaces/default/pods/web-0_member1", &erin);
    assert_eq!(code, 403, "{body}");
    assert!(body["message"].as_str().unwrap().contains("User \"erin\" cannot delete"), "{body}");
    // Without a user header the proxy's certificate authenticates nobody.
    assert_eq!(send(&proxy, "GET", "/api/v1/pods", &[]).0, 401);

    // A certificate of the proxies' CA with another CN: 401.
    let intruder = client(&users, Some(proxies.issue(&[], "intruder", None)));
    let (code, body) = send(&intruder, "GET", "/api/v1/pods", &erin);
    assert_eq!((code, body["reason"].as_str()), (401, Some("Unauthorized")));
    // The headers from anyone else are ignored: a user's certificate is its CN,
    // no certificate is no one.
    let carol = client(&users, Some(users.issue(&[], "carol", Some("kubefold:admins"))));
    let (code, body) = send(&carol, "POST", whoami, &[("X-Remote-User", "mallory"), ("X-Remote-Group", "system:masters")]);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "carol");
    assert_eq!(send(&anon, "GET", "/api/v1/pods", &erin).0, 401);
    kf.stop();
}
