//! Test harness: kubefold as a child process (as users run it), simulators
//! in-process on free ports, and kubectl as the real client it is.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::Value;

/// A kubefold child process.
pub struct Kubefold {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Everything it printed on stderr (logs), collected in the background.
    logs: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Kubefold {
    /// Starts `kubefold serve` with `args` plus `--listen 127.0.0.1:0`.
    pub fn serve(data_dir: &Path, clusters: &[(String, String)], extra: &[&str]) -> Kubefold {
        Kubefold::serve_at("127.0.0.1:0", data_dir, clusters, extra)
    }

    /// Starts `kubefold serve` listening on `listen`.
    pub fn serve_at(listen: &str, data_dir: &Path, clusters: &[(String, String)], extra: &[&str]) -> Kubefold {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefold"));
        cmd.arg("serve").arg("--listen").arg(listen).arg("--data-dir").arg(data_dir);
        for (name, url) in clusters {
            cmd.arg("--cluster").arg(format!("{name}={url}"));
        }
        cmd.args(extra);
        Kubefold::spawn(cmd)
    }

    /// Starts kubefold as `cmd` (which prints its listening address).
    pub fn spawn(mut cmd: Command) -> Kubefold {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).env("RUST_LOG", "info,sled=warn");
        let mut child = cmd.spawn().expect("kubefold starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("kubefold listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let logs = capture(child.stderr.take().unwrap());
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("kubefold did not start: {}", logs.lock().unwrap());
            }
        };
        Kubefold { child, url, logs }
    }

    /// Its process id (to send it signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its logs so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Its logs as they come (to print them after it is gone).
    pub fn log_handle(&self) -> std::sync::Arc<std::sync::Mutex<String>> {
        self.logs.clone()
    }

    /// Kills it with SIGKILL (a crash) and waits.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM and waits (SIGKILL after 20 s).
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// GET a path, returning status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&format!("{}{}", self.url, path))
    }

    /// GET a path that must answer 200 with JSON.
    pub fn get_json(&self, path: &str) -> Value {
        let (code, body) = self.get(path);
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// Waits until `/readyz` says every cluster is synced.
    pub fn wait_ready(&self) {
        wait_for(Duration::from_secs(60), "kubefold ready", || self.get("/readyz").0 == 200);
    }
}

impl Drop for Kubefold {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// A blocking GET.
pub fn http_get(url: &str) -> (u16, String) {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    match client.get(url).send() {
        Ok(r) => {
            let code = r.status().as_u16();
            (code, r.text().unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// Polls `check` until it holds, panicking with `what` after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// Starts `n` demo-workload simulators `member1..n` (no churn unless asked).
pub fn demo_members(n: usize, churn_per_sec: f64) -> Vec<(String, SimHandle)> {
    (1..=n)
        .map(|i| {
            let name = format!("member{i}");
            let sim = kubefold_testdata::start(SimConfig {
                name: name.clone(),
                workload: Workload::Demo,
                churn_per_sec,
                seed: i as u64,
                ..SimConfig::default()
            })
            .expect("simulator starts");
            (name, sim)
        })
        .collect()
}

/// `(name, url)` pairs for `--cluster` flags.
pub fn cluster_flags(members: &[(String, SimHandle)]) -> Vec<(String, String)> {
    members.iter().map(|(n, s)| (n.clone(), s.url())).collect()
}

/// Runs kubectl (the dispatcher, which picks the binary matching the
/// server's `/version`) with a timeout; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    kubectl_bin("kubectl", args, stdin)
}

/// What kubectl a test needs and this machine lacks: the `kubectl` on PATH
/// (the dispatcher), or a version installed beside it (`kubectl.1.27` ..
/// `kubectl.1.33`); `None` when everything is there.
pub fn kubectl_missing(minors: &[&str]) -> Option<String> {
    let dispatcher = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("kubectl")).find(|p| p.is_file()))
        .and_then(|p| std::fs::canonicalize(p).ok());
    let Some(dispatcher) = dispatcher else {
        return Some("kubectl is not installed (not on PATH)".to_string());
    };
    let missing: Vec<String> =
        minors.iter().map(|minor| dispatcher.with_file_name(format!("kubectl.{minor}"))).filter(|p| !p.exists()).map(|p| p.display().to_string()).collect();
    (!missing.is_empty()).then(|| format!("kubectl versions are not installed beside {}: {}", dispatcher.display(), missing.join(", ")))
}

/// Returns from the calling test, printing a SKIPPED line that names what
/// is missing, when kubectl (or one of the given minor versions beside it)
/// is not installed.
#[macro_export]
macro_rules! require_kubectl {
    ($($minor:literal),*) => {
        if let Some(missing) = $crate::common::kubectl_missing(&[$($minor),*]) {
            println!("SKIPPED: {missing}");
            return;
        }
    };
}

/// The path of a specific kubectl minor version installed beside the
/// dispatcher (`kubectl.1.27` .. `kubectl.1.33`).
pub fn kubectl_version(minor: &str) -> String {
    let dispatcher = std::fs::canonicalize(
        String::from_utf8(Command::new("which").arg("kubectl").output().unwrap().stdout).unwrap().trim(),
    )
    .unwrap();
    let path = dispatcher.with_file_name(format!("kubectl.{minor}"));
    assert!(path.exists(), "{} is not installed", path.display());
    path.to_string_lossy().into_owned()
}

/// Runs a given kubectl binary with a timeout; returns (success, stdout, stderr).
pub fn kubectl_bin(bin: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(bin).args(args);
    cmd.env("KUBECONFIG", "/dev/null").env("HOME", std::env::temp_dir());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh temporary data dir.
pub fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    (dir, path)
}

/// A kubefold config file holding `yaml`, in a fresh temporary dir (kept
/// while the dir lives); its path as `--config` takes it.
pub fn config_file(yaml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubefold.yaml");
    std::fs::write(&path, yaml).unwrap();
    (dir, path.to_string_lossy().to_string())
}

/// A free loopback port with nothing listening on it.
pub fn dead_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

/// A fixture from `testdata/fixtures/kubernetes-api-testdata`, made
/// acceptable to a validating server: the placeholder `nameValue` (not a
/// DNS label) becomes `name-value`, and the object gets `name` in namespace
/// `default` with no resourceVersion.
pub fn fixture(file: &str, name: &str) -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures/kubernetes-api-testdata");
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut object: Value = serde_json::from_str(&text).unwrap();
    fn fix(v: &mut Value) {
        match v {
            Value::String(s) if s == "nameValue" => *s = "name-value".to_string(),
            Value::Array(a) => a.iter_mut().for_each(fix),
            Value::Object(o) => o.values_mut().for_each(fix),
            _ => {}
        }
    }
    fix(&mut object);
    object["metadata"]["name"] = Value::String(name.to_string());
    object["metadata"]["namespace"] = Value::String("default".to_string());
    let meta = object["metadata"].as_object_mut().unwrap();
    for f in ["resourceVersion", "generateName", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "ownerReferences", "finalizers"] {
        meta.remove(f);
    }
    object
}

/// The invariant checker: kubefold's view of every member equals the
/// member's own state, allowing for changes that happen while it looks.
/// For each member it lists the member at member RV `X`, waits until
/// kubefold's pods checkpoint for that member reaches `X`, then requires:
/// every object kubefold holds at a member RV <= `X` is in the member's list
/// with that RV, and every object of the member's list is in kubefold at the
/// same or a later member RV (or was deleted since, per a fresh GET).
pub fn assert_converged(kf: &Kubefold, members: &[(String, SimHandle)], resource_path: &str, resource_key: &str) {
    // A change lost with a bad member object comes back with the healing
    // relist (15 s after the last bad object, doubling while they keep
    // coming), so convergence is awaited, not only checked once.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match converged(kf, members, resource_path, resource_key) {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("not converged within 120 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

fn converged(kf: &Kubefold, members: &[(String, SimHandle)], resource_path: &str, resource_key: &str) -> Result<(), String> {
    for (cluster, sim) in members {
        let (code, body) = http_get(&format!("{}{resource_path}", sim.url()));
        if code != 200 {
            return Err(format!("{cluster} answered its list {code}: {body}"));
        }
        let member: Value = serde_json::from_str(&body).unwrap();
        let x: u64 = member["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        // The list's resourceVersion is the member's newest change of any
        // type: a type's watch reaches it only with a bookmark (about once
        // a minute, as kube-apiserver sends them). Its newest object is
        // what kubefold must have reached; a deletion after it that
        // kubefold has not applied yet shows below as an object the member
        // lacks, and the comparison is made again.
        let newest = member["items"].as_array().unwrap().iter().filter_map(|o| o["metadata"]["resourceVersion"].as_str()?.parse::<u64>().ok()).max().unwrap_or(0);
        wait_for(Duration::from_secs(60), "kubefold reaching the member's newest object", || {
            let status = kf.get_json(&format!("/admin/v1/clusters/{cluster}"));
            status["status"]["resources"][resource_key]["checkpoint"]
                .as_str()
                .and_then(|c| c.parse::<u64>().ok())
                .is_some_and(|c| c >= newest)
        });
        let mine = kf.get_json(&format!("/clusters/{cluster}{resource_path}"));
        let key = |o: &Value| format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap_or(""), o["metadata"]["name"].as_str().unwrap());
        let member_rvs: std::collections::BTreeMap<String, u64> = member["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (key(o), o["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()))
            .collect();
        let kf_rvs: std::collections::BTreeMap<String, u64> = mine["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (key(o), o["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap().parse().unwrap()))
            .collect();
        for (k, rv) in &kf_rvs {
            if *rv <= x {
                if member_rvs.get(k) != Some(rv) {
                    return Err(format!("{cluster}: kubefold holds {k} at member RV {rv}, the member at {x} does not (it has {:?})", member_rvs.get(k)));
                }
            }
        }
        for (k, rv) in &member_rvs {
            match kf_rvs.get(k) {
                Some(mine) if mine < rv => return Err(format!("{cluster}: kubefold holds {k} at {mine}, older than the member's {rv}")),
                Some(_) => {}
                None => {
                    let (ns, name) = k.split_once('/').unwrap();
                    let path = if ns.is_empty() {
                        format!("{resource_path}/{name}")
                    } else {
                        format!("{}/namespaces/{ns}/{}/{name}", resource_path.rsplit_once('/').unwrap().0, resource_path.rsplit_once('/').unwrap().1)
                    };
                    let (code, _) = http_get(&format!("{}{path}", sim.url()));
                    if code != 404 {
                        return Err(format!("{cluster}: {k} exists in the member but not in kubefold"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Collects what a child process writes to a pipe (its logs), as it comes.
pub fn capture(mut pipe: impl Read + Send + 'static) -> std::sync::Arc<std::sync::Mutex<String>> {
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// The fixtures of kubernetes/api (`testdata/fixtures/kubernetes-api-testdata`):
/// file, group-version path, plural, namespaced.
pub const FIXTURES: [(&str, &str, &str, bool); 10] = [
    ("apps.v1.Deployment.json", "/apis/apps/v1", "deployments", true),
    ("apps.v1.ReplicaSet.json", "/apis/apps/v1", "replicasets", true),
    ("apps.v1.StatefulSet.json", "/apis/apps/v1", "statefulsets", true),
    ("core.v1.ConfigMap.json", "/api/v1", "configmaps", true),
    ("core.v1.Event.json", "/api/v1", "events", true),
    ("core.v1.Namespace.json", "/api/v1", "namespaces", false),
    ("core.v1.Node.json", "/api/v1", "nodes", false),
    ("core.v1.Pod.json", "/api/v1", "pods", true),
    ("core.v1.Service.json", "/api/v1", "services", true),
    ("discovery.k8s.io.v1.EndpointSlice.json", "/apis/discovery.k8s.io/v1", "endpointslices", true),
];

/// A test CA and a serving certificate it signs for 127.0.0.1 and
/// localhost, written as PEM files into a directory.
pub struct TestPki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// `ca.crt`.
    pub ca_file: PathBuf,
    /// `tls.crt`: the serving certificate.
    pub cert_file: PathBuf,
    /// `tls.key`: its key.
    pub key_file: PathBuf,
}

impl TestPki {
    /// Makes the CA and the certificate and writes them into `dir`.
    pub fn write(dir: &Path) -> TestPki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "kubefold-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "kubefold");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let ca_pem = ca.pem();
        TestPki { ca_file: write("ca.crt", &ca_pem), cert_file: write("tls.crt", &cert.pem()), key_file: write("tls.key", &key.serialize_pem()), ca_pem }
    }
}

/// A running `kubectl port-forward` (killed when dropped).
pub struct PortForward {
    child: Child,
    /// The local port kubectl listens on (`Forwarding from 127.0.0.1:PORT`),
    /// `None` when it ended or said nothing within 30 s.
    pub local_port: Option<u16>,
    /// What it printed on stderr.
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl PortForward {
    /// Starts `bin port-forward` against `server` with `args` (a local
    /// port of 0 lets kubectl choose one) and waits for its listening line.
    pub fn start(bin: &str, server: &str, args: &[&str]) -> PortForward {
        let mut child = Command::new(bin)
            .args(["--server", server, "port-forward"])
            .args(args)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let stderr = capture(child.stderr.take().unwrap());
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                    let _ = tx.send(rest.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()));
                }
            }
        });
        let local_port = rx.recv_timeout(Duration::from_secs(30)).ok().flatten();
        PortForward { child, local_port, stderr }
    }

    /// An HTTP GET of `path` through the forwarded port: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        match self.local_port {
            Some(port) => http_get(&format!("http://127.0.0.1:{port}{path}")),
            None => (0, format!("kubectl did not forward: {}", self.stderr.lock().unwrap())),
        }
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
