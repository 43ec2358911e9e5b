//! The merged index: every live object of every cluster, by resource type,
//! in list order. A view of the event log: it changes through one method,
//! [`Index::apply`], and the aggregator plans events against it with
//! [`plan_change`] and [`plan_relist`].
//!
//! The maps are persistent (`imbl`), so a clone is O(1) and shares structure:
//! the aggregator publishes a clone after each batch as the snapshot that
//! readers use while it goes on writing.

use std::collections::HashSet;
use std::sync::Arc;

use crate::event::{Change, EventType, IndexEntry, ObjectKey, StoredEvent};
use crate::object::{Ingested, ServedBody};

/// The objects of one resource type, in list order.
pub type ResourceIndex = imbl::OrdMap<ObjectKey, Arc<IndexEntry>>;

/// Live objects by resource type, with the RV of the last applied event.
#[derive(Debug, Clone, Default)]
pub struct Index {
    head_rv: u64,
    resources: imbl::HashMap<String, ResourceIndex>,
    /// How many of each type's objects each scope holds, kept with every
    /// change (see [`ScopeCounts`]).
    counts: imbl::HashMap<String, ScopeCounts>,
}

/// The live objects of one type in each namespace, each cluster and each
/// namespace of each cluster: what a page of one scope reports as
/// `remainingItemCount` and what `/admin/v1/clusters` shows, read without
/// walking the type (a cluster's objects are spread over all of it, since
/// the cluster is the last part of a key).
#[derive(Debug, Clone, Default)]
struct ScopeCounts {
    namespaces: imbl::HashMap<String, usize>,
    clusters: imbl::HashMap<String, usize>,
    /// By namespace, then cluster.
    namespaces_of_clusters: imbl::HashMap<String, imbl::HashMap<String, usize>>,
}

impl ScopeCounts {
    /// Counts one object in (`added`) or out of its scopes.
    fn count(&mut self, key: &ObjectKey, added: bool) {
        fn step(counts: &mut imbl::HashMap<String, usize>, scope: &str, added: bool) {
            match counts.get_mut(scope) {
                Some(n) if added => *n += 1,
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    counts.remove(scope);
                }
                None if added => {
                    counts.insert(scope.to_string(), 1);
                }
                None => debug_assert!(false, "an object counted out of a scope it was never counted in"),
            }
        }
        step(&mut self.namespaces, &key.namespace, added);
        step(&mut self.clusters, &key.cluster, added);
        let of_namespace = match self.namespaces_of_clusters.get_mut(key.namespace.as_str()) {
            Some(clusters) => clusters,
            None => self.namespaces_of_clusters.entry(key.namespace.clone()).or_default(),
        };
        step(of_namespace, &key.cluster, added);
        if of_namespace.is_empty() {
            self.namespaces_of_clusters.remove(key.namespace.as_str());
        }
    }

    /// Adds the counts of objects loaded at once (see [`Index::load_all`]).
    fn add(&mut self, loaded: LoadedCounts) {
        for (namespace, clusters) in loaded.0 {
            for (cluster, n) in clusters {
                *self.namespaces.entry(namespace.clone()).or_default() += n;
                *self.clusters.entry(cluster.clone()).or_default() += n;
                *self.namespaces_of_clusters.entry(namespace.clone()).or_default().entry(cluster).or_default() += n;
            }
        }
    }
}

/// Objects counted by namespace, then cluster, in plain maps while many
/// are loaded (a million at a warm start) and added to the persistent
/// [`ScopeCounts`] once.
#[derive(Default)]
struct LoadedCounts(std::collections::HashMap<String, std::collections::HashMap<String, usize>>);

impl LoadedCounts {
    fn count(&mut self, key: &ObjectKey) {
        let clusters = match self.0.get_mut(key.namespace.as_str()) {
            Some(clusters) => clusters,
            None => self.0.entry(key.namespace.clone()).or_default(),
        };
        match clusters.get_mut(key.cluster.as_str()) {
            Some(n) => *n += 1,
            None => {
                clusters.insert(key.cluster.clone(), 1);
            }
        }
    }
}

impl Index {
    /// An empty index at `head_rv` (the store's head after recovery).
    pub fn at(head_rv: u64) -> Index {
        Index { head_rv, ..Index::default() }
    }

    /// Puts one object's entry in, counting it when it is new.
    fn put(&mut self, resource: &str, key: ObjectKey, entry: Arc<IndexEntry>) {
        let objects = match self.resources.get_mut(resource) {
            Some(objects) => objects,
            None => self.resources.entry(resource.to_string()).or_default(),
        };
        if !objects.contains_key(&key) {
            self.counts.entry(resource.to_string()).or_default().count(&key, true);
        }
        objects.insert(key, entry);
    }

    /// Takes one object out, if it is there.
    fn take(&mut self, resource: &str, key: &ObjectKey) {
        if self.resources.get_mut(resource).and_then(|objects| objects.remove(key)).is_some() {
            if let Some(counts) = self.counts.get_mut(resource) {
                counts.count(key, false);
            }
        }
    }

    /// The RV of the last event applied.
    pub fn head_rv(&self) -> u64 {
        self.head_rv
    }

    /// Moves the head without an event (recovery of an index whose last events
    /// were deletions of objects it no longer holds).
    pub fn set_head_rv(&mut self, rv: u64) {
        self.head_rv = self.head_rv.max(rv);
    }

    /// Inserts an entry loaded from the store (recovery).
    pub fn load(&mut self, resource: &str, key: ObjectKey, entry: IndexEntry) {
        self.put(resource, key, Arc::new(entry));
    }

    /// Inserts entries loaded from the store (recovery), in list order for speed.
    pub fn load_all(&mut self, resource: &str, objects: impl IntoIterator<Item = (ObjectKey, Arc<IndexEntry>)>) {
        let existing = self.resources.entry(resource.to_string()).or_default();
        let before = existing.len();
        let (mut loaded, mut counted) = (LoadedCounts::default(), 0);
        for (key, entry) in objects {
            loaded.count(&key);
            counted += 1;
            existing.insert(key, entry);
        }
        if existing.len() == before + counted {
            self.counts.entry(resource.to_string()).or_default().add(loaded);
            return;
        }
        // Some keys were there already (or came twice): count the type again.
        let mut recounted = LoadedCounts::default();
        existing.keys().for_each(|key| recounted.count(key));
        let mut counts = ScopeCounts::default();
        counts.add(recounted);
        self.counts.insert(resource.to_string(), counts);
    }

    /// Applies one committed event: the only way the index changes.
    pub fn apply(&mut self, event: &StoredEvent) {
        match event.event_type {
            EventType::Added | EventType::Modified => self.put(&event.resource, event.key.clone(), Arc::new(event.index_entry())),
            EventType::Deleted => self.take(&event.resource, &event.key),
        }
        self.head_rv = self.head_rv.max(event.rv);
    }

    /// The RV of every live object's current version (the events the log
    /// must keep), in no order.
    pub fn live_rvs(&self) -> impl Iterator<Item = u64> + '_ {
        self.resources.values().flat_map(|objects| objects.values().map(|entry| entry.rv))
    }

    /// The objects of one type (empty when none).
    pub fn resource(&self, resource: &str) -> Option<&ResourceIndex> {
        self.resources.get(resource)
    }

    /// One object.
    pub fn get(&self, resource: &str, key: &ObjectKey) -> Option<&Arc<IndexEntry>> {
        self.resources.get(resource)?.get(key)
    }

    /// Objects of `resource` in list order, optionally of one namespace, after
    /// `start_after` (exclusive) when given.
    pub fn range<'a>(
        &'a self,
        resource: &str,
        namespace: Option<&'a str>,
        start_after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        let Some(objects) = self.resources.get(resource) else {
            return Box::new(std::iter::empty());
        };
        use std::ops::Bound;
        let lower = match (start_after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included(ObjectKey {
                namespace: ns.to_string(),
                name: String::new(),
                cluster: String::new(),
            }),
            (None, None) => Bound::Unbounded,
        };
        let iter = objects.range((lower, Bound::Unbounded));
        match namespace {
            Some(ns) => Box::new(iter.take_while(move |(k, _)| k.namespace == ns)),
            None => Box::new(iter),
        }
    }

    /// Every cluster's object of that namespace and name (for bare names).
    pub fn by_name<'a>(
        &'a self,
        resource: &str,
        namespace: &'a str,
        name: &'a str,
    ) -> Vec<(&'a ObjectKey, &'a Arc<IndexEntry>)> {
        let Some(objects) = self.resources.get(resource) else {
            return Vec::new();
        };
        let from = ObjectKey { namespace: namespace.to_string(), name: name.to_string(), cluster: String::new() };
        objects
            .range(from..)
            .take_while(|(k, _)| k.namespace == namespace && k.name == name)
            .collect()
    }

    /// Number of live objects of a type.
    pub fn len(&self, resource: &str) -> usize {
        self.resources.get(resource).map_or(0, |r| r.len())
    }

    /// Whether the index holds no object at all.
    pub fn is_empty(&self) -> bool {
        self.resources.values().all(|r| r.is_empty())
    }

    /// Number of live objects of all types.
    pub fn total(&self) -> usize {
        self.resources.values().map(|r| r.len()).sum()
    }

    /// Number of live objects of a type held for one cluster.
    pub fn count_cluster(&self, resource: &str, cluster: &str) -> usize {
        self.count_scope(resource, None, Some(cluster))
    }

    /// Number of live objects of a type in a scope: all of them, one
    /// namespace's, one cluster's or one cluster's in one namespace.
    pub fn count_scope(&self, resource: &str, namespace: Option<&str>, cluster: Option<&str>) -> usize {
        let Some(counts) = self.counts.get(resource) else { return 0 };
        let n = match (namespace, cluster) {
            (None, None) => return self.len(resource),
            (Some(ns), None) => counts.namespaces.get(ns),
            (None, Some(c)) => counts.clusters.get(c),
            (Some(ns), Some(c)) => counts.namespaces_of_clusters.get(ns).and_then(|clusters| clusters.get(c)),
        };
        n.copied().unwrap_or(0)
    }

    /// Types that have objects.
    pub fn resource_keys(&self) -> Vec<String> {
        self.resources.keys().cloned().collect()
    }
}

impl Index {
    /// The index as it was at `rv`: undoes `newer` (the events after `rv`,
    /// newest first), restoring each object's previous version through
    /// `load` (which reads the event at an RV from the store). `None` when a
    /// needed version is no longer retained.
    pub fn rewind(
        &self,
        rv: u64,
        newer: impl IntoIterator<Item = StoredEvent>,
        mut load: impl FnMut(u64) -> Option<StoredEvent>,
    ) -> Option<Index> {
        let mut index = self.clone();
        for event in newer {
            if event.rv <= rv {
                continue;
            }
            if event.prev_rv == 0 {
                index.take(&event.resource, &event.key);
            } else {
                let previous = load(event.prev_rv)?;
                index.put(&event.resource, event.key.clone(), Arc::new(previous.index_entry()));
            }
        }
        index.head_rv = rv;
        Some(index)
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
pub fn plan_watch_change(
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
pub struct Tombstones {
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
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Plans the events that turn what the index holds for (`resource`,
/// `cluster`) into exactly `objects` (a fresh list of the member): ADDED for
/// new objects, MODIFIED for changed ones (by member RV), DELETED for objects
/// the member no longer has, whose last body `last_body` loads from the store.
/// Events are numbered from `first_rv` on and applied to `index` as they are
/// planned.
pub fn plan_relist(
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
pub struct Relisting {
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
pub fn plan_relist_part(
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
pub fn plan_relist_end(
    index: &Index,
    resource: &str,
    cluster: &str,
    relisting: &Relisting,
    first_rv: u64,
    mut last_body: impl FnMut(u64) -> Option<ServedBody>,
) -> Vec<StoredEvent> {
    let mut rv = first_rv;
    let mut events = Vec::new();
    if let Some(objects) = index.resource(resource) {
        for (key, entry) in objects.iter().filter(|(k, _)| k.cluster == cluster) {
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
    }
    events
}

fn key_of(ingested: &Ingested, cluster: &str) -> ObjectKey {
    ObjectKey { namespace: ingested.namespace.clone(), name: ingested.name.clone(), cluster: cluster.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ingest;
    use crate::resources;

    fn pod(ns: &str, name: &str, member_rv: &str) -> Ingested {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{member_rv}","labels":{{"app":"x"}}}}}}"#
        );
        ingest(&pods, "m", raw.as_bytes()).unwrap()
    }

    /// Plans and applies like the aggregator does.
    fn commit(index: &mut Index, events: Vec<StoredEvent>) -> Vec<(EventType, String, u64)> {
        events
            .into_iter()
            .map(|e| {
                index.apply(&e);
                (e.event_type, e.key.name.clone(), e.rv)
            })
            .collect()
    }

    #[test]
    fn global_rvs_increase_and_changes_become_events() {
        let mut index = Index::at(0);
        let mut out = Vec::new();
        for (i, change) in [
            Change::Upsert(pod("default", "a", "10")),
            Change::Upsert(pod("default", "b", "11")),
            Change::Upsert(pod("default", "a", "12")),
            Change::Upsert(pod("default", "a", "12")), // duplicate: no event
            Change::Delete(pod("default", "b", "13")),
            Change::Delete(pod("default", "zz", "14")), // unknown: no event
        ]
        .into_iter()
        .enumerate()
        {
            let rv = index.head_rv() + 1;
            if let Some(e) = plan_change(&index, "v1/pods", "m", change, rv) {
                out.extend(commit(&mut index, vec![e]));
            }
            let _ = i;
        }
        assert_eq!(
            out,
            vec![
                (EventType::Added, "a".to_string(), 1),
                (EventType::Added, "b".to_string(), 2),
                (EventType::Modified, "a".to_string(), 3),
                (EventType::Deleted, "b".to_string(), 4),
            ]
        );
        assert_eq!(index.head_rv(), 4);
        assert_eq!(index.len("v1/pods"), 1);
        let a = index.get("v1/pods", &ObjectKey { namespace: "default".into(), name: "a".into(), cluster: "m".into() });
        assert_eq!(a.unwrap().rv, 3);
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
    fn namespace_ranges_and_bare_names() {
        let mut index = Index::at(0);
        let mut rv = 1;
        for (ns, name, cluster) in [("a", "x", "m1"), ("b", "web-0", "m1"), ("b", "web-0", "m2"), ("b", "web-1", "m1"), ("c", "y", "m1")] {
            let e = plan_change(&index, "v1/pods", cluster, Change::Upsert(pod(ns, name, "1")), rv).unwrap();
            index.apply(&e);
            rv += 1;
        }
        let in_b: Vec<_> = index.range("v1/pods", Some("b"), None).map(|(k, _)| format!("{}_{}", k.name, k.cluster)).collect();
        assert_eq!(in_b, vec!["web-0_m1", "web-0_m2", "web-1_m1"]);
        let first = index.range("v1/pods", Some("b"), None).next().unwrap().0.clone();
        let rest: Vec<_> = index.range("v1/pods", Some("b"), Some(&first)).map(|(k, _)| k.cluster.clone()).collect();
        assert_eq!(rest, vec!["m2", "m1"]);
        assert_eq!(index.by_name("v1/pods", "b", "web-0").len(), 2);
        assert_eq!(index.by_name("v1/pods", "b", "web-1").len(), 1);
        assert!(index.by_name("v1/pods", "b", "web").is_empty());
    }

    #[test]
    fn rewind_restores_the_state_at_an_older_rv() {
        let mut index = Index::at(0);
        let mut log = Vec::new();
        for (change, rv) in [
            (Change::Upsert(pod("a", "p", "1")), 1),
            (Change::Upsert(pod("a", "q", "1")), 2),
            (Change::Upsert(pod("a", "p", "2")), 3),
            (Change::Delete(pod("a", "q", "3")), 4),
            (Change::Upsert(pod("a", "r", "4")), 5),
        ] {
            let e = plan_change(&index, "v1/pods", "m", change, rv).unwrap();
            index.apply(&e);
            log.push(e);
        }
        let state = |i: &Index| -> Vec<(String, u64)> { i.range("v1/pods", None, None).map(|(k, e)| (k.name.clone(), e.rv)).collect() };
        let load = |rv: u64| log.iter().find(|e| e.rv == rv).cloned();
        let newer: Vec<_> = log.iter().rev().cloned().collect();
        let at2 = index.rewind(2, newer.clone(), load).unwrap();
        assert_eq!(state(&at2), vec![("p".to_string(), 1), ("q".to_string(), 2)]);
        assert_eq!(at2.head_rv(), 2);
        let at4 = index.rewind(4, newer.clone(), load).unwrap();
        assert_eq!(state(&at4), vec![("p".to_string(), 3)]);
        assert!(index.rewind(0, newer, |_| None).is_none(), "missing versions cannot be rewound");
        assert_eq!(state(&index), vec![("p".to_string(), 3), ("r".to_string(), 5)]);
    }

    #[test]
    fn snapshots_do_not_see_later_applies() {
        let mut index = Index::at(0);
        let e = plan_change(&index, "v1/pods", "m", Change::Upsert(pod("a", "p", "1")), 1).unwrap();
        index.apply(&e);
        let snapshot = index.clone();
        let e = plan_change(&index, "v1/pods", "m", Change::Delete(pod("a", "p", "2")), 2).unwrap();
        index.apply(&e);
        assert_eq!(snapshot.len("v1/pods"), 1);
        assert_eq!(snapshot.head_rv(), 1);
        assert_eq!(index.len("v1/pods"), 0);
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

    /// The counts kept with every change are what walking the type counts,
    /// in every scope: through additions, changes and deletions, in a
    /// rewound index and in indexes loaded at once (with keys loaded twice).
    #[test]
    fn scope_counts_are_what_a_walk_counts() {
        fn walked(index: &Index, namespace: Option<&str>, cluster: Option<&str>) -> usize {
            index.range("v1/pods", namespace, None).filter(|(k, _)| cluster.is_none_or(|c| k.cluster == c)).count()
        }
        fn check(index: &Index, what: &str) {
            for namespace in [None, Some("a"), Some("b"), Some("c"), Some("other")] {
                for cluster in [None, Some("m0"), Some("m1"), Some("m2"), Some("other")] {
                    let walk = walked(index, namespace, cluster);
                    assert_eq!(index.count_scope("v1/pods", namespace, cluster), walk, "{what}: namespace {namespace:?}, cluster {cluster:?}");
                    if let (None, Some(c)) = (namespace, cluster) {
                        assert_eq!(index.count_cluster("v1/pods", c), walk, "{what}: cluster {c}");
                    }
                }
            }
            assert_eq!(index.count_scope("v1/secrets", None, Some("m0")), 0, "{what}");
            assert_eq!(index.count_scope("v1/secrets", None, None), 0, "{what}");
        }
        let mut index = Index::at(0);
        let mut history: Vec<StoredEvent> = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let (mut added, mut deleted) = (0, 0);
        for step in 0..800 {
            let namespace = ["a", "b", "c"][next(3) as usize];
            let (name, cluster) = (format!("p{}", next(10)), format!("m{}", next(3)));
            let rv = index.head_rv() + 1;
            let object = pod(namespace, &name, &rv.to_string());
            let change = if next(3) == 0 { Change::Delete(object) } else { Change::Upsert(object) };
            if let Some(event) = plan_change(&index, "v1/pods", &cluster, change, rv) {
                added += usize::from(event.event_type == EventType::Added);
                deleted += usize::from(event.event_type == EventType::Deleted);
                index.apply(&event);
                history.push(event);
            }
            if step % 40 == 0 {
                check(&index, &format!("step {step}"));
            }
        }
        assert!(added > 100 && deleted > 100, "{added} added, {deleted} deleted");
        check(&index, "after every change");

        // Rewound to earlier versions: as applied up to them.
        let load = |rv: u64| history.iter().find(|e| e.rv == rv).cloned();
        for back in [1, history.len() / 3, history.len() / 2, history.len() - 1] {
            let rv = history[back].rv;
            let newer: Vec<StoredEvent> = history.iter().filter(|e| e.rv > rv).rev().cloned().collect();
            let rewound = index.rewind(rv, newer, load).unwrap();
            check(&rewound, &format!("rewound to {rv}"));
            let mut replayed = Index::at(0);
            history.iter().filter(|e| e.rv <= rv).for_each(|e| replayed.apply(e));
            assert_eq!(rewound.count_scope("v1/pods", None, Some("m1")), replayed.count_scope("v1/pods", None, Some("m1")));
        }

        // Loaded at once, in two parts, then with keys loaded again.
        let entries: Vec<(ObjectKey, Arc<IndexEntry>)> = index.resource("v1/pods").unwrap().iter().map(|(k, e)| (k.clone(), e.clone())).collect();
        let mut loaded = Index::at(index.head_rv());
        let half = entries.len() / 2;
        loaded.load_all("v1/pods", entries[..half].iter().cloned());
        check(&loaded, "half loaded");
        loaded.load_all("v1/pods", entries[half..].iter().cloned());
        check(&loaded, "all loaded");
        loaded.load_all("v1/pods", entries[half / 2..half + 3].iter().cloned());
        check(&loaded, "some loaded twice");
        assert_eq!(loaded.count_scope("v1/pods", None, None), entries.len());
        loaded.load("v1/pods", entries[0].0.clone(), (*entries[0].1).clone());
        check(&loaded, "one loaded again");
    }
}
