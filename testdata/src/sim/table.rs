//! Server-side printing: `meta.k8s.io/v1` Table responses for clients that
//! ask for them (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, as
//! `kubectl get` does), for get, list and watch; see the Kubernetes docs
//! "API Concepts" (section "Receiving resources as Tables"). Columns and
//! cells are kube-apiserver's printers as `kubefold_engine::table` writes
//! them, without the `Cluster` column kubefold adds.

use chrono::{DateTime, Utc};
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Map, Value};

use super::list::query_value;
use super::status::{ApiError, Result};

/// The Content-Type of a Table response.
pub const CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// No object in rows.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// How to print Tables for one request.
#[derive(Debug, Clone)]
pub struct TableFormat {
    /// The printed type.
    pub resource: ResourceType,
    /// What rows carry.
    pub include: Include,
}

/// Whether the first media range of `accept` the simulator can serve is a Table.
pub fn requested(accept: &str) -> bool {
    for range in accept.split(',') {
        let parts: Vec<String> = range.split(';').map(|p| p.trim().replace(' ', "")).collect();
        let media = parts.first().map(String::as_str).unwrap_or_default();
        if !matches!(media, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let has = |p: &str| parts.iter().any(|x| x == p);
        if has("as=Table") {
            if has("g=meta.k8s.io") && (has("v=v1") || has("v=v1beta1")) {
                return true;
            }
            continue;
        }
        return false;
    }
    false
}

impl TableFormat {
    /// The format for `resource` with the request's `includeObject`.
    pub fn new(resource: &ResourceType, query: &[(String, String)]) -> Result<TableFormat> {
        let include = match query_value(query, "includeObject") {
            None | Some("") | Some("Metadata") => Include::Metadata,
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
                )))
            }
        };
        Ok(TableFormat { resource: resource.clone(), include })
    }

    fn cluster_column(&self) -> Option<usize> {
        kubefold_engine::table::columns(&self.resource).iter().position(|c| c.name == "Cluster")
    }

    /// The column definitions.
    pub fn columns(&self) -> Value {
        let mut columns: Vec<Value> = kubefold_engine::table::columns(&self.resource)
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
            .collect();
        if let Some(i) = self.cluster_column() {
            columns.remove(i);
        }
        Value::Array(columns)
    }

    /// One row for an object.
    pub fn row(&self, object: &Value, now: DateTime<Utc>) -> Value {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let mut cells = kubefold_engine::table::cells(&self.resource, object, name, "", now);
        if let Some(i) = self.cluster_column() {
            if i < cells.len() {
                cells.remove(i);
            }
        }
        let mut row = Map::new();
        row.insert("cells".into(), Value::Array(cells));
        let conditions = kubefold_engine::table::row_conditions(&self.resource, object);
        if !conditions.is_empty() {
            row.insert("conditions".into(), Value::Array(conditions));
        }
        match self.include {
            Include::None => {}
            Include::Metadata => {
                row.insert("object".into(), kubefold_engine::table::partial_object_metadata(object));
            }
            Include::Object => {
                row.insert("object".into(), object.clone());
            }
        }
        Value::Object(row)
    }

    /// A Table of `objects` with list metadata `metadata`; without column
    /// definitions when `headers` is false (watch events after the first).
    pub fn table(&self, objects: &[Value], metadata: Value, headers: bool, now: DateTime<Utc>) -> Value {
        let rows: Vec<Value> = objects.iter().map(|o| self.row(o, now)).collect();
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": if headers { self.columns() } else { Value::Null },
            "rows": rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers_ask_for_tables() {
        assert!(requested("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert!(!requested("application/json"));
        assert!(!requested("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"));
        assert!(!requested("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"));
        assert!(!requested(""));
    }

    #[test]
    fn pod_tables_have_kubectl_columns_without_cluster() {
        let catalog = kubefold_engine::resources::builtin();
        let format = TableFormat { resource: catalog[0].clone(), include: Include::Metadata };
        let names: Vec<String> =
            format.columns().as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(&names[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
        assert!(!names.contains(&"Cluster".to_string()));
        let cluster = crate::workload::Cluster::new("member1", 1, Utc::now());
        let pod = crate::workload::load_pod(&cluster, 3);
        let row = format.row(&pod, Utc::now());
        assert_eq!(row["cells"][0], "load-3");
        assert_eq!(row["cells"][1], "1/1");
        assert_eq!(row["cells"][2], "Running");
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["cells"].as_array().unwrap().len(), names.len());
    }
}
