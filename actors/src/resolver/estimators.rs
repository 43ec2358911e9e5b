//! The estimator table the resolver publishes: one row per member (its
//! resolved endpoint and last probe), read by HTTP workers and the
//! scheduler side through the shared handle [`Estimators`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kubefold_engine::estimator::{EndpointEntry, Rule};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::probe::Probe;

/// Changes buffered for slow subscribers of [`Estimators`] before they lag.
pub const EVENTS_CAPACITY: usize = 1024;

/// One row of the estimator table: the resolved endpoint and its last probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EstimatorStatus {
    /// Cluster, addresses, rule, error.
    #[serde(flatten)]
    pub endpoint: EndpointEntry,
    /// The last probe of the current addresses; `null` until one finished.
    #[serde(default)]
    pub probe: Option<Probe>,
}

/// The type of a change of the table, as Kubernetes watch events name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EstimatorEventType {
    /// A member's endpoint appeared.
    Added,
    /// A member's endpoint or its probe outcome changed.
    Modified,
    /// A member's endpoint is gone (member removed, control plane lost).
    Deleted,
}

/// One change of the table: `{"type": "MODIFIED", "object": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimatorEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EstimatorEventType,
    /// The row after the change (before it, for `DELETED`).
    pub object: EstimatorStatus,
}

/// The shared read handle of the estimator table: HTTP workers and the
/// scheduler side read it while the resolver alone writes.
#[derive(Debug)]
pub struct Estimators {
    table: RwLock<BTreeMap<String, EstimatorStatus>>,
    events: broadcast::Sender<EstimatorEvent>,
    rotation: Mutex<HashMap<String, usize>>,
    synced: AtomicBool,
}

impl Estimators {
    /// An empty table.
    pub fn new() -> Arc<Estimators> {
        let (events, _) = broadcast::channel(EVENTS_CAPACITY);
        Arc::new(Estimators {
            table: RwLock::new(BTreeMap::new()),
            events,
            rotation: Mutex::new(HashMap::new()),
            synced: AtomicBool::new(false),
        })
    }

    /// Every row, by cluster name.
    pub fn table(&self) -> Vec<EstimatorStatus> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The row of `cluster`.
    pub fn get(&self, cluster: &str) -> Option<EstimatorStatus> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned()
    }

    /// Subscribes to changes.
    pub fn subscribe(&self) -> broadcast::Receiver<EstimatorEvent> {
        self.events.subscribe()
    }

    /// The current table and a subscription to every change after it, with
    /// nothing lost or repeated between them.
    pub fn watch(&self) -> (Vec<EstimatorStatus>, broadcast::Receiver<EstimatorEvent>) {
        // Publishing holds the write lock while sending: under the read lock
        // no event can fall between the copy and the subscription.
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        (table.values().cloned().collect(), self.events.subscribe())
    }

    /// Whether the control plane's Services have been listed (or no control
    /// plane is configured): until then only static entries are known.
    pub fn control_plane_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The address a client should dial next for `cluster`: for a headless
    /// Service the ready endpoints in turn (round-robin), otherwise the
    /// address the last probe reached, or the most preferred one.
    pub fn pick(&self, cluster: &str) -> Option<String> {
        let row = self.get(cluster)?;
        let addresses = &row.endpoint.addresses;
        if addresses.is_empty() {
            return None;
        }
        if row.endpoint.rule == Rule::Headless {
            let mut rotation = self.rotation.lock().unwrap_or_else(|e| e.into_inner());
            let next = rotation.entry(cluster.to_string()).or_insert(0);
            let address = addresses[*next % addresses.len()].clone();
            *next = next.wrapping_add(1);
            return Some(address);
        }
        match &row.probe {
            Some(Probe { reachable: true, address: Some(a), .. }) if addresses.contains(a) => Some(a.clone()),
            _ => addresses.first().cloned(),
        }
    }

    pub(super) fn publish(&self, event_type: EstimatorEventType, row: EstimatorStatus) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        match event_type {
            EstimatorEventType::Deleted => {
                table.remove(&row.endpoint.cluster);
                self.rotation.lock().unwrap_or_else(|e| e.into_inner()).remove(&row.endpoint.cluster);
            }
            _ => {
                table.insert(row.endpoint.cluster.clone(), row.clone());
            }
        }
        // No subscriber is not an error.
        let _ = self.events.send(EstimatorEvent { event_type, object: row });
    }

    /// Replaces a row without an event (a probe that only refreshed its time).
    pub(super) fn refresh(&self, row: EstimatorStatus) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        table.insert(row.endpoint.cluster.clone(), row);
    }

    pub(super) fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn watch_gives_the_table_then_every_later_change() {
        let estimators = Estimators::new();
        let row = |c: &str| EstimatorStatus {
            endpoint: EndpointEntry { cluster: c.into(), addresses: strings(&["127.0.0.1:1"]), rule: Rule::Static, error: None },
            probe: None,
        };
        estimators.publish(EstimatorEventType::Added, row("a"));
        let (table, mut rx) = estimators.watch();
        estimators.publish(EstimatorEventType::Added, row("b"));
        estimators.publish(EstimatorEventType::Deleted, row("a"));
        assert_eq!(table, vec![row("a")]);
        let first = rx.try_recv().unwrap();
        assert_eq!((first.event_type, first.object.endpoint.cluster.as_str()), (EstimatorEventType::Added, "b"));
        assert_eq!(rx.try_recv().unwrap().event_type, EstimatorEventType::Deleted);
        assert!(rx.try_recv().is_err());
        let line = serde_json::to_value(EstimatorEvent { event_type: EstimatorEventType::Modified, object: row("c") }).unwrap();
        assert_eq!(
            line,
            json!({"type": "MODIFIED", "object": {"cluster": "c", "addresses": ["127.0.0.1:1"], "rule": "static", "probe": null}})
        );
    }

}
