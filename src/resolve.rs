//! `kubefold resolve`: resolves and probes the scheduler-estimator endpoint of
//! every member once and prints the table, for operators debugging a
//! deployment without starting the server. Also the demo's control plane:
//! the estimator Services in a simulated `karmada` cluster and a small
//! estimator stand-in for member1 to reach.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::resolver::probe::ProbeFailure;
use kubefold_actors::resolver::{resolve_once, EstimatorConfig, EstimatorStatus};
// serde_json through k8s-openapi's re-export: the binary crate does not
// depend on serde_json directly.
use k8s_openapi::serde_json::{json, Value};
use tracing::{debug, info};

use crate::config::Config;

/// Flags of `kubefold resolve`.
#[derive(clap::Args)]
pub struct ResolveArgs {
    /// YAML config file; its `clusters` and `estimator` sections are used.
    #[arg(long)]
    pub config: PathBuf,
    /// Resolve only this member cluster.
    #[arg(long)]
    pub cluster: Option<String>,
}

/// Runs `kubefold resolve` on a runtime of its own.
pub fn run(args: ResolveArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(resolve_command(&args.config, args.cluster))
}

/// Resolves the estimator endpoints of the members of the config at
/// `config_path` (its clusters and static entries, or only `cluster`),
/// probes them, and prints the table.
pub async fn resolve_command(config_path: &Path, cluster: Option<String>) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let members: Vec<String> = match cluster {
        Some(c) => vec![c],
        None => {
            let mut names: Vec<String> = config.clusters.iter().map(|c| c.name.clone()).collect();
            names.extend(config.estimator.static_endpoints.keys().cloned());
            names.sort();
            names.dedup();
            names
        }
    };
    if members.is_empty() {
        anyhow::bail!("config {} names no member cluster; pass --cluster NAME", config_path.display());
    }
    let rows = resolve_once(&config.estimator, &members).await?;
    print!("{}", format_table(&rows));
    Ok(())
}

fn reachable_column(row: &EstimatorStatus) -> &'static str {
    match &row.probe {
        None => "-",
        Some(p) if p.reachable => "yes",
        Some(p) if p.failure == Some(ProbeFailure::Skipped) => "not probed",
        Some(_) => "no",
    }
}

fn latency_column(row: &EstimatorStatus) -> String {
    match row.probe.as_ref().and_then(|p| p.latency_ms) {
        Some(ms) if ms < 10.0 => format!("{ms:.1}ms"),
        Some(ms) => format!("{ms:.0}ms"),
        None => "-".into(),
    }
}

fn error_column(row: &EstimatorStatus) -> String {
    match (&row.endpoint.error, &row.probe) {
        (Some(e), _) => e.clone(),
        (None, Some(p)) if !p.reachable => p.error.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// The table as `kubectl get` prints one: a header, columns padded to
/// their widest cell and separated by three spaces.
pub fn format_table(rows: &[EstimatorStatus]) -> String {
    let header = ["CLUSTER", "RULE", "ADDRESSES", "REACHABLE", "LATENCY", "ERROR"].map(String::from);
    let mut lines = vec![header.to_vec()];
    for row in rows {
        let addresses = if row.endpoint.addresses.is_empty() { "<none>".to_string() } else { row.endpoint.addresses.join(",") };
        lines.push(vec![
            row.endpoint.cluster.clone(),
            row.endpoint.rule.to_string(),
            addresses,
            reachable_column(row).to_string(),
            latency_column(row),
            error_column(row),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for line in lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// A stand-in for a scheduler-estimator: accepts TCP connections on
/// loopback and closes them, enough for a TCP probe to say reachable.
/// Stops when dropped.
#[derive(Debug)]
pub struct StandIn {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandIn {
    /// Listens on `127.0.0.1` on a free port.
    pub fn start() -> std::io::Result<StandIn> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new().name("estimator-stand-in".into()).spawn(move || {
            for connection in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    break;
                }
                if let Ok(stream) = connection {
                    let _ = stream.shutdown(Shutdown::Both);
                }
            }
        })?;
        info!(address = %addr, "Estimator stand-in listening.");
        Ok(StandIn { addr, stop, thread: Some(thread) })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the demo wires: the estimator configuration over the simulated
/// control plane, and the stand-in that must live as long as the demo.
#[derive(Debug)]
pub struct DemoControlPlane {
    /// The `estimator` section for kubefold.
    pub config: EstimatorConfig,
    /// member1's estimator stand-in.
    pub stand_in: StandIn,
}

/// A loopback address where nothing listens: the demo's ClusterIP for
/// member2. kube-proxy would forward a real ClusterIP; here nothing does,
/// so the probe says unreachable (connection refused) at once. Loopback,
/// because the demo must not send traffic off this machine.
pub const DEMO_CLUSTER_IP: &str = "127.0.0.42";

/// POSTs `body` to `path` of the plain-HTTP API server at `base_url`;
/// returns the status code and the response body.
fn post_json(base_url: &str, path: &str, body: &Value) -> anyhow::Result<(u16, String)> {
    let authority = base_url
        .strip_prefix("http://")
        .with_context(|| format!("control plane URL {base_url:?} must be plain http://HOST:PORT"))?
        .trim_end_matches('/');
    let addr: SocketAddr = authority.parse().with_context(|| format!("control plane URL {base_url:?} must be http://IP:PORT"))?;
    let payload = body.to_string();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .with_context(|| format!("POST {path}: not an HTTP response"))?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

fn create(base_url: &str, path: &str, object: &Value) -> anyhow::Result<()> {
    let (code, body) = post_json(base_url, path, object)?;
    match code {
        200 | 201 | 202 => Ok(()),
        409 => {
            debug!(path, "Object exists already.");
            Ok(())
        }
        _ => anyhow::bail!("POST {path}: HTTP {code}: {}", body.chars().take(400).collect::<String>()),
    }
}

/// The estimator Service of `cluster` in the demo namespace.
fn estimator_service(config: &EstimatorConfig, cluster: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": config.lookup().service_name(cluster),
            "namespace": config.service_namespace,
            "labels": {"app": "karmada-scheduler-estimator", "cluster": cluster},
        },
        "spec": spec,
    })
}

/// Fills the simulated control plane at `url` (a started simulator named
/// `karmada`) with the estimator Services of the demo, and starts member1's
/// estimator stand-in:
///
/// - member1: ExternalName `127.0.0.1`, port 10352 with `targetPort` the
///   stand-in's port (probe: reachable);
/// - member2: ClusterIP [`DEMO_CLUSTER_IP`] (probe: unreachable, and says so);
/// - member3 (and any further member): no Service (DNS fallback; DNS names
///   are not probed in the demo, so that it queries no DNS server).
///
/// Blocking; call it before kubefold's actor system starts.
pub fn demo_control_plane(url: &str) -> anyhow::Result<DemoControlPlane> {
    let stand_in = StandIn::start().context("cannot start the estimator stand-in")?;
    let config = EstimatorConfig {
        control_plane: Some(ClusterSpec::from_url("karmada", url)),
        timeout: Duration::from_secs(1),
        probe_interval_seconds: 5,
        probe_dns_names: false,
        ..EstimatorConfig::default()
    };
    let ns = &config.service_namespace;
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    create(url, "/api/v1/namespaces", &namespace)?;
    let services = format!("/api/v1/namespaces/{ns}/services");
    let port = config.port;
    create(
        url,
        &services,
        &estimator_service(
            &config,
            "member1",
            json!({
                "type": "ExternalName",
                "externalName": "127.0.0.1",
                "ports": [{"name": "grpc", "port": port, "protocol": "TCP", "targetPort": stand_in.addr().port()}],
            }),
        ),
    )?;
    create(
        url,
        &services,
        &estimator_service(
            &config,
            "member2",
            json!({
                "type": "ClusterIP",
                "clusterIP": DEMO_CLUSTER_IP,
                "ports": [{"name": "grpc", "port": port, "protocol": "TCP", "targetPort": port}],
            }),
        ),
    )?;
    info!(url, stand_in = %stand_in.addr(), "Demo control plane holds the estimator Services.");
    Ok(DemoControlPlane { config, stand_in })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_actors::resolver::probe::Probe;
    use kubefold_engine::estimator::{EndpointEntry, Rule};

    fn row(cluster: &str, rule: Rule, addresses: &[&str], error: Option<&str>, probe: Option<Probe>) -> EstimatorStatus {
        EstimatorStatus {
            endpoint: EndpointEntry {
                cluster: cluster.into(),
                addresses: addresses.iter().map(|s| s.to_string()).collect(),
                rule,
                error: error.map(String::from),
            },
            probe,
        }
    }

    fn probe(reachable: bool, latency_ms: Option<f64>, error: Option<&str>, failure: Option<ProbeFailure>) -> Option<Probe> {
        Some(Probe { reachable, address: None, latency_ms, error: error.map(String::from), failure, time: "t".into() })
    }

    #[test]
    fn the_table_prints_like_kubectl() {
        let rows = vec![
            row("member1", Rule::ExternalName, &["127.0.0.1:4000"], None, probe(true, Some(0.42), None, None)),
            row("member2", Rule::ClusterIp, &["127.0.0.42:10352"], None, probe(false, None, Some("127.0.0.42:10352: Connection refused (os error 111)"), Some(ProbeFailure::Connect))),
            row("member3", Rule::DnsFallback, &["a.svc.cluster.local:10352", "a.svc:10352"], None, probe(false, None, Some("skipped"), Some(ProbeFailure::Skipped))),
            row("member4", Rule::ExternalName, &[], Some("no service port 10352 found"), None),
        ];
        let expected = "\
CLUSTER   RULE           ADDRESSES                               REACHABLE    LATENCY   ERROR
member1   externalName   127.0.0.1:4000                          yes          0.4ms
member2   clusterIP      127.0.0.42:10352                        no           -         127.0.0.42:10352: Connection refused (os error 111)
member3   dnsFallback    a.svc.cluster.local:10352,a.svc:10352   not probed   -         skipped
member4   externalName   <none>                                  -            -         no service port 10352 found
";
        assert_eq!(format_table(&rows), expected);
    }

    #[test]
    fn the_demo_control_plane_resolves_to_every_rule_and_the_command_prints_it() {
        use kubefold_testdata::{SimConfig, Workload};
        let sim = kubefold_testdata::start(SimConfig { name: "karmada".into(), workload: Workload::Empty, ..SimConfig::default() }).unwrap();
        let demo = demo_control_plane(&sim.url()).unwrap();
        // Idempotent: a second run finds the objects in place.
        let again = demo_control_plane(&sim.url()).unwrap();
        drop(again);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let members = ["member1", "member2", "member3"].map(String::from);
        let rows = runtime.block_on(resolve_once(&demo.config, &members)).unwrap();
        let summary: Vec<(String, String, Vec<String>, Option<bool>, Option<ProbeFailure>)> = rows
            .iter()
            .map(|r| {
                (
                    r.endpoint.cluster.clone(),
                    r.endpoint.rule.to_string(),
                    r.endpoint.addresses.clone(),
                    r.probe.as_ref().map(|p| p.reachable),
                    r.probe.as_ref().and_then(|p| p.failure),
                )
            })
            .collect();
        let dns = |s: &str| format!("karmada-scheduler-estimator-member3.karmada-system.{s}:10352");
        assert_eq!(
            summary,
            vec![
                ("member1".into(), "externalName".into(), vec![demo.stand_in.addr().to_string()], Some(true), None),
                ("member2".into(), "clusterIP".into(), vec![format!("{DEMO_CLUSTER_IP}:10352")], Some(false), Some(ProbeFailure::Connect)),
                ("member3".into(), "dnsFallback".into(), vec![dns("svc.cluster.local"), dns("svc")], Some(false), Some(ProbeFailure::Skipped)),
            ]
        );

        // `kubefold resolve --config FILE --cluster member1` over the same control plane.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubefold.yaml");
        let yaml = format!(
            "clusters: [{{name: member1, url: 'http://127.0.0.1:1'}}]\nestimator:\n  controlPlane: {{name: karmada, url: '{}'}}\n  timeout: 1s\n",
            sim.url()
        );
        std::fs::write(&path, yaml).unwrap();
        runtime.block_on(resolve_command(&path, None)).unwrap();
        runtime.block_on(resolve_command(&path, Some("member2".into()))).unwrap();
        std::fs::write(&path, "estimator: {port: 0}\n").unwrap();
        assert!(runtime.block_on(resolve_command(&path, Some("member1".into()))).is_err());
        sim.stop();
    }

    #[test]
    fn the_stand_in_accepts_and_stops() {
        let stand_in = StandIn::start().unwrap();
        let addr = stand_in.addr();
        assert!(addr.ip().is_loopback());
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).unwrap();
        drop(stand_in);
        assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
    }
}
