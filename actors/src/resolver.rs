//! The `Resolver` actor keeps the scheduler-estimator endpoint of every member
//! cluster, live. It owns the control plane's Services and EndpointSlices as
//! last seen (fed by two `ClusterWatcher`s, one per type, whose sink it is:
//! the same list/watch machinery as the members'), the member list, the
//! estimator configuration and the resolved table; it recomputes the
//! affected members on every change, probes their endpoints, and publishes
//! the table through the shared read handle [`Estimators`].
//!
//! The resolution rules are pure and live in `kubefold_engine::estimator`;
//! the probes in [`probe`]. [`resolve_once`] does the same work once, without
//! actors, for `kubefold resolve`.

#[path = "probe.rs"]
pub mod probe;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, SpawnHandle, WrapFuture};
use kube::api::ListParams;
use kube::core::Request as KubeRequest;
use kubefold_engine::estimator::{self, ControlPlane, EndpointEntry, EndpointSlice, Lookup, Rule, Service};
use kubefold_engine::event::Change;
use kubefold_engine::object::Ingested;
use kubefold_engine::resources::{self, ResourceType};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use thiserror::Error;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::cluster::{self, ClusterSpec};
use crate::fleet::Fleet;
use crate::messages::{Ingest, Stop, WatchBatch};
use crate::watcher::ClusterWatcher;
use probe::{Probe, Prober};

/// Resource key of the control plane's Services.
pub const SERVICES: &str = "v1/services";
/// Resource key of the control plane's EndpointSlices.
pub const ENDPOINT_SLICES: &str = "discovery.k8s.io/v1/endpointslices";
/// Changes buffered for slow subscribers of [`Estimators`] before they lag.
pub const EVENTS_CAPACITY: usize = 1024;
/// Bound of each list request of [`resolve_once`].
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the resolver.
#[derive(Debug, Error)]
pub enum Error {
    /// The estimator configuration is invalid.
    #[error("estimator config: {0}")]
    InvalidConfig(String),
    /// The TLS settings of the probes are unusable.
    #[error(transparent)]
    TlsSetupFailed(#[from] probe::Error),
    /// No kube client for the control plane.
    #[error("estimator control plane: {0}")]
    ControlPlaneClientFailed(#[source] cluster::Error),
    /// A list request to the control plane failed.
    #[error("estimator control plane {cluster}: cannot list {path}: {source}")]
    ListFailed {
        /// The control plane's name.
        cluster: String,
        /// The collection path.
        path: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// A list request to the control plane took too long.
    #[error("estimator control plane {cluster}: list {path} timed out after {seconds}s")]
    ListTimedOut {
        /// The control plane's name.
        cluster: String,
        /// The collection path.
        path: String,
        /// The bound.
        seconds: u64,
    },
    /// The control plane answered a list with something else.
    #[error("estimator control plane {cluster}: {path} did not return a list: {source}")]
    InvalidList {
        /// The control plane's name.
        cluster: String,
        /// The collection path.
        path: String,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// TLS of the estimator connections, mirroring karmada-scheduler's
/// `--scheduler-estimator-ca-file`, `--scheduler-estimator-cert-file`,
/// `--scheduler-estimator-key-file` and `--insecure-skip-estimator-verify`.
/// When this section is present, probes make a TLS handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EstimatorTls {
    /// PEM file of the CA(s) that sign the estimators' serving certificates.
    /// Required unless `insecureSkipVerify` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate presented to the estimators (with `keyFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `certFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Skip verifying the estimators' certificates (handshake still required).
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Name to verify the estimators' certificates against, instead of the
    /// host of each address (useful when ExternalName points at an IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// The `estimator` section of the configuration, mirroring karmada-scheduler's
/// `--scheduler-estimator-*` flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EstimatorConfig {
    /// The control-plane cluster holding the estimator Services (a cluster
    /// entry like the members': `name` and `url` or `kubeconfig`). Without
    /// it, members resolve to static entries or to the cluster DNS names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ClusterSpec>,
    /// Namespace of the estimator Services in the control plane.
    #[serde(default = "default_service_namespace")]
    pub service_namespace: String,
    /// Prefix of the estimator Service names: cluster C's is `{prefix}-{C}`.
    #[serde(default = "default_service_prefix")]
    pub service_prefix: String,
    /// The estimators' port (the ServicePort `port` matched in each Service).
    #[serde(default = "default_port")]
    pub port: u16,
    /// Timeout of each probe of one address: seconds (`3`) or a duration (`"3s"`, `"500ms"`).
    #[serde(default = "default_timeout", with = "duration_text")]
    pub timeout: Duration,
    /// Seconds between probes of every endpoint; 0 disables probing.
    #[serde(default = "default_probe_interval_seconds")]
    pub probe_interval_seconds: u64,
    /// Whether endpoints given as DNS names (the DNS fallback, DNS
    /// externalNames) are resolved and probed. Set false where kubefold's host
    /// must not or cannot query DNS for cluster-internal names; such
    /// endpoints are then reported as not probed.
    #[serde(default = "default_probe_dns_names")]
    pub probe_dns_names: bool,
    /// TLS of the estimator connections; probes make a TLS handshake when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EstimatorTls>,
    /// Static endpoints by cluster (`member1: "10.0.1.2:12345"`, or a bare
    /// host that gets `port`); they override every Service.
    #[serde(default, rename = "static")]
    pub static_endpoints: BTreeMap<String, String>,
}

/// `karmada-system`, Karmada's default.
pub fn default_service_namespace() -> String {
    "karmada-system".into()
}

/// `karmada-scheduler-estimator`, Karmada's default.
pub fn default_service_prefix() -> String {
    "karmada-scheduler-estimator".into()
}

/// 10352, Karmada's default estimator port.
pub fn default_port() -> u16 {
    10352
}

/// 3 s, Karmada's default `--scheduler-estimator-timeout`.
pub fn default_timeout() -> Duration {
    Duration::from_secs(3)
}

/// 10 s.
pub fn default_probe_interval_seconds() -> u64 {
    10
}

/// true.
pub fn default_probe_dns_names() -> bool {
    true
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            control_plane: None,
            service_namespace: default_service_namespace(),
            service_prefix: default_service_prefix(),
            port: default_port(),
            timeout: default_timeout(),
            probe_interval_seconds: default_probe_interval_seconds(),
            probe_dns_names: default_probe_dns_names(),
            tls: None,
            static_endpoints: BTreeMap::new(),
        }
    }
}

/// `timeout` as seconds or a duration string; written back as a string.
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Seconds(f64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", value.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        match Text::deserialize(deserializer)? {
            Text::Seconds(s) => Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom),
            Text::Text(t) => kubefold_engine::estimator::parse_duration(&t).map_err(serde::de::Error::custom),
        }
    }
}

impl EstimatorConfig {
    /// Checks what serde cannot (files are read later, by [`EstimatorConfig::prober`]).
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::InvalidConfig(m));
        if self.port == 0 {
            return invalid("port must be between 1 and 65535".into());
        }
        if self.timeout.is_zero() {
            return invalid("timeout must be positive".into());
        }
        if self.service_namespace.is_empty() || self.service_prefix.is_empty() {
            return invalid("serviceNamespace and servicePrefix must not be empty".into());
        }
        if let Some(cp) = &self.control_plane {
            if let Err(e) = cp.check_target() {
                return invalid(format!("controlPlane: {e}"));
            }
        }
        for (cluster, value) in &self.static_endpoints {
            if let Err(e) = estimator::normalize_static(value, self.port) {
                return invalid(format!("static.{cluster}: {e}"));
            }
        }
        if let Some(tls) = &self.tls {
            if tls.ca_file.is_none() && !tls.insecure_skip_verify {
                return invalid("tls: set caFile, or insecureSkipVerify: true".into());
            }
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return invalid("tls: certFile and keyFile go together".into());
            }
        }
        Ok(())
    }

    /// The engine's view of the Service lookup settings.
    pub fn lookup(&self) -> Lookup {
        Lookup {
            namespace: self.service_namespace.clone(),
            prefix: self.service_prefix.clone(),
            port: self.port,
            static_endpoints: self.static_endpoints.clone(),
        }
    }

    /// The prober of these settings (reads the TLS files).
    pub fn prober(&self) -> Result<Prober> {
        Ok(Prober::new(self.timeout, self.probe_dns_names, self.tls.as_ref())?)
    }
}

/// One row of the estimator table: the resolved endpoint and its last probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EstimatorStatus {
    /// Cluster, addresses, rule, error.
    #[serde(flatten)]
    pub endpoint: EndpointEntry,
    /// The last probe of the current addresses; `null` until one finished.
    #[serde(default)]
    pub probe: Option<Probe>,
}

/// The type of a change of the table, as Kubernetes watch events name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EstimatorEventType {
    /// A member's endpoint appeared.
    Added,
    /// A member's endpoint or its probe outcome changed.
    Modified,
    /// A member's endpoint is gone (member removed, control plane lost).
    Deleted,
}

/// One change of the table: `{"type": "MODIFIED", "object": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimatorEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EstimatorEventType,
    /// The row after the change (before it, for `DELETED`).
    pub object: EstimatorStatus,
}

/// The shared read handle of the estimator table: HTTP workers and the
/// scheduler side read it while the resolver alone writes.
#[derive(Debug)]
pub struct Estimators {
    table: RwLock<BTreeMap<String, EstimatorStatus>>,
    events: broadcast::Sender<EstimatorEvent>,
    rotation: Mutex<HashMap<String, usize>>,
    synced: AtomicBool,
}

impl Estimators {
    /// An empty table.
    pub fn new() -> Arc<Estimators> {
        let (events, _) = broadcast::channel(EVENTS_CAPACITY);
        Arc::new(Estimators {
            table: RwLock::new(BTreeMap::new()),
            events,
            rotation: Mutex::new(HashMap::new()),
            synced: AtomicBool::new(false),
        })
    }

    /// Every row, by cluster name.
    pub fn table(&self) -> Vec<EstimatorStatus> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The row of `cluster`.
    pub fn get(&self, cluster: &str) -> Option<EstimatorStatus> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned()
    }

    /// Subscribes to changes.
    pub fn subscribe(&self) -> broadcast::Receiver<EstimatorEvent> {
        self.events.subscribe()
    }

    /// The current table and a subscription to every change after it, with
    /// nothing lost or repeated between them.
    pub fn watch(&self) -> (Vec<EstimatorStatus>, broadcast::Receiver<EstimatorEvent>) {
        // Publishing holds the write lock while sending: under the read lock
        // no event can fall between the copy and the subscription.
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        (table.values().cloned().collect(), self.events.subscribe())
    }

    /// Whether the control plane's Services have been listed (or no control
    /// plane is configured): until then only static entries are known.
    pub fn control_plane_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The address a client should dial next for `cluster`: for a headless
    /// Service the ready endpoints in turn (round-robin), otherwise the
    /// address the last probe reached, or the most preferred one.
    pub fn pick(&self, cluster: &str) -> Option<String> {
        let row = self.get(cluster)?;
        let addresses = &row.endpoint.addresses;
        if addresses.is_empty() {
            return None;
        }
        if row.endpoint.rule == Rule::Headless {
            let mut rotation = self.rotation.lock().unwrap_or_else(|e| e.into_inner());
            let next = rotation.entry(cluster.to_string()).or_insert(0);
            let address = addresses[*next % addresses.len()].clone();
            *next = next.wrapping_add(1);
            return Some(address);
        }
        match &row.probe {
            Some(Probe { reachable: true, address: Some(a), .. }) if addresses.contains(a) => Some(a.clone()),
            _ => addresses.first().cloned(),
        }
    }

    fn publish(&self, event_type: EstimatorEventType, row: EstimatorStatus) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        match event_type {
            EstimatorEventType::Deleted => {
                table.remove(&row.endpoint.cluster);
                self.rotation.lock().unwrap_or_else(|e| e.into_inner()).remove(&row.endpoint.cluster);
            }
            _ => {
                table.insert(row.endpoint.cluster.clone(), row.clone());
            }
        }
        // No subscriber is not an error.
        let _ = self.events.send(EstimatorEvent { event_type, object: row });
    }

    /// Replaces a row without an event (a probe that only refreshed its time).
    fn refresh(&self, row: EstimatorStatus) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        table.insert(row.endpoint.cluster.clone(), row);
    }

    fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }
}

/// Sets the member clusters whose endpoints are kept.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetMembers(pub Vec<String>);

/// Replaces the estimator configuration (restarting the control-plane
/// watchers when the control plane or the namespace changed).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), String>")]
pub struct SetConfig(pub EstimatorConfig);

/// Probes every endpoint now.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ProbeNow;

/// The resolver actor's state.
pub struct Resolver {
    config: EstimatorConfig,
    lookup: Lookup,
    prober: Prober,
    members: BTreeSet<String>,
    control_plane: ControlPlane,
    services_listed: bool,
    slices_listed: bool,
    entries: BTreeMap<String, EstimatorStatus>,
    estimators: Arc<Estimators>,
    fleet: Arc<Fleet>,
    watchers: Vec<Addr<ClusterWatcher>>,
    ticker: Option<SpawnHandle>,
    in_flight: HashMap<String, Vec<String>>,
    /// Parts of lists sent in parts, by (cluster, resource), until their end.
    relist_parts: HashMap<(String, String), Vec<kubefold_engine::object::Ingested>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("members", &self.members)
            .field("entries", &self.entries.len())
            .field("watchers", &self.watchers.len())
            .finish()
    }
}

fn parse_service(ingested: &Ingested) -> Option<Service> {
    match Service::from_json(&ingested.body.to_bytes(None, 0)) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(namespace = %ingested.namespace, name = %ingested.name, error = %e, "Control-plane Service skipped.");
            None
        }
    }
}

fn parse_slice(ingested: &Ingested) -> Option<EndpointSlice> {
    match EndpointSlice::from_json(&ingested.body.to_bytes(None, 0)) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(namespace = %ingested.namespace, name = %ingested.name, error = %e, "Control-plane EndpointSlice skipped.");
            None
        }
    }
}

fn control_plane_resource(key: &str) -> Option<ResourceType> {
    resources::find_by_key(&resources::builtin(), key).cloned()
}

impl Resolver {
    /// A resolver keeping the endpoints of `members` under `config`,
    /// publishing into `estimators`. `fleet` receives the status of the
    /// control-plane watchers (under the control plane's name).
    pub fn new(config: EstimatorConfig, members: Vec<String>, estimators: Arc<Estimators>, fleet: Arc<Fleet>) -> Result<Resolver> {
        config.validate()?;
        let prober = config.prober()?;
        let lookup = config.lookup();
        estimators.set_synced(config.control_plane.is_none());
        Ok(Resolver {
            config,
            lookup,
            prober,
            members: members.into_iter().collect(),
            control_plane: ControlPlane::new(),
            services_listed: false,
            slices_listed: false,
            entries: BTreeMap::new(),
            estimators,
            fleet,
            watchers: Vec::new(),
            ticker: None,
            in_flight: HashMap::new(),
            relist_parts: HashMap::new(),
        })
    }

    /// The current rows.
    pub fn entries(&self) -> impl Iterator<Item = &EstimatorStatus> {
        self.entries.values()
    }

    fn synced(&self) -> bool {
        self.config.control_plane.is_none() || self.services_listed
    }

    fn resolvable(&self, cluster: &str) -> bool {
        self.members.contains(cluster) && (self.synced() || self.lookup.static_endpoints.contains_key(cluster))
    }

    /// Applies a batch of a control-plane watcher; returns how many objects
    /// it held and the clusters whose addresses changed (to probe).
    pub fn ingest(&mut self, msg: Ingest) -> (usize, Vec<String>) {
        let Ingest { cluster, resource, batch, .. } = msg;
        // A list sent in parts is applied whole, at its end.
        let batch = match batch {
            WatchBatch::RelistPart { first, objects } => {
                let parts = self.relist_parts.entry((cluster, resource)).or_default();
                if first {
                    parts.clear();
                }
                parts.extend(objects);
                return (0, Vec::new());
            }
            WatchBatch::RelistEnd(objects) => {
                let mut all = self.relist_parts.remove(&(cluster.clone(), resource.clone())).unwrap_or_default();
                all.extend(objects);
                WatchBatch::Relist(all)
            }
            other => other,
        };
        let is_service = match resource.as_str() {
            SERVICES => true,
            ENDPOINT_SLICES => false,
            other => {
                warn!(cluster = %cluster, resource = %other, "Unexpected resource type from the control plane ignored.");
                return (0, Vec::new());
            }
        };
        let namespace = self.lookup.namespace.clone();
        let mut affected = BTreeSet::new();
        let mut everything = false;
        let mut applied = 0;
        match batch {
            WatchBatch::Relist(objects) => {
                everything = true;
                let ours = objects.iter().filter(|o| o.namespace == namespace);
                if is_service {
                    let services: Vec<Service> = ours.filter_map(parse_service).collect();
                    applied = services.len();
                    self.control_plane.replace_services(services);
                    if !self.services_listed {
                        info!(cluster = %cluster, services = applied, "Estimator Services listed.");
                    }
                    self.services_listed = true;
                } else {
                    let slices: Vec<EndpointSlice> = ours.filter_map(parse_slice).collect();
                    applied = slices.len();
                    self.control_plane.replace_slices(slices);
                    self.slices_listed = true;
                }
            }
            WatchBatch::Changes(changes) => {
                for change in changes {
                    let (upsert, ingested) = match change {
                        Change::Upsert(i) => (true, i),
                        Change::Delete(i) => (false, i),
                    };
                    if ingested.namespace != namespace {
                        continue;
                    }
                    applied += 1;
                    if is_service {
                        affected.extend(self.lookup.cluster_of(&ingested.namespace, &ingested.name));
                        match upsert.then(|| parse_service(&ingested)).flatten() {
                            Some(service) => self.control_plane.upsert_service(service),
                            None => self.control_plane.delete_service(&ingested.namespace, &ingested.name),
                        }
                    } else {
                        let before = self.control_plane.slice(&ingested.namespace, &ingested.name).and_then(|s| s.service_name.clone());
                        affected.extend(before.and_then(|svc| self.lookup.cluster_of(&namespace, &svc)));
                        match upsert.then(|| parse_slice(&ingested)).flatten() {
                            Some(slice) => {
                                affected.extend(slice.service_name.as_ref().and_then(|svc| self.lookup.cluster_of(&namespace, svc)));
                                self.control_plane.upsert_slice(slice);
                            }
                            None => {
                                self.control_plane.delete_slice(&ingested.namespace, &ingested.name);
                            }
                        }
                    }
                }
            }
            WatchBatch::Bookmark | WatchBatch::RelistPart { .. } | WatchBatch::RelistEnd(_) => {}
        }
        self.estimators.set_synced(self.synced());
        let changed = self.recompute(if everything { None } else { Some(&affected) });
        (applied, changed)
    }

    /// Replaces the member list; returns the clusters to probe.
    pub fn set_members(&mut self, members: Vec<String>) -> Vec<String> {
        self.members = members.into_iter().collect();
        self.recompute(None)
    }

    /// Replaces the configuration; returns whether the control-plane
    /// watchers must restart (the caller restarts them) and the clusters to
    /// probe. The current configuration stays when the new one is invalid.
    pub fn set_config(&mut self, config: EstimatorConfig) -> Result<(bool, Vec<String>)> {
        config.validate()?;
        let prober = config.prober()?;
        let restart = config.control_plane != self.config.control_plane || config.service_namespace != self.config.service_namespace;
        self.lookup = config.lookup();
        self.config = config;
        self.prober = prober;
        if restart {
            self.control_plane = ControlPlane::new();
            self.services_listed = false;
            self.slices_listed = false;
        }
        self.estimators.set_synced(self.synced());
        self.recompute(None);
        // Timeout, TLS or DNS settings may have changed: probe everything again.
        Ok((restart, self.entries.keys().cloned().collect()))
    }

    /// Recomputes `only` these clusters (all when `None`), publishes what
    /// changed, and returns the clusters whose addresses changed.
    fn recompute(&mut self, only: Option<&BTreeSet<String>>) -> Vec<String> {
        let gone: Vec<String> = self.entries.keys().filter(|c| !self.resolvable(c)).cloned().collect();
        for cluster in gone {
            if let Some(row) = self.entries.remove(&cluster) {
                info!(cluster = %cluster, "Estimator endpoint dropped.");
                self.estimators.publish(EstimatorEventType::Deleted, row);
            }
        }
        let mut changed = Vec::new();
        let clusters: Vec<String> = match only {
            Some(set) => set.iter().filter(|c| self.resolvable(c)).cloned().collect(),
            None => self.members.iter().filter(|c| self.resolvable(c)).cloned().collect(),
        };
        for cluster in clusters {
            let endpoint = self.control_plane.resolve(&cluster, &self.lookup);
            let event = match self.entries.get_mut(&cluster) {
                Some(row) if row.endpoint == endpoint => continue,
                Some(row) => {
                    if row.endpoint.addresses != endpoint.addresses {
                        row.probe = None;
                        changed.push(cluster.clone());
                    }
                    row.endpoint = endpoint;
                    EstimatorEventType::Modified
                }
                None => {
                    changed.push(cluster.clone());
                    self.entries.insert(cluster.clone(), EstimatorStatus { endpoint, probe: None });
                    EstimatorEventType::Added
                }
            };
            let row = &self.entries[&cluster];
            let addresses = row.endpoint.addresses.join(",");
            match &row.endpoint.error {
                None => info!(cluster = %cluster, rule = %row.endpoint.rule, addresses = %addresses, "Estimator endpoint resolved."),
                Some(error) => warn!(cluster = %cluster, rule = %row.endpoint.rule, error = %error, "Estimator endpoint unresolved."),
            }
            self.estimators.publish(event, row.clone());
        }
        for rule in Rule::ALL {
            let count = self.entries.values().filter(|r| r.endpoint.rule == rule && r.endpoint.error.is_none()).count();
            metrics::gauge!("kubefold_estimator_endpoints", "rule" => rule.as_str()).set(count as f64);
        }
        changed
    }

    /// Records a probe of `addresses` of `cluster` that took `took`; ignored
    /// when the cluster's addresses changed meanwhile.
    pub fn apply_probe(&mut self, cluster: &str, addresses: &[String], probe: Probe, took: Duration) {
        metrics::histogram!("kubefold_estimator_probe_duration_seconds").record(took.as_secs_f64());
        let Some(row) = self.entries.get_mut(cluster) else { return };
        if row.endpoint.addresses != addresses {
            return;
        }
        if probe.failed() {
            metrics::counter!("kubefold_estimator_probe_failures_total", "cluster" => cluster.to_string()).increment(1);
        }
        let outcome_changed = row.probe.as_ref().is_none_or(|old| !old.same_outcome(&probe));
        if outcome_changed {
            match (&probe.reachable, &probe.error) {
                (true, _) => info!(cluster = %cluster, address = ?probe.address, latency_ms = ?probe.latency_ms, "Estimator reachable."),
                (false, Some(error)) if probe.failed() => warn!(cluster = %cluster, error = %error, "Estimator probe failed."),
                _ => debug!(cluster = %cluster, "Estimator not probed."),
            }
        }
        row.probe = Some(probe);
        let row = row.clone();
        if outcome_changed {
            self.estimators.publish(EstimatorEventType::Modified, row);
        } else {
            self.estimators.refresh(row);
        }
    }

    fn probe_clusters(&mut self, clusters: Vec<String>, ctx: &mut Context<Self>) {
        if self.config.probe_interval_seconds == 0 {
            return;
        }
        for cluster in clusters {
            let Some(row) = self.entries.get(&cluster) else { continue };
            let addresses = row.endpoint.addresses.clone();
            if addresses.is_empty() || self.in_flight.get(&cluster) == Some(&addresses) {
                continue;
            }
            self.in_flight.insert(cluster.clone(), addresses.clone());
            let prober = self.prober.clone();
            let started = Instant::now();
            let run = async move {
                let probe = prober.probe(&addresses).await;
                (addresses, probe)
            };
            ctx.spawn(run.into_actor(self).map(move |(addresses, probe), act, _| {
                if act.in_flight.get(&cluster) == Some(&addresses) {
                    act.in_flight.remove(&cluster);
                }
                if let Some(probe) = probe {
                    act.apply_probe(&cluster, &addresses, probe, started.elapsed());
                }
            }));
        }
    }

    fn probe_all(&mut self, ctx: &mut Context<Self>) {
        let clusters = self.entries.keys().cloned().collect();
        self.probe_clusters(clusters, ctx);
    }

    fn start_ticker(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.ticker.take() {
            ctx.cancel_future(handle);
        }
        if self.config.probe_interval_seconds > 0 {
            let every = Duration::from_secs(self.config.probe_interval_seconds);
            self.ticker = Some(ctx.run_interval(every, |act, ctx| act.probe_all(ctx)));
        }
    }

    fn stop_watchers(&mut self) {
        for watcher in self.watchers.drain(..) {
            watcher.do_send(Stop);
        }
    }

    fn start_watchers(&mut self, ctx: &mut Context<Self>) {
        self.stop_watchers();
        let Some(spec) = self.config.control_plane.clone() else { return };
        for key in [SERVICES, ENDPOINT_SLICES] {
            let Some(resource) = control_plane_resource(key) else {
                warn!(resource = key, "Resource type missing from the catalog; not watched.");
                continue;
            };
            let watcher = ClusterWatcher::new(spec.clone(), resource, ctx.address().recipient(), self.fleet.clone(), None);
            self.watchers.push(watcher.start());
        }
        info!(cluster = %spec.name, namespace = %self.lookup.namespace, "Watching the estimator Services of the control plane.");
    }
}

impl Actor for Resolver {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.start_watchers(ctx);
        self.recompute(None);
        self.start_ticker(ctx);
        self.probe_all(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.stop_watchers();
    }
}

impl Handler<Ingest> for Resolver {
    type Result = Result<usize, String>;

    fn handle(&mut self, msg: Ingest, ctx: &mut Self::Context) -> Self::Result {
        let (applied, changed) = self.ingest(msg);
        self.probe_clusters(changed, ctx);
        Ok(applied)
    }
}

impl Handler<SetMembers> for Resolver {
    type Result = ();

    fn handle(&mut self, msg: SetMembers, ctx: &mut Self::Context) {
        let changed = self.set_members(msg.0);
        self.probe_clusters(changed, ctx);
    }
}

impl Handler<SetConfig> for Resolver {
    type Result = Result<(), String>;

    fn handle(&mut self, msg: SetConfig, ctx: &mut Self::Context) -> Self::Result {
        let (restart, clusters) = self.set_config(msg.0).map_err(|e| e.to_string())?;
        if restart {
            self.start_watchers(ctx);
        }
        self.start_ticker(ctx);
        self.in_flight.clear();
        self.probe_clusters(clusters, ctx);
        Ok(())
    }
}

impl Handler<ProbeNow> for Resolver {
    type Result = ();

    fn handle(&mut self, _msg: ProbeNow, ctx: &mut Self::Context) {
        self.probe_all(ctx);
    }
}

impl Handler<Stop> for Resolver {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        use actix::ActorContext;
        ctx.stop();
    }
}

#[derive(Deserialize)]
struct ListPage {
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
    #[serde(default)]
    metadata: Option<ListMeta>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// Lists a collection of the control plane, page by page; items as JSON bytes.
async fn list_all(client: &kube::Client, cluster: &str, path: &str) -> Result<Vec<Vec<u8>>> {
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(500);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let request = KubeRequest::new(path)
            .list(&params)
            .map_err(|e| Error::ListFailed { cluster: cluster.into(), path: path.into(), source: kube::Error::BuildRequest(e) })?;
        let text = tokio::time::timeout(LIST_TIMEOUT, client.request_text(request))
            .await
            .map_err(|_| Error::ListTimedOut { cluster: cluster.into(), path: path.into(), seconds: LIST_TIMEOUT.as_secs() })?
            .map_err(|source| Error::ListFailed { cluster: cluster.into(), path: path.into(), source })?;
        let page: ListPage =
            serde_json::from_str(&text).map_err(|source| Error::InvalidList { cluster: cluster.into(), path: path.into(), source })?;
        items.extend(page.items.unwrap_or_default().into_iter().map(|raw| raw.get().as_bytes().to_vec()));
        match page.metadata.and_then(|m| m.continue_token) {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(items),
        }
    }
}

/// Resolves and probes the endpoints of `members` once: lists the control
/// plane's Services and EndpointSlices in the estimator namespace (when a
/// control plane is configured), applies the rules, probes every endpoint
/// concurrently. For `kubefold resolve`; needs a tokio runtime.
pub async fn resolve_once(config: &EstimatorConfig, members: &[String]) -> Result<Vec<EstimatorStatus>> {
    config.validate()?;
    let prober = config.prober()?;
    let lookup = config.lookup();
    let mut control_plane = ControlPlane::new();
    if let Some(spec) = &config.control_plane {
        let client = spec.client().await.map_err(Error::ControlPlaneClientFailed)?;
        let ns = &lookup.namespace;
        let services_path = format!("/api/v1/namespaces/{ns}/services");
        let mut services = Vec::new();
        for bytes in list_all(&client, &spec.name, &services_path).await? {
            match Service::from_json(&bytes) {
                Ok(s) => services.push(s),
                Err(e) => warn!(cluster = %spec.name, error = %e, "Control-plane Service skipped."),
            }
        }
        control_plane.replace_services(services);
        let slices_path = format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices");
        let mut slices = Vec::new();
        match list_all(&client, &spec.name, &slices_path).await {
            Ok(items) => {
                for bytes in items {
                    match EndpointSlice::from_json(&bytes) {
                        Ok(s) => slices.push(s),
                        Err(e) => warn!(cluster = %spec.name, error = %e, "Control-plane EndpointSlice skipped."),
                    }
                }
            }
            // A control plane that does not serve EndpointSlices has no
            // headless endpoints to offer; every other rule still works.
            Err(Error::ListFailed { source: kube::Error::Api(status), .. }) if status.code == 404 => {
                warn!(cluster = %spec.name, "Control plane serves no EndpointSlices.");
            }
            Err(e) => return Err(e),
        }
        control_plane.replace_slices(slices);
    }
    let clusters: BTreeSet<&String> = members.iter().collect();
    let probes = clusters.into_iter().map(|cluster| {
        let endpoint = control_plane.resolve(cluster, &lookup);
        let prober = &prober;
        async move {
            let started = Instant::now();
            let probe = prober.probe(&endpoint.addresses).await;
            if let Some(p) = &probe {
                metrics::histogram!("kubefold_estimator_probe_duration_seconds").record(started.elapsed().as_secs_f64());
                if p.failed() {
                    metrics::counter!("kubefold_estimator_probe_failures_total", "cluster" => endpoint.cluster.clone()).increment(1);
                }
            }
            EstimatorStatus { endpoint, probe }
        }
    });
    Ok(futures::future::join_all(probes).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::index::Index;
    use kubefold_engine::names::NameStyle;
    use kubefold_engine::object::ingest;
    use kubefold_store::{Options, Store};
    use serde_json::json;

    fn fleet(dir: &std::path::Path) -> Arc<Fleet> {
        let store = Store::open(dir, &Options::default()).unwrap();
        Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::default(), 0)
    }

    fn service_object(cluster: &str, spec: serde_json::Value) -> Ingested {
        let body = json!({
            "metadata": {"name": format!("karmada-scheduler-estimator-{cluster}"), "namespace": "karmada-system", "resourceVersion": "5"},
            "spec": spec,
        });
        ingest(&control_plane_resource(SERVICES).unwrap(), "karmada", body.to_string().as_bytes()).unwrap()
    }

    fn slice_object(name: &str, cluster: &str, addresses: &[(&str, bool)]) -> Ingested {
        let endpoints: Vec<_> = addresses.iter().map(|(a, ready)| json!({"addresses": [a], "conditions": {"ready": ready}})).collect();
        let body = json!({
            "metadata": {"name": name, "namespace": "karmada-system", "labels": {estimator::SERVICE_NAME_LABEL: format!("karmada-scheduler-estimator-{cluster}")}},
            "addressType": "IPv4",
            "ports": [{"name": "grpc", "port": 4100}],
            "endpoints": endpoints,
        });
        ingest(&control_plane_resource(ENDPOINT_SLICES).unwrap(), "karmada", body.to_string().as_bytes()).unwrap()
    }

    fn batch(resource: &str, batch: WatchBatch) -> Ingest {
        Ingest { cluster: "karmada".into(), resource: resource.into(), batch, checkpoint: "1".into(), scope: None }
    }

    fn config_with_control_plane() -> EstimatorConfig {
        EstimatorConfig {
            control_plane: Some(ClusterSpec::from_url("karmada", "http://127.0.0.1:1")),
            static_endpoints: [("member9".to_string(), "127.0.0.1:9".to_string())].into(),
            ..EstimatorConfig::default()
        }
    }

    fn drain(rx: &mut broadcast::Receiver<EstimatorEvent>) -> Vec<(EstimatorEventType, String, Rule, Vec<String>)> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push((e.event_type, e.object.endpoint.cluster, e.object.endpoint.rule, e.object.endpoint.addresses));
        }
        out
    }

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn config_defaults_and_forms_parse() {
        let c: EstimatorConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c, EstimatorConfig::default());
        assert_eq!((c.service_namespace.as_str(), c.service_prefix.as_str(), c.port), ("karmada-system", "karmada-scheduler-estimator", 10352));
        assert_eq!((c.timeout, c.probe_interval_seconds, c.probe_dns_names), (Duration::from_secs(3), 10, true));
        let full = r#"
controlPlane: {name: karmada, url: "http://127.0.0.1:6443"}
serviceNamespace: estimators
servicePrefix: est
port: 7000
timeout: 500ms
probeIntervalSeconds: 5
probeDnsNames: false
tls: {caFile: /etc/ca.pem, certFile: /etc/c.pem, keyFile: /etc/k.pem, serverName: estimator}
static: {member1: "10.0.1.2:12345"}
"#;
        let c: EstimatorConfig = serde_yaml::from_str(full).unwrap();
        c.validate().unwrap();
        assert_eq!(c.timeout, Duration::from_millis(500));
        assert_eq!(c.lookup().service_name("m"), "est-m");
        assert_eq!(c.static_endpoints["member1"], "10.0.1.2:12345");
        assert_eq!(serde_yaml::from_str::<EstimatorConfig>("timeout: 2").unwrap().timeout, Duration::from_secs(2));
        assert_eq!(serde_yaml::from_str::<EstimatorConfig>("timeout: 1.5").unwrap().timeout, Duration::from_millis(1500));
        assert!(serde_yaml::from_str::<EstimatorConfig>("timeout: soon").is_err());
        assert!(serde_yaml::from_str::<EstimatorConfig>("prot: 1").is_err());
        assert!(serde_yaml::from_str::<EstimatorConfig>("tls: {caFiles: x}").is_err());
        let round: EstimatorConfig = serde_yaml::from_str(&serde_yaml::to_string(&c).unwrap()).unwrap();
        assert_eq!(round, c);
    }

    #[test]
    fn invalid_configs_are_refused() {
        let bad = [
            "port: 0",
            "timeout: 0",
            "serviceNamespace: ''",
            "controlPlane: {name: karmada}",
            "static: {member1: 'host:http'}",
            "tls: {}",
            "tls: {insecureSkipVerify: true, certFile: /c.pem}",
        ];
        for text in bad {
            let c: EstimatorConfig = serde_yaml::from_str(text).unwrap();
            assert!(matches!(c.validate(), Err(Error::InvalidConfig(_))), "{text} should be refused");
        }
    }

    #[test]
    fn the_table_follows_services_slices_members_and_config() {
        let dir = tempfile::tempdir().unwrap();
        let estimators = Estimators::new();
        let mut rx = estimators.subscribe();
        let members = strings(&["member1", "member2", "member3", "member9"]);
        let mut resolver = Resolver::new(config_with_control_plane(), members, estimators.clone(), fleet(dir.path())).unwrap();
        // Before the control plane is listed only the static entry is known.
        let changed = resolver.recompute(None);
        assert_eq!(changed, strings(&["member9"]));
        assert!(!estimators.control_plane_synced());
        assert_eq!(drain(&mut rx), vec![(EstimatorEventType::Added, "member9".into(), Rule::Static, strings(&["127.0.0.1:9"]))]);

        let m1 = service_object("member1", json!({"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": 4000}]}));
        let m2 = service_object("member2", json!({"type": "ClusterIP", "clusterIP": "127.0.0.42", "ports": [{"port": 10352}]}));
        let mut elsewhere = service_object("member3", json!({"type": "ExternalName", "externalName": "x", "ports": [{"port": 10352}]}));
        elsewhere.namespace = "default".into();
        let (applied, changed) = resolver.ingest(batch(SERVICES, WatchBatch::Relist(vec![m1.clone(), m2, elsewhere])));
        assert_eq!(applied, 2);
        assert_eq!(changed, strings(&["member1", "member2", "member3"]));
        assert!(estimators.control_plane_synced());
        assert_eq!(
            drain(&mut rx),
            vec![
                (EstimatorEventType::Added, "member1".into(), Rule::ExternalName, strings(&["127.0.0.1:4000"])),
                (EstimatorEventType::Added, "member2".into(), Rule::ClusterIp, strings(&["127.0.0.42:10352"])),
                (
                    EstimatorEventType::Added,
                    "member3".into(),
                    Rule::DnsFallback,
                    strings(&[
                        "karmada-scheduler-estimator-member3.karmada-system.svc.cluster.local:10352",
                        "karmada-scheduler-estimator-member3.karmada-system.svc:10352"
                    ])
                ),
            ]
        );
        let table: Vec<String> = estimators.table().into_iter().map(|r| r.endpoint.cluster).collect();
        assert_eq!(table, strings(&["member1", "member2", "member3", "member9"]));

        // member1's Service edited: only member1 changes.
        let m1b = service_object("member1", json!({"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": 4001}]}));
        let (_, changed) = resolver.ingest(batch(SERVICES, WatchBatch::Changes(vec![Change::Upsert(m1b.clone())])));
        assert_eq!(changed, strings(&["member1"]));
        assert_eq!(drain(&mut rx), vec![(EstimatorEventType::Modified, "member1".into(), Rule::ExternalName, strings(&["127.0.0.1:4001"]))]);
        // The same object again changes nothing.
        let (_, changed) = resolver.ingest(batch(SERVICES, WatchBatch::Changes(vec![Change::Upsert(m1b.clone())])));
        assert!(changed.is_empty());
        assert!(drain(&mut rx).is_empty());

        // member3 becomes headless; its slices arrive, one endpoint turns not ready.
        let m3 = service_object("member3", json!({"clusterIP": "None", "ports": [{"name": "grpc", "port": 10352}]}));
        resolver.ingest(batch(SERVICES, WatchBatch::Changes(vec![Change::Upsert(m3)])));
        assert_eq!(estimators.get("member3").unwrap().endpoint.error.as_deref(), Some("no ready endpoints for service karmada-system/karmada-scheduler-estimator-member3 on port 10352"));
        drain(&mut rx);
        let s = slice_object("member3-abc", "member3", &[("127.0.0.5", true), ("127.0.0.6", true)]);
        let (_, changed) = resolver.ingest(batch(ENDPOINT_SLICES, WatchBatch::Relist(vec![s])));
        assert_eq!(changed, strings(&["member3"]));
        assert_eq!(drain(&mut rx), vec![(EstimatorEventType::Modified, "member3".into(), Rule::Headless, strings(&["127.0.0.5:4100", "127.0.0.6:4100"]))]);
        assert_eq!(estimators.pick("member3").as_deref(), Some("127.0.0.5:4100"));
        assert_eq!(estimators.pick("member3").as_deref(), Some("127.0.0.6:4100"));
        assert_eq!(estimators.pick("member3").as_deref(), Some("127.0.0.5:4100"));
        let s = slice_object("member3-abc", "member3", &[("127.0.0.5", false), ("127.0.0.6", true)]);
        resolver.ingest(batch(ENDPOINT_SLICES, WatchBatch::Changes(vec![Change::Upsert(s.clone())])));
        assert_eq!(estimators.get("member3").unwrap().endpoint.addresses, strings(&["127.0.0.6:4100"]));
        resolver.ingest(batch(ENDPOINT_SLICES, WatchBatch::Changes(vec![Change::Delete(s)])));
        assert_eq!(estimators.get("member3").unwrap().endpoint.addresses, Vec::<String>::new());
        drain(&mut rx);

        // member1's Service deleted after being resolved: DNS fallback.
        resolver.ingest(batch(SERVICES, WatchBatch::Changes(vec![Change::Delete(m1b)])));
        assert_eq!(estimators.get("member1").unwrap().endpoint.rule, Rule::DnsFallback);
        drain(&mut rx);

        // A member removed: DELETED.
        resolver.set_members(strings(&["member1", "member3", "member9"]));
        assert_eq!(drain(&mut rx), vec![(EstimatorEventType::Deleted, "member2".into(), Rule::ClusterIp, strings(&["127.0.0.42:10352"]))]);
        assert!(estimators.get("member2").is_none());

        // Config: a static entry for member1 overrides its Service.
        let mut config = config_with_control_plane();
        config.static_endpoints.insert("member1".into(), "127.0.0.1:4444".into());
        let (restart, _) = resolver.set_config(config).unwrap();
        assert!(!restart);
        assert_eq!(estimators.get("member1").unwrap().endpoint.addresses, strings(&["127.0.0.1:4444"]));
        // An invalid config is refused and the old one stays.
        let bad = EstimatorConfig { port: 0, ..config_with_control_plane() };
        assert!(resolver.set_config(bad).is_err());
        assert_eq!(estimators.get("member1").unwrap().endpoint.rule, Rule::Static);
        // Another control plane: its Services must be listed again.
        let mut other = config_with_control_plane();
        other.control_plane.as_mut().unwrap().url = Some("http://127.0.0.1:2".into());
        let (restart, _) = resolver.set_config(other).unwrap();
        assert!(restart);
        assert!(!estimators.control_plane_synced());
        let left: Vec<String> = estimators.table().into_iter().map(|r| r.endpoint.cluster).collect();
        assert_eq!(left, strings(&["member9"]));
    }

    #[test]
    fn probes_update_the_row_and_publish_only_new_outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let estimators = Estimators::new();
        let config = EstimatorConfig { static_endpoints: [("m".to_string(), "127.0.0.1:7".to_string())].into(), ..EstimatorConfig::default() };
        let mut resolver = Resolver::new(config, strings(&["m", "n"]), estimators.clone(), fleet(dir.path())).unwrap();
        resolver.recompute(None);
        assert_eq!(estimators.get("n").unwrap().endpoint.rule, Rule::DnsFallback);
        let mut rx = estimators.subscribe();
        let probe = |reachable: bool, time: &str| Probe {
            reachable,
            address: Some("127.0.0.1:7".into()),
            latency_ms: reachable.then_some(0.5),
            error: (!reachable).then(|| "127.0.0.1:7: connection refused".to_string()),
            failure: (!reachable).then_some(probe::ProbeFailure::Connect),
            time: time.into(),
        };
        let addresses = strings(&["127.0.0.1:7"]);
        resolver.apply_probe("m", &addresses, probe(false, "t1"), Duration::from_millis(1));
        resolver.apply_probe("m", &addresses, probe(false, "t2"), Duration::from_millis(1));
        resolver.apply_probe("m", &addresses, probe(true, "t3"), Duration::from_millis(1));
        // A stale probe of other addresses is ignored.
        resolver.apply_probe("m", &strings(&["127.0.0.1:8"]), probe(false, "t4"), Duration::from_millis(1));
        let events: Vec<(bool, String)> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| {
                let p = e.object.probe.unwrap();
                (p.reachable, p.time)
            })
            .collect();
        assert_eq!(events, vec![(false, "t1".to_string()), (true, "t3".to_string())]);
        assert_eq!(estimators.get("m").unwrap().probe.unwrap().time, "t3");
        assert_eq!(estimators.pick("m").as_deref(), Some("127.0.0.1:7"));
    }

    #[test]
    fn watch_gives_the_table_then_every_later_change() {
        let estimators = Estimators::new();
        let row = |c: &str| EstimatorStatus {
            endpoint: EndpointEntry { cluster: c.into(), addresses: strings(&["127.0.0.1:1"]), rule: Rule::Static, error: None },
            probe: None,
        };
        estimators.publish(EstimatorEventType::Added, row("a"));
        let (table, mut rx) = estimators.watch();
        estimators.publish(EstimatorEventType::Added, row("b"));
        estimators.publish(EstimatorEventType::Deleted, row("a"));
        assert_eq!(table, vec![row("a")]);
        let first = rx.try_recv().unwrap();
        assert_eq!((first.event_type, first.object.endpoint.cluster.as_str()), (EstimatorEventType::Added, "b"));
        assert_eq!(rx.try_recv().unwrap().event_type, EstimatorEventType::Deleted);
        assert!(rx.try_recv().is_err());
        let line = serde_json::to_value(EstimatorEvent { event_type: EstimatorEventType::Modified, object: row("c") }).unwrap();
        assert_eq!(
            line,
            json!({"type": "MODIFIED", "object": {"cluster": "c", "addresses": ["127.0.0.1:1"], "rule": "static", "probe": null}})
        );
    }

    #[tokio::test]
    async fn resolve_once_without_a_control_plane_probes_static_and_dns_entries() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let config = EstimatorConfig {
            timeout: Duration::from_secs(2),
            probe_dns_names: false,
            static_endpoints: [("up".to_string(), open.clone()), ("down".to_string(), closed.clone())].into(),
            ..EstimatorConfig::default()
        };
        let rows = resolve_once(&config, &strings(&["up", "down", "dns"])).await.unwrap();
        let summary: Vec<(String, Rule, bool, Option<probe::ProbeFailure>)> = rows
            .iter()
            .map(|r| {
                let p = r.probe.as_ref().unwrap();
                (r.endpoint.cluster.clone(), r.endpoint.rule, p.reachable, p.failure)
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("dns".into(), Rule::DnsFallback, false, Some(probe::ProbeFailure::Skipped)),
                ("down".into(), Rule::Static, false, Some(probe::ProbeFailure::Connect)),
                ("up".into(), Rule::Static, true, None),
            ]
        );
    }

    #[tokio::test]
    async fn resolve_once_reports_an_unreachable_control_plane() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config = EstimatorConfig {
            control_plane: Some(ClusterSpec::from_url("karmada", &format!("http://127.0.0.1:{closed}"))),
            ..EstimatorConfig::default()
        };
        let err = resolve_once(&config, &strings(&["member1"])).await.unwrap_err();
        assert!(matches!(err, Error::ListFailed { .. }), "{err}");
        assert!(err.to_string().starts_with("estimator control plane karmada: cannot list /api/v1/namespaces/karmada-system/services: "), "{err}");
    }
}
