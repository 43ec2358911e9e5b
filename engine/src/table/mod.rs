//! Server-side printing: the `meta.k8s.io/v1` Table columns and row cells
//! kubectl shows, as kube-apiserver computes them in
//! `pkg/printers/internalversion/printers.go`, with a `Cluster` column after
//! `Name`.
//!
//! Column names are spelled as kube-apiserver sends them (`Name`,
//! `Up-to-date`, `Port(s)`); kubectl upper-cases them. Cells are those of
//! the server's wide output (kube-apiserver always prints wide and kubectl
//! hides priority-1 columns without `-o wide`). Integer cells are JSON
//! numbers, as in kube-apiserver, even where the column type says `string`.
//!
//! Events have no leading `Name` column in Kubernetes (`Last Seen` comes
//! first and `Name` is a wide column at the end); kubefold places `Cluster`
//! right after `Object`, the column that names what the event is about.
//!
//! - [`columns`], [`cells`]: the columns of a type and the cells of an
//!   object, by printer: `core_group` (pods, nodes, services, namespaces,
//!   config maps, events), `apps` (deployments, replica sets, stateful sets),
//!   `discovery` (endpoint slices), `custom` (custom resources' printer
//!   columns), with the cell formatting they share in `format`.
//! - [`row`]: row templates made at ingest, and what a row reads of an
//!   object ([`row_keeps`], [`ingest_keep`]).
//!
//! What a parse keeps of an object ([`Keep`]) and the parsers that keep
//! only that are in [`crate::keep`], below this module.

mod apps;
mod core_group;
mod custom;
mod discovery;
mod format;
pub mod row;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::json::Json;
use crate::resources::ResourceType;

pub use crate::keep::{parse_row_source, Keep, RowSource};
pub use custom::json_path;
pub use format::human_duration;
pub use row::{has_row_template, ingest_keep, parse_for_row, row_keeps, row_template, write_row_template};

/// One column definition of a Table (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Column {
    /// Human-readable name; kubectl prints it upper-cased.
    pub name: String,
    /// OpenAPI type of the cells: `string`, `integer`, `date` ...
    #[serde(rename = "type")]
    pub type_: String,
    /// OpenAPI format; `name` marks the column holding the object's name.
    pub format: String,
    /// What the column shows.
    pub description: String,
    /// 0 for default output; 1 for columns shown only with `-o wide`.
    pub priority: i32,
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although \
     some resources may allow a client to request the generation an appropriate name automatically. Name is \
     primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: \
     https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was \
     created. It is not guaranteed to be set in happens-before order across separate operations. Clients may \
     not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. \
     Read-only. Null for lists. More info: \
     https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CLUSTER_DOC: &str = "The member cluster that owns the object.";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";
const SELECTOR_DOC: &str = "Label query over pods that should match the replica count.";

/// The printers kubefold knows, named for the kube-apiserver print function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printer {
    Pod,
    Deployment,
    ReplicaSet,
    StatefulSet,
    Node,
    Service,
    Namespace,
    ConfigMap,
    Event,
    EndpointSlice,
    /// Any other type: name, cluster and age.
    Default,
}

impl Printer {
    fn of(resource: &ResourceType) -> Printer {
        match (resource.group.as_str(), resource.plural.as_str()) {
            ("", "pods") => Printer::Pod,
            ("apps", "deployments") => Printer::Deployment,
            ("apps", "replicasets") => Printer::ReplicaSet,
            ("apps", "statefulsets") => Printer::StatefulSet,
            ("", "nodes") => Printer::Node,
            ("", "services") => Printer::Service,
            ("", "namespaces") => Printer::Namespace,
            ("", "configmaps") => Printer::ConfigMap,
            ("", "events") => Printer::Event,
            ("discovery.k8s.io", "endpointslices") => Printer::EndpointSlice,
            _ => Printer::Default,
        }
    }
}

fn column(name: &str, type_: &str, description: &str, priority: i32) -> Column {
    Column {
        name: name.to_string(),
        type_: type_.to_string(),
        format: String::new(),
        description: description.to_string(),
        priority,
    }
}

fn name_column(priority: i32) -> Column {
    Column {
        format: "name".to_string(),
        ..column("Name", "string", NAME_DOC, priority)
    }
}

/// Column definitions for a type (priority 1 = shown only with -o wide).
pub fn columns(resource: &crate::resources::ResourceType) -> Vec<Column> {
    let printer = Printer::of(resource);
    if printer == Printer::Event {
        return vec![
            column("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded.", 0),
            column("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future", 0),
            column("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
            column("Object", "string", "The object that this event is about.", 0),
            column("Cluster", "string", CLUSTER_DOC, 0),
            column("Subobject", "string", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.", 1),
            column("Source", "string", "The component reporting this event. Should be a short machine understandable string.", 1),
            column("Message", "string", "A human-readable description of the status of this operation.", 0),
            column("First Seen", "string", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
            column("Count", "string", "The number of times this event has occurred.", 1),
            name_column(1),
        ];
    }
    let mut columns = vec![name_column(0), column("Cluster", "string", CLUSTER_DOC, 0)];
    let age = || column("Age", "string", AGE_DOC, 0);
    let template_columns = || {
        vec![
            column("Containers", "string", CONTAINERS_DOC, 1),
            column("Images", "string", IMAGES_DOC, 1),
        ]
    };
    match printer {
        Printer::Pod => columns.extend([
            column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
            column("Status", "string", "The aggregate status of the containers in this pod.", 0),
            column("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
            age(),
            column("IP", "string", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
            column("Node", "string", "NodeName indicates in which node this pod is scheduled.", 1),
            column("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.", 1),
            column("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
        ]),
        Printer::Deployment => {
            columns.extend([
                column("Ready", "string", "Number of the pod with ready state", 0),
                column("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
                column("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
                age(),
            ]);
            columns.extend(template_columns());
            columns.push(column("Selector", "string", SELECTOR_DOC, 1));
        }
        Printer::ReplicaSet => {
            columns.extend([
                column("Desired", "integer", "Replicas is the number of desired replicas.", 0),
                column("Current", "integer", "Replicas is the most recently observed number of replicas.", 0),
                column("Ready", "integer", "The number of ready replicas for this replica set.", 0),
                age(),
            ]);
            columns.extend(template_columns());
            columns.push(column("Selector", "string", SELECTOR_DOC, 1));
        }
        Printer::StatefulSet => {
            columns.extend([column("Ready", "string", "Number of the pod with ready state", 0), age()]);
            columns.extend(template_columns());
        }
        Printer::Node => columns.extend([
            column("Status", "string", "The status of the node", 0),
            column("Roles", "string", "The roles of the node", 0),
            age(),
            column("Version", "string", "Kubelet Version reported by the node.", 0),
            column("Internal-IP", "string", "List of addresses reachable to the node.", 1),
            column("External-IP", "string", "List of addresses reachable to the node.", 1),
            column("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", 1),
            column("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", 1),
            column("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", 1),
        ]),
        Printer::Service => columns.extend([
            column("Type", "string", "type determines how the Service is exposed.", 0),
            column("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly.", 0),
            column("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.", 0),
            column("Port(s)", "string", "The list of ports that are exposed by this service.", 0),
            age(),
            column("Selector", "string", "Route service traffic to pods with label keys and values matching this selector.", 1),
        ]),
        Printer::Namespace => {
            columns.extend([column("Status", "string", "The status of the namespace", 0), age()])
        }
        Printer::ConfigMap => columns.extend([
            column("Data", "string", "Data contains the configuration data.", 0),
            age(),
        ]),
        Printer::EndpointSlice => columns.extend([
            column("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice.", 0),
            column("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice.", 0),
            column("Endpoints", "string", "endpoints is a list of unique endpoints in this slice.", 0),
            age(),
        ]),
        Printer::Default if !resource.printer_columns.is_empty() => {
            columns.extend(resource.printer_columns.iter().map(|c| Column {
                name: c.name.clone(),
                type_: c.type_.clone(),
                format: c.format.clone(),
                description: c.description.clone(),
                priority: c.priority,
            }));
            if !custom::shows_creation_time(resource) {
                columns.push(age());
            }
        }
        Printer::Default | Printer::Event => columns.push(age()),
    }
    columns
}

/// The row cells for one object, in `columns` order. `display_name` is the name as served (qualified or not); `now` is the current time for AGE.
pub fn cells<J: Json>(
    resource: &crate::resources::ResourceType,
    object: &J,
    display_name: &str,
    cluster: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<serde_json::Value> {
    cells_at(resource, object, display_name, cluster, Now::At(now))
}

/// [`cells`] printed at `now`.
fn cells_at<J: Json>(resource: &ResourceType, object: &J, display_name: &str, cluster: &str, now: Now) -> Vec<Value> {
    let printer = Printer::of(resource);
    if printer == Printer::Event {
        return core_group::event_cells(object, display_name, cluster, now);
    }
    let mut cells = vec![Value::from(display_name), Value::from(cluster)];
    let age = Value::from(format::age(object, now));
    match printer {
        Printer::Pod => cells.extend(core_group::pod_cells(object, age, now)),
        Printer::Deployment => cells.extend(apps::deployment_cells(object, age)),
        Printer::ReplicaSet => cells.extend(apps::replica_set_cells(object, age)),
        Printer::StatefulSet => cells.extend(apps::stateful_set_cells(object, age)),
        Printer::Node => cells.extend(core_group::node_cells(object, age)),
        Printer::Service => cells.extend(core_group::service_cells(object, age)),
        Printer::Namespace => cells.extend(core_group::namespace_cells(object, age)),
        Printer::ConfigMap => cells.extend(core_group::config_map_cells(object, age)),
        Printer::EndpointSlice => cells.extend(discovery::endpoint_slice_cells(object, age)),
        Printer::Default if !resource.printer_columns.is_empty() => {
            cells.extend(custom::printer_column_cells(resource, &object.as_value(), now));
            if !custom::shows_creation_time(resource) {
                cells.push(age);
            }
        }
        Printer::Default | Printer::Event => cells.push(age),
    }
    cells
}

/// When a row is printed: at a time, or later (a row template, whose times
/// are left as marks; see [`row_template`]).
#[derive(Debug, Clone, Copy)]
enum Now {
    At(DateTime<Utc>),
    Later,
}

/// The row conditions kube-apiserver attaches (`TableRow.conditions`): a
/// `Completed` condition for pods that succeeded or failed, empty otherwise.
pub fn row_conditions<J: Json>(resource: &crate::resources::ResourceType, object: &J) -> Vec<serde_json::Value> {
    if Printer::of(resource) != Printer::Pod {
        return Vec::new();
    }
    let completed = |reason: &str, message: &str| {
        vec![json!({"type": "Completed", "status": "True", "reason": reason, "message": message})]
    };
    match format::text(object, "/status/phase") {
        "Succeeded" => completed("Succeeded", "The pod has completed successfully."),
        "Failed" => completed("Failed", "The pod failed."),
        _ => Vec::new(),
    }
}

/// The PartialObjectMetadata that a Table row carries for includeObject=Metadata.
///
/// As kube-apiserver's `meta.AsPartialObjectMetadata`, it carries the whole
/// `metadata` of the object.
pub fn partial_object_metadata(object: &serde_json::Value) -> serde_json::Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests;
