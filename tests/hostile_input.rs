//! Hostile input: what an authenticated client sends cannot stall kubefold
//! for others or make it show what is not the client's to see. Deep YAML
//! and JSON bodies are refused at once while other requests go on being
//! answered; secrets of the configuration never show in logs, admin
//! answers or metrics; impersonation follows kube-apiserver's rules;
//! health details, unknown clusters, redacted tokens, data file modes and
//! backups.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A client that also talks to kubefold over TLS with the self-signed
/// certificates of [`tls_flags`].
fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).danger_accept_invalid_certs(true).build().unwrap()
}

/// `--tls-cert-file` and `--tls-private-key-file` of a self-signed
/// certificate for 127.0.0.1, written into `dir` (kubectl sends tokens over TLS only).
fn tls_flags(dir: &std::path::Path) -> Vec<String> {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    vec!["--tls-cert-file".into(), cert.to_string_lossy().into_owned(), "--tls-private-key-file".into(), key.to_string_lossy().into_owned()]
}

/// `levels` nested flow sequences: `[[[...]]]`.
fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

#[test]
fn deep_bodies_are_refused_at_once_while_others_are_served() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let pod = format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url);
    let configmaps = format!("{}/clusters/member1/api/v1/namespaces/default/configmaps", kf.url);
    let deep = nested(70_000);
    // The attacks: YAML bodies of every kind that takes YAML, and JSON.
    let attacks: Vec<(&str, String, &str, String)> = vec![
        ("PATCH", pod.clone(), "application/apply-patch+yaml", format!("metadata:\n  annotations:\n    x: {deep}\n")),
        ("PUT", pod.clone(), "application/yaml", format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  labels: {deep}\n")),
        ("POST", configmaps.clone(), "application/yaml", format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\ndata: {deep}\n")),
        ("PATCH", pod.clone(), "application/merge-patch+json", format!("{{\"metadata\":{{\"annotations\":{deep}}}}}")),
        ("PATCH", pod.clone(), "application/strategic-merge-patch+json", format!("{{\"metadata\":{{\"labels\":{deep}}}}}")),
        ("PATCH", pod.clone(), "application/json-patch+json", format!("[{{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{deep}}}]")),
        ("POST", configmaps.clone(), "application/json", format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{deep}}}")),
    ];
    // Three YAML attacks at once, then the rest, beside a latency probe.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut threads = Vec::new();
    for (i, (method, url, content_type, body)) in attacks.into_iter().enumerate() {
        let done = done.clone();
        threads.push(std::thread::spawn(move || {
            if i >= 3 {
                std::thread::sleep(Duration::from_millis(200));
            }
            let started = Instant::now();
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let response = client().request(method.clone(), &url).header("Content-Type", content_type).body(body).send();
            let took = started.elapsed();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let response = response.unwrap_or_else(|e| panic!("{method} {content_type}: {e}"));
            let code = response.status().as_u16();
            let status: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
            (format!("{method} {content_type}"), code, status, took)
        }));
    }
    let probe = client();
    let started = Instant::now();
    let mut probes = 0;
    while done.load(std::sync::atomic::Ordering::SeqCst) < threads.len() || probes < 10 {
        for path in ["/version", "/api/v1/namespaces/default/pods/web-0_member1", "/livez"] {
            let asked = Instant::now();
            let response = probe.get(format!("{}{path}", kf.url)).timeout(Duration::from_secs(10)).send();
            let took = asked.elapsed();
            assert!(response.as_ref().is_ok_and(|r| r.status() == 200), "GET {path} while deep bodies are decoded: {response:?}");
            assert!(took < Duration::from_secs(2), "GET {path} took {took:?} while deep bodies were decoded");
            probes += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the deep requests are not answered");
    }
    for thread in threads {
        let (what, code, status, took) = thread.join().unwrap();
        assert_eq!(code, 400, "{what}: {status}");
        assert_eq!(status["reason"], "BadRequest", "{what}: {status}");
        let message = status["message"].as_str().unwrap();
        assert!(message.contains("nested more than 100 levels"), "{what}: the Status names the limit: {message}");
        assert!(took < Duration::from_secs(5), "{what}: refused after {took:?}");
    }
    // Bodies within the limit still work, in YAML as in JSON.
    let shallow = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0_member1\n  labels:\n    depth: \"ok\"\n  annotations:\n    nested: '{}'\n", nested(150));
    let response = client()
        .patch(&pod)
        .header("Content-Type", "application/apply-patch+yaml")
        .query(&[("fieldManager", "hostile-input-test"), ("force", "true")])
        .body(shallow)
        .send()
        .unwrap();
    let code = response.status().as_u16();
    let body: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["labels"]["depth"], "ok", "{body}");
    let created = client()
        .post(&configmaps)
        .header("Content-Type", "application/yaml")
        .body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shallow\ndata:\n  a: \"1\"\n")
        .send()
        .unwrap();
    assert_eq!(created.status().as_u16(), 201, "{}", created.text().unwrap());
}

const VIEWER: &str = "viewer-token-51c0ffee";
const ADMIN: &str = "admin-token-a11ce0b0";

/// A token file with a viewer (alice) and an admin (bob), in `dir`.
fn token_file(dir: &std::path::Path) -> String {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, format!("{VIEWER},alice,1001,\"kubefold:viewers\"\n{ADMIN},bob,1002,\"kubefold:admins\"\n")).unwrap();
    path.to_string_lossy().into_owned()
}

/// A kubeconfig for `url` authenticating with `token`.
fn kubeconfig(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: {token}\n"
    )
}

/// A request with an optional bearer token and extra headers.
fn call(method: &str, url: &str, token: Option<&str>, headers: &[(&str, &str)], body: Option<&Value>) -> (u16, String) {
    let mut request = client().request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        request = request.header("Content-Type", content_type).body(body.to_string());
    }
    let response = request.send().unwrap();
    let code = response.status().as_u16();
    (code, response.text().unwrap())
}

#[test]
fn secrets_never_show_in_logs_admin_answers_or_metrics() {
    let members = demo_members(3, 0.0);
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfigs = tmp.path().join("kubeconfigs");
    std::fs::create_dir(&kubeconfigs).unwrap();
    // Every secret this kubefold is given.
    let member_token = "member-url-token-7a1b2c3d";
    let kubeconfig_token = "kubeconfig-token-9e8f7a6b";
    let broken_token = "broken-kubeconfig-token-5c4d3e2f";
    let registered_token = "registered-token-1a2b3c4d";
    let registered_broken_token = "registered-broken-token-6f5e4d3c";
    let inline_token = "inline-kubeconfig-token-0b1c2d3e";
    let cli_token = "cli-inline-token-8c9d0e1f";
    let secrets = [VIEWER, ADMIN, member_token, kubeconfig_token, broken_token, registered_token, registered_broken_token, inline_token, cli_token];
    let good = kubeconfigs.join("member2.kubeconfig");
    std::fs::write(&good, kubeconfig(&members[1].1.url(), kubeconfig_token)).unwrap();
    // Malformed: the token sits on the line above the YAML error.
    let broken = kubeconfigs.join("member3.kubeconfig");
    let broken_text = kubeconfig(&members[2].1.url(), broken_token).replace(&format!("token: {broken_token}\n"), &format!("token: {broken_token}\n    client-key-data: [unclosed\n"));
    std::fs::write(&broken, broken_text).unwrap();
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(
        &config,
        format!(
            "clusters:\n- name: member1\n  url: {}\n  token: {member_token}\n- name: member2\n  kubeconfig: {}\n- name: member3\n  kubeconfig: {}\nauth:\n  tokenAuthFile: {}\n",
            members[0].1.url(),
            good.display(),
            broken.display(),
            token_file(tmp.path())
        ),
    )
    .unwrap();
    let (_data, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &[], &["--config", config.to_str().unwrap()]);
    let admin = |method: &str, path: &str, body: Option<&Value>| call(method, &format!("{}{path}", kf.url), Some(ADMIN), &[], body);

    // Registered through the admin API: a token, a malformed kubeconfig in
    // the allowed directory, an inline kubeconfig.
    let registered_broken = kubeconfigs.join("registered.kubeconfig");
    std::fs::write(&registered_broken, format!("users:\n- name: u\n  user:\n    token: {registered_broken_token}\n    insecure: : :\n")).unwrap();
    for spec in [
        serde_json::json!({"name": "member4", "url": members[0].1.url(), "token": registered_token}),
        serde_json::json!({"name": "member5", "kubeconfig": registered_broken}),
        serde_json::json!({"name": "member6", "kubeconfigData": kubeconfig(&members[1].1.url(), inline_token)}),
    ] {
        let (code, body) = admin("POST", "/admin/v1/clusters", Some(&spec));
        assert_eq!(code, 201, "{spec}: {body}");
    }
    // A file outside the allowed directories, directly or through a link
    // placed in one, is refused without a word of it.
    let passwd_head = std::fs::read_to_string("/etc/passwd").unwrap().lines().next().unwrap_or("root:x:0:0").to_string();
    let link = kubeconfigs.join("innocent.kubeconfig");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    for path in [std::path::PathBuf::from("/etc/passwd"), link, kubeconfigs.join("../kubefold.yaml")] {
        let (code, body) = admin("POST", "/admin/v1/clusters", Some(&serde_json::json!({"name": "passwd", "kubeconfig": path})));
        assert_eq!(code, 422, "{path:?}: {body}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["reason"], "Invalid", "{body}");
        assert!(status["message"].as_str().unwrap().contains("kubeconfigDirs"), "{body}");
        assert!(!body.contains(&passwd_head) && !body.contains("/bin/"), "the refusal quotes the file: {body}");
    }
    assert_eq!(admin("GET", "/admin/v1/clusters/passwd", None).0, 404, "nothing registered");
    // The CLI sends a kubeconfig outside them inline when asked.
    let outside = tmp.path().join("elsewhere.kubeconfig");
    std::fs::write(&outside, kubeconfig(&members[2].1.url(), cli_token)).unwrap();
    let admin_token = tmp.path().join("admin.token");
    std::fs::write(&admin_token, ADMIN).unwrap();
    let cli = |extra: &[&str]| {
        let mut args = vec!["admin", "--server", &kf.url, "--token-file", admin_token.to_str().unwrap(), "clusters", "add", "member7", "--kubeconfig", outside.to_str().unwrap()];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_kubefold")).args(&args).output().unwrap()
    };
    let refused = cli(&[]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("422 Invalid"), "{refused:?}");
    let added = cli(&["--inline"]);
    assert!(added.status.success(), "{added:?}");

    // The broken members fail, with an error naming the line, and are retried.
    for cluster in ["member1", "member2", "member4", "member6", "member7"] {
        wait_for(Duration::from_secs(60), &format!("{cluster} synced"), || {
            let (_, body) = admin("GET", &format!("/admin/v1/clusters/{cluster}"), None);
            serde_json::from_str::<Value>(&body).is_ok_and(|v| v["status"]["synced"] == true)
        });
    }
    for (cluster, file) in [("member3", &broken), ("member5", &registered_broken)] {
        wait_for(Duration::from_secs(30), "the broken kubeconfig's error", || {
            let (_, body) = admin("GET", &format!("/admin/v1/clusters/{cluster}"), None);
            serde_json::from_str::<Value>(&body).unwrap()["status"]["lastError"].is_string()
        });
        let (_, body) = admin("GET", &format!("/admin/v1/clusters/{cluster}"), None);
        let error = serde_json::from_str::<Value>(&body).unwrap()["status"]["lastError"].as_str().unwrap().to_string();
        assert!(error.contains(&file.display().to_string()) && error.contains("line"), "{cluster}: {error}");
    }
    std::thread::sleep(Duration::from_secs(3));

    // Every answer an admin can get, the metrics, and the logs.
    let mut seen = Vec::new();
    for path in ["/admin/v1/clusters", "/admin/v1/resources", "/admin/v1/stats", "/admin/v1/estimators", "/metrics", "/readyz?verbose", "/livez?verbose", "/healthz?verbose"] {
        let (code, body) = admin("GET", path, None);
        assert!(code == 200 || path.starts_with("/readyz"), "{path}: {code} {body}");
        seen.push((path.to_string(), body));
    }
    for i in 1..=7 {
        for path in [format!("/admin/v1/clusters/member{i}"), format!("/admin/v1/estimators/member{i}")] {
            let (_, body) = admin("GET", &path, None);
            seen.push((path, body));
        }
    }
    let (code, backup) = admin("POST", "/admin/v1/backup", None);
    assert_eq!(code, 200);
    seen.push(("/admin/v1/backup".to_string(), backup));
    seen.push(("logs".to_string(), kf.logs()));
    for (what, text) in &seen {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} shows the secret {secret}:\n{text}");
        }
        assert!(!text.contains("client-key-data") && !text.contains("[unclosed"), "{what} quotes a kubeconfig:\n{text}");
    }
    assert!(kf.logs().contains("member3"), "the broken member's errors are logged (without its contents)");
}

#[test]
fn impersonation_needs_the_right_and_is_authorized_as_the_impersonated_user() {
    let members = demo_members(1, 0.0);
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(tmp.path());
    let (_data, dir) = data_dir();
    let mut flags = tls_flags(tmp.path());
    flags.extend(["--token-auth-file".to_string(), tokens]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &flags);
    wait_for(Duration::from_secs(60), "ready", || call("GET", &format!("{}/readyz", kf.url), None, &[], None).0 == 200);
    let pods = format!("{}/api/v1/pods", kf.url);
    let pod = format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url);
    let label = serde_json::json!({"metadata": {"labels": {"impersonated": "yes"}}});

    // A viewer may not impersonate anyone, not even to read.
    let (code, body) = call("GET", &pods, Some(VIEWER), &[("Impersonate-User", "bob")], None);
    assert_eq!(code, 403, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["message"], "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
    let (code, body) = call("GET", &pods, Some(VIEWER), &[("Impersonate-User", "alice"), ("Impersonate-Group", "kubefold:admins")], None);
    assert_eq!(code, 403, "nor impersonate a group: {body}");
    // An admin may, and is then what it impersonates: a viewer may read but not write.
    let as_viewer = [("Impersonate-User", "alice"), ("Impersonate-Group", "kubefold:viewers")];
    assert_eq!(call("GET", &pods, Some(ADMIN), &as_viewer, None).0, 200);
    let (code, body) = call("PATCH", &pod, Some(ADMIN), &as_viewer, Some(&label));
    assert_eq!(code, 403, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["message"].as_str().unwrap().to_string();
    assert!(message.contains("User \"alice\" cannot patch resource \"pods\""), "{message}");
    let (code, body) = call("GET", &format!("{}/admin/v1/clusters", kf.url), Some(ADMIN), &[("Impersonate-User", "nobody")], None);
    assert_eq!(code, 403, "a user in no group may not use the admin API: {body}");
    let (code, body) = call("GET", &pods, Some(ADMIN), &[("Impersonate-Group", "kubefold:viewers")], None);
    assert_eq!(code, 400, "a group without a user: {body}");
    assert_eq!(call("PATCH", &pod, Some(ADMIN), &[], Some(&label)).0, 200, "without impersonation the admin may write");

    // kubectl --as through kubefold.
    if std::process::Command::new("kubectl").arg("version").arg("--client").output().is_err() {
        eprintln!("kubectl is not installed: skipping the kubectl --as checks");
        return;
    }
    let server = format!("--server={}", kf.url);
    let server = &format!("{server} --insecure-skip-tls-verify");
    let server: Vec<&str> = server.split(' ').collect();
    let kubectl = |args: &[&str]| kubectl(&[&server[..], args].concat(), None);
    let as_admin = format!("--token={ADMIN}");
    let (ok, out, err) = kubectl(&[&as_admin, "--as=alice", "--as-group=kubefold:viewers", "get", "pods", "-o", "name"]);
    assert!(ok && out.contains("web-0_member1"), "kubectl --as alice get pods: {out} {err}");
    let (ok, out, err) = kubectl(&[&as_admin, "--as=alice", "--as-group=kubefold:viewers", "label", "pod", "web-0_member1", "by=alice"]);
    assert!(!ok && (err.contains("Forbidden") || err.contains("forbidden")), "kubectl --as alice label: {out} {err}");
    let as_viewer_token = format!("--token={VIEWER}");
    let (ok, out, err) = kubectl(&[&as_viewer_token, "--as=bob", "get", "pods"]);
    assert!(!ok && err.contains("cannot impersonate"), "a viewer's kubectl --as: {out} {err}");
    let (ok, out, err) = kubectl(&[&as_admin, "--as=alice", "--as-group=kubefold:viewers", "auth", "whoami"]);
    // `auth whoami` needs SelfSubjectReview; when served it names alice.
    if ok {
        assert!(out.contains("alice"), "{out}");
    } else {
        eprintln!("kubectl auth whoami is not served here: {err}");
    }
}

#[test]
fn health_details_unknown_clusters_redacted_tokens_file_modes_and_backups() {
    use std::os::unix::fs::PermissionsExt;
    let members = demo_members(2, 0.0);
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(tmp.path());
    let (_data, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members[..1]), &["--token-auth-file", &tokens]);
    let url = |path: &str| format!("{}{path}", kf.url);
    wait_for(Duration::from_secs(60), "ready", || call("GET", &url("/readyz"), None, &[], None).0 == 200);

    // Health is open, its member names only for authenticated callers.
    for path in ["/readyz?verbose", "/readyz?verbose=1", "/livez?verbose", "/healthz?verbose", "/readyz"] {
        let (code, body) = call("GET", &url(path), None, &[], None);
        assert_eq!(code, 200, "{path}: {body}");
        assert!(!body.contains("member1"), "{path} names a member to an anonymous caller: {body}");
    }
    let (_, body) = call("GET", &url("/readyz?verbose"), None, &[], None);
    assert!(body.contains("[+]clusters synced") && body.contains("readyz check passed"), "{body}");
    let (_, body) = call("GET", &url("/readyz?verbose"), Some("not-a-token"), &[], None);
    assert!(!body.contains("member1"), "a bad token sees no details: {body}");
    let (_, body) = call("GET", &url("/readyz?verbose"), Some(VIEWER), &[], None);
    assert!(body.contains("[+]cluster-member1 synced"), "{body}");

    // An unknown cluster is 404, for resources and discovery alike.
    for path in ["/clusters/nope/api/v1/pods", "/clusters/nope/api/v1/namespaces/default/pods/web-0", "/clusters/nope/apis/apps/v1", "/clusters/nope/api"] {
        let (code, body) = call("GET", &url(path), Some(ADMIN), &[], None);
        assert_eq!(code, 404, "{path}: {body}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("NotFound")), "{path}: {body}");
        assert!(status["message"].as_str().unwrap().contains("\"nope\""), "{body}");
    }
    assert_eq!(call("GET", &url("/clusters/member1/api/v1/pods"), Some(ADMIN), &[], None).0, 200);

    // A registered member's spec read and sent back keeps its token.
    let token = "registered-member-token-3e4f5a6b";
    let spec = serde_json::json!({"name": "member2", "url": members[1].1.url(), "token": token});
    assert_eq!(call("POST", &url("/admin/v1/clusters"), Some(ADMIN), &[], Some(&spec)).0, 201);
    let (_, body) = call("GET", &url("/admin/v1/clusters/member2"), Some(ADMIN), &[], None);
    let mut shown = serde_json::from_str::<Value>(&body).unwrap()["spec"].clone();
    assert_eq!(shown["token"], "<redacted>");
    shown["labels"] = serde_json::json!({"env": "test"});
    let (code, body) = call("PUT", &url("/admin/v1/clusters/member2"), Some(ADMIN), &[], Some(&shown));
    assert_eq!(code, 200, "{body}");
    let new = serde_json::json!({"name": "member3", "url": members[1].1.url(), "token": "<redacted>"});
    let (code, body) = call("POST", &url("/admin/v1/clusters"), Some(ADMIN), &[], Some(&new));
    assert_eq!(code, 422, "nothing to keep for a new member: {body}");

    // Backups: credentials only when asked.
    let backup = |query: &str| {
        let response = client().post(url(&format!("/admin/v1/backup{query}"))).bearer_auth(ADMIN).send().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.bytes().unwrap().to_vec()
    };
    let contains = |haystack: &[u8], needle: &str| haystack.windows(needle.len()).any(|w| w == needle.as_bytes());
    let plain = backup("");
    assert!(!contains(&plain, token) && contains(&plain, "member2"), "a default backup holds no member token");
    let full = backup("?includeCredentials=true");
    assert!(contains(&full, token), "the stored token was kept through the PUT and is in a backup with credentials");
    assert!(!contains(&full, "<redacted>"), "<redacted> was stored");
    wait_for(Duration::from_secs(60), "member2 synced", || call("GET", &url("/readyz"), None, &[], None).0 == 200);
    kf.stop();

    // Every file of the data dir is its user's alone, the index snapshot
    // written at shutdown included.
    let mut files = 0;
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            if path.is_dir() {
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
                stack.push(path);
            } else {
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
                files += 1;
            }
        }
    }
    assert!(files > 3 && dir.join("index.snapshot").exists(), "{files} files");

    // The offline backup: 0600, without credentials unless asked.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubefold")).args(args).output().unwrap();
        assert!(out.status.success(), "kubefold {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let offline = tmp.path().join("offline.backup");
    let said = run(&["backup", "--data-dir", dir.to_str().unwrap(), "--out", offline.to_str().unwrap()]);
    assert!(said.contains("without member credentials"), "{said}");
    assert_eq!(std::fs::metadata(&offline).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!contains(&std::fs::read(&offline).unwrap(), token));
    let with = tmp.path().join("with.backup");
    run(&["backup", "--data-dir", dir.to_str().unwrap(), "--out", with.to_str().unwrap(), "--include-credentials"]);
    assert!(contains(&std::fs::read(&with).unwrap(), token));

    // A credential-less backup restores and serves; the member registered
    // with a token comes back without it (this simulator asks for none).
    let restored = tmp.path().join("restored");
    run(&["restore", "--in", offline.to_str().unwrap(), "--data-dir", restored.to_str().unwrap()]);
    let kf = Kubefold::serve(&restored, &cluster_flags(&members[..1]), &["--token-auth-file", &tokens]);
    let (code, body) = call("GET", &format!("{}/api/v1/namespaces/default/pods/web-0_member2", kf.url), Some(ADMIN), &[], None);
    assert_eq!(code, 200, "the restored store serves member2's objects: {body}");
    let (_, body) = call("GET", &format!("{}/admin/v1/clusters/member2", kf.url), Some(ADMIN), &[], None);
    let spec = serde_json::from_str::<Value>(&body).unwrap()["spec"].clone();
    assert_eq!(spec, serde_json::json!({"name": "member2", "url": members[1].1.url(), "labels": {"env": "test"}}), "{body}");
    wait_for(Duration::from_secs(60), "restored kubefold ready", || call("GET", &format!("{}/readyz", kf.url), None, &[], None).0 == 200);
}
