//! The simulated member cluster: a single-cluster Kubernetes API server over
//! real HTTP, faithful enough that kubectl, client-go and kube-rs treat it
//! as a cluster. kubefold's tests, demo and benchmarks use it as their
//! member clusters.
//!
//! - [`path`]: request paths (`RequestInfoFactory` rules).
//! - [`discovery`]: `/version`, `/api`, `/apis`, resource lists.
//! - [`store`]: objects, the cluster-wide resource version, history, fan-out.
//! - [`list`]: list options, continue tokens, pages, list bodies.
//! - [`selector`], [`fields`]: label and field selectors and the selectable
//!   fields of each type, the simulator's own (not kubefold's engine), so
//!   that end-to-end tests compare two independent answers.
//! - [`watch`]: watch streams (resume, 410, bookmarks, selectors).
//! - [`ops`]: create, update, patch, delete with the registry's semantics.
//! - [`patch`], [`strategic`], [`apply`]: merge/JSON patch, strategic merge
//!   patch, server-side apply; [`schema`] and [`managed`] support the last two.
//! - [`validation`]: 422 Invalid rules; [`status`]: `Status` errors.
//! - [`exec`]: exec, attach and port-forward over WebSocket ([`shell`], [`tar`]);
//!   [`portforward_spdy`]: port-forward's SPDY/3.1 in WebSocket ([`spdy`]: its framing).
//! - [`controllers`]: scheduler, kubelet, garbage collector, namespace controller;
//!   [`rollout`]: the deployment and replica set controllers.
//! - [`versions`]: HorizontalPodAutoscalers in autoscaling/v2 and v1 over one storage.
//! - [`reviews`]: access reviews, `SelfSubjectReview`, service account tokens, evictions.
//! - [`churn`]: background changes and bursts; [`logs`]: pod logs; [`table`]: Tables.
//! - [`fleet`]: many members in one process (`kubefold sim --clusters N`),
//!   one HTTP server over all their ports, their load pods compact.
//! - [`faults`]: fault injection (latency, errors, resets, offline, 410
//!   storms, corrupt events, clock skew), switchable at runtime.
//! - [`metrics`]: the resource metrics API (`metrics.k8s.io`, `kubectl top`).
//! - [`protobuf`]: protobuf bodies of built-in types (reads and writes).
//! - [`openapi`]: the OpenAPI v2 and v3 documents of the served types.
//! - [`crds`]: CustomResourceDefinitions created at runtime become served types.
//! - [`access`]: authentication, impersonation and authorization from an
//!   `--authz-file`; [`audit`]: the `--audit-log-path` audit log.
//! - [`server`]: the HTTP layer and the request log.
//!
//! With [`SimConfig::crds`] (`kubefold sim --crds`; the demo's members) it
//! also serves a custom resource as kube-apiserver does with a CRD
//! installed: `widgets.example.com/v1` through discovery, list, watch and
//! get, and its CustomResourceDefinition under `apiextensions.k8s.io/v1`.
//! With [`SimConfig::karmada`] (`kubefold sim --karmada`) it serves as a
//! Karmada control plane: Karmada's `Cluster` (`cluster.karmada.io/v1alpha1`)
//! and `ResourceRegistry` (`search.karmada.io/v1alpha1`) with their CRDs and
//! schemas, beside Secrets and every built-in type.
//!
//! Start one with [`start`] (tests, demo) or [`run_cli`] (`kubefold sim`).
//! The simulator's own endpoints, never faulted nor logged:
//!
//! | path | what |
//! | --- | --- |
//! | `GET`, `DELETE /sim/requests` | the request log |
//! | `GET`, `PUT /sim/faults` | the faults in force ([`faults::Faults`], JSON) |
//! | `GET`, `PUT /sim/churn` | `{"perSecond": R}`: the churn rate (0 stops it) |
//! | `POST /sim/restore` | `{"resourceVersion": N}` (optional): a restore of etcd from a backup |
//! | `POST /sim/burst` | `{"pods": N, "configMaps": M}`: N pods and M small ConfigMaps created at once |

pub mod access;
pub mod apply;
pub mod audit;
pub mod churn;
pub mod controllers;
pub mod crds;
pub mod discovery;
pub mod exec;
mod exec_spdy;
pub mod faults;
pub mod fields;
pub mod fleet;
pub mod list;
pub mod logs;
pub mod managed;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod patch;
pub mod path;
pub mod portforward_spdy;
pub mod protobuf;
pub mod reviews;
pub mod rollout;
pub mod schema;
pub mod selector;
pub mod server;
pub mod shell;
pub mod spdy;
pub mod status;
pub mod store;
pub mod strategic;
pub mod table;
pub mod tar;
pub mod validation;
pub mod versions;
pub mod watch;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use actix_web::{web, App};
use bytes::Bytes;
use chrono::Utc;
use kubefold_engine::resources::ResourceType;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use self::faults::{FaultState, Faults};
use self::status::ApiError;
use self::store::{Object, Store};
use crate::workload;

/// The workload a simulator starts with.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workload {
    /// Namespaces, 3 nodes, deployments with replica sets and pods, the
    /// StatefulSet `web` (pods `web-0..2`), services, configmaps, events
    /// ([`workload::demo`]).
    Demo,
    /// A fresh cluster: system namespaces, their `kube-root-ca.crt`, the
    /// `kubernetes` Service ([`workload::empty`]).
    #[default]
    Empty,
}

/// Command-line arguments of `kubefold sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Cluster name; nodes are `{name}-node-{1..3}`.
    #[arg(long, default_value = "member1")]
    pub name: String,
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Initial objects: `demo` or `empty`.
    #[arg(long, value_enum, default_value = "demo")]
    pub workload: Workload,
    /// Extra load pods spread over namespaces load-0..load-9 (labels app=load, shard=s{i%100}).
    #[arg(long, default_value_t = 0)]
    pub pods: usize,
    /// Background changes per second (pod edits, creates, deletes, event bumps).
    #[arg(long, default_value_t = 0.0)]
    pub churn_per_sec: f64,
    /// Retained changes (watch resume and paginated-list window).
    #[arg(long, default_value_t = 10_000)]
    pub history: usize,
    /// Seconds between BOOKMARK events of watches with allowWatchBookmarks.
    #[arg(long, default_value_t = 60)]
    pub bookmark_interval_secs: u64,
    /// `gitVersion` served at /version (kubectl's dispatcher picks its binary from it).
    #[arg(long, default_value = "v1.33.1")]
    pub git_version: String,
    /// Seed of every random choice (names, uids, churn).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Faults in force from the start, as the JSON of `PUT /sim/faults`
    /// (e.g. `{"latencyMs":200,"errorRate":0.1}`).
    #[arg(long, value_parser = parse_faults)]
    pub faults: Option<Faults>,
    /// Also serve the custom resource `widgets.example.com/v1` with its
    /// CustomResourceDefinition (`apiextensions.k8s.io/v1`) and three widgets.
    #[arg(long)]
    pub crds: bool,
    /// Serve as a Karmada control plane: the CustomResourceDefinitions of
    /// `clusters.cluster.karmada.io` and `resourceregistries.search.karmada.io`
    /// with their types, and the namespaces `karmada-system` and `karmada-cluster`.
    #[arg(long)]
    pub karmada: bool,
    /// Authenticate and authorize every request as kube-apiserver would
    /// with this policy (users and their tokens, rules of users, groups,
    /// verbs, resources, namespaces, who may impersonate; YAML, see
    /// [`access`]), and answer TokenReview and SubjectAccessReview from it.
    /// Without it every request is allowed.
    #[arg(long)]
    pub authz_file: Option<std::path::PathBuf>,
    /// Write an `audit.k8s.io/v1` Event per request to this file (JSON
    /// lines: user, impersonatedUser, verb, objectRef, responseStatus).
    #[arg(long)]
    pub audit_log_path: Option<std::path::PathBuf>,
    /// Simulate N member clusters in this one process, `{name-prefix}1` ..
    /// `{name-prefix}N`, each on its own port of --listen's address (port 0:
    /// any free ports; port P: P to P+N-1) with its own resource versions,
    /// watches and discovery; --pods and --churn-per-sec are then totals over
    /// them. Prints one `NAME=URL` line per member once all listen.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub clusters: Option<u32>,
    /// With --clusters: also write the `NAME=URL` lines into this file (whole, once all listen).
    #[arg(long, requires = "clusters")]
    pub urls_file: Option<std::path::PathBuf>,
    /// With --clusters: the members' names are this prefix and a number.
    #[arg(long, default_value = "member")]
    pub name_prefix: String,
    /// With --clusters: HTTP worker threads shared by all members.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

fn parse_faults(text: &str) -> Result<Faults, String> {
    let faults: Faults = serde_json::from_str(text).map_err(|e| e.to_string())?;
    faults.validate()?;
    Ok(faults)
}

/// Configuration of one simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Cluster name; nodes are `{name}-node-{1..3}`.
    pub name: String,
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// Initial objects.
    pub workload: Workload,
    /// Extra load pods (namespaces load-0..load-9).
    pub pods: usize,
    /// Background changes per second; 0 disables churn.
    pub churn_per_sec: f64,
    /// Retained changes for watch resume and paginated lists.
    pub history: usize,
    /// Interval of BOOKMARK events.
    pub bookmark_interval: Duration,
    /// `gitVersion` at /version.
    pub git_version: String,
    /// Seed of every random choice.
    pub seed: u64,
    /// Faults in force from the start (none by default).
    pub faults: Faults,
    /// Also serve the custom resource `widgets.example.com/v1`, its
    /// CustomResourceDefinition and three widgets ([`workload::widgets`]).
    pub crds: bool,
    /// Serve as a Karmada control plane ([`workload::karmada`]).
    pub karmada: bool,
    /// The access policy file ([`access::Policy`]); `None`: every request
    /// is allowed.
    pub authz_file: Option<std::path::PathBuf>,
    /// The audit log file ([`audit`]); `None`: no audit log.
    pub audit_log_path: Option<std::path::PathBuf>,
    /// Keep the load pods compact: each is its index, its body rendered
    /// from the template when served ([`store::LoadPods`]); a pod that is
    /// edited is then stored whole. What lets a fleet of members hold
    /// millions of pods (`kubefold sim --clusters N`).
    pub compact: bool,
    /// One member of a fleet ([`fleet`]): served by the fleet's shared
    /// HTTP server, so the `offline` fault is refused (its port cannot be
    /// closed alone) and requests are not logged.
    pub fleet_member: bool,
    /// Serve HTTPS with this certificate chain and key (PEM), as
    /// kube-apiserver does, offering HTTP/2 through ALPN; plain HTTP when
    /// `None`.
    pub tls: Option<SimTls>,
}

/// The serving certificate of a simulator that serves HTTPS.
#[derive(Debug, Clone)]
pub struct SimTls {
    /// The certificate chain, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
}

impl SimTls {
    /// The rustls configuration serving it.
    fn server_config(&self) -> io::Result<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let invalid = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidInput, format!("simulator TLS: {e}"));
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|e| invalid(&e))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| invalid(&e))?;
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| invalid(&e))
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            name: "member1".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workload: Workload::Empty,
            pods: 0,
            churn_per_sec: 0.0,
            history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            git_version: "v1.33.1".into(),
            seed: 1,
            faults: Faults::default(),
            crds: false,
            karmada: false,
            authz_file: None,
            audit_log_path: None,
            compact: false,
            fleet_member: false,
            tls: None,
        }
    }
}

impl From<SimArgs> for SimConfig {
    fn from(args: SimArgs) -> Self {
        SimConfig {
            name: args.name,
            listen: args.listen,
            workload: args.workload,
            pods: args.pods,
            churn_per_sec: args.churn_per_sec,
            history: args.history,
            bookmark_interval: Duration::from_secs(args.bookmark_interval_secs.max(1)),
            git_version: args.git_version,
            seed: args.seed,
            faults: args.faults.unwrap_or_default(),
            crds: args.crds,
            karmada: args.karmada,
            authz_file: args.authz_file,
            audit_log_path: args.audit_log_path,
            compact: false,
            fleet_member: false,
            tls: None,
        }
    }
}

/// One request the simulator received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Whether it was a watch (`watch=true|1` or a `/watch/` path).
    pub watch: bool,
    /// Milliseconds since the simulator started, when it arrived.
    #[serde(default)]
    pub elapsed_ms: u64,
    /// The body of a write (lossy UTF-8); empty for reads.
    #[serde(default)]
    pub body: String,
}

/// State shared by the HTTP workers and background tasks.
pub struct Shared {
    /// The objects, history and watch fan-out.
    pub store: RwLock<Store>,
    /// The request log.
    pub requests: Arc<Mutex<Vec<RequestRecord>>>,
    /// The configuration.
    pub config: SimConfig,
    /// Cancelled when the simulator stops: ends watches and log streams.
    pub shutdown: CancellationToken,
    /// The faults in force.
    pub faults: FaultState,
    /// The churn rate in changes per second (0: no churn).
    pub churn_rate: tokio::sync::watch::Sender<f64>,
    /// When the simulator started.
    pub started: std::time::Instant,
    /// The access policy, when one is configured.
    pub policy: Option<access::Policy>,
    /// The audit log, when one is configured.
    pub audit: Option<audit::AuditLog>,
}

impl Shared {
    /// The member's clock: now, plus the clock skew fault.
    pub fn now(&self) -> chrono::DateTime<Utc> {
        match self.faults.clock_skew() {
            0 => Utc::now(),
            skew => Utc::now() + chrono::Duration::seconds(skew),
        }
    }

    /// The served resource types (custom resources are added while it runs).
    pub fn catalog(&self) -> Arc<[ResourceType]> {
        self.store.read().map(|s| s.catalog().clone()).unwrap_or_else(|e| e.into_inner().catalog().clone())
    }

    /// The store for reading.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, Store>, ApiError> {
        self.store.read().map_err(|_| ApiError::Internal("store lock poisoned".into()))
    }

    /// The store for writing.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, Store>, ApiError> {
        self.store.write().map_err(|_| ApiError::Internal("store lock poisoned".into()))
    }
}

/// The first resource version of a cluster: a few hundred, different per
/// cluster name (real clusters' versions are unrelated).
fn first_rv(name: &str) -> u64 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    300 + hash % 500
}

/// Builds the initial state directly (not through HTTP): the workload, then
/// the load pods generated and encoded on all cores.
pub fn build_store(config: &SimConfig) -> Store {
    build_store_in(config, catalog(config))
}

/// The resource types a simulator with `config` serves.
pub fn catalog(config: &SimConfig) -> Arc<[ResourceType]> {
    let mut types = kubefold_engine::resources::builtin();
    // Pods are also evicted (`pods/eviction`, as kube-apiserver serves it).
    if let Some(pods) = types.iter_mut().find(|r| r.group.is_empty() && r.plural == "pods") {
        pods.subresources.push("eviction".into());
        // And debugged (`pods/ephemeralcontainers`, `kubectl debug`).
        pods.subresources.push("ephemeralcontainers".into());
    }
    types.extend(workload::member_only_types());
    types.extend(reviews::types());
    if config.crds {
        types.extend(workload::widget_types());
    }
    if config.karmada {
        types.extend(workload::karmada_types(!config.crds));
    }
    types.into()
}

/// [`build_store`] with the catalog given (members of a fleet share one).
pub fn build_store_in(config: &SimConfig, catalog: Arc<[ResourceType]>) -> Store {
    let mut store = Store::new(catalog, config.history, first_rv(&config.name), config.seed);
    let cluster = workload::Cluster {
        name: config.name.clone(),
        seed: config.seed,
        now: Utc::now(),
        kubernetes_version: config.git_version.clone(),
    };
    let mut objects = match config.workload {
        Workload::Demo => workload::demo(&cluster),
        Workload::Empty => workload::empty(&cluster),
    };
    if config.pods > 0 {
        objects.extend(workload::load_namespaces(&cluster));
    }
    if config.crds {
        objects.extend(workload::widgets(&cluster));
    }
    if config.karmada {
        objects.extend(workload::karmada(&cluster));
    }
    for object in objects {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        match store.resource_index_of_kind(&api_version, &kind) {
            Some(index) => store.load(index, object),
            None => tracing::warn!(%api_version, %kind, "Workload object of an unserved type skipped."),
        }
    }
    if config.pods > 0 {
        let started = std::time::Instant::now();
        if config.compact {
            compact_load_pods(&mut store, &cluster, config.pods);
        } else {
            load_pods(&mut store, &cluster, config.pods);
        }
        tracing::info!(cluster = %config.name, pods = config.pods, elapsed_ms = started.elapsed().as_millis() as u64, "Load pods generated.");
    }
    store.finish_load();
    store
}

/// Generates and encodes `count` load pods on all cores, each with its own
/// consecutive resource version, and loads them.
fn load_pods(store: &mut Store, cluster: &workload::Cluster, count: usize) {
    let Some(pods) = store.resource_index("", "v1", "pods") else { return };
    let resource = store.resource(pods).clone();
    let base = store.rv() + 1;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
    let chunk = count.div_ceil(threads).max(1);
    let encoded: Vec<Vec<(String, Object)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let resource = &resource;
                scope.spawn(move || {
                    let start = (t * chunk).min(count);
                    let end = ((t + 1) * chunk).min(count);
                    (start..end)
                        .map(|i| {
                            let rv = base + i as u64;
                            let json = workload::load_pod_json(cluster, i, Some(rv));
                            // The uid is the only random metadata; read it back from the text.
                            let uid = json
                                .split_once("\"uid\":\"")
                                .and_then(|(_, rest)| rest.split_once('"'))
                                .map(|(uid, _)| uid.to_string())
                                .unwrap_or_default();
                            let fields = fields::extract(
                                &resource.group,
                                &resource.plural,
                                &workload::load_pod_selectable(cluster, i),
                            );
                            let key = store::key(Some(&workload::load_namespace(i)), &workload::load_pod_name(i));
                            let object = Object::from_encoded(Bytes::from(json), rv, uid, workload::load_pod_labels(i), fields);
                            (key, object)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    store.load_encoded(pods, encoded.into_iter().flatten());
}

/// Loads `count` load pods as template and index ([`SimConfig::compact`]).
fn compact_load_pods(store: &mut Store, cluster: &workload::Cluster, count: usize) {
    let Some(pods) = store.resource_index("", "v1", "pods") else { return };
    let source = Arc::new(store::LoadPods { cluster: cluster.clone(), resource: store.resource(pods).clone() });
    let base = store.rv() + 1;
    let objects = (0..count).map(|i| {
        let key = store::key(Some(&workload::load_namespace(i)), &workload::load_pod_name(i));
        (key, Object::generated(source.clone(), i as u32, base + i as u64))
    });
    let objects: Vec<_> = objects.collect();
    store.load_encoded(pods, objects);
}

/// A running simulator. Dropping it stops it.
pub struct SimHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SimHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (`https://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.shared.config.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The requests received so far, oldest first (also `GET /sim/requests`;
    /// the last 100,000 at most; `/sim/*` requests are not recorded).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// Clears the request log (also `DELETE /sim/requests`).
    pub fn clear_requests(&self) {
        if let Ok(mut log) = self.shared.requests.lock() {
            log.clear();
        }
    }

    /// Puts `faults` in force, replacing the previous ones (also `PUT
    /// /sim/faults`); `Faults::default()` clears them. Takes effect at once,
    /// for open watches too.
    ///
    /// # Panics
    /// When the faults are out of range ([`Faults::validate`]).
    pub fn set_faults(&self, faults: Faults) {
        if let Err(e) = faults.validate() {
            panic!("invalid faults: {e}");
        }
        tracing::info!(cluster = %self.shared.config.name, faults = %serde_json::to_string(&faults).unwrap_or_default(), "Faults set.");
        let generation = self.shared.faults.replace(faults);
        if !self.shared.faults.wait_offline_applied(generation, Duration::from_secs(10)) {
            tracing::warn!(cluster = %self.shared.config.name, "The offline fault was not acted on within 10 s.");
        }
    }

    /// The faults in force (also `GET /sim/faults`).
    pub fn faults(&self) -> Faults {
        self.shared.faults.faults()
    }

    /// Changes the churn rate (changes per second; 0 stops churn), also
    /// `PUT /sim/churn`.
    pub fn set_churn(&self, per_second: f64) {
        self.shared.churn_rate.send_replace(if per_second.is_finite() { per_second.max(0.0) } else { 0.0 });
    }

    /// The churn rate.
    pub fn churn(&self) -> f64 {
        *self.shared.churn_rate.borrow()
    }

    /// The head resource version.
    pub fn resource_version(&self) -> u64 {
        self.shared.read().map(|s| s.rv()).unwrap_or_default()
    }

    /// A restore of etcd from a backup (also `POST /sim/restore`): every
    /// object keeps existing but is renumbered from `first` (default: the
    /// version the cluster started at), the history is gone and open watches
    /// are dropped, as when kube-apiserver restarts on the restored etcd.
    /// Returns the head before and after.
    pub fn restore(&self, first: Option<u64>) -> (u64, u64) {
        restore(&self.shared, first)
    }

    /// Creates `pods` pods at once (also `POST /sim/burst`), in batches of
    /// 1,000 per store write; returns the head resource version after them.
    pub fn burst(&self, pods: usize) -> u64 {
        churn::burst(&self.shared, pods)
    }

    /// Creates `count` small ConfigMaps at once (also `POST /sim/burst`
    /// with `configMaps`): many cheap events; returns the head resource version.
    pub fn burst_config_maps(&self, count: usize) -> u64 {
        churn::burst_config_maps(&self.shared, count)
    }

    /// Stores `object` as etcd would hold it, with a new resource version
    /// and nothing else changed: no validation, defaulting, managedFields or
    /// controller reaction, as for an object written by another server
    /// version or a fuzzed round-trip fixture. Its type comes from `kind`
    /// and `apiVersion`, its key from `metadata.namespace` and `name`.
    /// Returns the stored object, `None` for a type the simulator lacks.
    pub fn put_object(&self, object: serde_json::Value) -> Option<serde_json::Value> {
        let mut store = self.shared.write().ok()?;
        let resource = store.resource_index_of_kind(object["apiVersion"].as_str()?, object["kind"].as_str()?)?;
        let name = object["metadata"]["name"].as_str()?.to_string();
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        let key = store::key(namespace.as_deref(), &name);
        let change = store.put(resource, &key, object);
        Some(change.object.value())
    }

    /// Stops the server gracefully (open watches end) and joins its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// See [`SimHandle::restore`].
pub(crate) fn restore(shared: &Shared, first: Option<u64>) -> (u64, u64) {
    let (before, after) = match shared.store.write() {
        Ok(mut store) => {
            let before = store.rv();
            (before, store.restore_versions(first.unwrap_or_else(|| first_rv(&shared.config.name))))
        }
        Err(_) => return (0, 0),
    };
    shared.faults.restart_watches();
    tracing::info!(cluster = %shared.config.name, before, after, "Restored from a backup: resource versions reset.");
    (before, after)
}

/// Starts a simulator on its own thread (its own actix System) and returns
/// once it listens. The initial state is built before that.
pub fn start(config: SimConfig) -> io::Result<SimHandle> {
    if let Err(e) = config.faults.validate() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("invalid faults: {e}")));
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<(SocketAddr, Arc<Shared>)>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name(format!("sim-{}", config.name)).spawn(move || {
        let system = actix_web::rt::System::new();
        system.block_on(serve(config, ready_tx, stop_rx));
    })?;
    match ready_rx.recv() {
        Ok(Ok((addr, shared))) => Ok(SimHandle { addr, shared, stop: Some(stop_tx), thread: Some(thread) }),
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(io::Error::other("the simulator thread ended before listening"))
        }
    }
}

/// One run of the HTTP server: bound, running, stoppable.
struct Running {
    handle: actix_web::dev::ServerHandle,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

/// The state of one member around its built `store`, and the receiving end
/// of its controllers' queue.
fn new_shared(
    config: SimConfig,
    mut store: Store,
    started: std::time::Instant,
    policy: Option<access::Policy>,
    audit: Option<audit::AuditLog>,
) -> (Arc<Shared>, tokio::sync::mpsc::UnboundedReceiver<controllers::Task>) {
    let (tasks_tx, tasks_rx) = tokio::sync::mpsc::unbounded_channel();
    store.tasks = Some(tasks_tx);
    let shared = Arc::new(Shared {
        store: RwLock::new(store),
        requests: Arc::new(Mutex::new(Vec::new())),
        faults: FaultState::new(config.faults.clone()),
        churn_rate: tokio::sync::watch::channel(config.churn_per_sec.max(0.0)).0,
        config,
        shutdown: CancellationToken::new(),
        started,
        policy,
        audit,
    });
    (shared, tasks_rx)
}

/// How the simulator serves connections: HTTP/1.1, and HTTP/2 to clients
/// that ask for it. kube-apiserver serves HTTP/2 to every client that
/// negotiates it (over TLS, ALPN `h2`; "kube-apiserver ...
/// `--http2-max-streams-per-connection`",
/// https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/),
/// and client-go uses it, so that one connection carries all of a
/// client's watches. Over plain HTTP the simulator takes HTTP/2 with prior
/// knowledge (RFC 9113 §3.3) on the same port.
pub(crate) fn sim_listen_options() -> kubefold_listen::Options {
    kubefold_listen::Options { http2: true, ..kubefold_listen::Options::default() }
}

/// Binds and runs the HTTP server on `listen`.
fn run_server(shared: &Arc<Shared>, listen: SocketAddr) -> io::Result<(SocketAddr, Running)> {
    let data = web::Data::new(shared.clone());
    let listener = std::net::TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    let builder = kubefold_listen::Server::build().workers(2).disable_signals().shutdown_timeout(2);
    let app = move || App::new().app_data(data.clone()).default_service(web::to(server::dispatch));
    let mut options = sim_listen_options();
    if let Some(tls) = &shared.config.tls {
        options.tls = Some((tls.server_config()?, std::time::Duration::from_secs(10)));
    }
    let server = kubefold_listen::listen(builder, listener, options, app)?.run();
    let handle = server.handle();
    let task = actix_web::rt::spawn(server);
    Ok((addr, Running { handle, task }))
}

async fn serve(
    config: SimConfig,
    ready: std::sync::mpsc::Sender<io::Result<(SocketAddr, Arc<Shared>)>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let started = std::time::Instant::now();
    let policy = match config.authz_file.as_deref().map(access::Policy::read).transpose() {
        Ok(policy) => policy,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let audit = match config.audit_log_path.as_deref().map(audit::AuditLog::open).transpose() {
        Ok(audit) => audit,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let store = build_store(&config);
    let objects: usize = (0..store.catalog().len()).map(|i| store.count(i)).sum();
    let (shared, tasks_rx) = new_shared(config.clone(), store, started, policy, audit);
    let (addr, running) = match run_server(&shared, config.listen) {
        Ok(bound) => bound,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    actix_web::rt::spawn(controllers::run(shared.clone(), tasks_rx));
    actix_web::rt::spawn(churn::run(shared.clone()));
    let rv = shared.read().map(|s| s.rv()).unwrap_or_default();
    tracing::info!(
        cluster = %config.name, %addr, objects, rv,
        startup_ms = started.elapsed().as_millis() as u64,
        "Simulated cluster listening."
    );
    let _ = ready.send(Ok((addr, shared.clone())));
    let running = stay_up(&shared, addr, running, &mut stop).await;
    shared.shutdown.cancel();
    if let Some(running) = running {
        running.handle.stop(true).await;
        let _ = running.task.await;
    }
    tracing::info!(cluster = %config.name, "Simulated cluster stopped.");
}

/// Serves until `stop`, taking the server down and up again as the
/// `offline` fault says: `refuse` stops it (nothing listens on the port),
/// `hang` pauses accepting. Returns the server still running, if any.
async fn stay_up(
    shared: &Arc<Shared>,
    addr: SocketAddr,
    running: Running,
    stop: &mut tokio::sync::oneshot::Receiver<()>,
) -> Option<Running> {
    let name = &shared.config.name;
    let mut running = Some(running);
    let mut paused = false;
    let mut changes = shared.faults.subscribe();
    loop {
        let (offline, generation) = {
            let set = changes.borrow_and_update();
            (set.faults.offline.map(|o| o.mode), set.generation)
        };
        let mut retry = None;
        match offline {
            Some(faults::OfflineMode::Refuse) => {
                if let Some(down) = running.take() {
                    down.handle.stop(false).await;
                    let _ = down.task.await;
                    paused = false;
                    tracing::info!(cluster = %name, "Simulated cluster offline: connections refused.");
                }
            }
            mode => {
                if running.is_none() {
                    match run_server(shared, addr) {
                        Ok((_, up)) => {
                            running = Some(up);
                            tracing::info!(cluster = %name, %addr, "Simulated cluster back online.");
                        }
                        Err(error) => {
                            tracing::warn!(cluster = %name, %addr, %error, "Simulated cluster could not listen again; retrying.");
                            retry = Some(tokio::time::Instant::now() + Duration::from_millis(200));
                        }
                    }
                }
                let hang = mode == Some(faults::OfflineMode::Hang);
                if let Some(up) = &running {
                    if hang && !paused {
                        up.handle.pause().await;
                        tracing::info!(cluster = %name, "Simulated cluster offline: connections hang.");
                    } else if !hang && paused {
                        up.handle.resume().await;
                        tracing::info!(cluster = %name, "Simulated cluster answering again.");
                    }
                    paused = hang;
                }
            }
        }
        if retry.is_none() {
            shared.faults.offline_applied(generation);
        }
        let wake = match (retry, shared.faults.offline_until()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let alarm = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut *stop => return running,
            changed = changes.changed() => {
                if changed.is_err() {
                    return running;
                }
            }
            _ = alarm => {
                if shared.faults.offline_until().is_some_and(|at| at <= tokio::time::Instant::now()) {
                    shared.faults.end_offline();
                }
            }
        }
    }
}

/// Runs `kubefold sim` in the foreground until Ctrl-C or SIGTERM.
pub fn run_cli(args: SimArgs) -> io::Result<()> {
    if args.clusters.is_some() {
        return fleet::run_cli(args);
    }
    let config = SimConfig::from(args);
    let name = config.name.clone();
    let handle = start(config)?;
    println!("kubefold sim: cluster {name} listening on {}", handle.url());
    println!("try: kubectl --server {} get pods -A", handle.url());
    wait_for_signal()?;
    tracing::info!(cluster = %name, "Stopping.");
    handle.stop();
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM.
pub(crate) fn wait_for_signal() -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        #[cfg(unix)]
        {
            let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                result = tokio::signal::ctrl_c() => result?,
                _ = terminate.recv() => {}
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await?;
        io::Result::Ok(())
    })
}
