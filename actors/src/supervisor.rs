//! The `Supervisor` actor owns the set of member clusters and their watcher
//! actors: it starts one `ClusterWatcher` per (cluster, resource type) on a
//! pool of arbiters (threads), so that decoding a large list never stalls the
//! aggregator or the HTTP workers, and stops them when a cluster goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::{Actor, Addr, Arbiter, ArbiterHandle, Context, Handler, Message, ResponseFuture};
use tracing::info;

use crate::aggregator::Aggregator;
use crate::cluster::ClusterSpec;
use crate::fleet::Fleet;
use crate::messages::{RemoveCluster, Stop};
use crate::watcher::ClusterWatcher;

/// The supervisor's state.
pub struct Supervisor {
    fleet: Arc<Fleet>,
    aggregator: Addr<Aggregator>,
    arbiters: Vec<Arbiter>,
    next_arbiter: usize,
    clusters: BTreeMap<String, ClusterSpec>,
    watchers: HashMap<String, Vec<Addr<ClusterWatcher>>>,
    checkpoints: BTreeMap<(String, String), String>,
}

/// Adds (or replaces) a member cluster and starts watching it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AddCluster(pub ClusterSpec);

/// Removes a member cluster: its watchers stop and its objects become DELETED events.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, String>")]
pub struct DropCluster(pub String);

/// Lists the member clusters.
#[derive(Debug, Message)]
#[rtype(result = "Vec<ClusterSpec>")]
pub struct ListClusters;

impl Supervisor {
    /// A supervisor over `fleet`, with `threads` watcher threads; `checkpoints`
    /// are the persisted member RVs to resume from.
    pub fn new(
        fleet: Arc<Fleet>,
        aggregator: Addr<Aggregator>,
        threads: usize,
        checkpoints: BTreeMap<(String, String), String>,
    ) -> Supervisor {
        let arbiters = (0..threads.max(1)).map(|_| Arbiter::new()).collect();
        Supervisor {
            fleet,
            aggregator,
            arbiters,
            next_arbiter: 0,
            clusters: BTreeMap::new(),
            watchers: HashMap::new(),
            checkpoints,
        }
    }

    fn arbiter(&mut self) -> ArbiterHandle {
        let handle = self.arbiters[self.next_arbiter % self.arbiters.len()].handle();
        self.next_arbiter += 1;
        handle
    }

    /// Starts watching `spec` (replacing the watchers of a cluster of that name).
    pub fn add_cluster(&mut self, spec: ClusterSpec) {
        self.stop_watchers(&spec.name);
        if self.clusters.get(&spec.name).is_some_and(|old| *old != spec) {
            // Another member behind the same name: its resourceVersions mean
            // nothing here. Relist, and let the relist diff settle the objects.
            self.checkpoints.retain(|(c, _), _| c != &spec.name);
            if let Err(e) = self.fleet.store().remove_checkpoints(&spec.name) {
                tracing::error!(cluster = %spec.name, error = %e, "Cannot forget the old member's checkpoints.");
            }
        }
        // Every watcher starts as Connecting: readiness waits for all of them.
        self.fleet.remove_status(&spec.name);
        for resource in self.fleet.catalog() {
            let checkpoint = self.checkpoints.get(&(spec.name.clone(), resource.key())).cloned();
            self.fleet.update_status(&spec.name, &resource.key(), |s| s.checkpoint = checkpoint);
        }
        let mut addrs = Vec::new();
        for resource in self.fleet.catalog().to_vec() {
            let checkpoint = self.checkpoints.get(&(spec.name.clone(), resource.key())).cloned();
            let (spec2, aggregator, fleet) = (spec.clone(), self.aggregator.clone(), self.fleet.clone());
            let arbiter = self.arbiter();
            addrs.push(ClusterWatcher::start_in_arbiter(&arbiter, move |_| {
                ClusterWatcher::new(spec2, resource, aggregator.recipient(), fleet, checkpoint)
            }));
        }
        self.fleet.set_member(spec.clone());
        info!(cluster = %spec.name, watchers = addrs.len(), "Cluster added.");
        self.watchers.insert(spec.name.clone(), addrs);
        self.clusters.insert(spec.name.clone(), spec);
    }

    fn stop_watchers(&mut self, cluster: &str) {
        for addr in self.watchers.remove(cluster).unwrap_or_default() {
            addr.do_send(Stop);
        }
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

impl Handler<DropCluster> for Supervisor {
    type Result = ResponseFuture<Result<usize, String>>;

    fn handle(&mut self, msg: DropCluster, _ctx: &mut Self::Context) -> Self::Result {
        self.stop_watchers(&msg.0);
        self.clusters.remove(&msg.0);
        self.fleet.remove_member(&msg.0);
        self.checkpoints.retain(|(c, _), _| c != &msg.0);
        let aggregator = self.aggregator.clone();
        Box::pin(async move {
            aggregator.send(RemoveCluster { cluster: msg.0 }).await.map_err(|e| e.to_string())?
        })
    }
}

impl Handler<ListClusters> for Supervisor {
    type Result = actix::MessageResult<ListClusters>;

    fn handle(&mut self, _msg: ListClusters, _ctx: &mut Self::Context) -> Self::Result {
        actix::MessageResult(self.clusters.values().cloned().collect())
    }
}
