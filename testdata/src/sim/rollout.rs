//! The deployment and replica set controllers, as far as kubectl's rollout
//! verbs see them (Kubernetes docs "Deployments", "ReplicaSet"):
//!
//! - a Deployment owns one ReplicaSet per pod template, named
//!   `{deployment}-{pod-template-hash}`, labelled with that hash and
//!   annotated `deployment.kubernetes.io/revision`; a new template gets a
//!   new ReplicaSet with the next revision, a template seen before (`kubectl
//!   rollout undo`) takes its ReplicaSet back with the next revision; the
//!   current ReplicaSet is scaled to `spec.replicas`, the others to 0; a
//!   paused Deployment rolls nothing out;
//! - the Deployment's status then says the rollout is complete
//!   (`observedGeneration`, the replica counts, the `Available` and
//!   `Progressing` conditions), which `kubectl rollout status` and `kubectl
//!   wait --for=condition=Available` read. The simulator's pods start at
//!   once, so the rollout completes in one step instead of surging;
//! - a ReplicaSet creates and deletes pods from its template until it owns
//!   `spec.replicas` of them (the scheduler and kubelet start them).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::ops::{self, DeleteOptions, Subresource, WriteOptions};
use super::store::{self, Store};
use crate::workload;

/// The label the deployment controller puts on its ReplicaSets and their pods.
const HASH_LABEL: &str = "pod-template-hash";
/// The annotation holding a ReplicaSet's (and its Deployment's) revision.
const REVISION: &str = "deployment.kubernetes.io/revision";

fn controller_options(now: DateTime<Utc>) -> WriteOptions {
    let mut opts = WriteOptions::at(now);
    opts.default_manager = "kube-controller-manager".into();
    opts
}

/// The objects of type `resource` in `namespace` whose controller is `owner_uid`.
fn owned(store: &Store, resource: usize, namespace: &str, owner_uid: &str) -> Vec<Value> {
    store
        .range(resource, &format!("{namespace}/"))
        .map(|(_, o)| o.value())
        .filter(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid && r["controller"] == true))
        })
        .collect()
}

fn owner_reference(kind: &str, owner: &Value) -> Value {
    json!([{
        "apiVersion": "apps/v1", "kind": kind, "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The pod template without the controller's hash label: what a
/// ReplicaSet's template is compared by.
fn without_hash(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(HASH_LABEL);
    }
    template
}

/// `pod-template-hash` of a template: FNV-1a of its JSON, encoded as
/// `rand.SafeEncodeString` does (no vowels, no look-alike digits).
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let hash = template.to_string().bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193));
    format!("{hash}").bytes().map(|d| ALPHABET[(d as usize * 7 + 3) % ALPHABET.len()] as char).take(10).collect()
}

fn revision(object: &Value) -> i64 {
    object["metadata"]["annotations"][REVISION].as_str().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// Writes `object` unless it equals `old` (ignoring nothing: the store
/// itself skips writes that change nothing).
fn write(store: &mut Store, resource: usize, object: Value, sub: Subresource, now: DateTime<Utc>) {
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if let Err(error) = ops::update(store, resource, namespace.as_deref(), &name, object, sub, &controller_options(now)) {
        tracing::debug!(%error, name, "A controller's write failed.");
    }
}

/// Brings a Deployment's ReplicaSets to its template and replicas, and its
/// status to what it then is.
pub fn sync_deployment(store: &mut Store, resource: usize, key: &str, now: DateTime<Utc>) {
    let Some(deployment) = store.get(resource, key).map(|o| o.value()) else { return };
    let Some(replica_sets) = store.resource_index("apps", "v1", "replicasets") else { return };
    if deployment["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let uid = deployment["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let paused = deployment["spec"]["paused"] == true;
    let template = deployment["spec"]["template"].clone();
    let mut sets = owned(store, replica_sets, &namespace, &uid);
    let max_revision = sets.iter().map(revision).max().unwrap_or(0);
    let current = sets.iter().position(|rs| without_hash(&rs["spec"]["template"]) == without_hash(&template));
    let current = match current {
        _ if paused => current,
        Some(i) => {
            if revision(&sets[i]) < max_revision {
                sets[i]["metadata"]["annotations"][REVISION] = json!((max_revision + 1).to_string());
            }
            Some(i)
        }
        None => {
            let hash = template_hash(&template);
            let mut rs_template = template.clone();
            rs_template["metadata"]["labels"][HASH_LABEL] = json!(hash);
            let mut selector = deployment["spec"]["selector"].clone();
            selector["matchLabels"][HASH_LABEL] = json!(hash);
            let name = format!("{}-{hash}", deployment["metadata"]["name"].as_str().unwrap_or_default());
            let rs = json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {
                    "name": name, "namespace": namespace,
                    "labels": rs_template["metadata"]["labels"],
                    "annotations": {REVISION: (max_revision + 1).to_string(),
                                    "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                                    "deployment.kubernetes.io/max-replicas": replicas.to_string()},
                    "ownerReferences": owner_reference("Deployment", &deployment),
                },
                "spec": {"replicas": 0, "selector": selector, "template": rs_template,
                         "minReadySeconds": deployment["spec"]["minReadySeconds"].as_i64().unwrap_or(0)},
            });
            match ops::create(store, replica_sets, Some(&namespace), rs, &controller_options(now)) {
                Ok(written) => {
                    sets.push(serde_json::from_slice(&written.body).unwrap_or(Value::Null));
                    Some(sets.len() - 1)
                }
                Err(error) => {
                    tracing::debug!(%error, "The deployment controller could not create a ReplicaSet.");
                    None
                }
            }
        }
    };
    let Some(current) = current else {
        // Paused before any rollout, or the create failed: the status only.
        let mut status = deployment.clone();
        status["status"]["observedGeneration"] = deployment["metadata"]["generation"].clone();
        write(store, resource, status, Subresource::Status, now);
        return;
    };
    for (i, rs) in sets.iter().enumerate() {
        let mut rs = rs.clone();
        let desired = if i == current { replicas } else if paused { rs["spec"]["replicas"].as_i64().unwrap_or(0) } else { 0 };
        rs["spec"]["replicas"] = json!(desired);
        if i == current {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] = json!(replicas.to_string());
        }
        write(store, replica_sets, rs, Subresource::Main, now);
    }
    let current_rs = &sets[current];
    let mut updated = deployment.clone();
    updated["metadata"]["annotations"][REVISION] = json!(revision(current_rs).to_string());
    write(store, resource, updated, Subresource::Main, now);
    let Some(mut deployment) = store.get(resource, key).map(|o| o.value()) else { return };
    let at = workload::ts(now);
    let rs_name = current_rs["metadata"]["name"].as_str().unwrap_or_default();
    let keep_time = |kind: &str, reason: &str| -> Value {
        deployment["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind && c["reason"] == reason && c["status"] == "True"))
            .map(|c| c["lastTransitionTime"].clone())
            .unwrap_or_else(|| json!(at))
    };
    let progressing = if paused {
        json!({"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused", "message": "Deployment is paused",
               "lastUpdateTime": at, "lastTransitionTime": keep_time("Progressing", "DeploymentPaused")})
    } else {
        json!({"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
               "message": format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
               "lastUpdateTime": keep_time("Progressing", "NewReplicaSetAvailable"),
               "lastTransitionTime": keep_time("Progressing", "NewReplicaSetAvailable")})
    };
    let available = json!({"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                           "message": "Deployment has minimum availability.",
                           "lastUpdateTime": keep_time("Available", "MinimumReplicasAvailable"),
                           "lastTransitionTime": keep_time("Available", "MinimumReplicasAvailable")});
    let mut status = json!({
        "observedGeneration": deployment["metadata"]["generation"],
        "replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
        "conditions": [available, progressing],
    });
    if replicas == 0 {
        for field in ["readyReplicas", "availableReplicas", "updatedReplicas", "replicas"] {
            status.as_object_mut().map(|s| s.remove(field));
        }
    }
    deployment["status"] = status;
    write(store, resource, deployment, Subresource::Status, now);
}

/// Creates or deletes a ReplicaSet's pods until it owns `spec.replicas`.
pub fn sync_replica_set(store: &mut Store, resource: usize, key: &str, now: DateTime<Utc>) {
    let Some(rs) = store.get(resource, key).map(|o| o.value()) else { return };
    let Some(pods) = store.resource_index("", "v1", "pods") else { return };
    if rs["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    let namespace = rs["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let uid = rs["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let name = rs["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let desired = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let live: Vec<Value> =
        owned(store, pods, &namespace, &uid).into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
    let opts = controller_options(now);
    for _ in live.len()..desired {
        let template = &rs["spec"]["template"];
        let mut metadata = template["metadata"].clone();
        if !metadata.is_object() {
            metadata = json!({});
        }
        metadata["name"] = json!(format!("{name}-{}", workload::suffix(&mut store.rng, 5)));
        metadata["namespace"] = json!(namespace);
        metadata["ownerReferences"] = owner_reference("ReplicaSet", &rs);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]});
        if let Err(error) = ops::create(store, pods, Some(&namespace), pod, &opts) {
            tracing::debug!(%error, "The replica set controller could not create a pod.");
        }
    }
    for pod in live.iter().skip(desired) {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        if let Err(error) = ops::delete(store, pods, Some(&namespace), pod_name, &DeleteOptions::default(), &opts) {
            tracing::debug!(%error, "The replica set controller could not delete a pod.");
        }
    }
    let Some(mut rs) = store.get(resource, &store::key(Some(&namespace), &name)).map(|o| o.value()) else { return };
    let mut status = json!({
        "replicas": desired, "fullyLabeledReplicas": desired, "readyReplicas": desired, "availableReplicas": desired,
        "observedGeneration": rs["metadata"]["generation"],
    });
    if desired == 0 {
        status = json!({"replicas": 0, "observedGeneration": rs["metadata"]["generation"]});
    }
    rs["status"] = status;
    write(store, resource, rs, Subresource::Status, now);
}
