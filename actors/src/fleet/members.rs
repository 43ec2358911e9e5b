//! The members' status: each member's connection settings, the scope of
//! every running watcher, the status of every watcher and each member's
//! restore signal. The supervisor writes the members, the scopes and the
//! rows of watchers it starts or stops (through its
//! [`Supervision`](super::Supervision)); each watcher writes its own row and
//! its member's restore signal (through its
//! [`WatcherReport`](super::WatcherReport)). Everyone reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use kubefold_engine::resources::TypeRef;
use kubefold_engine::selection::NamespaceFilter;
use serde::Serialize;
use tokio::sync::watch;

use crate::cluster::ClusterSpec;

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

/// What one watcher (cluster × selected type) keeps: its namespaces, and the
/// generation that tells its batches from those of a watcher it replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchScope {
    /// Distinct for every watcher the supervisor starts.
    pub generation: u64,
    /// The namespaces whose objects are kept.
    pub namespaces: NamespaceFilter,
}

/// Status by cluster, then resource type key.
pub type StatusTable = BTreeMap<String, BTreeMap<String, WatcherStatus>>;

/// The members and their watchers.
#[derive(Default)]
pub struct Members {
    members: RwLock<BTreeMap<String, ClusterSpec>>,
    scopes: RwLock<HashMap<(String, TypeRef), WatchScope>>,
    status: RwLock<StatusTable>,
    /// Per member, how many times one of its watchers found it restored from
    /// a backup (its RVs went back): every watcher of that member relists.
    restores: Mutex<BTreeMap<String, watch::Sender<u64>>>,
}

impl Members {
    /// A member's connection settings.
    pub fn member(&self, cluster: &str) -> Option<ClusterSpec> {
        self.members.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned()
    }

    /// Names of the members.
    pub fn member_names(&self) -> Vec<String> {
        self.members.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// The scope of the watcher of `type_ref` in `cluster`, if one runs.
    pub fn scope(&self, cluster: &str, type_ref: &TypeRef) -> Option<WatchScope> {
        self.scopes.read().unwrap_or_else(|e| e.into_inner()).get(&(cluster.to_string(), type_ref.clone())).cloned()
    }

    /// Status of every watcher, by cluster and resource type.
    pub fn status(&self) -> StatusTable {
        self.status.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Status of `cluster`'s watchers, by resource type: a copy of that
    /// member's part alone (the whole table is 10,000 entries at 1,000
    /// members).
    pub fn status_of(&self, cluster: &str) -> BTreeMap<String, WatcherStatus> {
        self.status.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned().unwrap_or_default()
    }

    /// The signal of `cluster`'s restores (see [`WatcherReport::member_restored`](super::WatcherReport::member_restored)).
    pub fn restores(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut restores = self.restores.lock().unwrap_or_else(|e| e.into_inner());
        restores.entry(cluster.to_string()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    pub(super) fn set_member(&self, spec: ClusterSpec) {
        self.members.write().unwrap_or_else(|e| e.into_inner()).insert(spec.name.clone(), spec);
    }

    pub(super) fn remove_member(&self, cluster: &str) {
        self.members.write().unwrap_or_else(|e| e.into_inner()).remove(cluster);
    }

    pub(super) fn set_scope(&self, cluster: &str, type_ref: &TypeRef, scope: WatchScope) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).insert((cluster.to_string(), type_ref.clone()), scope);
    }

    pub(super) fn remove_scope(&self, cluster: &str, type_ref: &TypeRef) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).remove(&(cluster.to_string(), type_ref.clone()));
    }

    pub(super) fn remove_scopes(&self, cluster: &str) {
        self.scopes.write().unwrap_or_else(|e| e.into_inner()).retain(|(c, _), _| c != cluster);
    }

    pub(super) fn update_status(&self, cluster: &str, resource: &str, f: impl FnOnce(&mut WatcherStatus)) {
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        let watcher = status.entry(cluster.to_string()).or_default().entry(resource.to_string()).or_default();
        f(watcher);
        match (watcher.state == SyncState::Synced, watcher.behind_since) {
            (true, Some(_)) => watcher.behind_since = None,
            (false, None) => watcher.behind_since = Some(std::time::Instant::now()),
            _ => {}
        }
    }

    pub(super) fn remove_status(&self, cluster: &str) {
        self.status.write().unwrap_or_else(|e| e.into_inner()).remove(cluster);
    }

    pub(super) fn remove_watcher_status(&self, cluster: &str, resource: &str) {
        if let Some(watchers) = self.status.write().unwrap_or_else(|e| e.into_inner()).get_mut(cluster) {
            watchers.remove(resource);
        }
    }

    pub(super) fn member_restored(&self, cluster: &str) {
        let mut restores = self.restores.lock().unwrap_or_else(|e| e.into_inner());
        let sender = restores.entry(cluster.to_string()).or_insert_with(|| watch::channel(0).0);
        sender.send_modify(|n| *n += 1);
    }
}
