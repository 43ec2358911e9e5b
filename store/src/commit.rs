//! Committing batches: records appended to the record log, then their
//! pointers, the checkpoints and the head RV in one sled batch.
//!
//! Group commit: [`Store::stage`] appends a commit's records (not synced)
//! and adds its sled writes to a [`Group`]; [`Store::commit_group`] then
//! makes every commit of the group durable at once: the group's mark after
//! its records, one sync of the record log, one sled batch, one flush. No
//! pointer reaches sled before the records it names are synced, and sled
//! takes the whole group in one atomic batch, so a crash keeps either all
//! of a group or none of it (each commit's checkpoints with its events).
//! [`Store::commit`] is a group of one.

use super::*;

/// Commits staged with [`Store::stage`] and not yet committed: sled's
/// writes for all of them, and what to forget if the group fails.
#[derive(Default)]
pub struct Group {
    batch: sled::Batch,
    /// The first and last resourceVersion of the group's events.
    rvs: Option<(u64, u64)>,
    /// Every event's record location (kept in memory as staged).
    located: Vec<(u64, log::Pointer)>,
    /// Compression dictionaries made by the group's commits.
    new_dicts: Vec<String>,
    /// The commits staged.
    commits: usize,
    /// Bytes of records appended.
    bytes: u64,
}

impl Group {
    /// The number of commits staged.
    pub fn commits(&self) -> usize {
        self.commits
    }

    /// The number of events staged.
    pub fn events(&self) -> usize {
        self.located.len()
    }

    /// Bytes of records staged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether nothing was staged.
    pub fn is_empty(&self) -> bool {
        self.commits == 0
    }
}

impl Store {
    /// Commits a batch atomically; with [`Durability::Sync`] it is on disk on return.
    /// A failed write puts the store in a fault ([`Store::fault`]) until a
    /// commit succeeds again; the next commit first reopens sled.
    pub fn commit(&self, commit: &Commit) -> Result<()> {
        let mut group = Group::default();
        self.stage(&mut group, commit)?;
        self.commit_group(group)
    }

    /// Appends the records of `commit` to the record log (not synced) and
    /// adds its pointers, checkpoints and head to `group`. Nothing of it
    /// is durable, nor in sled's tree, before [`Store::commit_group`];
    /// its bodies can be read back by resourceVersion at once (the commits
    /// staged after it may need them). Commits are staged in RV order.
    pub fn stage(&self, group: &mut Group, commit: &Commit) -> Result<()> {
        let result = self.before_commit().and_then(|()| self.write_stage(group, commit));
        if result.is_err() {
            self.after_commit(&result);
        }
        result
    }

    fn write_stage(&self, group: &mut Group, commit: &Commit) -> Result<()> {
        let mut dicts = self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone();
        let new_dicts = new_dictionaries(&dicts, &commit.events);
        for (resource, dict) in &new_dicts {
            dicts.insert(resource.clone(), dict.clone());
        }
        let mut compressors = self.compressors.lock().unwrap_or_else(|e| e.into_inner());
        let records = commit
            .events
            .iter()
            .map(|event| encode_event_with(event, dicts.get(&event.resource), &mut compressors))
            .collect::<Result<Vec<_>>>()?;
        drop(compressors);
        if let Some(last) = commit.events.last() {
            self.keep_below_ceiling(last.rv)?;
        }
        // The group's mark follows its last records, at its commit.
        let pointers = self.log.append_unmarked(&records).map_err(io_error)?;
        group.bytes += records.iter().map(|r| r.len() as u64).sum::<u64>();
        let located: Vec<(u64, log::Pointer)> = commit.events.iter().map(|event| event.rv).zip(pointers).collect();
        for (resource, dict) in &new_dicts {
            group.batch.insert(meta_key(&format!("{DICT_PREFIX}{resource}")), &dict[..]);
            group.new_dicts.push(resource.clone());
        }
        for chunk in located.chunks(log::GROUP_EVENTS) {
            group.batch.insert(&event_key(chunk[0].0)[..], log::encode_group(chunk[0].0, chunk));
        }
        for (cluster, resource, member_rv) in &commit.checkpoints {
            group.batch.insert(checkpoint_key(cluster, resource), member_rv.as_bytes());
        }
        if let (Some(first), Some(last)) = (commit.events.first(), commit.events.last()) {
            group.rvs = Some((group.rvs.map_or(first.rv, |(f, _)| f), last.rv));
            group.batch.insert(meta_key("head"), &last.rv.to_be_bytes()[..]);
        }
        // Readers of this group's records (the commits staged after it)
        // need the dictionaries and locations now; forgotten if it fails.
        if !new_dicts.is_empty() {
            *self.dicts.write().unwrap_or_else(|e| e.into_inner()) = dicts;
        }
        self.locations.insert(located.iter().copied());
        group.located.extend(located);
        group.commits += 1;
        Ok(())
    }

    /// Commits every commit staged in `group` at once; with
    /// [`Durability::Sync`] they are on disk on return (one sync of the
    /// record log, one flush of sled). On failure none of them is
    /// committed, and their records are dead bytes of the log.
    pub fn commit_group(&self, group: Group) -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        let result = self.write_group(group);
        self.after_commit(&result);
        result
    }

    fn write_group(&self, group: Group) -> Result<()> {
        let Group { batch, rvs, located, new_dicts, .. } = group;
        let sync = self.durability == Durability::Sync;
        let written = (|| -> Result<()> {
            // Records first, then the pointers to them. With `Sync` the
            // group's mark follows once sled flushed it (synced with the
            // next group's records); otherwise before sled's batch.
            let mark = rvs.map(|(first_rv, head_rv)| log::Mark { first_rv, head_rv, flushed: sync });
            match (sync, mark) {
                (true, Some(_)) => self.log.sync_appended().map_err(io_error)?,
                (false, Some(_)) => {
                    self.log.append_marked(&[], false, mark).map_err(io_error)?;
                }
                (_, None) => {}
            }
            self.tree()?.apply_batch(batch)?;
            if sync {
                self.db()?.flush()?;
                // The group is committed now whatever becomes of its mark:
                // without one a start checks sled against an older mark.
                if let Err(e) = mark.map_or(Ok(Vec::new()), |mark| self.log.append_marked(&[], false, Some(mark))) {
                    tracing::warn!(error = %e, "Writing the mark of a committed group to the record log failed.");
                }
            }
            Ok(())
        })();
        if written.is_err() {
            let mut dicts = self.dicts.write().unwrap_or_else(|e| e.into_inner());
            for resource in &new_dicts {
                dicts.remove(resource);
            }
            drop(dicts);
            self.locations.remove(located.iter().map(|(rv, _)| *rv));
        }
        written
    }

    /// Syncs the record log, then flushes sled.
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.log.sync().map_err(io_error)?;
        self.db()?.flush()?;
        Ok(())
    }
}
