//! Events: what a watcher reports, what the aggregator commits, what the
//! index holds.

use serde::{Deserialize, Serialize};

use crate::object::{Ingested, ServedBody};
/// Where [`IndexEntry`]'s label bits come from; it lives with the selectors that use it.
pub use crate::selector::label_bit;

/// The type of a committed event, as a watch stream names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// The object appeared.
    Added,
    /// The object changed.
    Modified,
    /// The object is gone; the event carries its last state.
    Deleted,
}

impl EventType {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// What a cluster watcher saw happen to one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Created or changed (a watch ADDED or MODIFIED).
    Upsert(Ingested),
    /// Deleted (a watch DELETED), with the object's last state.
    Delete(Ingested),
}

/// Identifies an object inside one resource type. Ordered as Kubernetes lists
/// are: by namespace, then name, then cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// The member's name.
    pub name: String,
    /// The owning cluster.
    pub cluster: String,
}

/// One committed change with its global resource version: the unit of the
/// event log (persisted as a record: a binary head around the raw JSON
/// body, see the store crate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Global resource version of this event.
    pub rv: u64,
    /// ADDED, MODIFIED or DELETED.
    pub event_type: EventType,
    /// [`crate::resources::ResourceType::key`] of the object's type.
    pub resource: String,
    /// Which object.
    pub key: ObjectKey,
    /// Global RV of the object's previous version (0 when the event created it).
    pub prev_rv: u64,
    /// The member's resourceVersion of this version.
    pub member_rv: String,
    /// `metadata.uid`.
    pub uid: String,
    /// Labels, sorted by key.
    pub labels: Vec<(String, String)>,
    /// Selectable fields.
    pub fields: Vec<(String, String)>,
    /// The served body.
    pub body: ServedBody,
    /// When the aggregator committed the event (Unix milliseconds); retention by age uses it.
    pub time_ms: u64,
}

impl StoredEvent {
    /// The index entry this event leaves behind (for ADDED and MODIFIED).
    pub fn index_entry(&self) -> IndexEntry {
        IndexEntry::new(
            self.rv,
            &self.member_rv,
            &self.uid,
            self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            self.fields.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }

    /// Builds the event for `ingested` with everything but its number.
    pub fn new(
        rv: u64,
        event_type: EventType,
        resource: &str,
        cluster: &str,
        prev_rv: u64,
        ingested: Ingested,
    ) -> StoredEvent {
        StoredEvent {
            rv,
            event_type,
            resource: resource.to_string(),
            key: ObjectKey {
                namespace: ingested.namespace,
                name: ingested.name,
                cluster: cluster.to_string(),
            },
            prev_rv,
            member_rv: ingested.member_rv,
            uid: ingested.uid,
            labels: ingested.labels,
            fields: ingested.fields,
            body: ingested.body,
            time_ms: 0,
        }
    }
}

/// What the index keeps in memory for one live object: enough to select,
/// order and diff it; the body stays in the store (at `rv`).
///
/// The strings (member RV, uid, labels, selectable fields' values) live in
/// one buffer with their end offsets beside it: an entry is three
/// allocations however many labels and fields the object has (it was one
/// per string, about 30 for a pod), which is most of kubefold's memory and
/// of the time a warm restart spends building the index. The names of the
/// selectable fields are the same for every object of a type, so entries
/// share one list of them ([`field_names`]) instead of each holding its own
/// (about 180 bytes of a pod's). Serialised as the plain struct (`rv`,
/// `member_rv`, `uid`, `labels`, `fields`), so stored entries and snapshots
/// keep their format.
#[derive(Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Global RV of the object's current version (the event holding its body).
    pub rv: u64,
    /// member RV, uid, then label keys and values, then field values.
    text: Box<str>,
    /// End offset in `text` of each string.
    ends: Box<[u32]>,
    /// Number of labels.
    labels: u32,
    /// The names of the selectable fields whose values end `text`, in order.
    field_names: &'static [&'static str],
    /// One bit per label (`key=value`, see [`label_bit`]): a selector's
    /// equality requirements are checked against it first, without reading
    /// `text` (a list with a selector over 100,000 entries spent most of its
    /// time waiting for each entry's strings to reach the cache).
    label_bits: u64,
}

impl IndexEntry {
    /// An entry; `labels` sorted by key.
    pub fn new<'a>(
        rv: u64,
        member_rv: &str,
        uid: &str,
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> IndexEntry {
        let mut text = String::with_capacity(member_rv.len() + uid.len() + 64);
        let mut ends = Vec::with_capacity(2 + 32);
        let mut push = |s: &str, text: &mut String| {
            text.push_str(s);
            ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
        };
        push(member_rv, &mut text);
        push(uid, &mut text);
        let mut count = 0u32;
        let mut label_bits = 0;
        for (k, v) in labels {
            push(k, &mut text);
            push(v, &mut text);
            label_bits |= label_bit(k, v);
            count += 1;
        }
        let mut names: Vec<&str> = Vec::new();
        for (f, v) in fields {
            names.push(f);
            push(v, &mut text);
        }
        IndexEntry { rv, text: text.into_boxed_str(), ends: ends.into_boxed_slice(), labels: count, field_names: field_names(&names), label_bits }
    }

    /// Whether the entry may have every label whose bits are in `bits` (an
    /// OR of [`label_bit`]s): `false` means it surely lacks one of them.
    pub fn may_have_labels(&self, bits: u64) -> bool {
        self.label_bits & bits == bits
    }

    /// The string at position `i`.
    fn at(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    /// The `(key, value)` pairs from string position `from`, `count` of them.
    fn pairs(&self, from: usize, count: usize) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..count).map(move |i| (self.at(from + 2 * i), self.at(from + 2 * i + 1)))
    }

    /// The member's resourceVersion of this version.
    pub fn member_rv(&self) -> &str {
        self.at(0)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.at(1)
    }

    /// Labels, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.pairs(2, self.labels as usize)
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Selectable fields.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let from = 2 + 2 * self.labels as usize;
        self.field_names.iter().enumerate().map(move |(i, name)| (*name, self.at(from + i)))
    }

    /// One selectable field's value.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields().find(|(f, _)| *f == name).map(|(_, v)| v)
    }

    /// Labels as owned pairs (for an event built from the entry).
    pub fn labels_owned(&self) -> Vec<(String, String)> {
        self.labels().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Fields as owned pairs (for an event built from the entry).
    pub fn fields_owned(&self) -> Vec<(String, String)> {
        self.fields().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
}

/// The one shared copy of a list of selectable field names: the same list
/// (by content) always gives the same slice. Lists are few (one or two a
/// resource type, the names of `crate::fields` and of stored entries) and
/// live as long as the process. A thread looks in the shared lists only
/// when its list differs from the last one it asked for.
pub fn field_names(names: &[&str]) -> &'static [&'static str] {
    use std::sync::Mutex;
    static LISTS: Mutex<Vec<&'static [&'static str]>> = Mutex::new(Vec::new());
    thread_local! {
        static LAST: std::cell::Cell<&'static [&'static str]> = const { std::cell::Cell::new(&[]) };
    }
    let last = LAST.with(std::cell::Cell::get);
    if last == names {
        return last;
    }
    let mut lists = LISTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let list = match lists.iter().find(|list| **list == names) {
        Some(list) => *list,
        None => {
            let owned: Vec<&'static str> = names.iter().map(|n| &*Box::leak(n.to_string().into_boxed_str())).collect();
            let list: &'static [&'static str] = Box::leak(owned.into_boxed_slice());
            lists.push(list);
            list
        }
    };
    LAST.with(|l| l.set(list));
    list
}

impl std::fmt::Debug for IndexEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexEntry")
            .field("rv", &self.rv)
            .field("member_rv", &self.member_rv())
            .field("uid", &self.uid())
            .field("labels", &self.labels().collect::<Vec<_>>())
            .field("fields", &self.fields().collect::<Vec<_>>())
            .finish()
    }
}

/// The serialised form of an [`IndexEntry`] (borrowed when written).
#[derive(Serialize)]
struct IndexEntryRef<'a> {
    rv: u64,
    member_rv: &'a str,
    uid: &'a str,
    labels: Pairs<'a>,
    fields: Pairs<'a>,
}

/// Pairs serialised as a sequence of 2-tuples, like `Vec<(String, String)>`.
struct Pairs<'a>(Vec<(&'a str, &'a str)>);

impl Serialize for Pairs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

impl Serialize for IndexEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        IndexEntryRef {
            rv: self.rv,
            member_rv: self.member_rv(),
            uid: self.uid(),
            labels: Pairs(self.labels().collect()),
            fields: Pairs(self.fields().collect()),
        }
        .serialize(serializer)
    }
}

/// The serialised form of an [`IndexEntry`], read.
#[derive(Deserialize)]
#[serde(rename = "IndexEntry")]
struct IndexEntryOwned {
    rv: u64,
    member_rv: String,
    uid: String,
    labels: Vec<(String, String)>,
    fields: Vec<(String, String)>,
}

impl<'de> Deserialize<'de> for IndexEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<IndexEntry, D::Error> {
        let o = IndexEntryOwned::deserialize(deserializer)?;
        Ok(IndexEntry::new(
            o.rv,
            &o.member_rv,
            &o.uid,
            o.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            o.fields.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_entries_hold_their_strings_and_serialise_as_the_plain_struct() {
        let labels = [("app", "web"), ("tier", ""), ("x\u{0}y", "ü")];
        let fields = [("spec.nodeName", "node-1"), ("status.phase", "Running")];
        let entry = IndexEntry::new(7, "123", "uid-1", labels, fields);
        assert_eq!(entry.member_rv(), "123");
        assert_eq!(entry.uid(), "uid-1");
        assert_eq!(entry.labels().collect::<Vec<_>>(), labels);
        assert_eq!(entry.fields().collect::<Vec<_>>(), fields);
        assert_eq!(entry.label("tier"), Some(""));
        assert_eq!(entry.label("x\u{0}y"), Some("ü"));
        assert_eq!(entry.label("missing"), None);
        assert_eq!(entry.field("status.phase"), Some("Running"));
        assert_eq!(entry.field("app"), None, "labels are not fields");
        assert!(entry.may_have_labels(label_bit("app", "web") | label_bit("tier", "")));
        assert!(entry.may_have_labels(0));
        // No false negative; a pair it lacks is mostly (not always) told apart.
        let lacking = (0..64).filter(|i| !entry.may_have_labels(label_bit("app", &format!("v{i}")))).count();
        assert!(lacking > 48, "{lacking} of 64 absent labels ruled out");
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "rv": 7, "member_rv": "123", "uid": "uid-1",
                "labels": [["app", "web"], ["tier", ""], ["x\u{0}y", "ü"]],
                "fields": [["spec.nodeName", "node-1"], ["status.phase", "Running"]],
            })
        );
        let back: IndexEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        let empty = IndexEntry::new(0, "", "", [], []);
        assert_eq!((empty.member_rv(), empty.uid(), empty.labels().count(), empty.fields().count()), ("", "", 0, 0));
    }

    #[test]
    fn entries_with_the_same_field_names_share_one_list_of_them() {
        let pod = |node: &str, phase: &str| IndexEntry::new(1, "1", "u", [("app", "web")], [("spec.nodeName", node), ("status.phase", phase)]);
        let (a, b) = (pod("n1", "Running"), pod("n2", "Pending"));
        assert!(std::ptr::eq(a.field_names, b.field_names), "one list for both");
        assert_eq!(b.fields().collect::<Vec<_>>(), [("spec.nodeName", "n2"), ("status.phase", "Pending")]);
        // Another list, asked for in between and from another thread, is
        // another slice; the first is still the same one afterwards.
        let node = IndexEntry::new(2, "2", "v", [], [("spec.unschedulable", "false")]);
        let elsewhere = std::thread::spawn(|| IndexEntry::new(3, "3", "w", [], [("spec.nodeName", "n3"), ("status.phase", "Failed")])).join().unwrap();
        assert!(!std::ptr::eq(a.field_names, node.field_names));
        assert!(std::ptr::eq(a.field_names, elsewhere.field_names), "the same list from another thread");
        assert!(std::ptr::eq(a.field_names, pod("n4", "Running").field_names));
        assert_eq!(node.field("spec.unschedulable"), Some("false"));
        assert_eq!(node.field("spec.nodeName"), None);
        // Values stay apart from names: a value equal to a name is a value.
        let odd = IndexEntry::new(4, "4", "x", [], [("status.phase", "status.phase")]);
        assert_eq!(odd.fields().collect::<Vec<_>>(), [("status.phase", "status.phase")]);
    }
}
