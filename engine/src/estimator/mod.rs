//! Scheduler-estimator endpoints: where karmada-scheduler reaches the
//! scheduler-estimator of each member cluster, resolved from the control
//! plane's Services and EndpointSlices without kube-proxy or cluster DNS.
//!
//! Pure and synchronous: [`resolve`] turns one member's Service (if any) and
//! its EndpointSlices into an [`EndpointEntry`]; [`ControlPlane`] holds the
//! Services and EndpointSlices seen and applies every change through one
//! method per type. The resolver actor feeds it and probes the results.
//!
//! The rules (DESIGN.md, "Estimator endpoints"), and which peer each follows:
//!
//! - **Static** entries of the config override everything.
//! - **ExternalName**: host `spec.externalName`, port the integer `targetPort`
//!   of the ServicePort whose `port` is the estimator port. This is Karmada's
//!   rule (`pkg/estimator/client/service.go`, `resolveCluster`), written for
//!   control planes without kube-proxy (karmada-io/karmada#2487).
//!   kube-apiserver's `ResolveCluster` (`k8s.io/apiserver/pkg/util/proxy`)
//!   instead dials `externalName:<requested port>` and ignores `targetPort`;
//!   we follow Karmada, because the `targetPort` is the only place such a
//!   Service can say on which port the estimator behind an LVS virtual IP
//!   listens.
//! - **ClusterIP** (a Service of type ClusterIP with an address, NodePort or
//!   LoadBalancer): `clusterIP:port` of the ServicePort whose `port` is the
//!   estimator port. This is kube-apiserver's `ResolveCluster` rule. Karmada
//!   rejects every type but ExternalName ("unsupported service type"; see the
//!   discussion on karmada-io/karmada#2574) because a virtual IP needs
//!   kube-proxy; we follow kube-apiserver, because where kube-proxy or an LVS
//!   virtual IP does forward the traffic the clusterIP is the right address,
//!   and where it does not the probe says so instead of the scheduler
//!   failing with a type error.
//! - **Headless** (`clusterIP: None`): the ready endpoints of the Service's
//!   EndpointSlices on the matching port, for round-robin. kube-apiserver's
//!   `ResolveCluster` refuses these ("cannot route to service with ClusterIP
//!   None") and Karmada refuses every non-ExternalName type; ours follows the
//!   EndpointSlice API's conditions (see [`Endpoint::is_ready`]).
//! - **No Service**: the cluster DNS names `{svc}.{ns}.svc.cluster.local`,
//!   then `{svc}.{ns}.svc`, on the estimator port. Karmada, when the Service
//!   is not found, dials the bare Service name (`{svc}:{port}`), which needs a
//!   DNS search path in the `{ns}` namespace; the qualified names also work
//!   from other namespaces and from hosts whose resolver knows the cluster
//!   domain.
//!
//! Its parts: [`objects`] (the Services and EndpointSlices read) and
//! [`control_plane`] (what is seen of them).

pub mod control_plane;
pub mod objects;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use control_plane::ControlPlane;
pub use objects::{Endpoint, EndpointSlice, Service, ServicePort, SlicePort, TargetPort};

/// The label an EndpointSlice carries naming its Service
/// (<https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/#ownership>).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The `clusterIP` value of a headless Service.
pub const CLUSTER_IP_NONE: &str = "None";

/// Errors of reading a control-plane object.
#[derive(Debug, Error)]
pub enum Error {
    /// The bytes are not a JSON object of the expected shape.
    #[error("object is not a valid {kind}: {source}")]
    InvalidObject {
        /// `Service` or `EndpointSlice`.
        kind: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// The object has no `metadata.name`.
    #[error("{kind} has no metadata.name")]
    MissingName {
        /// `Service` or `EndpointSlice`.
        kind: &'static str,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The rule that produced an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Rule {
    /// An ExternalName Service: `externalName:targetPort`.
    #[serde(rename = "externalName")]
    ExternalName,
    /// A ClusterIP, NodePort or LoadBalancer Service: `clusterIP:port`.
    #[serde(rename = "clusterIP")]
    ClusterIp,
    /// A headless Service: its ready EndpointSlice endpoints.
    #[serde(rename = "headless")]
    Headless,
    /// No Service: the cluster DNS names of the Service.
    #[serde(rename = "dnsFallback")]
    DnsFallback,
    /// A static entry of the configuration.
    #[serde(rename = "static")]
    Static,
}

impl Rule {
    /// Every rule, in the order the design lists them.
    pub const ALL: [Rule; 5] = [Rule::ExternalName, Rule::ClusterIp, Rule::Headless, Rule::DnsFallback, Rule::Static];

    /// The rule's name as served (`externalName`, `clusterIP`, `headless`,
    /// `dnsFallback`, `static`).
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ExternalName => "externalName",
            Rule::ClusterIp => "clusterIP",
            Rule::Headless => "headless",
            Rule::DnsFallback => "dnsFallback",
            Rule::Static => "static",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resolved estimator endpoint of one member cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointEntry {
    /// The member cluster.
    pub cluster: String,
    /// `host:port` addresses, in order of preference (for [`Rule::Headless`],
    /// the ready endpoints, all equally preferred, handed out round-robin).
    /// Empty when `error` is set.
    pub addresses: Vec<String>,
    /// The rule that produced the addresses (or the error).
    pub rule: Rule,
    /// Why no address could be resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EndpointEntry {
    pub(super) fn ok(cluster: &str, rule: Rule, addresses: Vec<String>) -> EndpointEntry {
        EndpointEntry { cluster: cluster.to_string(), addresses, rule, error: None }
    }

    pub(super) fn failed(cluster: &str, rule: Rule, error: String) -> EndpointEntry {
        EndpointEntry { cluster: cluster.to_string(), addresses: Vec::new(), rule, error: Some(error) }
    }
}

/// Where the estimator Services are and which port the estimators serve,
/// mirroring karmada-scheduler's flags (`--scheduler-estimator-service-namespace`,
/// `--scheduler-estimator-service-prefix`, `--scheduler-estimator-port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Namespace of the estimator Services in the control plane.
    pub namespace: String,
    /// Service name prefix: the Service of cluster C is `{prefix}-{C}`.
    pub prefix: String,
    /// The estimator port (the ServicePort `port` to match).
    pub port: u16,
    /// Static `host:port` (or `host`) entries by cluster; they override Services.
    pub static_endpoints: BTreeMap<String, String>,
}

impl Lookup {
    /// The name of the Service of `cluster`: `{prefix}-{cluster}`.
    pub fn service_name(&self, cluster: &str) -> String {
        format!("{}-{}", self.prefix, cluster)
    }

    /// The member cluster whose Service is `namespace/name`, if it is one of
    /// the estimator Services.
    pub fn cluster_of(&self, namespace: &str, name: &str) -> Option<String> {
        if namespace != self.namespace {
            return None;
        }
        let cluster = name.strip_prefix(&self.prefix)?.strip_prefix('-')?;
        (!cluster.is_empty()).then(|| cluster.to_string())
    }
}


/// `host:port`, with an IPv6 literal bracketed (`[::1]:10352`), as Go's
/// `net.JoinHostPort` writes it.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn valid_port(port: i64) -> bool {
    (1..=65535).contains(&port)
}

/// Normalises a static entry to `host:port`: `host:port` and `[v6]:port` are
/// kept, a bare host or IP (v4 or v6) gets the estimator port.
pub fn normalize_static(value: &str, default_port: u16) -> std::result::Result<String, String> {
    let value = value.trim();
    let invalid = || format!("static endpoint {value:?} is not host:port");
    if value.is_empty() {
        return Err(invalid());
    }
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return if addr.port() == 0 { Err(invalid()) } else { Ok(addr.to_string()) };
    }
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port).to_string());
    }
    if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(|ip| SocketAddr::new(IpAddr::V6(ip), default_port).to_string())
            .map_err(|_| invalid());
    }
    match value.split_once(':') {
        None => Ok(join_host_port(value, i64::from(default_port))),
        Some((host, port)) => match port.parse::<i64>() {
            Ok(p) if valid_port(p) && !host.is_empty() && !host.contains(':') => Ok(join_host_port(host, p)),
            _ => Err(invalid()),
        },
    }
}

/// Resolves the estimator endpoint of `cluster` from its Service (if the
/// control plane has one) and the EndpointSlices of the control plane
/// (those of other Services are ignored). See the module docs for the rules.
pub fn resolve(cluster: &str, lookup: &Lookup, service: Option<&Service>, slices: &[&EndpointSlice]) -> EndpointEntry {
    if let Some(value) = lookup.static_endpoints.get(cluster) {
        return match normalize_static(value, lookup.port) {
            Ok(address) => EndpointEntry::ok(cluster, Rule::Static, vec![address]),
            Err(e) => EndpointEntry::failed(cluster, Rule::Static, e),
        };
    }
    let Some(service) = service else {
        let (svc, ns, port) = (lookup.service_name(cluster), &lookup.namespace, lookup.port);
        return EndpointEntry::ok(
            cluster,
            Rule::DnsFallback,
            vec![format!("{svc}.{ns}.svc.cluster.local:{port}"), format!("{svc}.{ns}.svc:{port}")],
        );
    };
    match service.service_type.as_str() {
        "ExternalName" => external_name(cluster, lookup.port, service),
        _ if service.cluster_ip == CLUSTER_IP_NONE => headless(cluster, lookup.port, service, slices),
        "" | "ClusterIP" | "NodePort" | "LoadBalancer" => cluster_ip(cluster, lookup.port, service),
        other => EndpointEntry::failed(cluster, Rule::ClusterIp, format!("unsupported service type {other:?}")),
    }
}

fn no_port(port: u16) -> String {
    format!("no service port {port} found")
}

/// Karmada's rule: `externalName` and the integer `targetPort`.
fn external_name(cluster: &str, port: u16, service: &Service) -> EndpointEntry {
    let fail = |e: String| EndpointEntry::failed(cluster, Rule::ExternalName, e);
    let host = service.external_name.trim();
    if host.is_empty() {
        return fail("service of type ExternalName has no externalName".into());
    }
    let Some(service_port) = service.port(port) else {
        return fail(no_port(port));
    };
    let target = match &service_port.target_port {
        // Unset or 0: the API server defaults targetPort to port ("by default
        // and for convenience, the targetPort is set to the same value as the
        // port field", https://kubernetes.io/docs/concepts/services-networking/service/#defining-a-service).
        None | Some(TargetPort::Number(0)) => service_port.port,
        Some(TargetPort::Number(n)) if valid_port(*n) => *n,
        Some(TargetPort::Number(n)) => return fail(format!("targetPort {n} of service port {port} is out of range")),
        Some(TargetPort::Name(name)) => {
            return fail(format!(
                "targetPort {name:?} of service port {port} is a name; an ExternalName service needs an integer targetPort"
            ))
        }
    };
    EndpointEntry::ok(cluster, Rule::ExternalName, vec![join_host_port(host, target)])
}

/// kube-apiserver's `ResolveCluster` rule: `clusterIP:port`.
fn cluster_ip(cluster: &str, port: u16, service: &Service) -> EndpointEntry {
    let fail = |e: String| EndpointEntry::failed(cluster, Rule::ClusterIp, e);
    let Some(service_port) = service.port(port) else {
        return fail(no_port(port));
    };
    let mut ips: Vec<&str> = Vec::new();
    for ip in std::iter::once(service.cluster_ip.as_str()).chain(service.cluster_ips.iter().map(String::as_str)) {
        if !ip.is_empty() && ip != CLUSTER_IP_NONE && !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if ips.is_empty() {
        return fail("service has no clusterIP".into());
    }
    EndpointEntry::ok(cluster, Rule::ClusterIp, ips.into_iter().map(|ip| join_host_port(ip, service_port.port)).collect())
}

/// Ready endpoints of the Service's EndpointSlices on the matching port.
///
/// A slice's port is matched by the name of the ServicePort whose `port` is
/// the estimator port (the EndpointSlice controller names slice ports after
/// ServicePorts, and kube-apiserver's `ResolveEndpoints` matches by that
/// name); failing that, by number: the integer `targetPort` of that
/// ServicePort, or the estimator port itself when the Service has no such
/// port (slices managed by hand for a Service without ports).
fn headless(cluster: &str, port: u16, service: &Service, slices: &[&EndpointSlice]) -> EndpointEntry {
    let service_port = service.port(port);
    let number = match service_port.and_then(|p| p.target_port.as_ref()) {
        Some(TargetPort::Number(n)) if valid_port(*n) => *n,
        _ => i64::from(port),
    };
    let mut ours: Vec<&&EndpointSlice> = slices
        .iter()
        .filter(|s| s.namespace == service.namespace && s.service_name.as_deref() == Some(service.name.as_str()))
        .collect();
    ours.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen = BTreeSet::new();
    let mut addresses = Vec::new();
    let mut port_found = false;
    for slice in ours {
        let by_name = service_port.and_then(|sp| slice.ports.iter().find(|p| p.name == sp.name));
        let by_number = || slice.ports.iter().find(|p| p.port == Some(number));
        let Some(slice_port) = by_name.or_else(by_number) else { continue };
        port_found = true;
        // A nil port means "all ports" (EndpointSlice API): use the number.
        let target = slice_port.port.unwrap_or(number);
        if !valid_port(target) {
            continue;
        }
        for endpoint in slice.endpoints.iter().filter(|e| e.is_ready()) {
            // "These are all assumed to be fungible and clients may choose to
            // only use the first element." (EndpointSlice API, endpoints.addresses)
            let Some(address) = endpoint.addresses.first() else { continue };
            let joined = join_host_port(address, target);
            if seen.insert(joined.clone()) {
                addresses.push(joined);
            }
        }
    }
    if service_port.is_none() && !port_found {
        return EndpointEntry::failed(cluster, Rule::Headless, no_port(port));
    }
    if addresses.is_empty() {
        return EndpointEntry::failed(
            cluster,
            Rule::Headless,
            format!("no ready endpoints for service {}/{} on port {port}", service.namespace, service.name),
        );
    }
    EndpointEntry::ok(cluster, Rule::Headless, addresses)
}


/// Parses a timeout: a number of seconds (`3`, `2.5`) or a Go-style duration
/// (`3s`, `500ms`, `1m30s`; units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`).
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    let invalid = || format!("invalid duration {text:?}: expected seconds or a duration like \"3s\" or \"500ms\"");
    if text.is_empty() {
        return Err(invalid());
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| invalid());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(invalid)?;
        if digits == 0 {
            return Err(invalid());
        }
        let value: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const P: u16 = 10352;

    pub(super) fn lookup() -> Lookup {
        Lookup {
            namespace: "karmada-system".into(),
            prefix: "karmada-scheduler-estimator".into(),
            port: P,
            static_endpoints: BTreeMap::new(),
        }
    }

    pub(super) fn service(spec: serde_json::Value) -> Service {
        let object = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "karmada-scheduler-estimator-member1", "namespace": "karmada-system"},
            "spec": spec,
        });
        Service::from_json(object.to_string().as_bytes()).unwrap()
    }

    pub(super) fn slice(name: &str, service: &str, ports: serde_json::Value, endpoints: serde_json::Value) -> EndpointSlice {
        let object = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "karmada-system", "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        });
        EndpointSlice::from_json(object.to_string().as_bytes()).unwrap()
    }

    pub(super) const SVC: &str = "karmada-scheduler-estimator-member1";

    pub(super) fn ok(rule: Rule, addresses: &[&str]) -> EndpointEntry {
        EndpointEntry::ok("member1", rule, addresses.iter().map(|s| s.to_string()).collect())
    }

    pub(super) fn failed(rule: Rule, error: &str) -> EndpointEntry {
        EndpointEntry::failed("member1", rule, error.to_string())
    }

    #[test]
    fn every_rule_resolves_as_designed() {
        let headless_slices = vec![
            slice(
                "b-slice",
                SVC,
                json!([{"name": "grpc", "port": 10353, "protocol": "TCP"}]),
                json!([
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.4", "10.0.0.44"], "conditions": {}},
                ]),
            ),
            slice(
                "a-slice",
                SVC,
                json!([{"name": "grpc", "port": 10353}]),
                json!([
                    {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": false}},
                    {"addresses": ["10.0.0.5"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                    {"addresses": ["10.0.0.6"], "conditions": {"ready": true, "terminating": true}},
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": true}},
                ]),
            ),
            // Another Service's slice is ignored.
            slice("other", "karmada-scheduler-estimator-member2", json!([{"name": "grpc", "port": 10353}]), json!([{"addresses": ["10.9.9.9"]}])),
        ];
        let cases: Vec<(&str, Option<Service>, Vec<EndpointSlice>, EndpointEntry)> = vec![
            (
                "externalName with an IPv4 address",
                Some(service(json!({"type": "ExternalName", "externalName": "172.16.0.10", "ports": [{"port": 10352, "targetPort": 32001}]}))),
                vec![],
                ok(Rule::ExternalName, &["172.16.0.10:32001"]),
            ),
            (
                "externalName with a DNS name; the port is matched by number among several",
                Some(service(json!({"type": "ExternalName", "externalName": "estimator.member1.example.com", "ports": [
                    {"name": "metrics", "port": 8080, "targetPort": 9000},
                    {"name": "grpc", "port": 10352, "targetPort": 10352}
                ]}))),
                vec![],
                ok(Rule::ExternalName, &["estimator.member1.example.com:10352"]),
            ),
            (
                "externalName with an IPv6 address is bracketed",
                Some(service(json!({"type": "ExternalName", "externalName": "fd00::10", "ports": [{"port": 10352, "targetPort": 32001}]}))),
                vec![],
                ok(Rule::ExternalName, &["[fd00::10]:32001"]),
            ),
            (
                "externalName without targetPort uses the port (API server defaulting)",
                Some(service(json!({"type": "ExternalName", "externalName": "10.1.1.1", "ports": [{"port": 10352}]}))),
                vec![],
                ok(Rule::ExternalName, &["10.1.1.1:10352"]),
            ),
            (
                "externalName without the estimator port",
                Some(service(json!({"type": "ExternalName", "externalName": "10.1.1.1", "ports": [{"port": 8080, "targetPort": 10352}]}))),
                vec![],
                failed(Rule::ExternalName, "no service port 10352 found"),
            ),
            (
                "externalName with a named targetPort",
                Some(service(json!({"type": "ExternalName", "externalName": "10.1.1.1", "ports": [{"port": 10352, "targetPort": "estimator"}]}))),
                vec![],
                failed(
                    Rule::ExternalName,
                    "targetPort \"estimator\" of service port 10352 is a name; an ExternalName service needs an integer targetPort",
                ),
            ),
            (
                "externalName without externalName",
                Some(service(json!({"type": "ExternalName", "ports": [{"port": 10352}]}))),
                vec![],
                failed(Rule::ExternalName, "service of type ExternalName has no externalName"),
            ),
            (
                "clusterIP uses the service port, not the targetPort",
                Some(service(json!({"type": "ClusterIP", "clusterIP": "10.96.0.42", "clusterIPs": ["10.96.0.42"], "ports": [{"port": 10352, "targetPort": 32001}]}))),
                vec![],
                ok(Rule::ClusterIp, &["10.96.0.42:10352"]),
            ),
            (
                "type unset means ClusterIP; dual-stack lists both addresses, primary first",
                Some(service(json!({"clusterIP": "10.96.0.42", "clusterIPs": ["10.96.0.42", "fd00:96::42"], "ports": [{"port": 10352}]}))),
                vec![],
                ok(Rule::ClusterIp, &["10.96.0.42:10352", "[fd00:96::42]:10352"]),
            ),
            (
                "NodePort and LoadBalancer resolve to the clusterIP",
                Some(service(json!({"type": "NodePort", "clusterIP": "10.96.0.7", "ports": [{"port": 10352, "nodePort": 31000}]}))),
                vec![],
                ok(Rule::ClusterIp, &["10.96.0.7:10352"]),
            ),
            (
                "LoadBalancer",
                Some(service(json!({"type": "LoadBalancer", "clusterIP": "10.96.0.8", "ports": [{"port": 10352}]}))),
                vec![],
                ok(Rule::ClusterIp, &["10.96.0.8:10352"]),
            ),
            (
                "clusterIP without the estimator port",
                Some(service(json!({"type": "ClusterIP", "clusterIP": "10.96.0.42", "ports": [{"port": 443}]}))),
                vec![],
                failed(Rule::ClusterIp, "no service port 10352 found"),
            ),
            (
                "clusterIP not allocated",
                Some(service(json!({"type": "ClusterIP", "ports": [{"port": 10352}]}))),
                vec![],
                failed(Rule::ClusterIp, "service has no clusterIP"),
            ),
            (
                "headless: ready endpoints only (not ready, terminating excluded), slices by name, duplicates once",
                Some(service(json!({"clusterIP": "None", "ports": [{"name": "grpc", "port": 10352, "targetPort": 10353}]}))),
                headless_slices.clone(),
                ok(Rule::Headless, &["10.0.0.1:10353", "10.0.0.3:10353", "10.0.0.4:10353"]),
            ),
            (
                "headless: slice ports matched by number when names differ",
                Some(service(json!({"clusterIP": "None", "ports": [{"name": "grpc", "port": 10352, "targetPort": 10353}]}))),
                vec![slice("s", SVC, json!([{"name": "x", "port": 10353}]), json!([{"addresses": ["10.0.0.9"]}]))],
                ok(Rule::Headless, &["10.0.0.9:10353"]),
            ),
            (
                "headless: a Service without ports matches slice ports numbered like the estimator port",
                Some(service(json!({"clusterIP": "None"}))),
                vec![slice("s", SVC, json!([{"port": 10352}]), json!([{"addresses": ["fd00::9"], "conditions": {"ready": true}}]))],
                ok(Rule::Headless, &["[fd00::9]:10352"]),
            ),
            (
                "headless: no port anywhere",
                Some(service(json!({"clusterIP": "None", "ports": [{"port": 80}]}))),
                vec![slice("s", SVC, json!([{"port": 80}]), json!([{"addresses": ["10.0.0.9"]}]))],
                failed(Rule::Headless, "no service port 10352 found"),
            ),
            (
                "headless: every endpoint not ready or terminating",
                Some(service(json!({"clusterIP": "None", "ports": [{"port": 10352}]}))),
                vec![slice(
                    "s",
                    SVC,
                    json!([{"port": 10352}]),
                    json!([
                        {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
                        {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}}
                    ]),
                )],
                failed(Rule::Headless, "no ready endpoints for service karmada-system/karmada-scheduler-estimator-member1 on port 10352"),
            ),
            (
                "headless without slices",
                Some(service(json!({"clusterIP": "None", "ports": [{"port": 10352}]}))),
                vec![],
                failed(Rule::Headless, "no ready endpoints for service karmada-system/karmada-scheduler-estimator-member1 on port 10352"),
            ),
            (
                "no Service: cluster DNS names",
                None,
                vec![],
                ok(
                    Rule::DnsFallback,
                    &[
                        "karmada-scheduler-estimator-member1.karmada-system.svc.cluster.local:10352",
                        "karmada-scheduler-estimator-member1.karmada-system.svc:10352",
                    ],
                ),
            ),
            (
                "unknown service type",
                Some(service(json!({"type": "Mystery", "clusterIP": "10.0.0.1", "ports": [{"port": 10352}]}))),
                vec![],
                failed(Rule::ClusterIp, "unsupported service type \"Mystery\""),
            ),
        ];
        for (name, svc, slices, want) in cases {
            let refs: Vec<&EndpointSlice> = slices.iter().collect();
            assert_eq!(resolve("member1", &lookup(), svc.as_ref(), &refs), want, "case: {name}");
        }
    }

    #[test]
    fn static_entries_override_everything() {
        let svc = service(json!({"type": "ExternalName", "externalName": "10.1.1.1", "ports": [{"port": 10352, "targetPort": 1}]}));
        let cases: Vec<(&str, EndpointEntry)> = vec![
            ("10.0.1.2:12345", ok(Rule::Static, &["10.0.1.2:12345"])),
            ("estimator.example.com:9000", ok(Rule::Static, &["estimator.example.com:9000"])),
            ("estimator.example.com", ok(Rule::Static, &["estimator.example.com:10352"])),
            ("10.0.1.2", ok(Rule::Static, &["10.0.1.2:10352"])),
            ("::1", ok(Rule::Static, &["[::1]:10352"])),
            ("[::1]", ok(Rule::Static, &["[::1]:10352"])),
            ("[fd00::1]:7000", ok(Rule::Static, &["[fd00::1]:7000"])),
            ("host:0", failed(Rule::Static, "static endpoint \"host:0\" is not host:port")),
            ("host:http", failed(Rule::Static, "static endpoint \"host:http\" is not host:port")),
            ("", failed(Rule::Static, "static endpoint \"\" is not host:port")),
        ];
        for (value, want) in cases {
            let mut l = lookup();
            l.static_endpoints.insert("member1".into(), value.into());
            assert_eq!(resolve("member1", &l, Some(&svc), &[]), want, "static {value:?}");
            assert_eq!(resolve("member1", &l, None, &[]), want, "static {value:?} without a Service");
        }
    }

    #[test]
    fn estimator_services_map_to_clusters() {
        let l = lookup();
        assert_eq!(l.service_name("member1"), "karmada-scheduler-estimator-member1");
        assert_eq!(l.cluster_of("karmada-system", "karmada-scheduler-estimator-member1").as_deref(), Some("member1"));
        assert_eq!(l.cluster_of("karmada-system", "karmada-scheduler-estimator-a-b").as_deref(), Some("a-b"));
        assert_eq!(l.cluster_of("default", "karmada-scheduler-estimator-member1"), None);
        assert_eq!(l.cluster_of("karmada-system", "karmada-scheduler-estimator"), None);
        assert_eq!(l.cluster_of("karmada-system", "karmada-scheduler-estimator-"), None);
        assert_eq!(l.cluster_of("karmada-system", "karmada-scheduler-estimatorx-m"), None);
    }

    #[test]
    fn rules_serialise_with_their_served_names() {
        let entry = ok(Rule::ClusterIp, &["10.96.0.1:10352"]);
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            json!({"cluster": "member1", "addresses": ["10.96.0.1:10352"], "rule": "clusterIP"})
        );
        let names: Vec<String> = Rule::ALL.iter().map(|r| serde_json::to_value(r).unwrap().as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["externalName", "clusterIP", "headless", "dnsFallback", "static"]);
        for rule in Rule::ALL {
            assert_eq!(serde_json::to_value(rule).unwrap(), json!(rule.as_str()));
        }
        let failed = failed(Rule::ExternalName, "no service port 10352 found");
        assert_eq!(serde_json::to_value(&failed).unwrap()["error"], "no service port 10352 found");
    }


    #[test]
    fn durations_parse_as_seconds_or_go_durations() {
        let ok = [
            ("3", 3_000),
            ("2.5", 2_500),
            ("3s", 3_000),
            ("500ms", 500),
            ("1m30s", 90_000),
            ("1h", 3_600_000),
            ("1.5s", 1_500),
        ];
        for (text, ms) in ok {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
        }
        for bad in ["", "s", "3x", "-1", "3 s", "ms3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
