//! The `Supervisor` actor owns the set of member clusters, the resource
//! selection, and the watcher actors: it starts one `ClusterWatcher` per
//! (cluster, selected resource type) on a pool of arbiters (threads), so
//! that decoding a large list never stalls the aggregator or the HTTP
//! workers, and stops them when a cluster goes or the selection drops the
//! type there. Watchers the selection keeps are never restarted by a change
//! of other types.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::{Actor, Addr, Arbiter, ArbiterHandle, Context, Handler, ResponseFuture};
use kubefold_engine::resources::TypeRef;
use kubefold_engine::selection::{NamespaceFilter, ResourceSelection};
use thiserror::Error;
use tracing::info;

use crate::aggregator::Aggregator;
use crate::cluster::ClusterSpec;
use crate::fleet::{Fleet, Supervision, WatchScope};
pub use crate::messages::{AddCluster, DropCluster, ForgetCluster, KnowCluster, ListClusters, ReleaseCluster, Relist, SetSelection, TakeCluster};
use crate::messages::{Prune, RemoveCluster, ScopeTicket, Stop};
use crate::watcher::{ClusterWatcher, WatchTarget};

/// Errors of the supervisor's requests.
#[derive(Debug, Error)]
pub enum Error {
    /// The aggregator did not take the request (it stopped, or its mailbox is closed).
    #[error(transparent)]
    AggregatorUnavailable(#[from] actix::MailboxError),
    /// The aggregator failed to delete the objects.
    #[error(transparent)]
    DeletionFailed(#[from] crate::aggregator::Error),
}

/// One running watcher.
struct Running {
    addr: Addr<ClusterWatcher>,
    namespaces: NamespaceFilter,
}

/// The supervisor's state.
pub struct Supervisor {
    fleet: Arc<Fleet>,
    /// The members, the selection and the watchers' scopes and status are written through it.
    supervision: Supervision,
    aggregator: Addr<Aggregator>,
    arbiters: Vec<Arbiter>,
    spread: Spread,
    next_generation: u64,
    clusters: BTreeMap<String, ClusterSpec>,
    watchers: HashMap<String, BTreeMap<TypeRef, Running>>,
    checkpoints: BTreeMap<(String, String), String>,
}

/// Which watcher thread each new watcher runs on: the watchers of one type
/// go round the threads, each type starting where the previous new type
/// left off. One counter for every watcher would put all pods on one
/// thread whenever the clusters watch an even number of types each (as
/// they do by default): in a sync of 10 members with 2 threads, one thread
/// then decoded every pod while the other idled.
#[derive(Debug, Default)]
struct Spread {
    next: HashMap<TypeRef, usize>,
}

impl Spread {
    /// The thread (of `threads`) for a new watcher of `type_ref`.
    fn next(&mut self, type_ref: &TypeRef, threads: usize) -> usize {
        let types = self.next.len();
        let next = self.next.entry(type_ref.clone()).or_insert(types);
        let thread = *next % threads.max(1);
        *next += 1;
        thread
    }
}

/// What to change for one cluster to follow the selection.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Types to stop watching.
    pub stop: Vec<TypeRef>,
    /// Types to (re)start, with their namespaces and whether the new
    /// watcher may resume from the old one's checkpoint (the namespaces did
    /// not widen; a wider scope needs a fresh list).
    pub start: Vec<(TypeRef, NamespaceFilter, bool)>,
}

/// The changes that take the watchers of a cluster from `running` to `plan`.
pub fn changes(running: &BTreeMap<TypeRef, NamespaceFilter>, plan: &BTreeMap<TypeRef, NamespaceFilter>) -> Changes {
    let mut out = Changes::default();
    for (type_ref, old) in running {
        match plan.get(type_ref) {
            None => out.stop.push(type_ref.clone()),
            Some(new) if new != old => {
                out.stop.push(type_ref.clone());
                out.start.push((type_ref.clone(), new.clone(), new.is_within(old)));
            }
            Some(_) => {}
        }
    }
    for (type_ref, new) in plan.iter().filter(|(t, _)| !running.contains_key(*t)) {
        out.start.push((type_ref.clone(), new.clone(), true));
    }
    out
}

impl Supervisor {
    /// A supervisor of the fleet of `supervision`, with `threads` watcher
    /// threads; `checkpoints` are the persisted member RVs to resume from.
    pub fn new(
        supervision: Supervision,
        aggregator: Addr<Aggregator>,
        threads: usize,
        checkpoints: BTreeMap<(String, String), String>,
    ) -> Supervisor {
        let arbiters = (0..threads.max(1))
            .map(|_| {
                let arbiter = Arbiter::new();
                arbiter.spawn_fn(crate::background::lower_priority);
                arbiter
            })
            .collect();
        Supervisor {
            fleet: supervision.fleet().clone(),
            supervision,
            aggregator,
            arbiters,
            spread: Spread::default(),
            next_generation: 1,
            clusters: BTreeMap::new(),
            watchers: HashMap::new(),
            checkpoints,
        }
    }

    fn arbiter(&mut self, type_ref: &TypeRef) -> ArbiterHandle {
        self.arbiters[self.spread.next(type_ref, self.arbiters.len())].handle()
    }

    /// Starts watching `spec` (replacing the watchers of a cluster of that name).
    pub fn add_cluster(&mut self, spec: ClusterSpec) {
        self.stop_watchers(&spec.name);
        let another_member = self.clusters.get(&spec.name).is_some_and(|old| {
            // Labels only choose what is watched; they do not make another member.
            let mut old = old.clone();
            old.labels = spec.labels.clone();
            old != spec
        });
        if another_member {
            // Another member behind the same name: its resourceVersions mean
            // nothing here. Relist, and let the relist diff settle the objects.
            self.checkpoints.retain(|(c, _), _| c != &spec.name);
            if let Err(e) = self.fleet.store().remove_checkpoints(&spec.name) {
                tracing::error!(cluster = %spec.name, error = %e, "Cannot forget the old member's checkpoints.");
            }
        } else {
            // The same member: resume from where its watchers were.
            for (resource, status) in self.fleet.status().remove(&spec.name).unwrap_or_default() {
                if let Some(rv) = status.checkpoint {
                    self.checkpoints.insert((spec.name.clone(), resource), rv);
                }
            }
        }
        // Every watcher starts as Connecting: readiness waits for all of them.
        self.supervision.remove_status(&spec.name);
        self.supervision.set_member(spec.clone());
        self.clusters.insert(spec.name.clone(), spec.clone());
        let plan = self.fleet.selection().plan(&spec.name, &spec.labels);
        for (type_ref, namespaces) in plan {
            self.start_watcher(&spec, type_ref, namespaces, true);
        }
        info!(cluster = %spec.name, watchers = self.watchers.get(&spec.name).map_or(0, |w| w.len()), "Cluster added.");
        // Objects of types (or namespaces) no longer selected here, e.g.
        // after a restart with another selection, become DELETED events.
        self.aggregator.do_send(Prune { clusters: vec![spec.name.clone()], forget: Vec::new() });
    }

    /// Puts `selection` in force; returns what to prune.
    pub fn set_selection(&mut self, selection: ResourceSelection) -> Prune {
        let mut forget = Vec::new();
        self.supervision.set_selection(selection.clone());
        for spec in self.clusters.values().cloned().collect::<Vec<_>>() {
            let running: BTreeMap<TypeRef, NamespaceFilter> = self
                .watchers
                .get(&spec.name)
                .map(|w| w.iter().map(|(t, r)| (t.clone(), r.namespaces.clone())).collect())
                .unwrap_or_default();
            let plan = selection.plan(&spec.name, &spec.labels);
            let Changes { stop, start } = changes(&running, &plan);
            for type_ref in &stop {
                let checkpoint = self.stop_watcher(&spec.name, type_ref);
                if let Some((key, rv)) = checkpoint {
                    self.checkpoints.insert((spec.name.clone(), key), rv);
                }
                if !plan.contains_key(type_ref) {
                    if let Some(resource) = self.fleet.known_type(type_ref) {
                        forget.push((spec.name.clone(), resource.key()));
                    }
                }
            }
            for (type_ref, namespaces, resume) in start {
                self.start_watcher(&spec, type_ref, namespaces, resume);
            }
            // Checkpoints of types no longer watched are stale the moment
            // their objects go.
            let watched: Vec<String> = plan.keys().filter_map(|t| self.fleet.known_type(t)).map(|r| r.key()).collect();
            self.checkpoints.retain(|(c, key), _| c != &spec.name || watched.contains(key));
            if !stop.is_empty() || !plan.is_empty() {
                info!(cluster = %spec.name, stopped = stop.len(), watchers = plan.len(), "Resource selection applied.");
            }
        }
        Prune { clusters: self.clusters.keys().cloned().collect(), forget }
    }

    /// Starts the watcher of `type_ref` in `spec` for `namespaces`; resumes
    /// from the last checkpoint when `resume`, lists afresh otherwise.
    fn start_watcher(&mut self, spec: &ClusterSpec, type_ref: TypeRef, namespaces: NamespaceFilter, resume: bool) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.supervision.set_scope(&spec.name, &type_ref, WatchScope { generation, namespaces: namespaces.clone() });
        let known = self.fleet.known_type(&type_ref);
        let key = known.as_ref().map(|r| r.key());
        let checkpoint_key = key.clone().map(|k| (spec.name.clone(), k));
        let checkpoint = match &checkpoint_key {
            Some(k) if resume => self.checkpoints.get(k).cloned(),
            Some(k) => {
                self.checkpoints.remove(k);
                if let Err(e) = self.fleet.store().remove_checkpoint(&k.0, &k.1) {
                    tracing::error!(cluster = %spec.name, resource = %k.1, error = %e, "Cannot forget a checkpoint.");
                }
                None
            }
            None => None,
        };
        let target = match known {
            Some(resource) if resource.is_builtin() => {
                let rv = checkpoint.clone();
                self.supervision.update_status(&spec.name, &resource.key(), |s| s.checkpoint = rv);
                WatchTarget::Known(resource)
            }
            _ => WatchTarget::Discover(type_ref.clone()),
        };
        let namespace = namespaces.single().map(str::to_string);
        let ticket = ScopeTicket { type_ref: type_ref.clone(), generation };
        let checkpoint = key.zip(checkpoint);
        let (spec2, aggregator, report) = (spec.clone(), self.aggregator.clone(), self.supervision.report(&spec.name, ticket));
        let arbiter = self.arbiter(&type_ref);
        let addr = ClusterWatcher::start_in_arbiter(&arbiter, move |_| {
            ClusterWatcher::selected(spec2, target, namespace, aggregator.recipient(), report, checkpoint)
        });
        self.watchers.entry(spec.name.clone()).or_default().insert(type_ref, Running { addr, namespaces });
    }

    /// Stops one watcher; returns its resource key and last checkpoint.
    fn stop_watcher(&mut self, cluster: &str, type_ref: &TypeRef) -> Option<(String, String)> {
        if let Some(running) = self.watchers.get_mut(cluster).and_then(|w| w.remove(type_ref)) {
            running.addr.do_send(Stop);
        }
        self.supervision.remove_scope(cluster, type_ref);
        let key = self.fleet.known_type(type_ref)?.key();
        let status = self.fleet.status().get(cluster).and_then(|w| w.get(&key).cloned());
        self.supervision.remove_watcher_status(cluster, &key);
        Some(key).zip(status.and_then(|s| s.checkpoint))
    }

    fn stop_watchers(&mut self, cluster: &str) {
        for (_, running) in self.watchers.remove(cluster).unwrap_or_default() {
            running.addr.do_send(Stop);
        }
        self.supervision.remove_scopes(cluster);
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let clusters: Vec<String> = self.watchers.keys().cloned().collect();
        for c in clusters {
            self.stop_watchers(&c);
        }
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

impl Handler<AddCluster> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: AddCluster, _ctx: &mut Self::Context) {
        self.add_cluster(msg.0);
    }
}

impl Handler<Relist> for Supervisor {
    type Result = ();

    /// Restarts the watcher of the type without its checkpoint: it lists
    /// the member again (the checkpoint is forgotten in the store too, so a
    /// restart before the list ends lists as well).
    fn handle(&mut self, msg: Relist, _ctx: &mut Self::Context) {
        let Some(spec) = self.clusters.get(&msg.cluster).cloned() else { return };
        let fleet = self.fleet.clone();
        let running = self.watchers.get(&msg.cluster).and_then(|watchers| {
            watchers.iter().find(|(type_ref, _)| fleet.known_type(type_ref).is_some_and(|r| r.key() == msg.resource))
        });
        let Some((type_ref, running)) = running.map(|(t, r)| (t.clone(), r.namespaces.clone())) else { return };
        self.stop_watcher(&msg.cluster, &type_ref);
        self.start_watcher(&spec, type_ref, running, false);
        info!(cluster = %msg.cluster, resource = %msg.resource, "Listing the member's type again to rebuild objects lost to storage damage.");
    }
}

impl Handler<TakeCluster> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: TakeCluster, _ctx: &mut Self::Context) {
        let name = msg.spec.name.clone();
        // The log's checkpoints are where the previous owner committed up to.
        self.checkpoints.retain(|(c, _), _| c != &name);
        for (resource, rv) in msg.checkpoints {
            self.checkpoints.insert((name.clone(), resource), rv);
        }
        self.supervision.remove_status(&name);
        self.add_cluster(msg.spec);
    }
}

impl Handler<ReleaseCluster> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: ReleaseCluster, _ctx: &mut Self::Context) {
        // Their scopes go first: a batch already on its way is dropped.
        self.stop_watchers(&msg.0);
        let watched = self.clusters.remove(&msg.0).is_some();
        self.supervision.remove_status(&msg.0);
        self.checkpoints.retain(|(c, _), _| c != &msg.0);
        if watched {
            info!(cluster = %msg.0, "Cluster released: another replica watches it.");
        }
    }
}

impl Handler<KnowCluster> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: KnowCluster, _ctx: &mut Self::Context) {
        if self.clusters.contains_key(&msg.0.name) {
            self.add_cluster(msg.0);
        } else {
            self.supervision.set_member(msg.0);
        }
    }
}

impl Handler<ForgetCluster> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: ForgetCluster, _ctx: &mut Self::Context) {
        self.stop_watchers(&msg.0);
        self.clusters.remove(&msg.0);
        self.supervision.remove_member(&msg.0);
        self.supervision.remove_status(&msg.0);
        self.checkpoints.retain(|(c, _), _| c != &msg.0);
    }
}

impl Handler<DropCluster> for Supervisor {
    type Result = ResponseFuture<Result<usize, Error>>;

    fn handle(&mut self, msg: DropCluster, _ctx: &mut Self::Context) -> Self::Result {
        self.stop_watchers(&msg.0);
        self.clusters.remove(&msg.0);
        self.supervision.remove_member(&msg.0);
        // Its watchers write no more status (their scopes are gone).
        self.supervision.remove_status(&msg.0);
        self.checkpoints.retain(|(c, _), _| c != &msg.0);
        let aggregator = self.aggregator.clone();
        Box::pin(async move { Ok(aggregator.send(RemoveCluster { cluster: msg.0 }).await??) })
    }
}

impl Handler<ListClusters> for Supervisor {
    type Result = actix::MessageResult<ListClusters>;

    fn handle(&mut self, _msg: ListClusters, _ctx: &mut Self::Context) -> Self::Result {
        actix::MessageResult(self.clusters.values().cloned().collect())
    }
}

impl Handler<SetSelection> for Supervisor {
    type Result = ResponseFuture<Result<usize, Error>>;

    fn handle(&mut self, msg: SetSelection, _ctx: &mut Self::Context) -> Self::Result {
        let prune = self.set_selection(msg.0);
        let aggregator = self.aggregator.clone();
        Box::pin(async move { Ok(aggregator.send(prune).await??) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(namespaces: &[&str]) -> NamespaceFilter {
        NamespaceFilter::Only(namespaces.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn each_type_goes_round_the_watcher_threads() {
        let types = [TypeRef::new("v1", "Pod"), TypeRef::new("v1", "Node"), TypeRef::new("apps/v1", "Deployment"), TypeRef::new("v1", "Service")];
        let mut spread = Spread::default();
        let mut per_type: HashMap<TypeRef, Vec<usize>> = HashMap::new();
        // 10 clusters watching the same 4 types (an even number), 2 threads.
        for _cluster in 0..10 {
            for t in &types {
                per_type.entry(t.clone()).or_default().push(spread.next(t, 2));
            }
        }
        for (t, threads) in &per_type {
            let on_first = threads.iter().filter(|n| **n == 0).count();
            assert_eq!(on_first, 5, "{t}: {threads:?}");
        }
        assert_eq!(spread.next(&types[0], 1), 0, "one thread takes every watcher");
    }

    #[test]
    fn only_changed_types_restart_and_widening_relists() {
        let (pods, nodes, widgets, cms) =
            (TypeRef::new("v1", "Pod"), TypeRef::new("v1", "Node"), TypeRef::new("example.com/v1", "Widget"), TypeRef::new("v1", "ConfigMap"));
        let running: BTreeMap<_, _> = [
            (pods.clone(), NamespaceFilter::All),
            (nodes.clone(), NamespaceFilter::All),
            (cms.clone(), only(&["a"])),
        ]
        .into();
        let plan: BTreeMap<_, _> = [
            (pods.clone(), only(&["default"])),
            (widgets.clone(), NamespaceFilter::All),
            (cms.clone(), only(&["a", "b"])),
        ]
        .into();
        let c = changes(&running, &plan);
        assert_eq!(c.stop, [cms.clone(), nodes, pods.clone()]);
        assert_eq!(
            c.start,
            [(cms, only(&["a", "b"]), false), (pods.clone(), only(&["default"]), true), (widgets, NamespaceFilter::All, true)]
        );
        assert_eq!(changes(&plan, &plan), Changes::default(), "an unchanged selection touches nothing");
    }
}
