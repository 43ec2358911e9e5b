//! Committing a batch: records appended to the record log, then their
//! pointers, the checkpoints and the head RV in one sled batch.

use super::*;

impl Store {
    /// Commits a batch atomically; with [`Durability::Sync`] it is on disk on return.
    /// A failed write puts the store in a fault ([`Store::fault`]) until a
    /// commit succeeds again; the next commit first reopens sled.
    pub fn commit(&self, commit: &Commit) -> Result<()> {
        let result = self.before_commit().and_then(|()| self.write_commit(commit));
        self.after_commit(&result);
        result
    }

    fn write_commit(&self, commit: &Commit) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut head = None;
        let mut dicts = self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone();
        let new_dicts = new_dictionaries(&dicts, &commit.events);
        for (resource, dict) in &new_dicts {
            batch.insert(meta_key(&format!("{DICT_PREFIX}{resource}")), &dict[..]);
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
        // Records first, then the pointers to them.
        let mark = match (commit.events.first(), commit.events.last()) {
            (Some(first), Some(last)) => Some(log::Mark { first_rv: first.rv, head_rv: last.rv }),
            _ => None,
        };
        let pointers = self.log.append_marked(&records, self.durability == Durability::Sync, mark).map_err(io_error)?;
        let located: Vec<(u64, log::Pointer)> = commit.events.iter().map(|event| event.rv).zip(pointers).collect();
        for group in located.chunks(log::GROUP_EVENTS) {
            batch.insert(&event_key(group[0].0)[..], log::encode_group(group[0].0, group));
            head = group.last().map(|(rv, _)| *rv);
        }
        for (cluster, resource, member_rv) in &commit.checkpoints {
            batch.insert(checkpoint_key(cluster, resource), member_rv.as_bytes());
        }
        if let Some(head) = head {
            batch.insert(meta_key("head"), &head.to_be_bytes()[..]);
        }
        // Readers may meet the new records as soon as the batch is applied:
        // the dictionaries are known before, and forgotten if it fails.
        if !new_dicts.is_empty() {
            *self.dicts.write().unwrap_or_else(|e| e.into_inner()) = dicts;
        }
        if let Err(e) = self.tree()?.apply_batch(batch) {
            let mut dicts = self.dicts.write().unwrap_or_else(|e| e.into_inner());
            for (resource, _) in &new_dicts {
                dicts.remove(resource);
            }
            return Err(e.into());
        }
        self.locations.insert(located);
        if self.durability == Durability::Sync {
            self.db()?.flush()?;
        }
        Ok(())
    }

    /// Syncs the record log, then flushes sled.
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.log.sync().map_err(io_error)?;
        self.db()?.flush()?;
        Ok(())
    }
}
