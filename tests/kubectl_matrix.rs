//! kubectl 1.27, 1.31, 1.32 and 1.33 through every verb that talks to a
//! server, against kubefold and against the simulator directly: each verb's
//! exit code and output, and the object in the member afterwards; the
//! streaming verbs too (kubectl 1.27 over SPDY/3.1 upgrades, 1.31+ over
//! WebSocket).
//!
//! One test per kubectl version; each starts one simulator member with
//! kubefold over it (creates placed in it by a default placement rule, every
//! type the verbs touch in the resource selection) and one simulator alone.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::Value;

/// The types the verbs touch, as kubefold's resource selection names them.
const SELECTED: &[(&str, &str)] = &[
    ("v1", "Pod"),
    ("v1", "Node"),
    ("v1", "Namespace"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Event"),
    ("v1", "ServiceAccount"),
    ("v1", "ResourceQuota"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "Ingress"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("autoscaling/v1", "HorizontalPodAutoscaler"),
];

/// Where one run of the verbs goes: its server URL, the member the objects
/// land in, and how names read there (`web-0` or `web-0_member1`).
struct Target<'a> {
    label: &'static str,
    server: String,
    member: &'a SimHandle,
    suffix: &'static str,
}

impl Target<'_> {
    /// `name` as this server shows it.
    fn name(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }
}

/// One kubectl version driven through the verbs against one target;
/// failures are collected, so one run reports every verb that fails.
struct Run<'a> {
    minor: &'static str,
    bin: String,
    target: Target<'a>,
    dir: PathBuf,
    home: PathBuf,
    failures: Vec<String>,
}

/// What one kubectl run gave.
struct Out {
    ok: bool,
    code: Option<i32>,
    out: String,
    err: String,
}

impl Run<'_> {
    fn kubectl_env(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)], limit_secs: u64) -> Out {
        let mut cmd = Command::new("timeout");
        cmd.arg(limit_secs.to_string()).arg(&self.bin).arg("--server").arg(&self.target.server).args(args);
        cmd.env("KUBECONFIG", "/dev/null").env("HOME", &self.home);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Out {
            ok: out.status.success(),
            code: out.status.code(),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn kubectl(&self, args: &[&str]) -> Out {
        self.kubectl_env(args, None, &[], 60)
    }

    /// Records a failure unless `holds`.
    fn check(&mut self, holds: bool, what: impl std::fmt::Display) {
        if !holds {
            self.failures.push(format!("kubectl {} against {}: {what}", self.minor, self.target.label));
        }
    }

    /// Runs a verb that must succeed; its stdout (empty when it failed).
    fn ok(&mut self, args: &[&str]) -> String {
        self.ok_with(args, None)
    }

    fn ok_with(&mut self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_env(args, stdin, &[], 60);
        self.check(out.ok, format_args!("{args:?} failed ({:?}): {}{}", out.code, out.out, out.err));
        if out.ok {
            out.out
        } else {
            String::new()
        }
    }

    /// Runs a verb that must succeed with `expected` in its stdout.
    fn ok_says(&mut self, args: &[&str], expected: &str) -> String {
        let out = self.ok(args);
        if !out.is_empty() {
            self.check(out.contains(expected), format_args!("{args:?}: {expected:?} not in {out}"));
        }
        out
    }

    /// The member's own object at `path` (`None`: 404).
    fn member(&self, path: &str) -> Option<Value> {
        let (code, body) = http_get(&format!("{}{path}", self.target.member.url()));
        (code == 200).then(|| serde_json::from_str(&body).unwrap())
    }

    /// Checks the member's object at `path` at the JSON pointer `pointer`.
    fn member_has(&mut self, path: &str, pointer: &str, expected: Value) {
        let found = self.member(path).map(|o| o.pointer(pointer).cloned().unwrap_or(Value::Null));
        self.check(found.as_ref() == Some(&expected), format_args!("member {path} {pointer}: {found:?}, expected {expected}"));
    }

    /// Waits (up to 20 s) until the member's object at `path` satisfies `holds`.
    fn member_eventually(&mut self, what: &str, path: &str, holds: impl Fn(Option<&Value>) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let object = self.member(path);
            if holds(object.as_ref()) {
                return;
            }
            if Instant::now() >= deadline {
                self.check(false, format_args!("{what}: member {path} is {object:?}"));
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
}

/// Starts a demo simulator named `member1`.
fn member() -> SimHandle {
    kubefold_testdata::start(SimConfig { name: "member1".into(), workload: Workload::Demo, seed: 1, ..SimConfig::default() }).expect("simulator starts")
}

/// kubefold over `member`: every type of [`SELECTED`] aggregated, creates
/// that name no cluster placed in member1.
fn kubefold(member: &SimHandle, config_dir: &Path, data: &Path) -> Kubefold {
    let mut yaml = String::from("placement:\n  - cluster: member1\nresources:\n  - resourceSelectors:\n");
    for (api_version, kind) in SELECTED {
        yaml.push_str(&format!("      - {{apiVersion: {api_version}, kind: {kind}}}\n"));
    }
    let config = config_dir.join("kubefold.yaml");
    std::fs::write(&config, yaml).unwrap();
    let kf = Kubefold::serve(data, &[("member1".to_string(), member.url())], &["--config", config.to_str().unwrap()]);
    kf.wait_ready();
    kf
}

fn matrix(minor: &'static str) {
    if let Some(missing) = kubectl_missing(&[minor]) {
        println!("SKIPPED: {missing}");
        return;
    }
    let bin = kubectl_version(minor);
    let started = Instant::now();
    let mut failures = Vec::new();
    let home = tempfile::tempdir().unwrap();
    // The simulator directly.
    {
        let sim = member();
        let dir = tempfile::tempdir().unwrap();
        let target = Target { label: "the simulator", server: sim.url(), member: &sim, suffix: "" };
        failures.extend(verbs(minor, &bin, target, dir.path(), home.path()));
    }
    // kubefold over a simulator.
    {
        let sim = member();
        let dir = tempfile::tempdir().unwrap();
        let (_data_dir, data) = data_dir();
        let kf = kubefold(&sim, dir.path(), &data);
        let target = Target { label: "kubefold", server: kf.url.clone(), member: &sim, suffix: "_member1" };
        failures.extend(verbs(minor, &bin, target, dir.path(), home.path()));
        kf.stop();
    }
    println!("kubectl {minor}: {} s", started.elapsed().as_secs());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn kubectl_1_27() {
    matrix("1.27");
}

#[test]
fn kubectl_1_31() {
    matrix("1.31");
}

#[test]
fn kubectl_1_32() {
    matrix("1.32");
}

#[test]
fn kubectl_1_33() {
    matrix("1.33");
}

/// Every verb, in an order where each finds what the earlier ones made.
fn verbs(minor: &'static str, bin: &str, target: Target<'_>, dir: &Path, home: &Path) -> Vec<String> {
    let mut r = Run { minor, bin: bin.to_string(), target, dir: dir.to_path_buf(), home: home.to_path_buf(), failures: Vec::new() };
    discovery_and_reads(&mut r);
    creates(&mut r);
    apply_diff_edit_replace(&mut r);
    patch_label_set(&mut r);
    workloads(&mut r);
    nodes(&mut r);
    deletes(&mut r);
    streaming(&mut r);
    r.failures
}

fn discovery_and_reads(r: &mut Run) {
    let out = r.ok(&["api-versions"]);
    for gv in ["v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "authorization.k8s.io/v1"] {
        r.check(out.lines().any(|l| l == gv), format_args!("api-versions lacks {gv}: {out}"));
    }
    let out = r.ok(&["api-resources", "--no-headers"]);
    for resource in ["pods", "deployments", "configmaps", "roles", "jobs", "selfsubjectaccessreviews"] {
        r.check(out.lines().any(|l| l.starts_with(&format!("{resource} "))), format_args!("api-resources lacks {resource}: {out}"));
    }
    let web0 = r.target.name("web-0");
    r.ok_says(&["get", "pods", "-n", "default"], &web0);
    r.ok_says(&["get", "pods", "-A", "-o", "wide"], &web0);
    let out = r.ok(&["get", "pod", &web0, "-n", "default", "-o", "json"]);
    if let Ok(pod) = serde_json::from_str::<Value>(&out) {
        r.check(pod["metadata"]["name"] == Value::String(web0.clone()), format_args!("get -o json: {pod}"));
    }
    let out = r.ok_says(&["describe", "pod", &web0, "-n", "default"], &web0);
    r.check(out.contains("Containers:") && out.contains("Events:"), format_args!("describe: {out}"));
    r.ok_says(&["describe", "deployment", &r.target.name("frontend"), "-n", "shop"], "Replicas:");
    let out = r.ok_says(&["explain", "pod.spec.containers"], "image");
    r.check(out.contains("KIND:") && out.contains("Pod"), format_args!("explain: {out}"));
    r.ok_says(&["explain", "deployments.spec.replicas"], "replicas");
    let out = r.ok(&["auth", "can-i", "create", "configmaps", "-n", "default"]);
    r.check(out.trim() == "yes", format_args!("auth can-i: {out}"));
    r.ok(&["auth", "can-i", "--list", "-n", "default"]);
    r.ok_says(&["auth", "whoami"], "Username");
    let out = r.ok(&["events", "-n", "default"]);
    r.check(out.contains("LAST SEEN") && out.lines().count() > 1, format_args!("events: {out}"));
    let out = r.ok(&["logs", &web0, "-n", "default", "--tail=3"]);
    r.check(!out.trim().is_empty() && out.lines().count() <= 3, format_args!("logs: {out:?}"));
    r.ok(&["get", "--raw", "/version"]);
    r.ok_says(&["version", "-o", "json"], "serverVersion");
    r.ok_says(&["cluster-info"], "Kubernetes control plane");
}

fn creates(r: &mut Run) {
    let ns = "matrix";
    r.ok_says(&["create", "namespace", ns], "created");
    r.member_has("/api/v1/namespaces/matrix", "/status/phase", "Active".into());
    r.ok_says(&["create", "configmap", "cm1", "-n", ns, "--from-literal=k=v"], "created");
    r.member_has("/api/v1/namespaces/matrix/configmaps/cm1", "/data/k", "v".into());
    r.ok_says(&["create", "secret", "generic", "s1", "-n", ns, "--from-literal=p=q"], "created");
    r.member_has("/api/v1/namespaces/matrix/secrets/s1", "/data/p", "cQ==".into());
    let pki = TestPki::write(&r.dir);
    r.ok_says(
        &["create", "secret", "tls", "tls1", "-n", ns, "--cert", pki.cert_file.to_str().unwrap(), "--key", pki.key_file.to_str().unwrap()],
        "created",
    );
    r.member_has("/api/v1/namespaces/matrix/secrets/tls1", "/type", "kubernetes.io/tls".into());
    r.ok_says(&["create", "secret", "docker-registry", "reg1", "-n", ns, "--docker-server=r.example", "--docker-username=u", "--docker-password=p"], "created");
    r.member_has("/api/v1/namespaces/matrix/secrets/reg1", "/type", "kubernetes.io/dockerconfigjson".into());
    r.ok_says(&["create", "deployment", "web", "-n", ns, "--image=nginx:1.27", "--replicas=2", "--port=80"], "created");
    r.member_has("/apis/apps/v1/namespaces/matrix/deployments/web", "/spec/replicas", 2.into());
    for (kind, name, extra) in [
        ("clusterip", "svc-c", "--tcp=80:8080"),
        ("nodeport", "svc-n", "--tcp=80:8080"),
        ("loadbalancer", "svc-l", "--tcp=80:8080"),
        ("externalname", "svc-e", "--external-name=example.com"),
    ] {
        r.ok_says(&["create", "service", kind, name, "-n", ns, extra], "created");
        let expected = match kind {
            "clusterip" => "ClusterIP",
            "nodeport" => "NodePort",
            "loadbalancer" => "LoadBalancer",
            _ => "ExternalName",
        };
        r.member_has(&format!("/api/v1/namespaces/matrix/services/{name}"), "/spec/type", expected.into());
    }
    r.ok_says(&["create", "serviceaccount", "sa1", "-n", ns], "created");
    r.member_has("/api/v1/namespaces/matrix/serviceaccounts/sa1", "/metadata/name", "sa1".into());
    r.ok_says(&["create", "role", "r1", "-n", ns, "--verb=get,list", "--resource=pods"], "created");
    r.member_has("/apis/rbac.authorization.k8s.io/v1/namespaces/matrix/roles/r1", "/rules/0/resources/0", "pods".into());
    r.ok_says(&["create", "rolebinding", "rb1", "-n", ns, "--role=r1", "--user=alice"], "created");
    r.member_has("/apis/rbac.authorization.k8s.io/v1/namespaces/matrix/rolebindings/rb1", "/subjects/0/name", "alice".into());
    r.ok_says(&["create", "clusterrole", "cr-matrix", "--verb=get", "--resource=nodes"], "created");
    r.member_has("/apis/rbac.authorization.k8s.io/v1/clusterroles/cr-matrix", "/rules/0/verbs/0", "get".into());
    r.ok_says(&["create", "clusterrolebinding", "crb-matrix", "--clusterrole=cr-matrix", "--user=alice"], "created");
    r.member_has("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/crb-matrix", "/roleRef/name", "cr-matrix".into());
    r.ok_says(&["create", "job", "j1", "-n", ns, "--image=busybox", "--", "echo", "hi"], "created");
    r.member_has("/apis/batch/v1/namespaces/matrix/jobs/j1", "/spec/template/spec/containers/0/image", "busybox".into());
    r.ok_says(&["create", "cronjob", "cj1", "-n", ns, "--image=busybox", "--schedule=*/5 * * * *", "--", "echo", "hi"], "created");
    r.member_has("/apis/batch/v1/namespaces/matrix/cronjobs/cj1", "/spec/schedule", "*/5 * * * *".into());
    r.ok_says(&["create", "job", "j2", "-n", ns, &format!("--from=cronjob/{}", r.target.name("cj1"))], "created");
    r.member_has("/apis/batch/v1/namespaces/matrix/jobs/j2", "/metadata/ownerReferences/0/name", "cj1".into());
    r.ok_says(&["create", "quota", "q1", "-n", ns, "--hard=pods=10"], "created");
    r.member_has("/api/v1/namespaces/matrix/resourcequotas/q1", "/spec/hard/pods", "10".into());
    r.ok_says(&["create", "priorityclass", "pc-matrix", "--value=1000"], "created");
    r.member_has("/apis/scheduling.k8s.io/v1/priorityclasses/pc-matrix", "/value", 1000.into());
    r.ok_says(&["create", "poddisruptionbudget", "pdb1", "-n", ns, "--selector=app=web", "--min-available=1"], "created");
    r.member_has("/apis/policy/v1/namespaces/matrix/poddisruptionbudgets/pdb1", "/spec/minAvailable", 1.into());
    r.ok_says(&["create", "ingress", "ing1", "-n", ns, "--rule=example.com/=svc-c:80"], "created");
    r.member_has("/apis/networking.k8s.io/v1/namespaces/matrix/ingresses/ing1", "/spec/rules/0/host", "example.com".into());
    let token = r.ok(&["create", "token", &r.target.name("sa1"), "-n", ns]);
    r.check(token.trim().split('.').count() == 3, format_args!("create token: not a JWT: {token:?}"));
    // create -f of an ordinary manifest.
    let file = r.write("cm-create.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-file\n  namespace: matrix\ndata:\n  a: \"1\"\n");
    r.ok_says(&["create", "-f", &file], "created");
    r.member_has("/api/v1/namespaces/matrix/configmaps/cm-file", "/data/a", "1".into());
    r.ok_says(&["get", "configmaps", "-n", ns], &r.target.name("cm1"));
}

fn apply_diff_edit_replace(r: &mut Run) {
    let manifest = |value: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-apply\n  namespace: matrix\ndata:\n  a: \"{value}\"\n");
    let file = r.write("cm-apply.yaml", &manifest("1"));
    r.ok_says(&["apply", "-f", &file], "created");
    r.member_has("/api/v1/namespaces/matrix/configmaps/cm-apply", "/data/a", "1".into());
    let path = "/api/v1/namespaces/matrix/configmaps/cm-apply";
    let last = r.member(path).and_then(|o| o["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().map(String::from));
    r.check(last.is_some_and(|l| l.contains("\"a\":\"1\"")), "apply: no last-applied-configuration in the member");
    // diff: exit 1 with the change shown, nothing changed.
    let file = r.write("cm-apply.yaml", &manifest("2"));
    let out = r.kubectl(&["diff", "-f", &file]);
    r.check(out.code == Some(1) && out.out.contains("+  a: \"2\""), format_args!("diff: {:?} {}{}", out.code, out.out, out.err));
    r.member_has(path, "/data/a", "1".into());
    r.ok_says(&["apply", "-f", &file], "configured");
    r.member_has(path, "/data/a", "2".into());
    // Server-side apply.
    let file = r.write("cm-ssa.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-ssa\n  namespace: matrix\ndata:\n  s: x\n");
    r.ok_says(&["apply", "--server-side", "-f", &file], "serverside-applied");
    let managers: Vec<String> = r
        .member("/api/v1/namespaces/matrix/configmaps/cm-ssa")
        .and_then(|o| o["metadata"]["managedFields"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .map(|m| m["manager"].as_str().unwrap_or_default().to_string())
        .collect();
    r.check(managers == ["kubectl"], format_args!("server-side apply: managers {managers:?}"));
    // edit with a scripted editor.
    let editor = r.write("editor.sh", "#!/bin/sh\nsed -i 's/^  k: v$/  k: edited/' \"$1\"\n");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cm1 = r.target.name("cm1");
    let out = r.kubectl_env(&["edit", "configmap", &cm1, "-n", "matrix"], None, &[("KUBE_EDITOR", &editor)], 30);
    r.check(out.ok && out.out.contains("edited"), format_args!("edit: {:?} {}{}", out.code, out.out, out.err));
    r.member_has("/api/v1/namespaces/matrix/configmaps/cm1", "/data/k", "edited".into());
    // replace: the object as read, changed.
    let out = r.ok(&["get", "configmap", &cm1, "-n", "matrix", "-o", "json"]);
    if let Ok(mut cm) = serde_json::from_str::<Value>(&out) {
        cm["data"]["replaced"] = "yes".into();
        r.ok_with(&["replace", "-f", "-"], Some(&cm.to_string()));
        r.member_has("/api/v1/namespaces/matrix/configmaps/cm1", "/data/replaced", "yes".into());
    }
}

fn patch_label_set(r: &mut Run) {
    let cm1 = r.target.name("cm1");
    let web = r.target.name("web");
    let cm = "/api/v1/namespaces/matrix/configmaps/cm1";
    let deployment = "/apis/apps/v1/namespaces/matrix/deployments/web";
    r.ok_says(&["patch", "configmap", &cm1, "-n", "matrix", "--type=merge", "-p", r#"{"data":{"m":"1"}}"#], "patched");
    r.member_has(cm, "/data/m", "1".into());
    r.ok_says(&["patch", "configmap", &cm1, "-n", "matrix", "--type=json", "-p", r#"[{"op":"add","path":"/data/j","value":"2"}]"#], "patched");
    r.member_has(cm, "/data/j", "2".into());
    let strategic = r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","env":[{"name":"A","value":"1"}]}]}}}}"#;
    r.ok_says(&["patch", "deployment", &web, "-n", "matrix", "-p", strategic], "patched");
    r.member_has(deployment, "/spec/template/spec/containers/0/env/0/value", "1".into());
    r.member_has(deployment, "/spec/template/spec/containers/0/image", "nginx:1.27".into());
    r.ok_says(&["label", "configmap", &cm1, "-n", "matrix", "tier=x"], "labeled");
    r.member_has(cm, "/metadata/labels/tier", "x".into());
    // kubectl 1.27 says "annotate", later versions "annotated".
    r.ok_says(&["annotate", "configmap", &cm1, "-n", "matrix", "note=y"], "annotate");
    r.member_has(cm, "/metadata/annotations/note", "y".into());
    r.ok_says(&["label", "configmap", &cm1, "-n", "matrix", "tier-"], "unlabeled");
    r.member_has(cm, "/metadata/labels/tier", Value::Null);
    let deploy = format!("deployment/{web}");
    r.ok_says(&["set", "image", &deploy, "-n", "matrix", "nginx=nginx:1.28"], "image updated");
    r.member_has(deployment, "/spec/template/spec/containers/0/image", "nginx:1.28".into());
    r.ok_says(&["set", "env", &deploy, "-n", "matrix", "B=2"], "env updated");
    r.member_has(deployment, "/spec/template/spec/containers/0/env/1/value", "2".into());
    r.ok_says(&["set", "resources", &deploy, "-n", "matrix", "--limits=cpu=200m"], "resource requirements updated");
    r.member_has(deployment, "/spec/template/spec/containers/0/resources/limits/cpu", "200m".into());
    r.ok_says(&["set", "serviceaccount", &deploy, "-n", "matrix", "sa1"], "serviceaccount updated");
    r.member_has(deployment, "/spec/template/spec/serviceAccountName", "sa1".into());
    r.ok_says(&["set", "selector", &format!("service/{}", r.target.name("svc-c")), "-n", "matrix", "app=web"], "selector updated");
    r.member_has("/api/v1/namespaces/matrix/services/svc-c", "/spec/selector/app", "web".into());
    r.ok_says(&["set", "subject", &format!("rolebinding/{}", r.target.name("rb1")), "-n", "matrix", "--user=bob"], "subjects updated");
    r.member_has("/apis/rbac.authorization.k8s.io/v1/namespaces/matrix/rolebindings/rb1", "/subjects/1/name", "bob".into());
}

fn workloads(r: &mut Run) {
    let web = r.target.name("web");
    let deploy = format!("deployment/{web}");
    let deployment = "/apis/apps/v1/namespaces/matrix/deployments/web";
    r.ok_says(&["scale", &deploy, "-n", "matrix", "--replicas=3"], "scaled");
    r.member_has(deployment, "/spec/replicas", 3.into());
    r.ok_says(&["autoscale", &deploy, "-n", "matrix", "--min=1", "--max=4", "--cpu-percent=80"], "autoscaled");
    let hpa = r.member("/apis/autoscaling/v2/namespaces/matrix/horizontalpodautoscalers/web");
    // kubectl up to 1.32 creates it as autoscaling/v1, 1.33 as v2: the member serves both.
    r.check(
        hpa.as_ref().is_some_and(|h| h["spec"]["maxReplicas"] == 4 && h["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80),
        format_args!("autoscale: member HPA {hpa:?}"),
    );
    r.ok_says(&["get", "hpa", "-n", "matrix"], &r.target.name("web"));
    r.ok_says(&["expose", &deploy, "-n", "matrix", "--port=80", "--target-port=80", &format!("--name={}", r.target.name("web-svc"))], "exposed");
    r.member_has("/api/v1/namespaces/matrix/services/web-svc", "/spec/selector/app", "web".into());
    // The rollout: the member's controllers bring it to its new revision.
    r.ok_says(&["rollout", "status", &deploy, "-n", "matrix", "--timeout=30s"], "successfully rolled out");
    r.ok_says(&["wait", "--for=condition=Available", &deploy, "-n", "matrix", "--timeout=30s"], "condition met");
    let out = r.ok_says(&["rollout", "history", &deploy, "-n", "matrix"], "REVISION");
    r.check(out.lines().count() >= 3, format_args!("rollout history: {out}"));
    r.ok_says(&["rollout", "restart", &deploy, "-n", "matrix"], "restarted");
    r.member_eventually("rollout restart", deployment, |d| {
        d.is_some_and(|d| d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string())
    });
    r.ok_says(&["rollout", "status", &deploy, "-n", "matrix", "--timeout=30s"], "successfully rolled out");
    r.ok_says(&["rollout", "pause", &deploy, "-n", "matrix"], "paused");
    r.member_has(deployment, "/spec/paused", true.into());
    r.ok_says(&["rollout", "resume", &deploy, "-n", "matrix"], "resumed");
    r.member_has(deployment, "/spec/paused", Value::Null);
    r.ok_says(&["rollout", "undo", &deploy, "-n", "matrix"], "rolled back");
    r.member_eventually("rollout undo", deployment, |d| {
        d.is_some_and(|d| d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_null())
    });
    r.ok_says(&["rollout", "status", &deploy, "-n", "matrix", "--timeout=30s"], "successfully rolled out");
    // The current ReplicaSet's pods, three as scaled (the old ones gone),
    // listed by kubectl too.
    r.member_eventually("the deployment's pods", "/api/v1/namespaces/matrix/pods?labelSelector=app%3Dweb", |list| {
        list.and_then(|l| l["items"].as_array()).is_some_and(|items| {
            items.len() == 3 && items.iter().all(|p| p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running")
        })
    });
    let out = r.ok(&["get", "pods", "-n", "matrix", "-l", "app=web", "-o", "name"]);
    r.check(out.lines().count() >= 3, format_args!("the deployment's pods: {out}"));
    r.ok_says(&["logs", &deploy, "-n", "matrix", "--tail=1"], "");
}

fn nodes(r: &mut Run) {
    let node = r.target.name("member1-node-1");
    let path = "/api/v1/nodes/member1-node-1";
    r.ok_says(&["cordon", &node], "cordoned");
    r.member_has(path, "/spec/unschedulable", true.into());
    r.ok_says(&["uncordon", &node], "uncordoned");
    r.member_has(path, "/spec/unschedulable", Value::Null);
    r.ok_says(&["taint", "nodes", &node, "dedicated=matrix:NoSchedule"], "tainted");
    let taints = r.member(path).map(|n| n["spec"]["taints"].clone()).unwrap_or_default();
    r.check(taints.as_array().is_some_and(|t| t.iter().any(|t| t["key"] == "dedicated" && t["effect"] == "NoSchedule")), format_args!("taint: {taints}"));
    r.ok_says(&["taint", "nodes", &node, "dedicated-"], "untainted");
    // The pods drain removes: all but mirror pods and DaemonSet pods.
    let on_node = |r: &Run| {
        let (_, body) = http_get(&format!("{}/api/v1/pods?fieldSelector=spec.nodeName%3Dmember1-node-1", r.target.member.url()));
        let list: Value = serde_json::from_str(&body).unwrap_or_default();
        let drained = |p: &&Value| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_null()
                && !p["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.iter().any(|o| o["kind"] == "DaemonSet"))
        };
        list["items"].as_array().map(|items| items.iter().filter(drained).count()).unwrap_or(0)
    };
    let before = on_node(r);
    let out = r.kubectl(&["drain", &node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--grace-period=1", "--timeout=60s"]);
    r.check(out.ok && out.out.contains("drained"), format_args!("drain: {:?} {}{}", out.code, out.out, out.err));
    r.member_has(path, "/spec/unschedulable", true.into());
    let after = on_node(r);
    r.check(before > 0 && after == 0, format_args!("drain: {before} pods on the node before, {after} after"));
    r.ok(&["uncordon", &node]);
}

fn deletes(r: &mut Run) {
    r.ok_says(&["delete", "configmap", &r.target.name("cm1"), "-n", "matrix"], "deleted");
    r.check(r.member("/api/v1/namespaces/matrix/configmaps/cm1").is_none(), "delete: cm1 is still in the member");
    r.ok_says(&["delete", "-f", &r.dir.join("cm-apply.yaml").to_string_lossy()], "deleted");
    r.check(r.member("/api/v1/namespaces/matrix/configmaps/cm-apply").is_none(), "delete -f: cm-apply is still in the member");
    // wait --for=delete of a deployment deleted in the background.
    let job = r.target.name("j1");
    r.ok_says(&["delete", "job", &job, "-n", "matrix", "--wait=false"], "deleted");
    let out = r.kubectl(&["wait", "--for=delete", &format!("job/{job}"), "-n", "matrix", "--timeout=30s"]);
    r.check(out.ok, format_args!("wait --for=delete: {:?} {}{}", out.code, out.out, out.err));
    r.ok_says(&["delete", "namespace", "matrix", "--wait=false"], "deleted");
    r.member_eventually("namespace deletion", "/api/v1/namespaces/matrix", |ns| ns.is_none_or(|ns| ns["status"]["phase"] == "Terminating"));
    r.ok_says(&["delete", "clusterrolebinding", &r.target.name("crb-matrix")], "deleted");
    r.check(r.member("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/crb-matrix").is_none(), "delete clusterrolebinding");
}

/// The streaming verbs: `exec`, `attach` and `port-forward` work over
/// WebSocket (kubectl 1.30 and later; port-forward of 1.31+ tunnels SPDY
/// inside it) and over SPDY/3.1 upgrades of HTTP (kubectl 1.29 and older,
/// port-forward up to 1.30); `tests/streaming.rs` tests them, and `cp`, in
/// depth. `debug` adds an ephemeral container; `top` reads the metrics API
/// (`tests/top.rs` tests it across members).
fn streaming(r: &mut Run) {
    let web0 = r.target.name("web-0");
    // debug adds an ephemeral container on the member (`tests/debug.rs`
    // tests it with -i, exec into it, and refusals).
    let out = r.kubectl_env(&["debug", "-n", "default", &web0, "--image=busybox", "--container=matrix-debug"], None, &[], 20);
    r.check(out.ok, format_args!("debug: {:?} {}{}", out.code, out.out, out.err));
    r.member_eventually("debug's ephemeral container", "/api/v1/namespaces/default/pods/web-0", |pod| {
        pod.is_some_and(|p| p["status"]["ephemeralContainerStatuses"].as_array().is_some_and(|s| s.iter().any(|c| c["name"] == "matrix-debug")))
    });
    let out = r.kubectl_env(&["top", "pods", "-n", "default"], None, &[], 20);
    let row = out.out.lines().find(|l| l.split_whitespace().next() == Some(web0.as_str())).unwrap_or_default().to_string();
    let columns: Vec<&str> = row.split_whitespace().collect();
    r.check(
        out.ok && columns.len() == 3 && columns[1].ends_with('m') && columns[2].ends_with("Mi"),
        format_args!("top pods: {:?} {}{}", out.code, out.out, out.err),
    );
    let out = r.kubectl_env(&["exec", "-n", "default", &web0, "--", "ls"], None, &[], 20);
    r.check(out.ok && out.out.lines().any(|l| l == "etc"), format_args!("exec ls: {:?} {}{}", out.code, out.out, out.err));
    // attach follows the container's output until stopped.
    let out = r.kubectl_env(&["attach", "-n", "default", &web0], None, &[], 4);
    r.check(out.code == Some(124) && !out.out.is_empty(), format_args!("attach: {:?} {}{}", out.code, out.out, out.err));
    let forward = PortForward::start(&r.bin, &r.target.server, &["-n", "default", &format!("pod/{web0}"), "0:80"]);
    let (code, body) = forward.get("/");
    r.check(code == 200 && body == "web-0\n", format_args!("port-forward: {code} {body}: {}", forward.stderr.lock().unwrap()));
}
