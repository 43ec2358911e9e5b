//! Messages between the actors, by the actor that handles them. Each reply
//! that can fail carries the error enum of that boundary.

use std::sync::atomic::{AtomicUsize, Ordering};

use actix::Message;
use kubefold_engine::resources::TypeRef;
use kubefold_engine::selection::ResourceSelection;

pub use kubefold_engine::reflector::WatchBatch;

use crate::cluster::ClusterSpec;
use crate::resolver::EstimatorConfig;

// To a watcher's sink (the aggregator, or the resolver for its control plane).

/// A watcher's batch, with the member RV it reached. The reply comes once the
/// batch is committed, so a watcher awaiting it gets backpressure.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, IngestError>")]
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
    /// Counts the batch among those on their way until its sink takes it
    /// up ([`Queued::waiting`]).
    pub queued: Queued,
}

/// Batches made for a sink and not yet taken up by it, in this process.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// A batch's place among those on their way to a sink: counted from its
/// making until its sink takes it up (or it is dropped undelivered). The
/// aggregator commits a batch at once when no other is on its way, and
/// groups batches only when they queue up. The count is the process's:
/// batches on their way to the resolver count too, and can only make the
/// aggregator group a batch with those waiting in its mailbox.
#[derive(Debug)]
pub struct Queued(());

impl Queued {
    /// Counts one more batch on its way.
    pub fn new() -> Self {
        QUEUED.fetch_add(1, Ordering::AcqRel);
        Queued(())
    }

    /// How many batches are on their way, not yet taken up.
    pub fn waiting() -> usize {
        QUEUED.load(Ordering::Acquire)
    }
}

impl Default for Queued {
    fn default() -> Self {
        Queued::new()
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        QUEUED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a watcher's batch was not taken.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The batch's events could not be committed to the store.
    #[error(transparent)]
    CommitFailed(#[from] kubefold_store::Error),
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

// To the aggregator.

/// The selection changed (or a cluster was added): objects of the
/// `clusters` that no running watcher's scope keeps become DELETED events,
/// and their checkpoints go.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, crate::aggregator::Error>")]
pub struct Prune {
    /// The clusters to check.
    pub clusters: Vec<String>,
    /// Checkpoints (cluster, resource key) of watchers that stopped for good,
    /// removed after any batch of theirs still being committed.
    pub forget: Vec<(String, String)>,
}

/// A cluster was removed: its objects become DELETED events.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, crate::aggregator::Error>")]
pub struct RemoveCluster {
    /// The cluster.
    pub cluster: String,
}

/// Compacts the log now, as retention allows; replies with what was done.
#[derive(Debug, Message)]
#[rtype(result = "Result<kubefold_store::CompactStats, crate::aggregator::Error>")]
pub struct Compact;

/// Writes a consistent backup (between two commits) to a temporary file;
/// replies with its path.
#[derive(Debug, Message)]
#[rtype(result = "Result<std::path::PathBuf, crate::aggregator::Error>")]
pub struct Backup {
    /// Keep the credentials of registered members (tokens, inline
    /// kubeconfigs); without it they are left out.
    pub include_credentials: bool,
}

// To the supervisor.

/// Adds (or replaces) a member cluster and starts watching it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AddCluster(pub ClusterSpec);

/// Starts watching a member this replica took over from another (over a
/// shared log): its watchers resume from `checkpoints` (resource ->
/// member resourceVersion, as the log holds them), listing only the types
/// without one.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TakeCluster {
    /// The member.
    pub spec: ClusterSpec,
    /// Its checkpoints by resource key.
    pub checkpoints: std::collections::BTreeMap<String, String>,
}

/// Stops watching a member another replica owns now (over a shared log):
/// its watchers stop, its objects stay (the new owner keeps them current),
/// and it can still be reached for edits.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ReleaseCluster(pub String);

/// Makes a member known without watching it (over a shared log: a member
/// recorded there, which another replica may watch): it is served and
/// reachable for edits. Its watchers restart with the new spec when they
/// run here.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct KnowCluster(pub ClusterSpec);

/// Forgets a member another replica removed (over a shared log): its
/// watchers stop and it is no longer a member here; its objects' deletions
/// come through the log.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ForgetCluster(pub String);

/// Removes a member cluster: its watchers stop and its objects become DELETED events.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, crate::supervisor::Error>")]
pub struct DropCluster(pub String);

/// Lists the member clusters.
#[derive(Debug, Message)]
#[rtype(result = "Vec<ClusterSpec>")]
pub struct ListClusters;

/// Puts a (validated) resource selection in force: discovery follows at
/// once, watchers start and stop, and objects no longer selected become
/// DELETED events. Replies with their number.
#[derive(Debug, Message)]
#[rtype(result = "Result<usize, crate::supervisor::Error>")]
pub struct SetSelection(pub ResourceSelection);

/// Lists one type of a member again from scratch (its watcher restarted
/// without its checkpoint): objects whose stored version was lost to
/// storage damage are rebuilt from the member.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Relist {
    /// The member cluster.
    pub cluster: String,
    /// The resource type key (`v1/pods`).
    pub resource: String,
}

// To the resolver.

/// Sets the member clusters whose endpoints are kept.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetMembers(pub Vec<String>);

/// Replaces the estimator configuration (restarting the control-plane
/// watchers when the control plane or the namespace changed).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), crate::resolver::Error>")]
pub struct SetConfig(pub EstimatorConfig);

/// Probes every endpoint now.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ProbeNow;

// To any actor.

/// Stops an actor.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;
