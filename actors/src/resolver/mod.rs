//! The `Resolver` actor keeps the scheduler-estimator endpoint of every member
//! cluster, live. It owns the control plane's Services and EndpointSlices as
//! last seen (fed by two `ClusterWatcher`s, one per type, whose sink it is:
//! the same list/watch machinery as the members', and applied through the
//! same [`Reflector`] as the members' objects), the member list, the
//! estimator configuration and the resolved table; it recomputes the
//! affected members on every change, probes their endpoints, and publishes
//! the table through the shared read handle [`Estimators`].
//!
//! The resolution rules are pure and live in `kubefold_engine::estimator`;
//! the probes in [`probe`]. [`resolve_once`] does the same work once, without
//! actors, for `kubefold resolve`.
//!
//! Its parts: [`config`] (the `estimator` section), [`estimators`] (the
//! published table), [`once`] ([`resolve_once`]); the probes are in
//! [`crate::probe`], its messages in [`crate::messages`].

pub mod config;
pub mod estimators;
pub mod once;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, SpawnHandle, WrapFuture};
use kubefold_engine::estimator::{ControlPlane, EndpointSlice, Lookup, Rule, Service};
use kubefold_engine::event::{EventType, StoredEvent};
use kubefold_engine::object::ServedBody;
use kubefold_engine::reflector::Reflector;
use kubefold_engine::resources::{self, ResourceType};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::cluster;
use crate::fleet::{Fleet, Reporting};
pub use crate::messages::{ProbeNow, SetConfig, SetMembers};
use crate::messages::{Ingest, IngestError, Stop};
pub use crate::probe;
use crate::probe::{Probe, Prober};
use crate::watcher::ClusterWatcher;
pub use config::{
    default_port, default_probe_dns_names, default_probe_interval_seconds, default_service_namespace, default_service_prefix, default_timeout,
    EstimatorConfig, EstimatorTls,
};
pub use estimators::{EstimatorEvent, EstimatorEventType, EstimatorStatus, Estimators, EVENTS_CAPACITY};
pub use once::resolve_once;

/// Resource key of the control plane's Services.
pub const SERVICES: &str = "v1/services";
/// Resource key of the control plane's EndpointSlices.
pub const ENDPOINT_SLICES: &str = "discovery.k8s.io/v1/endpointslices";

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
    /// Another resolver writes the status of the fleet's control-plane watchers.
    #[error("the fleet's control-plane status is written by another resolver")]
    ControlPlaneStatusTaken,
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// The status rows of the control-plane watchers are written through it.
    reporting: Reporting,
    watchers: Vec<Addr<ClusterWatcher>>,
    ticker: Option<SpawnHandle>,
    in_flight: HashMap<String, Vec<String>>,
    /// The control plane's Services and EndpointSlices (of every
    /// namespace), as the watchers' batches leave them.
    reflector: Reflector,
    /// The body of every object the reflector holds, by the RV it holds
    /// it at: an object a list no longer has is deleted with it.
    bodies: HashMap<u64, ServedBody>,
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

fn parse_service(event: &StoredEvent) -> Option<Service> {
    match Service::from_json(&event.body.to_bytes(None, 0)) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(namespace = %event.key.namespace, name = %event.key.name, error = %e, "Control-plane Service skipped.");
            None
        }
    }
}

fn parse_slice(event: &StoredEvent) -> Option<EndpointSlice> {
    match EndpointSlice::from_json(&event.body.to_bytes(None, 0)) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(namespace = %event.key.namespace, name = %event.key.name, error = %e, "Control-plane EndpointSlice skipped.");
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
    /// control-plane watchers (under the control plane's name): the
    /// resolver takes its handle for them, once per fleet.
    pub fn new(config: EstimatorConfig, members: Vec<String>, estimators: Arc<Estimators>, fleet: Arc<Fleet>) -> Result<Resolver> {
        config.validate()?;
        let reporting = fleet.take_control_plane_reporting().ok_or(Error::ControlPlaneStatusTaken)?;
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
            reporting,
            watchers: Vec::new(),
            ticker: None,
            in_flight: HashMap::new(),
            reflector: Reflector::default(),
            bodies: HashMap::new(),
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
    /// of the estimator namespace it changed and the clusters whose
    /// addresses changed (to probe). The batch goes through the reflector,
    /// as the members' batches do: a list in parts, a late change after a
    /// deletion, a control plane restored from a backup are handled as for
    /// any member. Only a list's end (or a watch change) recomputes the
    /// endpoints: nothing is resolved from half a list.
    pub fn ingest(&mut self, msg: Ingest) -> (usize, Vec<String>) {
        let Ingest { cluster, resource, batch, .. } = msg;
        let is_service = match resource.as_str() {
            SERVICES => true,
            ENDPOINT_SLICES => false,
            other => {
                warn!(cluster = %cluster, resource = %other, "Unexpected resource type from the control plane ignored.");
                return (0, Vec::new());
            }
        };
        let (ends_list, is_part) = (batch.ends_list(), batch.is_part());
        let bodies = &self.bodies;
        let events = self.reflector.apply(&cluster, &resource, batch, |rv| bodies.get(&rv).cloned());
        let namespace = self.lookup.namespace.clone();
        let mut affected = BTreeSet::new();
        let mut applied = 0;
        for event in &events {
            if event.prev_rv != 0 {
                self.bodies.remove(&event.prev_rv);
            }
            let upsert = event.event_type != EventType::Deleted;
            if upsert {
                self.bodies.insert(event.rv, event.body.clone());
            }
            let (ns, name) = (&event.key.namespace, &event.key.name);
            if *ns != namespace {
                continue;
            }
            applied += 1;
            if is_service {
                affected.extend(self.lookup.cluster_of(ns, name));
                match upsert.then(|| parse_service(event)).flatten() {
                    Some(service) => self.control_plane.upsert_service(service),
                    None => self.control_plane.delete_service(ns, name),
                }
            } else {
                let before = self.control_plane.slice(ns, name).and_then(|s| s.service_name.clone());
                affected.extend(before.and_then(|svc| self.lookup.cluster_of(&namespace, &svc)));
                match upsert.then(|| parse_slice(event)).flatten() {
                    Some(slice) => {
                        affected.extend(slice.service_name.as_ref().and_then(|svc| self.lookup.cluster_of(&namespace, svc)));
                        self.control_plane.upsert_slice(slice);
                    }
                    None => {
                        self.control_plane.delete_slice(ns, name);
                    }
                }
            }
        }
        if is_part {
            return (applied, Vec::new());
        }
        if ends_list {
            if is_service {
                if !self.services_listed {
                    info!(cluster = %cluster, services = applied, "Estimator Services listed.");
                }
                self.services_listed = true;
            } else {
                self.slices_listed = true;
            }
        }
        self.estimators.set_synced(self.synced());
        let changed = self.recompute(if ends_list { None } else { Some(&affected) });
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
            self.reflector = Reflector::default();
            self.bodies.clear();
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
            metrics::counter!("kubefold_estimator_probe_failures_total", "cluster" => crate::cluster_series::label(cluster)).increment(1);
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
            let watcher = ClusterWatcher::new(spec.clone(), resource, ctx.address().recipient(), self.reporting.report(&spec.name), None);
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
    type Result = Result<usize, IngestError>;

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
    type Result = Result<()>;

    fn handle(&mut self, msg: SetConfig, ctx: &mut Self::Context) -> Self::Result {
        let (restart, clusters) = self.set_config(msg.0)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::estimator;
    use kubefold_engine::event::Change;
    use kubefold_engine::index::Index;
    use kubefold_engine::names::NameStyle;
    use kubefold_engine::object::{ingest, Ingested};
    use kubefold_store::{Options, Store};
    use serde_json::json;
    use tokio::sync::broadcast;

    use crate::cluster::ClusterSpec;
    use crate::messages::WatchBatch;

    fn fleet(dir: &std::path::Path) -> Arc<Fleet> {
        let store = Store::open(dir, &Options::default()).unwrap();
        Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::default(), 0)
    }

    /// A Service of the control plane, each with the next resourceVersion,
    /// as the control plane numbers every change.
    fn service_object(cluster: &str, spec: serde_json::Value) -> Ingested {
        static RV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(5);
        let rv = RV.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string();
        let body = json!({
            "metadata": {"name": format!("karmada-scheduler-estimator-{cluster}"), "namespace": "karmada-system", "resourceVersion": rv},
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
        Ingest { cluster: "karmada".into(), resource: resource.into(), batch, checkpoint: "1".into(), scope: None, queued: Default::default() }
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

    /// The control plane's Services listed in parts are resolved once the
    /// list ends, as a list in one batch is; a Service that the next list
    /// (in parts too) no longer has is deleted at its end, and its member
    /// falls back to the DNS names.
    #[test]
    fn lists_in_parts_are_resolved_at_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let estimators = Estimators::new();
        let members = strings(&["member1", "member2"]);
        let mut resolver = Resolver::new(config_with_control_plane(), members, estimators.clone(), fleet(dir.path())).unwrap();
        let m1 = service_object("member1", json!({"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": 4000}]}));
        let m2 = service_object("member2", json!({"type": "ClusterIP", "clusterIP": "127.0.0.42", "ports": [{"port": 10352}]}));
        let rule = |cluster: &str| estimators.get(cluster).map(|row| row.endpoint.rule);

        let (applied, changed) = resolver.ingest(batch(SERVICES, WatchBatch::RelistPart { first: true, objects: vec![m1.clone()] }));
        assert_eq!((applied, changed), (1, Vec::new()));
        assert!(!estimators.control_plane_synced(), "half a list resolves nothing");
        assert_eq!(rule("member1"), None);
        let (_, changed) = resolver.ingest(batch(SERVICES, WatchBatch::RelistEnd(vec![m2])));
        assert_eq!(changed, strings(&["member1", "member2"]));
        assert!(estimators.control_plane_synced());
        assert_eq!((rule("member1"), rule("member2")), (Some(Rule::ExternalName), Some(Rule::ClusterIp)));

        // The next list has member1's Service only.
        resolver.ingest(batch(SERVICES, WatchBatch::RelistPart { first: true, objects: vec![m1] }));
        assert_eq!(rule("member2"), Some(Rule::ClusterIp), "nothing is deleted before the end");
        let (_, changed) = resolver.ingest(batch(SERVICES, WatchBatch::RelistEnd(Vec::new())));
        assert_eq!(changed, strings(&["member2"]));
        assert_eq!((rule("member1"), rule("member2")), (Some(Rule::ExternalName), Some(Rule::DnsFallback)));
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

}
