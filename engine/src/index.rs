//! The merged index: every live object of every cluster, by resource type,
//! in list order. A view of the event log: it changes through one method,
//! [`Index::apply`]; the events applied to it are planned by
//! [`crate::reflector::Reflector`].
//!
//! The maps are persistent (`imbl`), so a clone is O(1) and shares structure:
//! the aggregator publishes a clone after each batch as the snapshot that
//! readers use while it goes on writing.
//!
//! Each type's objects are held twice, sharing keys and entries: in one
//! map of the whole type and in one map per cluster. A cluster is the last
//! part of a key, so its objects are spread over the whole type; with a
//! thousand members, reading one cluster's objects (a list of
//! `/clusters/<c>/...`, the deletions that end a member's relist) by
//! walking the type cost a walk of every member's objects.

use std::sync::Arc;

use crate::event::{EventType, IndexEntry, ObjectKey, StoredEvent};
pub use crate::reflector::plan_change;

mod labels;

/// The objects of one resource type (or of one cluster of one type), in
/// list order. A key is shared by the type's map and its cluster's map
/// (cloning it is a count, not three strings: a map's node copied after a
/// snapshot clones its keys).
pub type ResourceIndex = imbl::OrdMap<Arc<ObjectKey>, Arc<IndexEntry>>;

/// Live objects by resource type, with the RV of the last applied event.
#[derive(Debug, Clone, Default)]
pub struct Index {
    head_rv: u64,
    resources: imbl::HashMap<String, ResourceIndex>,
    /// The same objects by type, then cluster.
    clusters: imbl::HashMap<String, imbl::HashMap<String, ResourceIndex>>,
    /// Their keys by type, then label (see [`labels`]).
    labels: imbl::HashMap<String, labels::TypeLabels>,
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

/// Where a range of a namespace (or of every one) after a key (or from
/// the start) begins.
fn lower_bound(namespace: Option<&str>, start_after: Option<&ObjectKey>) -> std::ops::Bound<ObjectKey> {
    use std::ops::Bound;
    match (start_after, namespace) {
        (Some(k), _) => Bound::Excluded(k.clone()),
        (None, Some(ns)) => Bound::Included(ObjectKey { namespace: ns.to_string(), name: String::new(), cluster: String::new() }),
        (None, None) => Bound::Unbounded,
    }
}

/// The labels of one type's objects, added when missing.
fn type_labels<'a>(all: &'a mut imbl::HashMap<String, labels::TypeLabels>, resource: &str) -> &'a mut labels::TypeLabels {
    if !all.contains_key(resource) {
        all.insert(resource.to_string(), labels::TypeLabels::default());
    }
    all.get_mut(resource).expect("inserted above")
}

/// The map of one cluster's objects of one type, added when missing.
fn cluster_objects<'a>(clusters: &'a mut imbl::HashMap<String, imbl::HashMap<String, ResourceIndex>>, resource: &str, cluster: &str) -> &'a mut ResourceIndex {
    if !clusters.contains_key(resource) {
        clusters.insert(resource.to_string(), imbl::HashMap::new());
    }
    let of_type = clusters.get_mut(resource).expect("inserted above");
    if !of_type.contains_key(cluster) {
        of_type.insert(cluster.to_string(), ResourceIndex::default());
    }
    of_type.get_mut(cluster).expect("inserted above")
}

/// Fewer objects than this are loaded on one thread ([`Index::load_all`]).
const LOAD_BESIDE_MIN: usize = 4096;

impl Index {
    /// An empty index at `head_rv` (the store's head after recovery).
    pub fn at(head_rv: u64) -> Index {
        Index { head_rv, ..Index::default() }
    }

    /// Puts one object's entry in, counting it when it is new.
    fn put(&mut self, resource: &str, key: ObjectKey, entry: Arc<IndexEntry>, added: bool) {
        let objects = match self.resources.get_mut(resource) {
            Some(objects) => objects,
            None => self.resources.entry(resource.to_string()).or_default(),
        };
        let of_cluster = cluster_objects(&mut self.clusters, resource, &key.cluster);
        if added {
            // An object new to the index, as its event says: put in with one
            // walk down the type's map (a lookup first was a second walk).
            let key = Arc::new(key);
            match objects.insert(key.clone(), entry.clone()) {
                None => {
                    self.counts.entry(resource.to_string()).or_default().count(&key, true);
                    labels::relabel(type_labels(&mut self.labels, resource), &key, None, Some(&entry));
                    of_cluster.insert(key, entry);
                }
                // It was there after all: replaced, in both maps.
                Some(old) => {
                    of_cluster.insert(key.clone(), entry.clone());
                    labels::relabel(type_labels(&mut self.labels, resource), &key, Some(&old), Some(&entry));
                }
            }
            return;
        }
        match objects.get_mut(&key) {
            Some(slot) => {
                let old = std::mem::replace(slot, entry.clone());
                match of_cluster.get_mut(&key) {
                    Some(slot) => *slot = entry.clone(),
                    None => debug_assert!(false, "an object of the type's map missing from its cluster's"),
                }
                if !old.labels().eq(entry.labels()) {
                    if let Some((shared, _)) = objects.get_key_value(&key) {
                        labels::relabel(type_labels(&mut self.labels, resource), shared, Some(&old), Some(&entry));
                    }
                }
            }
            None => {
                self.counts.entry(resource.to_string()).or_default().count(&key, true);
                let key = Arc::new(key);
                objects.insert(key.clone(), entry.clone());
                labels::relabel(type_labels(&mut self.labels, resource), &key, None, Some(&entry));
                of_cluster.insert(key, entry);
            }
        }
    }

    /// Takes one object out, if it is there.
    fn take(&mut self, resource: &str, key: &ObjectKey) {
        let Some((shared, old)) = self.resources.get_mut(resource).and_then(|objects| objects.remove_with_key(key)) else {
            return;
        };
        if let Some(counts) = self.counts.get_mut(resource) {
            counts.count(key, false);
        }
        if let Some(of_type) = self.clusters.get_mut(resource) {
            if let Some(objects) = of_type.get_mut(key.cluster.as_str()) {
                objects.remove(key);
                if objects.is_empty() {
                    of_type.remove(key.cluster.as_str());
                }
            }
        }
        labels::relabel(type_labels(&mut self.labels, resource), &shared, Some(&old), None);
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
        self.put(resource, key, Arc::new(entry), false);
    }

    /// Inserts entries loaded from the store (recovery), in list order for
    /// speed; best all of a type at once (each map is built once).
    ///
    /// Three maps are built side by side: the type's, its clusters' (with
    /// the counts) and its labels'. Each is mostly comparisons of keys in
    /// B-tree nodes; at 2M objects over 1,000 members, built in turn and
    /// a chunk of the snapshot at a time, they took 12.5 s of a 16 s warm
    /// restart.
    pub fn load_all(&mut self, resource: &str, objects: impl IntoIterator<Item = (ObjectKey, Arc<IndexEntry>)>) {
        self.load_all_beside(resource, objects, LOAD_BESIDE_MIN);
    }

    /// [`Index::load_all`], on three threads from `beside_min` objects.
    fn load_all_beside(&mut self, resource: &str, objects: impl IntoIterator<Item = (ObjectKey, Arc<IndexEntry>)>, beside_min: usize) {
        let objects: Vec<(Arc<ObjectKey>, Arc<IndexEntry>)> = objects.into_iter().map(|(key, entry)| (Arc::new(key), entry)).collect();
        let Index { resources, clusters, labels, counts, .. } = self;
        let existing = match resources.get_mut(resource) {
            Some(existing) => existing,
            None => resources.entry(resource.to_string()).or_default(),
        };
        let before = existing.len();
        let of_type = match clusters.get_mut(resource) {
            Some(of_type) => of_type,
            None => clusters.entry(resource.to_string()).or_default(),
        };
        let type_labels = type_labels(labels, resource);
        let by_type = |existing: &mut ResourceIndex| {
            for (key, entry) in &objects {
                existing.insert(key.clone(), entry.clone());
            }
        };
        let mut by_cluster = || {
            let mut loaded = LoadedCounts::default();
            // Each cluster's map taken out while loading (a cluster's
            // objects come spread over the type) and put back once.
            let mut taken: std::collections::HashMap<&str, ResourceIndex> = std::collections::HashMap::new();
            for (key, entry) in &objects {
                loaded.count(key);
                let of_cluster = match taken.get_mut(key.cluster.as_str()) {
                    Some(of_cluster) => of_cluster,
                    None => taken.entry(key.cluster.as_str()).or_insert_with(|| of_type.remove(key.cluster.as_str()).unwrap_or_default()),
                };
                of_cluster.insert(key.clone(), entry.clone());
            }
            for (cluster, objects) in taken {
                of_type.insert(cluster.to_string(), objects);
            }
            loaded
        };
        let mut by_label = || {
            let mut loaded_labels = labels::LoadedLabels::default();
            for (key, entry) in &objects {
                loaded_labels.add(key, entry);
            }
            loaded_labels.into(type_labels);
        };
        let loaded = if objects.len() < beside_min {
            by_type(existing);
            by_label();
            by_cluster()
        } else {
            std::thread::scope(|scope| {
                let clusters = scope.spawn(by_cluster);
                let labels = scope.spawn(by_label);
                by_type(existing);
                labels.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                clusters.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
        };
        if existing.len() == before + objects.len() {
            counts.entry(resource.to_string()).or_default().add(loaded);
            return;
        }
        // Some keys were there already (or came twice): count the type again.
        let mut recounted = LoadedCounts::default();
        existing.keys().for_each(|key| recounted.count(key));
        let mut type_counts = ScopeCounts::default();
        type_counts.add(recounted);
        counts.insert(resource.to_string(), type_counts);
        // And its labels: a key loaded again may carry other labels now.
        let mut relabelled = labels::LoadedLabels::default();
        existing.iter().for_each(|(key, entry)| relabelled.add(key, entry));
        let mut type_labels = labels::TypeLabels::default();
        relabelled.into(&mut type_labels);
        labels.insert(resource.to_string(), type_labels);
    }

    /// Applies one committed event: the only way the index changes.
    pub fn apply(&mut self, event: &StoredEvent) {
        match event.event_type {
            EventType::Added => self.put(&event.resource, event.key.clone(), Arc::new(event.index_entry()), true),
            EventType::Modified => self.put(&event.resource, event.key.clone(), Arc::new(event.index_entry()), false),
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
        self.range_of(objects, namespace, start_after)
    }

    /// Objects of `resource` of one cluster, in list order, optionally of
    /// one namespace, after `start_after` (exclusive) when given: as
    /// [`Index::range`] with the objects of other clusters left out, read
    /// without walking them.
    pub fn range_of_cluster<'a>(
        &'a self,
        resource: &str,
        cluster: &str,
        namespace: Option<&'a str>,
        start_after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        let Some(objects) = self.clusters.get(resource).and_then(|of_type| of_type.get(cluster)) else {
            return Box::new(std::iter::empty());
        };
        self.range_of(objects, namespace, start_after)
    }

    /// Objects of a scope: of one cluster when `cluster` is given (see
    /// [`Index::range_of_cluster`]), else of every cluster.
    pub fn range_in<'a>(
        &'a self,
        resource: &str,
        cluster: Option<&str>,
        namespace: Option<&'a str>,
        start_after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        match cluster {
            Some(cluster) => self.range_of_cluster(resource, cluster, namespace, start_after),
            None => self.range(resource, namespace, start_after),
        }
    }

    /// How many objects of `resource` carry the label `key=value`.
    pub fn count_label(&self, resource: &str, key: &str, value: &str) -> usize {
        self.labels.get(resource).and_then(|of_type| labels::carrying(of_type, key, value)).map_or(0, |keys| keys.len())
    }

    /// Objects of `resource` that carry the label `key=value`, in list
    /// order, optionally of one namespace, after `start_after` (exclusive)
    /// when given: as [`Index::range`] with the objects without that label
    /// left out, read without walking them.
    pub fn range_with_label<'a>(
        &'a self,
        resource: &str,
        (key, value): (&str, &str),
        namespace: Option<&'a str>,
        start_after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        let (Some(objects), Some(keys)) =
            (self.resources.get(resource), self.labels.get(resource).and_then(|of_type| labels::carrying(of_type, key, value)))
        else {
            return Box::new(std::iter::empty());
        };
        let keys = keys.range::<_, ObjectKey>((lower_bound(namespace, start_after), std::ops::Bound::Unbounded));
        let found = keys.filter_map(move |key| objects.get::<ObjectKey>(key).map(|entry| (&**key, entry)));
        match namespace {
            Some(ns) => Box::new(found.take_while(move |(k, _)| k.namespace == ns)),
            None => Box::new(found),
        }
    }

    /// The objects of `objects` in list order from a namespace and a key on.
    fn range_of<'a>(
        &'a self,
        objects: &'a ResourceIndex,
        namespace: Option<&'a str>,
        start_after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        let iter = objects.range::<_, ObjectKey>((lower_bound(namespace, start_after), std::ops::Bound::Unbounded)).map(|(k, e)| (&**k, e));
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
            .range::<_, ObjectKey>(from..)
            .map(|(k, e)| (&**k, e))
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
                index.put(&event.resource, event.key.clone(), Arc::new(previous.index_entry()), false);
            }
        }
        index.head_rv = rv;
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Change;
    use crate::reflector::tests::{commit, pod};

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
                    // A cluster's own map holds what walking the type finds of it, in the same order, from any key on.
                    if let Some(c) = cluster {
                        let filtered: Vec<&ObjectKey> = index.range("v1/pods", namespace, None).map(|(k, _)| k).filter(|k| k.cluster == c).collect();
                        let own: Vec<&ObjectKey> = index.range_in("v1/pods", Some(c), namespace, None).map(|(k, _)| k).collect();
                        assert_eq!(own, filtered, "{what}: the objects of namespace {namespace:?}, cluster {c}");
                        if let Some(first) = filtered.first() {
                            let rest: Vec<&ObjectKey> = index.range_of_cluster("v1/pods", c, namespace, Some(first)).map(|(k, _)| k).collect();
                            assert_eq!(rest, filtered[1..], "{what}: after the first of namespace {namespace:?}, cluster {c}");
                        }
                    }
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

        // Loaded at once, in two parts, then with keys loaded again: on
        // one thread, and with the maps by cluster beside.
        let entries: Vec<(ObjectKey, Arc<IndexEntry>)> = index.resource("v1/pods").unwrap().iter().map(|(k, e)| ((**k).clone(), e.clone())).collect();
        for beside_min in [LOAD_BESIDE_MIN, 0] {
            let mut loaded = Index::at(index.head_rv());
            let half = entries.len() / 2;
            loaded.load_all_beside("v1/pods", entries[..half].iter().cloned(), beside_min);
            check(&loaded, "half loaded");
            loaded.load_all_beside("v1/pods", entries[half..].iter().cloned(), beside_min);
            check(&loaded, "all loaded");
            loaded.load_all_beside("v1/pods", entries[half / 2..half + 3].iter().cloned(), beside_min);
            check(&loaded, "some loaded twice");
            assert_eq!(loaded.count_scope("v1/pods", None, None), entries.len());
            loaded.load("v1/pods", entries[0].0.clone(), (*entries[0].1).clone());
            check(&loaded, "one loaded again");
        }
    }

    /// The objects read by label are those walking the type finds with
    /// that label, in the same order, from any key and in any namespace:
    /// through additions, label changes, deletions, a rewind and a load.
    /// An ADDED event for an object the index holds (a replayed event)
    /// replaces it everywhere, as a MODIFIED would: one object, counted
    /// once, with the new labels, in its cluster's map too.
    #[test]
    fn an_added_object_already_there_is_replaced() {
        use crate::object::ingest;
        let pods = crate::resources::find(&crate::resources::builtin(), "", "v1", "pods").unwrap().clone();
        let labelled = |member_rv: &str, tier: &str| {
            let raw = format!(r#"{{"metadata":{{"name":"p","namespace":"a","resourceVersion":"{member_rv}","labels":{{"tier":"{tier}"}}}}}}"#);
            ingest(&pods, "m", raw.as_bytes()).unwrap()
        };
        let mut index = Index::at(0);
        for (rv, tier) in [(1, "t0"), (2, "t1")] {
            index.apply(&StoredEvent::new(rv, EventType::Added, "v1/pods", "m", 0, labelled(&rv.to_string(), tier)));
        }
        assert_eq!(index.len("v1/pods"), 1);
        let current = index.get("v1/pods", &ObjectKey { namespace: "a".into(), name: "p".into(), cluster: "m".into() }).unwrap().clone();
        assert_eq!(current.rv, 2);
        let of_cluster: Vec<u64> = index.range_of_cluster("v1/pods", "m", None, None).map(|(_, e)| e.rv).collect();
        assert_eq!(of_cluster, [2]);
        assert_eq!((index.count_label("v1/pods", "tier", "t0"), index.count_label("v1/pods", "tier", "t1")), (0, 1));
        assert_eq!(index.range_with_label("v1/pods", ("tier", "t1"), None, None).count(), 1);
    }

    #[test]
    fn label_ranges_are_what_a_walk_finds() {
        use crate::object::ingest;
        let pods = crate::resources::find(&crate::resources::builtin(), "", "v1", "pods").unwrap().clone();
        let labelled = |ns: &str, name: &str, member_rv: &str, tier: &str| {
            let raw = format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{member_rv}","labels":{{"app":"x","tier":"{tier}"}}}}}}"#);
            ingest(&pods, "m", raw.as_bytes()).unwrap()
        };
        fn check(index: &Index, what: &str) {
            for (key, value) in [("tier", "t0"), ("tier", "t1"), ("tier", "t2"), ("app", "x"), ("app", "y"), ("other", "t0")] {
                for namespace in [None, Some("a"), Some("b"), Some("other")] {
                    let walked: Vec<&ObjectKey> = index.range("v1/pods", namespace, None).filter(|(_, e)| e.label(key) == Some(value)).map(|(k, _)| k).collect();
                    let read: Vec<&ObjectKey> = index.range_with_label("v1/pods", (key, value), namespace, None).map(|(k, _)| k).collect();
                    assert_eq!(read, walked, "{what}: {key}={value} in {namespace:?}");
                    for (k, e) in index.range_with_label("v1/pods", (key, value), namespace, None) {
                        assert!(Arc::ptr_eq(e, index.get("v1/pods", k).unwrap()), "{what}: the current version of {k:?}");
                    }
                    if let Some(first) = walked.first() {
                        let rest: Vec<&ObjectKey> = index.range_with_label("v1/pods", (key, value), namespace, Some(first)).map(|(k, _)| k).collect();
                        assert_eq!(rest, walked[1..], "{what}: {key}={value} in {namespace:?} after the first");
                    }
                    if namespace.is_none() {
                        assert_eq!(index.count_label("v1/pods", key, value), walked.len(), "{what}: {key}={value} counted");
                    }
                }
            }
        }
        let mut index = Index::at(0);
        let mut history: Vec<StoredEvent> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut relabelled = 0;
        for step in 0..600 {
            let namespace = ["a", "b"][next(2) as usize];
            let (name, cluster) = (format!("p{}", next(12)), format!("m{}", next(3)));
            let rv = index.head_rv() + 1;
            let object = labelled(namespace, &name, &rv.to_string(), &format!("t{}", next(3)));
            let change = if next(4) == 0 { Change::Delete(object) } else { Change::Upsert(object) };
            if let Some(event) = plan_change(&index, "v1/pods", &cluster, change, rv) {
                if event.event_type == EventType::Modified {
                    let before = index.get("v1/pods", &event.key).unwrap();
                    relabelled += usize::from(before.label("tier") != event.labels.iter().find(|(k, _)| k == "tier").map(|(_, v)| v.as_str()));
                }
                index.apply(&event);
                history.push(event);
            }
            if step % 30 == 0 {
                check(&index, &format!("step {step}"));
            }
        }
        assert!(relabelled > 50, "{relabelled} label changes");
        check(&index, "after every change");
        let load = |rv: u64| history.iter().find(|e| e.rv == rv).cloned();
        for back in [1, history.len() / 2, history.len() - 1] {
            let rv = history[back].rv;
            let newer: Vec<StoredEvent> = history.iter().filter(|e| e.rv > rv).rev().cloned().collect();
            check(&index.rewind(rv, newer, load).unwrap(), &format!("rewound to {rv}"));
        }
        let entries: Vec<(ObjectKey, Arc<IndexEntry>)> = index.range("v1/pods", None, None).map(|(k, e)| (k.clone(), e.clone())).collect();
        for beside_min in [LOAD_BESIDE_MIN, 0] {
            let mut loaded = Index::at(index.head_rv());
            loaded.load_all_beside("v1/pods", entries.iter().cloned(), beside_min);
            check(&loaded, "loaded");
            // Loaded again with other labels: the labels of the second load count.
            let moved: Vec<(ObjectKey, Arc<IndexEntry>)> = entries
                .iter()
                .take(10)
                .map(|(k, e)| (k.clone(), Arc::new(IndexEntry::new(e.rv, e.member_rv(), e.uid(), [("app", "y")], std::iter::empty()))))
                .collect();
            loaded.load_all_beside("v1/pods", moved, beside_min);
            check(&loaded, "loaded twice");
            assert_eq!(loaded.count_label("v1/pods", "app", "y"), 10);
        }
    }
}
