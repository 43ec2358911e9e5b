//! The parts of a cluster besides the API server that clients notice: a
//! scheduler and kubelet that start pods created through the API, a kubelet
//! that confirms graceful pod deletions, the garbage collector (cascading
//! deletion by `ownerReferences`, orphaning) and the namespace controller
//! (emptying a terminating namespace), and the deployment and replica set
//! controllers ([`rollout`]). See the Kubernetes docs "Pod
//! Lifecycle" (termination), "Garbage Collection" and "Namespaces".
//!
//! Writers queue a [`Task`] in the store; [`run`] performs each after a
//! short delay, as the real components do asynchronously.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::ops::{self, DeleteOptions, Propagation, WriteOptions};
use super::rollout;
use super::store::Store;
use super::Shared;
use crate::workload;

/// Work for the background controllers.
#[derive(Debug, Clone)]
pub enum Task {
    /// The scheduler binds a new pod to a node.
    StartPod {
        /// Index of the pods type.
        resource: usize,
        /// Store key of the pod.
        key: String,
        /// The pod's uid (a recreated pod of the same name is another pod).
        uid: String,
    },
    /// The kubelet starts a bound pod.
    RunPod {
        /// Index of the pods type.
        resource: usize,
        /// Store key of the pod.
        key: String,
        /// The pod's uid.
        uid: String,
    },
    /// The kubelet confirms a graceful pod deletion.
    FinishPodDeletion {
        /// Index of the pods type.
        resource: usize,
        /// Store key of the pod.
        key: String,
        /// The pod's uid.
        uid: String,
        /// How long the containers take to stop.
        after: Duration,
    },
    /// The garbage collector handles the dependents of a deleted owner.
    CollectDependents {
        /// The owner's namespace (`None`: cluster-scoped owner).
        namespace: Option<String>,
        /// The owner's uid.
        owner_uid: String,
        /// Remove the owner reference instead of deleting.
        orphan: bool,
    },
    /// The garbage collector finishes a foreground deletion.
    ForegroundDeletion {
        /// Index of the owner's type.
        resource: usize,
        /// Store key of the owner.
        key: String,
        /// The owner's uid.
        uid: String,
        /// The owner's namespace.
        namespace: Option<String>,
    },
    /// The deployment controller brings a Deployment's ReplicaSets and
    /// status to its spec ([`rollout::sync_deployment`]).
    SyncDeployment {
        /// Index of the deployments type.
        resource: usize,
        /// Store key of the Deployment.
        key: String,
    },
    /// The replica set controller brings a ReplicaSet's pods to its
    /// replicas ([`rollout::sync_replica_set`]).
    SyncReplicaSet {
        /// Index of the replica sets type.
        resource: usize,
        /// Store key of the ReplicaSet.
        key: String,
    },
    /// The kubelet starts a pod's new ephemeral containers
    /// ([`super::ops::ephemeral::start`]).
    StartEphemeralContainers {
        /// Index of the pods type.
        resource: usize,
        /// Store key of the pod.
        key: String,
        /// The pod's uid.
        uid: String,
    },
    /// The namespace controller empties and removes a terminating namespace.
    FinishNamespaceDeletion {
        /// The namespace.
        name: String,
        /// Its uid.
        uid: String,
    },
}

impl Task {
    /// How long after being queued the task runs.
    fn delay(&self) -> Duration {
        match self {
            Task::StartPod { .. } => Duration::from_millis(50),
            Task::RunPod { .. } => Duration::from_millis(150),
            Task::StartEphemeralContainers { .. } => Duration::from_millis(100),
            Task::FinishPodDeletion { after, .. } => *after,
            Task::CollectDependents { .. } => Duration::from_millis(20),
            Task::ForegroundDeletion { .. } => Duration::from_millis(50),
            Task::FinishNamespaceDeletion { .. } => Duration::from_millis(200),
            Task::SyncDeployment { .. } | Task::SyncReplicaSet { .. } => Duration::from_millis(30),
        }
    }
}

/// Runs queued tasks until shutdown (on the simulator's main thread).
pub async fn run(shared: Arc<Shared>, mut tasks: mpsc::UnboundedReceiver<Task>) {
    loop {
        let task = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            task = tasks.recv() => match task {
                Some(task) => task,
                None => return,
            },
        };
        let shared = shared.clone();
        actix_web::rt::spawn(async move {
            tokio::select! {
                _ = shared.shutdown.cancelled() => {}
                _ = tokio::time::sleep(task.delay()) => {
                    let now = shared.now();
                    if let Ok(mut store) = shared.store.write() {
                        perform(&mut store, task, now);
                    }
                }
            }
        });
    }
}

/// Performs one task on the store (synchronous; tests call it directly).
pub fn perform(store: &mut Store, task: Task, now: DateTime<Utc>) {
    match task {
        Task::StartPod { resource, key, uid } => schedule_pod(store, resource, &key, &uid, now),
        Task::RunPod { resource, key, uid } => run_pod(store, resource, &key, &uid, now),
        Task::StartEphemeralContainers { resource, key, uid } => super::ops::ephemeral::start(store, resource, &key, &uid, now),
        Task::FinishPodDeletion { resource, key, uid, .. } => {
            let Some(pod) = store.get(resource, &key).filter(|p| p.uid() == uid).cloned() else { return };
            let value = pod.value();
            if value["metadata"]["deletionTimestamp"].is_string()
                && value["metadata"]["finalizers"].as_array().is_none_or(Vec::is_empty)
            {
                store.remove(resource, &key, value);
                tracing::debug!(key, "Pod deletion confirmed by the kubelet.");
            }
        }
        Task::CollectDependents { namespace, owner_uid, orphan } => {
            collect_dependents(store, namespace.as_deref(), &owner_uid, orphan, now)
        }
        Task::ForegroundDeletion { resource, key, uid, namespace } => {
            collect_dependents(store, namespace.as_deref(), &uid, false, now);
            let Some(owner) = store.get(resource, &key).filter(|o| o.uid() == uid).cloned() else { return };
            let mut value = owner.value();
            if let Some(finalizers) = value.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
                finalizers.retain(|f| f != "foregroundDeletion");
            }
            if value["metadata"]["finalizers"].as_array().is_some_and(Vec::is_empty) {
                store.remove(resource, &key, value);
            } else {
                store.put(resource, &key, value);
            }
        }
        Task::SyncDeployment { resource, key } => rollout::sync_deployment(store, resource, &key, now),
        Task::SyncReplicaSet { resource, key } => rollout::sync_replica_set(store, resource, &key, now),
        Task::FinishNamespaceDeletion { name, uid } => {
            let Some(namespaces) = store.resource_index("", "v1", "namespaces") else { return };
            if store.get(namespaces, &name).is_none_or(|ns| ns.uid() != uid) {
                return;
            }
            let prefix = format!("{name}/");
            for resource in 0..store.catalog().len() {
                if !store.resource(resource).namespaced {
                    continue;
                }
                let contents: Vec<(String, Value)> =
                    store.range(resource, &prefix).map(|(k, o)| (k.clone(), o.value())).collect();
                for (key, value) in contents {
                    store.remove(resource, &key, value);
                }
            }
            if let Some(ns) = store.get(namespaces, &name).cloned() {
                store.remove(namespaces, &name, ns.value());
                tracing::debug!(namespace = %name, "Namespace deleted.");
            }
        }
    }
}

fn schedule_pod(store: &mut Store, resource: usize, key: &str, uid: &str, now: DateTime<Utc>) {
    let Some(pod) = store.get(resource, key).filter(|p| p.uid() == uid).cloned() else { return };
    let mut value = pod.value();
    if value["metadata"]["deletionTimestamp"].is_string() || value["status"]["phase"] != "Pending" {
        return;
    }
    let Some(nodes) = store.resource_index("", "v1", "nodes") else { return };
    let node_names: Vec<String> = store.range(nodes, "").map(|(k, _)| k.clone()).collect();
    let assigned = value["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()).map(str::to_string);
    let node = match assigned {
        Some(node) => node,
        None if node_names.is_empty() => {
            value["status"]["conditions"] = json!([{
                "type": "PodScheduled", "status": "False", "lastProbeTime": null,
                "lastTransitionTime": workload::ts(now), "reason": "Unschedulable",
                "message": "no nodes available to schedule pods",
            }]);
            store.put(resource, key, value);
            return;
        }
        None => {
            let node = node_names[store.rng.random_range(0..node_names.len())].clone();
            value["spec"]["nodeName"] = json!(node);
            node
        }
    };
    value["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                                             "lastTransitionTime": workload::ts(now)}]);
    store.put(resource, key, value);
    if node_names.contains(&node) {
        store.schedule(Task::RunPod { resource, key: key.into(), uid: uid.into() });
    }
}

fn run_pod(store: &mut Store, resource: usize, key: &str, uid: &str, now: DateTime<Utc>) {
    let Some(pod) = store.get(resource, key).filter(|p| p.uid() == uid).cloned() else { return };
    let mut value = pod.value();
    if value["metadata"]["deletionTimestamp"].is_string() || value["status"]["phase"] != "Pending" {
        return;
    }
    let node = value["spec"]["nodeName"].as_str().unwrap_or_default().to_string();
    let host_ip = store
        .resource_index("", "v1", "nodes")
        .and_then(|nodes| store.get(nodes, &node))
        .and_then(|n| {
            n.value()["status"]["addresses"]
                .as_array()
                .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP").and_then(|a| a["address"].as_str().map(str::to_string)))
        })
        .unwrap_or_else(|| "172.18.0.2".into());
    let pod_ip = format!("10.244.{}.{}", store.rng.random_range(0..3), store.rng.random_range(2..250));
    let at = workload::ts(now);
    let hex = |store: &mut Store| -> String {
        (0..64).map(|_| char::from_digit(store.rng.random_range(0..16), 16).unwrap_or('0')).collect()
    };
    let containers = value["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let mut statuses = Vec::new();
    for c in &containers {
        let image = c["image"].as_str().unwrap_or_default().to_string();
        let repository = image.split(':').next().unwrap_or_default().to_string();
        statuses.push(json!({
            "name": c["name"], "image": image, "imageID": format!("{repository}@sha256:{}", hex(store)),
            "containerID": format!("containerd://{}", hex(store)),
            "ready": true, "started": true, "restartCount": 0, "lastState": {},
            "state": {"running": {"startedAt": at}},
        }));
    }
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": at});
    let qos = value["status"]["qosClass"].clone();
    value["status"] = json!({
        "phase": "Running",
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
                       condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": at,
        "containerStatuses": statuses,
        "qosClass": qos,
    });
    store.put(resource, key, value);
}

fn collect_dependents(store: &mut Store, namespace: Option<&str>, owner_uid: &str, orphan: bool, now: DateTime<Utc>) {
    let prefix = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
    let mut dependents = Vec::new();
    for resource in 0..store.catalog().len() {
        if namespace.is_some() && !store.resource(resource).namespaced {
            continue;
        }
        for (key, object) in store.range(resource, &prefix) {
            if object.owners().iter().any(|o| o == owner_uid) {
                dependents.push((resource, key.clone(), object.value()));
            }
        }
    }
    for (resource, key, mut value) in dependents {
        if orphan {
            if let Some(refs) = value.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                refs.retain(|r| r["uid"] != owner_uid);
            }
            if value["metadata"]["ownerReferences"].as_array().is_some_and(Vec::is_empty) {
                if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("ownerReferences");
                }
            }
            store.put(resource, &key, value);
            continue;
        }
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let ns = value["metadata"]["namespace"].as_str().map(str::to_string);
        let options = DeleteOptions { propagation: Propagation::Background, ..DeleteOptions::default() };
        let mut opts = WriteOptions::at(now);
        opts.default_manager = "generic-garbage-collector".into();
        if let Err(error) = ops::delete(store, resource, ns.as_deref(), &name, &options, &opts) {
            tracing::debug!(%error, key, "Garbage collection of a dependent failed.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::resources::ResourceType;

    fn cluster_store() -> Store {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 10_000, 300, 3);
        let now = Utc::now();
        let cluster = workload::Cluster::new("member1", 3, now);
        for object in workload::demo(&cluster) {
            let api_version = object["apiVersion"].as_str().unwrap().to_string();
            let kind = object["kind"].as_str().unwrap().to_string();
            let index = store.resource_index_of_kind(&api_version, &kind).unwrap();
            store.load(index, object);
        }
        store.finish_load();
        store
    }

    /// Runs every queued task at once, as the controllers would after their delays.
    fn settle(store: &mut Store, rx: &mut mpsc::UnboundedReceiver<Task>) {
        for _ in 0..10 {
            let mut tasks = Vec::new();
            while let Ok(task) = rx.try_recv() {
                tasks.push(task);
            }
            if tasks.is_empty() {
                break;
            }
            for task in tasks {
                perform(store, task, Utc::now());
            }
        }
    }

    #[test]
    fn created_pods_are_scheduled_and_started() {
        let mut store = cluster_store();
        let (tx, mut rx) = mpsc::unbounded_channel();
        store.tasks = Some(tx);
        let pods = store.resource_index("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "fresh"}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
        ops::create(&mut store, pods, Some("default"), pod, &WriteOptions::at(Utc::now())).unwrap();
        settle(&mut store, &mut rx);
        let pod = store.get(pods, "default/fresh").unwrap().value();
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(pod["spec"]["nodeName"].as_str().unwrap().starts_with("member1-node-"));
        assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    }

    #[test]
    fn deleting_a_deployment_cascades_to_replica_sets_and_pods() {
        let mut store = cluster_store();
        let (tx, mut rx) = mpsc::unbounded_channel();
        store.tasks = Some(tx);
        let deployments = store.resource_index("apps", "v1", "deployments").unwrap();
        let replicasets = store.resource_index("apps", "v1", "replicasets").unwrap();
        let pods = store.resource_index("", "v1", "pods").unwrap();
        let frontend_pods = |s: &Store| s.range(pods, "shop/").filter(|(k, _)| k.starts_with("shop/frontend-")).count();
        assert_eq!(frontend_pods(&store), 3);
        ops::delete(&mut store, deployments, Some("shop"), "frontend", &DeleteOptions::default(), &WriteOptions::at(Utc::now())).unwrap();
        settle(&mut store, &mut rx);
        assert!(store.range(replicasets, "shop/").all(|(k, _)| !k.starts_with("shop/frontend-")));
        assert_eq!(frontend_pods(&store), 0);
    }

    #[test]
    fn orphaning_keeps_dependents_without_the_owner_reference() {
        let mut store = cluster_store();
        let (tx, mut rx) = mpsc::unbounded_channel();
        store.tasks = Some(tx);
        let deployments = store.resource_index("apps", "v1", "deployments").unwrap();
        let replicasets = store.resource_index("apps", "v1", "replicasets").unwrap();
        let orphan = DeleteOptions { propagation: Propagation::Orphan, ..DeleteOptions::default() };
        ops::delete(&mut store, deployments, Some("shop"), "cache", &orphan, &WriteOptions::at(Utc::now())).unwrap();
        settle(&mut store, &mut rx);
        let (_, rs) = store.range(replicasets, "shop/").find(|(k, _)| k.starts_with("shop/cache-")).unwrap();
        assert!(rs.owners().is_empty());
    }

    #[test]
    fn namespaces_terminate_then_disappear_with_their_contents() {
        let mut store = cluster_store();
        let (tx, mut rx) = mpsc::unbounded_channel();
        store.tasks = Some(tx);
        let namespaces = store.resource_index("", "v1", "namespaces").unwrap();
        let pods = store.resource_index("", "v1", "pods").unwrap();
        let answer = ops::delete(&mut store, namespaces, None, "monitoring", &DeleteOptions::default(), &WriteOptions::at(Utc::now())).unwrap();
        let ns: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(ns["status"]["phase"], "Terminating");
        settle(&mut store, &mut rx);
        assert!(store.get(namespaces, "monitoring").is_none());
        assert_eq!(store.range(pods, "monitoring/").count(), 0);
    }
}
