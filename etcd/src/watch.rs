//! The watch of the shared log that feeds a replica's index: every key
//! under the prefix from a revision on, grouped into kubefold's transactions.

use std::sync::Arc;

use etcd_client::{EventType, KeyValue, WatchOptions, WatchStream};
use kubefold_store::shared::{Replicated, SharedError};

use crate::{unavailable, EtcdLog};

/// One key as a watch or a read saw it.
#[derive(Debug, Clone)]
pub enum Change {
    /// Written (created or changed).
    Put(KeyValue),
    /// Deleted (the key value holds the key and the revision of the delete).
    Delete(KeyValue),
}

/// A watch of the log after a revision. On any error (etcd restarted,
/// unreachable, the revision compacted) the caller catches up with a range
/// read and resumes the watch after what it applied
/// ([`LogWatch::resume_after`]).
pub struct LogWatch {
    log: Arc<EtcdLog>,
    after: u64,
    stream: Option<WatchStream>,
    /// The revision etcd's history was compacted at, when etcd cancelled
    /// this watch because it started before it (0 otherwise).
    compacted: u64,
}

impl LogWatch {
    pub(crate) fn new(log: Arc<EtcdLog>, after: u64) -> LogWatch {
        LogWatch { log, after, stream: None, compacted: 0 }
    }

    /// Watches again after `revision` (a catch-up applied up to it).
    pub fn resume_after(&mut self, revision: u64) {
        self.after = revision;
        self.stream = None;
    }

    /// The revision etcd's history was compacted at, when etcd cancelled
    /// this watch because it started before it (0 otherwise). etcd's
    /// history is compacted by kubefold and also by others (an operator,
    /// etcd's own `--auto-compaction-retention`, a kube-apiserver sharing
    /// the etcd), at a revision that may be above the log's head: a watch
    /// from the head is then refused until the log moves past it, while a
    /// range read still gives everything. After a catch-up that read the
    /// log after this, the watch resumes from it.
    pub fn compacted_at(&self) -> u64 {
        self.compacted
    }

    /// The revision the watch has delivered up to.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The next transactions the watch delivers (possibly none: a response
    /// of keys kubefold's transactions did not write, such as compaction's
    /// deletions).
    pub async fn next(&mut self) -> Result<Vec<Replicated>, SharedError> {
        if self.stream.is_none() {
            let mut client = self.log.client().clone();
            let options = WatchOptions::new().with_prefix().with_start_revision(self.after as i64 + 1);
            let opened = client.watch(self.log.log_prefix(), Some(options)).await.map_err(unavailable)?;
            self.stream = Some(opened);
        }
        let Some(stream) = self.stream.as_mut() else { return Ok(Vec::new()) };
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => {
                self.stream = None;
                return Err(unavailable("the etcd watch ended"));
            }
            Err(e) => {
                self.stream = None;
                return Err(unavailable(e));
            }
        };
        if response.canceled() || response.compact_revision() > 0 {
            self.stream = None;
            self.compacted = self.compacted.max(response.compact_revision().max(0) as u64);
            return Err(unavailable(format!("the etcd watch was cancelled (compacted at revision {})", response.compact_revision())));
        }
        let mut changes = Vec::new();
        let mut last = self.after;
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            last = last.max(kv.mod_revision() as u64);
            changes.push(match event.event_type() {
                EventType::Put => Change::Put(kv.clone()),
                EventType::Delete => Change::Delete(kv.clone()),
            });
        }
        let batches = self.log.transactions(changes, false)?;
        self.after = last;
        Ok(batches)
    }
}
