//! The aggregator as one replica of several over a shared log (etcd):
//! batches are committed to the shared log, fenced on the head this replica
//! applied, and reach the index, the local store and the watches only as the
//! log gives them back, numbered with its revisions. The events of other
//! replicas arrive the same way (through [`ApplyReplicated`], fed by the
//! log's watch, or read by a catch-up), so every replica applies the same
//! transactions in the same order and serves the same resourceVersions.

use std::sync::Arc;

use actix::{Handler, Message};
use kubefold_engine::event::StoredEvent;
use kubefold_store::shared::{Replicated, SharedError, SharedLog};
use kubefold_store::Commit;
use tracing::{debug, info, warn};

use super::Aggregator;

/// How often a commit fenced out by other writers is tried again (after a
/// catch-up each time) before it fails.
const FENCED_RETRIES: u32 = 64;

/// Transactions of the shared log, read by its watch: applied in order,
/// those this replica applied already skipped.
#[derive(Message)]
#[rtype(result = "Result<u64, kubefold_store::Error>")]
pub struct ApplyReplicated(pub Vec<Replicated>);

/// Reads and applies every transaction of the shared log after the
/// revision this replica applied; answers the revision applied then (the
/// log's watch resumes after it).
#[derive(Message)]
#[rtype(result = "Result<u64, kubefold_store::Error>")]
pub struct CatchUp;

impl Aggregator {
    /// The revision of the shared log this replica applied.
    pub fn applied_revision(&self) -> u64 {
        self.applied_revision
    }

    /// Commits `events` (numbered provisionally by the reflector, whose
    /// index must not hold them) with the checkpoints, to the shared log, in
    /// as many fenced transactions as they need, then applies what the log
    /// holds up to its head. Returns the number of events.
    pub(super) fn commit_shared(
        &mut self,
        shared: &Arc<dyn SharedLog>,
        events: Vec<StoredEvent>,
        checkpoints: Vec<(String, String, String)>,
        removed: Vec<(String, String)>,
    ) -> Result<usize, kubefold_store::Error> {
        if events.is_empty() && checkpoints.is_empty() && removed.is_empty() {
            return Ok(0);
        }
        let total = events.len();
        let (mut at, mut fence, mut fenced) = (0usize, self.applied_revision, 0u32);
        loop {
            match shared.commit_part(&events[at..], &checkpoints, &removed, fence) {
                Ok((taken, revision)) => {
                    at += taken;
                    fence = revision;
                    if at >= total {
                        break;
                    }
                }
                Err(SharedError::Fenced(_)) if fenced < FENCED_RETRIES => {
                    fenced += 1;
                    debug!(attempt = fenced, "Commit fenced out by another replica; catching up.");
                    self.catch_up()?;
                    fence = self.applied_revision;
                }
                Err(SharedError::NotOwner(member)) => {
                    // Another replica owns the member now (this one lost its
                    // lease or the member's key): the batch is dropped, as a
                    // stopped watcher's is, and the new owner's watchers
                    // bring the changes from the last committed checkpoint.
                    info!(cluster = %member, events = total - at, "Batch dropped: another replica owns the member now.");
                    if at > 0 {
                        let _ = self.catch_up();
                    }
                    return Ok(0);
                }
                Err(e) => {
                    // What was committed before the failure is applied.
                    if at > 0 {
                        let _ = self.catch_up();
                    }
                    return Err(e.into());
                }
            }
        }
        self.catch_up()?;
        Ok(total)
    }

    /// Reads every transaction after the applied revision and applies it.
    pub(super) fn catch_up(&mut self) -> Result<u64, kubefold_store::Error> {
        let Some(shared) = self.shared.clone() else { return Ok(0) };
        let caught = shared.catch_up(self.applied_revision)?;
        if caught.compacted_rv > self.reflector.index().head_rv() && caught.compacted_rv > 0 && self.reflector.index().head_rv() > 0 {
            warn!(
                applied_rv = self.reflector.index().head_rv(),
                log_compacted_rv = caught.compacted_rv,
                "This replica's copy is older than the shared log's compaction: restart it, and its copy is rebuilt from the log (it missed deletions)."
            );
        }
        self.apply_replicated(caught.batches)?;
        if caught.head_rv > self.reflector.index().head_rv() {
            // The log's last events were compacted away (deletions): the
            // head moves there without them, as on every other replica.
            self.store.advance_head(caught.head_rv)?;
            let mut index = self.reflector.index().clone();
            index.set_head_rv(caught.head_rv);
            self.reflector.restore_index(index.clone());
            self.publisher.publish(index, Vec::new());
        }
        self.applied_revision = self.applied_revision.max(caught.head_revision);
        self.fleet.set_shared_applied_revision(self.applied_revision);
        Ok(self.applied_revision)
    }

    /// Applies transactions of the shared log in order: each one's events
    /// to the index (their `prev_rv` from it) and, with its checkpoints, to
    /// the local store in one commit, then published. Transactions at or
    /// below the applied revision are skipped.
    pub(super) fn apply_replicated(&mut self, batches: Vec<Replicated>) -> Result<u64, kubefold_store::Error> {
        for batch in batches {
            if batch.revision <= self.applied_revision {
                continue;
            }
            let before = self.reflector.index().clone();
            let mut index = before.clone();
            let mut events = batch.events;
            for event in &mut events {
                event.prev_rv = index.get(&event.resource, &event.key).map_or(0, |entry| entry.rv);
                index.apply(event);
            }
            let commit = Commit { events, checkpoints: batch.checkpoints };
            self.store.commit(&commit)?;
            for (cluster, resource) in &batch.removed_checkpoints {
                match resource.is_empty() {
                    true => self.store.remove_checkpoints(cluster)?,
                    false => self.store.remove_checkpoint(cluster, resource)?,
                }
            }
            self.reflector.restore_index(index.clone());
            self.applied_revision = batch.revision;
            self.applied_since_snapshot += commit.events.len() as u64;
            if !commit.events.is_empty() {
                metrics::gauge!("kubefold_head_resource_version").set(index.head_rv() as f64);
                debug!(revision = batch.revision, events = commit.events.len(), head_rv = index.head_rv(), "Shared log transaction applied.");
                self.publisher.publish(index, commit.events);
            }
        }
        self.fleet.set_shared_applied_revision(self.applied_revision);
        Ok(self.applied_revision)
    }
}

impl Handler<ApplyReplicated> for Aggregator {
    type Result = Result<u64, kubefold_store::Error>;

    fn handle(&mut self, msg: ApplyReplicated, _ctx: &mut Self::Context) -> Self::Result {
        self.apply_replicated(msg.0)
    }
}

impl Handler<CatchUp> for Aggregator {
    type Result = Result<u64, kubefold_store::Error>;

    fn handle(&mut self, _msg: CatchUp, _ctx: &mut Self::Context) -> Self::Result {
        let before = self.applied_revision;
        let result = self.catch_up();
        if let Ok(revision) = &result {
            if *revision > before {
                info!(from_revision = before, to_revision = revision, head_rv = self.head_rv(), "Caught up with the shared log.");
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use kubefold_engine::event::{Change, EventType};
    use kubefold_engine::names::NameStyle;
    use kubefold_engine::object::{ingest, Ingested};
    use kubefold_engine::resources;
    use kubefold_store::shared::{revision_of, rv_of, CaughtUp, SharedFuture};
    use kubefold_store::Options;

    use super::*;
    use crate::aggregator::Retention;
    use crate::fleet::Fleet;
    use crate::messages::{Ingest, WatchBatch};

    /// A shared log in memory: fenced like etcd, at most three events a
    /// transaction, and revisions that other keys also take (sparse).
    #[derive(Default)]
    struct MemoryLog {
        /// The last revision, the head's revision and resourceVersion, the transactions.
        state: Mutex<(u64, u64, u64, Vec<(u64, Vec<StoredEvent>, Vec<(String, String, String)>)>)>,
    }

    impl SharedLog for MemoryLog {
        fn identity(&self) -> String {
            "memory".into()
        }

        fn commit_part(&self, events: &[StoredEvent], checkpoints: &[(String, String, String)], _removed: &[(String, String)], fence: u64) -> Result<(usize, u64), SharedError> {
            let mut state = self.state.lock().unwrap();
            let (revision, head, head_rv, log) = &mut *state;
            if *head != fence {
                return Err(SharedError::Fenced(fence));
            }
            *revision += 2;
            let taken = events.len().min(3);
            let all = taken == events.len();
            let written = events[..taken].iter().cloned().map(|mut e| {
                // What a reader cannot know from the record alone.
                (e.rv, e.prev_rv) = (0, 0);
                e
            });
            log.push((*revision, written.collect(), if all { checkpoints.to_vec() } else { Vec::new() }));
            *head = *revision;
            if taken > 0 {
                *head_rv = rv_of(*revision, taken - 1);
            }
            Ok((taken, *revision))
        }

        fn catch_up(&self, after: u64) -> Result<CaughtUp, SharedError> {
            let state = self.state.lock().unwrap();
            let batches = state.3.iter().filter(|(revision, _, _)| *revision > after).map(|(revision, events, checkpoints)| Replicated {
                revision: *revision,
                events: events.iter().cloned().enumerate().map(|(i, mut e)| { e.rv = rv_of(*revision, i); e }).collect(),
                checkpoints: checkpoints.clone(),
                removed_checkpoints: Vec::new(),
            });
            Ok(CaughtUp { batches: batches.collect(), head_revision: state.1, head_rv: state.2, compacted_rv: 0 })
        }

        fn current_rv(&self) -> SharedFuture<u64> {
            Box::pin(async { Ok(0) })
        }

        fn compact(&self, _floor: u64, _keep: &(dyn Fn(u64) -> bool + Sync)) -> Result<u64, SharedError> {
            Ok(0)
        }
    }

    fn pod(cluster: &str, name: &str, member_rv: &str) -> Ingested {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(r#"{{"metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{member_rv}"}}}}"#);
        ingest(&pods, cluster, raw.as_bytes()).unwrap()
    }

    fn send(aggregator: &mut Aggregator, cluster: &str, batch: WatchBatch, checkpoint: &str) -> usize {
        let msg = Ingest { cluster: cluster.into(), resource: "v1/pods".into(), batch, checkpoint: checkpoint.into(), scope: None, queued: Default::default() };
        aggregator.ingest(msg).unwrap()
    }

    fn replica(dir: &std::path::Path, log: &Arc<MemoryLog>) -> (Arc<Fleet>, Aggregator) {
        let store = kubefold_store::Store::open(dir, &Options::default()).unwrap();
        let recovered = store.recover().unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, recovered.index, recovered.compacted_rv);
        fleet.set_shared(log.clone());
        let aggregator = Aggregator::new(fleet.take_publisher().unwrap(), Retention::default());
        (fleet, aggregator)
    }

    /// (cluster/name, rv) of every pod a replica serves.
    fn served(fleet: &Fleet) -> Vec<(String, u64)> {
        fleet.snapshot().range("v1/pods", None, None).map(|(k, e)| (format!("{}/{}", k.cluster, k.name), e.rv)).collect()
    }

    /// Two replicas over one log: a batch split over transactions, a
    /// commit fenced out by the other replica's (caught up, then committed
    /// again), events numbered by revision and place on both alike, the
    /// previous version of a change found by each from its index, the
    /// checkpoints in each local copy; a restart resumes after its copy.
    #[test]
    fn replicas_over_a_shared_log_apply_the_same_transactions() {
        let log = Arc::new(MemoryLog::default());
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (fleet_a, mut a) = replica(dir_a.path(), &log);
        let (fleet_b, mut b) = replica(dir_b.path(), &log);
        let seven = (0..7).map(|i| pod("m1", &format!("p{i}"), "1")).collect();
        assert_eq!(send(&mut a, "m1", WatchBatch::Relist(seven), "10"), 7);
        assert_eq!(log.state.lock().unwrap().3.iter().map(|t| t.1.len()).collect::<Vec<_>>(), [3, 3, 1]);
        // B has not applied A's transactions: its commit is fenced out,
        // it catches up and commits again.
        assert_eq!(send(&mut b, "m2", WatchBatch::Relist(vec![pod("m2", "q", "1")]), "5"), 1);
        a.catch_up().unwrap();
        assert_eq!(served(&fleet_a), served(&fleet_b));
        let rvs: Vec<u64> = served(&fleet_a).iter().map(|(_, rv)| *rv).collect();
        assert_eq!(rvs, [rv_of(2, 0), rv_of(2, 1), rv_of(2, 2), rv_of(4, 0), rv_of(4, 1), rv_of(4, 2), rv_of(6, 0), rv_of(8, 0)]);
        assert_eq!((a.applied_revision(), b.applied_revision()), (8, 8));

        // A change: the previous version is each replica's own index entry.
        assert_eq!(send(&mut a, "m1", WatchBatch::Changes(vec![Change::Upsert(pod("m1", "p1", "2"))]), "11"), 1);
        b.catch_up().unwrap();
        for fleet in [&fleet_a, &fleet_b] {
            let event = fleet.store().event(rv_of(10, 0)).unwrap().unwrap();
            assert_eq!((event.event_type, event.prev_rv, revision_of(event.rv)), (EventType::Modified, rv_of(2, 1), 10));
        }
        assert_eq!(served(&fleet_a), served(&fleet_b));
        drop((a, b, fleet_a, fleet_b));

        // Each local copy holds every checkpoint, and a restart resumes after it.
        for dir in [&dir_a, &dir_b] {
            let store = kubefold_store::Store::open(dir.path(), &Options::default()).unwrap();
            let checkpoints = store.recover().unwrap().checkpoints;
            assert_eq!(checkpoints.get(&("m1".into(), "v1/pods".into())).map(String::as_str), Some("11"));
            assert_eq!(checkpoints.get(&("m2".into(), "v1/pods".into())).map(String::as_str), Some("5"));
        }
        let (fleet_a, mut a) = replica(dir_a.path(), &log);
        assert_eq!(a.applied_revision(), 10);
        assert_eq!(a.catch_up().unwrap(), 10);

        // A deletion that compaction then removes from the log: a copy
        // rebuilt from the log has the same objects and the same head.
        assert_eq!(send(&mut a, "m1", WatchBatch::Changes(vec![Change::Delete(pod("m1", "p6", "3"))]), "12"), 1);
        let head = fleet_a.snapshot().head_rv();
        assert_eq!(head, rv_of(12, 0));
        // Compaction: neither the deletion nor the versions before it are live.
        log.state.lock().unwrap().3.iter_mut().for_each(|t| t.1.retain(|e| e.key.name != "p6"));
        let dir_c = tempfile::tempdir().unwrap();
        let (fleet_c, mut c) = replica(dir_c.path(), &log);
        c.catch_up().unwrap();
        assert_eq!(served(&fleet_c), served(&fleet_a));
        assert_eq!(fleet_c.snapshot().head_rv(), head, "the head of the log, not of its last event left");
        drop((c, fleet_c));
        let store = kubefold_store::Store::open(dir_c.path(), &Options::default()).unwrap();
        assert_eq!(store.head_rv().unwrap(), head, "kept in the copy");
    }
}
