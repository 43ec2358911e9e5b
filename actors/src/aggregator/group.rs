//! Group commit: the batches that queue up from many watchers at once are
//! committed with one sync of the store.
//!
//! Each watcher's batch is applied to the index and staged in the store
//! ([`kubefold_store::Store::stage`]) as its message is handled; the
//! watcher's reply waits. When no other batch is on its way to a sink
//! ([`crate::messages::Queued`]: the watchers' batches are counted from
//! their making until taken up), the group is committed at once: a lone
//! watcher's batch is committed as it comes, and the watcher parses its
//! next page meanwhile, as before groups. Otherwise, once the messages
//! waiting in the mailbox are handled (a [`FinishGroup`] the aggregator
//! sends itself comes after them), or the group reaches
//! [`GROUP_MAX_EVENTS`] or [`GROUP_MAX_BYTES`], the group is committed
//! with one sync of the record log and one flush of sled; only then are
//! its index and events published and the watchers answered. A failed group fails every batch in it, and
//! the index goes back to the last one published: nothing a reader or a
//! watch saw is ever lost to a crash, and nothing unsynced is ever seen.
//!
//! Everything else the aggregator does that reads or writes the store or
//! the index (other commits, snapshots, compactions, backups, repairs)
//! first finishes the group in progress.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Context, Handler, Message};
use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use kubefold_store::Group;
use tracing::debug;

use super::{commit_failed, Aggregator};
use crate::messages::{Ingest, IngestError};

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
    pub(crate) to: Option<ReplySlot>,
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

/// Where a staged batch's answer goes: its watcher's reply channel, put in
/// as the handler returns ([`IngestReply`]) and taken when the batch's
/// group is committed.
pub(crate) type ReplySlot = Arc<Mutex<Option<OneshotSender<Result<usize, IngestError>>>>>;

/// The answer to a watcher's batch. Given at once when the handler
/// committed the batch (or failed or dropped it); otherwise the watcher's
/// reply channel waits in the batch's [`ReplySlot`] and is answered
/// straight from the group's commit: no task stands between, so no answer
/// waits for the aggregator to be done with the batches after it.
pub struct IngestReply(Answer);

enum Answer {
    Now(Result<usize, IngestError>),
    Later(ReplySlot),
}

impl IngestReply {
    /// The answer, known now.
    pub(crate) fn now(result: Result<usize, IngestError>) -> Self {
        IngestReply(Answer::Now(result))
    }

    /// The answer once the group is committed.
    pub(crate) fn later(slot: ReplySlot) -> Self {
        IngestReply(Answer::Later(slot))
    }
}

impl MessageResponse<Aggregator, Ingest> for IngestReply {
    fn handle(self, _ctx: &mut Context<Aggregator>, tx: Option<OneshotSender<Result<usize, IngestError>>>) {
        match self.0 {
            Answer::Now(result) => {
                if let Some(tx) = tx {
                    let _ = tx.send(result);
                }
            }
            Answer::Later(slot) => *lock(&slot) = tx,
        }
    }
}

fn lock(slot: &ReplySlot) -> std::sync::MutexGuard<'_, Option<OneshotSender<Result<usize, IngestError>>>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
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
    /// Stages one batch's events (applied to the index already) in the
    /// group in progress; `before` is the index before them, given with
    /// the group's first batch. When the batch cannot be staged, the
    /// index goes back to the group's start with the events of the
    /// batches staged before it applied again: as it was before this one.
    pub(crate) fn stage_commit(&mut self, before: Option<Index>, commit: kubefold_store::Commit, reply: Reply) -> Result<(), kubefold_store::Error> {
        let pending = &mut self.pending;
        if pending.before.is_none() {
            pending.before = before;
        }
        if let Err(e) = self.store.stage(&mut pending.group, &commit) {
            let mut index = match pending.group.is_empty() {
                true => pending.before.take(),
                false => pending.before.clone(),
            }
            .expect("the index before a group is kept from its first batch");
            pending.events.iter().for_each(|event| index.apply(event));
            self.reflector.restore_index(index);
            return Err(e);
        }
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
                if let Some(to) = reply.to.as_ref().and_then(|slot| lock(slot).take()) {
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
            if let Some(to) = reply.to.as_ref().and_then(|slot| lock(slot).take()) {
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

#[cfg(test)]
mod tests {
    use actix::Actor;
    use kubefold_engine::object::{ingest, Ingested};
    use kubefold_engine::resources;

    use super::super::tests::start;
    use crate::messages::{Ingest, Queued, WatchBatch};

    fn pod(cluster: &str, name: &str) -> Ingested {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(r#"{{"metadata":{{"name":"{name}","namespace":"default","resourceVersion":"1"}}}}"#);
        ingest(&pods, cluster, raw.as_bytes()).unwrap()
    }

    fn list(cluster: &str, names: &[&str], checkpoint: &str) -> Ingest {
        let batch = WatchBatch::Relist(names.iter().map(|n| pod(cluster, n)).collect());
        Ingest { cluster: cluster.into(), resource: "v1/pods".into(), batch, checkpoint: checkpoint.into(), scope: None, queued: Queued::new() }
    }

    /// The names of the pods of the aggregator's working index, in list order.
    fn working_names(aggregator: &super::super::Aggregator) -> Vec<String> {
        aggregator.reflector.index().range("v1/pods", None, None).map(|(k, _)| format!("{}/{}", k.cluster, k.name)).collect()
    }

    /// A batch that cannot be staged leaves the index as the batches
    /// staged before it in the same group made it (they are committed
    /// with their group), and a first batch that cannot be staged leaves
    /// it as the last group did: the group keeps one index to go back to.
    #[test]
    fn a_batch_that_cannot_be_staged_takes_only_its_own_changes_back() {
        let dir = tempfile::tempdir().unwrap();
        let (fleet, mut aggregator) = start(dir.path());
        aggregator.ingest(list("m1", &["a"], "1")).unwrap();
        assert!(matches!(aggregator.stage_ingest(list("m2", &["b", "c"], "2"), None), Ok(super::super::Staged::Waiting(2))));
        fleet.store().inject_fault(Some(kubefold_store::Fault::Fail(28)));
        assert!(aggregator.stage_ingest(list("m3", &["d"], "3"), None).is_err());
        assert_eq!(working_names(&aggregator), ["m1/a", "m2/b", "m2/c"], "the staged batch stays, the failed one is gone");
        fleet.store().inject_fault(None);
        aggregator.finish_group().unwrap();
        assert_eq!(fleet.snapshot().len("v1/pods"), 3, "the staged batch is committed and published");
        fleet.store().inject_fault(Some(kubefold_store::Fault::Fail(28)));
        assert!(aggregator.stage_ingest(list("m4", &["e"], "4"), None).is_err());
        assert_eq!(working_names(&aggregator), ["m1/a", "m2/b", "m2/c"], "a failed first batch of a group is gone too");
        fleet.store().inject_fault(None);
        aggregator.ingest(list("m4", &["e"], "4")).unwrap();
        assert_eq!(working_names(&aggregator), ["m1/a", "m2/b", "m2/c", "m4/e"]);
        assert_eq!(fleet.snapshot().len("v1/pods"), 4);
    }

    /// A batch alone is committed at once, and one sent while another
    /// batch is on its way (made, never delivered) is committed with the
    /// group the aggregator closes after its mailbox: neither waits for
    /// the other, and both are published when answered.
    #[actix::test]
    async fn batches_are_committed_whether_or_not_others_are_on_their_way() {
        let dir = tempfile::tempdir().unwrap();
        let (fleet, aggregator) = start(dir.path());
        let aggregator = aggregator.start();
        let alone = aggregator.send(list("m1", &["a", "b"], "10")).await.unwrap().unwrap();
        assert_eq!(alone, 2);
        let on_its_way = Queued::new();
        let answer = aggregator.send(list("m2", &["c"], "20"));
        let grouped = tokio::time::timeout(std::time::Duration::from_secs(5), answer).await;
        assert_eq!(grouped.expect("the batch is answered while another is on its way").unwrap().unwrap(), 1);
        drop(on_its_way);
        let mut names: Vec<String> = fleet.snapshot().range("v1/pods", None, None).map(|(k, _)| k.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
    }
}
