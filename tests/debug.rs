//! `kubectl debug` through kubefold: `pods/ephemeralcontainers` is
//! forwarded to the pod's member like any edit; the simulator adds the
//! container to `spec.ephemeralContainers`, its kubelet starts it (its
//! status in `status.ephemeralContainerStatuses`), and exec and attach
//! reach it. kubectl 1.33 and 1.27.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// The member's pod `name` of `default`.
fn member_pod(sim_url: &str, name: &str) -> Value {
    serde_json::from_str(&http_get(&format!("{sim_url}/api/v1/namespaces/default/pods/{name}")).1).unwrap()
}

#[test]
fn kubectl_debug_adds_an_ephemeral_container_on_the_member() {
    let members = demo_members(1, 0.0);
    let sim = members[0].1.url();
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    wait_for(Duration::from_secs(30), "web-0 running", || member_pod(&sim, "web-0")["status"]["phase"] == "Running");
    if let Some(missing) = kubectl_missing(&["1.33", "1.27"]) {
        println!("SKIPPED: {missing}");
        kf.stop();
        return;
    }
    let run = |minor: &str, args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--server", kf.url.as_str(), "-n", "default"];
        all.extend_from_slice(args);
        kubectl_bin(&kubectl_version(minor), &all, stdin)
    };

    // Non-interactive, with a target and a command.
    let (ok, out, err) = run("1.33", &["debug", "web-0_member1", "--image=busybox", "--target=web", "--container=dbg", "--", "echo", "hi"], None);
    assert!(ok && format!("{out}{err}").contains("Targeting container \"web\""), "{out}{err}");
    let pod = member_pod(&sim, "web-0");
    let added = &pod["spec"]["ephemeralContainers"][0];
    assert_eq!((added["name"].as_str(), added["image"].as_str()), (Some("dbg"), Some("busybox")), "{pod}");
    assert_eq!(added["targetContainerName"], "web");
    assert_eq!(added["command"], json!(["echo", "hi"]));
    assert_eq!(pod["spec"]["containers"].as_array().unwrap().len(), 1, "the pod's own containers are unchanged");
    wait_for(Duration::from_secs(10), "the ephemeral container running on the member", || {
        member_pod(&sim, "web-0")["status"]["ephemeralContainerStatuses"][0]["state"]["running"].is_object()
    });
    // kubefold reads it as the pod, qualified, once ingested.
    wait_for(Duration::from_secs(10), "kubefold's pod with the ephemeral container", || {
        let (code, body) = kf.get("/api/v1/namespaces/default/pods/web-0_member1/ephemeralcontainers");
        code == 200 && body.contains("\"name\":\"web-0_member1\"") && body.contains("ephemeralContainerStatuses")
    });
    // exec into it.
    let (ok, out, err) = run("1.33", &["exec", "web-0_member1", "-c", "dbg", "--", "hostname"], None);
    assert!(ok && out == "web-0\n", "{out}{err}");

    // Interactive (-i): kubectl waits for it to run, attaches, and the
    // container's shell reads the attached stdin.
    let (ok, out, err) = run("1.33", &["debug", "-i", "web-1_member1", "--image=busybox", "--container=shell", "--", "sh"], Some("echo hi from debug\nhostname\n"));
    assert!(ok && out.contains("hi from debug\nweb-1\n"), "{out}{err}");

    // kubectl 1.27 alike (its name for the container chosen by kubectl).
    let (ok, out, err) = run("1.27", &["debug", "web-2_member1", "--image=busybox", "--target=web", "--", "echo", "hi"], None);
    assert!(ok, "{out}{err}");
    let added = member_pod(&sim, "web-2")["spec"]["ephemeralContainers"].clone();
    assert!(added[0]["name"].as_str().is_some_and(|n| n.starts_with("debugger-")), "{added}");

    // The member's validation comes back as it is.
    let (ok, out, err) = run("1.33", &["debug", "web-0_member1", "--image=busybox", "--target=nope", "--container=dbg4"], None);
    assert!(!ok && err.contains("targetContainerName: Not found: \"nope\""), "{out}{err}");
    // An existing ephemeral container may not be removed.
    let mut pod: Value = serde_json::from_str(&kf.get("/api/v1/namespaces/default/pods/web-0_member1").1).unwrap();
    pod["spec"]["ephemeralContainers"] = json!([]);
    let response = reqwest::blocking::Client::new()
        .put(format!("{}/api/v1/namespaces/default/pods/web-0_member1/ephemeralcontainers", kf.url))
        .json(&pod)
        .send()
        .unwrap();
    let code = response.status().as_u16();
    let body = response.text().unwrap();
    assert!(code == 422 && body.contains("may not be removed"), "{code} {body}");
    assert_eq!(member_pod(&sim, "web-0")["spec"]["ephemeralContainers"][0]["name"], "dbg");
    kf.stop();
}
