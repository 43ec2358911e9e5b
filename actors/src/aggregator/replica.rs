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
