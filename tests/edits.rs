//! Edits through kubefold reach the owning member, with kubectl as the
//! client: edit, patch (strategic, merge, json), label, annotate, scale,
//! delete, create under a per-cluster kubeconfig, apply --server-side, logs.
//! After each, the member (read directly) and kubefold agree.

mod common;

use std::time::Duration;

use common::*;
use kubefold_testdata::sim::faults::Faults;
use kubefold_testdata::SimHandle;
use serde_json::{json, Value};

/// The member's watches lag: events are held back until released, so that
/// kubefold's view falls behind the member's writes.
fn hold_watches(sim: &SimHandle) {
    sim.set_faults(Faults { hold_watch_events: true, ..Faults::default() });
}

/// Lets the member's watch events flow again, then waits until kubefold
/// serves member1's `web-0` with the label `key=value`.
fn release_watches_until_label(kf: &Kubefold, sim: &SimHandle, key: &str, value: &str, what: &str) {
    sim.set_faults(Faults::default());
    wait_for(Duration::from_secs(20), what, || {
        kf.get_json("/api/v1/namespaces/default/pods/web-0_member1")["metadata"]["labels"][key] == value
    });
}

fn send(request: reqwest::blocking::RequestBuilder) -> (u16, Value) {
    let resp = request.send().unwrap();
    let code = resp.status().as_u16();
    let text = resp.text().unwrap();
    (code, serde_json::from_str(&text).unwrap_or_else(|_| json!(text)))
}

/// Requests a member saw that concern objects: every write, and every GET
/// of the object named. kubefold's own traffic (watches, and lists of the
/// collection from relists and its one-object list before a watch resumes)
/// goes to collection paths and is left out; a forwarded GET of the object
/// would not be.
fn object_requests(sim: &SimHandle, name: &str) -> Vec<kubefold_testdata::RequestRecord> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET" || (!r.watch && r.path.rsplit('/').any(|segment| segment == name)))
        .collect()
}

/// Creates a ConfigMap directly in a member and waits until kubefold serves it.
fn member_config_map(kf: &Kubefold, sim: &SimHandle, cluster: &str, name: &str, labels: Value) -> Value {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "labels": labels}, "data": {"k": "v"}});
    let (code, body) = send(reqwest::blocking::Client::new().post(format!("{}/api/v1/namespaces/default/configmaps", sim.url())).json(&cm));
    assert_eq!(code, 201, "{body}");
    let path = format!("/api/v1/namespaces/default/configmaps/{name}_{cluster}");
    wait_for(Duration::from_secs(20), "ConfigMap ingested", || kf.get(&path).0 == 200);
    kf.get_json(&path)
}

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

/// kubefold's copy of an object as the member should hold it: the member's
/// name, no `kubefold.io/` annotations (after checking that they name the
/// cluster and the member's resourceVersion), and no resourceVersion (global
/// in kubefold, the member's own in the member).
fn as_member_sees_it(served: &Value, cluster: &str) -> (Value, String) {
    let mut v = served.clone();
    let meta = v["metadata"].as_object_mut().unwrap();
    let name = meta["name"].as_str().unwrap().to_string();
    let bare = name.strip_suffix(&format!("_{cluster}")).unwrap_or_else(|| panic!("{name} is qualified with {cluster}"));
    meta.insert("name".into(), json!(bare));
    let annotations = meta["annotations"].as_object_mut().unwrap();
    assert_eq!(annotations["kubefold.io/cluster"], cluster, "{name}");
    let member_rv = annotations["kubefold.io/member-resource-version"].as_str().unwrap().to_string();
    annotations.retain(|k, _| !k.starts_with("kubefold.io/"));
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    meta.remove("resourceVersion");
    (v, member_rv)
}

/// After a kubectl verb, the member (read with kubectl directly against the
/// simulator) and kubefold (read with kubectl) hold the same object: only
/// the qualified name, kubefold's annotations and the RV differ. A member's
/// own controllers may still be changing the object, so this looks until
/// kubefold holds the member's current version.
fn assert_agree(bin: &str, kf: &str, sim: &str, cluster: &str, kind: &str, ns: &str, name: &str) {
    let qualified = format!("{name}_{cluster}");
    let mut last = (Value::Null, Value::Null);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let mut member: Value = serde_json::from_str(&kubectl_ok(bin, &["--server", sim, "get", kind, name, "-n", ns, "-o", "json"])).unwrap();
        let served: Value = serde_json::from_str(&kubectl_ok(bin, &["--server", kf, "get", kind, &qualified, "-n", ns, "-o", "json"])).unwrap();
        let (mine, member_rv) = as_member_sees_it(&served, cluster);
        let rv = member["metadata"].as_object_mut().unwrap().remove("resourceVersion").unwrap();
        if rv == member_rv.as_str() && mine == member {
            return;
        }
        last = (mine, member);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(last.0, last.1, "{kind} {ns}/{name}: kubefold and {cluster} disagree");
}

#[test]
fn kubectl_1_33_edits_reach_the_owning_member() {
    crate::require_kubectl!();
    edits_reach_the_owning_member("kubectl");
}

#[test]
fn kubectl_1_27_edits_reach_the_owning_member() {
    crate::require_kubectl!("1.27");
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
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");

    kubectl_ok(bin, &["--server", s, "annotate", "pod", "web-1_member2", "-n", "default", "note=hello"]);
    assert_eq!(member_get(&m2, pod)["metadata"]["annotations"]["note"], "hello");
    assert!(member_get(&m2, pod)["metadata"]["annotations"].get("kubefold.io/cluster").is_none(), "kubefold's annotations never reach the member");
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");

    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "--type", "merge", "-p", r#"{"metadata":{"labels":{"merge":"yes"}}}"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["merge"], "yes");
    assert_eq!(member_get(&m2, pod)["metadata"]["annotations"]["note"], "hello", "a patch without annotations keeps them");
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");
    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "--type", "json", "-p", r#"[{"op":"add","path":"/metadata/labels/json","value":"yes"}]"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["json"], "yes");
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");
    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "-p", r#"{"metadata":{"labels":{"strategic":"yes"}}}"#]);
    assert_eq!(member_get(&m2, pod)["metadata"]["labels"]["strategic"], "yes");
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");
    // A strategic patch of a list merged by key (containers by name).
    let container = member_get(&m2, pod)["spec"]["containers"][0]["name"].as_str().unwrap().to_string();
    let image_patch = format!(r#"{{"spec":{{"containers":[{{"name":"{container}","image":"busybox:1.36"}}]}}}}"#);
    kubectl_ok(bin, &["--server", s, "patch", "pod", "web-1_member2", "-n", "default", "-p", &image_patch]);
    let containers = member_get(&m2, pod)["spec"]["containers"].clone();
    assert_eq!(containers[0]["image"], "busybox:1.36", "{containers}");
    assert_eq!(containers[0]["name"], container.as_str(), "merged by name, not replaced");
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");

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
    assert_agree(bin, s, &m2, "member2", "pod", "default", "web-1");

    // scale a deployment of member1.
    let deploys = kf.get_json("/apis/apps/v1/deployments");
    let d = deploys["items"].as_array().unwrap().iter().find(|d| d["metadata"]["annotations"]["kubefold.io/cluster"] == "member1").unwrap();
    let (ns, qualified) = (d["metadata"]["namespace"].as_str().unwrap(), d["metadata"]["name"].as_str().unwrap());
    let member_name = qualified.trim_end_matches("_member1");
    kubectl_ok(bin, &["--server", s, "scale", "deployment", qualified, "-n", ns, "--replicas=5"]);
    let m1 = members[0].1.url();
    assert_eq!(member_get(&m1, &format!("/apis/apps/v1/namespaces/{ns}/deployments/{member_name}"))["spec"]["replicas"], 5);
    assert_eq!(kf.get_json(&format!("/apis/apps/v1/namespaces/{ns}/deployments/{qualified}"))["spec"]["replicas"], 5);
    assert_agree(bin, s, &m1, "member1", "deployment", ns, member_name);

    // delete a pod.
    kubectl_ok(bin, &["--server", s, "delete", "pod", "web-2_member2", "-n", "default", "--wait=false"]);
    wait_for(Duration::from_secs(20), "pod deleted in member", || http_get(&format!("{m2}/api/v1/namespaces/default/pods/web-2")).0 == 404);
    assert_eq!(kf.get("/api/v1/namespaces/default/pods/web-2_member2").0, 404);
    let (gone, _, _) = kubectl_bin(bin, &["--server", &m2, "get", "pod", "web-2", "-n", "default"], None);
    assert!(!gone, "the member has no web-2 either");

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
    assert_agree(bin, s, &m2, "member2", "configmap", "default", "created-here");

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
    assert_agree(bin, s, &m2, "member2", "configmap", "default", "applied-new");
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
    assert_agree(bin, s, &m2, "member2", "configmap", "default", "created-here");

    // logs and logs -f (bounded): kubefold shows what kubectl shows against the member.
    let m1_logs = |args: &[&str]| {
        let mut all = vec!["--server", m1.as_str(), "logs", "web-0", "-n", "default"];
        all.extend_from_slice(args);
        kubectl_ok(bin, &all)
    };
    let kf_logs = |args: &[&str]| {
        let mut all = vec!["--server", s.as_str(), "logs", "web-0_member1", "-n", "default"];
        all.extend_from_slice(args);
        kubectl_ok(bin, &all)
    };
    // A container writes a line a second: what kubefold shows is the last
    // lines of the member's log at the time, so it is a run of whole,
    // consecutive lines of the member's log read just after (with more
    // lines, since more may have come meanwhile).
    for args in [&["--tail=3"][..], &["--tail=5", "--timestamps"][..]] {
        let tail: usize = args[0].trim_start_matches("--tail=").parse().unwrap();
        let through = kf_logs(args);
        let mut wider: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        wider[0] = format!("--tail={}", tail + 60);
        let after = m1_logs(&wider.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(through.lines().count(), tail, "logs {args:?}: {through}");
        assert!(format!("\n{after}").contains(&format!("\n{through}")), "logs {args:?}: kubefold showed {through:?}, not consecutive lines of the member's {after:?}");
    }
    let out = std::process::Command::new("timeout")
        .args(["3", bin, "--server", s, "logs", "-f", "web-0_member1", "-n", "default", "--tail=1", "--timestamps"])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap();
    let followed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(followed.lines().count() >= 2, "follow streams new lines: {followed}");
    // Every line followed through kubefold is the member's own line (same
    // timestamp and text), in the member's order.
    let history = m1_logs(&["--timestamps", "--tail=100"]);
    let history: Vec<&str> = history.lines().collect();
    let followed: Vec<&str> = followed.lines().collect();
    let start = history.iter().position(|l| *l == followed[0]).unwrap_or_else(|| panic!("{} is not in the member's log", followed[0]));
    assert_eq!(&history[start..start + followed.len()], &followed[..], "follow through kubefold = the member's log");
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
    // A change made on the member directly is picked up: once kubefold has
    // ingested it, its new global RV is the current one and goes through.
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
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures/kubernetes-api-testdata");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    let cases = common::FIXTURES;
    assert_eq!(files, cases.iter().map(|c| c.0.to_string()).collect::<Vec<_>>(), "every fixture is covered");
    for (file, gv, plural, namespaced) in cases {
        let name = format!("put-{plural}");
        let mut object = fixture(file, &name);
        let path = if namespaced {
            format!("{gv}/namespaces/default/{plural}")
        } else {
            object["metadata"].as_object_mut().unwrap().remove("namespace");
            format!("{gv}/{plural}")
        };
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

#[test]
fn members_own_conflicts_come_back_unchanged() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim = &members[0].1;
    let m1 = sim.url();
    let client = reqwest::blocking::Client::new();

    // POST of a name the member already has: the member's 409 AlreadyExists,
    // the same Status (code, reason, details, message) as asked directly.
    member_config_map(&kf, sim, "member1", "taken", json!({}));
    let again = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken", "namespace": "default"}});
    sim.clear_requests();
    let (code, through) = send(client.post(format!("{}/clusters/member1/api/v1/namespaces/default/configmaps", kf.url)).json(&again));
    assert_eq!(sim.requests().iter().filter(|r| r.method == "POST").count(), 1, "the POST reached the member");
    let (direct_code, direct) = send(client.post(format!("{m1}/api/v1/namespaces/default/configmaps")).json(&again));
    assert_eq!((code, direct_code), (409, 409), "{through}");
    assert_eq!(through["reason"], "AlreadyExists");
    assert_eq!(through, direct, "the member's Status passes through unchanged");
    // The same at the aggregated path with a qualified name.
    let qualified = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken_member1", "namespace": "default"}});
    let (code, through) = send(client.post(format!("{}/api/v1/namespaces/default/configmaps", kf.url)).json(&qualified));
    assert_eq!((code, through), (409, direct));

    // A PUT whose RV is current for kubefold while the member has moved on
    // (kubefold's watch lags): kubefold forwards it, the member answers 409
    // Conflict, and that Status comes back as the member wrote it.
    let path = "/api/v1/namespaces/default/pods/web-0";
    let before = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    let (_, old_member_rv) = as_member_sees_it(&before, "member1");
    hold_watches(sim);
    let (code, _) = send(client.patch(format!("{m1}{path}")).header("Content-Type", "application/merge-patch+json").body(r#"{"metadata":{"labels":{"moved":"on"}}}"#));
    assert_eq!(code, 200);
    assert_eq!(kf.get_json("/api/v1/namespaces/default/pods/web-0_member1"), before, "kubefold has not seen the member's change");
    let mut edited = before.clone();
    edited["metadata"]["labels"]["through"] = json!("kubefold");
    sim.clear_requests();
    let (code, through) = send(client.put(format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url)).json(&edited));
    let forwarded: Vec<_> = object_requests(sim, "web-0").into_iter().filter(|r| r.method == "PUT").collect();
    assert_eq!(forwarded.len(), 1, "kubefold forwarded the PUT (it answered {code}: {through})");
    let sent: Value = serde_json::from_str(&forwarded[0].body).unwrap();
    assert_eq!(sent["metadata"]["resourceVersion"], old_member_rv.as_str(), "with the member RV kubefold knew");
    let (mut direct_body, _) = as_member_sees_it(&edited, "member1");
    direct_body["metadata"]["resourceVersion"] = json!(old_member_rv);
    let (direct_code, direct) = send(client.put(format!("{m1}{path}")).json(&direct_body));
    assert_eq!((code, direct_code), (409, 409), "{through}");
    assert_eq!(through["reason"], "Conflict");
    assert_eq!(through, direct, "the member's Conflict passes through unchanged");
    assert!(member_get(&m1, path)["metadata"]["labels"].get("through").is_none());
    release_watches_until_label(&kf, sim, "moved", "on", "the member's change reaches kubefold");
}

#[test]
fn an_edit_not_ingested_in_time_succeeds_with_a_warning() {
    let members = demo_members(1, 0.0);
    let (tmp, dir) = data_dir();
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(&config, "writeWaitSeconds: 1\n").unwrap();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &["--config", config.to_str().unwrap()]);
    kf.wait_ready();
    let sim = &members[0].1;
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url);
    let label = |value: &str| format!(r#"{{"metadata":{{"labels":{{"wait":"{value}"}}}}}}"#);

    // Ingested in time: no warning.
    let resp = client.patch(&url).header("Content-Type", "application/merge-patch+json").body(label("fast")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("Warning").is_none());

    // The member's watch lags: the edit is done in the member, kubefold has
    // not ingested it when the wait runs out, and says so.
    let before = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    hold_watches(sim);
    let resp = client.patch(&url).header("Content-Type", "application/merge-patch+json").body(label("slow")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let warning = resp.headers().get("Warning").expect("a Warning header").to_str().unwrap().to_string();
    assert!(warning.starts_with("299 ") && warning.contains("has not yet ingested") && warning.contains("member1"), "{warning}");
    assert!(warning.contains("within 1s"), "the configured writeWaitSeconds: {warning}");
    let body: Value = resp.json().unwrap();
    assert_eq!(body["metadata"]["labels"]["wait"], "slow", "the response shows the edit");
    assert_eq!(body["metadata"]["name"], "web-0_member1");
    assert_eq!(member_get(&sim.url(), "/api/v1/namespaces/default/pods/web-0")["metadata"]["labels"]["wait"], "slow");
    assert_eq!(kf.get_json("/api/v1/namespaces/default/pods/web-0_member1"), before, "not ingested yet");
    release_watches_until_label(&kf, sim, "wait", "slow", "the edit is ingested once the watch catches up");
}

#[test]
fn delete_options_reach_the_member() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim = &members[0].1;
    let m1 = sim.url();
    let client = reqwest::blocking::Client::new();
    let served = member_config_map(&kf, sim, "member1", "doomed", json!({}));
    let url = format!("{}/api/v1/namespaces/default/configmaps/doomed_member1", kf.url);
    let global_rv = rv_of(&served);
    let (_, member_rv) = as_member_sees_it(&served, "member1");
    let uid = served["metadata"]["uid"].as_str().unwrap().to_string();
    let deletes = |sim: &SimHandle| -> Vec<kubefold_testdata::RequestRecord> { sim.requests().into_iter().filter(|r| r.method == "DELETE").collect() };

    // A wrong uid precondition: the member's own 409, as it answers directly.
    let wrong = json!({"preconditions": {"uid": "not-the-uid"}});
    sim.clear_requests();
    let (code, through) = send(client.delete(&url).json(&wrong));
    assert_eq!(deletes(sim).len(), 1, "the DELETE reached the member");
    let (_, direct) = send(client.delete(format!("{m1}/api/v1/namespaces/default/configmaps/doomed")).json(&wrong));
    assert_eq!((code, &through["reason"]), (409, &json!("Conflict")), "{through}");
    assert_eq!(through, direct);

    // A stale resourceVersion precondition: 409 from kubefold, nothing sent.
    sim.clear_requests();
    let (code, through) = send(client.delete(&url).json(&json!({"preconditions": {"resourceVersion": (global_rv - 1).to_string()}})));
    assert_eq!((code, &through["reason"]), (409, &json!("Conflict")), "{through}");
    assert!(deletes(sim).is_empty());

    // The current RV with every option: they reach the member, the RV as the member's.
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "gracePeriodSeconds": 0,
                         "preconditions": {"uid": uid, "resourceVersion": global_rv.to_string()}});
    sim.clear_requests();
    let (code, through) = send(client.delete(format!("{url}?gracePeriodSeconds=0&propagationPolicy=Background")).json(&options));
    assert_eq!(code, 200, "{through}");
    let seen = deletes(sim);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].query, "gracePeriodSeconds=0&propagationPolicy=Background");
    let mut expected = options.clone();
    expected["preconditions"]["resourceVersion"] = json!(member_rv);
    assert_eq!(serde_json::from_str::<Value>(&seen[0].body).unwrap(), expected);
    assert_eq!(http_get(&format!("{m1}/api/v1/namespaces/default/configmaps/doomed")).0, 404);
    assert_eq!(kf.get("/api/v1/namespaces/default/configmaps/doomed_member1").0, 404, "read-your-writes");

    // deletecollection sends its DeleteOptions to every member.
    for (cluster, sim) in &members {
        member_config_map(&kf, sim, cluster, "swept", json!({"sweep": "yes"}));
        sim.clear_requests();
    }
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan", "gracePeriodSeconds": 0});
    let (code, list) = send(client.delete(format!("{}/api/v1/namespaces/default/configmaps?labelSelector=sweep%3Dyes", kf.url)).json(&options));
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    for (cluster, sim) in &members {
        let seen = deletes(sim);
        assert_eq!(seen.len(), 1, "{cluster}");
        assert_eq!(seen[0].path, "/api/v1/namespaces/default/configmaps");
        assert_eq!(serde_json::from_str::<Value>(&seen[0].body).unwrap(), options, "{cluster}");
    }
}

#[test]
fn scale_status_and_json_patch_translate_the_resource_version() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let sim = &members[0].1;
    let m1 = sim.url();
    let client = reqwest::blocking::Client::new();
    let puts = |name: &str| object_requests(sim, name).into_iter().filter(|r| r.method != "GET").count();

    // Scale: a stale RV is 409 without reaching the member; the current one
    // is translated (the member checks it) and the answer is kubefold's.
    let deploys = kf.get_json("/apis/apps/v1/namespaces/shop/deployments");
    let d = &deploys["items"][0];
    let qualified = d["metadata"]["name"].as_str().unwrap().to_string();
    let member_name = qualified.trim_end_matches("_member1").to_string();
    let scale_url = format!("{}/apis/apps/v1/namespaces/shop/deployments/{qualified}/scale", kf.url);
    let scale = kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}/scale"));
    let before = rv_of(&scale);
    assert_eq!(before, rv_of(&kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}"))));
    let mut stale = scale.clone();
    stale["metadata"]["resourceVersion"] = json!((before - 1).to_string());
    stale["spec"]["replicas"] = json!(7);
    sim.clear_requests();
    let (code, status) = send(client.put(&scale_url).json(&stale));
    assert_eq!((code, &status["reason"]), (409, &json!("Conflict")), "{status}");
    assert_eq!(puts(&member_name), 0, "a stale scale never reaches the member");
    let mut current = scale.clone();
    current["spec"]["replicas"] = json!(4);
    let (code, answer) = send(client.put(&scale_url).json(&current));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["metadata"]["name"], qualified.as_str());
    assert!(rv_of(&answer) > before);
    // The member's controllers may update the deployment again at once, so
    // the get shows this version or a later one.
    let after = kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}"));
    assert!(rv_of(&after) >= rv_of(&answer));
    assert_eq!(after["spec"]["replicas"], 4);
    assert_eq!(member_get(&m1, &format!("/apis/apps/v1/namespaces/shop/deployments/{member_name}"))["spec"]["replicas"], 4);

    // A merge patch and a JSON patch of the Scale carry kubefold's RV too:
    // stale is 409 unsent, the current one reaches the member as its own.
    // First kubefold holds the member's latest version (its controller may
    // have written the deployment's status after the scale).
    let deploy_path = format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}");
    let member_path = format!("/apis/apps/v1/namespaces/shop/deployments/{member_name}");
    // The member's controllers finish the rollout first (they write the
    // deployment's status as its pods start), so nothing changes it between
    // the read of its scale and the patch below.
    wait_for(Duration::from_secs(30), "the rollout done and kubefold holding the member's deployment", || {
        let member = member_get(&m1, &member_path);
        let (spec, status) = (&member["spec"], &member["status"]);
        let done = status["observedGeneration"] == member["metadata"]["generation"]
            && status["updatedReplicas"] == spec["replicas"]
            && status["readyReplicas"] == spec["replicas"]
            && status["replicas"] == spec["replicas"];
        done && as_member_sees_it(&kf.get_json(&deploy_path), "member1").1 == member["metadata"]["resourceVersion"]
    });
    let scale = kf.get_json(&format!("/apis/apps/v1/namespaces/shop/deployments/{qualified}/scale"));
    let global = rv_of(&scale);
    let merge = |rv: u64, replicas: u64| {
        send(client.patch(&scale_url).header("Content-Type", "application/merge-patch+json").json(&json!({
            "metadata": {"resourceVersion": rv.to_string()},
            "spec": {"replicas": replicas},
        })))
    };
    sim.clear_requests();
    let (code, status) = merge(global - 1, 9);
    assert_eq!((code, &status["reason"]), (409, &json!("Conflict")), "{status}");
    let (code, status) = send(client.patch(&scale_url).header("Content-Type", "application/json-patch+json").json(&json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": (global - 1).to_string()},
        {"op": "replace", "path": "/spec/replicas", "value": 9},
    ])));
    assert_eq!(code, 422, "{status}");
    assert_eq!(puts(&member_name), 0, "a stale scale patch never reaches the member");
    let member_rv = member_get(&m1, &member_path)["metadata"]["resourceVersion"].clone();
    let (code, answer) = merge(global, 3);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["metadata"]["name"], qualified.as_str());
    assert!(rv_of(&answer) > global);
    let sent: Vec<_> = object_requests(sim, &member_name).into_iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(serde_json::from_str::<Value>(&sent[0].body).unwrap()["metadata"]["resourceVersion"], member_rv, "the member's own RV");
    assert_eq!(member_get(&m1, &member_path)["spec"]["replicas"], 3);

    // Status PUT and object PUT/PATCH: stale is 409 unsent; the answer is the
    // object as kubefold serves it, at a higher global RV, the same a get
    // returns right after.
    let cm_path = "/api/v1/namespaces/default/configmaps/edited_member1";
    member_config_map(&kf, sim, "member1", "edited", json!({}));
    let pod_path = "/api/v1/namespaces/default/pods/web-0_member1";
    let check = |answer: &Value, path: &str, before: u64| {
        assert_eq!(answer["metadata"]["annotations"]["kubefold.io/cluster"], "member1", "{answer}");
        assert!(answer["metadata"]["name"].as_str().unwrap().ends_with("_member1"));
        assert!(rv_of(answer) > before);
        assert_eq!(&kf.get_json(path), answer, "a get right after returns the answer");
    };
    let pod = kf.get_json(pod_path);
    let mut stale = pod.clone();
    stale["metadata"]["resourceVersion"] = json!((rv_of(&pod) - 1).to_string());
    stale["status"]["message"] = json!("stale");
    sim.clear_requests();
    let (code, _) = send(client.put(format!("{}{pod_path}/status", kf.url)).json(&stale));
    assert_eq!(code, 409);
    assert_eq!(puts("web-0"), 0);
    let mut fresh = pod.clone();
    fresh["status"]["message"] = json!("through kubefold");
    let (code, answer) = send(client.put(format!("{}{pod_path}/status", kf.url)).json(&fresh));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["status"]["message"], "through kubefold");
    check(&answer, pod_path, rv_of(&pod));
    assert_eq!(member_get(&m1, "/api/v1/namespaces/default/pods/web-0")["status"]["message"], "through kubefold");

    let cm = kf.get_json(cm_path);
    let mut put = cm.clone();
    put["data"]["k"] = json!("put");
    let (code, answer) = send(client.put(format!("{}{cm_path}", kf.url)).json(&put));
    assert_eq!(code, 200, "{answer}");
    check(&answer, cm_path, rv_of(&cm));
    let (code, patched) =
        send(client.patch(format!("{}{cm_path}", kf.url)).header("Content-Type", "application/merge-patch+json").body(r#"{"data":{"k":"merged"}}"#));
    assert_eq!(code, 200, "{patched}");
    check(&patched, cm_path, rv_of(&answer));

    // A JSON patch's test and replace of /metadata/resourceVersion and
    // /metadata/name carry kubefold's RV and name; the member gets its own.
    let global = rv_of(&patched).to_string();
    let (_, member_rv) = as_member_sees_it(&patched, "member1");
    let ops = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": global},
        {"op": "test", "path": "/metadata/name", "value": "edited_member1"},
        {"op": "replace", "path": "/data/k", "value": "json"},
    ]);
    sim.clear_requests();
    let (code, answer) = send(client.patch(format!("{}{cm_path}", kf.url)).header("Content-Type", "application/json-patch+json").json(&ops));
    assert_eq!(code, 200, "{answer}");
    check(&answer, cm_path, rv_of(&patched));
    assert_eq!(member_get(&m1, "/api/v1/namespaces/default/configmaps/edited")["data"]["k"], "json");
    let sent: Vec<_> = object_requests(sim, "edited").into_iter().filter(|r| r.method == "PATCH").collect();
    let sent: Value = serde_json::from_str(&sent[0].body).unwrap();
    assert_eq!(sent[0]["value"], member_rv.as_str());
    assert_eq!(sent[1]["value"], "edited");
    // The old RV in a replace: 409 Conflict; in a test: 422; neither sent.
    sim.clear_requests();
    let stale_replace = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": global}]);
    let (code, _) = send(client.patch(format!("{}{cm_path}", kf.url)).header("Content-Type", "application/json-patch+json").json(&stale_replace));
    assert_eq!(code, 409);
    let stale_test = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": global}, {"op": "replace", "path": "/data/k", "value": "no"}]);
    let (code, status) = send(client.patch(format!("{}{cm_path}", kf.url)).header("Content-Type", "application/json-patch+json").json(&stale_test));
    assert_eq!((code, &status["reason"]), (422, &json!("Invalid")), "{status}");
    assert_eq!(puts("edited"), 0);
}

#[test]
fn bare_names_unique_work_and_ambiguous_ones_reach_no_member() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::new();
    let m2 = members[1].1.url();

    // A name only member2 has: PATCH, PUT and DELETE by the bare name.
    member_config_map(&kf, &members[1].1, "member2", "only-here", json!({}));
    let bare = format!("{}/api/v1/namespaces/default/configmaps/only-here", kf.url);
    let (code, answer) = send(client.patch(&bare).header("Content-Type", "application/merge-patch+json").body(r#"{"data":{"k":"patched"}}"#));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["metadata"]["name"], "only-here_member2");
    assert_eq!(member_get(&m2, "/api/v1/namespaces/default/configmaps/only-here")["data"]["k"], "patched");
    let mut put = kf.get_json("/api/v1/namespaces/default/configmaps/only-here");
    put["data"]["k"] = json!("put");
    let (code, answer) = send(client.put(&bare).json(&put));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(member_get(&m2, "/api/v1/namespaces/default/configmaps/only-here")["data"]["k"], "put");
    let (code, _) = send(client.delete(&bare));
    assert_eq!(code, 200);
    assert_eq!(http_get(&format!("{m2}/api/v1/namespaces/default/configmaps/only-here")).0, 404);

    // web-0 is in both members: PUT, PATCH and DELETE by the bare name are
    // 409 listing the qualified names, and no member sees any request about it.
    let pod = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    let mut body = pod.clone();
    body["metadata"]["name"] = json!("web-0");
    for (_, sim) in &members {
        sim.clear_requests();
    }
    let ambiguous = format!("{}/api/v1/namespaces/default/pods/web-0", kf.url);
    for (verb, request) in [
        ("PUT", client.put(&ambiguous).json(&body)),
        ("PATCH", client.patch(&ambiguous).header("Content-Type", "application/merge-patch+json").body(r#"{"metadata":{"labels":{"x":"y"}}}"#)),
        ("DELETE", client.delete(&ambiguous)),
    ] {
        let (code, status) = send(request);
        assert_eq!((code, &status["reason"]), (409, &json!("Conflict")), "{verb}: {status}");
        let message = status["message"].as_str().unwrap();
        assert!(message.contains("web-0_member1") && message.contains("web-0_member2"), "{verb}: {message}");
    }
    for (name, sim) in &members {
        let seen = object_requests(sim, "web-0");
        assert!(seen.is_empty(), "{name} saw {seen:?}");
    }
    assert_eq!(kf.get_json("/api/v1/namespaces/default/pods/web-0_member1"), pod, "untouched");
}

/// GET of a log, as text.
fn log_text(url: &str) -> (u16, String) {
    http_get(url)
}

#[test]
fn log_parameters_through_kubefold_match_the_member() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let m1 = members[0].1.url();
    let pod = member_get(&m1, "/api/v1/namespaces/default/pods/web-0");
    let container = pod["spec"]["containers"][0]["name"].as_str().unwrap().to_string();
    let member_log = format!("{m1}/api/v1/namespaces/default/pods/web-0/log");
    let through_log = format!("{}/api/v1/namespaces/default/pods/web-0_member1/log", kf.url);
    for query in [
        format!("container={container}&tailLines=4"),
        "tailLines=3".to_string(),
        "sinceSeconds=5".to_string(),
        "timestamps=true&tailLines=6".to_string(),
        format!("container={container}&sinceSeconds=3&timestamps=true"),
        "container=no-such-container".to_string(),
        "tailLines=x".to_string(),
    ] {
        // A container writes a line a second: read the member before and
        // after kubefold, and compare once no new line came in between.
        let mut attempts = 0;
        loop {
            let before = log_text(&format!("{member_log}?{query}"));
            let through = log_text(&format!("{through_log}?{query}"));
            let after = log_text(&format!("{member_log}?{query}"));
            if before == after {
                assert_eq!(through, before, "{query}");
                if query.starts_with("tailLines=3") {
                    assert_eq!((before.0, before.1.lines().count()), (200, 3));
                }
                break;
            }
            attempts += 1;
            assert!(attempts < 10, "{query}: the member's log never held still");
        }
    }
    // follow: the lines streamed through kubefold are the member's, in order.
    let mut resp = reqwest::blocking::Client::new().get(format!("{through_log}?follow=true&tailLines=2&timestamps=true")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut streamed = String::new();
    let mut buf = [0u8; 4096];
    while streamed.lines().count() < 4 {
        let n = std::io::Read::read(&mut resp, &mut buf).unwrap();
        assert!(n > 0, "the stream ended early: {streamed}");
        streamed.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(resp);
    let followed: Vec<&str> = streamed.lines().take(4).collect();
    let (_, history) = log_text(&format!("{member_log}?timestamps=true&tailLines=100"));
    let history: Vec<&str> = history.lines().collect();
    let start = history.iter().position(|l| *l == followed[0]).unwrap_or_else(|| panic!("{} is not in the member's log", followed[0]));
    assert_eq!(&history[start..start + followed.len()], &followed[..]);
}
