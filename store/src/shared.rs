//! The seam of a log shared by several kubefold replicas (etcd): what the
//! aggregator needs from it besides the local store, which every replica
//! keeps as its copy of the shared log (same events, same resourceVersions).
//!
//! Without a shared log nothing here is used: the aggregator numbers and
//! commits batches to the local store as it always did.
//!
//! ## resourceVersions on a shared log
//!
//! A batch is committed as one transaction of the shared log (several when
//! it is too large for one), and all keys written by one transaction share
//! its revision. Every event still needs a resourceVersion of its own, so
//! that a watch resumed in the middle of a transaction neither loses nor
//! repeats events. The event at position `i` (from 0) of the transaction at
//! revision `R` gets the resourceVersion [`rv_of`]`(R, i)` =
//! `R << RV_SHIFT | i`: ordered as the log is, identical on every replica
//! (each derives it from the revision the log reports), and
//! [`revision_of`] maps any resourceVersion back onto the revision whose
//! state it is part of.

use std::future::Future;
use std::pin::Pin;

use kubefold_engine::event::StoredEvent;

/// Bits of a resourceVersion that number the events of one transaction.
pub const RV_SHIFT: u32 = 12;

/// The most events one transaction may carry.
pub const MAX_EVENTS_PER_REVISION: usize = 1 << RV_SHIFT;

/// The resourceVersion of the event at position `index` (from 0) of the
/// transaction committed at `revision`.
pub fn rv_of(revision: u64, index: usize) -> u64 {
    debug_assert!(index < MAX_EVENTS_PER_REVISION);
    (revision << RV_SHIFT) | index as u64
}

/// The revision of the shared log that the resourceVersion `rv` belongs to.
pub fn revision_of(rv: u64) -> u64 {
    rv >> RV_SHIFT
}

/// What one transaction of the shared log committed, as read back: its
/// events with their final resourceVersions (their `prev_rv` is set by the
/// replica applying them, from its index), the member checkpoints written
/// with them and those removed.
#[derive(Debug, Default)]
pub struct Replicated {
    /// The transaction's revision.
    pub revision: u64,
    /// Its events, in order.
    pub events: Vec<StoredEvent>,
    /// (cluster, resource, member RV) checkpoints it wrote.
    pub checkpoints: Vec<(String, String, String)>,
    /// (cluster, resource) checkpoints it removed.
    pub removed_checkpoints: Vec<(String, String)>,
}

/// What a catch-up read: every transaction after a revision, in order.
#[derive(Debug, Default)]
pub struct CaughtUp {
    /// The transactions.
    pub batches: Vec<Replicated>,
    /// The revision of the log's head (the last transaction committed) as
    /// of the read: what the next commit is fenced on.
    pub head_revision: u64,
    /// The log's head resourceVersion as of the read: its last event's,
    /// which compaction may have removed (a deletion), so a copy rebuilt
    /// from the log moves its head there without an event.
    pub head_rv: u64,
    /// The log's compaction floor (a resourceVersion): events up to it may
    /// be gone from the log.
    pub compacted_rv: u64,
}

/// One replica as the shared log records it (the operations view).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The replica's id.
    pub id: String,
    /// The address it serves on.
    pub address: String,
    /// Its lease (hexadecimal, as etcdctl shows it).
    pub lease: String,
    /// Seconds left before its lease expires unless renewed.
    pub lease_remaining_seconds: u64,
    /// The log revision it applied, as it last recorded it.
    pub applied_revision: u64,
    /// How many revisions the log's head is ahead of it.
    pub lag_revisions: u64,
    /// The members of its configuration (those it may own).
    pub members: Vec<String>,
    /// The members it owns (watches and writes the changes of).
    pub owned: Vec<String>,
}

/// Errors of a shared log.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// Another writer committed after the revision the commit was fenced
    /// on: catch up, then commit again.
    #[error("the shared log moved past revision {0}: another replica committed")]
    Fenced(u64),
    /// The batch changes a member this replica does not own (it never
    /// took it, or lost its lease or the member's owner key): nothing was
    /// written, and the member's watchers are being stopped.
    #[error("this replica does not own member {0} (another replica writes its changes)")]
    NotOwner(String),
    /// The log cannot be reached or refused the request.
    #[error("shared log: {0}")]
    Unavailable(String),
    /// What the log holds cannot be decoded.
    #[error("shared log holds a damaged record: {0}")]
    Corrupt(String),
}

/// A future of the shared log.
pub type SharedFuture<T> = Pin<Box<dyn Future<Output = Result<T, SharedError>> + Send>>;

/// A log shared by several replicas. Writes are fenced: each is conditional
/// on the head of the log being at the revision the writer last applied,
/// so two writers never interleave and every replica applies the same
/// transactions in the same order. The blocking methods are called from
/// the aggregator's thread.
pub trait SharedLog: Send + Sync + 'static {
    /// Commits the first events of `events` that fit in one transaction
    /// (at least one when there are any), with `checkpoints` and
    /// `removed_checkpoints` only when every event fits (they go in the
    /// last transaction of a batch: no reader sees a checkpoint ahead of
    /// its events), fenced on `fence` (the head revision the caller
    /// applied). Returns how many events it took and the transaction's
    /// revision.
    fn commit_part(
        &self,
        events: &[StoredEvent],
        checkpoints: &[(String, String, String)],
        removed_checkpoints: &[(String, String)],
        fence: u64,
    ) -> Result<(usize, u64), SharedError>;

    /// Which log this is, for operators (for etcd: its cluster and prefix).
    fn identity(&self) -> String;

    /// Every transaction after `revision`, in order (a consistent read).
    fn catch_up(&self, revision: u64) -> Result<CaughtUp, SharedError>;

    /// The resourceVersion of the log's head now, read so that it is at
    /// least that of every commit acknowledged before the call (a
    /// linearizable read): a consistent read waits until its replica has
    /// applied it.
    fn current_rv(&self) -> SharedFuture<u64>;

    /// Removes the events at or below `floor` (a resourceVersion) for which
    /// `keep` does not hold, raises the recorded floor to it, and lets the
    /// log reclaim their space; returns how many were removed.
    fn compact(&self, floor: u64, keep: &(dyn Fn(u64) -> bool + Sync)) -> Result<u64, SharedError>;

    /// The replicas registered on the log and the members each owns (none
    /// for a log without ownership).
    fn replicas(&self) -> SharedFuture<Vec<ReplicaStatus>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Records a member added through the admin API (`spec`: its spec as
    /// received, credentials included) so that every replica serves it and
    /// one of them watches it; `false`, and nothing written, when a member
    /// of that name is recorded already.
    fn add_member(&self, name: &str, spec: Vec<u8>) -> SharedFuture<bool> {
        let _ = (name, spec);
        Box::pin(async { Err(SharedError::Unavailable("this log does not record members".to_string())) })
    }

    /// Asks for the removal of a recorded member: its owner stops its
    /// watchers, commits its objects' deletions, then deletes the record.
    /// `false` when no member of that name is recorded.
    fn remove_member(&self, name: &str) -> SharedFuture<bool> {
        let _ = name;
        Box::pin(async { Ok(false) })
    }

    /// The members recorded in the log (name -> spec), those being removed
    /// included.
    fn members(&self) -> SharedFuture<std::collections::BTreeMap<String, Vec<u8>>> {
        Box::pin(async { Ok(Default::default()) })
    }
}

impl From<SharedError> for crate::Error {
    fn from(e: SharedError) -> Self {
        let cause = match e {
            SharedError::Corrupt(_) => crate::Cause::Corrupt,
            _ => crate::Cause::Io,
        };
        crate::Error::Unavailable { cause, what: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_order_as_the_log_and_map_back_to_revisions() {
        assert!(rv_of(7, MAX_EVENTS_PER_REVISION - 1) < rv_of(8, 0));
        assert!(rv_of(8, 0) < rv_of(8, 1));
        assert_eq!(revision_of(rv_of(8, 5)), 8);
        assert_eq!(revision_of(rv_of(8, 0)), 8);
    }
}
