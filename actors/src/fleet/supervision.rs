//! The write handles of the members' status and of the type catalog, each
//! held by its writer: the [`Supervision`] by the supervisor (and by the
//! binary while it seeds the members, before it hands it over), a
//! [`WatcherReport`] by each watcher, and the resolver's [`Reporting`] for
//! its control-plane watchers.

use std::sync::Arc;

use kubefold_engine::resources::{ResourceType, TypeRef};
use kubefold_engine::selection::ResourceSelection;
use tokio::sync::watch;

use super::{Fleet, WatchScope, WatcherStatus};
use crate::cluster::ClusterSpec;
use crate::messages::ScopeTicket;

/// The supervisor's handle: the members, the selection, the watchers'
/// scopes, and the status rows of the watchers it starts and stops.
/// Taken once from the fleet ([`Fleet::take_supervision`]).
pub struct Supervision {
    fleet: Arc<Fleet>,
}

impl std::fmt::Debug for Supervision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervision").field("members", &self.fleet.member_names()).finish()
    }
}

impl Supervision {
    pub(super) fn new(fleet: Arc<Fleet>) -> Supervision {
        Supervision { fleet }
    }

    /// The fleet supervised.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// Puts `selection` in force for discovery at once (the supervisor
    /// starts and stops the watchers).
    pub fn set_selection(&self, selection: ResourceSelection) {
        self.fleet.catalog.set_selection(selection);
    }

    /// Records a member's connection settings (edits are forwarded with them).
    pub fn set_member(&self, spec: ClusterSpec) {
        self.fleet.members.set_member(spec);
    }

    /// Forgets a member.
    pub fn remove_member(&self, cluster: &str) {
        self.fleet.members.remove_member(cluster);
    }

    /// Records the scope of a (new) watcher.
    pub fn set_scope(&self, cluster: &str, type_ref: &TypeRef, scope: WatchScope) {
        self.fleet.members.set_scope(cluster, type_ref, scope);
    }

    /// Forgets the scope of a stopped watcher: its batches are dropped from now on.
    pub fn remove_scope(&self, cluster: &str, type_ref: &TypeRef) {
        self.fleet.members.remove_scope(cluster, type_ref);
    }

    /// Forgets every scope of a cluster.
    pub fn remove_scopes(&self, cluster: &str) {
        self.fleet.members.remove_scopes(cluster);
    }

    /// Updates the status row of a watcher before it runs (its checkpoint).
    pub fn update_status(&self, cluster: &str, resource: &str, f: impl FnOnce(&mut WatcherStatus)) {
        self.fleet.members.update_status(cluster, resource, f);
    }

    /// Forgets a cluster's status (it was removed, or is added again).
    pub fn remove_status(&self, cluster: &str) {
        self.fleet.members.remove_status(cluster);
    }

    /// Forgets the status of one watcher (its type was deselected).
    pub fn remove_watcher_status(&self, cluster: &str, resource: &str) {
        self.fleet.members.remove_watcher_status(cluster, resource);
    }

    /// The handle of the watcher identified by `ticket` in `cluster`.
    pub fn report(&self, cluster: &str, ticket: ScopeTicket) -> WatcherReport {
        WatcherReport { fleet: self.fleet.clone(), cluster: cluster.to_string(), ticket: Some(ticket) }
    }
}

/// The resolver's handle: the status rows of the watchers of its control
/// plane, which run outside the selection. Taken once from the fleet
/// ([`Fleet::take_control_plane_reporting`]).
pub struct Reporting {
    fleet: Arc<Fleet>,
}

impl std::fmt::Debug for Reporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporting").finish_non_exhaustive()
    }
}

impl Reporting {
    pub(super) fn new(fleet: Arc<Fleet>) -> Reporting {
        Reporting { fleet }
    }

    /// The handle of a control-plane watcher of `cluster`.
    pub fn report(&self, cluster: &str) -> WatcherReport {
        WatcherReport { fleet: self.fleet.clone(), cluster: cluster.to_string(), ticket: None }
    }
}

/// One watcher's handle: its own status row, its member's restore signal,
/// and the types it discovers. A watcher the selection stopped (its
/// ticket is no longer the running one) writes no status.
#[derive(Clone)]
pub struct WatcherReport {
    fleet: Arc<Fleet>,
    cluster: String,
    ticket: Option<ScopeTicket>,
}

impl std::fmt::Debug for WatcherReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatcherReport").field("cluster", &self.cluster).field("ticket", &self.ticket).finish()
    }
}

impl WatcherReport {
    /// The fleet, to read.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// The selected watcher this handle belongs to (`None` outside the selection).
    pub fn ticket(&self) -> Option<&ScopeTicket> {
        self.ticket.as_ref()
    }

    /// Whether the watcher still runs for the selection (always, outside it).
    pub fn is_current(&self) -> bool {
        self.ticket.as_ref().is_none_or(|ticket| {
            self.fleet.members.scope(&self.cluster, &ticket.type_ref).is_some_and(|s| s.generation == ticket.generation)
        })
    }

    /// Updates the watcher's status row for type `resource`, unless the
    /// selection stopped the watcher.
    pub fn update_status(&self, resource: &str, f: impl FnOnce(&mut WatcherStatus)) {
        if self.is_current() {
            self.fleet.members.update_status(&self.cluster, resource, f);
        }
    }

    /// The signal of the member's restores.
    pub fn restores(&self) -> watch::Receiver<u64> {
        self.fleet.members.restores(&self.cluster)
    }

    /// The watcher found its member restored from a backup. Its other
    /// types may not show it (a type whose last change predates the
    /// backup, or a quiet one), but after an etcd restore every client must
    /// relist (Kubernetes, "Restoring an etcd cluster":
    /// <https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster>):
    /// every watcher of the member relists.
    pub fn member_restored(&self) {
        self.fleet.members.member_restored(&self.cluster);
    }

    /// Records a type discovered from the member (new, or with changed
    /// details such as printer columns): persisted, and served at once
    /// when selected.
    pub fn learn_type(&self, resource: ResourceType) {
        self.fleet.catalog.learn_type(&self.fleet.store, resource);
    }
}

#[cfg(test)]
mod tests {
    use kubefold_engine::index::Index;
    use kubefold_engine::names::NameStyle;
    use kubefold_engine::resources;
    use kubefold_engine::selection::NamespaceFilter;
    use kubefold_store::{Options, Store};

    use super::*;
    use crate::fleet::SyncState;

    /// Each handle is taken once; a watcher writes its own row until the
    /// supervisor replaces it, and the replaced one's late reports are
    /// dropped; control-plane watchers always report.
    #[test]
    fn watchers_write_their_own_rows_while_they_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &Options::default()).unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::default(), 0);
        let supervision = fleet.take_supervision().unwrap();
        assert!(fleet.take_supervision().is_none(), "one supervisor per fleet");
        supervision.set_member(ClusterSpec::from_url("m1", "http://127.0.0.1:1"));
        assert_eq!(fleet.member_names(), ["m1"]);

        let pods = TypeRef::new("v1", "Pod");
        let scope = |generation| WatchScope { generation, namespaces: NamespaceFilter::All };
        let state = |fleet: &Fleet| fleet.status().get("m1").and_then(|w| w.get("v1/pods")).map(|s| (s.state, s.relists));
        supervision.set_scope("m1", &pods, scope(1));
        let first = supervision.report("m1", ScopeTicket { type_ref: pods.clone(), generation: 1 });
        first.update_status("v1/pods", |s| {
            s.state = SyncState::Synced;
            s.relists = 1;
        });
        assert_eq!(state(&fleet), Some((SyncState::Synced, 1)));

        // Replaced (its namespaces changed): the old watcher's reports are dropped.
        supervision.set_scope("m1", &pods, scope(2));
        let second = supervision.report("m1", ScopeTicket { type_ref: pods.clone(), generation: 2 });
        assert!(!first.is_current() && second.is_current());
        first.update_status("v1/pods", |s| s.relists = 99);
        second.update_status("v1/pods", |s| s.relists = 2);
        assert_eq!(state(&fleet), Some((SyncState::Synced, 2)));
        supervision.remove_scopes("m1");
        second.update_status("v1/pods", |s| s.relists = 3);
        assert_eq!(state(&fleet), Some((SyncState::Synced, 2)), "stopped");

        let reporting = fleet.take_control_plane_reporting().unwrap();
        assert!(fleet.take_control_plane_reporting().is_none());
        let restores = fleet.restores("karmada");
        let control_plane = reporting.report("karmada");
        control_plane.update_status("v1/services", |s| s.state = SyncState::Stale);
        assert_eq!(fleet.status()["karmada"]["v1/services"].state, SyncState::Stale);
        control_plane.member_restored();
        assert!(restores.has_changed().unwrap());
    }
}
