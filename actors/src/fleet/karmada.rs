//! What a Karmada control plane says of the members it registers: each
//! `Cluster`'s sync mode and `Ready` condition, written by the Karmada
//! reflector alone and shown beside the watchers' own status.

use std::collections::BTreeMap;
use std::sync::RwLock;

use serde::Serialize;

/// A Karmada `Cluster`'s view of its member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaCluster {
    /// `spec.syncMode`: `Push` or `Pull`.
    pub sync_mode: String,
    /// The `Ready` condition, when the Cluster has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<Condition>,
}

/// A status condition, as Kubernetes writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// A message for people.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl KarmadaCluster {
    /// The view of a `Cluster` object (JSON).
    pub fn of(cluster: &serde_json::Value) -> KarmadaCluster {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let ready = cluster["status"]["conditions"]
            .as_array()
            .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Ready"))
            .map(|c| Condition { status: text(&c["status"]), reason: text(&c["reason"]), message: text(&c["message"]) });
        KarmadaCluster { sync_mode: text(&cluster["spec"]["syncMode"]), ready }
    }

    /// Whether Karmada says the cluster is not ready (`Ready` is `False`).
    pub fn not_ready(&self) -> bool {
        self.ready.as_ref().is_some_and(|r| r.status == "False")
    }

    /// Whether the agent on the cluster pulls its work (`Pull` mode).
    pub fn is_pull(&self) -> bool {
        self.sync_mode == "Pull"
    }
}

/// The views of every member that comes from Karmada.
#[derive(Debug, Default)]
pub struct KarmadaClusters {
    clusters: RwLock<BTreeMap<String, KarmadaCluster>>,
}

impl KarmadaClusters {
    /// Replaces every view (members not in `clusters` have none).
    pub fn replace(&self, clusters: BTreeMap<String, KarmadaCluster>) {
        *self.clusters.write().unwrap_or_else(|e| e.into_inner()) = clusters;
    }

    /// The view of `cluster`, if it comes from Karmada.
    pub fn get(&self, cluster: &str) -> Option<KarmadaCluster> {
        self.clusters.read().unwrap_or_else(|e| e.into_inner()).get(cluster).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_condition_and_the_sync_mode_are_read_from_the_cluster() {
        let cluster = serde_json::json!({"spec": {"syncMode": "Pull"}, "status": {"conditions": [
            {"type": "Other", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ClusterNotReachable", "message": "cluster is not reachable"},
        ]}});
        let view = KarmadaCluster::of(&cluster);
        assert!(view.is_pull() && view.not_ready());
        assert_eq!(view.ready.as_ref().unwrap().reason, "ClusterNotReachable");
        let fresh = KarmadaCluster::of(&serde_json::json!({"spec": {"syncMode": "Push"}}));
        assert!(!fresh.is_pull() && !fresh.not_ready() && fresh.ready.is_none());
    }
}
