//! The reflector: what a batch from a member's watcher does to the merged
//! index, planned and applied in one place. A [`Reflector`] owns the index,
//! the tombstones of recent deletions and the lists being received in parts;
//! [`Reflector::apply`] takes one (cluster, resource type, batch) and returns
//! the events to commit, already applied to its index, and
//! [`Reflector::remove_cluster`] and [`Reflector::remove_where`] turn the
//! objects of a cluster or a type into deletions. kube-runtime's reflector
//! store is the model: every event goes through one synchronous method,
//! and a relist (here possibly received in parts) replaces what the member
//! listed before.
//!
//! Events come out numbered from the index's head on, without a commit time
//! (the caller stamps, commits and publishes them). Nothing here does I/O:
//! the last body of an object deleted by a relist or a removal is read
//! through the closure the caller passes.

use std::collections::{HashMap, HashSet};

use crate::event::{Change, EventType, IndexEntry, ObjectKey, StoredEvent};
use crate::index::Index;
use crate::object::{Ingested, ServedBody};

/// What a watcher hands over for one (cluster, resource type).
#[derive(Debug)]
pub enum WatchBatch {
    /// Changes seen on the watch stream, in order.
    Changes(Vec<Change>),
    /// The complete state from a fresh list: applied as a diff.
    Relist(Vec<Ingested>),
    /// A part of a fresh list too large for one batch, committed as it
    /// arrives (upserts only; no checkpoint): `first` starts a new list. A
    /// list's first part is applied before the member has sent the rest, so
    /// neither the whole list nor its events are ever held at once.
    RelistPart {
        /// This part starts a list (parts of an unfinished one are forgotten).
        first: bool,
        /// The objects.
        objects: Vec<Ingested>,
    },
    /// The last part of a list sent in parts: applied with the parts before
    /// it as [`WatchBatch::Relist`] (objects in none of them are deleted).
    RelistEnd(Vec<Ingested>),
    /// A bookmark: nothing changed up to the checkpoint.
    Bookmark,
}

impl WatchBatch {
    /// Keeps only the objects for which `keep` holds (a watcher's scope).
    pub fn retain(&mut self, mut keep: impl FnMut(&Ingested) -> bool) {
        match self {
            WatchBatch::Changes(changes) => changes.retain(|c| match c {
                Change::Upsert(i) | Change::Delete(i) => keep(i),
            }),
            WatchBatch::Relist(objects) | WatchBatch::RelistPart { objects, .. } | WatchBatch::RelistEnd(objects) => objects.retain(keep),
            WatchBatch::Bookmark => {}
        }
    }

    /// Whether this is a part of a list before its end (it moves no checkpoint).
    pub fn is_part(&self) -> bool {
        matches!(self, WatchBatch::RelistPart { .. })
    }

    /// Whether this ends a list: what the reflector then holds for the
    /// (cluster, type) is exactly what the member listed.
    pub fn ends_list(&self) -> bool {
        matches!(self, WatchBatch::Relist(_) | WatchBatch::RelistEnd(_))
    }
}

/// The merged index with what it takes to apply watch batches to it: the
/// tombstones of recent deletions and the lists being received in parts.
#[derive(Debug, Default)]
pub struct Reflector {
    index: Index,
    /// Recent deletions, against late changes of deleted objects.
    tombstones: Tombstones,
    /// Lists being received in parts: what each listed so far, by (cluster, resource).
    relists: HashMap<(String, String), Relisting>,
}

impl Reflector {
    /// A reflector continuing from `index` (the recovered or published one).
    pub fn new(index: Index) -> Reflector {
        Reflector { index, tombstones: Tombstones::default(), relists: HashMap::new() }
    }

    /// The index with every batch applied so far. A clone is O(1).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Puts back an index taken from [`Reflector::index`] before a batch
    /// whose events could not be committed. The tombstones and lists in
    /// progress stay as the batch left them: the watcher that sent it
    /// starts again from its last checkpoint, and its next list replaces both.
    pub fn restore_index(&mut self, index: Index) {
        self.index = index;
    }

    /// Whether a list is being received in parts.
    pub fn is_relisting(&self) -> bool {
        !self.relists.is_empty()
    }

    /// Applies one batch of `cluster`'s `resource` and returns its events,
    /// numbered from the head on. `last_body` reads the body of the event at
    /// an RV (an object that a list no longer has is deleted with it; one
    /// whose body cannot be read is kept).
    pub fn apply(
        &mut self,
        cluster: &str,
        resource: &str,
        batch: WatchBatch,
        last_body: impl FnMut(u64) -> Option<ServedBody>,
    ) -> Vec<StoredEvent> {
        let index = &mut self.index;
        let relist_key = || (cluster.to_string(), resource.to_string());
        match batch {
            WatchBatch::Changes(changes) => {
                let mut events = Vec::new();
                for change in changes {
                    if let Some(event) = plan_watch_change(index, &self.tombstones, resource, cluster, change, index.head_rv() + 1) {
                        if event.event_type == EventType::Deleted {
                            self.tombstones.record(resource, &event.key, &event.member_rv);
                        }
                        index.apply(&event);
                        events.push(event);
                    }
                }
                events
            }
            WatchBatch::Relist(objects) => {
                self.relists.remove(&relist_key());
                self.tombstones.forget(resource, cluster);
                let first_rv = index.head_rv() + 1;
                plan_relist(index, resource, cluster, objects, first_rv, last_body)
            }
            WatchBatch::RelistPart { first, objects } => {
                let first_rv = index.head_rv() + 1;
                if first {
                    self.relists.insert(relist_key(), Relisting::starting_at(first_rv));
                    self.tombstones.forget(resource, cluster);
                }
                let relisting = self.relists.entry(relist_key()).or_insert_with(|| Relisting::starting_at(first_rv));
                plan_relist_part(index, resource, cluster, objects, relisting, first_rv)
            }
            WatchBatch::RelistEnd(objects) => {
                let first_rv = index.head_rv() + 1;
                let mut relisting = self.relists.remove(&relist_key()).unwrap_or_else(|| Relisting::starting_at(first_rv));
                self.tombstones.forget(resource, cluster);
                let mut events = plan_relist_part(index, resource, cluster, objects, &mut relisting, first_rv);
                let deleted = plan_relist_end(index, resource, cluster, &relisting, index.head_rv() + 1, last_body);
                for event in &deleted {
                    index.apply(event);
                }
                events.extend(deleted);
                events
            }
            WatchBatch::Bookmark => Vec::new(),
        }
    }

    /// Turns every object of `cluster` into a DELETED event (see
    /// [`Reflector::remove_where`]) and forgets its lists in progress.
    pub fn remove_cluster<E>(
        &mut self,
        cluster: &str,
        last_body: impl FnMut(u64) -> Result<Option<ServedBody>, E>,
    ) -> Result<Vec<StoredEvent>, E> {
        self.relists.retain(|(c, _), _| c != cluster);
        self.remove_where(&[cluster], |_, _| true, last_body)
    }

    /// Turns every object of `clusters` for which `doomed(resource, key)`
    /// holds (a type no longer selected in a cluster, a namespace no longer
    /// kept) into a DELETED event with its last body, read by `last_body`
    /// from the RV of its current version (an object whose body is gone is
    /// kept); a type's events in list order. Only the clusters' own maps are
    /// walked: a member added to a fleet of 1,000 (which prunes what is no
    /// longer selected there) walked all 2M objects, twice. On an error of
    /// `last_body` the index is left as it was.
    pub fn remove_where<E>(
        &mut self,
        clusters: &[&str],
        mut doomed: impl FnMut(&str, &ObjectKey) -> bool,
        mut last_body: impl FnMut(u64) -> Result<Option<ServedBody>, E>,
    ) -> Result<Vec<StoredEvent>, E> {
        let mut working = self.index.clone();
        let mut events = Vec::new();
        for resource in working.resource_keys() {
            let mut doomed: Vec<(ObjectKey, std::sync::Arc<IndexEntry>)> = clusters
                .iter()
                .flat_map(|cluster| working.range_of_cluster(&resource, cluster, None, None))
                .filter(|(k, _)| doomed(&resource, k))
                .map(|(k, e)| (k.clone(), e.clone()))
                .collect();
            doomed.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
            doomed.dedup_by(|(a, _), (b, _)| a == b);
            for (key, entry) in doomed {
                let Some(body) = last_body(entry.rv)? else { continue };
                let ingested = Ingested {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    member_rv: entry.member_rv().to_string(),
                    uid: entry.uid().to_string(),
                    labels: entry.labels_owned(),
                    fields: entry.fields_owned(),
                    body,
                };
                let rv = working.head_rv() + 1;
                if let Some(event) = plan_change(&working, &resource, &key.cluster, Change::Delete(ingested), rv) {
                    debug_assert_eq!(event.event_type, EventType::Deleted);
                    working.apply(&event);
                    events.push(event);
                }
            }
        }
        self.index = working;
        Ok(events)
    }
}

/// Plans the event for one change seen by a watcher, numbered `rv`, or `None`
/// when it changes nothing (a duplicate, or a delete of an unknown object).
pub fn plan_change(index: &Index, resource: &str, cluster: &str, change: Change, rv: u64) -> Option<StoredEvent> {
    match change {
        Change::Upsert(ingested) => {
            let key = key_of(&ingested, cluster);
            match index.get(resource, &key) {
                Some(entry) if entry.member_rv() == ingested.member_rv && !ingested.member_rv.is_empty() => None,
                Some(entry) => Some(StoredEvent::new(rv, EventType::Modified, resource, cluster, entry.rv, ingested)),
                None => Some(StoredEvent::new(rv, EventType::Added, resource, cluster, 0, ingested)),
            }
        }
        Change::Delete(ingested) => {
            let key = key_of(&ingested, cluster);
            let entry = index.get(resource, &key)?;
            Some(StoredEvent::new(rv, EventType::Deleted, resource, cluster, entry.rv, ingested))
        }
    }
}

/// [`plan_change`] for a change read from a watch stream, which skips a
/// change older than what the index holds for that object (by member RV,
/// compared as integers when both are): a member's watch delivers each
/// object's changes in order, so an older one arriving late is a
/// misbehaving member's, and applying it would take the object back to an
/// old version that every later read would serve.
///
/// The same holds for an object deleted lately: a change older than its
/// deletion (by member RV, kept in `tombstones`) is skipped too, so that a
/// late change never brings a deleted object back.
fn plan_watch_change(
    index: &Index,
    tombstones: &Tombstones,
    resource: &str,
    cluster: &str,
    change: Change,
    rv: u64,
) -> Option<StoredEvent> {
    let ingested = match &change {
        Change::Upsert(i) | Change::Delete(i) => i,
    };
    let key = key_of(ingested, cluster);
    let incoming = ingested.member_rv.parse::<u64>().ok();
    match index.get(resource, &key) {
        Some(entry) => {
            if let (Ok(held), Some(incoming)) = (entry.member_rv().parse::<u64>(), incoming) {
                if incoming < held {
                    return None;
                }
            }
        }
        None => {
            if incoming.is_some_and(|incoming| tombstones.buries(resource, &key, incoming)) {
                return None;
            }
        }
    }
    plan_change(index, resource, cluster, change, rv)
}

/// Most deletions remembered by [`Tombstones`] (the oldest are forgotten
/// first): about 100 bytes each.
pub const TOMBSTONES: usize = 65_536;

/// The member RVs of the latest objects deleted through watch streams, so
/// that a change of such an object arriving late (older than its deletion)
/// is recognised and skipped. Bounded ([`TOMBSTONES`]) and kept in memory
/// only: it guards against members that reorder events, for the short time
/// such reordering spans.
#[derive(Debug, Default)]
struct Tombstones {
    by_key: std::collections::HashMap<(String, ObjectKey), u64>,
    order: std::collections::VecDeque<(String, ObjectKey, u64)>,
}

impl Tombstones {
    /// Remembers the deletion of `key` at member RV `member_rv` (ignored when
    /// it is not an integer: it could not be compared).
    pub fn record(&mut self, resource: &str, key: &ObjectKey, member_rv: &str) {
        let Ok(rv) = member_rv.parse::<u64>() else { return };
        self.by_key.insert((resource.to_string(), key.clone()), rv);
        self.order.push_back((resource.to_string(), key.clone(), rv));
        while self.order.len() > TOMBSTONES {
            let Some((resource, key, rv)) = self.order.pop_front() else { break };
            let id = (resource, key);
            if self.by_key.get(&id) == Some(&rv) {
                self.by_key.remove(&id);
            }
        }
    }

    /// Whether a change of `key` at member RV `incoming` is older than the
    /// object's remembered deletion.
    pub fn buries(&self, resource: &str, key: &ObjectKey, incoming: u64) -> bool {
        // A lookup without building the owned pair: few deletions, few checks.
        if self.by_key.is_empty() {
            return false;
        }
        self.by_key.get(&(resource.to_string(), key.clone())).is_some_and(|deleted| incoming < *deleted)
    }

    /// Forgets the deletions of one cluster's type: a relist is the member's
    /// word on what exists (after a restore from backup its RVs may even
    /// have gone back below the remembered ones).
    pub fn forget(&mut self, resource: &str, cluster: &str) {
        self.by_key.retain(|(r, k), _| !(r == resource && k.cluster == cluster));
    }

    /// Number of deletions remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// Plans the events that turn what the index holds for (`resource`,
/// `cluster`) into exactly `objects` (a fresh list of the member): ADDED for
/// new objects, MODIFIED for changed ones (by member RV), DELETED for objects
/// the member no longer has, whose last body `last_body` loads from the store.
/// Events are numbered from `first_rv` on and applied to `index` as they are
/// planned.
fn plan_relist(
    index: &mut Index,
    resource: &str,
    cluster: &str,
    objects: Vec<Ingested>,
    first_rv: u64,
    last_body: impl FnMut(u64) -> Option<ServedBody>,
) -> Vec<StoredEvent> {
    let mut relisting = Relisting::starting_at(first_rv);
    let mut events = plan_relist_part(index, resource, cluster, objects, &mut relisting, first_rv);
    let rv = first_rv + events.len() as u64;
    let deleted = plan_relist_end(index, resource, cluster, &relisting, rv, last_body);
    for event in &deleted {
        index.apply(event);
    }
    events.extend(deleted);
    events
}

/// What a list of one resource type and cluster has listed so far, while
/// it comes in parts ([`plan_relist_part`]).
///
/// An object the list added or changed is known by its index entry: its RV
/// is the list's (`since` or later), as nothing else writes objects of that
/// type and cluster while their watcher lists them. Only the objects listed
/// unchanged, which keep their older RV, are remembered by key: none in an
/// initial sync, where a set of every key listed cost a tenth of the
/// aggregator's time at 1,000,000 pods (growing a 100,000-key table per
/// member, BENCHMARKS.md).
#[derive(Debug, Clone)]
struct Relisting {
    /// The first RV the list could make.
    since: u64,
    /// Objects listed with the member RV the index holds.
    unchanged: HashSet<ObjectKey>,
}

impl Relisting {
    /// A list whose first event (if any) gets `first_rv`.
    pub fn starting_at(first_rv: u64) -> Relisting {
        Relisting { since: first_rv, unchanged: HashSet::new() }
    }

    /// Whether the object at `key`, held in the index as `entry`, was
    /// listed already.
    fn listed(&self, key: &ObjectKey, entry: &IndexEntry) -> bool {
        entry.rv >= self.since || self.unchanged.contains(key)
    }
}

/// The upserts of one part of a list sent in parts (see [`plan_relist`]),
/// numbered from `first_rv` and applied to `index` as they are planned: an
/// object listed before (in this part or an earlier one) is skipped, so a
/// member listing one object twice keeps the first.
fn plan_relist_part(
    index: &mut Index,
    resource: &str,
    cluster: &str,
    objects: Vec<Ingested>,
    relisting: &mut Relisting,
    first_rv: u64,
) -> Vec<StoredEvent> {
    let mut rv = first_rv;
    let mut events = Vec::with_capacity(objects.len());
    for ingested in objects {
        let key = key_of(&ingested, cluster);
        let event = match index.get(resource, &key) {
            Some(entry) if relisting.listed(&key, entry) => continue,
            Some(entry) if entry.member_rv() == ingested.member_rv && !ingested.member_rv.is_empty() => {
                relisting.unchanged.insert(key);
                continue;
            }
            Some(entry) => StoredEvent::new(rv, EventType::Modified, resource, cluster, entry.rv, ingested),
            None => StoredEvent::new(rv, EventType::Added, resource, cluster, 0, ingested),
        };
        index.apply(&event);
        events.push(event);
        rv += 1;
    }
    events
}

/// The deletions that end a list (see [`plan_relist`]): every object of
/// (`resource`, `cluster`) the index holds that the list did not have.
fn plan_relist_end(
    index: &Index,
    resource: &str,
    cluster: &str,
    relisting: &Relisting,
    first_rv: u64,
    mut last_body: impl FnMut(u64) -> Option<ServedBody>,
) -> Vec<StoredEvent> {
    let mut rv = first_rv;
    let mut events = Vec::new();
    // The cluster's objects alone: with a thousand members, walking the
    // type at the end of each member's list walked every member's objects.
    for (key, entry) in index.range_of_cluster(resource, cluster, None, None) {
        if relisting.listed(key, entry) {
            continue;
        }
        let Some(body) = last_body(entry.rv) else { continue };
        events.push(StoredEvent {
            rv,
            event_type: EventType::Deleted,
            resource: resource.to_string(),
            key: key.clone(),
            prev_rv: entry.rv,
            member_rv: entry.member_rv().to_string(),
            uid: entry.uid().to_string(),
            labels: entry.labels_owned(),
            fields: entry.fields_owned(),
            body,
            time_ms: 0,
        });
        rv += 1;
    }
    events
}

fn key_of(ingested: &Ingested, cluster: &str) -> ObjectKey {
    ObjectKey { namespace: ingested.namespace.clone(), name: ingested.name.clone(), cluster: cluster.to_string() }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::object::ingest;
    use crate::resources;

    /// A pod of cluster `m` as ingested (its test label `app=x`).
    pub(crate) fn pod(ns: &str, name: &str, member_rv: &str) -> Ingested {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{member_rv}","labels":{{"app":"x"}}}}}}"#
        );
        ingest(&pods, "m", raw.as_bytes()).unwrap()
    }

    /// Plans and applies like the aggregator does.
    pub(crate) fn commit(index: &mut Index, events: Vec<StoredEvent>) -> Vec<(EventType, String, u64)> {
        events
            .into_iter()
            .map(|e| {
                index.apply(&e);
                (e.event_type, e.key.name.clone(), e.rv)
            })
            .collect()
    }

    /// Each event's type, object name and RV.
    fn summary(events: &[StoredEvent]) -> Vec<(EventType, String, u64)> {
        events.iter().map(|e| (e.event_type, e.key.name.clone(), e.rv)).collect()
    }

    /// The names and member RVs the reflector holds for `cluster`'s pods.
    fn held(reflector: &Reflector, cluster: &str) -> Vec<(String, String)> {
        reflector
            .index()
            .range("v1/pods", None, None)
            .filter(|(k, _)| k.cluster == cluster)
            .map(|(k, e)| (k.name.clone(), e.member_rv().to_string()))
            .collect()
    }

    fn held_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, rv)| (n.to_string(), rv.to_string())).collect()
    }

    /// The last body of any object, as the store would give it.
    fn any_body(_: u64) -> Option<ServedBody> {
        Some(pod("x", "x", "0").body)
    }

    /// A list in parts: each part's objects are in the index at once, the
    /// end deletes what no part had, and a list that starts again forgets
    /// the parts of the one it replaces.
    #[test]
    fn a_list_in_parts_then_its_end() {
        let mut reflector = Reflector::new(Index::at(0));
        let listed = reflector.apply("m", "v1/pods", WatchBatch::Relist(vec![pod("a", "p1", "1"), pod("a", "p2", "1"), pod("a", "p3", "1")]), any_body);
        assert_eq!(summary(&listed), [(EventType::Added, "p1".into(), 1), (EventType::Added, "p2".into(), 2), (EventType::Added, "p3".into(), 3)]);
        assert!(!reflector.is_relisting());

        // A list that breaks off after its first part ...
        let part = reflector.apply("m", "v1/pods", WatchBatch::RelistPart { first: true, objects: vec![pod("a", "p1", "1"), pod("a", "p4", "4")] }, any_body);
        assert_eq!(summary(&part), [(EventType::Added, "p4".into(), 4)]);
        assert!(reflector.is_relisting());
        // ... and the list that replaces it, in two parts and an end.
        let first = reflector.apply("m", "v1/pods", WatchBatch::RelistPart { first: true, objects: vec![pod("a", "p2", "5")] }, any_body);
        assert_eq!(summary(&first), [(EventType::Modified, "p2".into(), 5)]);
        let second = reflector.apply("m", "v1/pods", WatchBatch::RelistPart { first: false, objects: vec![pod("a", "p5", "6"), pod("a", "p2", "9")] }, any_body);
        assert_eq!(summary(&second), [(EventType::Added, "p5".into(), 6)], "an object listed twice keeps its first version");
        assert_eq!(held(&reflector, "m").len(), 5, "nothing is deleted before the end");
        let end = reflector.apply("m", "v1/pods", WatchBatch::RelistEnd(vec![pod("a", "p6", "7")]), any_body);
        assert_eq!(
            summary(&end),
            [(EventType::Added, "p6".into(), 7), (EventType::Deleted, "p1".into(), 8), (EventType::Deleted, "p3".into(), 9), (EventType::Deleted, "p4".into(), 10)]
        );
        assert!(!reflector.is_relisting());
        assert_eq!(held(&reflector, "m"), held_pairs(&[("p2", "5"), ("p5", "6"), ("p6", "7")]));
        assert_eq!(reflector.index().head_rv(), 10);
        // A bookmark changes nothing.
        assert!(reflector.apply("m", "v1/pods", WatchBatch::Bookmark, any_body).is_empty());
    }

    /// A change older than an object's deletion, arriving after it, does
    /// not bring the object back; a newer one re-creates it.
    #[test]
    fn a_late_change_after_a_delete() {
        let mut reflector = Reflector::new(Index::at(0));
        let changes = |list: Vec<Change>| WatchBatch::Changes(list);
        reflector.apply("m", "v1/pods", changes(vec![Change::Upsert(pod("a", "p", "8")), Change::Upsert(pod("a", "q", "8"))]), any_body);
        let deleted = reflector.apply("m", "v1/pods", changes(vec![Change::Delete(pod("a", "p", "10"))]), any_body);
        assert_eq!(summary(&deleted), [(EventType::Deleted, "p".into(), 3)]);
        let late = reflector.apply("m", "v1/pods", changes(vec![Change::Upsert(pod("a", "p", "9")), Change::Upsert(pod("a", "q", "7"))]), any_body);
        assert!(late.is_empty(), "{:?}", summary(&late));
        assert_eq!(held(&reflector, "m"), held_pairs(&[("q", "8")]));
        let again = reflector.apply("m", "v1/pods", changes(vec![Change::Upsert(pod("a", "p", "11"))]), any_body);
        assert_eq!(summary(&again), [(EventType::Added, "p".into(), 4)]);
    }

    /// A member restored from a backup numbers its objects again from an
    /// older resourceVersion: its list is taken as it is (older versions
    /// replace newer ones, deleted objects come back), and the watch that
    /// follows it goes on from there, deletions remembered before included.
    #[test]
    fn a_member_restored_from_a_backup() {
        let mut reflector = Reflector::new(Index::at(0));
        reflector.apply("m", "v1/pods", WatchBatch::Relist(vec![pod("a", "p", "100"), pod("a", "q", "100"), pod("a", "r", "100")]), any_body);
        reflector.apply("m", "v1/pods", WatchBatch::Changes(vec![Change::Delete(pod("a", "q", "120")), Change::Upsert(pod("a", "p", "130"))]), any_body);
        // The backup was taken at 50: p at an older version, q alive, r not yet created.
        let listed = reflector.apply("m", "v1/pods", WatchBatch::Relist(vec![pod("a", "p", "40"), pod("a", "q", "45")]), any_body);
        assert_eq!(
            summary(&listed),
            [(EventType::Modified, "p".into(), 6), (EventType::Added, "q".into(), 7), (EventType::Deleted, "r".into(), 8)]
        );
        assert_eq!(held(&reflector, "m"), held_pairs(&[("p", "40"), ("q", "45")]));
        // The member goes on from 50: changes below the old RVs are new ones now.
        let changes = vec![Change::Upsert(pod("a", "q", "51")), Change::Delete(pod("a", "p", "52")), Change::Upsert(pod("a", "p", "53"))];
        let watched = reflector.apply("m", "v1/pods", WatchBatch::Changes(changes), any_body);
        assert_eq!(
            summary(&watched),
            [(EventType::Modified, "q".into(), 9), (EventType::Deleted, "p".into(), 10), (EventType::Added, "p".into(), 11)]
        );
        assert_eq!(held(&reflector, "m"), held_pairs(&[("p", "53"), ("q", "51")]));
    }

    /// Removing a type from a cluster deletes its objects there, with their
    /// last bodies, and nothing else; removing a cluster forgets its list
    /// in progress. A failed body read leaves the index as it was.
    #[test]
    fn removing_a_type_or_a_cluster() {
        let mut reflector = Reflector::new(Index::at(0));
        let config_maps = resources::find(&resources::builtin(), "", "v1", "configmaps").unwrap().clone();
        let config_map = ingest(&config_maps, "m", br#"{"metadata":{"name":"c","namespace":"a","resourceVersion":"3"}}"#).unwrap();
        reflector.apply("m", "v1/pods", WatchBatch::Relist(vec![pod("a", "p1", "1"), pod("b", "p2", "1")]), any_body);
        reflector.apply("other", "v1/pods", WatchBatch::Relist(vec![pod("a", "p1", "2")]), any_body);
        reflector.apply("m", "v1/configmaps", WatchBatch::Relist(vec![config_map]), any_body);

        let failed: Result<_, &str> = reflector.remove_where(&["m"], |resource, _| resource == "v1/pods", |_| Err("unreadable"));
        assert!(failed.is_err());
        assert_eq!(held(&reflector, "m").len(), 2, "nothing removed");
        assert_eq!(reflector.index().head_rv(), 4);

        let bodies: Result<_, &str> = Ok(());
        let removed = reflector.remove_where(&["m"], |resource, _| resource == "v1/pods", |_| bodies.map(|()| any_body(0))).unwrap();
        assert_eq!(summary(&removed), [(EventType::Deleted, "p1".into(), 5), (EventType::Deleted, "p2".into(), 6)]);
        assert!(removed.iter().all(|e| e.key.cluster == "m" && e.resource == "v1/pods" && e.prev_rv > 0));
        assert!(held(&reflector, "m").is_empty());
        assert_eq!(held(&reflector, "other"), held_pairs(&[("p1", "2")]), "another cluster's objects stay");
        assert_eq!(reflector.index().len("v1/configmaps"), 1, "another type's objects stay");

        reflector.apply("m", "v1/pods", WatchBatch::RelistPart { first: true, objects: vec![pod("a", "p3", "7")] }, any_body);
        assert!(reflector.is_relisting());
        let removed = reflector.remove_cluster("m", |_| Ok::<_, ()>(any_body(0))).unwrap();
        assert_eq!(removed.len(), 2, "the configmap and the pod listed so far");
        assert!(!reflector.is_relisting());
        assert_eq!(reflector.index().total(), 1);
    }

    /// A list applied in parts (each part's events applied before the next
    /// is planned, deletions at the end) makes the same events and index as
    /// the list in one batch, duplicates across parts included.
    #[test]
    fn a_relist_in_parts_equals_the_relist_in_one() {
        let body = |_| Some(pod("x", "x", "0").body);
        let mut start = Index::at(10);
        let before = plan_relist(&mut start, "v1/pods", "m", (0..6).map(|i| pod("a", &format!("p{i}"), "1")).collect(), 11, |_| None);
        commit(&mut start, before);
        let other = plan_change(&start, "v1/pods", "other", Change::Upsert(pod("a", "p1", "3")), 17).unwrap();
        commit(&mut start, vec![other]);
        // p0, p3 unchanged; p1 changed; p2, p4, p5 gone; q0..q2 new; p1
        // (changed), p0 (unchanged) and q1 (new) listed twice, the second
        // time with another version: the first wins.
        let list = vec![
            pod("a", "p0", "1"),
            pod("a", "p1", "2"),
            pod("b", "q0", "2"),
            pod("a", "p3", "1"),
            pod("a", "p1", "9"),
            pod("b", "q1", "2"),
            pod("b", "q1", "4"),
            pod("b", "q2", "2"),
            pod("a", "p0", "6"),
        ];

        let mut whole = start.clone();
        let planned = plan_relist(&mut whole, "v1/pods", "m", list.clone(), 18, body);
        let one = commit(&mut whole, planned);

        for split in [vec![2, 5], vec![1], vec![3, 4, 6], vec![7], vec![6, 8], vec![]] {
            let mut parts = start.clone();
            let mut relisting = Relisting::starting_at(parts.head_rv() + 1);
            let mut got = Vec::new();
            let mut from = 0;
            for to in split.iter().copied().chain([list.len()]) {
                let rv = parts.head_rv() + 1;
                let events = plan_relist_part(&mut parts, "v1/pods", "m", list[from..to].to_vec(), &mut relisting, rv);
                got.extend(commit(&mut parts, events));
                from = to;
            }
            let rv = parts.head_rv() + 1;
            let deleted = plan_relist_end(&parts, "v1/pods", "m", &relisting, rv, body);
            got.extend(commit(&mut parts, deleted));
            assert_eq!(got, one, "split at {split:?}");
            let keys = |i: &Index| i.range("v1/pods", None, None).map(|(k, e)| (k.clone(), e.rv)).collect::<Vec<_>>();
            assert_eq!(keys(&parts), keys(&whole), "split at {split:?}");
        }
        assert_eq!(
            one,
            vec![
                (EventType::Modified, "p1".to_string(), 18),
                (EventType::Added, "q0".to_string(), 19),
                (EventType::Added, "q1".to_string(), 20),
                (EventType::Added, "q2".to_string(), 21),
                (EventType::Deleted, "p2".to_string(), 22),
                (EventType::Deleted, "p4".to_string(), 23),
                (EventType::Deleted, "p5".to_string(), 24),
            ]
        );
        let member_rv = |i: &Index, name: &str, ns: &str| {
            i.get("v1/pods", &ObjectKey { namespace: ns.into(), name: name.into(), cluster: "m".into() }).map(|e| e.member_rv().to_string())
        };
        assert_eq!(member_rv(&whole, "p1", "a").as_deref(), Some("2"));
        assert_eq!(member_rv(&whole, "q1", "b").as_deref(), Some("2"));
        assert_eq!(member_rv(&whole, "p0", "a").as_deref(), Some("1"));
    }

    #[test]
    fn relist_is_applied_as_a_diff() {
        let mut index = Index::at(100);
        let events = plan_relist(&mut index, "v1/pods", "m", vec![pod("a", "p1", "1"), pod("a", "p2", "1"), pod("b", "p3", "1")], 101, |_| None);
        commit(&mut index, events);
        assert_eq!(index.len("v1/pods"), 3);
        // Another cluster's object must survive this cluster's relist.
        let other = plan_change(&index, "v1/pods", "other", Change::Upsert(pod("a", "p1", "7")), 104).unwrap();
        commit(&mut index, vec![other]);

        let body = |_| Some(pod("x", "x", "0").body);
        let events = plan_relist(&mut index, "v1/pods", "m", vec![pod("a", "p1", "1"), pod("a", "p2", "5"), pod("c", "p4", "5")], 105, body);
        let got = commit(&mut index, events);
        assert_eq!(
            got,
            vec![
                (EventType::Modified, "p2".to_string(), 105),
                (EventType::Added, "p4".to_string(), 106),
                (EventType::Deleted, "p3".to_string(), 107),
            ]
        );
        let names: Vec<_> = index.range("v1/pods", None, None).map(|(k, _)| (k.namespace.clone(), k.name.clone(), k.cluster.clone())).collect();
        assert_eq!(
            names,
            vec![
                ("a".into(), "p1".into(), "m".into()),
                ("a".into(), "p1".into(), "other".into()),
                ("a".into(), "p2".into(), "m".into()),
                ("c".into(), "p4".into(), "m".into()),
            ]
        );
    }


    #[test]
    fn a_late_older_change_of_an_object_is_not_applied() {
        let mut index = Index::default();
        let added = plan_watch_change(&index, &Tombstones::default(), "v1/pods", "m", Change::Upsert(pod("a", "p", "8")), 1).unwrap();
        index.apply(&added);
        assert!(plan_watch_change(&index, &Tombstones::default(), "v1/pods", "m", Change::Upsert(pod("a", "p", "7")), 2).is_none(), "older upsert");
        assert!(plan_watch_change(&index, &Tombstones::default(), "v1/pods", "m", Change::Delete(pod("a", "p", "7")), 2).is_none(), "older delete");
        let newer = plan_watch_change(&index, &Tombstones::default(), "v1/pods", "m", Change::Upsert(pod("a", "p", "9")), 2).unwrap();
        assert_eq!(newer.member_rv, "9");
        // A relist, by contrast, takes the member's word (a restored member's RVs go back).
        assert!(plan_change(&index, "v1/pods", "m", Change::Upsert(pod("a", "p", "3")), 2).is_some());
    }

    #[test]
    fn a_late_change_of_a_deleted_object_is_not_applied() {
        let mut index = Index::default();
        let mut tombstones = Tombstones::default();
        let added = plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Upsert(pod("a", "p", "8")), 1).unwrap();
        index.apply(&added);
        let deleted = plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Delete(pod("a", "p", "10")), 2).unwrap();
        tombstones.record("v1/pods", &deleted.key, &deleted.member_rv);
        index.apply(&deleted);
        assert!(plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Upsert(pod("a", "p", "9")), 3).is_none(), "a change older than the deletion");
        assert!(plan_watch_change(&index, &tombstones, "v1/pods", "other", Change::Upsert(pod("a", "p", "9")), 3).is_some(), "another cluster's object of that name");
        assert!(plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Upsert(pod("b", "p", "9")), 3).is_some(), "another object");
        let again = plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Upsert(pod("a", "p", "11")), 3).unwrap();
        assert_eq!(again.event_type, EventType::Added, "re-created after its deletion");
        tombstones.forget("v1/pods", "m");
        assert!(plan_watch_change(&index, &tombstones, "v1/pods", "m", Change::Upsert(pod("a", "p", "9")), 3).is_some(), "after a relist the member's word");
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut tombstones = Tombstones::default();
        let key = |i: usize| ObjectKey { namespace: "n".into(), name: format!("p{i}"), cluster: "m".into() };
        for i in 0..TOMBSTONES + 10 {
            tombstones.record("v1/pods", &key(i), "100");
        }
        assert_eq!(tombstones.len(), TOMBSTONES);
        assert!(!tombstones.buries("v1/pods", &key(0), 5), "the oldest forgotten");
        assert!(tombstones.buries("v1/pods", &key(TOMBSTONES + 9), 5));
    }

}
