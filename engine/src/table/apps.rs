//! Printers of the apps group: deployments, replica sets, stateful sets.

use serde_json::Value;

use super::format::*;
use crate::json::Json;
use crate::selector::LabelSelector;

/// `spec.replicas`, defaulted to 1 as the API server defaults it.
fn desired_replicas<J: Json>(object: &J) -> i64 {
    object
        .walk("/spec/replicas")
        .and_then(J::as_i64)
        .unwrap_or(1)
}

/// `layoutContainerCells`: container names and images of the pod template.
fn template_containers<J: Json>(object: &J) -> (String, String) {
    let containers = items(object, "/spec/template/spec/containers");
    let join = |field: &str| {
        containers
            .iter()
            .map(|c| c.get(field).and_then(J::as_str).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    };
    (join("name"), join("image"))
}

/// READY, UP-TO-DATE, AVAILABLE, AGE, CONTAINERS, IMAGES, SELECTOR of a deployment (`printDeployment`).
pub(super) fn deployment_cells<J: Json>(object: &J, age: Value) -> Vec<Value> {
    let (containers, images) = template_containers(object);
    let selector = match object.walk("/spec/selector") {
        None => String::new(),
        Some(selector) if selector.is_null() => String::new(),
        Some(selector) => LabelSelector::from_label_selector(&selector.as_value())
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "<invalid>".to_string()),
    };
    vec![
        Value::from(format!(
            "{}/{}",
            int(object, "/status/readyReplicas"),
            desired_replicas(object)
        )),
        Value::from(int(object, "/status/updatedReplicas")),
        Value::from(int(object, "/status/availableReplicas")),
        age,
        Value::from(containers),
        Value::from(images),
        Value::from(selector),
    ]
}

/// DESIRED, CURRENT, READY, AGE, CONTAINERS, IMAGES, SELECTOR of a replica set (`printReplicaSet`).
pub(super) fn replica_set_cells<J: Json>(object: &J, age: Value) -> Vec<Value> {
    let (containers, images) = template_containers(object);
    vec![
        Value::from(desired_replicas(object)),
        Value::from(int(object, "/status/replicas")),
        Value::from(int(object, "/status/readyReplicas")),
        age,
        Value::from(containers),
        Value::from(images),
        Value::from(format_label_selector(object.walk("/spec/selector"))),
    ]
}

/// READY, AGE, CONTAINERS, IMAGES of a stateful set (`printStatefulSet`).
pub(super) fn stateful_set_cells<J: Json>(object: &J, age: Value) -> Vec<Value> {
    let (containers, images) = template_containers(object);
    vec![
        Value::from(format!(
            "{}/{}",
            int(object, "/status/readyReplicas"),
            desired_replicas(object)
        )),
        age,
        Value::from(containers),
        Value::from(images),
    ]
}
