//! The `Aggregator` actor owns the merged index, through its
//! [`Reflector`], and the write side of the store: for each watcher's batch
//! it checks the watcher's scope, lets the reflector turn the batch into
//! events numbered with the next global resource versions, stamps them,
//! commits them (events, checkpoints, head RV) atomically, and then
//! publishes the new snapshot and the events. It also owns the log's upkeep
//! (compaction, index snapshots, backups, the repair of damage found while
//! serving), which runs off its thread.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, ActorFutureExt, AsyncContext, AtomicResponse, Context, Handler, ResponseActFuture, WrapFuture};
use kubefold_engine::event::ObjectKey;
use kubefold_engine::object::ServedBody;
use kubefold_engine::reflector::Reflector;
use kubefold_store::{Commit, Store};
use thiserror::Error;
use tracing::{debug, error, info};

use crate::fleet::{Fleet, Publisher};
pub use crate::messages::{Backup, Compact};
use crate::messages::{Ingest, IngestError, Prune, Queued, RemoveCluster};

mod damage;
mod group;
mod replica;
pub use damage::SetRelister;
pub use replica::{ApplyReplicated, CatchUp};

/// Errors of the aggregator's requests.
#[derive(Debug, Error)]
pub enum Error {
    /// Events could not be committed, or the objects to delete read.
    #[error(transparent)]
    CommitFailed(#[from] kubefold_store::Error),
    /// The compaction floor could not be computed, or compaction failed.
    #[error("{0}")]
    CompactionFailed(#[source] kubefold_store::Error),
    /// The backup file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    BackupFileFailed {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The backup could not be written.
    #[error("{0}")]
    BackupFailed(#[source] kubefold_store::Error),
    /// The thread doing the work stopped before it finished.
    #[error("the {0} thread failed")]
    ThreadFailed(&'static str),
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Retention of the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Retention {
    /// Keep at most this many events (the newest).
    #[serde(default = "default_max_events")]
    pub max_events: u64,
    /// Keep no event older than this, in seconds.
    #[serde(default = "default_max_age_seconds")]
    pub max_age_seconds: u64,
    /// Seconds between compaction passes.
    #[serde(default = "default_compaction_interval_seconds")]
    pub compaction_interval_seconds: u64,
}

/// 1,000,000 events: far more than kube-apiserver's in-memory watch cache
/// window, since kubefold's history is on disk.
pub fn default_max_events() -> u64 {
    1_000_000
}

/// One hour (etcd compacts every 5 minutes behind kube-apiserver).
pub fn default_max_age_seconds() -> u64 {
    3600
}

/// One minute.
pub fn default_compaction_interval_seconds() -> u64 {
    60
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_events: default_max_events(),
            max_age_seconds: default_max_age_seconds(),
            compaction_interval_seconds: default_compaction_interval_seconds(),
        }
    }
}

/// An index snapshot is written once this many events were committed
/// after the last one: a restart after a crash then replays at most about
/// this many events of the log on top of the snapshot.
const SNAPSHOT_AFTER_EVENTS: u64 = 100_000;

/// ... or once this much time has passed with any event committed.
const SNAPSHOT_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// How often the aggregator checks whether a snapshot is due.
const SNAPSHOT_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The aggregator's state.
pub struct Aggregator {
    /// The index, with the tombstones and lists in progress that apply batches to it.
    reflector: Reflector,
    store: Store,
    fleet: Arc<Fleet>,
    publisher: Publisher,
    retention: Retention,
    compacting: bool,
    /// The RV of the last index snapshot written (0: none since start).
    snapshot_rv: u64,
    /// When it was written.
    snapshot_at: Instant,
    /// A snapshot is being written.
    snapshotting: bool,
    /// The log shared with other replicas, if any (see [`replica`]).
    shared: Option<Arc<dyn kubefold_store::shared::SharedLog>>,
    /// The revision of the shared log applied (0 without one).
    applied_revision: u64,
    /// Events applied from the shared log since the last index snapshot.
    applied_since_snapshot: u64,
    /// A repair of damaged records is running (see [`damage`]).
    repairing: bool,
    /// Objects whose current version was damaged, waiting to be rebuilt.
    rebuilding: Vec<damage::Rebuilding>,
    /// Where members' types are listed again (the supervisor).
    relister: Option<actix::Recipient<crate::messages::Relist>>,
    /// The batches staged and not yet committed (see [`group`]).
    pending: group::Pending,
}

/// What became of a watcher's batch.
enum Staged {
    /// Done: dropped, or committed on its own (a shared log); its events.
    Done(usize),
    /// Staged in the group in progress, answered once the group is committed.
    Waiting(usize),
}

impl Aggregator {
    /// An aggregator continuing from the current snapshot of the fleet it
    /// publishes to.
    pub fn new(publisher: Publisher, retention: Retention) -> Aggregator {
        let fleet = publisher.fleet().clone();
        Aggregator {
            reflector: Reflector::new((*fleet.snapshot()).clone()),
            store: fleet.store().clone(),
            publisher,
            retention,
            compacting: false,
            snapshot_rv: 0,
            snapshot_at: Instant::now(),
            snapshotting: false,
            shared: fleet.shared().cloned(),
            applied_revision: kubefold_store::shared::revision_of(fleet.snapshot().head_rv()),
            applied_since_snapshot: 0,
            repairing: false,
            rebuilding: Vec::new(),
            relister: None,
            pending: group::Pending::default(),
            fleet,
        }
    }

    /// Whether an index snapshot is due now. With a short retention it is
    /// written at least every half retention window: a snapshot older than
    /// the compaction floor cannot be used (the events after it are gone).
    ///
    /// While a member's list is being committed in parts (an initial sync),
    /// only the time limit counts: each snapshot writes the whole index, so
    /// one per 100,000 events of a sync would write it about ten times
    /// over during a 1M sync; the one after the sync covers it all.
    fn snapshot_due(&self) -> bool {
        let head = self.reflector.index().head_rv();
        let every = SNAPSHOT_AFTER_EVENTS.min(self.retention.max_events / 2).max(1);
        // On a shared log resourceVersions are sparse: its events are counted.
        let since = match self.shared {
            Some(_) => self.applied_since_snapshot,
            None => head - self.snapshot_rv.min(head),
        };
        let by_events = !self.reflector.is_relisting() && (since >= every || self.snapshot_rv == 0);
        !self.snapshotting && head > self.snapshot_rv && (by_events || self.snapshot_at.elapsed() >= SNAPSHOT_AFTER)
    }

    /// Writes an index snapshot off the actor thread (the clone is O(1)),
    /// on a background thread: it is due when a relist ends, while reads
    /// are still being served.
    fn start_snapshot(&mut self, ctx: &mut Context<Self>) {
        self.snapshotting = true;
        let (store, index) = (self.store.clone(), self.reflector.index().clone());
        let started = Instant::now();
        let write = crate::background::run("index-snapshot", move || store.write_snapshot(&index));
        ctx.spawn(actix::WrapFuture::into_actor(write, self).map(move |result, this: &mut Aggregator, _| {
            this.snapshotting = false;
            match result {
                Ok(Ok(Some(stats))) => {
                    this.snapshot_rv = stats.rv;
                    this.applied_since_snapshot = 0;
                    this.snapshot_at = Instant::now();
                    let seconds = started.elapsed().as_secs_f64();
                    metrics::histogram!("kubefold_index_snapshot_duration_seconds").record(seconds);
                    metrics::gauge!("kubefold_index_snapshot_bytes").set(stats.bytes as f64);
                    info!(rv = stats.rv, objects = stats.objects, bytes = stats.bytes, seconds, "Index snapshot written.");
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => error!(error = %e, "Index snapshot failed."),
                Err(_) => error!("Index snapshot thread failed."),
            }
        }));
    }

    /// The floor retention allows now.
    fn floor(&self) -> Result<u64, kubefold_store::Error> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        // On a shared log resourceVersions are sparse (see
        // `kubefold_store::shared`): `maxEvents` bounds transactions there.
        let max_events = match self.shared {
            Some(_) => self.retention.max_events.saturating_mul(kubefold_store::shared::MAX_EVENTS_PER_REVISION as u64),
            None => self.retention.max_events,
        };
        self.store.retention_floor(max_events, self.retention.max_age_seconds.saturating_mul(1000), now)
    }

    /// Scope check, reflector, stamp, commit, publish: one batch,
    /// committed (with the group in progress, if any) before it returns;
    /// returns the number of events.
    pub fn ingest(&mut self, msg: Ingest) -> Result<usize, kubefold_store::Error> {
        match self.stage_ingest(msg, None)? {
            Staged::Done(count) => Ok(count),
            Staged::Waiting(count) => self.finish_group().map(|()| count),
        }
    }

    /// Scope check, reflector, stamp, then the batch staged in the group
    /// in progress (`to` is answered once the group is committed); with a
    /// shared log, committed at once.
    fn stage_ingest(&mut self, msg: Ingest, to: Option<group::ReplySlot>) -> Result<Staged, kubefold_store::Error> {
        let started = Instant::now();
        let Ingest { cluster, resource, mut batch, checkpoint, scope, queued } = msg;
        // Taken up: no longer among the batches on their way.
        drop(queued);
        if let Some(ticket) = scope {
            // A watcher the selection no longer runs (stopped, or replaced
            // by one with other namespaces) sends nothing more.
            let current = self.fleet.scope(&cluster, &ticket.type_ref);
            let Some(current) = current.filter(|s| s.generation == ticket.generation) else {
                debug!(cluster = %cluster, resource = %resource, "Batch of a stopped watcher dropped.");
                return Ok(Staged::Done(0));
            };
            batch.retain(|i| current.namespaces.allows(&i.namespace));
        }
        // A part of a list moves no checkpoint: a restart before the list's
        // end lists again.
        let checkpoints = match batch.is_part() {
            true => Vec::new(),
            false => vec![(cluster.clone(), resource.clone(), checkpoint)],
        };
        // The index to go back to should the batch fail: taken once a group
        // (a clone after a publication makes the next change of every node
        // a copy, and 1,000 members' keys interleave, so nearly every
        // object of a batch is in a node of its own).
        let before = (self.shared.is_some() || self.pending.is_empty()).then(|| self.reflector.index().clone());
        let store = &self.store;
        let mut events = self.reflector.apply(&cluster, &resource, batch, |rv| store.body(rv).ok().flatten());
        stamp(&mut events);
        if let Some(shared) = self.shared.clone() {
            // The events reach the index as the shared log gives them back.
            self.reflector.restore_index(before.expect("taken with a shared log"));
            let count = self.commit_shared(&shared, events, checkpoints, Vec::new())?;
            metrics::counter!("kubefold_events_ingested_total", "cluster" => cluster.clone(), "resource" => resource.clone())
                .increment(count as u64);
            metrics::histogram!("kubefold_commit_duration_seconds").record(started.elapsed().as_secs_f64());
            metrics::histogram!("kubefold_commit_batch_events").record(count as f64);
            return Ok(Staged::Done(count));
        }
        let count = events.len();
        let commit = Commit { events, checkpoints };
        self.stage_commit(before, commit, group::Reply { to, count, cluster, resource, started })?;
        Ok(Staged::Waiting(count))
    }

    /// Turns every object of `cluster` into a DELETED event.
    pub fn remove_cluster(&mut self, cluster: &str) -> Result<usize, kubefold_store::Error> {
        self.finish_group()?;
        let doomed = self.select(&[cluster], |_, _| true);
        let bodies = read_bodies(&self.store, &doomed)?;
        self.finish_removal(cluster, bodies)
    }

    /// The end of [`Aggregator::remove_cluster`], once the last bodies of
    /// its objects are read.
    fn finish_removal(&mut self, cluster: &str, bodies: Bodies) -> Result<usize, kubefold_store::Error> {
        self.finish_group()?;
        let before = self.reflector.index().clone();
        let events = self.reflector.remove_cluster(cluster, |rv| Ok::<_, std::convert::Infallible>(bodies.get(&rv).cloned()));
        let events = events.unwrap_or_else(|never| match never {});
        if let Some(shared) = self.shared.clone() {
            self.reflector.restore_index(before);
            let mut events = events;
            stamp(&mut events);
            return self.commit_shared(&shared, events, Vec::new(), vec![(cluster.to_string(), String::new())]);
        }
        let count = self.commit_deletions(before, events)?;
        self.store.remove_checkpoints(cluster)?;
        info!(cluster = %cluster, deleted = count, "Cluster removed.");
        Ok(count)
    }

    /// Turns the objects of `clusters` that no running watcher keeps (their
    /// type is not selected there, or their namespace is not) into DELETED
    /// events, and forgets the checkpoints of types no longer watched.
    /// Objects of types kubefold cannot name (unknown keys) are kept.
    pub fn prune(&mut self, clusters: &[String], forget: &[(String, String)]) -> Result<usize, kubefold_store::Error> {
        self.finish_group()?;
        let plan = self.plan_prune(clusters, forget);
        let bodies = read_bodies(&self.store, &plan.doomed)?;
        self.finish_prune(plan, bodies)
    }

    /// What [`Aggregator::prune`] deletes and forgets, as the scopes are now.
    fn plan_prune(&self, clusters: &[String], forget: &[(String, String)]) -> PrunePlan {
        let fleet = &self.fleet;
        let mut unwatched: std::collections::BTreeSet<(String, String)> = std::collections::BTreeSet::new();
        let mut types: HashMap<String, Option<kubefold_engine::resources::TypeRef>> = HashMap::new();
        let of_clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
        let doomed = self.select(&of_clusters, |resource, key| {
            let type_ref = types.entry(resource.to_string()).or_insert_with(|| fleet.known_type_by_key(resource).map(|r| r.type_ref()));
            let Some(type_ref) = type_ref else { return false };
            match fleet.scope(&key.cluster, type_ref) {
                Some(scope) => !scope.namespaces.allows(&key.namespace),
                None => {
                    unwatched.insert((key.cluster.clone(), resource.to_string()));
                    true
                }
            }
        });
        let forget = unwatched.into_iter().chain(forget.iter().cloned()).collect();
        PrunePlan { clusters: clusters.to_vec(), doomed, forget }
    }

    /// The end of [`Aggregator::prune`], once the last bodies of the
    /// objects it deletes are read.
    fn finish_prune(&mut self, plan: PrunePlan, bodies: Bodies) -> Result<usize, kubefold_store::Error> {
        self.finish_group()?;
        let mut doomed: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (resource, key, _) in plan.doomed {
            doomed.entry(resource).or_default().insert(key);
        }
        let before = self.reflector.index().clone();
        let clusters: Vec<&str> = plan.clusters.iter().map(String::as_str).collect();
        let events = self.reflector.remove_where(
            &clusters,
            |resource, key| doomed.get(resource).is_some_and(|keys| keys.contains(key)),
            |rv| Ok::<_, std::convert::Infallible>(bodies.get(&rv).cloned()),
        );
        let events = events.unwrap_or_else(|never| match never {});
        if let Some(shared) = self.shared.clone() {
            self.reflector.restore_index(before);
            let mut events = events;
            stamp(&mut events);
            return self.commit_shared(&shared, events, Vec::new(), plan.forget);
        }
        let count = self.commit_deletions(before, events)?;
        for (cluster, resource) in &plan.forget {
            self.store.remove_checkpoint(cluster, resource)?;
        }
        if count > 0 {
            info!(clusters = ?plan.clusters, deleted = count, "Objects no longer selected removed.");
        }
        Ok(count)
    }

    /// The objects of `clusters` for which `doomed(resource, key)` holds,
    /// with the RV of their current version; only those clusters' own maps
    /// are walked.
    fn select(&self, clusters: &[&str], mut doomed: impl FnMut(&str, &ObjectKey) -> bool) -> Vec<(String, ObjectKey, u64)> {
        let index = self.reflector.index();
        let mut selected = Vec::new();
        let mut clusters = clusters.to_vec();
        clusters.sort_unstable();
        clusters.dedup();
        for resource in index.resource_keys() {
            for cluster in &clusters {
                let objects = index.range_of_cluster(&resource, cluster, None, None).filter(|(key, _)| doomed(&resource, key));
                selected.extend(objects.map(|(key, entry)| (resource.clone(), key.clone(), entry.rv)));
            }
        }
        selected
    }

    /// Stamps, commits and publishes the deletions the reflector made from
    /// the index `before`, as one batch; puts `before` back when the commit fails.
    fn commit_deletions(&mut self, before: kubefold_engine::index::Index, mut events: Vec<kubefold_engine::event::StoredEvent>) -> Result<usize, kubefold_store::Error> {
        if events.is_empty() {
            return Ok(0);
        }
        stamp(&mut events);
        // Callers finished the group in progress before `before`.
        debug_assert!(self.pending.is_empty());
        let commit = Commit { events, checkpoints: Vec::new() };
        if let Err(e) = self.store.commit(&commit) {
            self.reflector.restore_index(before);
            commit_failed(&e, "", "");
            return Err(e);
        }
        let count = commit.events.len();
        self.publisher.publish(self.reflector.index().clone(), commit.events);
        Ok(count)
    }

    /// The RV of the last event committed.
    pub fn head_rv(&self) -> u64 {
        self.reflector.index().head_rv()
    }
}

/// The last bodies of objects about to be deleted, by the RV of their current version.
type Bodies = HashMap<u64, ServedBody>;

/// What a prune deletes (type key, object key, RV) and the checkpoints it
/// forgets (cluster, type key).
struct PrunePlan {
    clusters: Vec<String>,
    doomed: Vec<(String, ObjectKey, u64)>,
    forget: Vec<(String, String)>,
}

/// Reads the last bodies of the `doomed` objects (those the store no longer
/// has are kept rather than deleted without a body).
fn read_bodies(store: &Store, doomed: &[(String, ObjectKey, u64)]) -> Result<Bodies, kubefold_store::Error> {
    let mut bodies = HashMap::with_capacity(doomed.len());
    for (_, _, rv) in doomed {
        if let Some(event) = store.event(*rv)? {
            bodies.insert(*rv, event.body);
        }
    }
    Ok(bodies)
}

/// Stamps events with the commit time.
fn stamp(events: &mut [kubefold_engine::event::StoredEvent]) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for e in events {
        e.time_ms = now;
    }
}

impl Actor for Aggregator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Bounded mailbox: watchers that `send` more than this wait.
        ctx.set_mailbox_capacity(64);
        // A replica over a shared log applies what it holds beyond the local copy.
        if self.shared.is_some() {
            match self.catch_up() {
                Ok(revision) => info!(revision, head_rv = self.head_rv(), "Shared log applied."),
                Err(e) => error!(error = %e, "Reading the shared log failed; its watch tries again."),
            }
        }
        let every = std::time::Duration::from_secs(self.retention.compaction_interval_seconds.max(1));
        ctx.run_interval(every, |this, _ctx| {
            if this.compacting {
                return;
            }
            let _ = this.finish_group();
            let floor = match this.floor() {
                Ok(f) => f,
                Err(e) => {
                    error!(error = %e, "Compaction floor unreadable.");
                    return;
                }
            };
            if floor <= this.fleet.compacted_rv() {
                return;
            }
            this.compacting = true;
            // Readers older than the floor get 410 from now on; the deletion
            // itself runs off the actor thread (see Store::compact for why
            // that is safe while commits go on).
            this.publisher.set_compacted_rv(floor);
            let (store, live) = (this.store.clone(), this.reflector.index().clone());
            let shared = this.shared.clone();
            let started = Instant::now();
            let wait = crate::background::run("store-compact", move || {
                let stats = store.compact(floor, &live)?;
                // A damaged record waiting for a compaction past it (an
                // object deleted before its rebuild) is gone now.
                store.settle_damage()?;
                // The shared log's events up to the same floor go too, but
                // for those this copy kept (live versions, and the versions
                // before retained events, which rewinds read).
                if let Some(shared) = shared {
                    match shared.compact(stats.floor, &|rv| store.holds(rv).unwrap_or(true)) {
                        Ok(removed) => info!(floor, removed, "Shared log compacted."),
                        Err(e) => error!(error = %e, "Shared log compaction failed."),
                    }
                }
                Ok::<_, kubefold_store::Error>(stats)
            });
            _ctx.spawn(
                wait.into_actor(this).map(move |result, this: &mut Aggregator, _| {
                    this.compacting = false;
                    match result {
                        Ok(Ok(stats)) => {
                            metrics::counter!("kubefold_compacted_events_total").increment(stats.removed);
                            metrics::gauge!("kubefold_compacted_resource_version").set(stats.floor as f64);
                            let seconds = started.elapsed().as_secs_f64();
                            info!(floor = stats.floor, removed = stats.removed, kept = stats.kept, seconds, "Event log compacted.");
                        }
                        Ok(Err(e)) => error!(error = %e, "Compaction failed."),
                        _ => error!("Compaction thread failed."),
                    }
                }),
            );
        });
        ctx.run_interval(damage::DAMAGE_CHECK_EVERY, |this, ctx| {
            let _ = this.finish_group();
            this.check_damage(ctx);
        });
        ctx.run_interval(SNAPSHOT_CHECK_EVERY, |this, ctx| {
            let _ = this.finish_group();
            if this.snapshot_due() {
                this.start_snapshot(ctx);
            }
        });
        let index = self.reflector.index();
        info!(head_rv = index.head_rv(), objects = index.total(), "Aggregator started.");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let _ = self.finish_group();
        if let Err(e) = self.store.flush() {
            error!(error = %e, "Store flush at shutdown failed.");
        }
    }
}

/// Counts a failed commit by its cause and says in an ERROR line what the
/// operator does; the watcher whose batch it was lists or watches again
/// from its last committed checkpoint, so nothing is lost once writes
/// succeed again.
fn commit_failed(e: &kubefold_store::Error, cluster: &str, resource: &str) {
    let cause = e.cause();
    metrics::counter!("kubefold_commit_failures_total", "cause" => cause.label()).increment(1);
    error!(
        cluster = %cluster,
        resource = %resource,
        cause = cause.describe(),
        error = %e,
        "Commit failed: reads go on from memory, member changes are not published until commits succeed again; {}.",
        cause.advice()
    );
}

impl Handler<Ingest> for Aggregator {
    type Result = group::IngestReply;

    /// The batch is staged; the answer comes once its group is committed
    /// (see [`group`]).
    fn handle(&mut self, msg: Ingest, ctx: &mut Self::Context) -> Self::Result {
        let (cluster, resource) = (msg.cluster.clone(), msg.resource.clone());
        let slot = group::ReplySlot::default();
        match self.stage_ingest(msg, Some(slot.clone())) {
            Err(e) => {
                commit_failed(&e, &cluster, &resource);
                group::IngestReply::now(Err(IngestError::CommitFailed(e)))
            }
            Ok(Staged::Done(count)) => group::IngestReply::now(Ok(count)),
            // No other batch on its way: committed at once, as its watcher
            // goes on parsing its next one. Batches group only when they
            // queue up.
            Ok(Staged::Waiting(count)) if self.pending.full() || Queued::waiting() == 0 => {
                group::IngestReply::now(self.finish_group().map(|()| count).map_err(IngestError::CommitFailed))
            }
            Ok(Staged::Waiting(_)) => {
                if !self.pending.scheduled {
                    self.pending.scheduled = true;
                    ctx.notify(group::FinishGroup);
                }
                group::IngestReply::later(slot)
            }
        }
    }
}

impl Handler<Compact> for Aggregator {
    type Result = ResponseActFuture<Self, Result<kubefold_store::CompactStats>>;

    /// Readers older than the floor get 410 at once; the deletion runs off
    /// the actor's thread while commits go on (see `Store::compact`).
    fn handle(&mut self, _msg: Compact, _ctx: &mut Self::Context) -> Self::Result {
        let _ = self.finish_group();
        let floor = match self.floor() {
            Ok(floor) => floor,
            Err(e) => return Box::pin(actix::fut::ready(Err(Error::CompactionFailed(e)))),
        };
        self.publisher.set_compacted_rv(floor);
        let (store, live) = (self.store.clone(), self.reflector.index().clone());
        let started = Instant::now();
        let compact = crate::background::run("store-compact", move || store.compact(floor, &live));
        Box::pin(compact.into_actor(self).map(move |result, _, _| {
            let stats = result.map_err(|_| Error::ThreadFailed("compaction"))?.map_err(Error::CompactionFailed)?;
            let seconds = started.elapsed().as_secs_f64();
            info!(floor = stats.floor, removed = stats.removed, kept = stats.kept, seconds, "Event log compacted.");
            Ok(stats)
        }))
    }
}

impl Handler<Backup> for Aggregator {
    type Result = AtomicResponse<Self, Result<std::path::PathBuf>>;

    /// The backup is written off the actor's thread, and the actor handles
    /// no other message (no commit) until it is done: a consistent copy.
    fn handle(&mut self, msg: Backup, _ctx: &mut Self::Context) -> Self::Result {
        let _ = self.finish_group();
        let head_rv = self.head_rv();
        let store = self.store.clone();
        let include_credentials = msg.include_credentials;
        let write = tokio::task::spawn_blocking(move || {
            let path = std::env::temp_dir().join(format!("kubefold-backup-{}-{head_rv}.bin", std::process::id()));
            // A backup may hold member credentials: readable by kubefold's user only.
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(&path).map_err(|source| Error::BackupFileFailed { path: path.clone(), source })?;
            let mut writer = std::io::BufWriter::new(file);
            let records = crate::cluster::backup(&store, &mut writer, include_credentials).map_err(Error::BackupFailed)?;
            info!(records, head_rv, include_credentials, "Backup written.");
            Ok(path)
        });
        AtomicResponse::new(Box::pin(write.into_actor(self).map(|result, _, _| result.map_err(|_| Error::ThreadFailed("backup"))?)))
    }
}

impl Handler<Prune> for Aggregator {
    type Result = AtomicResponse<Self, Result<usize>>;

    /// The last bodies of the objects to delete are read off the actor's
    /// thread; no other message (no commit) is handled meanwhile.
    fn handle(&mut self, msg: Prune, _ctx: &mut Self::Context) -> Self::Result {
        let _ = self.finish_group();
        let plan = self.plan_prune(&msg.clusters, &msg.forget);
        let (store, doomed) = (self.store.clone(), plan.doomed.clone());
        let read = tokio::task::spawn_blocking(move || read_bodies(&store, &doomed));
        AtomicResponse::new(Box::pin(read.into_actor(self).map(|bodies, this: &mut Aggregator, _| {
            let bodies = bodies.map_err(|_| Error::ThreadFailed("prune"))?;
            bodies.and_then(|bodies| this.finish_prune(plan, bodies)).map_err(|e| {
                error!(error = %e, "Pruning deselected objects failed.");
                Error::CommitFailed(e)
            })
        })))
    }
}

impl Handler<RemoveCluster> for Aggregator {
    type Result = AtomicResponse<Self, Result<usize>>;

    /// As [`Prune`]: the last bodies are read off the actor's thread.
    fn handle(&mut self, msg: RemoveCluster, _ctx: &mut Self::Context) -> Self::Result {
        let _ = self.finish_group();
        let cluster = msg.cluster;
        let (store, doomed) = (self.store.clone(), self.select(&[cluster.as_str()], |_, _| true));
        let read = tokio::task::spawn_blocking(move || read_bodies(&store, &doomed));
        AtomicResponse::new(Box::pin(read.into_actor(self).map(move |bodies, this: &mut Aggregator, _| {
            let bodies = bodies.map_err(|_| Error::ThreadFailed("cluster removal"))??;
            Ok(this.finish_removal(&cluster, bodies)?)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::event::{Change, EventType, StoredEvent};
    use kubefold_engine::index::Index;
    use crate::messages::WatchBatch;
    use kubefold_engine::names::NameStyle;
    use kubefold_engine::object::{ingest, Ingested};
    use kubefold_engine::resources;
    use kubefold_store::Options;

    fn pod(name: &str, member_rv: &str) -> Ingested {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(r#"{{"metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{member_rv}"}}}}"#);
        ingest(&pods, "m1", raw.as_bytes()).unwrap()
    }

    fn send(aggregator: &mut Aggregator, batch: WatchBatch, checkpoint: &str) -> usize {
        let msg = Ingest { cluster: "m1".into(), resource: "v1/pods".into(), batch, checkpoint: checkpoint.into(), scope: None, queued: Default::default() };
        aggregator.ingest(msg).unwrap()
    }

    fn names(aggregator: &Aggregator) -> Vec<String> {
        aggregator.reflector.index().range("v1/pods", None, None).map(|(k, _)| k.name.clone()).collect()
    }

    /// kubefold starting on `dir`: the store recovered, its fleet and aggregator.
    pub(super) fn start(dir: &std::path::Path) -> (Arc<Fleet>, Aggregator) {
        let store = kubefold_store::Store::open(dir, &Options::default()).unwrap();
        let recovered = store.recover().unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, recovered.index, recovered.compacted_rv);
        let aggregator = Aggregator::new(fleet.take_publisher().unwrap(), Retention::default());
        (fleet, aggregator)
    }

    fn checkpoint(dir: &std::path::Path) -> Option<String> {
        let store = kubefold_store::Store::open(dir, &Options::default()).unwrap();
        store.recover().unwrap().checkpoints.get(&("m1".to_string(), "v1/pods".to_string())).cloned()
    }

    /// A list in parts: each part is committed (and published) as it comes,
    /// without a checkpoint; the end deletes what no part of this list had.
    /// A list that starts again forgets the parts of the one it replaces.
    #[test]
    fn lists_in_parts_commit_as_they_come_and_delete_at_their_end() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (fleet, mut aggregator) = start(dir.path());
            send(&mut aggregator, WatchBatch::Relist(vec![pod("a", "1"), pod("b", "1"), pod("c", "1")]), "10");

            // A list that breaks off after its first part ...
            send(&mut aggregator, WatchBatch::RelistPart { first: true, objects: vec![pod("a", "1"), pod("d", "11")] }, "");
            assert_eq!(names(&aggregator), ["a", "b", "c", "d"], "a part is applied at once");
            assert_eq!(fleet.snapshot().len("v1/pods"), 4, "and published");
            // ... and the list that replaces it, in three parts.
            let events = send(&mut aggregator, WatchBatch::RelistPart { first: true, objects: vec![pod("b", "1"), pod("e", "12")] }, "");
            assert_eq!(events, 1, "b unchanged, e added");
            send(&mut aggregator, WatchBatch::RelistPart { first: false, objects: vec![pod("c", "13"), pod("b", "14")] }, "");
            assert_eq!(names(&aggregator), ["a", "b", "c", "d", "e"], "nothing is deleted before the end");
            let b = |a: &Aggregator| a.reflector.index().range("v1/pods", None, None).find(|(k, _)| k.name == "b").unwrap().1.member_rv().to_string();
            assert_eq!(b(&aggregator), "1", "an object listed twice keeps its first version");
            let events = send(&mut aggregator, WatchBatch::RelistEnd(vec![pod("f", "15")]), "20");
            // f added; a and d (only in the broken-off list) deleted.
            assert_eq!(events, 3);
            assert_eq!(names(&aggregator), ["b", "c", "e", "f"]);
        }
        assert_eq!(checkpoint(dir.path()).as_deref(), Some("20"), "the end writes the checkpoint");

        // Parts alone move no checkpoint: a restart lists again.
        let (_, mut aggregator) = start(dir.path());
        send(&mut aggregator, WatchBatch::RelistPart { first: true, objects: vec![pod("g", "30")] }, "");
        drop(aggregator);
        assert_eq!(checkpoint(dir.path()).as_deref(), Some("20"));
    }

    /// The recent events a resuming watch replays from memory are every
    /// committed event after its RV, in order; once the oldest it needs was
    /// let go (beyond `RECENT_EVENTS`), or was committed before this start
    /// of kubefold, it is told to read the store.
    #[test]
    fn recent_events_are_every_event_after_an_rv_or_none() {
        use crate::fleet::RECENT_EVENTS;
        let dir = tempfile::tempdir().unwrap();
        {
            let (fleet, mut aggregator) = start(dir.path());
            send(&mut aggregator, WatchBatch::Relist((0..10).map(|i| pod(&format!("p{i}"), "1")).collect()), "1");
            send(&mut aggregator, WatchBatch::Changes(vec![Change::Upsert(pod("p3", "2")), Change::Delete(pod("p4", "3"))]), "3");
            let rvs = |events: Vec<Arc<StoredEvent>>| events.iter().map(|e| e.rv).collect::<Vec<_>>();
            assert_eq!(rvs(fleet.recent_events(0, 12).unwrap()), (1..=12).collect::<Vec<_>>());
            assert_eq!(rvs(fleet.recent_events(9, 11).unwrap()), [10, 11]);
            assert_eq!(rvs(fleet.recent_events(12, 12).unwrap()), Vec::<u64>::new());
            let last = fleet.recent_events(11, 12).unwrap();
            assert_eq!((last[0].key.name.as_str(), last[0].event_type), ("p4", EventType::Deleted));
            // More events than are kept: the oldest are no longer offered.
            let n = RECENT_EVENTS + 10;
            send(&mut aggregator, WatchBatch::Changes((0..n).map(|i| Change::Upsert(pod(&format!("q{i}"), &(10 + i).to_string()))).collect()), "");
            let head = aggregator.head_rv();
            assert_eq!(head, 12 + n as u64);
            assert!(fleet.recent_events(0, head).is_none(), "the first events were let go");
            assert!(fleet.recent_events(head - RECENT_EVENTS as u64 - 1, head).is_none());
            let kept = fleet.recent_events(head - RECENT_EVENTS as u64, head).unwrap();
            assert_eq!(rvs(kept), (head - RECENT_EVENTS as u64 + 1..=head).collect::<Vec<_>>());
        }
        // After a restart only what this start committed is in memory.
        let (fleet, mut aggregator) = start(dir.path());
        let head = fleet.snapshot().head_rv();
        assert_eq!(head, 12 + RECENT_EVENTS as u64 + 10);
        assert!(fleet.recent_events(head - 1, head).is_none(), "events before the start are in the store only");
        assert_eq!(fleet.recent_events(head, head).map(|e| e.len()), Some(0));
        send(&mut aggregator, WatchBatch::Changes(vec![Change::Upsert(pod("r", "99999"))]), "");
        assert_eq!(fleet.recent_events(head, head + 1).unwrap()[0].key.name, "r");
    }

    /// Snapshots wait for the end of a list committed in parts (each would
    /// write the whole index); after it, one is due at once.
    #[test]
    fn snapshots_wait_for_a_list_in_parts_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = kubefold_store::Store::open(dir.path(), &Options::default()).unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::default(), 0);
        // A snapshot every 2 events.
        let retention = Retention { max_events: 4, ..Retention::default() };
        let mut aggregator = Aggregator::new(fleet.take_publisher().unwrap(), retention);
        aggregator.snapshot_rv = 1;
        send(&mut aggregator, WatchBatch::RelistPart { first: true, objects: (0..5).map(|i| pod(&format!("p{i}"), "1")).collect() }, "");
        send(&mut aggregator, WatchBatch::RelistPart { first: false, objects: (5..9).map(|i| pod(&format!("p{i}"), "1")).collect() }, "");
        assert_eq!(aggregator.head_rv(), 9);
        assert!(!aggregator.snapshot_due(), "not while the list is received");
        send(&mut aggregator, WatchBatch::RelistEnd(vec![]), "5");
        assert!(aggregator.snapshot_due(), "due once it ended");
        // Events after a list (watch changes) count as before.
        aggregator.snapshot_rv = aggregator.head_rv();
        send(&mut aggregator, WatchBatch::Changes(vec![Change::Upsert(pod("p1", "2")), Change::Upsert(pod("p2", "2"))]), "6");
        assert!(aggregator.snapshot_due());
        // The time limit holds even while a list is received.
        aggregator.snapshot_rv = aggregator.head_rv();
        send(&mut aggregator, WatchBatch::RelistPart { first: true, objects: vec![pod("q", "7")] }, "");
        assert!(!aggregator.snapshot_due());
        aggregator.snapshot_at = Instant::now() - SNAPSHOT_AFTER;
        assert!(aggregator.snapshot_due());
    }
}
