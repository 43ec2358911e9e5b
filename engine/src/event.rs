//! Events: what a watcher reports, what the aggregator commits, what the
//! index holds.

use serde::{Deserialize, Serialize};

use crate::object::{Ingested, ServedBody};

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
/// event log (persisted as a bincode envelope around the raw JSON body).
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
        IndexEntry {
            rv: self.rv,
            member_rv: self.member_rv.clone(),
            uid: self.uid.clone(),
            labels: self.labels.clone(),
            fields: self.fields.clone(),
        }
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// Global RV of the object's current version (the event holding its body).
    pub rv: u64,
    /// The member's resourceVersion of that version.
    pub member_rv: String,
    /// `metadata.uid`.
    pub uid: String,
    /// Labels, sorted by key.
    pub labels: Vec<(String, String)>,
    /// Selectable fields.
    pub fields: Vec<(String, String)>,
}
