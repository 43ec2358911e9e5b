//! Printers of the core group (`v1`): pods, nodes, services, namespaces,
//! config maps and events.

use std::collections::BTreeSet;

use serde_json::Value;

use super::format::*;
use super::Now;
use crate::json::Json;

/// READY, STATUS, RESTARTS, AGE and the wide columns of a pod (`printPod`).
pub(super) fn pod_cells<J: Json>(pod: &J, age: Value, now: Now) -> Vec<Value> {
    let init_containers = items(pod, "/spec/initContainers");
    let is_restartable = |name: &str| {
        init_containers.iter().any(|c| {
            c.get("name").and_then(J::as_str) == Some(name)
                && c.get("restartPolicy").and_then(J::as_str) == Some("Always")
        })
    };
    let sidecars = init_containers
        .iter()
        .filter(|c| c.get("restartPolicy").and_then(J::as_str) == Some("Always"))
        .count();
    let total_containers = items(pod, "/spec/containers").len() + sidecars;
    let conditions = items(pod, "/status/conditions");
    let phase = text(pod, "/status/phase");
    let status_reason = text(pod, "/status/reason");
    let mut reason = if status_reason.is_empty() {
        phase.to_string()
    } else {
        status_reason.to_string()
    };
    let scheduling_gated = conditions.iter().any(|c| {
        c.get("type").and_then(J::as_str) == Some("PodScheduled")
            && c.get("reason").and_then(J::as_str) == Some("SchedulingGated")
    });
    if scheduling_gated {
        reason = "SchedulingGated".to_string();
    }

    let mut ready_containers = 0;
    let mut restarts = 0;
    let mut last_restart = None;
    let mut sidecar_restarts = 0;
    let mut last_sidecar_restart = None;
    let mut initializing = false;
    for (i, status) in items(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let restart_count = int(status, "/restartCount");
        let finished = timestamp(status, "/lastState/terminated/finishedAt");
        restarts += restart_count;
        last_restart = last_restart.max(finished);
        let restartable = is_restartable(text(status, "/name"));
        if restartable {
            sidecar_restarts += restart_count;
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = status
            .walk("/state/terminated")
            .filter(|t| t.is_object());
        let waiting_reason = text(status, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if restartable && status.get("started").and_then(J::as_bool) == Some(true) {
            if status.get("ready").and_then(J::as_bool) == Some(true) {
                ready_containers += 1;
            }
            continue;
        }
        reason = if let Some(terminated) = terminated {
            match (text(terminated, "/reason"), int(terminated, "/signal")) {
                ("", 0) => format!("Init:ExitCode:{}", int(terminated, "/exitCode")),
                ("", signal) => format!("Init:Signal:{signal}"),
                (terminated_reason, _) => format!("Init:{terminated_reason}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_containers.len())
        };
        initializing = true;
        break;
    }

    if !initializing || condition_is(conditions, "Initialized", "True") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for status in items(pod, "/status/containerStatuses").iter().rev() {
            restarts += int(status, "/restartCount");
            last_restart = last_restart.max(timestamp(status, "/lastState/terminated/finishedAt"));
            let waiting_reason = text(status, "/state/waiting/reason");
            let terminated = status
                .walk("/state/terminated")
                .filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(terminated) = terminated {
                reason = match (text(terminated, "/reason"), int(terminated, "/signal")) {
                    ("", 0) => format!("ExitCode:{}", int(terminated, "/exitCode")),
                    ("", signal) => format!("Signal:{signal}"),
                    (terminated_reason, _) => terminated_reason.to_string(),
                };
            } else if status.get("ready").and_then(J::as_bool) == Some(true)
                && status
                    .walk("/state/running")
                    .is_some_and(J::is_object)
            {
                has_running = true;
                ready_containers += 1;
            }
        }
        // Back to Running when a container still runs after another completed.
        if reason == "Completed" && has_running {
            reason = if condition_is(conditions, "Ready", "True") {
                "Running"
            } else {
                "NotReady"
            }
            .to_string();
        }
    }

    let deleting = pod
        .walk("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if deleting && status_reason == "NodeLost" {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts = match last_restart {
        Some(last) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(last), now)),
        _ => restarts.to_string(),
    };

    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let pod_ip = match pod.walk("/status/podIPs/0/ip").and_then(J::as_str) {
        Some(ip) => ip,
        None => text(pod, "/status/podIP"),
    };
    let gates = items(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|gate| {
                let wanted = gate.get("conditionType").and_then(J::as_str);
                conditions
                    .iter()
                    .find(|c| c.get("type").and_then(J::as_str) == wanted)
                    .is_some_and(|c| c.get("status").and_then(J::as_str) == Some("True"))
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        Value::from(format!("{ready_containers}/{total_containers}")),
        Value::from(reason),
        Value::from(restarts),
        age,
        Value::from(or_none(pod_ip)),
        Value::from(or_none(text(pod, "/spec/nodeName"))),
        Value::from(or_none(text(pod, "/status/nominatedNodeName"))),
        Value::from(readiness_gates),
    ]
}

/// STATUS, ROLES, AGE, VERSION and the wide columns of a node (`printNode`).
pub(super) fn node_cells<J: Json>(node: &J, age: Value) -> Vec<Value> {
    // Only the Ready condition counts; the last one of that type wins.
    let ready = items(node, "/status/conditions")
        .iter()
        .rev()
        .find(|c| c.get("type").and_then(J::as_str) == Some("Ready"));
    let mut status = vec![match ready {
        Some(c) if c.get("status").and_then(J::as_str) == Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.walk("/spec/unschedulable").and_then(J::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    // Roles: `node-role.kubernetes.io/<role>` label keys and the `kubernetes.io/role` value.
    let mut roles = BTreeSet::new();
    if let Some(labels) = node.walk("/metadata/labels").and_then(J::members) {
        for (key, value) in labels {
            if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role);
                }
            } else if key == "kubernetes.io/role" {
                if let Some(role) = value.as_str().filter(|r| !r.is_empty()) {
                    roles.insert(role);
                }
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    let address = |type_: &str| {
        items(node, "/status/addresses")
            .iter()
            .find(|a| a.get("type").and_then(J::as_str) == Some(type_))
            .and_then(|a| a.get("address").and_then(J::as_str))
            .unwrap_or("<none>")
            .to_string()
    };
    let info = |field: &str| {
        let value = text(node, &format!("/status/nodeInfo/{field}"));
        if value.is_empty() {
            "<unknown>".to_string()
        } else {
            value.to_string()
        }
    };
    vec![
        Value::from(status.join(",")),
        Value::from(roles),
        age,
        Value::from(text(node, "/status/nodeInfo/kubeletVersion")),
        Value::from(address("InternalIP")),
        Value::from(address("ExternalIP")),
        Value::from(info("osImage")),
        Value::from(info("kernelVersion")),
        Value::from(info("containerRuntimeVersion")),
    ]
}

/// TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S), AGE, SELECTOR of a service (`printService`).
pub(super) fn service_cells<J: Json>(service: &J, age: Value) -> Vec<Value> {
    let service_type = text(service, "/spec/type");
    let cluster_ip = match service
        .walk("/spec/clusterIPs/0")
        .and_then(J::as_str)
    {
        Some(ip) => ip,
        None => text(service, "/spec/clusterIP"),
    };
    let cluster_ip = if cluster_ip.is_empty() {
        "<none>"
    } else {
        cluster_ip
    };
    let external_ips: Vec<&str> = items(service, "/spec/externalIPs")
        .iter()
        .filter_map(J::as_str)
        .collect();
    let joined_or_none = |ips: &[&str]| {
        if ips.is_empty() {
            "<none>".to_string()
        } else {
            ips.join(",")
        }
    };
    let external_ip = match service_type {
        "ClusterIP" | "NodePort" => joined_or_none(&external_ips),
        "LoadBalancer" => {
            // `loadBalancerStatusStringer`, not clipped: the server prints wide.
            let ingress: BTreeSet<&str> = items(service, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    [text(i, "/ip"), text(i, "/hostname")]
                        .into_iter()
                        .find(|s| !s.is_empty())
                })
                .collect();
            let all: Vec<&str> = ingress
                .into_iter()
                .chain(external_ips.iter().copied())
                .collect();
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => text(service, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = items(service, "/spec/ports")
        .iter()
        .map(|port| {
            let protocol = text(port, "/protocol");
            match int(port, "/nodePort") {
                node_port if node_port > 0 => {
                    format!("{}:{node_port}/{protocol}", int(port, "/port"))
                }
                _ => format!("{}/{protocol}", int(port, "/port")),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    vec![
        Value::from(service_type),
        Value::from(cluster_ip),
        Value::from(external_ip),
        Value::from(ports),
        age,
        Value::from(format_labels(service.walk("/spec/selector"))),
    ]
}

/// The cells of an event (`printEvent`, wide), with the cluster after OBJECT.
pub(super) fn event_cells<J: Json>(event: &J, display_name: &str, cluster: &str, now: Now) -> Vec<Value> {
    let first_seen = match timestamp(event, "/firstTimestamp") {
        Some(first) => since(Some(first), now),
        None => since(timestamp(event, "/eventTime"), now),
    };
    let mut last_seen = match timestamp(event, "/lastTimestamp") {
        Some(last) => since(Some(last), now),
        None => first_seen.clone(),
    };
    let mut count = int(event, "/count");
    if event.get("series").is_some_and(J::is_object) {
        last_seen = since(timestamp(event, "/series/lastObservedTime"), now);
        count = int(event, "/series/count");
    } else if count == 0 {
        // Singleton events of the events.k8s.io API have no count.
        count = 1;
    }
    let kind = text(event, "/involvedObject/kind").to_lowercase();
    let object = match text(event, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: &'static str, b: &'static str| -> String {
        let first = text(event, a);
        if first.is_empty() {
            text(event, b).to_string()
        } else {
            first.to_string()
        }
    };
    let component = first_non_empty("/source/component", "/reportingComponent");
    let instance = first_non_empty("/source/host", "/reportingInstance");
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        Value::from(last_seen),
        Value::from(text(event, "/type")),
        Value::from(text(event, "/reason")),
        Value::from(object),
        Value::from(cluster),
        Value::from(text(event, "/involvedObject/fieldPath")),
        Value::from(source),
        Value::from(text(event, "/message").trim()),
        Value::from(first_seen),
        Value::from(count),
        Value::from(display_name),
    ]
}

/// STATUS and AGE of a namespace (`printNamespace`).
pub(super) fn namespace_cells<J: Json>(namespace: &J, age: Value) -> Vec<Value> {
    vec![Value::from(text(namespace, "/status/phase")), age]
}

/// DATA (the number of `data` and `binaryData` keys) and AGE of a config map (`printConfigMap`).
pub(super) fn config_map_cells<J: Json>(config_map: &J, age: Value) -> Vec<Value> {
    let count = |pointer: &str| config_map.walk(pointer).and_then(J::members).map_or(0, |m| m.len());
    vec![Value::from(count("/data") + count("/binaryData")), age]
}
