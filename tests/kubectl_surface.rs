//! kubectl's surface through kubefold: access reviews answered by kubefold's
//! authorizer (`kubectl auth can-i`, `--list`, `whoami`), creates placed by
//! annotation or placement rule (`kubectl apply -f`, `create -f`, `apply
//! --server-side`), pass-through of what kubefold does not aggregate under
//! `/clusters/{c}`, and every route kubectl uses answering within a second.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const VIEWER: &str = "viewer-token-5c1d";
const EDITOR: &str = "editor-token-8e2f";
const ADMIN: &str = "admin-token-3a7b";
/// A user whose only rule (config `auth.rules`) lets it read pods of member1.
const DAVE: &str = "dave-token-6d4c";

/// The kubectl 1.33 binary beside the dispatcher, or `None` (the test is
/// then skipped with a message naming it).
fn kubectl_133() -> Option<String> {
    kubectl_minor("1.33")
}

fn kubectl_minor(minor: &str) -> Option<String> {
    let dispatcher = std::process::Command::new("which").arg("kubectl").output().ok()?;
    let dispatcher = std::fs::canonicalize(String::from_utf8_lossy(&dispatcher.stdout).trim()).ok()?;
    let path = dispatcher.with_file_name(format!("kubectl.{minor}"));
    if path.exists() {
        Some(path.to_string_lossy().into_owned())
    } else {
        eprintln!("skipped: {} is not installed", path.display());
        None
    }
}

/// kubefold over TLS with viewer, editor and admin tokens (kubectl sends
/// bearer tokens over TLS only).
struct Secure {
    kf: Kubefold,
    ca: PathBuf,
    client: reqwest::blocking::Client,
    _dir: tempfile::TempDir,
    _data: tempfile::TempDir,
}

impl Secure {
    fn start(members: &[(String, kubefold_testdata::SimHandle)], extra: &[&str]) -> Secure {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let ca = write("tls.crt", &cert.pem());
        let key_file = write("tls.key", &key.serialize_pem());
        let tokens = write(
            "tokens.csv",
            &format!("{VIEWER},vera,101,\"kubefold:viewers\"\n{EDITOR},ed,102,\"kubefold:editors\"\n{ADMIN},ada,103,\"kubefold:admins\"\n{DAVE},dave,104\n"),
        );
        let config = write("kubefold.yaml", "auth:\n  rules:\n    - users: [dave]\n      verbs: [get, list, watch]\n      resources: [pods]\n      clusters: [member1]\n");
        let (data, path) = data_dir();
        let mut args = vec![
            "--tls-cert-file", ca.to_str().unwrap(),
            "--tls-private-key-file", key_file.to_str().unwrap(),
            "--token-auth-file", tokens.to_str().unwrap(),
            "--config", config.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let kf = Kubefold::serve(&path, &cluster_flags(members), &args);
        let client = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(cert.pem().as_bytes()).unwrap())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let secure = Secure { kf, ca, client, _dir: dir, _data: data };
        wait_for(Duration::from_secs(60), "kubefold ready", || secure.request("GET", "/readyz", None, None).0 == 200);
        secure
    }

    fn request(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
        let mut r = self.client.request(method.parse().unwrap(), format!("{}{path}", self.kf.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            r = r.json(b);
        }
        let response = r.send().unwrap();
        let code = response.status().as_u16();
        (code, serde_json::from_str(&response.text().unwrap()).unwrap_or(Value::Null))
    }

    /// kubectl `bin` with `token`, against `path` under kubefold's URL.
    fn kubectl(&self, bin: &str, token: &str, server_path: &str, args: &[&str]) -> (bool, String, String) {
        let server = format!("{}{server_path}", self.kf.url);
        let mut all = vec!["--server", &server, "--certificate-authority", self.ca.to_str().unwrap(), "--token", token];
        all.extend_from_slice(args);
        kubectl_bin(bin, &all, None)
    }
}

/// `kubectl auth can-i` answers: exit 0 and "yes", or exit 1 and "no".
fn can_i(secure: &Secure, bin: &str, token: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let (ok, out, err) = secure.kubectl(bin, token, "", &all);
    match out.trim() {
        "yes" => assert!(ok, "{args:?}: yes but failed: {err}"),
        "no" => assert!(!ok, "{args:?}: no but succeeded"),
        other => panic!("{args:?}: neither yes nor no: {other:?} {err}"),
    }
    ok
}

#[test]
fn access_reviews_answer_what_kubefold_allows() {
    let Some(bin) = kubectl_133() else { return };
    let members = demo_members(1, 0.0);
    let secure = Secure::start(&members, &[]);
    let s = &secure;
    let allowed = |code: u16| code != 403 && code != 401;
    // Discovery names the review groups, legacy and aggregated.
    let (_, apis) = s.request("GET", "/apis", Some(VIEWER), None);
    let groups: Vec<&str> = apis["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert!(groups.contains(&"authorization.k8s.io") && groups.contains(&"authentication.k8s.io"), "{groups:?}");
    let (code, list) = s.request("GET", "/apis/authorization.k8s.io/v1", Some(VIEWER), None);
    assert_eq!(code, 200, "{list}");
    assert!(list["resources"].as_array().unwrap().iter().any(|r| r["name"] == "selfsubjectaccessreviews" && r["verbs"] == json!(["create"])), "{list}");
    let (ok, out, err) = s.kubectl(&bin, VIEWER, "", &["api-resources", "--api-group=authorization.k8s.io", "--no-headers"]);
    assert!(ok && out.contains("selfsubjectaccessreviews") && out.contains("subjectaccessreviews"), "{out}{err}");

    for token in [VIEWER, EDITOR, ADMIN] {
        // list pods: what a list of pods gets.
        let (code, _) = s.request("GET", "/api/v1/pods", Some(token), None);
        assert_eq!(can_i(s, &bin, token, &["list", "pods"]), allowed(code), "{token}: list pods");
        // create deployments -n x: what a create gets (the member may
        // still refuse it, kubefold's authorizer does not).
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d_member1"}, "spec": {}});
        let (code, body) = s.request("POST", "/apis/apps/v1/namespaces/x/deployments", Some(token), Some(&deployment));
        assert_eq!(can_i(s, &bin, token, &["create", "deployments", "-n", "x"]), allowed(code), "{token}: create deployments: {code} {body}");
        // get secrets of a member: what the pass-through gets.
        let (code, _) = s.request("GET", "/clusters/member1/api/v1/namespaces/default/secrets", Some(token), None);
        assert_eq!(can_i(s, &bin, token, &["get", "secrets", "-n", "default"]), allowed(code), "{token}: get secrets");
        // '*' '*': everything, the admin API included.
        let (code, _) = s.request("GET", "/admin/v1/stats", Some(token), None);
        let everything = can_i(s, &bin, token, &["*", "*"]);
        assert_eq!(everything, allowed(code), "{token}: * *");
        assert_eq!(everything, token == ADMIN);
        // whoami: the user of the token.
        let (ok, out, err) = s.kubectl(&bin, token, "", &["auth", "whoami", "-o", "json"]);
        assert!(ok, "{err}");
        let review: Value = serde_json::from_str(&out).unwrap();
        let (name, group) = match token {
            VIEWER => ("vera", "kubefold:viewers"),
            EDITOR => ("ed", "kubefold:editors"),
            _ => ("ada", "kubefold:admins"),
        };
        assert_eq!(review["status"]["userInfo"]["username"], name, "{review}");
        let groups = review["status"]["userInfo"]["groups"].as_array().unwrap();
        assert!(groups.contains(&json!(group)) && groups.contains(&json!("system:authenticated")), "{review}");
    }
    // A rule limited to a cluster: the question names the cluster as the
    // request does (its /clusters/{c} scope, or a qualified name).
    let (code, _) = s.request("GET", "/api/v1/pods", Some(DAVE), None);
    assert_eq!(code, 403);
    assert!(!can_i(s, &bin, DAVE, &["list", "pods"]), "fleet-wide");
    let (code, _) = s.request("GET", "/api/v1/namespaces/default/pods/web-0_member1", Some(DAVE), None);
    assert_eq!(code, 200);
    assert!(can_i(s, &bin, DAVE, &["get", "pods/web-0_member1", "-n", "default"]), "a qualified name");
    let (code, _) = s.request("GET", "/clusters/member1/api/v1/pods", Some(DAVE), None);
    assert_eq!(code, 200);
    let (ok, out, err) = s.kubectl(&bin, DAVE, "/clusters/member1", &["auth", "can-i", "list", "pods"]);
    assert!(ok && out.trim() == "yes", "under /clusters/member1: {out}{err}");
    let (ok, out, _) = s.kubectl(&bin, DAVE, "/clusters/member1", &["auth", "can-i", "delete", "pods"]);
    assert!(!ok && out.trim() == "no");

    // can-i --list: the rules as the authorizer applies them.
    let rules = |token: &str| {
        let (ok, out, err) = s.kubectl(&bin, token, "", &["auth", "can-i", "--list", "-n", "default"]);
        assert!(ok, "{err}");
        out.lines()
            .skip(1)
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols[0].to_string(), l[l.rfind('[').unwrap()..].to_string())
            })
            .collect::<std::collections::BTreeMap<String, String>>()
    };
    let viewer = rules(VIEWER);
    assert_eq!(viewer.get("pods").map(String::as_str), Some("[get list watch]"), "{viewer:?}");
    assert_eq!(viewer.get("deployments.apps").map(String::as_str), Some("[get list watch]"), "{viewer:?}");
    assert!(!viewer.contains_key("secrets"), "{viewer:?}");
    assert_eq!(viewer.get("selfsubjectaccessreviews.authorization.k8s.io").map(String::as_str), Some("[create]"), "{viewer:?}");
    let editor = rules(EDITOR);
    assert_eq!(editor.get("secrets").map(String::as_str), Some("[get list watch create update patch delete deletecollection]"), "{editor:?}");
    assert!(!editor.contains_key("subjectaccessreviews.authorization.k8s.io"), "{editor:?}");
    let admin = rules(ADMIN);
    assert_eq!(admin.get("*.*").map(String::as_str), Some("[*]"), "{admin:?}");

    // SubjectAccessReview: admins ask about others; nobody else may.
    let review = |verb: &str| json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "vera", "groups": ["kubefold:viewers", "system:authenticated"], "resourceAttributes": {"verb": verb, "resource": "pods", "namespace": "default"}},
    });
    let (code, body) = s.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some(ADMIN), Some(&review("list")));
    assert_eq!((code, &body["status"]["allowed"]), (201, &json!(true)), "{body}");
    let (code, body) = s.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some(ADMIN), Some(&review("delete")));
    assert_eq!((code, &body["status"]["allowed"]), (201, &json!(false)), "{body}");
    let (code, _) = s.request("DELETE", "/api/v1/namespaces/default/pods/web-0_member1", Some(VIEWER), None);
    assert_eq!(code, 403, "the review said what a viewer's delete gets");
    for token in [VIEWER, EDITOR] {
        let (code, body) = s.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some(token), Some(&review("list")));
        assert_eq!((code, body["kind"].as_str(), body["reason"].as_str()), (403, Some("Status"), Some("Forbidden")), "{body}");
    }
    drop(secure);

    // No authenticator: everyone may do everything, and the reviews say so.
    let (_tmp, dir) = data_dir();
    let open = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    open.wait_ready();
    let run = |args: &[&str]| {
        let mut all = vec!["--server", &open.url];
        all.extend_from_slice(args);
        kubectl_bin(&bin, &all, None)
    };
    for question in [&["delete", "pods"][..], &["*", "*"], &["get", "secrets"], &["get", "/metrics"]] {
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(question);
        let (ok, out, err) = run(&args);
        assert!(ok && out.trim() == "yes", "{question:?}: {out}{err}");
    }
    let (ok, out, err) = run(&["auth", "whoami", "-o", "json"]);
    assert!(ok, "{err}");
    let review: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "system:anonymous", "{review}");
    let (ok, out, err) = run(&["auth", "can-i", "--list"]);
    assert!(ok && out.lines().any(|l| l.starts_with("*.*") && l.ends_with("[*]")), "{out}{err}");
    // Older kubectl: 1.27 asks whoami in authentication.k8s.io/v1alpha1 or v1beta1.
    for minor in ["1.27", "1.31"] {
        let Some(old) = kubectl_minor(minor) else { continue };
        for args in [&["auth", "whoami"][..], &["auth", "can-i", "delete", "pods"]] {
            let mut all = vec!["--server", open.url.as_str()];
            all.extend_from_slice(args);
            let (ok, out, err) = kubectl_bin(&old, &all, None);
            assert!(ok && (out.contains("system:anonymous") || out.trim() == "yes"), "kubectl {minor} {args:?}: {out}{err}");
        }
    }
}

/// A kubeconfig-free kubectl against kubefold (no authenticator).
fn kubectl_at(bin: &str, url: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut all = vec!["--server", url];
    all.extend_from_slice(args);
    kubectl_bin(bin, &all, stdin)
}

/// The member's own ConfigMap `name` in `namespace`, if it has one.
fn member_configmap(sim: &kubefold_testdata::SimHandle, namespace: &str, name: &str) -> Option<Value> {
    let (code, body) = http_get(&format!("{}/api/v1/namespaces/{namespace}/configmaps/{name}", sim.url()));
    (code == 200).then(|| serde_json::from_str(&body).unwrap())
}

fn configmap(name: &str, namespace: &str, annotations: Value, labels: Value, value: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations, "labels": labels},
        "data": {"key": value},
    }))
    .unwrap()
}

#[test]
fn creates_are_placed_by_annotation_or_placement_rule() {
    let Some(bin) = kubectl_133() else { return };
    let members = demo_members(2, 0.0);
    let (_cfg, config) = config_file(
        "placement:\n  - namespaces: [shop, team-x]\n    cluster: member2\n  - labelSelector: tier in (db)\n    cluster: member1\n  - labelSelector: tier=cache\n    cluster: member7\n",
    );
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", &config]);
    kf.wait_ready();
    let (m1, m2) = (&members[0].1, &members[1].1);
    let files = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| -> String {
        let path: &Path = &files.path().join(name);
        std::fs::write(path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let pinned = |cluster: &str| json!({"kubefold.io/cluster": cluster});

    // kubectl apply -f (client-side) of an ordinary manifest with the annotation.
    let f = file("a.json", &configmap("placed-a", "default", pinned("member2"), json!({}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["apply", "-f", &f], None);
    assert!(ok, "{out}{err}");
    let created = member_configmap(m2, "default", "placed-a").expect("created in member2");
    assert!(member_configmap(m1, "default", "placed-a").is_none());
    let annotations = created["metadata"]["annotations"].as_object().unwrap();
    assert!(!annotations.keys().any(|k| k.starts_with("kubefold.io/")), "kubefold's annotations reach the member: {annotations:?}");
    let served = kf.get_json("/api/v1/namespaces/default/configmaps/placed-a_member2");
    assert_eq!(served["metadata"]["annotations"]["kubefold.io/cluster"], "member2", "{served}");
    // A second apply updates it where it is.
    let f = file("a.json", &configmap("placed-a", "default", pinned("member2"), json!({}), "2"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["apply", "-f", &f], None);
    assert!(ok && out.contains("configured"), "{out}{err}");
    assert_eq!(member_configmap(m2, "default", "placed-a").unwrap()["data"]["key"], "2");

    // kubectl create -f with the annotation naming member1.
    let f = file("b.json", &configmap("placed-b", "default", pinned("member1"), json!({}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["create", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m1, "default", "placed-b").is_some() && member_configmap(m2, "default", "placed-b").is_none());

    // kubectl apply --server-side with the annotation.
    let f = file("c.json", &configmap("placed-c", "default", pinned("member2"), json!({}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["apply", "--server-side", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m2, "default", "placed-c").is_some() && member_configmap(m1, "default", "placed-c").is_none());

    // The namespace rule: shop goes to member2.
    let f = file("d.json", &configmap("placed-d", "shop", json!({}), json!({}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["apply", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m2, "shop", "placed-d").is_some() && member_configmap(m1, "shop", "placed-d").is_none());
    // A Namespace is placed by its own name.
    let f = file("n.json", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}}).to_string());
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["create", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert_eq!(http_get(&format!("{}/api/v1/namespaces/team-x", m2.url())).0, 200);
    assert_eq!(http_get(&format!("{}/api/v1/namespaces/team-x", m1.url())).0, 404);
    // The label rule: tier=db goes to member1, also server-side.
    let f = file("e.json", &configmap("placed-e", "default", json!({}), json!({"tier": "db"}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["create", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m1, "default", "placed-e").is_some() && member_configmap(m2, "default", "placed-e").is_none());
    let f = file("f.json", &configmap("placed-f", "default", json!({}), json!({"tier": "db"}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["apply", "--server-side", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m1, "default", "placed-f").is_some());
    // The annotation wins over the rules.
    let f = file("g.json", &configmap("placed-g", "shop", pinned("member1"), json!({}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["create", "-f", &f], None);
    assert!(ok, "{out}{err}");
    assert!(member_configmap(m1, "shop", "placed-g").is_some() && member_configmap(m2, "shop", "placed-g").is_none());

    // Dry runs (kubectl diff, --dry-run=server) change nothing and wait for nothing.
    let f = file("j.json", &configmap("placed-j", "default", pinned("member1"), json!({}), "1"));
    let runs: [(&[&str], bool); 4] = [
        (&["diff", "-f", &f], false),
        (&["apply", "--dry-run=server", "-f", &f], true),
        (&["create", "--dry-run=server", "-f", &f], true),
        (&["delete", "configmap", "placed-b_member1", "-n", "default", "--dry-run=server"], true),
    ];
    for (args, succeeds) in runs {
        let started = Instant::now();
        let (ok, out, err) = kubectl_at(&bin, &kf.url, args, None);
        assert_eq!(ok, succeeds, "{args:?}: {out}{err}");
        assert!(out.contains("placed-"), "{args:?}: {out}{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?} took {:?}", started.elapsed());
    }
    assert!(member_configmap(m1, "default", "placed-j").is_none(), "a dry run created it");
    assert!(member_configmap(m1, "default", "placed-b").is_some(), "a dry run deleted it");

    // Nothing says: the 400 that names the ways.
    let f = file("h.json", &configmap("placed-h", "default", json!({}), json!({"tier": "web"}), "1"));
    for args in [&["apply", "-f", &f][..], &["create", "-f", &f], &["apply", "--server-side", "-f", &f]] {
        let (ok, out, err) = kubectl_at(&bin, &kf.url, args, None);
        assert!(!ok && err.contains("cannot choose a cluster") && err.contains("kubefold.io/cluster") && err.contains("placement"), "{args:?}: {out}{err}");
    }
    assert!(member_configmap(m1, "default", "placed-h").is_none() && member_configmap(m2, "default", "placed-h").is_none());
    // A rule naming a cluster that is not a member: a 400 naming it.
    let f = file("k.json", &configmap("placed-k", "default", json!({}), json!({"tier": "cache"}), "1"));
    let (ok, out, err) = kubectl_at(&bin, &kf.url, &["create", "-f", &f], None);
    assert!(!ok && err.contains("placement rule 2") && err.contains("\"member7\""), "{out}{err}");
    // An unknown cluster: a 400 naming it.
    let f = file("i.json", &configmap("placed-i", "default", pinned("member9"), json!({}), "1"));
    for args in [&["apply", "-f", &f][..], &["apply", "--server-side", "-f", &f]] {
        let (ok, out, err) = kubectl_at(&bin, &kf.url, args, None);
        assert!(!ok && err.contains("BadRequest") && err.contains("\"member9\""), "{args:?}: {out}{err}");
    }
}

#[test]
fn clusters_scope_passes_through_what_kubefold_does_not_aggregate() {
    let Some(bin) = kubectl_133() else { return };
    let members: Vec<(String, kubefold_testdata::SimHandle)> = (1..=2)
        .map(|i| {
            let name = format!("member{i}");
            let sim = kubefold_testdata::start(kubefold_testdata::SimConfig {
                name: name.clone(),
                workload: kubefold_testdata::Workload::Demo,
                crds: true,
                seed: i,
                ..Default::default()
            })
            .unwrap();
            (name, sim)
        })
        .collect();
    let secure = Secure::start(&members, &[]);
    let s = &secure;
    let sim = &members[0].1;
    // Secrets are not aggregated: the top level does not serve them.
    let (ok, _, err) = s.kubectl(&bin, ADMIN, "", &["get", "secrets", "-A"]);
    assert!(!ok && err.contains("secrets"), "{err}");
    // Under /clusters/member1 they are the member's, with its credentials.
    // kubectl 1.31 sends typed creates as JSON (1.32 and later as protobuf).
    if let Some(bin_131) = kubectl_minor("1.31") {
        let (ok, out, err) = s.kubectl(&bin_131, EDITOR, "/clusters/member1", &["create", "secret", "generic", "pass-1", "-n", "default", "--from-literal=k=v"]);
        assert!(ok && out.contains("pass-1"), "{out}{err}");
        let (code, _) = http_get(&format!("{}/api/v1/namespaces/default/secrets/pass-1", sim.url()));
        assert_eq!(code, 200, "created in the member");
    }
    let manifest = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pass-2", "namespace": "default"}, "stringData": {"k": "v"}});
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("secret.json");
    std::fs::write(&f, manifest.to_string()).unwrap();
    let (ok, out, err) = s.kubectl(&bin, EDITOR, "/clusters/member1", &["create", "-f", f.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    sim.clear_requests();
    let (ok, out, err) = s.kubectl(&bin, EDITOR, "/clusters/member1", &["get", "secrets", "-n", "default", "-o", "name"]);
    assert!(ok && out.contains("secret/pass-2"), "{out}{err}");
    assert!(sim.requests().iter().any(|r| r.path == "/api/v1/namespaces/default/secrets"), "the list reached the member");
    let (ok, _, err) = s.kubectl(&bin, VIEWER, "/clusters/member1", &["get", "secrets", "-n", "default"]);
    assert!(!ok && err.contains("Forbidden"), "kubefold's rules still decide: {err}");
    let (ok, out, err) = s.kubectl(&bin, EDITOR, "/clusters/member1", &["delete", "secret", "pass-2", "-n", "default"]);
    assert!(ok, "{out}{err}");
    assert_eq!(http_get(&format!("{}/api/v1/namespaces/default/secrets/pass-2", sim.url())).0, 404);

    // A subresource kubefold does not serve: the member answers it.
    sim.clear_requests();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "default"}});
    let (code, body) = s.request("POST", "/clusters/member1/api/v1/namespaces/default/pods/web-1/eviction", Some(EDITOR), Some(&eviction));
    assert_eq!(body["kind"], "Status", "{code} {body}");
    assert!(sim.requests().iter().any(|r| r.method == "POST" && r.path == "/api/v1/namespaces/default/pods/web-1/eviction"), "the eviction reached the member");

    // A type kubefold does not know (a CRD outside the selection).
    let (ok, out, err) = s.kubectl(&bin, ADMIN, "/clusters/member2", &["get", "widgets", "-A", "-o", "json"]);
    assert!(ok, "{err}");
    let widgets: Value = serde_json::from_str(&out).unwrap();
    let member: Value = serde_json::from_str(&http_get(&format!("{}/apis/example.com/v1/widgets", members[1].1.url())).1).unwrap();
    let rvs = |list: &Value| list["items"].as_array().unwrap().iter().map(|w| w["metadata"]["resourceVersion"].clone()).collect::<Vec<_>>();
    assert_eq!(rvs(&widgets).len(), 3, "{widgets}");
    assert_eq!(rvs(&widgets), rvs(&member), "the member's own objects");

    // kubefold's own types stay served from the index there.
    let (ok, out, err) = s.kubectl(&bin, ADMIN, "/clusters/member1", &["get", "pods", "-n", "default", "web-0", "-o", "json"]);
    assert!(ok, "{err}");
    let pod: Value = serde_json::from_str(&out).unwrap();
    let (_, fleet_pod) = s.request("GET", "/api/v1/namespaces/default/pods/web-0_member1", Some(ADMIN), None);
    assert_eq!(pod["metadata"]["resourceVersion"], fleet_pod["metadata"]["resourceVersion"], "kubefold's resourceVersion");
    assert_eq!(pod["metadata"]["annotations"]["kubefold.io/cluster"], "member1");
    let (_, member_pod) = (0, serde_json::from_str::<Value>(&http_get(&format!("{}/api/v1/namespaces/default/pods/web-0", sim.url())).1).unwrap());
    assert_eq!(pod["metadata"]["annotations"]["kubefold.io/member-resource-version"], member_pod["metadata"]["resourceVersion"]);
    // A watch of a passed-through type streams until its timeout.
    let started = Instant::now();
    let (code, _) = s.request("GET", "/clusters/member1/api/v1/namespaces/default/secrets?watch=1&timeoutSeconds=1", Some(ADMIN), None);
    assert_eq!(code, 200);
    assert!(started.elapsed() < Duration::from_secs(10));
    // A member that does not answer in time: kubefold's own discovery there.
    sim.set_faults(kubefold_testdata::sim::faults::Faults { latency_ms: 8000, ..Default::default() });
    let started = Instant::now();
    let (code, list) = s.request("GET", "/clusters/member1/api/v1", Some(ADMIN), None);
    assert!(started.elapsed() < Duration::from_secs(5), "discovery waited {:?} for a slow member", started.elapsed());
    let names: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(code, 200, "{list}");
    assert!(names.contains(&"pods") && !names.contains(&"secrets"), "kubefold's document: {names:?}");
    sim.set_faults(Default::default());
    // An unknown member is a Status naming it.
    let (code, body) = s.request("GET", "/clusters/member9/api/v1/secrets", Some(ADMIN), None);
    assert_eq!((code, body["kind"].as_str()), (404, Some("Status")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("member9"), "{body}");
}

/// Every route kubectl uses answers within a second: a normal response or
/// a Kubernetes Status, never a held connection.
#[test]
fn every_route_kubectl_uses_answers_within_a_second() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let pod = "/api/v1/namespaces/default/pods/web-0_member1";
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let routes: Vec<(&str, String, Option<&str>, Option<Value>)> = vec![
        ("GET", "/version".into(), None, None),
        ("GET", "/api".into(), None, None),
        ("GET", "/api".into(), Some(aggregated), None),
        ("GET", "/apis".into(), None, None),
        ("GET", "/apis".into(), Some(aggregated), None),
        ("GET", "/api/v1".into(), None, None),
        ("GET", "/apis/apps".into(), None, None),
        ("GET", "/apis/apps/v1".into(), None, None),
        ("GET", "/openapi/v2".into(), None, None),
        ("GET", "/openapi/v3".into(), None, None),
        ("GET", "/openapi/v3/api/v1".into(), None, None),
        ("GET", "/openapi/v3/apis/apps/v1".into(), None, None),
        ("GET", "/api/v1/pods".into(), Some(table), None),
        ("GET", "/api/v1/namespaces/default/pods?limit=2".into(), None, None),
        ("GET", pod.into(), Some(table), None),
        ("GET", format!("{pod}/status"), None, None),
        ("GET", format!("{pod}/log"), None, None),
        ("GET", "/api/v1/pods?watch=1&timeoutSeconds=1".into(), None, None),
        ("GET", "/apis/apps/v1/namespaces/default/deployments".into(), None, None),
        ("GET", "/api/v1/namespaces/default/events".into(), None, None),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews".into(), None, Some(json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}))),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews".into(), None, Some(json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1", "spec": {"namespace": "default"}}))),
        ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews".into(), None, Some(json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"}))),
        ("GET", format!("{pod}/exec?command=ls&stdout=true"), None, None),
        ("POST", format!("{pod}/exec?command=ls&stdout=true"), None, None),
        ("POST", format!("{pod}/attach?stdout=true"), None, None),
        ("POST", format!("{pod}/portforward?ports=80"), None, None),
        ("GET", format!("{pod}/proxy/"), None, None),
        ("GET", "/api/v1/namespaces/default/pods/web-0_member1:80/proxy/metrics".into(), None, None),
        ("GET", "/api/v1/namespaces/default/services/web_member1:http/proxy/".into(), None, None),
        ("GET", "/api/v1/nodes/member1-node-1_member1/proxy/stats/summary".into(), None, None),
        ("GET", "/clusters/member1/api/v1/namespaces/default/pods/web-0/exec?command=ls".into(), None, None),
        ("GET", "/apis/metrics.k8s.io".into(), None, None),
        ("GET", "/apis/metrics.k8s.io/v1beta1/nodes".into(), None, None),
        ("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods".into(), None, None),
        ("GET", "/apis/example.io/v1/things".into(), None, None),
        ("GET", "/apis/example.io/v1/namespaces/default/things?watch=1".into(), None, None),
        ("GET", "/no/such/path".into(), None, None),
        ("POST", format!("{pod}/eviction"), None, Some(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0_member1"}}))),
        ("PUT", "/api/v1".into(), None, Some(json!({}))),
        ("OPTIONS", "/api/v1/pods".into(), None, None),
        ("GET", "/api/v1/namespaces/default/pods/no-such-pod".into(), None, None),
    ];
    let mut failures = Vec::new();
    for (method, path, accept, body) in &routes {
        let mut request = client.request(method.parse().unwrap(), format!("{}{path}", kf.url));
        if let Some(a) = accept {
            request = request.header("Accept", *a);
        }
        if let Some(b) = body {
            request = request.json(b);
        }
        let started = Instant::now();
        let response = match request.send() {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{method} {path}: no answer within 10 s: {e}"));
                continue;
            }
        };
        let head = started.elapsed();
        let code = response.status().as_u16();
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let text = response.text().unwrap_or_default();
        let whole = started.elapsed();
        let is_watch = path.contains("watch=1");
        // A watch with timeoutSeconds=1 starts at once and ends with its timeout.
        if head > Duration::from_secs(1) || whole > Duration::from_secs(if is_watch { 3 } else { 1 }) {
            failures.push(format!("{method} {path}: answered in {head:?} (whole body {whole:?})"));
        }
        if code >= 400 {
            let status: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            if status["kind"] != "Status" || status["code"] != code || status["reason"].as_str().is_none_or(str::is_empty) {
                failures.push(format!("{method} {path}: {code} without a Status: {text}"));
            }
        } else if !path.ends_with("/log") && !is_watch && !content_type.contains("json") && !content_type.contains("octet-stream") {
            failures.push(format!("{method} {path}: {code} {content_type}: {text}"));
        }
        let streaming = ["exec", "attach", "portforward", "proxy"].iter().any(|s| path.contains(&format!("/{s}")));
        // Forwarded to the member: without an upgrade, its own refusal (a Status).
        if streaming && (code == 405 || code < 400) {
            failures.push(format!("{method} {path}: a streaming subresource without an upgrade answered {code}: {text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
