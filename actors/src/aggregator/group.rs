//! Group commit: the batches that queue up from many watchers at once are
//! committed with one sync of the store.
//!
//! Each watcher's batch is applied to the index and staged in the store
//! ([`kubefold_store::Store::stage`]) as its message is handled; the
//! watcher's reply waits. Once the messages waiting in the mailbox are
//! handled (a [`FinishGroup`] the aggregator sends itself comes after
//! them), or the group reaches [`GROUP_MAX_EVENTS`] or
//! [`GROUP_MAX_BYTES`], the group is committed with one sync of the record
//! log and one flush of sled; only then are its index and events published
//! and the watchers answered. A failed group fails every batch in it, and
//! the index goes back to the last one published: nothing a reader or a
//! watch saw is ever lost to a crash, and nothing unsynced is ever seen.
//!
//! Everything else the aggregator does that reads or writes the store or
//! the index (other commits, snapshots, compactions, backups, repairs)
//! first finishes the group in progress.

use std::time::Instant;

use actix::{Context, Handler, Message};
use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use kubefold_store::Group;
use tokio::sync::oneshot;
use tracing::debug;

use super::{commit_failed, Aggregator};
use crate::messages::IngestError;

/// A group is committed once it holds this many events ...
pub(crate) const GROUP_MAX_EVENTS: usize = 20_000;

/// ... or this many bytes of records: a batch waits for at most this much
/// of other members' work before its own sync.
pub(crate) const GROUP_MAX_BYTES: u64 = 16 << 20;

/// The batches staged and not yet committed.
#[derive(Default)]
pub(crate) struct Pending {
    /// The store's side of the group.
    group: Group,
    /// The index as last published: put back when the group fails.
    before: Option<Index>,
    /// The group's events, in RV order.
    events: Vec<StoredEvent>,
    /// Each batch's watcher, its number of events, cluster and type.
    replies: Vec<Reply>,
    /// A [`FinishGroup`] is on its way.
    pub(crate) scheduled: bool,
}

/// The answer a batch of the group waits for.
pub(crate) struct Reply {
    /// Where it goes (`None`: a batch committed by a direct call).
    pub(crate) to: Option<oneshot::Sender<Result<usize, IngestError>>>,
    /// Its events.
    pub(crate) count: usize,
    /// Its member cluster.
    pub(crate) cluster: String,
    /// Its type key.
    pub(crate) resource: String,
    /// When its message was handled.
    pub(crate) started: Instant,
}

impl Pending {
    /// Whether no batch is staged.
    pub(crate) fn is_empty(&self) -> bool {
        self.group.is_empty()
    }

    /// Whether the group is as large as a group gets.
    pub(crate) fn full(&self) -> bool {
        self.group.events() >= GROUP_MAX_EVENTS || self.group.bytes() >= GROUP_MAX_BYTES
    }
}

/// Commits the group in progress (the aggregator sends it to itself: it
/// comes after the messages waiting in the mailbox).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct FinishGroup;

impl Handler<FinishGroup> for Aggregator {
    type Result = ();

    fn handle(&mut self, _msg: FinishGroup, _ctx: &mut Context<Self>) {
        let _ = self.finish_group();
    }
}

impl Aggregator {
    /// Stages one batch's events (applied to the index already, which was
    /// `before` them) in the group in progress.
    pub(crate) fn stage_commit(&mut self, before: Index, commit: kubefold_store::Commit, reply: Reply) -> Result<(), kubefold_store::Error> {
        if let Err(e) = self.store.stage(&mut self.pending.group, &commit) {
            self.reflector.restore_index(before);
            return Err(e);
        }
        let pending = &mut self.pending;
        pending.before.get_or_insert(before);
        pending.events.extend(commit.events);
        pending.replies.push(reply);
        Ok(())
    }

    /// Commits the group in progress with one sync, then publishes its
    /// index and events and answers its watchers; on failure puts the
    /// index back to the last one published and fails every batch of it.
    /// The result is the group's.
    pub(crate) fn finish_group(&mut self) -> Result<(), kubefold_store::Error> {
        let pending = std::mem::take(&mut self.pending);
        if pending.group.is_empty() {
            return Ok(());
        }
        let Pending { group, before, events, replies, .. } = pending;
        let (commits, count) = (group.commits(), group.events());
        let synced = Instant::now();
        if let Err(e) = self.store.commit_group(group) {
            if let Some(before) = before {
                self.reflector.restore_index(before);
            }
            for reply in replies {
                commit_failed(&e, &reply.cluster, &reply.resource);
                if let Some(to) = reply.to {
                    let copy = kubefold_store::Error::Unavailable { cause: e.cause(), what: e.to_string() };
                    let _ = to.send(Err(IngestError::CommitFailed(copy)));
                }
            }
            return Err(e);
        }
        let index = self.reflector.index().clone();
        metrics::gauge!("kubefold_head_resource_version").set(index.head_rv() as f64);
        self.publisher.publish(index, events);
        for reply in replies {
            metrics::counter!("kubefold_events_ingested_total", "cluster" => crate::cluster_series::label(&reply.cluster), "resource" => reply.resource.clone())
                .increment(reply.count as u64);
            metrics::histogram!("kubefold_commit_duration_seconds").record(reply.started.elapsed().as_secs_f64());
            metrics::histogram!("kubefold_commit_batch_events").record(reply.count as f64);
            if let Some(to) = reply.to {
                let _ = to.send(Ok(reply.count));
            }
        }
        if count > 0 {
            let seconds = synced.elapsed().as_secs_f64();
            debug!(batches = commits, events = count, head_rv = self.head_rv(), sync_seconds = seconds, "Group committed.");
        }
        Ok(())
    }
}
