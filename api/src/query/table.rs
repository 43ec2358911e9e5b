//! Table output (server-side printing, `Accept: ...;as=Table`): the rows of
//! objects as served, their heads, and what a row carries of its object
//! (`includeObject`).

use kubefold_engine::object::ServedBody;
use kubefold_engine::resources::ResourceType;
use kubefold_engine::status::Status;
use serde_json::{json, Value};

/// How a Table row carries its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// PartialObjectMetadata (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses `includeObject`.
    pub fn parse(value: Option<&str>) -> Result<IncludeObject, Status> {
        match value {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(Status::bad_request(format!(
                "includeObject {other:?} is not supported: use None, Metadata or Object"
            ))),
        }
    }
}

/// Builds Table rows.
pub struct TablePrinter {
    resource: ResourceType,
    include: IncludeObject,
    now: chrono::DateTime<chrono::Utc>,
}

impl TablePrinter {
    /// A printer for one request.
    pub fn new(resource: &ResourceType, include: IncludeObject) -> TablePrinter {
        TablePrinter { resource: resource.clone(), include, now: chrono::Utc::now() }
    }

    /// Prints ages as of now from here on: a watch prints each event when it
    /// sends it, as kube-apiserver's printers do (an object's AGE is the
    /// time since its creationTimestamp at printing), not as of the watch's
    /// start.
    pub fn at_now(&mut self) {
        self.now = chrono::Utc::now();
    }

    /// Writes one row for an object as served (its JSON) into `out`.
    ///
    /// Only what the cells read is parsed; the row's object is spliced from
    /// the served bytes: their `metadata` for PartialObjectMetadata (as
    /// kube-apiserver's `meta.AsPartialObjectMetadata`, the whole metadata),
    /// the bytes themselves for includeObject=Object.
    pub fn write_row(&self, served: &[u8], cluster: &str, out: &mut Vec<u8>) {
        let source = kubefold_engine::table::parse_row_source(served, kubefold_engine::table::row_keeps(&self.resource));
        let (object, metadata, valid) = match source {
            Ok(source) => (source.object, source.metadata, true),
            Err(_) => (Value::Null, None, false),
        };
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let cells = kubefold_engine::table::cells(&self.resource, &object, name, cluster, self.now);
        out.extend_from_slice(b"{\"cells\":");
        serde_json::to_writer(&mut *out, &cells).expect("JSON values serialize");
        // Pods that finished carry a `Completed` row condition.
        let conditions = kubefold_engine::table::row_conditions(&self.resource, &object);
        if !conditions.is_empty() {
            out.extend_from_slice(b",\"conditions\":");
            serde_json::to_writer(&mut *out, &conditions).expect("JSON values serialize");
        }
        match self.include {
            IncludeObject::None => {}
            IncludeObject::Metadata => {
                out.extend_from_slice(b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
                out.extend_from_slice(metadata.map_or("{}", |m| m.get()).as_bytes());
                out.push(b'}');
            }
            IncludeObject::Object => {
                out.extend_from_slice(b",\"object\":");
                out.extend_from_slice(if valid { served } else { b"null" });
            }
        }
        out.push(b'}');
    }

    /// Writes one row for a stored body served with `name_suffix` and `rv`:
    /// from the row computed at ingest when the body has one (no parsing),
    /// else as [`TablePrinter::write_row`] does.
    pub fn write_body_row(&self, body: &ServedBody, name_suffix: Option<&str>, rv: u64, cluster: &str, out: &mut Vec<u8>) {
        if let Some(row) = &body.row {
            let start = out.len();
            out.push(b'{');
            if kubefold_engine::table::write_row_template(&row.template, name_suffix.unwrap_or(""), self.now, out) {
                match self.include {
                    IncludeObject::None => {}
                    IncludeObject::Metadata => {
                        out.extend_from_slice(b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
                        if !body.write_metadata(out, name_suffix, rv) {
                            out.extend_from_slice(b"{}");
                        }
                        out.push(b'}');
                    }
                    IncludeObject::Object => {
                        out.extend_from_slice(b",\"object\":");
                        body.write(out, name_suffix, rv);
                    }
                }
                out.push(b'}');
                return;
            }
            out.truncate(start);
        }
        self.write_row(&body.to_bytes(name_suffix, rv), cluster, out);
    }

    /// The start of a Table, up to and including the `[` of its rows; the
    /// rows and `]}` follow. Column definitions unless `no_headers`.
    pub fn head(&self, rv: u64, continue_token: Option<&str>, remaining: Option<usize>, no_headers: bool) -> Vec<u8> {
        let columns = if no_headers { Vec::new() } else { kubefold_engine::table::columns(&self.resource) };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if let Some(t) = continue_token {
            metadata["continue"] = t.into();
        }
        if let Some(remaining) = remaining {
            metadata["remainingItemCount"] = remaining.into();
        }
        let table = json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": columns,
            "rows": [],
        });
        // `rows` is the last member (insertion order is kept): the rows follow its `[`.
        let mut head = table.to_string().into_bytes();
        head.truncate(head.len() - b"]}".len());
        head
    }

    /// A Table of one stored object.
    pub fn single(&self, body: &ServedBody, name_suffix: Option<&str>, rv: u64, cluster: &str, no_headers: bool) -> Vec<u8> {
        let mut out = self.head(rv, None, None, no_headers);
        self.write_body_row(body, name_suffix, rv, cluster, &mut out);
        out.extend_from_slice(b"]}");
        out
    }
}
