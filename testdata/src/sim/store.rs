//! The simulator's storage, standing in for etcd and the watch cache: objects
//! per resource type keyed as etcd keys them, one cluster-wide integer
//! resource version, a bounded history of changes, and the fan-out of changes
//! to watch streams.
//!
//! Every object is encoded to JSON once, when it is written; lists and watch
//! streams only concatenate those bytes. Reads at an older resource version
//! (paginated lists, `resourceVersionMatch=Exact`) are answered from the
//! current objects and the history, the way etcd's MVCC answers them, until
//! the history no longer reaches back (then 410 Expired, like a compacted
//! etcd).

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kubefold_engine::resources::ResourceType;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};

use super::controllers::Task;
use crate::workload;

/// One stored object: its JSON bytes and what selectors need, computed once;
/// or, for a generated load pod of a compact member ([`LoadPods`]), only
/// its index, its body rendered from the template each time it is served.
#[derive(Debug)]
pub struct Object {
    /// `metadata.resourceVersion`.
    pub rv: u64,
    body: Body,
}

#[derive(Debug)]
enum Body {
    /// Encoded when written.
    Stored(Box<Stored>),
    /// Load pod `index` of `source`, rendered when served.
    Generated { source: Arc<LoadPods>, index: u32 },
}

#[derive(Debug)]
struct Stored {
    /// `kind` and `apiVersion` first, then the other fields, with `metadata.resourceVersion`.
    bytes: Bytes,
    /// Where the fields after `kind` and `apiVersion` start in `bytes`.
    list_offset: usize,
    uid: String,
    labels: Vec<(String, String)>,
    fields: Vec<(String, String)>,
    owners: Vec<String>,
}

/// The template of a compact member's load pods: every pod's body is a
/// function of the cluster (name, seed, clock), the pod's index and its
/// resource version ([`workload::load_pod_json`]), so a member stores only
/// the index (about 100 bytes a pod with its key instead of 3 to 5 KB).
#[derive(Debug)]
pub struct LoadPods {
    /// The cluster the pods are rendered for.
    pub cluster: workload::Cluster,
    /// The pods' type (for their selectable fields).
    pub resource: ResourceType,
}

impl Object {
    /// Encodes `value` (whose `metadata.resourceVersion` must already be `rv`).
    pub fn encode(resource: &ResourceType, value: &Value, rv: u64) -> Object {
        let (bytes, list_offset) = encode_with_type_meta(resource, value);
        let meta = &value["metadata"];
        let labels = meta["labels"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        let owners = meta["ownerReferences"]
            .as_array()
            .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let stored = Stored {
            bytes,
            list_offset,
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
            labels,
            fields: super::fields::extract(&resource.group, &resource.plural, value),
            owners,
        };
        Object { rv, body: Body::Stored(Box::new(stored)) }
    }

    /// An object already encoded as `{"kind":..,"apiVersion":..,<rest>}`
    /// (bulk loads), with what selectors need given rather than decoded.
    pub fn from_encoded(
        bytes: Bytes,
        rv: u64,
        uid: String,
        labels: Vec<(String, String)>,
        fields: Vec<(String, String)>,
    ) -> Object {
        let list_offset = list_offset(&bytes);
        Object { rv, body: Body::Stored(Box::new(Stored { bytes, list_offset, uid, labels, fields, owners: Vec::new() })) }
    }

    /// Load pod `index` of `source` at `rv`, rendered when served.
    pub fn generated(source: Arc<LoadPods>, index: u32, rv: u64) -> Object {
        Object { rv, body: Body::Generated { source, index } }
    }

    /// The same object at another resource version (a restore renumbering it).
    pub fn renumbered(&self, resource: &ResourceType, rv: u64) -> Object {
        match &self.body {
            Body::Generated { source, index } => Object::generated(source.clone(), *index, rv),
            Body::Stored(_) => {
                let mut value = self.value();
                value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                Object::encode(resource, &value, rv)
            }
        }
    }

    /// Whether the body is rendered from a template when served.
    pub fn is_generated(&self) -> bool {
        matches!(self.body, Body::Generated { .. })
    }

    /// The object's JSON, `kind` and `apiVersion` first, then the other
    /// fields, with `metadata.resourceVersion`.
    pub fn bytes(&self) -> Bytes {
        match &self.body {
            Body::Stored(s) => s.bytes.clone(),
            Body::Generated { source, index } => {
                Bytes::from(workload::load_pod_json(&source.cluster, *index as usize, Some(self.rv)))
            }
        }
    }

    /// The object as a list item: without `kind` and `apiVersion`, as
    /// kube-apiserver lists built-in types (kubernetes/kubernetes#3030).
    pub fn write_list_item(&self, out: &mut BytesMut) {
        match &self.body {
            Body::Stored(s) => write_item(out, &s.bytes, s.list_offset),
            Body::Generated { .. } => {
                let bytes = self.bytes();
                write_item(out, &bytes, list_offset(&bytes));
            }
        }
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Cow<'_, str> {
        match &self.body {
            Body::Stored(s) => Cow::Borrowed(&s.uid),
            Body::Generated { source, index } => Cow::Owned(workload::load_pod_uid(&source.cluster, *index as usize)),
        }
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> Cow<'_, [(String, String)]> {
        match &self.body {
            Body::Stored(s) => Cow::Borrowed(&s.labels),
            Body::Generated { index, .. } => Cow::Owned(workload::load_pod_labels(*index as usize)),
        }
    }

    /// The selectable fields of its type ([`super::fields`]).
    pub fn fields(&self) -> Cow<'_, [(String, String)]> {
        match &self.body {
            Body::Stored(s) => Cow::Borrowed(&s.fields),
            Body::Generated { source, index } => Cow::Owned(super::fields::extract(
                &source.resource.group,
                &source.resource.plural,
                &workload::load_pod_selectable(&source.cluster, *index as usize),
            )),
        }
    }

    /// The uids of its `ownerReferences` (load pods have none).
    pub fn owners(&self) -> &[String] {
        match &self.body {
            Body::Stored(s) => &s.owners,
            Body::Generated { .. } => &[],
        }
    }

    /// The object decoded.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes()).unwrap_or(Value::Null)
    }

    /// The value of one of its selectable fields.
    pub fn field(&self, name: &str) -> Option<String> {
        self.fields().iter().find(|(f, _)| f == name).map(|(_, v)| v.clone())
    }
}

/// Where the fields after `kind` and `apiVersion` start in an object encoded
/// as `{"kind":"K","apiVersion":"V",<rest>}`: after the second top-level comma.
fn list_offset(bytes: &[u8]) -> usize {
    bytes.iter().enumerate().filter(|(_, b)| **b == b',').nth(1).map_or(bytes.len(), |(i, _)| i + 1)
}

fn write_item(out: &mut BytesMut, bytes: &[u8], list_offset: usize) {
    if list_offset >= bytes.len() {
        out.put_slice(b"{}");
    } else {
        out.put_u8(b'{');
        out.put_slice(&bytes[list_offset..]);
    }
}

/// Encodes an object as `{"kind":K,"apiVersion":V,<other fields>}` (the
/// order kube-apiserver writes) and returns where the other fields start.
fn encode_with_type_meta(resource: &ResourceType, value: &Value) -> (Bytes, usize) {
    let mut head = BytesMut::new();
    head.put_slice(b"{\"kind\":");
    head.put_slice(serde_json::to_string(&resource.kind).unwrap_or_default().as_bytes());
    head.put_slice(b",\"apiVersion\":");
    head.put_slice(serde_json::to_string(&resource.api_version()).unwrap_or_default().as_bytes());
    /// Serialises an object's fields except `kind` and `apiVersion`, without copying it.
    struct WithoutTypeMeta<'a>(&'a serde_json::Map<String, Value>);
    impl serde::Serialize for WithoutTypeMeta<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().filter(|(k, _)| k.as_str() != "kind" && k.as_str() != "apiVersion"))
        }
    }
    let rest = match value {
        Value::Object(map) => serde_json::to_vec(&WithoutTypeMeta(map)).unwrap_or_default(),
        _ => b"{}".to_vec(),
    };
    if rest.len() <= 2 {
        head.put_u8(b'}');
        let len = head.len();
        return (head.freeze(), len);
    }
    head.put_u8(b',');
    let offset = head.len();
    head.put_slice(&rest[1..]);
    (head.freeze(), offset)
}

/// The type of a change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was changed.
    Modified,
    /// The object was deleted.
    Deleted,
}

impl ChangeType {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change: one resource version.
#[derive(Debug)]
pub struct Change {
    /// The resource version the change was committed at.
    pub rv: u64,
    /// Index of the resource type in the catalog.
    pub resource: usize,
    /// The store key (`{namespace}/{name}` or `{name}`).
    pub key: String,
    /// What happened.
    pub change_type: ChangeType,
    /// The object after the change; for a deletion its last state, carrying
    /// the deletion's resource version (as kube-apiserver sends it).
    pub object: Arc<Object>,
    /// The object before the change (`None` for an addition).
    pub previous: Option<Arc<Object>>,
    /// The watch event line, `{"type":...,"object":...}\n`, encoded once.
    pub frame: Bytes,
}

/// Builds a watch event line `{"type":"<type>","object":<object>}\n`.
pub fn frame(event_type: &str, object: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(object.len() + event_type.len() + 24);
    out.put_slice(b"{\"type\":\"");
    out.put_slice(event_type.as_bytes());
    out.put_slice(b"\",\"object\":");
    out.put_slice(object);
    out.put_slice(b"}\n");
    out.freeze()
}

/// The etcd-like key of an object: `{namespace}/{name}` for namespaced
/// types, `{name}` for cluster-scoped ones. Keys sort as etcd sorts them.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The key range of a list: all keys, or the keys of one namespace.
pub fn prefix(namespace: Option<&str>) -> String {
    namespace.map(|ns| format!("{ns}/")).unwrap_or_default()
}

/// The first key after every key with `prefix` (`clientv3.GetPrefixRangeEnd`).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            return String::from_utf8(bytes).ok();
        }
    }
    None
}

/// A read at an older resource version that the history no longer covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// Every change after this version is retained; reads at or after it are possible.
    pub compacted: u64,
}

/// The simulator's objects, resource version, history and watch fan-out.
pub struct Store {
    catalog: Arc<[ResourceType]>,
    tables: Vec<BTreeMap<String, Arc<Object>>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    compacted: u64,
    changes: broadcast::Sender<Arc<Change>>,
    head: watch::Sender<u64>,
    /// Random source for uids and generated names (seeded: runs repeat).
    pub rng: StdRng,
    /// The background controllers' queue (kubelet, garbage collector, namespace controller).
    pub tasks: Option<mpsc::UnboundedSender<Task>>,
}

impl Store {
    /// An empty store whose next write gets `first_rv`, keeping `history_limit` changes.
    pub fn new(catalog: Arc<[ResourceType]>, history_limit: usize, first_rv: u64, seed: u64) -> Store {
        let history_limit = history_limit.max(1);
        let (changes, _) = broadcast::channel(history_limit.clamp(1024, 65_536));
        let (head, _) = watch::channel(first_rv.saturating_sub(1));
        Store {
            tables: catalog.iter().map(|_| BTreeMap::new()).collect(),
            catalog,
            rv: first_rv.saturating_sub(1),
            history: VecDeque::with_capacity(history_limit.min(1024)),
            history_limit,
            compacted: first_rv.saturating_sub(1),
            changes,
            head,
            rng: StdRng::seed_from_u64(seed),
            tasks: None,
        }
    }

    /// The resource types served.
    pub fn catalog(&self) -> &Arc<[ResourceType]> {
        &self.catalog
    }

    /// Serves one more type (a custom resource); its index. Indices of the
    /// types served before do not change.
    pub fn add_type(&mut self, resource_type: ResourceType) -> usize {
        let mut catalog = self.catalog.to_vec();
        catalog.push(resource_type);
        self.catalog = catalog.into();
        self.tables.push(BTreeMap::new());
        self.catalog.len() - 1
    }

    /// The objects of a type, in key order.
    pub fn objects(&self, resource: usize) -> impl Iterator<Item = &Arc<Object>> {
        self.tables[resource].values()
    }

    /// The type at `index`.
    pub fn resource(&self, index: usize) -> &ResourceType {
        &self.catalog[index]
    }

    /// The index of a type in the catalog.
    pub fn resource_index(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.catalog.iter().position(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// The index of a type by its `kind` and `apiVersion`.
    pub fn resource_index_of_kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.catalog.iter().position(|r| r.kind == kind && r.api_version() == api_version)
    }

    /// The head resource version: that of the last write.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Every change after this version is in the history.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// A receiver of every change committed after this call.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    /// A receiver of the head resource version.
    pub fn head(&self) -> watch::Receiver<u64> {
        self.head.subscribe()
    }

    /// The number of objects of a type.
    pub fn count(&self, resource: usize) -> usize {
        self.tables[resource].len()
    }

    /// The object at `key`.
    pub fn get(&self, resource: usize, key: &str) -> Option<&Arc<Object>> {
        self.tables[resource].get(key)
    }

    /// The current objects of a type under `prefix`, in key order.
    pub fn range<'a>(&'a self, resource: usize, prefix: &str) -> impl Iterator<Item = (&'a String, &'a Arc<Object>)> + 'a {
        let end = prefix_end(prefix);
        let upper = match &end {
            Some(end) if !prefix.is_empty() => Bound::Excluded(end.clone()),
            _ => Bound::Unbounded,
        };
        self.tables[resource].range::<String, _>((Bound::Included(prefix.to_string()), upper))
    }

    /// Loads an object without recording a change (bulk load of the initial
    /// state, like objects that existed before the history begins). Sets
    /// `metadata.resourceVersion`; the object must have name, uid and
    /// creationTimestamp.
    pub fn load(&mut self, resource: usize, mut value: Value) {
        self.rv += 1;
        let namespace = value["metadata"]["namespace"].as_str().map(str::to_string);
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        value["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        let object = Object::encode(&self.catalog[resource], &value, self.rv);
        self.tables[resource].insert(key(namespace.as_deref(), &name), Arc::new(object));
    }

    /// Loads objects encoded elsewhere (in parallel) without recording
    /// changes; their versions must follow the head's consecutively.
    pub fn load_encoded(&mut self, resource: usize, objects: impl IntoIterator<Item = (String, Object)>) {
        for (key, object) in objects {
            self.rv = self.rv.max(object.rv);
            self.tables[resource].insert(key, Arc::new(object));
        }
    }

    /// Ends a bulk load: the history starts at the current version.
    pub fn finish_load(&mut self) {
        self.compacted = self.rv;
        self.head.send_replace(self.rv);
    }

    /// Commits `value` at `key` as a new resource version (ADDED or
    /// MODIFIED), records the change and sends it to watchers.
    pub fn put(&mut self, resource: usize, key: &str, mut value: Value) -> Arc<Change> {
        self.rv += 1;
        let rv = self.rv;
        value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        // The other version of a type served in two, at the same version.
        if let Some(twin) = super::versions::twin(&self.catalog, resource) {
            let other = super::versions::convert(&value, &self.catalog[twin]);
            let object = Arc::new(Object::encode(&self.catalog[twin], &other, rv));
            let previous = self.tables[twin].insert(key.to_string(), object.clone());
            let change_type = if previous.is_some() { ChangeType::Modified } else { ChangeType::Added };
            self.record(twin, key, change_type, object, previous);
        }
        let object = Arc::new(Object::encode(&self.catalog[resource], &value, rv));
        let previous = self.tables[resource].insert(key.to_string(), object.clone());
        let change_type = if previous.is_some() { ChangeType::Modified } else { ChangeType::Added };
        self.record(resource, key, change_type, object, previous)
    }

    /// Deletes the object at `key` as a new resource version; `last` is its
    /// final state, sent in the DELETED event with the deletion's version.
    pub fn remove(&mut self, resource: usize, key: &str, mut last: Value) -> Option<Arc<Change>> {
        let previous = self.tables[resource].remove(key)?;
        self.rv += 1;
        let rv = self.rv;
        last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        if let Some(twin) = super::versions::twin(&self.catalog, resource) {
            if let Some(previous) = self.tables[twin].remove(key) {
                let other = super::versions::convert(&last, &self.catalog[twin]);
                let object = Arc::new(Object::encode(&self.catalog[twin], &other, rv));
                self.record(twin, key, ChangeType::Deleted, object, Some(previous));
            }
        }
        let object = Arc::new(Object::encode(&self.catalog[resource], &last, rv));
        Some(self.record(resource, key, ChangeType::Deleted, object, Some(previous)))
    }

    fn record(
        &mut self,
        resource: usize,
        key: &str,
        change_type: ChangeType,
        object: Arc<Object>,
        previous: Option<Arc<Object>>,
    ) -> Arc<Change> {
        let change = Arc::new(Change {
            rv: object.rv,
            resource,
            key: key.to_string(),
            change_type,
            frame: frame(change_type.as_str(), &object.bytes()),
            object,
            previous,
        });
        if self.history.len() >= self.history_limit {
            if let Some(evicted) = self.history.pop_front() {
                self.compacted = evicted.rv;
            }
        }
        self.history.push_back(change.clone());
        // No receivers is fine: nobody watches.
        let _ = self.changes.send(change.clone());
        self.head.send_replace(self.rv);
        change
    }

    /// The retained changes after `rv`, oldest first, or the compaction
    /// point when the history does not reach back to `rv`.
    pub fn changes_after(&self, rv: u64) -> Result<impl Iterator<Item = &Arc<Change>>, Compacted> {
        if rv < self.compacted {
            return Err(Compacted { compacted: self.compacted });
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history.range(start..))
    }

    /// The objects of a type under `prefix` with key `>= start`, as they were
    /// at resource version `at` (`at <= rv()`), in key order.
    ///
    /// For the current version this is [`Store::range`]; for an older one the
    /// history undoes later changes, as an etcd range read at a revision.
    pub fn snapshot(
        &self,
        resource: usize,
        prefix: &str,
        start: &str,
        at: u64,
    ) -> Result<Vec<(String, Arc<Object>)>, Compacted> {
        let lower = if start > prefix { start } else { prefix };
        let current = self
            .range(resource, prefix)
            .skip_while(|(k, _)| k.as_str() < lower)
            .map(|(k, o)| (k.clone(), o.clone()));
        if at >= self.rv {
            return Ok(current.collect());
        }
        // The state at `at` of every key changed since: the state before its first later change.
        let mut overlay: BTreeMap<String, Option<Arc<Object>>> = BTreeMap::new();
        for change in self.changes_after(at)? {
            if change.resource != resource || !change.key.starts_with(prefix) || change.key.as_str() < lower {
                continue;
            }
            overlay.entry(change.key.clone()).or_insert_with(|| match change.change_type {
                ChangeType::Added => None,
                ChangeType::Modified | ChangeType::Deleted => change.previous.clone(),
            });
        }
        let mut out = Vec::new();
        let mut overlay_iter = overlay.into_iter().peekable();
        for (key, object) in current {
            while let Some((k, _)) = overlay_iter.peek() {
                if *k < key {
                    if let Some((k, Some(o))) = overlay_iter.next() {
                        out.push((k, o));
                    }
                } else {
                    break;
                }
            }
            match overlay_iter.peek() {
                Some((k, _)) if *k == key => {
                    if let Some((k, Some(o))) = overlay_iter.next() {
                        out.push((k, o));
                    }
                }
                _ => out.push((key, object)),
            }
        }
        out.extend(overlay_iter.filter_map(|(k, o)| o.map(|o| (k, o))));
        Ok(out)
    }

    /// A restore of etcd from a backup, as kube-apiserver then shows it:
    /// every object keeps existing but is renumbered with consecutive
    /// versions from `first` (in the order of their current versions), the
    /// head moves to the last of them (below where it was, unless `first` is
    /// high), and the history is gone. Returns the new head.
    pub fn restore_versions(&mut self, first: u64) -> u64 {
        let mut objects: Vec<(u64, usize, String)> = self
            .tables
            .iter()
            .enumerate()
            .flat_map(|(resource, table)| table.iter().map(move |(key, o)| (o.rv, resource, key.clone())))
            .collect();
        objects.sort_unstable();
        let mut rv = first.saturating_sub(1);
        for (_, resource, key) in objects {
            let Some(object) = self.tables[resource].get(&key) else { continue };
            rv += 1;
            let renumbered = object.renumbered(&self.catalog[resource], rv);
            self.tables[resource].insert(key, Arc::new(renumbered));
        }
        self.rv = rv;
        self.history.clear();
        self.compacted = rv;
        self.head.send_replace(rv);
        rv
    }

    /// Queues work for the background controllers (dropped when none run).
    pub fn schedule(&self, task: Task) {
        if let Some(tasks) = &self.tasks {
            let _ = tasks.send(task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store(history: usize) -> (Store, usize) {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let store = Store::new(catalog, history, 500, 1);
        let pods = store.resource_index("", "v1", "pods").unwrap();
        (store, pods)
    }

    fn pod(ns: &str, name: &str, label: &str) -> Value {
        json!({"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "labels": {"v": label}}})
    }

    fn names(items: &[(String, Arc<Object>)]) -> Vec<String> {
        items.iter().map(|(k, o)| format!("{k}@{}", o.labels()[0].1)).collect()
    }

    #[test]
    fn versions_start_where_configured_and_increase_by_one() {
        let (mut s, pods) = store(10);
        s.load(pods, pod("a", "x", "1"));
        s.finish_load();
        assert_eq!(s.rv(), 500);
        let change = s.put(pods, "a/y", pod("a", "y", "1"));
        assert_eq!((change.rv, change.change_type), (501, ChangeType::Added));
        assert!(std::str::from_utf8(&change.frame).unwrap().starts_with("{\"type\":\"ADDED\",\"object\":{"));
        let change = s.put(pods, "a/y", pod("a", "y", "2"));
        assert_eq!((change.rv, change.change_type), (502, ChangeType::Modified));
        let deleted = s.remove(pods, "a/y", pod("a", "y", "2")).unwrap();
        assert_eq!(deleted.rv, 503);
        assert_eq!(deleted.object.value()["metadata"]["resourceVersion"], "503");
    }

    #[test]
    fn objects_encode_kind_first_and_list_items_without_type_meta() {
        let catalog = kubefold_engine::resources::builtin();
        let value = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "resourceVersion": "7"}});
        let object = Object::encode(&catalog[0], &value, 7);
        assert_eq!(
            std::str::from_utf8(&object.bytes()).unwrap(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"7"}}"#
        );
        let mut item = BytesMut::new();
        object.write_list_item(&mut item);
        assert_eq!(std::str::from_utf8(&item).unwrap(), r#"{"metadata":{"name":"a","resourceVersion":"7"}}"#);
        assert_eq!(object.value()["metadata"]["name"], "a");
    }

    #[test]
    fn bulk_encoded_load_pods_match_encoded_values() {
        let catalog = kubefold_engine::resources::builtin();
        let cluster = crate::workload::Cluster::new("member1", 1, chrono::Utc::now());
        let json = crate::workload::load_pod_json(&cluster, 5, Some(9));
        let mut value: Value = serde_json::from_str(&json).unwrap();
        value["metadata"]["resourceVersion"] = json!("9");
        let slow = Object::encode(&catalog[0], &value, 9);
        let fast = Object::from_encoded(
            Bytes::from(json),
            9,
            value["metadata"]["uid"].as_str().unwrap().to_string(),
            crate::workload::load_pod_labels(5),
            crate::sim::fields::extract("", "pods", &crate::workload::load_pod_selectable(&cluster, 5)),
        );
        assert_eq!(fast.fields(), slow.fields());
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        fast.write_list_item(&mut a);
        slow.write_list_item(&mut b);
        assert_eq!(serde_json::from_slice::<Value>(&a).unwrap(), serde_json::from_slice::<Value>(&b).unwrap());
    }

    #[test]
    fn keys_sort_like_etcd_and_prefixes_select_a_namespace() {
        let (mut s, pods) = store(10);
        for (ns, name) in [("a-b", "p"), ("a", "q"), ("a", "p"), ("b", "z")] {
            s.load(pods, pod(ns, name, "1"));
        }
        let all: Vec<&String> = s.range(pods, "").map(|(k, _)| k).collect();
        // '-' (0x2d) sorts before '/' (0x2f), as in etcd's byte order.
        assert_eq!(all, ["a-b/p", "a/p", "a/q", "b/z"]);
        let a: Vec<&String> = s.range(pods, &prefix(Some("a"))).map(|(k, _)| k).collect();
        assert_eq!(a, ["a/p", "a/q"]);
    }

    #[test]
    fn snapshots_undo_later_changes() {
        let (mut s, pods) = store(100);
        s.load(pods, pod("a", "1", "old"));
        s.load(pods, pod("a", "2", "old"));
        s.load(pods, pod("a", "3", "old"));
        s.finish_load();
        let at = s.rv();
        s.put(pods, "a/2", pod("a", "2", "new"));
        s.remove(pods, "a/3", pod("a", "3", "old"));
        s.put(pods, "a/0", pod("a", "0", "new"));
        s.put(pods, "a/4", pod("a", "4", "new"));
        assert_eq!(names(&s.snapshot(pods, "a/", "", at).unwrap()), ["a/1@old", "a/2@old", "a/3@old"]);
        assert_eq!(names(&s.snapshot(pods, "a/", "a/2", at).unwrap()), ["a/2@old", "a/3@old"]);
        assert_eq!(
            names(&s.snapshot(pods, "a/", "", s.rv()).unwrap()),
            ["a/0@new", "a/1@old", "a/2@new", "a/4@new"]
        );
    }

    #[test]
    fn history_is_bounded_and_compaction_expires_old_reads() {
        let (mut s, pods) = store(3);
        s.finish_load();
        for i in 0..5 {
            s.put(pods, &format!("a/{i}"), pod("a", &i.to_string(), "1"));
        }
        // Versions 500..=504 were written; 502..=504 are retained.
        assert_eq!(s.compacted(), 501);
        assert!(s.changes_after(500).is_err());
        let after: Vec<u64> = s.changes_after(501).unwrap().map(|c| c.rv).collect();
        assert_eq!(after, [502, 503, 504]);
        assert_eq!(s.snapshot(pods, "", "", 500).unwrap_err(), Compacted { compacted: 501 });
    }

    #[test]
    fn a_restore_renumbers_objects_below_the_old_head_and_forgets_the_history() {
        let (mut s, pods) = store(100);
        s.load(pods, pod("a", "1", "x"));
        s.load(pods, pod("a", "2", "x"));
        s.finish_load();
        for i in 0..10 {
            s.put(pods, "a/1", pod("a", "1", &i.to_string()));
        }
        let before = s.rv();
        let head = s.restore_versions(300);
        assert_eq!(head, 301);
        assert!(head < before);
        assert_eq!(s.get(pods, "a/2").unwrap().rv, 300, "the older object keeps the lower version");
        let one = s.get(pods, "a/1").unwrap();
        assert_eq!((one.rv, one.value()["metadata"]["resourceVersion"].clone()), (301, json!("301")));
        assert_eq!(one.labels()[0].1, "9", "objects keep their content");
        assert_eq!(s.changes_after(301).unwrap().count(), 0);
        assert!(s.changes_after(299).is_err());
        assert_eq!(s.put(pods, "a/3", pod("a", "3", "x")).rv, 302);
    }
}
