//! Messages between the actors.

use actix::Message;
use kubefold_engine::event::Change;
use kubefold_engine::object::Ingested;

/// What a watcher hands the aggregator for one (cluster, resource type).
#[derive(Debug)]
pub enum WatchBatch {
    /// Changes seen on the watch stream, in order.
    Changes(Vec<Change>),
    /// The complete state from a fresh list: applied as a diff.
    Relist(Vec<Ingested>),
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
