//! Who did what, end to end: kubefold's audit log records every edit (the
//! authenticated user, the one impersonated, the member acted on, the
//! answer's code), requests refused by authorization too, follows the
//! policy file, and never holds a Secret's contents.

mod common;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-5c4b3a";
const VIEWER: &str = "viewer-token-0f9e8d";
const SECRET_VALUE: &str = "cGFzc3dvcmQtZDBudC1sMGc=";

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// A simulator as the control plane, deciding by the access policy in the
/// file `policy`, and a kubeconfig for it as `auth-token` (the identity
/// kubefold reviews tokens and access with).
fn control_plane(dir: &std::path::Path, policy: &str) -> (kubefold_testdata::SimHandle, String) {
    let control_plane = kubefold_testdata::start(kubefold_testdata::SimConfig { name: "control-plane".into(), authz_file: Some(policy.into()), ..kubefold_testdata::SimConfig::default() })
        .expect("simulator starts");
    let kubeconfig = write(
        dir,
        "control-plane.kubeconfig",
        &format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: u, user: {{token: auth-token}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n", control_plane.url()),
    );
    (control_plane, kubeconfig)
}

fn send(kf: &Kubefold, token: &str, method: &str, path: &str, body: Option<Value>, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let client = reqwest::blocking::Client::new();
    let mut request = client.request(method.parse().unwrap(), format!("{}{path}", kf.url)).bearer_auth(token);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().unwrap();
    let code = response.status().as_u16();
    let audit_id = response.headers().get("Audit-Id").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = response.json::<Value>().unwrap_or(Value::Null);
    (code, audit_id, body)
}

fn audit_events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[test]
fn every_edit_is_in_the_audit_log_with_who_did_it_and_no_secret_data() {
    let members = demo_members(1, 0.0);
    let (tmp, dir) = data_dir();
    let tokens = write(tmp.path(), "tokens.csv", &format!("{ADMIN},admin,1001,\"kubefold:admins\"\n{VIEWER},viewer,1002,\"kubefold:viewers\"\n"));
    let policy = write(
        tmp.path(),
        "policy.yaml",
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  verbs: [get, list, watch]\n- level: RequestResponse\n",
    );
    let log = tmp.path().join("audit").join("audit.log");
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &["--token-auth-file", &tokens, "--audit-log-path", log.to_str().unwrap(), "--audit-policy-file", &policy, "--audit-log-maxsize", "10", "--audit-log-maxbackup", "2"],
    );
    kf.wait_ready();
    let member = &members[0].0;

    // Reads are not recorded by this policy.
    let (code, _, _) = send(&kf, ADMIN, "GET", "/api/v1/pods", None, &[]);
    assert_eq!(code, 200);

    // A Secret created through the member's scope.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password", "namespace": "default"}, "data": {"password": SECRET_VALUE}, "type": "Opaque"});
    let (code, created_id, body) = send(&kf, ADMIN, "POST", &format!("/clusters/{member}/api/v1/namespaces/default/secrets"), Some(secret), &[]);
    assert_eq!(code, 201, "{body}");
    assert!(!created_id.is_empty(), "the answer names its audit ID");

    // An edit by an impersonated user (kubectl --as).
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": "fast"}});
    let (code, as_id, body) = send(
        &kf,
        ADMIN,
        "POST",
        &format!("/clusters/{member}/api/v1/namespaces/default/configmaps"),
        Some(config_map.clone()),
        &[("Impersonate-User", "alice"), ("Impersonate-Group", "kubefold:editors")],
    );
    assert_eq!(code, 201, "{body}");

    // An edit refused by kubefold's authorization.
    let (code, denied_id, body) = send(&kf, VIEWER, "DELETE", &format!("/api/v1/namespaces/default/configmaps/settings_{member}"), None, &[]);
    assert_eq!(code, 403, "{body}");

    // The Secret deleted.
    let (code, deleted_id, body) = send(&kf, ADMIN, "DELETE", &format!("/clusters/{member}/api/v1/namespaces/default/secrets/db-password"), None, &[]);
    assert_eq!(code, 200, "{body}");

    let mut events = Vec::new();
    wait_for(std::time::Duration::from_secs(10), "the audit events of the four edits", || {
        events = audit_events(&log);
        events.iter().filter(|e| e["stage"] == "ResponseComplete").count() >= 4
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(SECRET_VALUE), "a Secret's data is in the audit log: {text}");
    assert!(!text.contains(ADMIN) && !text.contains(VIEWER), "a token is in the audit log");
    assert!(events.iter().all(|e| e["verb"] != "list"), "reads are left out by the policy: {text}");
    let complete = |id: &str| -> Value {
        let found: Vec<&Value> = events.iter().filter(|e| e["auditID"] == id).collect();
        let stages: Vec<&str> = found.iter().map(|e| e["stage"].as_str().unwrap()).collect();
        assert_eq!(stages, ["RequestReceived", "ResponseComplete"], "events of {id}: {text}");
        assert_eq!(found[1]["kind"], "Event");
        assert_eq!(found[1]["apiVersion"], "audit.k8s.io/v1");
        found[1].clone()
    };

    let created = complete(&created_id);
    assert_eq!(created["level"], "RequestResponse");
    assert_eq!(created["verb"], "create");
    assert_eq!(created["user"]["username"], "admin");
    assert_eq!(created["user"]["groups"], json!(["kubefold:admins", "system:authenticated"]));
    assert_eq!(created["objectRef"]["resource"], "secrets");
    assert_eq!(created["objectRef"]["namespace"], "default");
    assert_eq!(created["annotations"]["kubefold.io/cluster"], member.as_str());
    assert_eq!(created["responseStatus"]["code"], 201);
    assert_eq!(created["requestObject"]["metadata"]["name"], "db-password");
    assert!(created["requestObject"].get("data").is_none() && created["responseObject"].get("data").is_none());
    assert_eq!(created["responseObject"]["kind"], "Secret", "{created}");
    assert_eq!(created["sourceIPs"], json!(["127.0.0.1"]));

    let impersonated = complete(&as_id);
    assert_eq!(impersonated["user"]["username"], "admin");
    assert_eq!(impersonated["impersonatedUser"]["username"], "alice");
    assert_eq!(impersonated["requestObject"]["data"], json!({"mode": "fast"}), "a ConfigMap's data is recorded at RequestResponse");

    let denied = complete(&denied_id);
    assert_eq!((denied["user"]["username"].as_str(), denied["verb"].as_str(), denied["responseStatus"]["code"].as_u64()), (Some("viewer"), Some("delete"), Some(403)));
    assert_eq!(denied["objectRef"]["name"], format!("settings_{member}"));
    assert_eq!(denied["annotations"]["kubefold.io/cluster"], member.as_str());

    let deleted = complete(&deleted_id);
    assert_eq!((deleted["verb"].as_str(), deleted["responseStatus"]["code"].as_u64()), (Some("delete"), Some(200)));
    assert_eq!(deleted["annotations"]["kubefold.io/cluster"], member.as_str());
    assert!(deleted.get("responseObject").map_or(true, |o| o.get("data").is_none()));
    kf.stop();
}

#[test]
fn a_policy_file_that_is_not_a_policy_stops_kubefold_at_start() {
    let (tmp, dir) = data_dir();
    let policy = write(tmp.path(), "policy.yaml", "apiVersion: v1\nkind: ConfigMap\n");
    let log = tmp.path().join("audit.log");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", dir.to_str().unwrap(), "--audit-log-path", log.to_str().unwrap(), "--audit-policy-file", &policy])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("audit policy") && stderr.contains("kind Policy"), "{stderr}");
}

/// A member simulator that decides every request itself: kubefold reads
/// with `kubefold-token`, `impersonator-token` may impersonate anyone,
/// alice may edit ConfigMaps in `default` only, and bob nothing.
fn strict_member(dir: &std::path::Path, audit_log: &std::path::Path) -> kubefold_testdata::SimHandle {
    let policy = write(
        dir,
        "member-authz.yaml",
        "users:\n\
         - {name: kubefold, token: kubefold-token}\n\
         - {name: impersonator, token: impersonator-token}\n\
         rules:\n\
         - {users: [kubefold], verbs: [get, list, watch], resources: ['*']}\n\
         - {users: [impersonator], verbs: [impersonate], resources: [users, groups, uids, 'userextras/*']}\n\
         - {users: [alice], verbs: [get, create, update, patch, delete], apiGroups: [''], resources: [configmaps], namespaces: [default]}\n",
    );
    kubefold_testdata::start(kubefold_testdata::SimConfig {
        name: "member1".into(),
        workload: kubefold_testdata::Workload::Demo,
        authz_file: Some(policy.into()),
        audit_log_path: Some(audit_log.to_path_buf()),
        ..kubefold_testdata::SimConfig::default()
    })
    .expect("simulator starts")
}

/// The member's audit events of `verb` on `resource` (and subresource).
fn member_events(log: &std::path::Path, verb: &str, resource: &str, subresource: Option<&str>) -> Vec<Value> {
    audit_events(log)
        .into_iter()
        .filter(|e| e["verb"] == verb && e["objectRef"]["resource"] == resource && e["objectRef"]["subresource"].as_str() == subresource)
        .collect()
}

#[test]
fn edits_reach_the_member_as_the_caller_and_the_members_refusal_comes_back() {
    let (tmp, dir) = data_dir();
    let member_log = tmp.path().join("member-audit.log");
    let member = strict_member(tmp.path(), &member_log);
    let impersonator = write(tmp.path(), "impersonator.token", "impersonator-token\n");
    let tokens = write(
        tmp.path(),
        "tokens.csv",
        &format!("{ADMIN},admin,1001,\"kubefold:admins\"\nalice-token,alice,2001,\"kubefold:editors,team-a\"\nbob-token,bob,2002,\"kubefold:editors\"\n"),
    );
    let (_config_dir, config) = config_file(&format!(
        "clusters:\n- name: member1\n  url: {}\n  token: kubefold-token\n  impersonatorTokenFile: {impersonator}\n",
        member.url()
    ));
    let kf = Kubefold::serve(&dir, &[], &["--config", &config, "--token-auth-file", &tokens]);
    kf.wait_ready();
    let config_map = |name: &str, namespace: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"mode": "fast"}});

    // alice creates where the member lets her: it arrives as alice.
    let (code, _, body) = send(&kf, "alice-token", "POST", "/clusters/member1/api/v1/namespaces/default/configmaps", Some(config_map("settings", "default")), &[]);
    assert_eq!(code, 201, "{body}");
    let created = member_events(&member_log, "create", "configmaps", None);
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["user"]["username"], "impersonator");
    assert_eq!(created[0]["impersonatedUser"]["username"], "alice");
    assert_eq!(created[0]["impersonatedUser"]["uid"], "2001");
    assert_eq!(created[0]["impersonatedUser"]["groups"], json!(["kubefold:editors", "team-a", "system:authenticated"]));
    assert_eq!(created[0]["responseStatus"]["code"], 201);

    // An edit at the top level (a qualified name) too.
    let (code, _, body) = send(&kf, "alice-token", "PATCH", "/api/v1/namespaces/default/configmaps/settings_member1", Some(json!({"data": {"mode": "slow"}})), &[("Content-Type", "application/merge-patch+json")]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["mode"], "slow");
    let patched = member_events(&member_log, "patch", "configmaps", None);
    assert_eq!(patched.len(), 1);
    assert_eq!(patched[0]["impersonatedUser"]["username"], "alice");
    assert_eq!(patched[0]["objectRef"]["name"], "settings");

    // Where the member's policy denies it, its 403 comes back unchanged
    // (kubefold's own rules let every editor through).
    let (code, _, body) = send(&kf, "alice-token", "POST", "/clusters/member1/api/v1/namespaces/kube-system/configmaps", Some(config_map("settings", "kube-system")), &[]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["message"], "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"kube-system\"");
    let (code, _, body) = send(&kf, "bob-token", "DELETE", "/api/v1/namespaces/default/configmaps/settings_member1", None, &[]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["message"], "configmaps \"settings\" is forbidden: User \"bob\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\"");
    let refused = member_events(&member_log, "delete", "configmaps", None);
    assert_eq!((refused[0]["impersonatedUser"]["username"].as_str(), refused[0]["responseStatus"]["code"].as_u64()), (Some("bob"), Some(403)));
    let (code, _, _) = send(&kf, "alice-token", "GET", "/api/v1/namespaces/default/configmaps/settings_member1", None, &[]);
    assert_eq!(code, 200, "bob's delete changed nothing");

    // kubectl --as: the member sees the impersonated user, not the admin.
    let as_alice = [("Impersonate-User", "alice"), ("Impersonate-Group", "kubefold:editors")];
    let (code, _, body) = send(&kf, ADMIN, "DELETE", "/api/v1/namespaces/default/configmaps/settings_member1", None, &as_alice);
    assert_eq!(code, 200, "{body}");
    let deleted = member_events(&member_log, "delete", "configmaps", None);
    assert_eq!(deleted.last().unwrap()["impersonatedUser"]["username"], "alice");
    assert_eq!(deleted.last().unwrap()["impersonatedUser"]["groups"], json!(["kubefold:editors", "system:authenticated"]));
    assert_eq!(deleted.last().unwrap()["responseStatus"]["code"], 200);

    // A streaming subresource goes as the caller too: alice may not exec.
    let (code, _, body) = send(&kf, "alice-token", "POST", "/api/v1/namespaces/default/pods/web-0_member1/exec?command=ls&stdout=true", None, &[]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["message"], "pods \"web-0\" is forbidden: User \"alice\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"default\"");
    let exec = member_events(&member_log, "create", "pods", Some("exec"));
    assert_eq!(exec.len(), 1);
    assert_eq!(exec[0]["impersonatedUser"]["username"], "alice");

    // kubefold's own reads stay kubefold's.
    let reads = audit_events(&member_log).into_iter().filter(|e| e["verb"] == "watch").collect::<Vec<_>>();
    assert!(!reads.is_empty() && reads.iter().all(|e| e["user"]["username"] == "kubefold" && e.get("impersonatedUser").is_none()));
    kf.stop();
}

#[test]
fn bearer_tokens_kubefold_does_not_know_are_reviewed_by_the_control_plane_and_cached() {
    let (tmp, dir) = data_dir();
    let policy = write(
        tmp.path(),
        "control-plane-authz.yaml",
        "users:\n\
         - {name: kubefold-auth, token: auth-token}\n\
         - {name: carol, token: carol-token, uid: '3001', groups: [kubefold:editors]}\n\
         rules:\n\
         - {users: [kubefold-auth], verbs: [create], apiGroups: [authentication.k8s.io], resources: [tokenreviews]}\n",
    );
    let (control_plane, kubeconfig) = control_plane(tmp.path(), &policy);
    let tokens = write(tmp.path(), "tokens.csv", &format!("{ADMIN},admin,1001,\"kubefold:admins\"\n"));
    let members = demo_members(1, 0.0);
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &["--token-auth-file", &tokens, "--authentication-kubeconfig", &kubeconfig, "--authentication-token-webhook-cache-ttl", "2s"],
    );
    kf.wait_ready();
    let reviews_of = |token: &str| {
        control_plane.requests().iter().filter(|r| r.method == "POST" && r.path == "/apis/authentication.k8s.io/v1/tokenreviews" && r.body.contains(token)).count()
    };

    // carol is who the control plane says, in the groups it says.
    let (code, _, body) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = send(&kf, "carol-token", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})), &[]);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "carol");
    assert_eq!(body["status"]["userInfo"]["uid"], "3001");
    assert_eq!(body["status"]["userInfo"]["groups"], json!(["kubefold:editors", "system:authenticated"]));
    assert_eq!(reviews_of("carol-token"), 1, "the second request used the cached answer");

    // A token the control plane does not know is 401, and its refusal cached.
    for _ in 0..2 {
        let (code, _, body) = send(&kf, "stolen-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
        assert_eq!(code, 401, "{body}");
        assert_eq!(body["reason"], "Unauthorized");
    }
    assert_eq!(reviews_of("stolen-token"), 1);

    // A token of kubefold's own file is never sent to the control plane.
    let (code, _, _) = send(&kf, ADMIN, "GET", "/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 200);
    assert_eq!(reviews_of(ADMIN), 0);

    // Past the cache's TTL the token is reviewed again.
    wait_for(std::time::Duration::from_secs(20), "carol's token reviewed again after the TTL", || {
        let (code, _, _) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
        assert_eq!(code, 200);
        reviews_of("carol-token") >= 2
    });

    // The control plane gone: unknown tokens are 401, not a hang.
    let stopped = control_plane.url();
    control_plane.stop();
    let (code, _, body) = send(&kf, "another-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 401, "{body} (control plane {stopped} stopped)");
    kf.stop();
}

#[test]
fn what_kubefolds_rules_do_not_allow_is_asked_of_the_control_plane_with_the_cluster() {
    let (tmp, dir) = data_dir();
    let policy = write(
        tmp.path(),
        "control-plane-authz.yaml",
        "users:\n\
         - {name: kubefold-auth, token: auth-token}\n\
         - {name: carol, token: carol-token, groups: [team-a]}\n\
         rules:\n\
         - {users: [kubefold-auth], verbs: [create], resources: [tokenreviews, subjectaccessreviews]}\n\
         - {groups: [team-a], verbs: [get, list, watch], apiGroups: [''], resources: [pods], namespaces: [default]}\n",
    );
    let (control_plane, kubeconfig) = control_plane(tmp.path(), &policy);
    let tokens = write(tmp.path(), "tokens.csv", &format!("{ADMIN},admin,1001,\"kubefold:admins\"\n"));
    let members = demo_members(1, 0.0);
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &["--token-auth-file", &tokens, "--authentication-kubeconfig", &kubeconfig, "--authorization-kubeconfig", &kubeconfig],
    );
    kf.wait_ready();
    let reviews = || {
        control_plane
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
            .collect::<Vec<Value>>()
    };

    // carol has no kubefold group: the control plane's policy decides.
    let (code, _, body) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/kube-system/pods", None, &[]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["message"], "pods is forbidden: User \"carol\" cannot list resource \"pods\" in API group \"\" in the namespace \"kube-system\"");
    let (code, _, body) = send(&kf, "carol-token", "DELETE", "/api/v1/namespaces/default/pods/web-0_member1", None, &[]);
    assert_eq!(code, 403, "{body}");

    // The member is passed as an extra attribute.
    let (code, _, body) = send(&kf, "carol-token", "GET", "/clusters/member1/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 200, "{body}");
    let asked = reviews();
    let spec = &asked.last().unwrap()["spec"];
    assert_eq!(spec["user"], "carol");
    assert_eq!(spec["groups"], json!(["team-a", "system:authenticated"]));
    assert_eq!(spec["resourceAttributes"], json!({"verb": "list", "group": "", "version": "v1", "resource": "pods", "namespace": "default"}));
    assert_eq!(spec["extra"], json!({"kubefold.io/cluster": ["member1"]}));

    // Answers are cached: the same request again asks nothing.
    let before = reviews().len();
    let (code, _, _) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/default/pods", None, &[]);
    assert_eq!(code, 200);
    let (code, _, _) = send(&kf, "carol-token", "GET", "/api/v1/namespaces/kube-system/pods", None, &[]);
    assert_eq!(code, 403);
    assert_eq!(reviews().len(), before);

    // What kubefold's own rules allow is never asked.
    let (code, _, _) = send(&kf, ADMIN, "GET", "/api/v1/namespaces/kube-system/pods", None, &[]);
    assert_eq!(code, 200);
    assert!(reviews().iter().all(|r| r["spec"]["user"] != "admin"));

    // `kubectl auth can-i` (a SelfSubjectAccessReview) says what a request
    // would meet: the control plane's answer where kubefold's rules refuse.
    let can_i = |verb: &str, namespace: &str| {
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": namespace}}
        });
        let (code, _, body) = send(&kf, "carol-token", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Some(review), &[]);
        assert_eq!(code, 201, "{body}");
        body["status"].clone()
    };
    let status = can_i("list", "default");
    assert_eq!(status["allowed"], true, "{status}");
    assert!(status["reason"].as_str().unwrap_or_default().contains("control plane"), "{status}");
    assert_eq!(can_i("list", "kube-system")["allowed"], false);
    assert_eq!(can_i("delete", "default")["allowed"], false);
    for path in ["/api", "/apis", "/api/v1"] {
        let (code, _, body) = send(&kf, "carol-token", "GET", path, None, &[]);
        assert_eq!(code, 200, "GET {path} as carol: {body}");
    }
    kf.stop();
}
