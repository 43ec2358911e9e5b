//! Messages between the actors.

use actix::Message;
use kubefold_engine::event::Change;
use kubefold_engine::object::Ingested;
use kubefold_engine::resources::TypeRef;

/// What a watcher hands the aggregator for one (cluster, resource type).
#[derive(Debug)]
pub enum WatchBatch {
    /// Changes seen on the watch stream, in order.
    Changes(Vec<Change>),
    /// The complete state from a fresh list: applied as a diff.
    Relist(Vec<Ingested>),
    /// A part of a fresh list too large for one batch, committed as it
    /// arrives (upserts only; no checkpoint): `first` starts a new list. A
    /// list's first part is applied before the member has sent the rest, so
    /// neither the whole list nor its events are ever held at once.
    RelistPart {
        /// This part starts a list (parts of an unfinished one are forgotten).
        first: bool,
        /// The objects.
        objects: Vec<Ingested>,
    },
    /// The last part of a list sent in parts: applied with the parts before
    /// it as [`WatchBatch::Relist`] (objects in none of them are deleted).
    RelistEnd(Vec<Ingested>),
    /// A bookmark: nothing changed up to the checkpoint.
    Bookmark,
}

/// A watcher's batch, with the member RV it reached. The reply comes once the
/// batch is committed, so a watcher awaiting it gets backpressure.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, String>")]
pub struct Ingest {
    /// The member cluster.
    pub cluster: String,
    /// The resource type key (`v1/pods`).
    pub resource: String,
    /// What happened.
    pub batch: WatchBatch,
    /// The member RV reached with this batch, persisted as the checkpoint.
    pub checkpoint: String,
    /// Which selected watcher sent it, for watchers the supervisor starts:
    /// the aggregator drops the batch when that watcher no longer runs and
    /// keeps only the objects of the namespaces it selects. `None` for
    /// watchers outside the selection (the resolver's).
    pub scope: Option<ScopeTicket>,
}

/// The identity of a selected watcher: the type it watches for the
/// selection and its generation ([`crate::fleet::WatchScope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeTicket {
    /// The selected type.
    pub type_ref: TypeRef,
    /// The watcher's generation.
    pub generation: u64,
}

/// The selection changed (or a cluster was added): objects of the
/// `clusters` that no running watcher's scope keeps become DELETED events,
/// and their checkpoints go.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, String>")]
pub struct Prune {
    /// The clusters to check.
    pub clusters: Vec<String>,
    /// Checkpoints (cluster, resource key) of watchers that stopped for good,
    /// removed after any batch of theirs still being committed.
    pub forget: Vec<(String, String)>,
}

/// A cluster was removed: its objects become DELETED events.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, String>")]
pub struct RemoveCluster {
    /// The cluster.
    pub cluster: String,
}

/// Stops an actor.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;
