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

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::json::Json;
use crate::resources::ResourceType;
use crate::selector::LabelSelector;

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
            if !shows_creation_time(resource) {
                columns.push(age());
            }
        }
        Printer::Default | Printer::Event => columns.push(age()),
    }
    columns
}

/// Whether one of a custom resource's printer columns already shows the
/// creation time (kubefold adds `Age` otherwise).
fn shows_creation_time(resource: &ResourceType) -> bool {
    resource
        .printer_columns
        .iter()
        .any(|c| c.json_path.trim_start_matches('{').trim_end_matches('}') == ".metadata.creationTimestamp")
}

/// The cells of a custom resource's printer columns, as the
/// apiextensions-apiserver's table convertor computes them: the value at the
/// column's JSONPath, typed by the column (`integer`, `number`, `boolean`
/// cells are JSON numbers and booleans; `date` cells are ages like `AGE`;
/// `string` cells print the value), `null` when the path finds nothing.
/// <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#additional-printer-columns>
fn printer_column_cells(resource: &ResourceType, object: &Value, now: Now) -> Vec<Value> {
    resource
        .printer_columns
        .iter()
        .map(|column| {
            let Some(value) = json_path(object, &column.json_path) else { return Value::Null };
            match (column.type_.as_str(), value) {
                ("string", Value::String(s)) => Value::from(s.as_str()),
                ("string", Value::Null) => Value::Null,
                ("string", other) => Value::from(other.to_string()),
                ("integer", Value::Number(n)) => match n.as_i64() {
                    Some(i) => Value::from(i),
                    None => n.as_f64().filter(|f| f.fract() == 0.0).map_or(Value::Null, |f| Value::from(f as i64)),
                },
                ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
                ("boolean", Value::Bool(b)) => Value::from(*b),
                ("date", Value::String(s)) => DateTime::parse_from_rfc3339(s)
                    .map_or(Value::Null, |t| Value::from(since(Some(t.with_timezone(&Utc)), now))),
                _ => Value::Null,
            }
        })
        .collect()
}

/// The value at a simple JSONPath (the subset CRD printer columns allow:
/// fields and array indices, `.spec.ports[0].port`, `.metadata.labels['app.kubernetes.io/name']`,
/// optionally wrapped in `{}`); `None` when the path finds nothing or uses
/// anything else (filters, wildcards, ranges).
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    let mut at = object;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            if field.is_empty() || field == "*" {
                return None;
            }
            at = at.get(field)?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inside = after[..end].trim();
            let quoted = inside
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inside.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            at = match quoted {
                Some(field) => at.get(field)?,
                None => {
                    let index: i64 = inside.parse().ok()?;
                    let items = at.as_array()?;
                    let index = if index < 0 { items.len() as i64 + index } else { index };
                    items.get(usize::try_from(index).ok()?)?
                }
            };
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(at)
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
        return event_cells(object, display_name, cluster, now);
    }
    let mut cells = vec![Value::from(display_name), Value::from(cluster)];
    let age = Value::from(age(object, now));
    match printer {
        Printer::Pod => cells.extend(pod_cells(object, age, now)),
        Printer::Deployment => {
            let (containers, images) = template_containers(object);
            let selector = match object.walk("/spec/selector") {
                None => String::new(),
                Some(selector) if selector.is_null() => String::new(),
                Some(selector) => LabelSelector::from_label_selector(&selector.as_value())
                    .map(|s| s.to_string())
                    .unwrap_or_else(|_| "<invalid>".to_string()),
            };
            cells.extend([
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
            ]);
        }
        Printer::ReplicaSet => {
            let (containers, images) = template_containers(object);
            cells.extend([
                Value::from(desired_replicas(object)),
                Value::from(int(object, "/status/replicas")),
                Value::from(int(object, "/status/readyReplicas")),
                age,
                Value::from(containers),
                Value::from(images),
                Value::from(format_label_selector(object.walk("/spec/selector"))),
            ]);
        }
        Printer::StatefulSet => {
            let (containers, images) = template_containers(object);
            cells.extend([
                Value::from(format!(
                    "{}/{}",
                    int(object, "/status/readyReplicas"),
                    desired_replicas(object)
                )),
                age,
                Value::from(containers),
                Value::from(images),
            ]);
        }
        Printer::Node => cells.extend(node_cells(object, age)),
        Printer::Service => cells.extend(service_cells(object, age)),
        Printer::Namespace => cells.extend([Value::from(text(object, "/status/phase")), age]),
        Printer::ConfigMap => {
            let count = |pointer: &str| {
                object
                    .walk(pointer)
                    .and_then(J::members)
                    .map_or(0, |m| m.len())
            };
            cells.extend([Value::from(count("/data") + count("/binaryData")), age]);
        }
        Printer::EndpointSlice => {
            let ports = items(object, "/ports").iter().map(|port| {
                match (
                    port.get("port").and_then(J::as_i64),
                    port.get("name").and_then(J::as_str),
                ) {
                    (Some(number), _) => number.to_string(),
                    (None, Some(name)) => name.to_string(),
                    (None, None) => "*".to_string(),
                }
            });
            let addresses = items(object, "/endpoints")
                .iter()
                .flat_map(|endpoint| items(endpoint, "/addresses"))
                .map(|address| address.as_str().unwrap_or_default().to_string());
            cells.extend([
                Value::from(text(object, "/addressType")),
                Value::from(list_with_more(ports)),
                Value::from(list_with_more(addresses)),
                age,
            ]);
        }
        Printer::Default if !resource.printer_columns.is_empty() => {
            cells.extend(printer_column_cells(resource, &object.as_value(), now));
            if !shows_creation_time(resource) {
                cells.push(age);
            }
        }
        Printer::Default | Printer::Event => cells.push(age),
    }
    cells
}

/// The parts of an object a Table row of its type reads (cells, row
/// conditions and the row's PartialObjectMetadata), for [`parse_for_row`].
#[derive(Debug)]
pub enum Keep {
    /// The whole value.
    All,
    /// Only these members of an object (applied to every element of an array).
    Fields(&'static [(&'static str, Keep)]),
}

/// What a pod's row reads (see `pod_cells`): its metadata, its status, and of
/// its spec only the container names (and init containers' restart policy),
/// readiness gates and node. The rest of a pod's spec (containers' env,
/// probes, volumes, tolerations) is most of its bytes.
static POD_ROW: Keep = Keep::Fields(&[
    ("metadata", Keep::Fields(&[("name", Keep::All), ("creationTimestamp", Keep::All), ("deletionTimestamp", Keep::All)])),
    (
        "status",
        Keep::Fields(&[
            ("phase", Keep::All),
            ("reason", Keep::All),
            ("podIP", Keep::All),
            ("podIPs", Keep::All),
            ("nominatedNodeName", Keep::All),
            ("conditions", Keep::Fields(&[("type", Keep::All), ("status", Keep::All), ("reason", Keep::All)])),
            ("initContainerStatuses", CONTAINER_STATUS_ROW),
            ("containerStatuses", CONTAINER_STATUS_ROW),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("containers", Keep::Fields(&[("name", Keep::All)])),
            ("initContainers", Keep::Fields(&[("name", Keep::All), ("restartPolicy", Keep::All)])),
            ("readinessGates", Keep::All),
            ("nodeName", Keep::All),
        ]),
    ),
]);

/// What a pod's row reads of a container's status (see `pod_cells`): not
/// its image, image ID or container ID, nor the times and messages of its
/// states but the last termination's end.
const CONTAINER_STATUS_ROW: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("restartCount", Keep::All),
    ("lastState", Keep::Fields(&[("terminated", Keep::Fields(&[("finishedAt", Keep::All)]))])),
    (
        "state",
        Keep::Fields(&[
            ("waiting", Keep::Fields(&[("reason", Keep::All)])),
            ("terminated", Keep::Fields(&[("exitCode", Keep::All), ("reason", Keep::All), ("signal", Keep::All)])),
            ("running", Keep::Fields(&[])),
        ]),
    ),
    ("ready", Keep::All),
    ("started", Keep::All),
]);

/// What a row of a type without printer columns reads: its name and age.
static METADATA_ROW: Keep = Keep::Fields(&[("metadata", Keep::Fields(&[("name", Keep::All), ("creationTimestamp", Keep::All)]))]);

/// The parts of an object of `resource` its Table row reads.
pub fn row_keeps(resource: &ResourceType) -> &'static Keep {
    match Printer::of(resource) {
        Printer::Pod => &POD_ROW,
        Printer::Default if resource.printer_columns.is_empty() => &METADATA_ROW,
        _ => &Keep::All,
    }
}

/// Whether the rows of a type are printed from templates made at ingest
/// ([`row_template`]): not for custom resources' printer columns, which can
/// change while objects are stored.
pub fn has_row_template(resource: &ResourceType) -> bool {
    !(Printer::of(resource) == Printer::Default && !resource.printer_columns.is_empty())
}

/// What ingest parses of an object of a type, in one pruned parse: what its
/// field selectors read ([`crate::fields::keep`]) and, when its rows have
/// templates, what its row reads ([`row_keeps`]).
pub fn ingest_keep(resource: &ResourceType) -> &'static Keep {
    let fields = crate::fields::keep(&resource.group, &resource.plural);
    if !has_row_template(resource) {
        return fields;
    }
    type Merged = std::collections::HashMap<(String, String), &'static Keep>;
    static MERGED: std::sync::OnceLock<std::sync::Mutex<Merged>> = std::sync::OnceLock::new();
    let mut merged = MERGED.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    // One per built-in type (the key decides both parts), made once.
    merged
        .entry((resource.group.clone(), resource.plural.clone()))
        .or_insert_with(|| Box::leak(Box::new(merge_keeps(row_keeps(resource), fields))))
}

/// What either keeps.
fn merge_keeps(a: &'static Keep, b: &'static Keep) -> Keep {
    match (a, b) {
        (Keep::Fields(a), Keep::Fields(b)) => {
            let mut members: Vec<(&'static str, Keep)> = Vec::new();
            for (name, keep) in a.iter().chain(b.iter()) {
                if members.iter().any(|(n, _)| n == name) {
                    continue;
                }
                let in_a = a.iter().find(|(n, _)| n == name).map(|(_, k)| k);
                let in_b = b.iter().find(|(n, _)| n == name).map(|(_, k)| k);
                let keep = match (in_a, in_b) {
                    (Some(x), Some(y)) => merge_keeps(x, y),
                    _ => copy_keep(keep),
                };
                members.push((name, keep));
            }
            Keep::Fields(Box::leak(members.into_boxed_slice()))
        }
        _ => Keep::All,
    }
}

/// A `Keep` of the same members (its parts are static).
fn copy_keep(keep: &'static Keep) -> Keep {
    match keep {
        Keep::All => Keep::All,
        Keep::Fields(members) => Keep::Fields(members),
    }
}

/// Parses an object's JSON, valid JSON already checked, keeping only what
/// `keep` names: the other members are skipped, never built nor checked
/// again (a pod's row needs about half of its bytes). See [`crate::scan`].
pub fn parse_for_row<'a>(json: &'a [u8], keep: &'static Keep) -> serde_json::Result<crate::json::Node<'a>> {
    crate::scan::prune(json, keep)
}

/// An object parsed for its Table row ([`parse_row_source`]).
pub struct RowSource<'a> {
    /// What the row's cells and conditions read (as [`parse_for_row`]).
    pub object: Value,
    /// The object's `metadata` as written, for the row's
    /// PartialObjectMetadata: spliced, never rebuilt.
    pub metadata: Option<&'a serde_json::value::RawValue>,
}

/// Parses an object's JSON for its Table row in one pass: what `keep` names
/// (as [`parse_for_row`]), and the text of its `metadata`.
pub fn parse_row_source<'a>(json: &'a [u8], keep: &'static Keep) -> serde_json::Result<RowSource<'a>> {
    use serde::de::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(json);
    let source = (&mut de).deserialize_map(RowTop(keep))?;
    de.end()?;
    Ok(source)
}

/// The top level of [`parse_row_source`].
struct RowTop(&'static Keep);

/// A member name at the top level of [`parse_row_source`].
enum TopKey {
    Metadata,
    Kept(usize),
    Named(String),
    Skipped,
}

impl<'de> serde::de::DeserializeSeed<'de> for &RowTop {
    type Value = TopKey;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<TopKey, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for &RowTop {
    type Value = TopKey;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, v: &str) -> Result<TopKey, E> {
        Ok(match self.0 {
            _ if v == "metadata" => TopKey::Metadata,
            Keep::All => TopKey::Named(v.to_string()),
            Keep::Fields(fields) => match fields.iter().position(|(name, _)| *name == v) {
                Some(i) => TopKey::Kept(i),
                None => TopKey::Skipped,
            },
        })
    }
}

impl<'de> serde::de::Visitor<'de> for RowTop {
    type Value = RowSource<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RowSource<'de>, A::Error> {
        use serde::de::{DeserializeSeed, Error};
        let mut out = serde_json::Map::new();
        let mut metadata = None;
        while let Some(key) = map.next_key_seed(&self)? {
            match key {
                TopKey::Metadata => {
                    let raw: &'de serde_json::value::RawValue = map.next_value()?;
                    let keep = match self.0 {
                        Keep::All => Some(&Keep::All),
                        Keep::Fields(fields) => fields.iter().find(|(name, _)| *name == "metadata").map(|(_, keep)| keep),
                    };
                    if let Some(keep) = keep {
                        let mut de = serde_json::Deserializer::from_str(raw.get());
                        let value = Pruned(keep).deserialize(&mut de).map_err(A::Error::custom)?;
                        out.insert("metadata".to_string(), value);
                    }
                    metadata = Some(raw);
                }
                TopKey::Kept(i) => {
                    let Keep::Fields(fields) = self.0 else { unreachable!("only Fields keeps by index") };
                    let (name, keep) = &fields[i];
                    out.insert((*name).to_string(), map.next_value_seed(Pruned(keep))?);
                }
                TopKey::Named(name) => {
                    out.insert(name, map.next_value()?);
                }
                TopKey::Skipped => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(RowSource { object: Value::Object(out), metadata })
    }
}

/// Which of `fields` a member's key names, without allocating the key.
struct FieldIndex(&'static [(&'static str, Keep)]);

impl<'de> serde::de::DeserializeSeed<'de> for FieldIndex {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for FieldIndex {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|(name, _)| *name == v))
    }
}

/// A [`Keep`] as a serde seed.
struct Pruned(&'static Keep);

impl<'de> serde::de::DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => serde::Deserialize::deserialize(deserializer),
            Keep::Fields(_) => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> serde::de::Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Keep::Fields(fields) = self.0 else { unreachable!("only Fields visits") };
        let mut out = serde_json::Map::new();
        while let Some(found) = map.next_key_seed(FieldIndex(fields))? {
            match found {
                Some(i) => {
                    let (name, keep) = &fields[i];
                    let value = map.next_value_seed(Pruned(keep))?;
                    out.insert((*name).to_string(), value);
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(value) = seq.next_element_seed(Pruned(self.0))? {
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// When a row is printed: at a time, or later (a row template, whose times
/// are left as marks; see [`row_template`]).
#[derive(Debug, Clone, Copy)]
enum Now {
    At(DateTime<Utc>),
    Later,
}

/// Starts a mark in a row template's strings: a NUL character, written
/// `\u0000` in the template's JSON, then what the mark stands for.
const ROW_MARK: char = '\u{0}';
/// After [`ROW_MARK`]: the served name's suffix (`_<cluster>` or nothing).
const SUFFIX_MARK: char = 'Q';
/// After [`ROW_MARK`]: the age of a time, `S<Unix seconds>.<nanoseconds>`
/// and a closing [`ROW_MARK`].
const SINCE_MARK: char = 'S';
/// The first byte of every row template: the version of its layout. A
/// template of another version is not used (the row is printed from the body).
const ROW_TEMPLATE_VERSION: u8 = 1;

/// A Table row computed once, when the object is ingested, and printed for
/// each request by [`write_row_template`]: the row's `"cells":[...]` (and
/// `,"conditions":[...]`), with marks where the served name's suffix and
/// the ages go, since those depend on the request and the time.
///
/// `object` holds what [`row_keeps`] names (or more); `name` is the
/// member's name of the object. `None` for types whose columns can change
/// while objects are stored (custom resources' printer columns) and for
/// objects with a NUL character in their text, which a mark could not be
/// told from. `may_hold_nul`: false when the object's text is known to
/// hold none (its strings and keys are not searched then).
pub fn row_template<J: Json>(resource: &ResourceType, object: &J, name: &str, cluster: &str, may_hold_nul: bool) -> Option<Vec<u8>> {
    if Printer::of(resource) == Printer::Default && !resource.printer_columns.is_empty() {
        return None;
    }
    if (may_hold_nul && has_nul(object)) || name.contains(ROW_MARK) || cluster.contains(ROW_MARK) {
        return None;
    }
    let display_name = format!("{name}{ROW_MARK}{SUFFIX_MARK}");
    let cells = cells_at(resource, object, &display_name, cluster, Now::Later);
    let mut out = vec![ROW_TEMPLATE_VERSION];
    out.extend_from_slice(b"\"cells\":");
    serde_json::to_writer(&mut out, &cells).ok()?;
    let conditions = row_conditions(resource, object);
    if !conditions.is_empty() {
        out.extend_from_slice(b",\"conditions\":");
        serde_json::to_writer(&mut out, &conditions).ok()?;
    }
    Some(out)
}

/// Whether any key or string in `value` has a NUL character.
fn has_nul<J: Json>(value: &J) -> bool {
    if let Some(s) = value.as_str() {
        return s.contains(ROW_MARK);
    }
    if let Some(items) = value.as_array() {
        return items.iter().any(has_nul);
    }
    value.members().is_some_and(|members| members.into_iter().any(|(k, v)| k.contains(ROW_MARK) || has_nul(v)))
}

/// Writes the row of a template from [`row_template`] as printed at `now`,
/// for the object's name served with `name_suffix`: the row's members,
/// without braces. Returns false, having written nothing, for a template
/// of another version or a damaged one.
pub fn write_row_template(template: &[u8], name_suffix: &str, now: DateTime<Utc>, out: &mut Vec<u8>) -> bool {
    const MARK: &[u8] = b"\\u0000";
    let start = out.len();
    let Some((&ROW_TEMPLATE_VERSION, text)) = template.split_first() else { return false };
    let (mut i, mut copied) = (0, 0);
    while i < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        if !text[i..].starts_with(MARK) {
            // Another escape: its second byte never starts a mark.
            i += 2;
            continue;
        }
        out.extend_from_slice(&text[copied..i]);
        let rest = &text[i + MARK.len()..];
        match rest.first().map(|&b| b as char) {
            Some(SUFFIX_MARK) => {
                write_json_text(out, name_suffix);
                i += MARK.len() + 1;
            }
            Some(SINCE_MARK) => {
                let time = rest
                    .windows(MARK.len())
                    .position(|w| w == MARK)
                    .and_then(|end| Some((end, parse_mark_time(&rest[1..end])?)));
                let Some((end, time)) = time else {
                    out.truncate(start);
                    return false;
                };
                out.extend_from_slice(human_duration(now.signed_duration_since(time)).as_bytes());
                i += MARK.len() + end + MARK.len();
            }
            _ => {
                out.truncate(start);
                return false;
            }
        }
        copied = i;
    }
    out.extend_from_slice(&text[copied.min(text.len())..]);
    true
}

/// The time of a [`SINCE_MARK`]: `<Unix seconds>.<nanoseconds>`.
fn parse_mark_time(text: &[u8]) -> Option<DateTime<Utc>> {
    let text = std::str::from_utf8(text).ok()?;
    let (seconds, nanos) = text.split_once('.')?;
    DateTime::from_timestamp(seconds.parse().ok()?, nanos.parse().ok()?)
}

/// Writes `text` as the inside of a JSON string.
fn write_json_text(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.extend_from_slice(text.as_bytes());
    } else {
        let quoted = serde_json::to_vec(text).expect("strings serialize");
        out.extend_from_slice(&quoted[1..quoted.len() - 1]);
    }
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
    match text(object, "/status/phase") {
        "Succeeded" => completed("Succeeded", "The pod has completed successfully."),
        "Failed" => completed("Failed", "The pod failed."),
        _ => Vec::new(),
    }
}

/// Kubernetes' duration formatting for AGE (duration.HumanDuration: "5s", "3m2s", "10m", "2d3h", "3y45d" ...).
///
/// About two significant figures; up to two seconds in the future reads
/// `0s` (clock skew), further in the future `<invalid>`.
pub fn human_duration(d: chrono::Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d.num_minutes();
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d.num_hours();
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            dy => format!("{years}y{dy}d"),
        };
    }
    format!("{years}y")
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

/// The string at a JSON pointer, `""` when absent.
fn text<'a, J: Json>(value: &'a J, pointer: &str) -> &'a str {
    value
        .walk(pointer)
        .and_then(J::as_str)
        .unwrap_or_default()
}

/// The integer at a JSON pointer, 0 when absent (Go's zero value).
fn int<J: Json>(value: &J, pointer: &str) -> i64 {
    value.walk(pointer).and_then(J::as_i64).unwrap_or(0)
}

/// The array at a JSON pointer, empty when absent.
fn items<'a, J: Json>(value: &'a J, pointer: &str) -> &'a [J] {
    value
        .walk(pointer)
        .and_then(J::as_array)
        .unwrap_or(&[])
}

/// A timestamp at a JSON pointer; `None` when absent or unparsable (Go's zero time).
fn timestamp<J: Json>(value: &J, pointer: &str) -> Option<DateTime<Utc>> {
    let text = value.walk(pointer).and_then(J::as_str)?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `translateTimestampSince`: the age of a timestamp, `<unknown>` when unset.
fn since(time: Option<DateTime<Utc>>, now: Now) -> String {
    match time {
        Some(time) => match now {
            Now::At(now) => human_duration(now.signed_duration_since(time)),
            Now::Later => format!("{ROW_MARK}{SINCE_MARK}{}.{:09}{ROW_MARK}", time.timestamp(), time.timestamp_subsec_nanos()),
        },
        None => "<unknown>".to_string(),
    }
}

fn age<J: Json>(object: &J, now: Now) -> String {
    since(timestamp(object, "/metadata/creationTimestamp"), now)
}

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

/// `metav1.FormatLabelSelector`: `<none>` for an empty or missing selector,
/// `<error>` for an invalid one.
fn format_label_selector<J: Json>(selector: Option<&J>) -> String {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return "<none>".to_string();
    };
    match LabelSelector::from_label_selector(&selector.as_value()) {
        Ok(parsed) if parsed.is_empty() => "<none>".to_string(),
        Ok(parsed) => parsed.to_string(),
        Err(_) => "<error>".to_string(),
    }
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels<J: Json>(labels: Option<&J>) -> String {
    let pairs: Vec<String> = labels
        .and_then(J::members)
        .map(|mut members| {
            // Members are in their written order: sorted by key here.
            members.sort_by_key(|(k, _)| *k);
            members.into_iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    }
}

/// `listWithMoreString` over at most three items: `a,b,c + 2 more...`, `<unset>` when empty.
fn list_with_more(all: impl Iterator<Item = String>) -> String {
    const MAX: usize = 3;
    let all: Vec<String> = all.collect();
    if all.len() > MAX {
        return format!("{} + {} more...", all[..MAX].join(","), all.len() - MAX);
    }
    if all.is_empty() {
        "<unset>".to_string()
    } else {
        all.join(",")
    }
}

fn condition_is<J: Json>(conditions: &[J], type_: &str, status: &str) -> bool {
    conditions.iter().any(|c| {
        c.get("type").and_then(J::as_str) == Some(type_)
            && c.get("status").and_then(J::as_str) == Some(status)
    })
}

/// READY, STATUS, RESTARTS, AGE and the wide columns of a pod (`printPod`).
fn pod_cells<J: Json>(pod: &J, age: Value, now: Now) -> Vec<Value> {
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
fn node_cells<J: Json>(node: &J, age: Value) -> Vec<Value> {
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
fn service_cells<J: Json>(service: &J, age: Value) -> Vec<Value> {
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
fn event_cells<J: Json>(event: &J, display_name: &str, cluster: &str, now: Now) -> Vec<Value> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin, find};
    use chrono::Duration;

    fn resource(group: &str, plural: &str) -> ResourceType {
        let catalog = builtin();
        let version = "v1";
        find(&catalog, group, version, plural)
            .cloned()
            .expect("type in the builtin catalog")
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid time")
            .with_timezone(&Utc)
    }

    /// The time the fixture tests print at; fixtures are created 2008-01-01T01:01:01Z.
    fn fixture_now() -> DateTime<Utc> {
        at("2010-01-01T01:01:01Z")
    }

    fn names(columns: &[Column]) -> Vec<(&str, i32)> {
        columns
            .iter()
            .map(|c| (c.name.as_str(), c.priority))
            .collect()
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            // TestHumanDuration
            (Duration::seconds(1), "1s"),
            (Duration::seconds(70), "70s"),
            (Duration::seconds(190), "3m10s"),
            (Duration::minutes(70), "70m"),
            (Duration::hours(47), "47h"),
            (Duration::hours(49), "2d1h"),
            (Duration::hours(8 * 24 + 2), "8d"),
            (Duration::hours(367 * 24), "367d"),
            (Duration::hours(365 * 2 * 24 + 25), "2y1d"),
            (Duration::hours(365 * 8 * 24 + 2), "8y"),
            // TestHumanDurationBoundaries
            (Duration::seconds(-2), "<invalid>"),
            (Duration::seconds(-2) + Duration::nanoseconds(1), "0s"),
            (Duration::zero(), "0s"),
            (Duration::milliseconds(999), "0s"),
            (Duration::minutes(2) - Duration::milliseconds(1), "119s"),
            (Duration::minutes(2), "2m"),
            (Duration::seconds(121), "2m1s"),
            (Duration::minutes(10) - Duration::milliseconds(1), "9m59s"),
            (Duration::minutes(10), "10m"),
            (Duration::seconds(601), "10m"),
            (Duration::hours(3) - Duration::milliseconds(1), "179m"),
            (Duration::hours(3), "3h"),
            (Duration::minutes(181), "3h1m"),
            (Duration::hours(8) - Duration::milliseconds(1), "7h59m"),
            (Duration::hours(8), "8h"),
            (Duration::minutes(8 * 60 + 59), "8h"),
            (Duration::hours(48) - Duration::milliseconds(1), "47h"),
            (Duration::hours(48), "2d"),
            (Duration::hours(49), "2d1h"),
            (Duration::hours(8 * 24) - Duration::milliseconds(1), "7d23h"),
            (Duration::hours(8 * 24), "8d"),
            (Duration::hours(8 * 24 + 23), "8d"),
            (
                Duration::hours(2 * 365 * 24) - Duration::milliseconds(1),
                "729d",
            ),
            (Duration::hours(2 * 365 * 24), "2y"),
            (Duration::hours(2 * 365 * 24 + 23), "2y"),
            (
                Duration::hours(2 * 365 * 24 + 24) - Duration::milliseconds(1),
                "2y",
            ),
            (Duration::hours(2 * 365 * 24 + 24), "2y1d"),
            (Duration::hours(3 * 365 * 24), "3y"),
            (
                Duration::hours(8 * 365 * 24) - Duration::milliseconds(1),
                "7y364d",
            ),
            (Duration::hours(8 * 365 * 24), "8y"),
            (Duration::hours(8 * 365 * 24 + 364 * 24), "8y"),
            (Duration::hours(9 * 365 * 24), "9y"),
            // The examples of the contract.
            (Duration::seconds(5), "5s"),
            (Duration::seconds(182), "3m2s"),
            (Duration::hours(51), "2d3h"),
            (Duration::days(3 * 365 + 45), "3y45d"),
        ];
        for (duration, expected) in cases {
            assert_eq!(human_duration(duration), expected, "{duration:?}");
        }
    }

    #[test]
    fn columns_put_cluster_after_name() {
        assert_eq!(
            names(&columns(&resource("", "pods"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Ready", 0),
                ("Status", 0),
                ("Restarts", 0),
                ("Age", 0),
                ("IP", 1),
                ("Node", 1),
                ("Nominated Node", 1),
                ("Readiness Gates", 1),
            ]
        );
        assert_eq!(
            names(&columns(&resource("apps", "deployments"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ]
        );
        assert_eq!(
            names(&columns(&resource("apps", "replicasets"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Desired", 0),
                ("Current", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ]
        );
        assert_eq!(
            names(&columns(&resource("apps", "statefulsets"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1)
            ]
        );
        assert_eq!(
            names(&columns(&resource("", "nodes"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Status", 0),
                ("Roles", 0),
                ("Age", 0),
                ("Version", 0),
                ("Internal-IP", 1),
                ("External-IP", 1),
                ("OS-Image", 1),
                ("Kernel-Version", 1),
                ("Container-Runtime", 1),
            ]
        );
        assert_eq!(
            names(&columns(&resource("", "services"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("Type", 0),
                ("Cluster-IP", 0),
                ("External-IP", 0),
                ("Port(s)", 0),
                ("Age", 0),
                ("Selector", 1),
            ]
        );
        assert_eq!(
            names(&columns(&resource("", "namespaces"))),
            vec![("Name", 0), ("Cluster", 0), ("Status", 0), ("Age", 0)]
        );
        assert_eq!(
            names(&columns(&resource("", "configmaps"))),
            vec![("Name", 0), ("Cluster", 0), ("Data", 0), ("Age", 0)]
        );
        assert_eq!(
            names(&columns(&resource("discovery.k8s.io", "endpointslices"))),
            vec![
                ("Name", 0),
                ("Cluster", 0),
                ("AddressType", 0),
                ("Ports", 0),
                ("Endpoints", 0),
                ("Age", 0)
            ]
        );
        assert_eq!(
            names(&columns(&resource("", "events"))),
            vec![
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Cluster", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ]
        );
        let mut crd = resource("", "configmaps");
        crd.group = "example.com".into();
        crd.plural = "widgets".into();
        assert_eq!(
            names(&columns(&crd)),
            vec![("Name", 0), ("Cluster", 0), ("Age", 0)]
        );
        let pods = columns(&resource("", "pods"));
        assert_eq!(pods[0].format, "name");
        assert_eq!(pods[1].format, "");
        assert_eq!(
            serde_json::to_value(&pods[1]).unwrap(),
            json!({"name": "Cluster", "type": "string", "format": "", "description": CLUSTER_DOC, "priority": 0})
        );
        // Every row has as many cells as there are columns.
        for r in builtin() {
            assert_eq!(
                columns(&r).len(),
                cells(&r, &json!({}), "x", "c", fixture_now()).len(),
                "{}",
                r.plural
            );
        }
    }

    #[test]
    fn prints_fixture_pod() {
        // The status-relevant fields of kubernetes/api testdata/HEAD/core.v1.Pod.json.
        let container_status = json!({
            "name": "nameValue",
            "state": {
                "waiting": {"reason": "reasonValue", "message": "messageValue"},
                "running": {"startedAt": "2001-01-01T01:01:01Z"},
                "terminated": {"exitCode": 1, "signal": 2, "reason": "reasonValue", "finishedAt": "2006-01-01T01:01:01Z"}
            },
            "lastState": {"terminated": {"exitCode": 1, "signal": 2, "reason": "reasonValue", "finishedAt": "2006-01-01T01:01:01Z"}},
            "ready": true, "restartCount": 5, "started": true
        });
        let pod = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z", "deletionTimestamp": "2009-01-01T01:01:01Z"},
            "spec": {
                "initContainers": [{"name": "nameValue", "image": "imageValue", "restartPolicy": "restartPolicyValue"}],
                "containers": [{"name": "nameValue", "image": "imageValue"}],
                "nodeName": "nodeNameValue",
                "readinessGates": [{"conditionType": "conditionTypeValue"}]
            },
            "status": {
                "phase": "phaseValue", "reason": "reasonValue",
                "conditions": [{"type": "typeValue", "status": "statusValue"}],
                "podIPs": [{"ip": "ipValue"}], "nominatedNodeName": "nominatedNodeNameValue",
                "initContainerStatuses": [container_status.clone()],
                "containerStatuses": [container_status]
            }
        });
        assert_eq!(
            cells(
                &resource("", "pods"),
                &pod,
                "nameValue_member1",
                "member1",
                fixture_now()
            ),
            vec![
                json!("nameValue_member1"),
                json!("member1"),
                json!("0/1"),
                json!("Terminating"),
                json!("5 (4y1d ago)"),
                json!("2y1d"),
                json!("ipValue"),
                json!("nodeNameValue"),
                json!("nominatedNodeNameValue"),
                json!("0/1"),
            ]
        );
    }

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z"},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}, {"name": "proxy", "image": "envoy:1.30"}]},
            "status": status
        })
    }

    #[test]
    fn prints_pod_status_like_kubectl() {
        let now = at("2025-06-01T14:30:00Z");
        let running = |name: &str| json!({"name": name, "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2025-06-01T12:00:05Z"}}});
        let cases: Vec<(Value, [&str; 3])> = vec![
            (
                pod(
                    json!({"phase": "Running", "podIPs": [{"ip": "10.244.1.7"}], "containerStatuses": [running("app"), running("proxy")]}),
                ),
                ["2/2", "Running", "0"],
            ),
            (
                pod(json!({"phase": "Running", "containerStatuses": [
                    running("app"),
                    {"name": "proxy", "ready": false, "restartCount": 7,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-06-01T14:25:00Z"}}}
                ]})),
                ["1/2", "CrashLoopBackOff", "7 (5m ago)"],
            ),
            (
                pod(json!({"phase": "Succeeded", "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "proxy", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ]})),
                ["0/2", "Completed", "0"],
            ),
            (
                // One container completed while the other still runs: NotReady without the Ready condition.
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    running("proxy")
                ]})),
                ["1/2", "NotReady", "0"],
            ),
            (
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}},
                    {"name": "proxy", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
                ]})),
                ["0/2", "Signal:9", "0"],
            ),
            (pod(json!({"phase": "Pending"})), ["0/2", "Pending", "0"]),
            (
                pod(
                    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                ),
                ["0/2", "SchedulingGated", "0"],
            ),
            (
                pod(
                    json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
                ),
                ["0/2", "Evicted", "0"],
            ),
            (
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                    {"name": "proxy", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]})),
                ["0/2", "ImagePullBackOff", "0"],
            ),
        ];
        for (object, [ready, status, restarts]) in cases {
            let row = cells(&resource("", "pods"), &object, "web-0", "member1", now);
            assert_eq!(
                row[2..5],
                [json!(ready), json!(status), json!(restarts)],
                "{object}"
            );
            assert_eq!(row[5], json!("150m"));
        }
    }

    #[test]
    fn prints_init_containers_and_deletion() {
        let now = at("2025-06-01T12:00:30Z");
        let with_init = |init_statuses: Value, extra: Value| {
            let mut object = json!({
                "metadata": {"name": "db-0", "creationTimestamp": "2025-06-01T12:00:00Z"},
                "spec": {
                    "initContainers": [{"name": "migrate"}, {"name": "mesh", "restartPolicy": "Always"}],
                    "containers": [{"name": "db"}]
                },
                "status": {"phase": "Pending", "initContainerStatuses": init_statuses}
            });
            if let (Some(target), Some(extra)) = (object.as_object_mut(), extra.as_object()) {
                for (k, v) in extra {
                    target.insert(k.clone(), v.clone());
                }
            }
            object
        };
        let cases = [
            (
                with_init(
                    json!([{"name": "migrate", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]),
                    json!({}),
                ),
                ["0/2", "Init:0/2", "0"],
            ),
            (
                with_init(
                    json!([{"name": "migrate", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:00:20Z"}}}]),
                    json!({}),
                ),
                ["0/2", "Init:CrashLoopBackOff", "3 (10s ago)"],
            ),
            (
                with_init(
                    json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]),
                    json!({}),
                ),
                ["0/2", "Init:ExitCode:2", "0"],
            ),
            (
                // The sidecar started and is ready; the pod is now running its main container.
                with_init(
                    json!([
                        {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                        {"name": "mesh", "restartCount": 1, "ready": true, "started": true, "state": {"running": {}}}
                    ]),
                    json!({"metadata": {"name": "db-0", "creationTimestamp": "2025-06-01T12:00:00Z", "deletionTimestamp": "2025-06-01T12:00:29Z"}}),
                ),
                ["1/2", "Terminating", "1"],
            ),
        ];
        for (object, [ready, status, restarts]) in cases {
            let row = cells(&resource("", "pods"), &object, "db-0", "member2", now);
            assert_eq!(
                row[2..5],
                [json!(ready), json!(status), json!(restarts)],
                "{object}"
            );
        }
        let lost = json!({"metadata": {"deletionTimestamp": "2025-06-01T12:00:00Z"}, "status": {"phase": "Running", "reason": "NodeLost"}});
        assert_eq!(
            cells(&resource("", "pods"), &lost, "x", "c", now)[3],
            json!("Unknown")
        );
        let done = json!({"metadata": {"deletionTimestamp": "2025-06-01T12:00:00Z"}, "status": {"phase": "Succeeded"}});
        assert_eq!(
            cells(&resource("", "pods"), &done, "x", "c", now)[3],
            json!("Succeeded")
        );
    }

    #[test]
    fn prints_pod_wide_columns() {
        let object = json!({
            "metadata": {"name": "web-0"},
            "spec": {"containers": [{"name": "app"}], "nodeName": "node-a",
                     "readinessGates": [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.9",
                       "conditions": [{"type": "example.com/lb", "status": "True"}, {"type": "example.com/dns", "status": "False"}]}
        });
        let row = cells(
            &resource("", "pods"),
            &object,
            "web-0_member1",
            "member1",
            fixture_now(),
        );
        assert_eq!(row[5], json!("<unknown>"));
        assert_eq!(
            row[6..],
            [
                json!("10.0.0.9"),
                json!("node-a"),
                json!("<none>"),
                json!("1/2")
            ]
        );
    }

    #[test]
    fn prints_row_conditions_of_finished_pods() {
        let pods = resource("", "pods");
        assert_eq!(
            row_conditions(&pods, &json!({"status": {"phase": "Succeeded"}})),
            vec![
                json!({"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."})
            ]
        );
        assert_eq!(
            row_conditions(&pods, &json!({"status": {"phase": "Failed"}}))[0]["reason"],
            json!("Failed")
        );
        assert!(row_conditions(&pods, &json!({"status": {"phase": "Running"}})).is_empty());
        assert!(row_conditions(
            &resource("", "nodes"),
            &json!({"status": {"phase": "Succeeded"}})
        )
        .is_empty());
    }

    #[test]
    fn prints_workloads() {
        let now = at("2025-06-03T15:00:00Z");
        let deployment = json!({
            "metadata": {"name": "nginx", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "log", "image": "busybox:1.36"}]}}
            },
            "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
        });
        assert_eq!(
            cells(
                &resource("apps", "deployments"),
                &deployment,
                "nginx_member1",
                "member1",
                now
            ),
            vec![
                json!("nginx_member1"),
                json!("member1"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("2d3h"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox:1.36"),
                json!("app=nginx"),
            ]
        );
        let replicaset = json!({
            "metadata": {"name": "nginx-5d4f8", "creationTimestamp": "2025-06-03T14:59:00Z"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx", "pod-template-hash": "5d4f8"}},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
            },
            "status": {"replicas": 3, "readyReplicas": 1}
        });
        assert_eq!(
            cells(
                &resource("apps", "replicasets"),
                &replicaset,
                "nginx-5d4f8",
                "member2",
                now
            ),
            vec![
                json!("nginx-5d4f8"),
                json!("member2"),
                json!(3),
                json!(3),
                json!(1),
                json!("60s"),
                json!("nginx"),
                json!("nginx:1.27"),
                json!("app=nginx,pod-template-hash=5d4f8"),
            ]
        );
        // A just-created statefulset: status not yet written, replicas defaulted.
        let statefulset = json!({
            "metadata": {"name": "web", "creationTimestamp": "2025-06-03T15:00:00Z"},
            "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}
        });
        assert_eq!(
            cells(
                &resource("apps", "statefulsets"),
                &statefulset,
                "web",
                "member3",
                now
            ),
            vec![
                json!("web"),
                json!("member3"),
                json!("0/1"),
                json!("0s"),
                json!("nginx"),
                json!("nginx:1.27")
            ]
        );
    }

    #[test]
    fn prints_fixture_workloads() {
        // kubernetes/api testdata/HEAD fixtures: the selectors use operator
        // "operatorValue", which Kubernetes cannot convert.
        let selector = json!({
            "matchLabels": {"matchLabelsKey": "matchLabelsValue"},
            "matchExpressions": [{"key": "keyValue", "operator": "operatorValue", "values": ["valuesValue"]}]
        });
        let template =
            json!({"spec": {"containers": [{"name": "nameValue", "image": "imageValue"}]}});
        let deployment = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "spec": {"replicas": 1, "selector": selector, "template": template},
            "status": {"replicas": 2, "updatedReplicas": 3, "readyReplicas": 7, "availableReplicas": 4}
        });
        assert_eq!(
            cells(
                &resource("apps", "deployments"),
                &deployment,
                "nameValue",
                "m",
                fixture_now()
            )[2..],
            [
                json!("7/1"),
                json!(3),
                json!(4),
                json!("2y1d"),
                json!("nameValue"),
                json!("imageValue"),
                json!("<invalid>")
            ]
        );
        let replicaset = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "spec": {"replicas": 1, "selector": selector, "template": template},
            "status": {"replicas": 1, "readyReplicas": 4}
        });
        assert_eq!(
            cells(
                &resource("apps", "replicasets"),
                &replicaset,
                "nameValue",
                "m",
                fixture_now()
            )[2..],
            [
                json!(1),
                json!(1),
                json!(4),
                json!("2y1d"),
                json!("nameValue"),
                json!("imageValue"),
                json!("<error>")
            ]
        );
        let statefulset = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "spec": {"replicas": 1, "template": template},
            "status": {"readyReplicas": 3}
        });
        assert_eq!(
            cells(
                &resource("apps", "statefulsets"),
                &statefulset,
                "nameValue",
                "m",
                fixture_now()
            )[2..],
            [
                json!("3/1"),
                json!("2y1d"),
                json!("nameValue"),
                json!("imageValue")
            ]
        );
    }

    #[test]
    fn prints_nodes() {
        let now = at("2025-06-10T00:00:00Z");
        let node = json!({
            "metadata": {
                "name": "cp-1", "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "", "kubernetes.io/role": "master", "kubernetes.io/os": "linux"}
            },
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Ubuntu 24.04.2 LTS", "kernelVersion": "6.8.0-60-generic", "containerRuntimeVersion": "containerd://2.0.5"}
            }
        });
        assert_eq!(
            cells(
                &resource("", "nodes"),
                &node,
                "cp-1_member1",
                "member1",
                now
            ),
            vec![
                json!("cp-1_member1"),
                json!("member1"),
                json!("Ready,SchedulingDisabled"),
                json!("control-plane,etcd,master"),
                json!("160d"),
                json!("v1.33.1"),
                json!("192.168.1.10"),
                json!("<none>"),
                json!("Ubuntu 24.04.2 LTS"),
                json!("6.8.0-60-generic"),
                json!("containerd://2.0.5"),
            ]
        );
        // kubernetes/api testdata/HEAD/core.v1.Node.json.
        let fixture = json!({
            "metadata": {"name": "nameValue", "labels": {"labelsKey": "labelsValue"}, "creationTimestamp": "2008-01-01T01:01:01Z"},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "typeValue", "status": "statusValue"}],
                "addresses": [{"type": "typeValue", "address": "addressValue"}],
                "nodeInfo": {"kernelVersion": "kernelVersionValue", "osImage": "osImageValue", "containerRuntimeVersion": "containerRuntimeVersionValue", "kubeletVersion": "kubeletVersionValue"}
            }
        });
        assert_eq!(
            cells(
                &resource("", "nodes"),
                &fixture,
                "nameValue",
                "m",
                fixture_now()
            )[2..],
            [
                json!("Unknown,SchedulingDisabled"),
                json!("<none>"),
                json!("2y1d"),
                json!("kubeletVersionValue"),
                json!("<none>"),
                json!("<none>"),
                json!("osImageValue"),
                json!("kernelVersionValue"),
                json!("containerRuntimeVersionValue"),
            ]
        );
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        assert_eq!(
            cells(&resource("", "nodes"), &not_ready, "n", "m", now)[2..4],
            [json!("NotReady"), json!("<none>")]
        );
    }

    #[test]
    fn prints_services() {
        let now = at("2025-06-01T12:10:00Z");
        let created = "2025-06-01T12:00:00Z";
        let services = resource("", "services");
        let row = |spec: Value, status: Value| {
            let object = json!({"metadata": {"name": "web", "creationTimestamp": created}, "spec": spec, "status": status});
            cells(&services, &object, "web", "member1", now)[2..].to_vec()
        };
        assert_eq!(
            row(
                json!({"type": "ClusterIP", "clusterIP": "10.96.12.7", "clusterIPs": ["10.96.12.7"],
                       "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}, {"port": 53, "protocol": "UDP"}],
                       "selector": {"app": "web", "tier": "frontend"}}),
                json!({})
            ),
            [
                json!("ClusterIP"),
                json!("10.96.12.7"),
                json!("<none>"),
                json!("80/TCP,53/UDP"),
                json!("10m"),
                json!("app=web,tier=frontend")
            ]
        );
        assert_eq!(
            row(
                json!({"type": "NodePort", "clusterIP": "10.96.0.20", "externalIPs": ["203.0.113.5"],
                       "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}]}),
                json!({})
            ),
            [
                json!("NodePort"),
                json!("10.96.0.20"),
                json!("203.0.113.5"),
                json!("443:30443/TCP"),
                json!("10m"),
                json!("<none>")
            ]
        );
        assert_eq!(
            row(
                json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.30"], "ports": [{"port": 80, "nodePort": 31000, "protocol": "TCP"}]}),
                json!({})
            )[2],
            json!("<pending>")
        );
        assert_eq!(
            row(
                json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.30"], "externalIPs": ["198.51.100.1"]}),
                json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]}})
            )[2],
            json!("203.0.113.9,lb.example.com,198.51.100.1")
        );
        assert_eq!(
            row(
                json!({"type": "ExternalName", "externalName": "db.example.com"}),
                json!({})
            )[..4],
            [
                json!("ExternalName"),
                json!("<none>"),
                json!("db.example.com"),
                json!("<none>")
            ]
        );
        assert_eq!(
            row(
                json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}),
                json!({})
            )[1],
            json!("None")
        );
        // kubernetes/api testdata/HEAD/core.v1.Service.json.
        assert_eq!(
            row(
                json!({"type": "typeValue", "clusterIP": "clusterIPValue", "clusterIPs": ["clusterIPsValue"], "externalIPs": ["externalIPsValue"],
                       "ports": [{"name": "nameValue", "protocol": "protocolValue", "port": 3, "targetPort": "targetPortValue", "nodePort": 5}],
                       "selector": {"selectorKey": "selectorValue"}, "externalName": "externalNameValue"}),
                json!({"loadBalancer": {"ingress": [{"ip": "ipValue", "hostname": "hostnameValue"}]}})
            ),
            [
                json!("typeValue"),
                json!("clusterIPsValue"),
                json!("<unknown>"),
                json!("3:5/protocolValue"),
                json!("10m"),
                json!("selectorKey=selectorValue")
            ]
        );
    }

    #[test]
    fn prints_namespaces_configmaps_endpointslices_and_other_types() {
        let now = fixture_now();
        let namespace = json!({"metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"}, "status": {"phase": "phaseValue"}});
        assert_eq!(
            cells(
                &resource("", "namespaces"),
                &namespace,
                "nameValue",
                "member1",
                now
            ),
            vec![
                json!("nameValue"),
                json!("member1"),
                json!("phaseValue"),
                json!("2y1d")
            ]
        );
        let configmap = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "data": {"dataKey": "dataValue"}, "binaryData": {"binaryDataKey": "Aw=="}
        });
        assert_eq!(
            cells(
                &resource("", "configmaps"),
                &configmap,
                "nameValue_member1",
                "member1",
                now
            ),
            vec![
                json!("nameValue_member1"),
                json!("member1"),
                json!(2),
                json!("2y1d")
            ]
        );
        let slice = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "addressType": "addressTypeValue",
            "endpoints": [{"addresses": ["addressesValue"], "conditions": {"ready": true}}],
            "ports": [{"name": "nameValue", "protocol": "protocolValue", "port": 3}]
        });
        let slices = resource("discovery.k8s.io", "endpointslices");
        assert_eq!(
            cells(&slices, &slice, "nameValue", "member1", now),
            vec![
                json!("nameValue"),
                json!("member1"),
                json!("addressTypeValue"),
                json!("3"),
                json!("addressesValue"),
                json!("2y1d")
            ]
        );
        let big = json!({
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}, {"addresses": ["10.0.0.5"]}],
            "ports": [{"name": "http", "port": 80}, {"name": "metrics"}, {}]
        });
        assert_eq!(
            cells(&slices, &big, "web-abc", "member1", now)[2..5],
            [
                json!("IPv4"),
                json!("80,metrics,*"),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 2 more...")
            ]
        );
        assert_eq!(
            cells(&slices, &json!({"addressType": "IPv6"}), "s", "m", now)[3..5],
            [json!("<unset>"), json!("<unset>")]
        );
        let mut widgets = resource("", "configmaps");
        widgets.group = "example.com".into();
        widgets.plural = "widgets".into();
        let widget =
            json!({"metadata": {"name": "w", "creationTimestamp": "2009-12-31T01:01:01Z"}});
        assert_eq!(
            cells(&widgets, &widget, "w_member2", "member2", now),
            vec![json!("w_member2"), json!("member2"), json!("24h")]
        );
    }

    #[test]
    fn prints_events() {
        let events = resource("", "events");
        // kubernetes/api testdata/HEAD/core.v1.Event.json: the series sets LAST SEEN and COUNT.
        let fixture = json!({
            "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
            "involvedObject": {"kind": "kindValue", "namespace": "namespaceValue", "name": "nameValue", "fieldPath": "fieldPathValue"},
            "reason": "reasonValue", "message": "messageValue",
            "source": {"component": "componentValue", "host": "hostValue"},
            "firstTimestamp": "2006-01-01T01:01:01Z", "lastTimestamp": "2007-01-01T01:01:01Z", "count": 8, "type": "typeValue",
            "eventTime": "2010-01-01T01:01:01.000010Z",
            "series": {"count": 1, "lastObservedTime": "2002-01-01T01:01:01.000002Z"},
            "reportingComponent": "reportingComponentValue", "reportingInstance": "reportingInstanceValue"
        });
        assert_eq!(
            cells(
                &events,
                &fixture,
                "nameValue_member1",
                "member1",
                fixture_now()
            ),
            vec![
                json!("8y"),
                json!("typeValue"),
                json!("reasonValue"),
                json!("kindvalue/nameValue"),
                json!("member1"),
                json!("fieldPathValue"),
                json!("componentValue, hostValue"),
                json!("messageValue"),
                json!("4y1d"),
                json!(1),
                json!("nameValue_member1"),
            ]
        );
        let now = at("2025-06-01T12:10:00Z");
        let backoff = json!({
            "metadata": {"name": "web-0.17e5a3c1d2", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
            "reason": "BackOff", "message": "Back-off restarting failed container app in pod web-0_default(1234)\n",
            "source": {"component": "kubelet", "host": "node-a"},
            "firstTimestamp": "2025-06-01T12:00:00Z", "lastTimestamp": "2025-06-01T12:09:30Z", "count": 12, "type": "Warning"
        });
        assert_eq!(
            cells(
                &events,
                &backoff,
                "web-0.17e5a3c1d2_member1",
                "member1",
                now
            ),
            vec![
                json!("30s"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web-0"),
                json!("member1"),
                json!("spec.containers{app}"),
                json!("kubelet, node-a"),
                json!("Back-off restarting failed container app in pod web-0_default(1234)"),
                json!("10m"),
                json!(12),
                json!("web-0.17e5a3c1d2_member1"),
            ]
        );
        // An events.k8s.io event: eventTime only, no count, reporting controller as source.
        let new_style = json!({
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Node"},
            "reason": "Starting", "type": "Normal", "eventTime": "2025-06-01T12:04:59.500000Z",
            "reportingComponent": "kube-proxy", "reportingInstance": ""
        });
        let row = cells(&events, &new_style, "e1", "member2", now);
        assert_eq!(
            row[..4],
            [
                json!("5m"),
                json!("Normal"),
                json!("Starting"),
                json!("node")
            ]
        );
        assert_eq!(row[6], json!("kube-proxy"));
        assert_eq!(row[8..10], [json!("5m"), json!(1)]);
    }

    #[test]
    fn partial_object_metadata_carries_the_whole_metadata() {
        let object = json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "web-0_member1", "namespace": "default", "resourceVersion": "42", "labels": {"app": "web"}},
            "spec": {"containers": []}
        });
        assert_eq!(
            partial_object_metadata(&object),
            json!({
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "web-0_member1", "namespace": "default", "resourceVersion": "42", "labels": {"app": "web"}}
            })
        );
        assert_eq!(partial_object_metadata(&json!({}))["metadata"], json!({}));
    }

    fn widgets(columns: serde_json::Value) -> ResourceType {
        let mut widget = resource("", "configmaps");
        widget.group = "example.com".into();
        widget.plural = "widgets".into();
        widget.kind = "Widget".into();
        widget.printer_columns = serde_json::from_value(columns).expect("printer columns");
        widget
    }

    #[test]
    fn custom_resources_print_their_printer_columns() {
        let widget = widgets(json!([
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
            {"name": "First Port", "type": "integer", "jsonPath": ".spec.ports[0].port", "priority": 1},
            {"name": "Owner", "type": "string", "jsonPath": ".metadata.labels['example.com/owner']"},
            {"name": "Ports", "type": "string", "jsonPath": ".spec.ports"},
            {"name": "Last Seen", "type": "date", "jsonPath": ".status.lastSeen"}
        ]));
        let names: Vec<(String, i32)> = columns(&widget).into_iter().map(|c| (c.name, c.priority)).collect();
        let expected = [("Name", 0), ("Cluster", 0), ("Color", 0), ("Size", 0), ("Ready", 0), ("First Port", 1), ("Owner", 0), ("Ports", 0), ("Last Seen", 0), ("Age", 0)];
        assert_eq!(names, expected.map(|(n, p)| (n.to_string(), p)));
        let object = json!({
            "metadata": {"name": "w1", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"example.com/owner": "ann"}},
            "spec": {"color": "blue", "size": 3.0, "ports": [{"port": 80}]},
            "status": {"ready": true, "lastSeen": "2026-01-01T00:05:00Z"}
        });
        let now = at("2026-01-01T01:00:00Z");
        assert_eq!(
            cells(&widget, &object, "w1_m1", "m1", now),
            [json!("w1_m1"), json!("m1"), json!("blue"), json!(3), json!(true), json!(80), json!("ann"), json!("[{\"port\":80}]"), json!("55m"), json!("60m")]
        );
        let bare = json!({"metadata": {"name": "w2"}, "spec": {"size": "big"}});
        let row = cells(&widget, &bare, "w2", "m1", now);
        assert_eq!(row[2..9], [Value::Null, Value::Null, Value::Null, Value::Null, Value::Null, Value::Null, Value::Null], "absent or mistyped values are empty");

        let with_age = widgets(json!([{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]));
        assert_eq!(columns(&with_age).len(), 3, "no second Age column");
        let plain = widgets(json!([]));
        let names: Vec<String> = columns(&plain).into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["Name", "Cluster", "Age"]);
    }

    #[test]
    fn json_paths_are_the_simple_subset() {
        let object = json!({"a": {"b": [{"c": 1}, {"c": 2}], "d.e": "x"}});
        assert_eq!(json_path(&object, ".a.b[1].c"), Some(&json!(2)));
        assert_eq!(json_path(&object, "{.a.b[0].c}"), Some(&json!(1)));
        assert_eq!(json_path(&object, ".a.b[-1].c"), Some(&json!(2)));
        assert_eq!(json_path(&object, ".a['d.e']"), Some(&json!("x")));
        assert_eq!(json_path(&object, ".a[\"d.e\"]"), Some(&json!("x")));
        assert_eq!(json_path(&object, ".a.b[2].c"), None);
        assert_eq!(json_path(&object, ".a.b[*].c"), None);
        assert_eq!(json_path(&object, ".a..b"), None);
        assert_eq!(json_path(&object, "a.b"), None);
    }

    /// A row built from the parts [`row_keeps`] names equals the row built
    /// from the whole object: cells, row conditions and the row's metadata,
    /// for every type's fixture (kubernetes/api testdata) and for pods with
    /// init containers, sidecars, readiness gates and a deletion.
    #[test]
    fn rows_from_the_kept_parts_equal_rows_from_the_whole_object() {
        let mut objects: Vec<(ResourceType, Vec<u8>)> =
            crate::fixtures::API_TYPES.iter().map(|(file, group, plural)| (resource(group, plural), crate::fixtures::read(file))).collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z",
                         "deletionTimestamp": "2025-06-01T12:00:29Z", "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {
                "initContainers": [{"name": "setup", "image": "busybox"}, {"name": "mesh", "image": "envoy", "restartPolicy": "Always"}],
                "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}],
                "readinessGates": [{"conditionType": "example.com/ready"}],
                "nodeName": "node-1", "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"operator": "Exists"}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "nominatedNodeName": "node-2",
                "conditions": [{"type": "example.com/ready", "status": "True"}],
                "initContainerStatuses": [
                    {"name": "setup", "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "mesh", "ready": true, "started": true, "restartCount": 2, "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:00:10Z"}}}
                ],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}},
                                       "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2025-06-01T12:00:20Z"}}}]
            }
        });
        objects.push((resource("", "pods"), serde_json::to_vec(&pod).unwrap()));
        let now = fixture_now();
        for (r, bytes) in objects {
            let whole: Value = serde_json::from_slice(&bytes).unwrap();
            let kept = parse_for_row(&bytes, row_keeps(&r)).unwrap();
            assert_eq!(cells(&r, &kept, "x", "c", now), cells(&r, &whole, "x", "c", now), "{} cells", r.plural);
            assert_eq!(row_conditions(&r, &kept), row_conditions(&r, &whole), "{} row conditions", r.plural);
            let source = parse_row_source(&bytes, row_keeps(&r)).unwrap();
            assert_eq!(cells(&r, &source.object, "x", "c", now), cells(&r, &whole, "x", "c", now), "{} cells (one pass)", r.plural);
            assert_eq!(row_conditions(&r, &source.object), row_conditions(&r, &whole), "{} row conditions (one pass)", r.plural);
            let metadata: Value = serde_json::from_str(source.metadata.expect("metadata").get()).unwrap();
            assert_eq!(metadata, whole["metadata"], "{} metadata as written", r.plural);
        }
        assert!(parse_row_source(b"{\"metadata\": {", row_keeps(&resource("", "pods"))).is_err());
        assert!(parse_row_source(b"{} x", row_keeps(&resource("", "pods"))).is_err());
        // Malformed JSON is an error, as with a whole parse.
        assert!(parse_for_row(b"{\"metadata\": {", row_keeps(&resource("", "pods"))).is_err());
        assert!(parse_for_row(b"{} x", row_keeps(&resource("", "pods"))).is_err());
    }

    #[test]
    fn walk_finds_what_json_pointer_finds() {
        let v = json!({"a": {"b": [{"c": 1}, {"c": 2}], "x/y": 3, "t~": 4, "": 5}});
        for pointer in ["", "/a", "/a/b", "/a/b/0", "/a/b/1/c", "/a/b/01", "/a/b/2", "/a/b/-", "/a/b/x", "/a/x~1y", "/a/t~0", "/a/", "/nope", "/a/b/0/c/d", "a"] {
            assert_eq!(v.walk(pointer), v.pointer(pointer), "{pointer:?}");
        }
    }

    /// The row an object's template prints, as a JSON object.
    fn templated_row(body: &crate::object::ServedBody, suffix: &str, now: DateTime<Utc>) -> Option<Value> {
        let row = body.row.as_ref()?;
        let mut out = b"{".to_vec();
        assert!(write_row_template(&row.template, suffix, now, &mut out), "the template prints");
        out.push(b'}');
        Some(serde_json::from_slice(&out).expect("a template prints JSON"))
    }

    /// The row printed from the served body at `now`, as before templates.
    fn printed_row(resource: &ResourceType, served: &[u8], cluster: &str, now: DateTime<Utc>) -> Value {
        let object: Value = serde_json::from_slice(served).unwrap();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let mut row = json!({"cells": cells(resource, &object, &name, cluster, now)});
        let conditions = row_conditions(resource, &object);
        if !conditions.is_empty() {
            row["conditions"] = Value::from(conditions);
        }
        row
    }

    fn pod_object(extra_spec: Value, status: Value, deletion: Option<&str>) -> Value {
        let mut object = json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "web-0", "namespace": "default", "uid": "u", "resourceVersion": "7",
                         "creationTimestamp": "2025-06-01T12:00:00Z", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]}, {"name": "proxy", "image": "envoy"}],
                     "nodeName": "node-1"},
            "status": status
        });
        if let Value::Object(extra) = extra_spec {
            for (k, v) in extra {
                object["spec"][k] = v;
            }
        }
        if let Some(t) = deletion {
            object["metadata"]["deletionTimestamp"] = json!(t);
        }
        object
    }

    #[test]
    fn a_row_template_prints_what_the_body_prints() {
        let restarted = json!({"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "gate-a", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 3, "image": "nginx", "state": {"running": {"startedAt": "2025-06-01T12:04:00Z"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:05:00Z"}}},
                {"name": "proxy", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
        let pods = [
            pod_object(json!({}), restarted.clone(), None),
            pod_object(json!({"readinessGates": [{"conditionType": "gate-a"}, {"conditionType": "gate-b"}]}), restarted.clone(), Some("2025-06-01T12:09:00Z")),
            pod_object(json!({}), json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "app", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}), None),
            pod_object(json!({}), json!({"phase": "Failed", "reason": "Evicted"}), None),
            pod_object(json!({"initContainers": [{"name": "init", "image": "busybox"}, {"name": "side", "restartPolicy": "Always"}]}),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 2, "finishedAt": "2025-06-01T12:07:30.5Z"}}},
                    {"name": "side", "restartCount": 1, "started": true, "ready": true, "state": {"running": {}}}]}), None),
            // Text that looks like a mark, written with an escaped backslash and with `\u005c`.
            pod_object(json!({}), json!({"phase": "Running", "reason": "x\\u0000Q\\u0000S1.0\\u0000y"}), None),
            pod_object(json!({}), json!({"phase": "Running", "reason": "\u{5c}u0000Q"}), None),
        ];
        let mut objects: Vec<(ResourceType, Vec<u8>)> =
            pods.iter().map(|p| (resource("", "pods"), serde_json::to_vec(p).unwrap())).collect();
        // Raw text for `\u005c` (a backslash written as an escape).
        objects.push((resource("", "pods"), br#"{"metadata":{"name":"p","creationTimestamp":"2025-06-01T12:00:00Z"},"status":{"phase":"A\u005cu0000Q"}}"#.to_vec()));
        for (file, group, plural) in crate::fixtures::API_TYPES {
            let catalog = builtin();
            let resource = catalog.iter().find(|r| r.group == *group && r.plural == *plural && r.version == "v1").unwrap().clone();
            objects.push((resource, crate::fixtures::read(file)));
        }
        let nows = [at("2025-06-01T12:10:00Z"), at("2025-06-03T00:00:00Z"), fixture_now(), at("2000-01-01T00:00:00Z")];
        for (resource, raw) in &objects {
            let ingested = crate::object::ingest(resource, "member1", raw).unwrap();
            assert!(ingested.body.row.is_some(), "{} has a row template", resource.plural);
            for suffix in ["", "_member1"] {
                let served = ingested.body.to_bytes(Some(suffix), 42);
                for now in nows {
                    assert_eq!(
                        templated_row(&ingested.body, suffix, now).unwrap(),
                        printed_row(resource, &served, "member1", now),
                        "{} {}",
                        resource.plural,
                        String::from_utf8_lossy(raw)
                    );
                }
            }
        }
        // What the first pod's row says, from what Kubernetes prints.
        let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pods[0]).unwrap()).unwrap();
        assert_eq!(
            templated_row(&ingested.body, "_member1", at("2025-06-01T12:10:00Z")).unwrap(),
            json!({"cells": ["web-0_member1", "member1", "2/2", "Running", "3 (5m ago)", "10m", "10.0.0.1", "node-1", "<none>", "<none>"]})
        );
        let finished = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pods[2]).unwrap()).unwrap();
        assert_eq!(
            templated_row(&finished.body, "", at("2025-06-01T12:10:00Z")).unwrap()["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
        );
    }

    #[test]
    fn objects_a_template_cannot_print_have_none() {
        // A NUL character could not be told from a mark.
        let nul = pod_object(json!({}), json!({"phase": "Running", "reason": "a\u{0}Q"}), None);
        let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&nul).unwrap()).unwrap();
        assert!(ingested.body.row.is_none());
        // Read both ways, and with the reason among the row's conditions.
        let condition = pod_object(json!({}), json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "x\u{0}"}]}), None);
        for object in [&nul, &condition] {
            let text = serde_json::to_string(object).unwrap();
            assert!(text.contains("\\u0000"), "{text}");
            let raw: &serde_json::value::RawValue = serde_json::from_str(&text).unwrap();
            assert!(crate::object::ingest_read(&resource("", "pods"), "member1", raw).unwrap().body.row.is_none(), "{text}");
            assert!(crate::object::ingest(&resource("", "pods"), "member1", text.as_bytes()).unwrap().body.row.is_none(), "{text}");
        }
        // A custom resource's printer columns can change while its objects are stored.
        let mut crd = resource("", "pods");
        crd.group = "example.com".into();
        crd.plural = "widgets".into();
        crd.kind = "Widget".into();
        crd.printer_columns = vec![crate::resources::PrinterColumn {
            name: "Size".into(),
            type_: "integer".into(),
            json_path: ".spec.size".into(),
            description: String::new(),
            priority: 0,
            format: String::new(),
        }];
        let widget = br#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"},"spec":{"size":3}}"#;
        assert!(crate::object::ingest(&crd, "member1", widget).unwrap().body.row.is_none());
    }

    #[test]
    fn a_template_of_another_version_or_damaged_prints_nothing() {
        let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pod_object(json!({}), json!({}), None)).unwrap()).unwrap();
        let template = ingested.body.row.unwrap().template;
        let now = at("2025-06-01T12:10:00Z");
        let mut out = b"head".to_vec();
        let mut other = template.clone();
        other[0] = ROW_TEMPLATE_VERSION + 1;
        assert!(!write_row_template(&other, "", now, &mut out));
        assert!(!write_row_template(&[], "", now, &mut out));
        let text = String::from_utf8(template.clone()).unwrap();
        let unclosed = text.replacen("\\u0000S", "\\u0000S9", 1).rsplit_once("\\u0000").map(|(a, b)| format!("{a}{b}")).unwrap();
        assert!(!write_row_template(unclosed.as_bytes(), "", now, &mut out));
        let unknown = text.replacen("\\u0000Q", "\\u0000Z", 1);
        assert!(!write_row_template(unknown.as_bytes(), "", now, &mut out));
        assert_eq!(out, b"head", "nothing written");
        assert!(write_row_template(&template, "", now, &mut out));
    }
}
