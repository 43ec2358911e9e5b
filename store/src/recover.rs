//! Recovery at start: the index from the snapshot plus the log after it,
//! or from a replay of the whole retained log.

use super::*;
use crate::snapshot::Unused;

impl Store {
    /// Reads the merged index, the checkpoints and the compaction floor.
    /// The index comes from the snapshot plus the events after it when the
    /// snapshot can be trusted, from a scan of the index entries otherwise;
    /// either way it equals the replay of the retained log.
    pub fn recover(&self) -> Result<Recovered> {
        self.recover_with_progress(&mut |_| {})
    }

    /// [`Store::recover`], telling `report` how far the replay of the log
    /// is every [`REPLAY_REPORT_EVENTS`] events.
    pub fn recover_with_progress(&self, report: &mut dyn FnMut(ReplayProgress)) -> Result<Recovered> {
        if let Some(rv) = self.damage_mark()? {
            return Err(Error::Corrupt { what: format!("the record of event {rv} was found damaged while kubefold ran") });
        }
        let head = self.head_rv()?;
        self.check_head_against_log(head)?;
        let compacted = self.compacted_rv()?;
        let (index, path) = match self.read_snapshot(head, compacted) {
            Ok(mut index) => {
                let snapshot_rv = index.head_rv();
                let started = std::time::Instant::now();
                let replayed = self.replay_into(&mut index, snapshot_rv.saturating_add(1), head, report)?;
                index.set_head_rv(head);
                tracing::info!(snapshot_rv, head_rv = head, replayed, seconds = started.elapsed().as_secs_f64(), "Log after the index snapshot replayed.");
                (index, RecoveryPath::Snapshot { snapshot_rv, replayed })
            }
            // The snapshot is written after the log is flushed: sled's
            // tree lost commits (damaged files it read up to the damage).
            Err(Unused::Ahead(reason)) => {
                return Err(Error::Corrupt { what: format!("sled's tree is behind the index snapshot: {reason}") });
            }
            // Never silently ignored: set aside where the operator finds it.
            Err(Unused::Damaged(reason)) => {
                let reason = match self.quarantine_snapshot(&reason) {
                    Ok(quarantine) => {
                        tracing::error!(
                            quarantine = %quarantine.display(),
                            damage = %reason,
                            "The index snapshot is damaged: it was moved into the quarantine directory (keep it for analysis, delete it when done); \
                             the index is rebuilt from the record log, nothing is lost. Check the disk."
                        );
                        format!("{reason}; moved into {}", quarantine.display())
                    }
                    Err(e) => {
                        tracing::error!(damage = %reason, error = %e, "The index snapshot is damaged and could not be moved aside; the index is rebuilt from the record log.");
                        reason
                    }
                };
                let mut index = Index::at(head);
                self.replay_into(&mut index, 0, head, report)?;
                (index, RecoveryPath::Replay { reason })
            }
            Err(Unused::Stale(reason)) => {
                let mut index = Index::at(head);
                self.replay_into(&mut index, 0, head, report)?;
                (index, RecoveryPath::Replay { reason })
            }
        };
        let mut checkpoints = BTreeMap::new();
        for item in self.tree()?.scan_prefix([CHECKPOINT]) {
            let (k, v) = item?;
            let text = String::from_utf8_lossy(&k[1..]).into_owned();
            let (cluster, resource) =
                text.split_once('\0').ok_or_else(|| Error::Corrupt { what: "checkpoint key".into() })?;
            checkpoints.insert(
                (cluster.to_string(), resource.to_string()),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
        Ok(Recovered { path, index, checkpoints, compacted_rv: compacted })
    }

    /// With [`Durability::Sync`], sled's head must be at least the head of
    /// the newest commit the record log holds, but for that commit itself
    /// (its records are synced before sled's batch: a crash between them
    /// loses it, and it was never served; a group of commits has one mark,
    /// see [`Store::commit_group`]). sled reads a damaged file up to
    /// the damage and answers from the state there, so a tree behind that
    /// lost commits it had made durable, and resourceVersions that were
    /// served: damage. (With [`Durability::Periodic`] a crash may lose the
    /// last flush period, as documented.)
    fn check_head_against_log(&self, head: u64) -> Result<()> {
        if self.durability != Durability::Sync {
            return Ok(());
        }
        match self.log.last_mark() {
            // A group's mark comes after sled flushed it: sled has all of it.
            Some(mark) if mark.flushed && mark.head_rv > head => Err(Error::Corrupt {
                what: format!("sled's tree is behind the record log: its head is resourceVersion {head}, sled had flushed commits up to {}", mark.head_rv),
            }),
            Some(mark) if !mark.flushed && mark.head_rv > head && mark.first_rv != head.saturating_add(1) => Err(Error::Corrupt {
                what: format!("sled's tree is behind the record log: its head is resourceVersion {head}, the log holds commits up to {}", mark.head_rv),
            }),
            _ => Ok(()),
        }
    }

    /// Applies every event the log holds from `from_rv` on to `index`, in RV
    /// order; returns how many. From 0, the index equals the one the events
    /// built, compaction notwithstanding: an object's last event is always
    /// kept (it is either live or above the floor) and replays last; the
    /// events compaction removes are superseded ones, and
    /// [`Store::compact`] removes them in RV order, so an interrupted
    /// compaction leaves each object a suffix of its events, which still
    /// ends with its last.
    pub(crate) fn replay_into(&self, index: &mut Index, from_rv: u64, head_rv: u64, report: &mut dyn FnMut(ReplayProgress)) -> Result<u64> {
        let mut replayed = 0u64;
        for item in self.entries(from_rv, u64::MAX) {
            let (rv, located) = item?;
            let Some(record) = self.scanned(rv, located)? else { continue };
            index.apply(&decode_event_head(&record)?);
            replayed += 1;
            if replayed % REPLAY_REPORT_EVENTS == 0 {
                report(ReplayProgress { from_rv, at_rv: rv, head_rv, replayed });
            }
        }
        report(ReplayProgress { from_rv, at_rv: head_rv, head_rv, replayed });
        Ok(replayed)
    }

    /// The index from a replay of every event the log holds.
    #[cfg(test)]
    pub(crate) fn replay(&self, head: u64) -> Result<Index> {
        let mut index = Index::at(head);
        self.replay_into(&mut index, 0, head, &mut |_| {})?;
        Ok(index)
    }
}
