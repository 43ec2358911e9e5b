//! Members and the resource selection from a Karmada control plane
//! (`--karmada-kubeconfig`), live; the API under Karmada's proxy path.

mod common;

use std::time::Duration;

use common::{data_dir, kubectl_bin, wait_for, Kubefold};
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::{json, Value};

const PROXY: &str = "/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy";

fn sim(name: &str, seed: u64, karmada: bool) -> SimHandle {
    let workload = if karmada { Workload::Empty } else { Workload::Demo };
    kubefold_testdata::start(SimConfig { name: name.into(), workload, seed, karmada, ..SimConfig::default() }).expect("simulator starts")
}

fn send(sim: &SimHandle, method: &str, path: &str, content_type: &str, body: &Value) -> Value {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let response = client
        .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), format!("{}{path}", sim.url()))
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .unwrap();
    let code = response.status().as_u16();
    let answer: Value = response.json().unwrap_or(Value::Null);
    assert!((200..300).contains(&code), "{method} {path}: {code} {answer}");
    answer
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Registers `member` in the control plane: its Secret and its Cluster.
fn register(karmada: &SimHandle, name: &str, member: &SimHandle, token: &str) {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "karmada-cluster"}, "data": {"token": b64(token)}});
    send(karmada, "POST", "/api/v1/namespaces/karmada-cluster/secrets", "application/json", &secret);
    let cluster = json!({
        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name, "labels": {"env": "test"}},
        "spec": {"syncMode": "Push", "apiEndpoint": member.url(), "secretRef": {"namespace": "karmada-cluster", "name": name}},
    });
    send(karmada, "POST", "/apis/cluster.karmada.io/v1alpha1/clusters", "application/json", &cluster);
}

/// The names of a list served by kubefold (404: none).
fn names(kf: &Kubefold, path: &str) -> Vec<String> {
    let (code, body) = kf.get(path);
    if code != 200 {
        return Vec::new();
    }
    let list: Value = serde_json::from_str(&body).unwrap();
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn members_and_selection_follow_karmada_live() {
    let karmada = sim("karmada", 9, true);
    let member1 = sim("member1", 1, false);
    let member2 = sim("member2", 2, false);
    let member3 = sim("member3", 3, false);
    register(&karmada, "member1", &member1, "token-1");
    register(&karmada, "member2", &member2, "token-2");
    let (_dir, data) = data_dir();
    let kubeconfig = data.parent().unwrap().join("karmada.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\ncurrent-context: karmada\nclusters: [{{name: karmada, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: admin, user: {{}}}}]\ncontexts: [{{name: karmada, context: {{cluster: karmada, user: admin}}}}]\n", karmada.url()),
    )
    .unwrap();
    let kf = Kubefold::serve(&data, &[], &["--karmada-kubeconfig", kubeconfig.to_str().unwrap(), "--karmada-context", "karmada"]);
    let pods = "/api/v1/namespaces/default/pods";
    let has = |kf: &Kubefold, path: &str, name: &str| names(kf, path).iter().any(|n| n == name);
    wait_for(Duration::from_secs(60), "both Karmada members' pods", || has(&kf, pods, "web-0_member1") && has(&kf, pods, "web-0_member2"));

    // A watch opened now sees the members come and go in the same stream.
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (events, ended, url) = (events.clone(), ended.clone(), format!("{}{pods}?watch=true", kf.url));
        std::thread::spawn(move || {
            use std::io::BufRead;
            let client = reqwest::blocking::Client::builder().timeout(None).build().unwrap();
            if let Ok(response) = client.get(url).send() {
                for line in std::io::BufReader::new(response).lines().map_while(Result::ok) {
                    let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                    let name = event["object"]["metadata"]["name"].as_str().unwrap_or_default();
                    events.lock().unwrap().push(format!("{} {name}", event["type"].as_str().unwrap_or_default()));
                }
            }
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    let seen = |event: &str| events.lock().unwrap().iter().any(|e| e == event);
    wait_for(Duration::from_secs(30), "the watch's initial events", || seen("ADDED web-0_member2"));

    // A Cluster added live.
    register(&karmada, "member3", &member3, "token-3");
    wait_for(Duration::from_secs(30), "member3's pods", || has(&kf, pods, "web-0_member3"));

    // Its token rotated: the member is read again with the new credentials.
    member1.clear_requests();
    send(&karmada, "PATCH", "/api/v1/namespaces/karmada-cluster/secrets/member1", "application/merge-patch+json", &json!({"data": {"token": b64("token-1b")}}));
    wait_for(Duration::from_secs(30), "member1 read again after its token changed", || {
        member1.requests().iter().any(|r| r.path == "/api/v1/pods")
    });
    assert!(has(&kf, pods, "web-0_member1"));

    // A Cluster removed live: its objects are gone, the others stay.
    let client = reqwest::blocking::Client::new();
    let deleted = client.delete(format!("{}/apis/cluster.karmada.io/v1alpha1/clusters/member2", karmada.url())).send().unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    wait_for(Duration::from_secs(30), "member2's pods gone", || !has(&kf, pods, "web-0_member2"));
    assert!(has(&kf, pods, "web-0_member1") && has(&kf, pods, "web-0_member3"));
    // The open watch saw member3 arrive and member2 leave, and stays open.
    wait_for(Duration::from_secs(30), "member2's pods DELETED in the open watch", || seen("DELETED web-0_member2"));
    assert!(seen("ADDED web-0_member3"), "{:?}", events.lock().unwrap());
    assert!(!ended.load(std::sync::atomic::Ordering::SeqCst), "the watch ended when a cluster was removed");

    // A ResourceRegistry becomes the selection: config maps of member1 only.
    let registry = json!({
        "apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": {"name": "config"},
        "spec": {"targetCluster": {"clusterNames": ["member1"]}, "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]},
    });
    send(&karmada, "POST", "/apis/search.karmada.io/v1alpha1/resourceregistries", "application/json", &registry);
    wait_for(Duration::from_secs(30), "pods no longer served", || kf.get(pods).0 == 404);
    // The other members' config maps become DELETED events once the
    // selection is applied.
    wait_for(Duration::from_secs(30), "config maps of member1 only", || {
        let configmaps = names(&kf, "/api/v1/configmaps");
        !configmaps.is_empty() && configmaps.iter().all(|n| n.ends_with("_member1"))
    });
    // Changed live: member3 too.
    send(&karmada, "PATCH", "/apis/search.karmada.io/v1alpha1/resourceregistries/config", "application/merge-patch+json", &json!({"spec": {"targetCluster": {"clusterNames": ["member1", "member3"]}}}));
    wait_for(Duration::from_secs(30), "member3's config maps", || names(&kf, "/api/v1/configmaps").iter().any(|n| n.ends_with("_member3")));

    // All of it came from watches, not from reading the control plane
    // again and again: one list of each kind, then watches from it.
    let requests = karmada.requests();
    let count = |path: &str, watch: bool| requests.iter().filter(|r| r.method == "GET" && r.path == path && r.watch == watch).count();
    for path in ["/apis/cluster.karmada.io/v1alpha1/clusters", "/apis/search.karmada.io/v1alpha1/resourceregistries", "/api/v1/namespaces/karmada-cluster/secrets"] {
        assert!(count(path, true) >= 1, "no watch of {path}: {requests:?}");
        assert!(count(path, false) <= 2, "{path} listed {} times: the control plane is polled", count(path, false));
    }
    assert!(requests.iter().all(|r| r.method != "GET" || !r.path.starts_with("/api/v1/namespaces/karmada-cluster/secrets/")), "Secrets read one by one");

    // kubectl through Karmada's proxy path: only the server changes.
    let bin = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
    if !std::path::Path::new(bin).exists() {
        println!("SKIPPED: {bin} not found: kubectl through the Karmada path");
        return;
    }
    let server = format!("{}{PROXY}", kf.url);
    let (ok, out, err) = kubectl_bin(bin, &["--server", &server, "get", "configmaps", "-A"], None);
    assert!(ok, "{err}");
    assert!(out.contains("kube-root-ca.crt_member1") && out.contains("CLUSTER"), "{out}");
    let (ok, out, err) = kubectl_bin(bin, &["--server", &server, "api-resources"], None);
    assert!(ok, "{err}");
    assert!(out.contains("configmaps") && !out.contains("pods "), "{out}");
}

#[test]
fn a_karmada_cluster_named_as_a_configured_one_is_refused() {
    let karmada = sim("karmada", 9, true);
    let member1 = sim("member1", 1, false);
    let member2 = sim("member2", 2, false);
    let other = sim("other", 4, false);
    register(&karmada, "member1", &other, "token");
    register(&karmada, "member2", &member2, "token");
    let (_dir, data) = data_dir();
    let kubeconfig = data.parent().unwrap().join("karmada.kubeconfig");
    std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: k, context: {{cluster: k, user: u}}}}]\ncurrent-context: k\n", karmada.url())).unwrap();
    let kf = Kubefold::serve(&data, &[("member1".to_string(), member1.url())], &["--karmada-kubeconfig", kubeconfig.to_str().unwrap()]);
    wait_for(Duration::from_secs(60), "Karmada's member2 beside the configured member1", || {
        let pods = names(&kf, "/api/v1/namespaces/default/pods");
        pods.iter().any(|n| n == "web-0_member1") && pods.iter().any(|n| n == "web-0_member2")
    });
    wait_for(Duration::from_secs(10), "the name clash in the log", || kf.logs().contains("has the name of a configured cluster"));
    // The configured member1 is the one served, not the Karmada Cluster's endpoint.
    assert!(other.requests().iter().all(|r| !r.path.starts_with("/api/v1/pods")), "the clashing Cluster was contacted");
}

#[test]
fn edits_through_the_karmada_path_act_on_the_member_as_the_caller() {
    let karmada = sim("karmada", 9, true);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("member-authz.yaml");
    std::fs::write(
        &policy,
        "users: [{name: kubefold, token: token-1}, {name: impersonator, token: impersonator-1}]\n\
         rules:\n\
         - {users: [kubefold], verbs: [get, list, watch], resources: ['*']}\n\
         - {users: [impersonator], verbs: [impersonate], resources: [users, groups, uids]}\n\
         - {groups: [team-a], verbs: [create, patch, delete], apiGroups: [''], resources: [configmaps], namespaces: [default]}\n",
    )
    .unwrap();
    let member_log = dir.path().join("member1-audit.log");
    let member1 = kubefold_testdata::start(SimConfig {
        name: "member1".into(),
        workload: Workload::Demo,
        authz_file: Some(policy),
        audit_log_path: Some(member_log.clone()),
        ..SimConfig::default()
    })
    .expect("simulator starts");
    register(&karmada, "member1", &member1, "token-1");
    // The impersonator Secret, as karmadactl join writes it.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member1-impersonator", "namespace": "karmada-cluster"}, "data": {"token": b64("impersonator-1")}});
    send(&karmada, "POST", "/api/v1/namespaces/karmada-cluster/secrets", "application/json", &secret);
    let reference = json!({"spec": {"impersonatorSecretRef": {"namespace": "karmada-cluster", "name": "member1-impersonator"}}});
    send(&karmada, "PATCH", "/apis/cluster.karmada.io/v1alpha1/clusters/member1", "application/merge-patch+json", &reference);

    let (_dir, data) = data_dir();
    let kubeconfig = data.parent().unwrap().join("karmada.kubeconfig");
    std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: k, context: {{cluster: k, user: u}}}}]\ncurrent-context: k\n", karmada.url())).unwrap();
    let tokens = data.parent().unwrap().join("tokens.csv");
    std::fs::write(&tokens, "carol-token,carol,3001,\"kubefold:editors,team-a\"\ndave-token,dave,3002,\"kubefold:editors\"\n").unwrap();
    let kf = Kubefold::serve(&data, &[], &["--karmada-kubeconfig", kubeconfig.to_str().unwrap(), "--token-auth-file", tokens.to_str().unwrap()]);
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let pods = format!("{}{PROXY}/api/v1/namespaces/default/pods", kf.url);
    wait_for(Duration::from_secs(60), "member1's pods", || {
        client.get(&pods).bearer_auth("carol-token").send().ok().filter(|r| r.status() == 200).and_then(|r| r.text().ok()).is_some_and(|t| t.contains("web-0_member1"))
    });
    let create = |token: &str| {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("from-{token}_member1"), "namespace": "default"}});
        let response = client.post(format!("{}{PROXY}/api/v1/namespaces/default/configmaps", kf.url)).bearer_auth(token).json(&config_map).send().unwrap();
        (response.status().as_u16(), response.json::<Value>().unwrap_or(Value::Null))
    };
    let (code, body) = create("carol-token");
    assert_eq!(code, 201, "{body}");
    let (code, body) = create("dave-token");
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["message"], "configmaps is forbidden: User \"dave\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\"");
    let events: Vec<Value> = std::fs::read_to_string(&member_log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let creates: Vec<(String, String, u64)> = events
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps")
        .map(|e| (e["user"]["username"].as_str().unwrap().to_string(), e["impersonatedUser"]["username"].as_str().unwrap_or_default().to_string(), e["responseStatus"]["code"].as_u64().unwrap()))
        .collect();
    assert_eq!(creates, [("impersonator".to_string(), "carol".to_string(), 201), ("impersonator".to_string(), "dave".to_string(), 403)]);
}

#[test]
fn a_clusters_ready_condition_and_an_unreachable_pull_cluster_show_in_the_status() {
    let karmada = sim("karmada", 9, true);
    let member1 = sim("member1", 1, false);
    register(&karmada, "member1", &member1, "token-1");
    // A Pull-mode Cluster whose endpoint nothing answers (its agent pulls;
    // the control plane, and kubefold, cannot reach it).
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "faraway", "namespace": "karmada-cluster"}, "data": {"token": b64("token-f")}});
    send(&karmada, "POST", "/api/v1/namespaces/karmada-cluster/secrets", "application/json", &secret);
    let cluster = json!({
        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "faraway"},
        "spec": {"syncMode": "Pull", "apiEndpoint": common::dead_port_url(), "secretRef": {"namespace": "karmada-cluster", "name": "faraway"}},
    });
    send(&karmada, "POST", "/apis/cluster.karmada.io/v1alpha1/clusters", "application/json", &cluster);
    let (_dir, data) = data_dir();
    let kubeconfig = data.parent().unwrap().join("karmada.kubeconfig");
    std::fs::write(&kubeconfig, format!("apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: k, context: {{cluster: k, user: u}}}}]\ncurrent-context: k\n", karmada.url())).unwrap();
    let kf = Kubefold::serve(&data, &[], &["--karmada-kubeconfig", kubeconfig.to_str().unwrap()]);
    let status = |name: &str| {
        let (code, body) = kf.get(&format!("/admin/v1/clusters/{name}"));
        if code == 200 { serde_json::from_str::<Value>(&body).unwrap()["status"].clone() } else { Value::Null }
    };
    wait_for(Duration::from_secs(60), "member1 synced", || status("member1")["phase"] == "Synced");
    assert_eq!(status("member1")["karmada"], json!({"syncMode": "Push"}));
    wait_for(Duration::from_secs(60), "faraway unreachable", || status("faraway")["phase"] == "Unreachable");
    let faraway = status("faraway");
    assert!(faraway["reason"].as_str().is_some_and(|r| !r.is_empty()), "{faraway}");
    assert_eq!(faraway["karmada"]["syncMode"], "Pull");

    // Karmada marks member1 not ready: shown at once.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ClusterNotReachable", "message": "cluster is not reachable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    send(&karmada, "PATCH", "/apis/cluster.karmada.io/v1alpha1/clusters/member1/status", "application/merge-patch+json", &ready);
    wait_for(Duration::from_secs(30), "member1 not ready", || status("member1")["phase"] == "NotReady");
    let member1_status = status("member1");
    assert_eq!(member1_status["reason"], "ClusterNotReachable: cluster is not reachable");
    assert_eq!(member1_status["karmada"]["ready"]["status"], "False");
    // And ready again.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "cluster is healthy and ready to accept workloads", "lastTransitionTime": "2026-01-01T00:01:00Z"}]}});
    send(&karmada, "PATCH", "/apis/cluster.karmada.io/v1alpha1/clusters/member1/status", "application/merge-patch+json", &ready);
    wait_for(Duration::from_secs(30), "member1 ready", || status("member1")["phase"] == "Synced");
    assert!(status("member1").get("reason").is_none());
}

#[test]
fn the_apiservice_of_ops_names_the_group_kubefold_serves_for_the_aggregator() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ops/kubernetes-aggregated/apiservice.yaml")).unwrap();
    let service: Value = serde_saphyr::from_str(&text).unwrap();
    let (group, version) = (service["spec"]["group"].as_str().unwrap(), service["spec"]["version"].as_str().unwrap());
    assert_eq!(service["metadata"]["name"], format!("{version}.{group}"));
    let member1 = sim("member1", 1, false);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &[("member1".to_string(), member1.url())], &[]);
    kf.wait_ready();
    // The aggregator's availability check and discovery read these.
    let (code, body) = kf.get(&format!("/apis/{group}/{version}"));
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], format!("{group}/{version}"));
    assert!(list["resources"].as_array().unwrap().iter().any(|r| r["name"] == "proxying/proxy"));
    let (code, body) = kf.get(&format!("/apis/{group}"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["preferredVersion"]["version"], version);
    // What the aggregator then forwards: the API under the proxy path.
    let (code, body) = kf.get(&format!("{PROXY}/api/v1/namespaces/default/pods"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("web-0_member1"));
}

#[test]
fn the_simulator_serves_a_custom_resource_defined_at_runtime() {
    let control_plane = sim("karmada", 9, true);
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let url = |path: &str| format!("{}{path}", control_plane.url());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList", "shortNames": ["gd"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    assert_eq!(client.get(url("/apis/example.org/v1")).send().unwrap().status().as_u16(), 404, "not served before its definition");
    send(&control_plane, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", &crd);
    // Established, and served: discovery, then every verb.
    let definition: Value = client.get(url("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.org")).send().unwrap().json().unwrap();
    assert!(definition["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Established" && c["status"] == "True"), "{definition}");
    let groups: Value = client.get(url("/apis")).send().unwrap().json().unwrap();
    assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "example.org"), "{groups}");
    let resources: Value = client.get(url("/apis/example.org/v1")).send().unwrap().json().unwrap();
    let gadgets = resources["resources"].as_array().unwrap().iter().find(|r| r["name"] == "gadgets").cloned().unwrap_or(Value::Null);
    assert_eq!((gadgets["kind"].as_str(), gadgets["namespaced"].as_bool()), (Some("Gadget"), Some(true)), "{resources}");
    assert!(resources["resources"].as_array().unwrap().iter().any(|r| r["name"] == "gadgets/status"));

    let collection = "/apis/example.org/v1/namespaces/default/gadgets";
    let watch = client.get(url(&format!("{collection}?watch=true"))).send().unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    let gadget = json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "default"}, "spec": {"size": 3}});
    let created = send(&control_plane, "POST", collection, "application/json", &gadget);
    assert_eq!(created["spec"]["size"], 3);
    let mut changed = created.clone();
    changed["spec"]["size"] = json!(4);
    let updated = send(&control_plane, "PUT", &format!("{collection}/g1"), "application/json", &changed);
    assert_eq!(updated["spec"]["size"], 4);
    let list: Value = client.get(url(collection)).send().unwrap().json().unwrap();
    assert_eq!(list["kind"], "GadgetList");
    assert_eq!(list["items"][0]["metadata"]["name"], "g1");
    let deleted = client.delete(url(&format!("{collection}/g1"))).send().unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    assert_eq!(client.get(url(&format!("{collection}/g1"))).send().unwrap().status().as_u16(), 404);
    // The watch opened before saw the gadget come, change and go.
    use std::io::BufRead;
    let types: Vec<String> = std::io::BufReader::new(watch)
        .lines()
        .take(3)
        .map(|l| serde_json::from_str::<Value>(&l.unwrap()).unwrap()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
}
