//! What the etcd tests share: etcd members on free loopback ports, lists
//! and watches read as (name, resourceVersion), etcd keys read through its
//! JSON gateway, and logs printed when a test fails.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::*;

/// One etcd member on free loopback ports in a temporary dir, killed when dropped.
pub struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    name: String,
    /// `--initial-cluster`: every member's name and peer URL.
    initial_cluster: String,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether the `etcd` binary is there (the test skips, saying so, when not).
fn etcd_installed() -> bool {
    if Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        eprintln!("skipped: no `etcd` binary (Debian's etcd-server package; .ci/run installs it)");
        return false;
    }
    true
}

impl Etcd {
    /// Starts etcd, or `None` (the test skips) when there is no etcd binary.
    pub fn start() -> Option<Etcd> {
        Etcd::cluster(1).map(|mut members| members.remove(0))
    }

    /// Starts a cluster of `n` members (`e1`..), or `None` without etcd.
    pub fn cluster(n: usize) -> Option<Vec<Etcd>> {
        if !etcd_installed() {
            return None;
        }
        let mut members: Vec<Etcd> = (1..=n)
            .map(|i| Etcd {
                child: None,
                dir: tempfile::tempdir().unwrap(),
                client_port: free_port(),
                peer_port: free_port(),
                name: format!("e{i}"),
                initial_cluster: String::new(),
            })
            .collect();
        let initial = members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port)).collect::<Vec<_>>().join(",");
        for member in &mut members {
            member.initial_cluster = initial.clone();
            member.spawn();
        }
        for member in &members {
            member.wait_healthy();
        }
        Some(members)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Starts (or starts again) the member on its data dir and ports, and
    /// waits until it answers `/health`.
    pub fn run(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    fn spawn(&mut self) {
        let (client, peer) = (self.url(), format!("http://127.0.0.1:{}", self.peer_port));
        let child = Command::new("etcd")
            .args(["--name", &self.name, "--data-dir"])
            .arg(self.dir.path().join("etcd"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
    }

    fn wait_healthy(&self) {
        wait_for(Duration::from_secs(30), "etcd healthy", || http_get(&format!("{}/health", self.url())).1.contains("true"));
    }

    /// Sends the member a signal (`STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
        }
    }

    /// Whether this member is the cluster's leader (its status says so).
    pub fn is_leader(&self) -> bool {
        let Ok(response) = reqwest::blocking::Client::builder().timeout(Duration::from_secs(2)).build().unwrap().post(format!("{}/v3/maintenance/status", self.url())).body("{}").send() else { return false };
        let Ok(status) = response.json::<Value>() else { return false };
        status["leader"].is_string() && status["leader"] == status["header"]["member_id"]
    }

    /// Kills the member (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Names and kubefold resourceVersions of a list's items, and the list's resourceVersion.
pub fn listed(list: &Value) -> (Vec<(String, String)>, u64) {
    let items = list["items"].as_array().unwrap().iter().map(|o| {
        (o["metadata"]["name"].as_str().unwrap().to_string(), o["metadata"]["resourceVersion"].as_str().unwrap().to_string())
    });
    (items.collect(), list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap())
}

/// Reads watch events (type, name, resourceVersion) from `url` until `n`
/// arrived or `limit` passed.
pub fn watch_events(url: &str, n: usize, limit: Duration) -> Vec<(String, String, u64)> {
    let client = reqwest::blocking::Client::builder().timeout(limit).build().unwrap();
    let response = client.get(url).send().expect("watch starts");
    assert_eq!(response.status().as_u16(), 200, "watch {url}");
    let deadline = Instant::now() + limit;
    let mut events = Vec::new();
    for line in BufReader::new(response).lines() {
        let Ok(line) = line else { break };
        let event: Value = serde_json::from_str(&line).unwrap();
        let kind = event["type"].as_str().unwrap().to_string();
        if kind == "BOOKMARK" {
            continue;
        }
        assert_ne!(kind, "ERROR", "watch {url}: {event}");
        let object = &event["object"]["metadata"];
        events.push((kind, object["name"].as_str().unwrap().to_string(), object["resourceVersion"].as_str().unwrap().parse().unwrap()));
        if events.len() >= n || Instant::now() >= deadline {
            break;
        }
    }
    events
}

/// A key of etcd as text, read through etcd's JSON gateway.
pub fn etcd_get(etcd: &Etcd, key: &str) -> Option<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let body = serde_json::json!({ "key": b64.encode(key) }).to_string();
    let response = reqwest::blocking::Client::new().post(format!("{}/v3/kv/range", etcd.url())).body(body).send().ok()?;
    let answer: Value = response.json().ok()?;
    let value = answer["kvs"].as_array()?.first()?["value"].as_str()?.to_string();
    String::from_utf8(b64.decode(value).ok()?).ok()
}

/// Runs its closure when dropped while panicking (a failed test prints logs).
pub struct Dump(pub Box<dyn Fn()>);

impl Drop for Dump {
    fn drop(&mut self) {
        if std::thread::panicking() {
            (self.0)();
        }
    }
}
