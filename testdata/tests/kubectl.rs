//! The real kubectl against the simulator (`kubectl --server URL`):
//! get, watch, label, patch, scale, edit, server-side apply, logs, delete.
//! Skipped (with a message) when kubectl is not installed. Every kubectl
//! runs with `--request-timeout` or under a kill timer so nothing hangs.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use kubefold_testdata::SimHandle;

fn kubectl_available() -> bool {
    let found = Command::new("kubectl").arg("version").arg("--client").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        eprintln!("kubectl not found: skipping");
    }
    found
}

/// Runs kubectl against the simulator; returns (success, stdout, stderr).
fn kubectl(sim: &SimHandle, args: &[&str]) -> (bool, String, String) {
    let output = Command::new("kubectl")
        .arg("--server")
        .arg(sim.url())
        .arg("--request-timeout=10s")
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .expect("kubectl runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn kubectl_get_describe_and_edit_verbs() {
    if !kubectl_available() {
        return;
    }
    let sim = common::demo();
    let (ok, out, err) = kubectl(&sim, &["get", "pods", "-A"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("NAMESPACE"), "{out}");
    for pod in ["web-0", "web-1", "web-2", "etcd-member1-node-1"] {
        assert!(out.contains(pod), "{pod} in {out}");
    }
    let (ok, out, err) = kubectl(&sim, &["get", "deploy", "-n", "shop", "-o", "name"]);
    assert!(ok, "{err}");
    assert_eq!(out, "deployment.apps/cache\ndeployment.apps/checkout\ndeployment.apps/frontend\n");
    let (ok, out, _) = kubectl(&sim, &["describe", "pod", "web-0"]);
    assert!(ok && out.contains("Controlled By:  StatefulSet/web") && out.contains("Successfully assigned default/web-0"), "{out}");
    let (ok, out, _) = kubectl(&sim, &["api-resources", "--api-group=apps", "-o", "name"]);
    assert!(ok);
    assert_eq!(out, "deployments.apps\nreplicasets.apps\nstatefulsets.apps\n");

    assert!(kubectl(&sim, &["label", "pod", "web-1", "tier=web"]).0);
    assert!(kubectl(&sim, &["annotate", "pod", "web-1", "note=hi"]).0);
    assert!(kubectl(&sim, &["patch", "pod", "web-1", "-p", r#"{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}"#]).0);
    let (_, out, _) = kubectl(&sim, &["get", "pod", "web-1", "-o", "jsonpath={.metadata.labels.tier} {.metadata.annotations.note} {.spec.containers[0].image}"]);
    assert_eq!(out, "web hi nginx:1.28");
    assert!(kubectl(&sim, &["scale", "deploy", "frontend", "-n", "shop", "--replicas=5"]).0);
    let (_, out, _) = kubectl(&sim, &["get", "deploy", "frontend", "-n", "shop", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(out, "5");
    let (ok, out, _) = kubectl(&sim, &["logs", "web-0", "--tail=2"]);
    assert!(ok);
    assert_eq!(out.lines().count(), 2);
    let (ok, _, err) = kubectl(&sim, &["get", "pod", "nope"]);
    assert!(!ok);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
}

#[test]
fn kubectl_edit_apply_and_delete() {
    if !kubectl_available() {
        return;
    }
    let sim = common::demo();
    let dir = std::env::temp_dir().join(format!("kubefold-sim-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let editor = dir.join("editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nsed -i 's/replicas: 3/replicas: 4/' \"$1\"\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut child = Command::new("kubectl")
        .args(["--server", &sim.url(), "--request-timeout=10s", "edit", "deploy", "frontend", "-n", "shop", "--validate=false"])
        .env("EDITOR", &editor)
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "kubectl edit hangs");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, out, _) = kubectl(&sim, &["get", "deploy", "frontend", "-n", "shop", "-o", "jsonpath={.spec.replicas} {.metadata.managedFields[*].manager}"]);
    // The deployment controller may have written the status since (manager kube-controller-manager).
    let (replicas, managers) = out.split_once(' ').unwrap_or_default();
    assert_eq!(replicas, "4", "{out}");
    assert!(managers.split(' ').all(|m| m == "kubectl-edit" || m == "kube-controller-manager") && managers.contains("kubectl-edit"), "{out}");

    let manifest = dir.join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: default\ndata:\n  a: \"1\"\n").unwrap();
    let file = manifest.to_str().unwrap();
    let (ok, out, err) = kubectl(&sim, &["apply", "--server-side", "--validate=false", "-f", file]);
    assert!(ok, "{err}");
    assert_eq!(out, "configmap/applied serverside-applied\n");
    let (ok, out, err) = kubectl(&sim, &["apply", "--validate=false", "-f", file]);
    assert!(ok, "{err}");
    assert!(out.starts_with("configmap/applied"), "{out}");
    let (ok, out, err) = kubectl(&sim, &["delete", "configmap", "applied"]);
    assert!(ok, "{err}");
    assert_eq!(out, "configmap \"applied\" deleted\n");
    let (ok, out, err) = kubectl(&sim, &["delete", "pod", "web-2", "--wait=true", "--timeout=20s"]);
    assert!(ok, "{err}");
    assert_eq!(out, "pod \"web-2\" deleted\n");
    let (_, _, err) = kubectl(&sim, &["get", "pod", "web-2"]);
    assert!(err.contains("not found"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn kubectl_watch_prints_changes() {
    if !kubectl_available() {
        return;
    }
    let sim = common::demo();
    let mut watch = Command::new("kubectl")
        .args(["--server", &sim.url(), "get", "pods", "-A", "-w", "--output-watch-events"])
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(kubectl(&sim, &["label", "pod", "web-2", "watched=yes"]).0);
    std::thread::sleep(Duration::from_secs(2));
    watch.kill().ok();
    let output = watch.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("EVENT"), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("ADDED") && l.contains("web-2")), "{out}");
    assert!(lines.last().unwrap().starts_with("MODIFIED") && lines.last().unwrap().contains("web-2"), "{out}");
    let watches = sim.requests().iter().filter(|r| r.watch).count();
    assert_eq!(watches, 1);
}
