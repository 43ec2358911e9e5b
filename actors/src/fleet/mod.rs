//! The fleet's shared read view, in three parts, each written through the
//! handles of its writers (kept in [`supervision`] and [`published`]):
//!
//! - [`published`]: the latest index snapshot, the live event fan-out, the
//!   recent events and the compaction floor. Written by the aggregator
//!   alone, through its [`Publisher`].
//!   The live events go to a channel per type and per (type, namespace)
//!   watched ([`fanout`]), so that an event wakes only the watches it concerns.
//! - [`members`]: the members' connection settings, the scope of every
//!   running watcher, every watcher's status and each member's restore
//!   signal. Written by the supervisor ([`Supervision`]) and, for its own
//!   row, by each watcher ([`WatcherReport`]).
//! - [`catalog`]: the types known (built in or discovered from members), the
//!   resource selection and the catalog served from them. The selection is
//!   the supervisor's; discovered types come from watchers.
//! - [`supervision`]: the write handles of the members' status and of the catalog.
//! - [`karmada`]: what a Karmada control plane says of its members (sync
//!   mode, Ready condition); written by the Karmada reflector.
//!
//! A [`Fleet`] holds them with the store (object bodies, event log) and how
//! names are served. Everyone reads it at once, and HTTP workers never wait
//! in an actor's mailbox for it; the write handles are taken from it once
//! each (`take_*`), by the one writer they are for.

pub mod catalog;
pub mod fanout;
pub mod karmada;
pub mod members;
pub mod published;
pub mod supervision;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_engine::resources::{ResourceType, TypeRef};
use kubefold_engine::selection::ResourceSelection;
use kubefold_store::Store;

pub use catalog::{discovered_types, Catalog, DISCOVERED_TYPES_KEY};
pub use members::{Members, SyncState, WatchScope, WatcherStatus};
pub use fanout::{Subscription, FANOUT_CAPACITY, NAMESPACE_FANOUT_CAPACITY};
pub use published::{Published, Publisher, RECENT_BYTES, RECENT_EVENTS};
pub use supervision::{Reporting, Supervision, WatcherReport};

use crate::cluster::ClusterSpec;

/// Which write handles are still to be taken.
#[derive(Debug)]
struct Handles {
    publisher: bool,
    supervision: bool,
    control_plane: bool,
}

/// The shared read view. Cheap to clone behind an `Arc`.
pub struct Fleet {
    name_style: NameStyle,
    store: Store,
    published: Published,
    members: Members,
    catalog: Catalog,
    handles: Mutex<Handles>,
    karmada: karmada::KarmadaClusters,
    /// The log shared with other replicas, when there is one (etcd).
    shared: std::sync::OnceLock<Arc<dyn kubefold_store::shared::SharedLog>>,
    /// The revision of the shared log the aggregator applied.
    shared_applied: std::sync::atomic::AtomicU64,
}

impl Fleet {
    /// A view over `store`, starting from the recovered `index`, with the
    /// `known` types (the built-in ones and those discovered before) and the
    /// default selection (every built-in type from every cluster).
    pub fn new(known: Vec<ResourceType>, name_style: NameStyle, store: Store, index: Index, compacted_rv: u64) -> Arc<Fleet> {
        Arc::new(Fleet {
            name_style,
            store,
            published: Published::new(index, compacted_rv),
            members: Members::default(),
            catalog: Catalog::new(known),
            handles: Mutex::new(Handles { publisher: true, supervision: true, control_plane: true }),
            karmada: karmada::KarmadaClusters::default(),
            shared: std::sync::OnceLock::new(),
            shared_applied: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Makes this replica one of several over `log` (set once, before the
    /// aggregator starts): the aggregator commits to it and applies what
    /// it holds, consistent reads wait for its head.
    pub fn set_shared(&self, log: Arc<dyn kubefold_store::shared::SharedLog>) -> bool {
        self.shared.set(log).is_ok()
    }

    /// The log shared with other replicas, if any.
    pub fn shared(&self) -> Option<&Arc<dyn kubefold_store::shared::SharedLog>> {
        self.shared.get()
    }

    /// The revision of the shared log this replica applied (0 without one).
    pub fn shared_applied_revision(&self) -> u64 {
        self.shared_applied.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records the revision of the shared log applied (the aggregator's).
    pub fn set_shared_applied_revision(&self, revision: u64) {
        self.shared_applied.fetch_max(revision, std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes the one handle that publishes (the aggregator's); `None` once taken.
    pub fn take_publisher(self: &Arc<Self>) -> Option<Publisher> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut handles.publisher).then(|| Publisher::new(self.clone()))
    }

    /// Takes the supervisor's handle; `None` once taken.
    pub fn take_supervision(self: &Arc<Self>) -> Option<Supervision> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut handles.supervision).then(|| Supervision::new(self.clone()))
    }

    /// Takes the handle of the control-plane watchers' status (the
    /// resolver's); `None` once taken.
    pub fn take_control_plane_reporting(self: &Arc<Self>) -> Option<Reporting> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut handles.control_plane).then(|| Reporting::new(self.clone()))
    }

    /// What Karmada says of the members it registers.
    pub fn karmada(&self) -> &karmada::KarmadaClusters {
        &self.karmada
    }

    /// The published snapshot and events.
    pub fn published(&self) -> &Published {
        &self.published
    }

    /// The members and their watchers.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The types known and selected.
    pub fn types(&self) -> &Catalog {
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

    /// The aggregated resource types: those selected and known, as
    /// discovery serves them now.
    pub fn catalog(&self) -> Arc<Vec<ResourceType>> {
        self.catalog.catalog()
    }

    /// The resource selection in force.
    pub fn selection(&self) -> Arc<ResourceSelection> {
        self.catalog.selection()
    }

    /// The type `type_ref` names: a built-in one, or one discovered from a member.
    pub fn known_type(&self, type_ref: &TypeRef) -> Option<ResourceType> {
        self.catalog.known_type(type_ref)
    }

    /// The known type with the store key `key` (`example.com/v1/widgets`).
    pub fn known_type_by_key(&self, key: &str) -> Option<ResourceType> {
        self.catalog.known_type_by_key(key)
    }

    /// The scope of the watcher of `type_ref` in `cluster`, if one runs.
    pub fn scope(&self, cluster: &str, type_ref: &TypeRef) -> Option<WatchScope> {
        self.members.scope(cluster, type_ref)
    }

    /// The latest consistent snapshot of the index.
    pub fn snapshot(&self) -> Arc<Index> {
        self.published.snapshot()
    }

    /// Subscribes to the committed events of type `resource` (its key,
    /// `v1/pods`) in `namespace`, or in every namespace (see
    /// [`Published::subscribe`]). Subscribe before taking the snapshot to
    /// see every event after it.
    pub fn subscribe(&self, resource: &str, namespace: Option<&str>) -> Subscription {
        self.published.subscribe(resource, namespace)
    }

    /// The head RV whose events have all reached the fan-out (see
    /// [`Published::sent_head`]).
    pub fn sent_head(&self) -> u64 {
        self.published.sent_head()
    }

    /// Number of live watch subscriptions.
    pub fn watchers(&self) -> usize {
        self.published.watchers()
    }

    /// Events up to this RV were compacted away.
    pub fn compacted_rv(&self) -> u64 {
        self.published.compacted_rv()
    }

    /// Every committed event with `from < rv <= upto`, oldest first, when
    /// all of them are still among the recent ones in memory; `None` when
    /// some must be read from the store.
    pub fn recent_events(&self, from: u64, upto: u64) -> Option<Vec<Arc<StoredEvent>>> {
        self.published.recent_events(from, upto)
    }

    /// Waits until `check` finds what it looks for in a published snapshot,
    /// up to `deadline` (see [`Published::wait_for`]).
    pub async fn wait_for<T>(&self, deadline: tokio::time::Instant, check: impl FnMut(&Index) -> Option<T>) -> Option<T> {
        self.published.wait_for(deadline, check).await
    }

    /// A member's connection settings.
    pub fn member(&self, cluster: &str) -> Option<ClusterSpec> {
        self.members.member(cluster)
    }

    /// Names of the members.
    pub fn member_names(&self) -> Vec<String> {
        self.members.member_names()
    }

    /// Status of every watcher, by cluster and resource type.
    pub fn status(&self) -> BTreeMap<String, BTreeMap<String, WatcherStatus>> {
        self.members.status()
    }

    /// Status of `cluster`'s watchers, by resource type (see [`Members::status_of`]).
    pub fn status_of(&self, cluster: &str) -> BTreeMap<String, WatcherStatus> {
        self.members.status_of(cluster)
    }

    /// The signal of `cluster`'s restores (see [`WatcherReport::member_restored`]).
    pub fn restores(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64> {
        self.members.restores(cluster)
    }
}
