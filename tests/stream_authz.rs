//! Authorization of exec, attach and port-forward as kube-apiserver 1.35
//! does it: the verb follows the method (a WebSocket upgrade is a GET,
//! verb `get`; a SPDY request a POST, verb `create`), and a WebSocket
//! upgrade is authorized a second time as `create`. So `get` on
//! `pods/exec` alone no longer runs a command; `create` alone runs one
//! over POST only.

mod common;

use common::*;

const GET_ONLY: &str = "exec-get-only-token";
const CREATE_ONLY: &str = "exec-create-only-token";
const BOTH: &str = "exec-get-and-create-token";

const RULES: &str = "auth:
  rules:
    - users: [gina, carl, cora]
      verbs: [get, list]
      resources: [pods]
    - users: [gina]
      verbs: [get]
      resources: [pods/exec, pods/attach, pods/portforward]
    - users: [carl]
      verbs: [create]
      resources: [pods/exec, pods/attach, pods/portforward]
    - users: [cora]
      verbs: [get, create]
      resources: [pods/exec, pods/attach, pods/portforward]
";

/// An HTTPS client trusting the test CA.
fn client(pki: &TestPki) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

/// A POST to a pod's subresource with `token`, as a SPDY client starts one
/// (without the upgrade, which kubefold's authorization does not need).
fn post(client: &reqwest::blocking::Client, url: &str, token: &str) -> (u16, String) {
    let response = client.post(url).bearer_auth(token).send().unwrap();
    (response.status().as_u16(), response.text().unwrap_or_default())
}

#[test]
fn a_websocket_exec_needs_create_as_well_as_get() {
    let members = demo_members(1, 0.0);
    let (_config_dir, config) = config_file(RULES);
    // kubectl sends a bearer token over TLS only.
    let tls_dir = tempfile::tempdir().unwrap();
    let pki = TestPki::write(tls_dir.path());
    let tokens = tls_dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{GET_ONLY},gina,1\n{CREATE_ONLY},carl,2\n{BOTH},cora,3\n")).unwrap();
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(
        &data,
        &cluster_flags(&members),
        &[
            "--config", &config,
            "--token-auth-file", tokens.to_str().unwrap(),
            "--tls-cert-file", pki.cert_file.to_str().unwrap(),
            "--tls-private-key-file", pki.key_file.to_str().unwrap(),
        ],
    );
    let client = client(&pki);
    wait_for(std::time::Duration::from_secs(60), "kubefold ready", || {
        client.get(format!("{}/readyz", kf.url)).send().is_ok_and(|r| r.status() == 200)
    });
    let exec = format!("{}/api/v1/namespaces/default/pods/web-0_member1/exec?command=hostname&stdout=true", kf.url);

    // POST is create: carl's rule admits it (the member then refuses a
    // request that is not an upgrade), gina's does not.
    let (code, body) = post(&client, &exec, CREATE_ONLY);
    assert!(code == 400 && body.contains("\"kind\":\"Status\""), "create-only POST reaches the member: {code} {body}");
    let (code, body) = post(&client, &exec, GET_ONLY);
    assert!(code == 403 && body.contains("cannot create resource \\\"pods/exec\\\""), "{code} {body}");

    if let Some(missing) = kubectl_missing(&["1.33"]) {
        println!("SKIPPED the kubectl part: {missing}");
        kf.stop();
        return;
    }
    let bin = kubectl_version("1.33");
    let ca = pki.ca_file.to_str().unwrap();
    let kubectl_as = |token: &str, args: &[&str]| {
        let mut all = vec!["--server", kf.url.as_str(), "--certificate-authority", ca, "--token", token];
        all.extend_from_slice(args);
        kubectl_bin(&bin, &all, None)
    };
    let kubectl_exec = |token: &str| kubectl_as(token, &["exec", "-n", "default", "web-0_member1", "--", "hostname"]);
    // kubectl 1.33 execs over WebSocket (a GET).
    let (ok, out, err) = kubectl_exec(BOTH);
    assert!(ok && out == "web-0\n", "get and create: {out}{err}");
    let (ok, out, err) = kubectl_exec(GET_ONLY);
    assert!(!ok && err.contains("cannot create resource \"pods/exec\""), "get only: {out}{err}");
    // create alone: the WebSocket GET is refused (no get), and kubectl
    // falls back to SPDY's POST, which is admitted and forwarded (over
    // TLS here), as kube-apiserver admits it with create.
    let (ok, out, err) = kubectl_exec(CREATE_ONLY);
    assert!(ok && out == "web-0\n", "create only: {out}{err}");
    let response = client.get(&exec).bearer_auth(CREATE_ONLY).send().unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body = response.text().unwrap();
    assert!(body.contains("cannot get resource \\\"pods/exec\\\""), "{body}");
    // Attach is authorized alike.
    let (ok, _, err) = kubectl_as(GET_ONLY, &["attach", "-n", "default", "web-0_member1"]);
    assert!(!ok && err.contains("cannot create resource \"pods/attach\""), "attach, get only: {err}");
    kf.stop();
}
