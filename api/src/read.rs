//! Reads: list and get, served from a consistent snapshot of the index, with
//! bodies spliced from the store; JSON or Table.
//!
//! resourceVersion semantics follow the Kubernetes API Concepts page
//! ("Resource versions", "Semantics for get and list").
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#the-resourceversion-parameter>

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use kubefold_engine::event::{IndexEntry, ObjectKey};
use kubefold_engine::index::Index;
use kubefold_engine::names::{self, NameStyle, RequestedName};
use kubefold_engine::object::ServedBody;
use kubefold_engine::paging;
use kubefold_engine::resources::ResourceType;
use kubefold_engine::selector::{FieldSelector, LabelSelector, Requirement};
use kubefold_engine::status::Status;
use kubefold_store::ChunkBuf;
use serde_json::{json, Value};

use crate::path::ResourcePath;
use crate::query::{Query, ReadAt};
use crate::respond;
use crate::ApiState;

/// The label-selector key that selects clusters.
pub const CLUSTER_SEARCH_KEY: &str = "kubefold.io/cluster";

/// Which objects a request sees, and how their names are served.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The type.
    pub resource: ResourceType,
    /// `/clusters/{c}` scope.
    pub cluster: Option<String>,
    /// Namespace, for namespaced paths.
    pub namespace: Option<String>,
    /// Names as served: qualified unless the cluster scope or the server says otherwise.
    pub qualified: bool,
}

impl Scope {
    /// The scope of a parsed path.
    pub fn new(state: &ApiState, resource: ResourceType, path: &ResourcePath) -> Scope {
        let qualified = path.cluster.is_none() && state.fleet.name_style() == NameStyle::Qualified;
        let namespace = if resource.namespaced { path.namespace.clone() } else { None };
        Scope { resource, cluster: path.cluster.clone(), namespace, qualified }
    }

    /// The `_cluster` suffix of served names.
    pub fn name_suffix(&self, cluster: &str) -> Option<String> {
        self.qualified.then(|| format!("{}{}", names::SEPARATOR, cluster))
    }

    /// The name of an object as served.
    pub fn served_name(&self, key: &ObjectKey) -> String {
        if self.qualified {
            names::qualify(&key.name, &key.cluster)
        } else {
            key.name.clone()
        }
    }
}

/// Selectable fields that hold the name of another object of the same
/// cluster, which clients write qualified at the fleet level.
const REFERENCE_FIELDS: [&str; 4] = ["spec.nodeName", "involvedObject.name", "regarding.name", "spec.serviceAccountName"];

/// A parsed label and field selector, with the cluster search condition
/// taken out of the label selector.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    clusters: Vec<Requirement>,
    labels: LabelSelector,
    /// Bits of the labels every match has (checked before `labels`).
    label_bits: u64,
    fields: FieldSelector,
}

impl Filter {
    /// Parses the selectors of a request, rejecting invalid ones with 400.
    pub fn parse(resource: &ResourceType, query: &Query) -> Result<Filter, Status> {
        let mut labels = LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))
            .map_err(|e| Status::bad_request(format!("unable to parse requirement: {e}")))?;
        let mut clusters = labels.take_key(CLUSTER_SEARCH_KEY);
        let mut fields = FieldSelector::parse(query.field_selector.as_deref().unwrap_or(""))
            .map_err(|e| Status::bad_request(e.to_string()))?;
        // A field naming another object by its qualified name (`kubectl
        // drain NODE_cluster` lists the node's pods by `spec.nodeName`): the
        // member's own name, in that cluster.
        for term in fields.requirements.iter_mut().filter(|t| !t.negated && REFERENCE_FIELDS.contains(&t.field.as_str())) {
            if let RequestedName::Qualified { name, cluster } = names::parse(&term.value) {
                let (name, cluster) = (name.to_string(), cluster.to_string());
                clusters.push(Requirement { key: CLUSTER_SEARCH_KEY.into(), operator: kubefold_engine::selector::Operator::Equals, values: vec![cluster] });
                term.value = name;
            }
        }
        kubefold_engine::fields::validate(&resource.group, &resource.plural, &fields)
            .map_err(|e| Status::bad_request(e.to_string()))?;
        let label_bits = labels.required_label_bits();
        Ok(Filter { clusters, labels, label_bits, fields })
    }

    /// Whether the outcome can differ between two versions of one object
    /// (label or field selectors); scope and cluster conditions cannot.
    pub fn depends_on_content(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether the request has a label or field selector (the cluster
    /// search key counts: it was written in the label selector).
    /// kube-apiserver leaves `remainingItemCount` out of such a list page,
    /// as its count of the rest would be a guess ("Retrieving large results
    /// sets in chunks", API Concepts).
    /// <https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>
    pub fn has_selector(&self) -> bool {
        self.depends_on_content() || !self.clusters.is_empty()
    }

    /// Whether an object passes the filter and the scope.
    pub fn matches(&self, scope: &Scope, key: &ObjectKey, entry: &IndexEntry) -> bool {
        if let Some(c) = &scope.cluster {
            if &key.cluster != c {
                return false;
            }
        }
        if !self.clusters.iter().all(|r| r.matches_value(Some(&key.cluster))) {
            return false;
        }
        if !self.labels.is_empty() && !(entry.may_have_labels(self.label_bits) && self.labels.matches(|key| entry.label(key))) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let served = scope.served_name(key);
        self.fields.matches(|field| match field {
            "metadata.name" => Some(served.as_str()),
            "metadata.namespace" => Some(key.namespace.as_str()),
            other => entry.field(other),
        })
    }
}

/// Whether the client asked for a Table (server-side printing).
pub fn wants_table(req: &HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept.split(',').next().is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
        })
}

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

/// Finds the object a request names: qualified names always, bare names when
/// exactly one cluster has them (409 Conflict naming the candidates otherwise).
pub fn resolve_name(
    index: &Index,
    scope: &Scope,
    name: &str,
) -> Result<(ObjectKey, Arc<IndexEntry>), Status> {
    let resource = &scope.resource;
    let namespace = scope.namespace.clone().unwrap_or_default();
    let not_found = || Status::not_found(&resource.group, &resource.plural, name);
    if let Some(cluster) = &scope.cluster {
        let key = ObjectKey { namespace, name: name.to_string(), cluster: cluster.clone() };
        let entry = index.get(&resource.key(), &key).ok_or_else(not_found)?.clone();
        return Ok((key, entry));
    }
    match names::parse(name) {
        RequestedName::Qualified { name: member_name, cluster } => {
            let key = ObjectKey { namespace, name: member_name.to_string(), cluster: cluster.to_string() };
            let entry = index.get(&resource.key(), &key).ok_or_else(not_found)?.clone();
            Ok((key, entry))
        }
        RequestedName::Bare(bare) => {
            let found = index.by_name(&resource.key(), &namespace, bare);
            match found.as_slice() {
                [] => Err(not_found()),
                [(key, entry)] => Ok(((*key).clone(), (*entry).clone())),
                many => {
                    let candidates: Vec<String> = many.iter().map(|(k, _)| names::qualify(&k.name, &k.cluster)).collect();
                    Err(Status::conflict(format!(
                        "{} \"{}\" is ambiguous: it exists in {} clusters; use one of the qualified names: {}",
                        resource.plural,
                        bare,
                        many.len(),
                        candidates.join(", ")
                    ))
                    .with_details(&resource.group, &resource.plural, bare))
                }
            }
        }
    }
}

/// Serves a get.
pub fn get(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, query: &Query) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, entry) = resolve_name(&snapshot, scope, name)?;
    let body = state
        .fleet
        .store()
        .body(entry.rv)
        .map_err(|e| Status::internal(e.to_string()))?
        .ok_or_else(|| Status::internal(format!("object body at resourceVersion {} is missing from the store", entry.rv)))?;
    let suffix = scope.name_suffix(&key.cluster);
    if wants_table(req) {
        let printer = TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?);
        return Ok(respond::json_bytes(printer.single(&body, suffix.as_deref(), entry.rv, &key.cluster, false)));
    }
    Ok(respond::json_bytes(body.to_bytes(suffix.as_deref(), entry.rv)))
}

/// Serves a list (all pages read at the first page's snapshot).
pub fn list(state: &ApiState, req: &HttpRequest, scope: &Scope, query: &Query, read_at: ReadAt) -> Result<HttpResponse, Status> {
    let filter = Filter::parse(&scope.resource, query)?;
    let limit = query.limit()?;
    // The snapshot's records are kept from compaction while the list is
    // written (a long list streams for seconds).
    let store = state.fleet.store();
    // `listed_before`: the objects of the pages before this one, when known.
    let ((snapshot, pin), start_after, listed_before) = match query.continue_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => {
            if !matches!(read_at, ReadAt::Latest | ReadAt::Any) {
                return Err(Status::bad_request("specifying resource version is not allowed when using continue"));
            }
            let (rv, key, listed) = paging::decode_listed(&state.token_secret, token).map_err(|e| match e {
                // 410, as for a token older than the compaction: client-go's pager lists again.
                paging::TokenError::Outdated => Status::expired(e.to_string()),
                _ => Status::bad_request(e.to_string()),
            })?;
            (store.pin(|| state.snapshot_at(rv))?, Some(key), listed)
        }
        None => match read_at {
            ReadAt::Exact(rv) => (store.pin(|| state.snapshot_at(rv))?, None, Some(0)),
            _ => (store.pin(|| Ok::<_, Status>(state.fleet.snapshot()))?, None, Some(0)),
        },
    };
    // A page without a selector knows how many objects follow it from the
    // objects of its scope and those before it, without walking the rest:
    // kubectl pages a large list 500 objects at a time, and counting the
    // rest made each page cost a walk over the whole type (7 ms per page at
    // 100k pods). The index keeps the count of every type, namespace,
    // cluster and namespace of a cluster.
    let count_remaining = !filter.has_selector();
    let resource_key = scope.resource.key();
    let scope_objects = count_remaining.then(|| snapshot.count_scope(&resource_key, scope.namespace.as_deref(), scope.cluster.as_deref()));
    // The items as they will be written: their version and their cluster,
    // by its place in `clusters` (no key is copied: a list of a million
    // objects holds 16 bytes per object here).
    let mut clusters: Vec<ListCluster> = Vec::new();
    let mut cluster_at: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    let mut items: Vec<ListItem> = Vec::new();
    let mut last: Option<&ObjectKey> = None;
    let mut more = false;
    let mut remaining = 0usize;
    // A whole list (no limit) longer than a few batches is scanned here only
    // up to its first batches: the rest is scanned on another thread while
    // the list streams (see `ListScan`). Scanning 100k pods took 8 to 10 ms,
    // which every such list spent before its first object was written.
    let mut scan_after: Option<ObjectKey> = None;
    for (key, entry) in snapshot.range(&resource_key, scope.namespace.as_deref(), start_after.as_ref()) {
        if !filter.matches(scope, key, entry) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            if let (Some(objects), Some(before)) = (scope_objects, listed_before) {
                remaining = objects.saturating_sub(before as usize + items.len());
                break;
            }
            if !count_remaining {
                // Not reported with a selector: one more object is enough.
                break;
            }
            remaining += 1;
            continue;
        }
        items.push(ListItem { cluster: cluster_of(key, scope, &mut clusters, &mut cluster_at), rv: entry.rv });
        last = Some(key);
        if limit.is_none() && items.len() > STREAMED_FROM_THE_HEAD {
            scan_after = Some(key.clone());
            break;
        }
    }
    // From here on only the listed objects' records are kept (once the
    // scan of a whole list is done, see `ListScan`).
    if scan_after.is_none() {
        pin.narrow(items.iter().map(|item| item.rv).collect());
    }
    let rv = snapshot.head_rv();
    let listed = listed_before.filter(|_| count_remaining).map(|before| before + items.len() as u64);
    let token = if more { last.map(|k| paging::encode_listed(&state.token_secret, rv, k, listed)) } else { None };
    let (head, writer) = if wants_table(req) {
        let printer = TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?);
        let head = printer.head(rv, token.as_deref(), (more && count_remaining).then_some(remaining), false);
        (head, ItemWriter::Table(printer))
    } else {
        let mut head = format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"",
            scope.resource.list_kind(),
            scope.resource.api_version(),
            rv
        )
        .into_bytes();
        if let Some(t) = &token {
            head.extend_from_slice(format!(",\"continue\":\"{t}\"").as_bytes());
            if count_remaining {
                head.extend_from_slice(format!(",\"remainingItemCount\":{remaining}").as_bytes());
            }
        }
        head.extend_from_slice(b"},\"items\":[");
        (head, ItemWriter::Json)
    };
    let scan = scan_after.map(|after| ListScan { snapshot: snapshot.clone(), resource_key, scope: scope.clone(), filter, after, cluster_at });
    let mut list = ListBody {
        pin: Arc::new(pin),
        store: store.clone(),
        items: Arc::new(items),
        clusters: Arc::new(clusters),
        writer: Arc::new(writer),
        head: Some(head),
        pos: 0,
        done: false,
        scan,
    };
    // A list that fits one chunk is answered at once (with its length), a
    // longer one is streamed chunk by chunk: a worker thread never builds a
    // whole large list (it serves other requests between chunks) and a list
    // costs a few chunks of memory beyond its keys, however many run at once.
    // A list of more than a few batches is sent from its head on, all its
    // objects written batch by batch (see `ListBody::rest`): a first chunk
    // written here held the client up before the rest's scan started (and
    // read its records one by one).
    let first = if list.items.len() > STREAMED_FROM_THE_HEAD { list.head_only() } else { list.chunk()? };
    // gzip when the client asks for it and the list is larger than the
    // threshold: known at once for a list of one chunk; a streamed list is
    // over it (more than one chunk, or more objects than a few batches).
    // A protobuf list is encoded (and compressed) whole by `protobuf::response`.
    let gzip = state.config.compress_lists && crate::gzip::accepted(req.headers()) && !crate::protobuf::wanted(req, &scope.resource);
    if list.done {
        if gzip && first.len() > crate::gzip::THRESHOLD_BYTES {
            let body = crate::gzip::Member::whole(first.written());
            give_back(first);
            return Ok(gzipped(&mut HttpResponse::Ok()).content_type("application/json").body(body));
        }
        return Ok(respond::json_bytes(web::Bytes::from_owner(PooledChunk(first))));
    }
    let mut member = gzip.then(crate::gzip::Member::default);
    let first = match member.as_mut() {
        Some(member) => {
            let mut bytes = crate::gzip::Member::HEADER.to_vec();
            bytes.extend_from_slice(&member.add(crate::gzip::Piece::deflate(first.written())));
            give_back(first);
            web::Bytes::from(bytes)
        }
        None => web::Bytes::from_owner(PooledChunk(first)),
    };
    let body = futures::stream::once(async move { Ok::<_, actix_web::Error>(first) }).chain(list.rest(member));
    let mut response = HttpResponse::Ok();
    if gzip {
        gzipped(&mut response);
    }
    Ok(response.content_type("application/json").streaming(body))
}

/// Marks a response as gzip-encoded, as kube-apiserver does
/// (`Content-Encoding: gzip`, `Vary: Accept-Encoding`).
fn gzipped(response: &mut actix_web::HttpResponseBuilder) -> &mut actix_web::HttpResponseBuilder {
    response.insert_header((actix_web::http::header::CONTENT_ENCODING, "gzip")).insert_header((actix_web::http::header::VARY, "Accept-Encoding"))
}

/// Bytes of a list response produced per chunk.
const LIST_CHUNK_BYTES: usize = 1 << 20;

/// Buffers of long lists' chunks, given back when the HTTP worker has
/// copied their bytes out, and taken again for the next chunks (at most
/// [`POOLED_CHUNKS`] kept): a new buffer per chunk was fresh memory for the
/// producers to write and the worker to read (100k pods, lists alternating
/// with a build making a buffer per chunk: CPU 250 vs 270 ms median,
/// 198 vs 203 ms).
static CHUNK_POOL: std::sync::Mutex<Vec<ChunkBuf>> = std::sync::Mutex::new(Vec::new());

/// Chunk buffers kept in [`CHUNK_POOL`]: those of two long lists in flight.
const POOLED_CHUNKS: usize = 8;

/// A buffer for a chunk of about `bytes`: one given back, else a new one.
fn chunk_buffer(bytes: usize) -> ChunkBuf {
    let mut buf = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    buf.reserve(bytes);
    buf
}

/// A chunk sent to the client; its buffer goes back to [`CHUNK_POOL`]
/// once the response has copied it out.
struct PooledChunk(ChunkBuf);

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        self.0.written()
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self.0));
    }
}

/// Gives a chunk buffer back to [`CHUNK_POOL`] (unless the pool is full
/// or the buffer grew large).
fn give_back(mut buf: ChunkBuf) {
    if buf.capacity() > 2 * LIST_CHUNK_BYTES {
        return;
    }
    buf.clear();
    let mut pool = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < POOLED_CHUNKS {
        pool.push(buf);
    }
}

/// `inner`, turning to the worker's other work after each item: before
/// `inner` is polled again, the task yields with `tokio::task::yield_now`,
/// which has the runtime wake it only after it ran its other ready tasks
/// and polled its I/O driver. actix-http asks a response body for chunks
/// for as long as its socket takes bytes, which for a client reading as
/// fast as a list is written can be much of the list; an HTTP worker's
/// other connections (gets, watch events) so wait for one chunk, not for
/// the list. (A task that wakes itself at once is polled again before the
/// driver, which a current-thread runtime polls only every 61 tasks when
/// tasks are always ready: gets beside a list of 100k pods waited up to
/// 14 and 39 ms that way in two series, against 2.6 and 8.0 ms now.)
fn taking_turns<S: futures::Stream + Unpin>(mut inner: S) -> impl futures::Stream<Item = S::Item> {
    let mut turn: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = None;
    futures::stream::poll_fn(move |cx| {
        if let Some(yielding) = turn.as_mut() {
            std::task::ready!(yielding.as_mut().poll(cx));
            turn = None;
        }
        let item = std::task::ready!(inner.poll_next_unpin(cx));
        if item.is_some() {
            turn = Some(Box::pin(tokio::task::yield_now()));
        }
        std::task::Poll::Ready(item)
    })
}

/// A chunk of a long list from its producer: its bytes, or (gzip) its
/// bytes deflated.
enum Produced {
    Plain(ChunkBuf),
    Deflated(crate::gzip::Piece),
}

impl Produced {
    /// `chunk`, deflated when the list is sent with gzip (the buffer then
    /// goes back to the pool).
    fn of(chunk: ChunkBuf, gzip: bool) -> Produced {
        if !gzip {
            return Produced::Plain(chunk);
        }
        let piece = crate::gzip::Piece::deflate(chunk.written());
        give_back(chunk);
        Produced::Deflated(piece)
    }
}

/// Threads that produce the rest of a long Table or gzip list, batch by
/// batch in turn.
const LIST_PRODUCERS: usize = 2;

/// Objects per batch of a long list's rest (a batch larger than
/// [`LIST_CHUNK_BYTES`] is sent in chunks of about that size).
const LIST_BATCH_ITEMS: usize = 128;

/// Lists of more objects than this are written batch by batch from their
/// first object on, see [`list`].
const STREAMED_FROM_THE_HEAD: usize = 4 * LIST_BATCH_ITEMS;

/// Lists whose rest is being streamed, counted while their stream lives.
static STREAMING_LISTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One list counted in [`STREAMING_LISTS`] until dropped.
struct StreamingList {
    /// Lists that were streaming when this one started.
    others: usize,
}

impl StreamingList {
    fn start() -> StreamingList {
        StreamingList { others: STREAMING_LISTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) }
    }
}

impl Drop for StreamingList {
    fn drop(&mut self) {
        STREAMING_LISTS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One object of a list: its cluster (its place in the list's
/// [`ListCluster`]s) and version.
struct ListItem {
    cluster: u32,
    rv: u64,
}

/// A cluster of a list's objects: its name and the suffix of its objects' names.
#[derive(Clone)]
struct ListCluster {
    name: String,
    suffix: Option<String>,
}

/// The place of `key`'s cluster in `clusters`, added when new.
fn cluster_of(key: &ObjectKey, scope: &Scope, clusters: &mut Vec<ListCluster>, cluster_at: &mut std::collections::BTreeMap<String, u32>) -> u32 {
    if let Some(at) = cluster_at.get(key.cluster.as_str()) {
        return *at;
    }
    clusters.push(ListCluster { name: key.cluster.clone(), suffix: scope.name_suffix(&key.cluster) });
    let at = (clusters.len() - 1) as u32;
    cluster_at.insert(key.cluster.clone(), at);
    at
}

/// The rest of a whole list's scan, after the objects [`list`] scanned
/// itself: done on the thread that hands out the list's batches, so that
/// the first batches are written at once.
struct ListScan {
    snapshot: Arc<Index>,
    resource_key: String,
    scope: Scope,
    filter: Filter,
    /// The last object scanned by [`list`].
    after: ObjectKey,
    /// The places of the clusters in the list's [`ListCluster`]s so far.
    cluster_at: std::collections::BTreeMap<String, u32>,
}

/// Work for a list's writer: a batch of items, or the end of the list.
enum Feed {
    Batch {
        /// The place of the batch's first item in the list.
        first: usize,
        items: Vec<ListItem>,
        /// The list's clusters as far as these items go.
        clusters: Arc<Vec<ListCluster>>,
    },
    End,
}

/// Hands the items of a list from `from` on with `send`, a batch at a time
/// (to the HTTP worker, or to producers in turn): those already known,
/// then (with `scan`) those scanned after them. Then sends the end and
/// narrows `pin` to the listed objects. Stops when `send` fails (the
/// list's writer went away, so did the client).
fn feed(known: &[ListItem], from: usize, clusters: Arc<Vec<ListCluster>>, scan: Option<ListScan>, pin: &kubefold_store::ReadPin, mut send: impl FnMut(Feed) -> bool) {
    let mut first = from;
    for batch in known[from.min(known.len())..].chunks(LIST_BATCH_ITEMS) {
        if !send(Feed::Batch { first, items: batch.iter().map(|item| ListItem { cluster: item.cluster, rv: item.rv }).collect(), clusters: clusters.clone() }) {
            return;
        }
        first += batch.len();
    }
    if let Some(mut scan) = scan {
        let mut clusters = clusters;
        let mut rvs: Vec<u64> = known.iter().map(|item| item.rv).collect();
        let mut batch: Vec<ListItem> = Vec::with_capacity(LIST_BATCH_ITEMS);
        for (key, entry) in scan.snapshot.range(&scan.resource_key, scan.scope.namespace.as_deref(), Some(&scan.after)) {
            if !scan.filter.matches(&scan.scope, key, entry) {
                continue;
            }
            let cluster = match scan.cluster_at.get(key.cluster.as_str()) {
                Some(at) => *at,
                None => cluster_of(key, &scan.scope, Arc::make_mut(&mut clusters), &mut scan.cluster_at),
            };
            batch.push(ListItem { cluster, rv: entry.rv });
            rvs.push(entry.rv);
            if batch.len() == LIST_BATCH_ITEMS {
                let items = std::mem::replace(&mut batch, Vec::with_capacity(LIST_BATCH_ITEMS));
                if !send(Feed::Batch { first, items, clusters: clusters.clone() }) {
                    return;
                }
                first += LIST_BATCH_ITEMS;
            }
        }
        if !batch.is_empty() && !send(Feed::Batch { first, items: batch, clusters: clusters.clone() }) {
            return;
        }
        pin.narrow(rvs.into());
    }
    send(Feed::End);
}

/// How the items of a list are written.
enum ItemWriter {
    /// As the objects (a `*List`).
    Json,
    /// As Table rows.
    Table(TablePrinter),
}

impl ItemWriter {
    /// Writes one item, read from the store (from `ahead` when it holds
    /// its record), to `out`.
    fn write(&self, store: &kubefold_store::Store, ahead: &kubefold_store::ReadAhead, item: &ListItem, clusters: &[ListCluster], out: &mut ChunkBuf) -> Result<(), Status> {
        let cluster = &clusters[item.cluster as usize];
        let gone = || Status::expired(format!("object version {} is no longer retained; list again", item.rv));
        match self {
            // Decompressed straight into the chunk.
            ItemWriter::Json => {
                if !store.write_served_from(ahead, item.rv, cluster.suffix.as_deref(), out).map_err(|e| Status::internal(e.to_string()))? {
                    return Err(gone());
                }
            }
            ItemWriter::Table(printer) => {
                let body = store.body_from(ahead, item.rv).map_err(|e| Status::internal(e.to_string()))?.ok_or_else(gone)?;
                out.with_vec(|out| printer.write_body_row(&body, cluster.suffix.as_deref(), item.rv, &cluster.name, out))
            }
        }
        Ok(())
    }
}

/// A list response being produced: its head, then items read from the store
/// a chunk at a time, then the closing brackets.
struct ListBody {
    /// Keeps the items' records from compaction until the list is written
    /// (or its client went away).
    pin: Arc<kubefold_store::ReadPin>,
    store: kubefold_store::Store,
    items: Arc<Vec<ListItem>>,
    clusters: Arc<Vec<ListCluster>>,
    writer: Arc<ItemWriter>,
    head: Option<Vec<u8>>,
    /// The next item to write.
    pos: usize,
    done: bool,
    /// The rest of the scan, when `items` are only the first of the list's.
    scan: Option<ListScan>,
}

impl ListBody {
    /// The list's head alone, as its first chunk.
    fn head_only(&mut self) -> ChunkBuf {
        let head = self.head.take().unwrap_or_default();
        let mut out = chunk_buffer(head.len());
        out.extend_from_slice(&head);
        out
    }

    /// The next chunk (about [`LIST_CHUNK_BYTES`]); sets `done` after the last.
    fn chunk(&mut self) -> Result<ChunkBuf, Status> {
        let head = self.head.take().unwrap_or_default();
        let mut out = chunk_buffer(head.len() + LIST_CHUNK_BYTES.min((self.items.len() - self.pos) * 4096) + 64);
        out.extend_from_slice(&head);
        while out.len() < LIST_CHUNK_BYTES {
            let Some(item) = self.items.get(self.pos) else {
                out.extend_from_slice(b"]}");
                self.done = true;
                break;
            };
            if self.pos > 0 {
                out.push(b',');
            }
            self.pos += 1;
            self.writer.write(&self.store, &kubefold_store::ReadAhead::default(), item, &self.clusters, &mut out)?;
        }
        Ok(out)
    }

    /// The rest of the list after its first chunk. The batches' items come
    /// from [`feed`] on a blocking thread (which also scans the rest of a
    /// whole list). A JSON list sent as it is is written by the HTTP worker
    /// itself, a chunk each time the response asks for one: see
    /// [`ListBody::rest_on_worker`]. A Table or a gzip list is made by
    /// producers beside the worker: see [`ListBody::rest_produced`].
    fn rest(self, member: Option<crate::gzip::Member>) -> impl futures::Stream<Item = Result<web::Bytes, actix_web::Error>> {
        match (member, &*self.writer) {
            (None, ItemWriter::Json) => self.rest_on_worker().left_stream(),
            (member, _) => self.rest_produced(member).right_stream(),
        }
    }

    /// The rest of a JSON list, each chunk written on the HTTP worker when
    /// the response asks for it (when actix-http's write buffer has room:
    /// a chunk is made only as fast as the client reads, and a client that
    /// stops reading costs no CPU). After each chunk the stream yields to the
    /// worker's other connections (gets, watch events), which so wait one
    /// chunk at most.
    ///
    /// Kubernetes encodes a list on the goroutine serving its request;
    /// kubefold wrote plain lists on two threads beside the worker before.
    /// Handing every chunk from thread to thread cost more than it gained
    /// on 2 cores with the client on the same machine: 100k pods read with
    /// the suite's client, 128.1 against 144.8 ms median and 127 against
    /// 148 ms of CPU per list (BENCHMARKS.md, "A plain list is written on
    /// the HTTP worker"). A client on another machine leaves the cores to
    /// kubefold, where the threads would make one list faster and many
    /// lists slower.
    ///
    /// The records are read on the worker: from the page cache in the
    /// common case; from disk after a restart, a batch's reads at a time.
    fn rest_on_worker(self) -> impl futures::Stream<Item = Result<web::Bytes, actix_web::Error>> {
        /// The batch being written.
        struct Current {
            first: usize,
            items: Vec<ListItem>,
            clusters: Arc<Vec<ListCluster>>,
            ahead: kubefold_store::ReadAhead,
            /// The next item to write.
            pos: usize,
        }
        let start = self.pos;
        let (input, mut batches) = tokio::sync::mpsc::unbounded_channel::<Feed>();
        let (items, clusters, scan, pin) = (self.items, self.clusters, self.scan, self.pin.clone());
        tokio::task::spawn_blocking(move || feed(&items, start, clusters, scan, &pin, |batch| input.send(batch).is_ok()));
        let (store, writer, pin) = (self.store, self.writer, self.pin);
        let mut current: Option<Current> = None;
        let mut ended = false;
        taking_turns(futures::stream::poll_fn(move |cx| {
            let _pin = &pin;
            if ended {
                return std::task::Poll::Ready(None);
            }
            let failed = |message: String| {
                tracing::warn!(%message, "List ended early.");
                Some(Err(actix_web::error::ErrorInternalServerError(message)))
            };
            let batch = match &mut current {
                Some(batch) => batch,
                None => match std::task::ready!(batches.poll_recv(cx)) {
                    Some(Feed::Batch { first, items, clusters }) => match store.read_ahead(items.iter().map(|item| item.rv)) {
                        Ok(ahead) => current.insert(Current { first, items, clusters, ahead, pos: 0 }),
                        Err(e) => {
                            ended = true;
                            return std::task::Poll::Ready(failed(e.to_string()));
                        }
                    },
                    Some(Feed::End) => {
                        ended = true;
                        return std::task::Poll::Ready(Some(Ok(web::Bytes::from_static(b"]}"))));
                    }
                    None => {
                        ended = true;
                        return std::task::Poll::Ready(failed("the list's scan stopped".to_string()));
                    }
                },
            };
            let mut out = chunk_buffer(LIST_CHUNK_BYTES.min((batch.items.len() - batch.pos) * 4096) + 64);
            while out.len() < LIST_CHUNK_BYTES && batch.pos < batch.items.len() {
                if batch.first + batch.pos > 0 {
                    out.push(b',');
                }
                if let Err(status) = writer.write(&store, &batch.ahead, &batch.items[batch.pos], &batch.clusters, &mut out) {
                    ended = true;
                    give_back(out);
                    return std::task::Poll::Ready(failed(status.message));
                }
                batch.pos += 1;
            }
            if batch.pos == batch.items.len() {
                current = None;
            }
            std::task::Poll::Ready(Some(Ok(web::Bytes::from_owner(PooledChunk(out)))))
        }))
    }

    /// The rest of a Table or gzip list, made on blocking threads
    /// ([`LIST_PRODUCERS`] for a list streamed alone, else one), each a
    /// batch at a time, a chunk ahead of the client, and sent in order.
    /// These cost much more CPU per byte sent than a JSON list (a row is
    /// printed from each object; deflating a chunk takes several times as
    /// long as writing it): the threads make a list faster where passing
    /// its chunks on costs little beside making them (a Table of 100k pods,
    /// sent plain, 30 lists each alternating: 66.6 ms median on two threads,
    /// 91.5 ms on the worker), and
    /// keep that work off the worker's other connections. Memory: about
    /// two chunks per producer, per list.
    fn rest_produced(self, mut member: Option<crate::gzip::Member>) -> impl futures::Stream<Item = Result<web::Bytes, actix_web::Error>> {
        let gzip = member.is_some();
        let start = self.pos;
        let batches = (self.items.len() - start).div_ceil(LIST_BATCH_ITEMS);
        // Two threads only for a list streamed alone: with others streaming,
        // the cores are busy already and more threads would only take turns.
        let streaming = StreamingList::start();
        let mut producers = if streaming.others == 0 { LIST_PRODUCERS } else { 1 };
        if self.scan.is_none() {
            producers = producers.min(batches).max(1);
        }
        let (inputs, receivers): (Vec<_>, Vec<_>) = (0..producers)
            .map(|_| {
                let (input, batches) = std::sync::mpsc::channel::<Feed>();
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<Option<(Produced, bool)>, String>>(1);
                let (store, writer) = (self.store.clone(), self.writer.clone());
                tokio::task::spawn_blocking(move || produce(&store, &writer, &batches, gzip, &tx));
                (input, rx)
            })
            .unzip();
        let (items, clusters, scan, pin) = (self.items, self.clusters, self.scan, self.pin.clone());
        tokio::task::spawn_blocking(move || {
            let mut next = 0usize;
            feed(&items, start, clusters, scan, &pin, |batch| {
                let sent = inputs[next % inputs.len()].send(batch).is_ok();
                next += 1;
                sent
            })
        });
        let (mut receivers, mut current, mut ended) = (receivers, 0, false);
        let pin = self.pin;
        futures::stream::poll_fn(move |cx| {
            let (_streaming, _pin) = (&streaming, &pin);
            if ended {
                return std::task::Poll::Ready(None);
            }
            let failed = |message: String| {
                tracing::warn!(%message, "List ended early.");
                Some(Err(actix_web::error::ErrorInternalServerError(message)))
            };
            std::task::Poll::Ready(match std::task::ready!(receivers[current].poll_recv(cx)) {
                Some(Ok(Some((chunk, last_of_batch)))) => {
                    if last_of_batch {
                        current = (current + 1) % receivers.len();
                    }
                    Some(Ok(match (chunk, member.as_mut()) {
                        (Produced::Plain(chunk), _) => web::Bytes::from_owner(PooledChunk(chunk)),
                        (Produced::Deflated(piece), Some(member)) => web::Bytes::from(member.add(piece)),
                        (Produced::Deflated(_), None) => unreachable!("chunks are deflated only for a gzip member"),
                    }))
                }
                Some(Ok(None)) => {
                    ended = true;
                    Some(Ok(match member.take() {
                        Some(mut member) => {
                            let mut end = member.add(crate::gzip::Piece::deflate(b"]}"));
                            end.extend_from_slice(&member.end());
                            web::Bytes::from(end)
                        }
                        None => web::Bytes::from_static(b"]}"),
                    }))
                }
                Some(Err(message)) => {
                    ended = true;
                    failed(message)
                }
                None => {
                    ended = true;
                    failed("a list producer stopped".to_string())
                }
            })
        })
    }
}

/// Produces the batches [`feed`] hands this producer, in order (deflated
/// with `gzip`); each batch's last chunk is marked, and the end of the list
/// is passed on. Stops at the end, at an error (sent on) or when the
/// client went away.
fn produce(store: &kubefold_store::Store, writer: &ItemWriter, batches: &std::sync::mpsc::Receiver<Feed>, gzip: bool, tx: &tokio::sync::mpsc::Sender<Result<Option<(Produced, bool)>, String>>) {
    while let Ok(feed) = batches.recv() {
        let Feed::Batch { first, items, clusters } = feed else {
            let _ = tx.blocking_send(Ok(None));
            return;
        };
        let mut out = chunk_buffer(LIST_CHUNK_BYTES.min(items.len() * 4096) + 64);
        // The batch's records, neighbours read together.
        let ahead = match store.read_ahead(items.iter().map(|item| item.rv)) {
            Ok(ahead) => ahead,
            Err(e) => {
                let _ = tx.blocking_send(Err(e.to_string()));
                return;
            }
        };
        for (i, item) in items.iter().enumerate() {
            if out.len() >= LIST_CHUNK_BYTES && tx.blocking_send(Ok(Some((Produced::of(std::mem::replace(&mut out, chunk_buffer(LIST_CHUNK_BYTES)), gzip), false)))).is_err() {
                return;
            }
            if first + i > 0 {
                out.push(b',');
            }
            if let Err(status) = writer.write(store, &ahead, item, &clusters, &mut out) {
                let _ = tx.blocking_send(Err(status.message));
                return;
            }
        }
        if tx.blocking_send(Ok(Some((Produced::of(out, gzip), true)))).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// After each item the stream gives its task's other work a turn: one
    /// `Pending` with the task woken (outside a runtime at once, so it is
    /// polled again without any other event), then the next item; the end
    /// comes at once after the last item's turn, and an inner `Pending` is
    /// passed on as it is.
    #[test]
    fn a_list_stream_takes_turns_after_each_chunk() {
        let wakes = Arc::new(Wakes::default());
        let waker = futures::task::waker(wakes.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::Relaxed);
        let mut pending_once = true;
        let mut items = vec![1, 2].into_iter();
        let inner = futures::stream::poll_fn(move |_| {
            if pending_once {
                pending_once = false;
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(items.next())
        });
        let mut stream = std::pin::pin!(taking_turns(inner));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "the inner stream's Pending");
        assert_eq!(woken(), 0, "an inner Pending is left to the inner stream's waker");
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(Some(1)));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "a turn after the first item");
        assert_eq!(woken(), 1, "the turn wakes its task");
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(Some(2)));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "a turn after the second item");
        assert_eq!(woken(), 2);
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(None));
        assert_eq!(woken(), 2, "the end takes no turn");
    }

    /// On a current-thread runtime (as an actix worker runs), a connection
    /// whose bytes have arrived is served after one item of a stream that
    /// is always ready, not after the runtime's periodic I/O poll: a reader
    /// whose byte is already sent gets it while a consumer drains an endless
    /// stream through `taking_turns`, within a few items. (With the task
    /// woken at once instead of deferred, the reader waited for 61 items.)
    #[test]
    fn io_is_served_between_the_chunks_of_an_endless_list() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let consumed_when_read = runtime.block_on(async {
            let (mut reader, mut writer) = tokio::net::UnixStream::pair().unwrap();
            writer.write_all(b"x").await.unwrap();
            let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let read = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reading = {
                let (consumed, read) = (consumed.clone(), read.clone());
                tokio::spawn(async move {
                    let mut byte = [0u8; 1];
                    reader.read_exact(&mut byte).await.unwrap();
                    read.store(true, std::sync::atomic::Ordering::Relaxed);
                    consumed.load(std::sync::atomic::Ordering::Relaxed)
                })
            };
            let consuming = {
                let (consumed, read) = (consumed.clone(), read.clone());
                tokio::spawn(async move {
                    let mut chunks = taking_turns(futures::stream::repeat(()));
                    while !read.load(std::sync::atomic::Ordering::Relaxed) && consumed.load(std::sync::atomic::Ordering::Relaxed) < 100_000 {
                        chunks.next().await;
                        consumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            };
            consuming.await.unwrap();
            reading.await.unwrap()
        });
        assert!(consumed_when_read < 5, "the reader got its byte after {consumed_when_read} items of the endless stream");
    }
}
