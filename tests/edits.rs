//! Edits through kubefold reach the owning member, with kubectl as the
//! client: edit, patch (strategic, merge, json), label, annotate, scale,
//! delete, create under a per-cluster kubeconfig, apply --server-side, logs.
//! After each, the member (read directly) and kubefold agree.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn member_get(sim: &str, path: &str) -> Value {
    let (code, body) = http_get(&format!("{sim}{path}"));
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn kubectl_ok(bin: &str, args: &[&str]) -> String {
    let (ok, out, err) = kubectl_bin(bin, args, None);
    assert!(ok, "kubectl {args:?}: {err}");
    out
}

#[test]
fn kubectl_1_33_edits_reach_the_owning_member() {
    edits_reach_the_owning_member("kubectl");
}

#[test]
fn kubectl_1_27_edits_reach_the_owning_member() {
    edits_reach_the_owning_member(&kubectl_version("1.27"));
}

fn edits_reach_the_owning_member(bin: &str) {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let s = &kf.url;
    let m2 = members[1].1.url();
    let pod = "/api/v1/namespaces/default/pods/web-1";

    kubectl_ok(bin, &["--server", s, "label", "pod", "web-1_member2", "-n", "default", "team=blue"]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["team"], "blue");
    assert_eq!(kf.get_json("/api/v1/namespaces/default/pods/web-1_member2")["metadata"]["labels"]["team"], "blue");
    assert!(member_get(&members[0].1.url(), pod)["metadata"]["labels"].get("team").is_none(), "member1 untouched");

    kubectl_ok(bin, &["--server", s, "annotate", "pod", "web-1_member2", "-n", "default", "note=hello"]);
    assert_eq!(member_get(&m2, pod)["metadata"]["annotations"]["note"], "hello");
    assert!(member_get(&m2, pod)["metadata"]["annotations"].get("kubefold.io/cluster").is_none(), "kubefold's annotations never reach the member");

    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "--type", "merge", "-p", r#"{"metadata":{"labels":{"merge":"yes"}}}"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["merge"], "yes");
    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "--type", "json", "-p", r#"[{"op":"add","path":"/metadata/labels/json","value":"yes"}]"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["json"], "yes");
    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "-p", r#"{"metadata":{"labels":{"strategic":"yes"}}}"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["strategic"], "yes");

    // edit with a scripted editor (under a timeout: a failing edit reopens the editor).
    let editor_dir = tempfile::tempdir().unwrap();
    let editor = editor_dir.path().join("editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nsed -i 's/team: blue/team: green/' \"$1\"\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&editor).status().unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", bin, "--server", s, "edit", "pod", "web-1_member2", "-n", "default"])
        .env("KUBECONFIG", "/dev/null")
        .env("EDITOR", &editor)
        .output()
        .unwrap();
    assert!(out.status.success(), "edit: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["team"], "green");

    // scale a deployment of member1.
    let deploys = kf.get_json("/apis/apps/v1/deployments");
    let d = deploys["items"].as_array().unwrap().iter().find(|d| d["metadata"]["annotations"]["kubefold.io/cluster"] == "member1").unwrap();
    let (ns, qualified) = (d["metadata"]["namespace"].as_str().unwrap(), d["metadata"]["name"].as_str().unwrap());
    let member_name = qualified.trim_end_matches("_member1");
    kubectl_ok(bin, &["--server", s, "scale", "deployment", qualified, "-n", ns, "--replicas=5"]);
    let m1 = members[0].1.url();
    assert_eq!(member_get(&m1, &format!("/apis/apps/v1/namespaces/{ns}/deployments/{member_name}"))["spec"]["replicas"], 5);
    assert_eq!(kf.get_json(&format!("/apis/apps/v1/namespaces/{ns}/deployments/{qualified}"))["spec"]["replicas"], 5);

    // delete a pod.
    kubectl_ok(bin, &["--server", s, "delete", "pod", "web-2_member2", "-n", "default", "--wait=false"]);
    wait_for(Duration::from_secs(20), "pod deleted in member", || http_get(&format!("{m2}/api/v1/namespaces/default/pods/web-2")).0 == 404);
    assert_eq!(kf.get("/api/v1/namespaces/default/pods/web-2_member2").0, 404);

    // create under a per-cluster kubeconfig.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("m2.yaml");
    std::fs::write(&kubeconfig, format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: m2\n  cluster:\n    server: {s}/clusters/member2\ncontexts:\n- name: m2\n  context:\n    cluster: m2\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: m2\n"
    )).unwrap();
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: created-here\n  namespace: default\ndata:\n  k: v\n").unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", bin, "create", "-f"])
        .arg(&manifest)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "create: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(member_get(&m2, "/api/v1/namespaces/default/configmaps/created-here")["data"]["k"], "v");
    assert_eq!(kf.get("/api/v1/namespaces/default/configmaps/created-here_member2").0, 200);

    // apply --server-side at the aggregated path with a qualified name:
    // creating, then taking over fields of another manager (--force-conflicts).
    let fresh = dir.path().join("fresh.yaml");
    std::fs::write(&fresh, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied-new_member2\n  namespace: default\ndata:\n  a: b\n").unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", bin, "--server", s, "apply", "--server-side", "-f"])
        .arg(&fresh)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "apply (create): {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(member_get(&m2, "/api/v1/namespaces/default/configmaps/applied-new")["data"]["a"], "b");
    let applied = dir.path().join("applied.yaml");
    std::fs::write(&applied, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: created-here_member2\n  namespace: default\ndata:\n  k: v2\n  extra: e\n").unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", bin, "--server", s, "apply", "--server-side", "--force-conflicts", "-f"])
        .arg(&applied)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let cm = member_get(&m2, "/api/v1/namespaces/default/configmaps/created-here");
    assert_eq!((cm["data"]["k"].as_str(), cm["data"]["extra"].as_str()), (Some("v2"), Some("e")));

    // logs and logs -f (bounded).
    let out = kubectl_ok(bin, &["--server", s, "logs", "web-0_member1", "-n", "default", "--tail=3"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let out = std::process::Command::new("timeout")
        .args(["3", bin, "--server", s, "logs", "-f", "web-0_member1", "-n", "default", "--tail=1"])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() >= 2, "follow streams new lines");
}

#[test]
fn optimistic_concurrency_and_ambiguity_never_reach_members() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url);
    let mut pod = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    let current = rv_of(&pod);
    for (_, sim) in &members {
        sim.clear_requests();
    }
    // A stale global RV: 409 from kubefold, nothing sent.
    pod["metadata"]["resourceVersion"] = json!((current - 1).to_string());
    pod["metadata"]["labels"]["stale"] = json!("yes");
    let resp = client.put(&url).json(&pod).send().unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let status: Value = resp.json().unwrap();
    assert_eq!(status["reason"], "Conflict");
    // Ambiguous bare name: 409 listing candidates, nothing sent.
    let resp = client
        .patch(format!("{}/api/v1/namespaces/default/pods/web-0", kf.url))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"x":"y"}}}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let body = resp.text().unwrap();
    assert!(body.contains("web-0_member1") && body.contains("web-0_member2"), "{body}");
    for (name, sim) in &members {
        let writes: Vec<_> = sim.requests().into_iter().filter(|r| r.method != "GET").collect();
        assert!(writes.is_empty(), "{name} saw {writes:?}");
    }
    // The current RV goes through, and a get right after shows the edit, 100 times.
    let mut last = current;
    for i in 0..100 {
        let mut pod = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
        pod["metadata"]["labels"]["round"] = json!(i.to_string());
        let resp = client.put(&url).json(&pod).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "round {i}");
        let got = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
        assert_eq!(got["metadata"]["labels"]["round"], json!(i.to_string()), "round {i}: read-your-writes");
        assert!(rv_of(&got) > last, "round {i}: RV grows");
        last = rv_of(&got);
    }
    // A member's own 409 (its RV moved on underneath) comes back as a Status.
    let m1 = members[0].1.url();
    client
        .patch(format!("{m1}/api/v1/namespaces/default/pods/web-0"))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"direct":"1"}}}"#)
        .send()
        .unwrap();
    let mut pod = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    // Wait until kubefold saw the direct change, then race: use the old member RV.
    wait_for(Duration::from_secs(10), "direct change ingested", || kf.get_json("/api/v1/namespaces/default/pods/web-0_member1")["metadata"]["labels"]["direct"] == "1");
    pod["metadata"]["resourceVersion"] = json!(rv_of(&kf.get_json("/api/v1/namespaces/default/pods/web-0_member1")).to_string());
    let resp = client.put(&url).json(&pod).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[test]
fn unreachable_member_answers_503_and_reads_go_on() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let mut members = members;
    let (_, dead) = members.remove(1);
    dead.stop();
    let resp = reqwest::blocking::Client::new()
        .patch(format!("{}/api/v1/namespaces/default/pods/web-0_member2", kf.url))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"metadata":{"labels":{"x":"y"}}}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let status: Value = resp.json().unwrap();
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert!(status["message"].as_str().unwrap().contains("member2"));
    assert_eq!(kf.get("/api/v1/namespaces/default/pods/web-0_member2").0, 200);
    assert_eq!(kf.get("/api/v1/pods").0, 200);
}

#[test]
fn fixtures_survive_get_and_put_field_for_field() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim = members[0].1.url();
    let client = reqwest::blocking::Client::new();
    for (file, gv, plural) in [
        ("core.v1.ConfigMap.json", "/api/v1", "configmaps"),
        ("core.v1.Service.json", "/api/v1", "services"),
        ("apps.v1.Deployment.json", "/apis/apps/v1", "deployments"),
        ("apps.v1.StatefulSet.json", "/apis/apps/v1", "statefulsets"),
        ("core.v1.Pod.json", "/api/v1", "pods"),
    ] {
        let name = format!("put-{plural}");
        let object = fixture(file, &name);
        let path = format!("{gv}/namespaces/default/{plural}");
        let resp = client.post(format!("{sim}{path}")).json(&object).send().unwrap();
        assert!(resp.status().is_success(), "{file}: {}", resp.text().unwrap());
        let qualified = format!("{name}_member1");
        // Wait until the member's own controllers are done with the object and
        // kubefold serves the member's current version.
        let mut created = Value::Null;
        let mut served = Value::Null;
        let mut stable_since = std::time::Instant::now();
        let mut last_rv = Value::Null;
        wait_for(Duration::from_secs(30), file, || {
            let (code, body) = kf.get(&format!("{path}/{qualified}"));
            if code != 200 {
                return false;
            }
            served = serde_json::from_str(&body).unwrap();
            created = member_get(&sim, &format!("{path}/{name}"));
            if created["metadata"]["resourceVersion"] != last_rv {
                last_rv = created["metadata"]["resourceVersion"].clone();
                stable_since = std::time::Instant::now();
            }
            served["metadata"]["annotations"]["kubefold.io/member-resource-version"] == created["metadata"]["resourceVersion"]
                && stable_since.elapsed() > Duration::from_secs(1)
        });
        let resp = client.put(format!("{}{path}/{qualified}", kf.url)).json(&served).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{file}: {}", resp.text().unwrap());
        let after = member_get(&sim, &format!("{path}/{name}"));
        let strip = |v: &Value| {
            let mut v = v.clone();
            let meta = v["metadata"].as_object_mut().unwrap();
            for f in ["resourceVersion", "generation", "managedFields"] {
                meta.remove(f);
            }
            v
        };
        assert_eq!(strip(&after), strip(&created), "{file}: the member object is unchanged by the round trip");
    }
}

#[test]
fn status_generate_name_and_deletecollection() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::new();

    // generateName under /clusters/{c}: the member picks the name.
    let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-","namespace":"default","labels":{"batch":"x"}},"data":{"a":"b"}});
    let resp = client.post(format!("{}/clusters/member1/api/v1/namespaces/default/configmaps", kf.url)).json(&cm).send().unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let created: Value = resp.json().unwrap();
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("gen-") && name.len() > 4, "{name}");
    assert_eq!(kf.get(&format!("/api/v1/namespaces/default/configmaps/{name}_member1")).0, 200, "read-your-writes");
    // The same at the aggregated path with a qualified name.
    let cm2 = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"named_member2","namespace":"default","labels":{"batch":"x"}}});
    let resp = client.post(format!("{}/api/v1/namespaces/default/configmaps", kf.url)).json(&cm2).send().unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let created: Value = resp.json().unwrap();
    assert_eq!(created["metadata"]["name"], "named_member2");
    assert_eq!(member_get(&members[1].1.url(), "/api/v1/namespaces/default/configmaps/named")["metadata"]["name"], "named");

    // The status subresource of a deployment.
    let deploys = kf.get_json("/apis/apps/v1/namespaces/shop/deployments");
    let d = &deploys["items"][0];
    let qualified = d["metadata"]["name"].as_str().unwrap().to_string();
    let cluster = d["metadata"]["annotations"]["kubefold.io/cluster"].as_str().unwrap().to_string();
    let resp = client
        .patch(format!("{}/apis/apps/v1/namespaces/shop/deployments/{qualified}/status", kf.url))
        .header("Content-Type", "application/merge-patch+json")
        .body(r#"{"status":{"observedGeneration":777}}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{}", resp.text().unwrap());
    let member_name = qualified.trim_end_matches(&format!("_{cluster}"));
    let sim = members.iter().find(|(n, _)| *n == cluster).unwrap().1.url();
    assert_eq!(member_get(&sim, &format!("/apis/apps/v1/namespaces/shop/deployments/{member_name}"))["status"]["observedGeneration"], 777);
    let status = kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}/status"));
    assert_eq!(status["status"]["observedGeneration"], 777);
    let scale = kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}/scale"));
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["metadata"]["name"], qualified.as_str());

    // deletecollection on a namespace path: every member, merged.
    let resp = client.delete(format!("{}/api/v1/namespaces/default/configmaps?labelSelector=batch%3Dx", kf.url)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let list: Value = resp.json().unwrap();
    let mut deleted: Vec<String> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    deleted.sort();
    assert_eq!(deleted, vec![format!("{name}_member1"), "named_member2".to_string()]);
    wait_for(Duration::from_secs(20), "deletions ingested", || {
        kf.get_json("/api/v1/configmaps?labelSelector=batch%3Dx")["items"].as_array().unwrap().is_empty()
    });
}
