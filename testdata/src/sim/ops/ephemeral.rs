//! `pods/ephemeralcontainers` (`kubectl debug`), as kube-apiserver's
//! ephemeral containers strategy serves it: a write of the subresource
//! changes only `spec.ephemeralContainers`; existing ephemeral containers
//! may not be changed or removed; a new one needs a unique name, an image,
//! and a `targetContainerName` (if any) naming one of the pod's containers.
//! The kubelet then starts it: its status appears in
//! `status.ephemeralContainerStatuses` ([`start`]).
//! Kubernetes docs, "Ephemeral Containers":
//! <https://kubernetes.io/docs/concepts/workloads/pods/ephemeral-containers/>

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::super::status::{ApiError, Cause, Result};
use super::super::store::Store;
use super::super::validation;
use kubefold_engine::resources::ResourceType;

/// The pod a write of the subresource stores: the old pod with the body's
/// `spec.ephemeralContainers` (kube-apiserver's `ephemeralContainersStrategy.PrepareForUpdate`).
pub(super) fn merge(old: &Value, body: &Value) -> Value {
    let mut merged = old.clone();
    match body["spec"].get("ephemeralContainers") {
        Some(containers) if !containers.is_null() => merged["spec"]["ephemeralContainers"] = containers.clone(),
        _ => {
            if let Some(spec) = merged["spec"].as_object_mut() {
                spec.remove("ephemeralContainers");
            }
        }
    }
    if let Some(managed) = body["metadata"].get("managedFields").cloned() {
        merged["metadata"]["managedFields"] = managed;
    }
    merged
}

/// `ValidatePodEphemeralContainersUpdate`: 422 Invalid unless the new list
/// keeps every old ephemeral container unchanged and each new one is valid.
pub(super) fn validate(rt: &ResourceType, name: &str, old: &Value, new: &Value) -> Result<()> {
    let empty = Vec::new();
    let old_list = old["spec"]["ephemeralContainers"].as_array().unwrap_or(&empty);
    let new_list = new["spec"]["ephemeralContainers"].as_array().unwrap_or(&empty);
    let mut causes = Vec::new();
    for existing in old_list {
        let container = existing["name"].as_str().unwrap_or_default();
        match new_list.iter().find(|c| c["name"] == existing["name"]) {
            None => causes.push(Cause::forbidden("spec.ephemeralContainers", &format!("existing ephemeral containers \"{container}\" may not be removed"))),
            Some(c) if c != existing => causes.push(Cause::forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers \"{container}\" may not be changed"),
            )),
            Some(_) => {}
        }
    }
    let names_of = |list: &str| -> Vec<String> {
        old["spec"][list].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str().map(str::to_string)).collect()
    };
    let containers = names_of("containers");
    let mut taken: Vec<String> = containers.iter().chain(names_of("initContainers").iter()).cloned().collect();
    for (i, container) in new_list.iter().enumerate() {
        let field = format!("spec.ephemeralContainers[{i}]");
        let container_name = container["name"].as_str().unwrap_or_default();
        if container_name.is_empty() {
            causes.push(Cause::required(&format!("{field}.name"), ""));
        } else if let Some(problem) = validation::dns1123_label_errors(container_name).first() {
            causes.push(Cause::invalid(&format!("{field}.name"), container_name, problem));
        } else if taken.iter().any(|n| n == container_name) {
            causes.push(Cause { reason: "FieldValueDuplicate".into(), field: format!("{field}.name"), message: format!("Duplicate value: {}", json!(container_name)) });
        } else {
            taken.push(container_name.to_string());
        }
        if container["image"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required(&format!("{field}.image"), ""));
        }
        if let Some(target) = container["targetContainerName"].as_str() {
            if !containers.iter().any(|c| c == target) {
                causes.push(Cause {
                    reason: "FieldValueNotFound".into(),
                    field: format!("{field}.targetContainerName"),
                    message: format!("Not found: {}", json!(target)),
                });
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt, name, causes))
    }
}

/// The kubelet starts the ephemeral containers that have no status yet:
/// each is running from `now` (its command is not run; exec and attach
/// reach it as any container).
pub fn start(store: &mut Store, resource: usize, key: &str, uid: &str, now: DateTime<Utc>) {
    let Some(pod) = store.get(resource, key).filter(|p| p.uid() == uid).cloned() else { return };
    let mut value = pod.value();
    if value["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    let mut statuses = value["status"]["ephemeralContainerStatuses"].as_array().cloned().unwrap_or_default();
    let mut started = false;
    for container in value["spec"]["ephemeralContainers"].as_array().cloned().unwrap_or_default() {
        if statuses.iter().any(|s| s["name"] == container["name"]) {
            continue;
        }
        let image = container["image"].as_str().unwrap_or_default();
        let id = container_id(uid, container["name"].as_str().unwrap_or_default());
        statuses.push(json!({
            "name": container["name"],
            "image": image,
            "imageID": format!("{}@sha256:{id}", image.split(':').next().unwrap_or_default()),
            "containerID": format!("containerd://{id}"),
            "ready": false,
            "restartCount": 0,
            "lastState": {},
            "state": {"running": {"startedAt": crate::workload::ts(now)}},
        }));
        started = true;
    }
    if started {
        value["status"]["ephemeralContainerStatuses"] = Value::Array(statuses);
        store.put(resource, key, value);
    }
}

/// A stable 64-hex-digit id for a container of a pod.
fn container_id(uid: &str, name: &str) -> String {
    (0..4u64)
        .map(|round| {
            let hash = format!("{uid}/{name}/{round}")
                .bytes()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            format!("{hash:016x}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceType {
        kubefold_engine::resources::builtin().into_iter().find(|r| r.plural == "pods").unwrap()
    }

    fn pod(ephemeral: Value) -> Value {
        json!({"metadata": {"name": "web-0", "namespace": "default", "uid": "u"},
               "spec": {"containers": [{"name": "nginx", "image": "nginx"}], "ephemeralContainers": ephemeral},
               "status": {"phase": "Running"}})
    }

    #[test]
    fn only_the_ephemeral_containers_change() {
        let old = pod(json!([]));
        let mut body = pod(json!([{"name": "debugger", "image": "busybox", "targetContainerName": "nginx"}]));
        body["spec"]["containers"][0]["image"] = json!("changed");
        body["status"] = json!({});
        let merged = merge(&old, &body);
        assert_eq!(merged["spec"]["containers"], old["spec"]["containers"]);
        assert_eq!(merged["status"], old["status"]);
        assert_eq!(merged["spec"]["ephemeralContainers"][0]["name"], "debugger");
        validate(&pods(), "web-0", &old, &merged).unwrap();
    }

    #[test]
    fn existing_ones_stay_and_new_ones_must_be_valid() {
        let old = pod(json!([{"name": "debugger", "image": "busybox"}]));
        let removed = validate(&pods(), "web-0", &old, &pod(json!([]))).unwrap_err();
        assert!(removed.to_string().contains("existing ephemeral containers \"debugger\" may not be removed"), "{removed}");
        let changed = validate(&pods(), "web-0", &old, &pod(json!([{"name": "debugger", "image": "alpine"}]))).unwrap_err();
        assert!(changed.to_string().contains("may not be changed"), "{changed}");
        let bad = validate(
            &pods(),
            "web-0",
            &old,
            &pod(json!([{"name": "debugger", "image": "busybox"}, {"name": "nginx", "image": "x"}, {"name": "d2", "targetContainerName": "nope"}])),
        )
        .unwrap_err();
        let text = bad.to_string();
        assert!(text.contains("spec.ephemeralContainers[1].name: Duplicate value: \"nginx\""), "{text}");
        assert!(text.contains("spec.ephemeralContainers[2].image: Required value"), "{text}");
        assert!(text.contains("spec.ephemeralContainers[2].targetContainerName: Not found: \"nope\""), "{text}");
    }
}
