//! The fleet's shared read view: the latest index snapshot, the live event
//! fan-out, the store (object bodies, event log) and per-cluster status.
//!
//! The aggregator is the only writer; HTTP workers read it concurrently
//! without ever waiting in the aggregator's mailbox.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_engine::resources::ResourceType;
use kubefold_store::Store;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::cluster::ClusterSpec;

/// How many committed events the live fan-out buffers for slow watch clients
/// before they are dropped with 410 Expired.
pub const FANOUT_CAPACITY: usize = 16 * 1024;

/// Sync state of one watcher (cluster × resource type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SyncState {
    /// Not connected yet (objects, if any, come from the store).
    Connecting,
    /// Initial list applied or watch resumed: the index follows the member.
    Synced,
    /// The member failed; objects are kept and marked stale.
    Stale,
}

/// Status of one watcher, as the admin API and `/readyz` report it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatcherStatus {
    /// Where the watcher stands.
    pub state: SyncState,
    /// Last error seen from the member, if any.
    pub last_error: Option<String>,
    /// Full lists made (initial and after 410).
    pub relists: u64,
    /// Watch reconnects.
    pub reconnects: u64,
    /// Events received from the member.
    pub events: u64,
    /// The member RV reached.
    pub checkpoint: Option<String>,
}

impl Default for WatcherStatus {
    fn default() -> Self {
        WatcherStatus { state: SyncState::Connecting, last_error: None, relists: 0, reconnects: 0, events: 0, checkpoint: None }
    }
}

/// The shared read view. Cheap to clone behind an `Arc`.
pub struct Fleet {
    catalog: Vec<ResourceType>,
    name_style: NameStyle,
    store: Store,
    snapshot: ArcSwap<Index>,
    events: broadcast::Sender<Arc<StoredEvent>>,
    compacted_rv: AtomicU64,
    status: RwLock<BTreeMap<String, BTreeMap<String, WatcherStatus>>>,
    members: RwLock<BTreeMap<String, ClusterSpec>>,
    /// Per member, how many times one of its watchers found it restored from
    /// a backup (its RVs went back): every watcher of that member relists.
    restores: std::sync::Mutex<BTreeMap<String, tokio::sync::watch::Sender<u64>>>,
}

impl Fleet {
    /// A view over `store`, starting from the recovered `index`.
    pub fn new(catalog: Vec<ResourceType>, name_style: NameStyle, store: Store, index: Index, compacted_rv: u64) -> Arc<Fleet> {
        let (events, _) = broadcast::channel(FANOUT_CAPACITY);
        Arc::new(Fleet {
            catalog,
            name_style,
            store,
            snapshot: ArcSwap::from_pointee(index),
            events,
            compacted_rv: AtomicU64::new(compacted_rv),
            status: RwLock::new(BTreeMap::new()),
            members: RwLock::new(BTreeMap::new()),
            restores: std::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// The aggregated resource types.
    pub fn catalog(&self) -> &[ResourceType] {
        &self.catalog
    }

    /// How names are served.
    pub fn name_style(&self) -> NameStyle {
        self.name_style
    }

    /// The store (bodies and the event log).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The latest consistent snapshot of the index.
    pub fn snapshot(&self) -> Arc<Index> {
        self.snapshot.load_full()
    }

    /// Subscribes to committed events. Subscribe before taking the snapshot
    /// to see every event after it.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.events.subscribe()
    }

    /// Number of live watch subscriptions.
    pub fn watchers(&self) -> usize {
        self.events.receiver_count()
    }

    /// Events up to this RV were compacted away.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv.load(Ordering::Acquire)
    }

    /// Raises the compaction floor (reads and watches older than it get 410).
    pub fn set_compacted_rv(&self, rv: u64) {
        self.compacted_rv.fetch_max(rv, Ordering::AcqRel);
    }

    /// Publishes a committed batch: the new snapshot first, then its events.
    pub(crate) fn publish(&self, index: Index, events: Vec<StoredEvent>) {
        self.snapshot.store(Arc::new(index));
        for event in events {
            // No receivers is not an error: nobody watches.
            let _ = self.events.send(Arc::new(event));
        }
    }

    /// Updates the status of one watcher.
    pub fn update_status(&self, cluster: &str, resource: &str, f: impl FnOnce(&mut WatcherStatus)) {
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        f(status.entry(cluster.to_string()).or_default().entry(resource.to_string()).or_default());
    }

    /// Forgets a cluster's status (it was removed).
    pub fn remove_status(&self, cluster: &str) {
        self.status.write().unwrap_or_else(|e| e.into_inner()).remove(cluster);
    }

    /// Records a member's connection settings (edits are forwarded with them).
    pub fn set_member(&self, spec: ClusterSpec) {
        self.members.write().unwrap_or_else(|e| e.into_inner()).insert(spec.name.clone(), spec);
    }

    /// Forgets a member.
    pub fn remove_member(&self, cluster: &str) {
        self.members.write().unwrap_or_else(|e| e.into_inner()).remove(cluster);
    }

    /// A member's connection settings.
    pub fn member(&self, cluster: &str) -> Option<ClusterSpec> {
        self.members.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned()
    }

    /// Names of the members.
    pub fn member_names(&self) -> Vec<String> {
        self.members.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// Status of every watcher, by cluster and resource type.
    pub fn status(&self) -> BTreeMap<String, BTreeMap<String, WatcherStatus>> {
        self.status.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The signal of `cluster`'s restores (see [`Fleet::member_restored`]).
    pub fn restores(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64> {
        let mut restores = self.restores.lock().unwrap_or_else(|e| e.into_inner());
        restores.entry(cluster.to_string()).or_insert_with(|| tokio::sync::watch::channel(0).0).subscribe()
    }

    /// One watcher found `cluster` restored from a backup. Its other types
    /// may not show it (a type whose last change predates the backup, or a
    /// quiet one), but after an etcd restore every client must relist
    /// (Kubernetes, "Restoring an etcd cluster":
    /// <https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster>).
    pub fn member_restored(&self, cluster: &str) {
        let mut restores = self.restores.lock().unwrap_or_else(|e| e.into_inner());
        let sender = restores.entry(cluster.to_string()).or_insert_with(|| tokio::sync::watch::channel(0).0);
        sender.send_modify(|n| *n += 1);
    }
}
