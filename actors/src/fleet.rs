//! The fleet's shared read view: the latest index snapshot, the live event
//! fan-out, the store (object bodies, event log), per-cluster status, and
//! what is aggregated: the resource selection, the types known (built in or
//! discovered from members), the catalog served from them, and the scope
//! (namespaces, generation) of every running watcher.
//!
//! The aggregator is the only writer; HTTP workers read it concurrently
//! without ever waiting in the aggregator's mailbox.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_engine::resources::{ResourceType, TypeRef};
use kubefold_engine::selection::{NamespaceFilter, ResourceSelection};
use kubefold_store::Store;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::cluster::ClusterSpec;

/// How many committed events the live fan-out buffers for slow watch clients
/// before they are dropped with 410 Expired.
pub const FANOUT_CAPACITY: usize = 16 * 1024;

/// The latest committed events kept in memory for watches that resume from
/// a recent resourceVersion, as kube-apiserver's watch cache keeps a window
/// of recent events: a thousand informers reconnecting at once (after a
/// restart of kubefold or of their own) each replay the same few events,
/// which would otherwise be read and decoded from the store once per
/// client. At most this many events ...
pub const RECENT_EVENTS: usize = 4096;
/// ... and about this many bytes of their bodies.
pub const RECENT_BYTES: usize = 16 << 20;

/// Committed events after `floor`, every one of them, oldest first.
struct Recent {
    events: std::collections::VecDeque<Arc<StoredEvent>>,
    bytes: usize,
    /// Every event with a higher RV is in `events` (the RV of the last
    /// event let go, or the head the fleet started at).
    floor: u64,
}

impl Recent {
    fn push(&mut self, event: Arc<StoredEvent>) {
        self.bytes += event.body.json.len();
        self.events.push_back(event);
        while self.events.len() > RECENT_EVENTS || (self.bytes > RECENT_BYTES && self.events.len() > 1) {
            let Some(old) = self.events.pop_front() else { break };
            self.bytes -= old.body.json.len();
            self.floor = old.rv;
        }
    }
}

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
    /// Since when the watcher has not been synced (connecting, or stale
    /// after an error); `None` while it is synced.
    #[serde(skip)]
    pub behind_since: Option<std::time::Instant>,
}

impl WatcherStatus {
    /// How far kubefold's copy of this type may be behind the member: the
    /// time since the watcher was last synced (zero while it is).
    pub fn lag(&self) -> std::time::Duration {
        self.behind_since.map(|since| since.elapsed()).unwrap_or_default()
    }
}

impl Default for WatcherStatus {
    fn default() -> Self {
        WatcherStatus {
            state: SyncState::Connecting,
            last_error: None,
            relists: 0,
            reconnects: 0,
            events: 0,
            checkpoint: None,
            behind_since: Some(std::time::Instant::now()),
        }
    }
}

/// The store meta key of the types discovered from members (JSON list of
/// [`ResourceType`]): a restart serves them before any member is contacted.
pub const DISCOVERED_TYPES_KEY: &str = "discovered-types";

/// The types discovered from members before, as the store keeps them; none
/// when unreadable (they are discovered again).
pub fn discovered_types(store: &Store) -> Vec<ResourceType> {
    let bytes = match store.meta(DISCOVERED_TYPES_KEY) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Vec::new(),
        Err(e) => {
            tracing::warn!(error = %e, "Discovered resource types unreadable; they are discovered again.");
            return Vec::new();
        }
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "Discovered resource types unreadable; they are discovered again.");
        Vec::new()
    })
}

/// What one watcher (cluster × selected type) keeps: its namespaces, and the
/// generation that tells its batches from those of a watcher it replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchScope {
    /// Distinct for every watcher the supervisor starts.
    pub generation: u64,
    /// The namespaces whose objects are kept.
    pub namespaces: NamespaceFilter,
}

/// The shared read view. Cheap to clone behind an `Arc`.
pub struct Fleet {
    catalog: ArcSwap<Vec<ResourceType>>,
    known: RwLock<Vec<ResourceType>>,
    selection: ArcSwap<ResourceSelection>,
    scopes: RwLock<HashMap<(String, TypeRef), WatchScope>>,
    name_style: NameStyle,
    store: Store,
    snapshot: ArcSwap<Index>,
    events: broadcast::Sender<Arc<StoredEvent>>,
    recent: std::sync::Mutex<Recent>,
    compacted_rv: AtomicU64,
    status: RwLock<BTreeMap<String, BTreeMap<String, WatcherStatus>>>,
    members: RwLock<BTreeMap<String, ClusterSpec>>,
    /// Per member, how many times one of its watchers found it restored from
    /// a backup (its RVs went back): every watcher of that member relists.
    restores: std::sync::Mutex<BTreeMap<String, tokio::sync::watch::Sender<u64>>>,
}

impl Fleet {
    /// A view over `store`, starting from the recovered `index`, with the
    /// `known` types (the built-in ones and those discovered before) and the
    /// default selection (every built-in type from every cluster).
    pub fn new(known: Vec<ResourceType>, name_style: NameStyle, store: Store, index: Index, compacted_rv: u64) -> Arc<Fleet> {
        let (events, _) = broadcast::channel(FANOUT_CAPACITY);
        let recent = std::sync::Mutex::new(Recent { events: Default::default(), bytes: 0, floor: index.head_rv() });
        let selection = ResourceSelection::default();
        Arc::new(Fleet {
            catalog: ArcSwap::from_pointee(selection.catalog(&known)),
            known: RwLock::new(known),
            selection: ArcSwap::from_pointee(selection),
            scopes: RwLock::new(HashMap::new()),
            name_style,
            store,
            snapshot: ArcSwap::from_pointee(index),
            events,
            recent,
            compacted_rv: AtomicU64::new(compacted_rv),
            status: RwLock::new(BTreeMap::new()),
            members: RwLock::new(BTreeMap::new()),
            restores: std::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// The aggregated resource types: those selected and known, as
    /// discovery serves them now.
    pub fn catalog(&self) -> Arc<Vec<ResourceType>> {
        self.catalog.load_full()
    }

    /// The resource selection in force.
    pub fn selection(&self) -> Arc<ResourceSelection> {
        self.selection.load_full()
    }

    /// Puts `selection` in force for discovery at once (the supervisor
    /// starts and stops the watchers).
    pub fn set_selection(&self, selection: ResourceSelection) {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        self.catalog.store(Arc::new(selection.catalog(&known)));
        self.selection.store(Arc::new(selection));
    }

    /// The type `type_ref` names: a built-in one, or one discovered from a member.
    pub fn known_type(&self, type_ref: &TypeRef) -> Option<ResourceType> {
        if let Some(r) = kubefold_engine::resources::builtin().into_iter().find(|r| type_ref.names(r)) {
            return Some(r);
        }
        self.known.read().unwrap_or_else(|e| e.into_inner()).iter().find(|r| type_ref.names(r)).cloned()
    }

    /// The known type with the store key `key` (`example.com/v1/widgets`).
    pub fn known_type_by_key(&self, key: &str) -> Option<ResourceType> {
        if let Some(r) = kubefold_engine::resources::find_by_key(&kubefold_engine::resources::builtin(), key) {
            return Some(r.clone());
        }
        kubefold_engine::resources::find_by_key(&self.known.read().unwrap_or_else(|e| e.into_inner()), key).cloned()
    }

    /// Records a type discovered from a member (new, or with changed
    /// details such as printer columns): persisted, and served at once
    /// when selected.
    pub fn learn_type(&self, resource: ResourceType) {
        if resource.is_builtin() {
            return;
        }
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        match known.iter_mut().find(|r| r.key() == resource.key()) {
            Some(existing) if *existing == resource => return,
            Some(existing) => *existing = resource,
            None => known.push(resource),
        }
        let discovered: Vec<&ResourceType> = known.iter().filter(|r| !r.is_builtin()).collect();
        match serde_json::to_vec(&discovered) {
            Ok(bytes) => {
                if let Err(e) = self.store.put_meta(DISCOVERED_TYPES_KEY, &bytes) {
                    tracing::error!(error = %e, "Cannot persist the discovered resource types.");
                }
            }
            Err(e) => tracing::error!(error = %e, "Cannot encode the discovered resource types."),
        }
        self.catalog.store(Arc::new(self.selection().catalog(&known)));
    }

    /// The scope of the watcher of `type_ref` in `cluster`, if one runs.
    pub fn scope(&self, cluster: &str, type_ref: &TypeRef) -> Option<WatchScope> {
        self.scopes.read().unwrap_or_else(|e| e.into_inner()).get(&(cluster.to_string(), type_ref.clone())).cloned()
    }

    /// Records the scope of a (new) watcher.
    pub fn set_scope(&self, cluster: &str, type_ref: &TypeRef, scope: WatchScope) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).insert((cluster.to_string(), type_ref.clone()), scope);
    }

    /// Forgets the scope of a stopped watcher: its batches are dropped from now on.
    pub fn remove_scope(&self, cluster: &str, type_ref: &TypeRef) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).remove(&(cluster.to_string(), type_ref.clone()));
    }

    /// Forgets every scope of a cluster.
    pub fn remove_scopes(&self, cluster: &str) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).retain(|(c, _), _| c != cluster);
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

    /// Publishes a committed batch: its events to the recent ones, then the
    /// new snapshot, then its events to the live fan-out. (A watch that
    /// sees the snapshot finds every event up to its head among the recent
    /// ones or in the store.)
    pub(crate) fn publish(&self, index: Index, events: Vec<StoredEvent>) {
        let events: Vec<Arc<StoredEvent>> = events.into_iter().map(Arc::new).collect();
        {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            for event in &events {
                recent.push(event.clone());
            }
        }
        self.snapshot.store(Arc::new(index));
        for event in events {
            // No receivers is not an error: nobody watches.
            let _ = self.events.send(event);
        }
    }

    /// Every committed event with `from < rv <= upto`, oldest first, when
    /// all of them are still among the recent ones in memory; `None` when
    /// some must be read from the store.
    pub fn recent_events(&self, from: u64, upto: u64) -> Option<Vec<Arc<StoredEvent>>> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if from < recent.floor {
            return None;
        }
        let start = recent.events.partition_point(|e| e.rv <= from);
        Some(recent.events.iter().skip(start).take_while(|e| e.rv <= upto).cloned().collect())
    }

    /// Updates the status of one watcher.
    pub fn update_status(&self, cluster: &str, resource: &str, f: impl FnOnce(&mut WatcherStatus)) {
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        let watcher = status.entry(cluster.to_string()).or_default().entry(resource.to_string()).or_default();
        f(watcher);
        match (watcher.state == SyncState::Synced, watcher.behind_since) {
            (true, Some(_)) => watcher.behind_since = None,
            (false, None) => watcher.behind_since = Some(std::time::Instant::now()),
            _ => {}
        }
    }

    /// Forgets a cluster's status (it was removed).
    pub fn remove_status(&self, cluster: &str) {
        self.status.write().unwrap_or_else(|e| e.into_inner()).remove(cluster);
    }

    /// Forgets the status of one watcher (its type was deselected).
    pub fn remove_watcher_status(&self, cluster: &str, resource: &str) {
        if let Some(watchers) = self.status.write().unwrap_or_else(|e| e.into_inner()).get_mut(cluster) {
            watchers.remove(resource);
        }
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
