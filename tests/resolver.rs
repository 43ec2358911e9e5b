//! The estimator resolver end to end: a simulated control plane whose
//! estimator Services and EndpointSlices are created, changed and deleted
//! with kubectl (and over HTTP), a `Resolver` fed by the control plane's
//! watchers, and the admin API (`/admin/v1/estimators`, its `?watch=true`
//! stream) following every change. Every address probed is on loopback.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use actix_web::{web, App, HttpServer};
use futures::StreamExt;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::fleet::Fleet;
use kubefold_actors::resolver::{EstimatorConfig, Estimators, Resolver};
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_store::{Options, Store};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::{json, Value};

const NS: &str = "karmada-system";

fn svc(cluster: &str) -> String {
    format!("karmada-scheduler-estimator-{cluster}")
}

/// Why kubectl cannot run here, when it is not on PATH.
fn kubectl_missing() -> Option<String> {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("kubectl").is_file()));
    (!on_path).then(|| "kubectl is not installed (not on PATH)".to_string())
}

/// Runs kubectl against `server` with a private HOME (no kubeconfig, no
/// discovery cache shared with anything else); returns stdout.
async fn kubectl(server: &str, home: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut command = tokio::process::Command::new("kubectl");
    command
        .arg("--server")
        .arg(server)
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("kubectl runs");
    if let Some(text) = stdin {
        use tokio::io::AsyncWriteExt;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).await.unwrap();
        drop(pipe);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finishes within 60s")
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Reads JSON lines of a streaming response.
struct Lines {
    stream: futures::stream::BoxStream<'static, reqwest::Result<actix_web::web::Bytes>>,
    buffer: Vec<u8>,
}

impl Lines {
    async fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                return Some(serde_json::from_slice(&line).expect("a JSON line"));
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// The first event (skipping others) that satisfies `want`, within `within`.
    async fn expect(&mut self, within: Duration, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        while let Some(event) = self.next(deadline).await {
            if want(&event) {
                return event;
            }
            seen.push(event);
        }
        panic!("no watch event {what} within {within:?}; saw {seen:#?}");
    }
}

fn is(event: &Value, event_type: &str, cluster: &str) -> bool {
    event["type"] == event_type && event["object"]["cluster"] == cluster
}

async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = client.get(url).send().await.unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap())
}

/// Polls the table until `want` holds.
async fn wait_table(client: &reqwest::Client, api: &str, what: &str, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, table) = get_json(client, &format!("{api}/admin/v1/estimators")).await;
        let rows = table.as_array().cloned().unwrap_or_default();
        if want(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "table never showed {what}: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn row<'a>(rows: &'a [Value], cluster: &str) -> &'a Value {
    rows.iter().find(|r| r["cluster"] == cluster).unwrap_or(&Value::Null)
}

fn fleet(dir: &Path) -> Arc<Fleet> {
    let store = Store::open(dir, &Options::default()).unwrap();
    Fleet::new(kubefold_engine::resources::builtin(), NameStyle::Qualified, store, Index::default(), 0)
}

/// A loopback port with nothing listening.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[actix_web::test]
async fn the_admin_api_and_its_watch_follow_kubectl_edits_of_the_control_plane() {
    if let Some(missing) = kubectl_missing() {
        println!("SKIPPED: {missing}");
        return;
    }
    let sim = kubefold_testdata::start(SimConfig { name: "karmada".into(), workload: Workload::Empty, ..SimConfig::default() }).unwrap();
    let server = sim.url();
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();

    // member1's estimator stand-in: accepts and closes connections.
    let stand_in = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stand_in_port = stand_in.local_addr().unwrap().port();
    actix_web::rt::spawn(async move {
        while let Ok((socket, _)) = stand_in.accept().await {
            drop(socket);
        }
    });

    let services = format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
---
apiVersion: v1
kind: Service
metadata:
  name: {m1}
  namespace: {NS}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports:
  - name: grpc
    port: 10352
    targetPort: {stand_in_port}
---
apiVersion: v1
kind: Service
metadata:
  name: {m2}
  namespace: {NS}
spec:
  type: ClusterIP
  clusterIP: 127.0.0.42
  ports:
  - name: grpc
    port: 10352
"#,
        m1 = svc("member1"),
        m2 = svc("member2"),
    );
    kubectl(&server, home.path(), &["apply", "-f", "-"], Some(&services)).await;

    let estimators = Estimators::new();
    let config = EstimatorConfig {
        control_plane: Some(ClusterSpec::from_url("karmada", &server)),
        timeout: Duration::from_secs(1),
        probe_interval_seconds: 1,
        probe_dns_names: false,
        ..EstimatorConfig::default()
    };
    let members = ["member1", "member2", "member3", "member4"].map(String::from).to_vec();
    let _resolver = Resolver::new(config, members, estimators.clone(), fleet(data.path())).unwrap().start();
    let shared = web::Data::from(estimators.clone());
    let http = HttpServer::new(move || App::new().app_data(shared.clone()).configure(kubefold_api::estimators::configure))
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
    let api = format!("http://{}", http.addrs()[0]);
    let http = http.run();
    let http_handle = http.handle();
    actix_web::rt::spawn(http);
    let client = reqwest::Client::new();

    // The initial table: every rule, every probe outcome.
    let rows = wait_table(&client, &api, "four members probed", |rows| {
        rows.len() == 4 && row(rows, "member1")["probe"]["reachable"] == true && row(rows, "member2")["probe"]["reachable"] == false
    })
    .await;
    assert_eq!(row(&rows, "member1")["rule"], "externalName");
    assert_eq!(row(&rows, "member1")["addresses"], json!([format!("127.0.0.1:{stand_in_port}")]));
    assert_eq!(row(&rows, "member2")["rule"], "clusterIP");
    assert_eq!(row(&rows, "member2")["addresses"], json!(["127.0.0.42:10352"]));
    assert_eq!(row(&rows, "member2")["probe"]["failure"], "connect");
    assert!(row(&rows, "member2")["probe"]["error"].as_str().unwrap().starts_with("127.0.0.42:10352: "));
    for dns in ["member3", "member4"] {
        assert_eq!(row(&rows, dns)["rule"], "dnsFallback");
        assert_eq!(
            row(&rows, dns)["addresses"],
            json!([format!("{}.{NS}.svc.cluster.local:10352", svc(dns)), format!("{}.{NS}.svc:10352", svc(dns))])
        );
    }
    let (code, one) = get_json(&client, &format!("{api}/admin/v1/estimators/member2")).await;
    assert_eq!((code, &one["rule"]), (200, &json!("clusterIP")));
    let (code, missing) = get_json(&client, &format!("{api}/admin/v1/estimators/member9")).await;
    assert_eq!((code, missing["kind"].as_str(), missing["reason"].as_str()), (404, Some("Status"), Some("NotFound")));

    // The watch stream: the table first.
    let resp = client.get(format!("{api}/admin/v1/estimators?watch=true")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut watch = Lines { stream: resp.bytes_stream().boxed(), buffer: Vec::new() };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut initial = Vec::new();
    for _ in 0..4 {
        let event = watch.next(deadline).await.expect("the current table first");
        assert_eq!(event["type"], "ADDED");
        initial.push(event["object"]["cluster"].as_str().unwrap().to_string());
    }
    assert_eq!(initial, ["member1", "member2", "member3", "member4"]);

    // kubectl patch: member1's estimator moves to a port where nothing listens.
    let moved = closed_port();
    let patch = json!({"spec": {"ports": [{"name": "grpc", "port": 10352, "targetPort": moved}]}}).to_string();
    let started = Instant::now();
    kubectl(&server, home.path(), &["-n", NS, "patch", "service", &svc("member1"), "--type=merge", "-p", &patch], None).await;
    let event = watch
        .expect(Duration::from_secs(3), "member1 moved", |e| {
            is(e, "MODIFIED", "member1") && e["object"]["addresses"] == json!([format!("127.0.0.1:{moved}")])
        })
        .await;
    assert!(started.elapsed() < Duration::from_secs(3), "the table followed the edit in {:?}", started.elapsed());
    assert_eq!(event["object"]["probe"], Value::Null, "the old probe result is dropped with the old address");
    watch
        .expect(Duration::from_secs(5), "member1 unreachable", |e| is(e, "MODIFIED", "member1") && e["object"]["probe"]["reachable"] == false)
        .await;

    // kubectl apply: member4 gets a headless Service, then its EndpointSlice.
    let headless = format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {m4}
  namespace: {NS}
spec:
  clusterIP: None
  ports:
  - name: grpc
    port: 10352
    targetPort: 4100
"#,
        m4 = svc("member4")
    );
    kubectl(&server, home.path(), &["apply", "-f", "-"], Some(&headless)).await;
    let event = watch.expect(Duration::from_secs(5), "member4 headless", |e| is(e, "MODIFIED", "member4") && e["object"]["rule"] == "headless").await;
    assert_eq!(
        event["object"]["error"],
        format!("no ready endpoints for service {NS}/{} on port 10352", svc("member4"))
    );
    let slice = format!(
        r#"apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {m4}-abcde
  namespace: {NS}
  labels:
    kubernetes.io/service-name: {m4}
addressType: IPv4
ports:
- name: grpc
  port: 4100
  protocol: TCP
endpoints:
- addresses: ["127.0.0.5"]
  conditions: {{ready: true}}
- addresses: ["127.0.0.6"]
  conditions: {{ready: false}}
- addresses: ["127.0.0.7"]
  conditions: {{ready: false, serving: true, terminating: true}}
"#,
        m4 = svc("member4")
    );
    kubectl(&server, home.path(), &["apply", "-f", "-"], Some(&slice)).await;
    watch
        .expect(Duration::from_secs(5), "member4's ready endpoint", |e| {
            is(e, "MODIFIED", "member4") && e["object"]["addresses"] == json!(["127.0.0.5:4100"])
        })
        .await;

    // Over HTTP: the second endpoint becomes ready.
    let slice_url = format!("{server}/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/{}-abcde", svc("member4"));
    let ready = json!({"endpoints": [
        {"addresses": ["127.0.0.5"], "conditions": {"ready": true}},
        {"addresses": ["127.0.0.6"], "conditions": {"ready": true}},
        {"addresses": ["127.0.0.7"], "conditions": {"ready": false, "serving": true, "terminating": true}}
    ]});
    let resp = client
        .patch(&slice_url)
        .header("Content-Type", "application/merge-patch+json")
        .body(ready.to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "patch slice: {}", resp.text().await.unwrap());
    watch
        .expect(Duration::from_secs(5), "member4's two ready endpoints", |e| {
            is(e, "MODIFIED", "member4") && e["object"]["addresses"] == json!(["127.0.0.5:4100", "127.0.0.6:4100"])
        })
        .await;

    // kubectl delete: the slice, then member1's Service.
    kubectl(&server, home.path(), &["-n", NS, "delete", "endpointslice", &format!("{}-abcde", svc("member4"))], None).await;
    watch
        .expect(Duration::from_secs(5), "member4 without endpoints", |e| {
            is(e, "MODIFIED", "member4") && e["object"]["addresses"] == json!([]) && e["object"]["error"].is_string()
        })
        .await;
    kubectl(&server, home.path(), &["-n", NS, "delete", "service", &svc("member1")], None).await;
    watch
        .expect(Duration::from_secs(5), "member1 back to DNS", |e| is(e, "MODIFIED", "member1") && e["object"]["rule"] == "dnsFallback")
        .await;
    let (_, member1) = get_json(&client, &format!("{api}/admin/v1/estimators/member1")).await;
    assert_eq!(member1["rule"], "dnsFallback");
    assert_eq!(member1["addresses"][0], format!("{}.{NS}.svc.cluster.local:10352", svc("member1")));

    // kubectl get agrees with what the resolver saw.
    let listed = kubectl(&server, home.path(), &["-n", NS, "get", "services", "-o", "name"], None).await;
    assert_eq!(listed.trim(), format!("service/{}\nservice/{}", svc("member2"), svc("member4")));

    http_handle.stop(false).await;
    sim.stop();
}
