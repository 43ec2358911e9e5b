//! Edits forwarded to the cluster that owns the object: update, patch,
//! delete, create, deletecollection, the status and scale subresources, and
//! pod logs. Bodies are translated (name unqualified, kubefold's annotations
//! removed, the global resourceVersion turned into the member's), the
//! member's answer is passed back, and a successful edit waits until kubefold
//! has ingested it (read-your-writes) so that the next read shows it.
//! On a member that impersonates, each forwarded request acts as the
//! authenticated caller ([`members::client_as`]).

use std::sync::Arc;

use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use futures::StreamExt;
use http::Method;
use kubefold_engine::event::{IndexEntry, ObjectKey};
use kubefold_engine::names::{self, RequestedName};
use kubefold_engine::object::{self, KUBEFOLD_ANNOTATION_PREFIX};
use kubefold_engine::status::Status;
use serde_json::Value;

use crate::decode;
use crate::members::{self, MemberResponse};
use crate::placement;
use crate::read::{resolve_name, Scope, CLUSTER_SEARCH_KEY};
use crate::respond;
use crate::ApiState;

/// Decodes a request body as JSON or YAML, by its Content-Type, off the
/// HTTP worker and within the budget of [`decode`].
async fn parse_body(req: &HttpRequest, body: &Bytes) -> Result<Value, Status> {
    let format = decode::Format::of_content_type(content_type(req).unwrap_or("application/json"));
    decode::decode(body.clone(), format, peer(req)).await.map_err(|e| {
        e.to_status("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml")
    })
}

/// The request's connection, watched while its body is decoded.
fn peer(req: &HttpRequest) -> Option<crate::watch::ConnectionSocket> {
    req.conn_data::<crate::watch::ConnectionSocket>().cloned()
}

fn content_type(req: &HttpRequest) -> Option<&str> {
    let content_type = req.headers().get(actix_web::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok())?;
    // A protobuf body was decoded to JSON on arrival (see `protobuf`; a
    // patch is not).
    if kubefold_proto::is_protobuf(content_type) && req.method() != actix_web::http::Method::PATCH {
        return Some(respond::JSON);
    }
    Some(content_type)
}

/// The member's path of an object (and subresource), with the request's query.
fn member_path(scope: &Scope, key: &ObjectKey, subresource: Option<&str>, query: &str) -> String {
    let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    let mut path = format!("{}/{}", scope.resource.collection_path(ns), key.name);
    if let Some(sub) = subresource {
        path.push('/');
        path.push_str(sub);
    }
    if !query.is_empty() {
        path.push('?');
        path.push_str(query);
    }
    path
}

/// Notes the member an edit acts on, for the audit log.
fn acted_on(req: &HttpRequest, cluster: &str) {
    req.extensions_mut().insert(crate::audit::ActedOn(cluster.to_string()));
}

/// The member's answer passed back unchanged (errors are Status objects).
fn passthrough(response: &MemberResponse) -> HttpResponse {
    let code = actix_web::http::StatusCode::from_u16(response.status).unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
    HttpResponse::build(code).content_type(respond::JSON).body(response.body.clone())
}

fn conflict(scope: &Scope, served_name: &str) -> Status {
    let r = &scope.resource;
    let what = if r.group.is_empty() { r.plural.clone() } else { format!("{}.{}", r.plural, r.group) };
    Status::conflict(format!(
        "Operation cannot be fulfilled on {what} \"{served_name}\": the object has been modified; please apply your changes to the latest version and try again"
    ))
    .with_details(&r.group, &r.plural, served_name)
}

/// Checks a client's `metadata.resourceVersion` (a global RV) against the
/// object's and translates it to the member's; `Ok(None)` when absent.
fn translate_rv(scope: &Scope, key: &ObjectKey, entry: &IndexEntry, object: &Value) -> Result<Option<String>, Status> {
    match object["metadata"]["resourceVersion"].as_str() {
        None | Some("") => Ok(None),
        Some(rv) => match rv.parse::<u64>() {
            Ok(n) if n == entry.rv => Ok(Some(entry.member_rv().to_string())),
            _ => Err(conflict(scope, &scope.served_name(key))),
        },
    }
}

/// Translates the operations of a JSON patch (RFC 6902) that touch
/// `/metadata/resourceVersion` or `/metadata/name`: the global RV kubefold
/// served becomes the object's member RV, a qualified name the member's name.
///
/// A `replace` or `add` of a resourceVersion that is not the object's current
/// one is 409 Conflict, as kube-apiserver answers an update whose
/// resourceVersion is stale; a `test` of one fails as kube-apiserver's
/// failing `test` operation does (422, "the server rejected our request due
/// to an error in our request"). Neither reaches the member.
/// See <https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply>.
fn translate_json_patch(scope: &Scope, key: &ObjectKey, entry: &IndexEntry, operations: &mut Value, url_name: &str) -> Result<(), Status> {
    let Some(operations) = operations.as_array_mut() else {
        return Err(Status::bad_request("invalid JSON patch: the patch must be a list of operations"));
    };
    for operation in operations.iter_mut() {
        let op = operation["op"].as_str().unwrap_or_default().to_string();
        if !matches!(op.as_str(), "add" | "replace" | "test") {
            continue;
        }
        match operation["path"].as_str() {
            Some("/metadata/resourceVersion") => {
                let Some(rv) = operation["value"].as_str() else { continue };
                if rv.parse::<u64>().is_ok_and(|n| n == entry.rv) {
                    operation["value"] = Value::String(entry.member_rv().to_string());
                } else if op == "test" {
                    return Err(Status::new(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request: testing value /metadata/resourceVersion failed: test failed",
                    ));
                } else {
                    return Err(conflict(scope, &scope.served_name(key)));
                }
            }
            Some("/metadata/name") if operation["value"].is_string() => {
                check_body_name(scope, key, &serde_json::json!({"metadata": {"name": operation["value"]}}), url_name)?;
                operation["value"] = Value::String(key.name.clone());
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that a body's `metadata.name`, when given, names the same object as the URL.
fn check_body_name(scope: &Scope, key: &ObjectKey, object: &Value, url_name: &str) -> Result<(), Status> {
    let Some(name) = object["metadata"]["name"].as_str() else { return Ok(()) };
    let same = match (scope.cluster.is_some(), names::parse(name)) {
        (true, _) => name == key.name,
        (false, RequestedName::Qualified { name, cluster }) => name == key.name && cluster == key.cluster,
        (false, RequestedName::Bare(bare)) => bare == key.name,
    };
    if same {
        Ok(())
    } else {
        Err(Status::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({url_name})"
        )))
    }
}

/// Whether member RV `seen` is at or past `wanted` (numeric when both are).
fn reached(seen: &str, wanted: &str) -> bool {
    match (seen.parse::<u64>(), wanted.parse::<u64>()) {
        (Ok(a), Ok(b)) => a >= b,
        _ => seen == wanted,
    }
}

/// Waits until the index holds `key` at member RV `member_rv` or later (or
/// without `key`, for `gone`). Returns the entry, or `None` after the wait.
async fn wait_ingested(state: &ApiState, scope: &Scope, key: &ObjectKey, member_rv: &str, gone: bool) -> Option<Option<Arc<IndexEntry>>> {
    let deadline = tokio::time::Instant::now() + state.config.write_wait;
    let resource = scope.resource.key();
    state
        .fleet
        .wait_for(deadline, |snapshot| match snapshot.get(&resource, key) {
            None if gone => Some(None),
            Some(e) if reached(e.member_rv(), member_rv) => Some(Some(e.clone())),
            _ => None,
        })
        .await
}

/// Whether the request asks for a dry run (`dryRun=All`): the member
/// changes nothing, so there is nothing to wait for.
fn is_dry_run(req: &HttpRequest) -> bool {
    serde_urlencoded::from_str::<Vec<(String, String)>>(req.query_string()).is_ok_and(|q| q.iter().any(|(k, v)| k == "dryRun" && !v.is_empty()))
}

/// Turns a member's successful answer into kubefold's: the object as served
/// once ingested, or the translated member object with a warning if the
/// wait timed out.
///
/// A dry run (`dryRun=All`, as `kubectl diff` and `--dry-run=server` send)
/// changed nothing, so nothing is waited for.
async fn reply_with_object(state: &ApiState, dry_run: bool, scope: &Scope, key: &ObjectKey, response: &MemberResponse, created: bool) -> HttpResponse {
    let ok = if created && response.status == 201 { HttpResponse::Created() } else { HttpResponse::Ok() };
    let ingested = match object::ingest(&scope.resource, &key.cluster, &response.body) {
        Ok(i) => i,
        Err(_) => return passthrough(response),
    };
    if dry_run {
        let current = state.fleet.snapshot();
        let rv = current.get(&scope.resource.key(), key).map_or(current.head_rv(), |e| e.rv);
        let mut builder = ok;
        return builder.content_type(respond::JSON).body(ingested.body.to_bytes(scope.name_suffix(&key.cluster).as_deref(), rv));
    }
    let deleting = serde_json::from_slice::<Value>(&response.body).ok().is_some_and(|v| v["metadata"]["deletionTimestamp"].is_string());
    let suffix = scope.name_suffix(&key.cluster);
    match wait_ingested(state, scope, key, &ingested.member_rv, false).await {
        Some(Some(entry)) => {
            let mut builder = ok;
            builder.content_type(respond::JSON).body(ingested.body.to_bytes(suffix.as_deref(), entry.rv))
        }
        _ => {
            let current = state.fleet.snapshot();
            let rv = current.get(&scope.resource.key(), key).map_or(current.head_rv(), |e| e.rv);
            let mut builder = ok;
            if !deleting {
                builder.insert_header((
                    "Warning",
                    format!(
                        "299 - \"kubefold has not yet ingested resourceVersion {} of cluster {} within {:?}; a read right now may not show this change\"",
                        ingested.member_rv, key.cluster, state.config.write_wait
                    ),
                ));
            }
            builder.content_type(respond::JSON).body(ingested.body.to_bytes(suffix.as_deref(), rv))
        }
    }
}

/// PUT on an object or its `status` subresource.
pub async fn update(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, sub: Option<&str>, body: &Bytes) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, entry) = resolve_name(&snapshot, scope, name)?;
    let mut object = parse_body(req, body).await?;
    if !object.is_object() {
        return Err(Status::bad_request("the body must be a JSON object"));
    }
    if sub == Some("scale") {
        // The Scale's resourceVersion is the object's (kube-apiserver's scale
        // subresource updates the object under it), so it is checked and
        // translated as for the object itself.
        let member_rv = translate_rv(scope, &key, &entry, &object)?;
        object["metadata"]["name"] = Value::String(key.name.clone());
        match (member_rv, object["metadata"].as_object_mut()) {
            (Some(rv), _) => object["metadata"]["resourceVersion"] = Value::String(rv),
            (None, Some(m)) => {
                m.remove("resourceVersion");
            }
            (None, None) => {}
        }
        let bytes = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
        return forward_scale(state, req, scope, &key, Method::PUT, bytes).await;
    }
    check_body_name(scope, &key, &object, name)?;
    let member_rv = translate_rv(scope, &key, &entry, &object)?;
    object::to_member(&mut object, &key.name, member_rv.as_deref());
    let path = member_path(scope, &key, sub, req.query_string());
    let bytes = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
    acted_on(req, &key.cluster);
    let response = members::send_as(&state.fleet, &key.cluster, members::caller(req).as_ref(), Method::PUT, &path, Some(respond::JSON), bytes).await?;
    if !response.is_success() {
        return Ok(passthrough(&response));
    }
    Ok(reply_with_object(state, is_dry_run(req), scope, &key, &response, false).await)
}

/// PATCH on an object or its `status`/`scale` subresource. The patch is
/// forwarded as it is (the member applies it), except that a
/// `metadata.resourceVersion` in a merge or strategic patch is checked and
/// translated, and a qualified `metadata.name` is unqualified.
pub async fn patch(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, sub: Option<&str>, body: &Bytes) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let ct = content_type(req).unwrap_or("").split(';').next().unwrap_or("").trim().to_string();
    let (key, entry) = match resolve_name(&snapshot, scope, name) {
        Ok(found) => found,
        // Server-side apply creates a missing object, when its cluster is known.
        Err(status) if status.code == 404 && ct == "application/apply-patch+yaml" && sub.is_none() => {
            let (member_name, cluster) = match (&scope.cluster, names::parse(name)) {
                (Some(c), _) => (name.to_string(), c.clone()),
                (None, RequestedName::Qualified { name, cluster }) => (name.to_string(), cluster.to_string()),
                (None, RequestedName::Bare(bare)) => {
                    let object: Value = serde_saphyr::from_slice(body).unwrap_or(Value::Null);
                    match placement::choose(state, scope, &object)? {
                        Some(cluster) => (bare.to_string(), cluster),
                        None => return Err(placement::unplaced(scope, bare)),
                    }
                }
            };
            let key = ObjectKey { namespace: scope.namespace.clone().unwrap_or_default(), name: member_name, cluster };
            let entry = Arc::new(IndexEntry::new(0, "", "", [], []));
            (key, entry)
        }
        Err(status) => return Err(status),
    };
    let forwarded: Vec<u8> = match ct.as_str() {
        "application/json-patch+json" => {
            let mut operations =
                decode::decode(body.clone(), decode::Format::Json, peer(req)).await.map_err(|e| e.to_status("invalid JSON patch"))?;
            // A Scale's name and resourceVersion are its object's, so a
            // patch of `scale` is translated as one of the object.
            translate_json_patch(scope, &key, &entry, &mut operations, name)?;
            serde_json::to_vec(&operations).map_err(|e| Status::internal(e.to_string()))?
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" | "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            let mut patch = if ct == "application/apply-patch+yaml" {
                decode::decode(body.clone(), decode::Format::Yaml, peer(req)).await.map_err(|e| e.to_status("invalid apply patch"))?
            } else {
                decode::decode(body.clone(), decode::Format::Json, peer(req)).await.map_err(|e| e.to_status("invalid patch"))?
            };
            if patch["metadata"].is_object() {
                let member_rv = translate_rv(scope, &key, &entry, &patch)?;
                if patch["metadata"]["name"].is_string() {
                    check_body_name(scope, &key, &patch, name)?;
                    patch["metadata"]["name"] = Value::String(key.name.clone());
                }
                if let Some(rv) = member_rv {
                    patch["metadata"]["resourceVersion"] = Value::String(rv);
                }
                // `get_mut`, not indexing: indexing would add `annotations: null`,
                // which a merge patch reads as "delete every annotation".
                if let Some(a) = patch.get_mut("metadata").and_then(|m| m.get_mut("annotations")).and_then(Value::as_object_mut) {
                    a.retain(|k, _| !k.starts_with(KUBEFOLD_ANNOTATION_PREFIX));
                }
            }
            serde_json::to_vec(&patch).map_err(|e| Status::internal(e.to_string()))?
        }
        other => {
            return Err(Status::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"),
            ))
        }
    };
    if sub == Some("scale") {
        return forward_scale(state, req, scope, &key, Method::PATCH, forwarded).await;
    }
    let path = member_path(scope, &key, sub, req.query_string());
    acted_on(req, &key.cluster);
    let response = members::send_as(&state.fleet, &key.cluster, members::caller(req).as_ref(), Method::PATCH, &path, Some(&ct), forwarded).await?;
    if !response.is_success() {
        return Ok(passthrough(&response));
    }
    Ok(reply_with_object(state, is_dry_run(req), scope, &key, &response, entry.rv == 0).await)
}

/// GET, PUT or PATCH of `scale`: the member's Scale with the name served as
/// kubefold serves it; edits wait for the scaled object to be ingested.
/// A PUT's body is already translated (member name and RV).
async fn forward_scale(state: &ApiState, req: &HttpRequest, scope: &Scope, key: &ObjectKey, method: Method, body: Vec<u8>) -> Result<HttpResponse, Status> {
    let ct = content_type(req).map(str::to_string);
    let path = member_path(scope, key, Some("scale"), req.query_string());
    acted_on(req, &key.cluster);
    let response = members::send_as(&state.fleet, &key.cluster, members::caller(req).as_ref(), method.clone(), &path, ct.as_deref(), body).await?;
    if !response.is_success() {
        return Ok(passthrough(&response));
    }
    let mut scale: Value = serde_json::from_slice(&response.body).map_err(|e| Status::internal(format!("member sent an unreadable Scale: {e}")))?;
    let member_rv = scale["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let entry = if method == Method::GET {
        state.fleet.snapshot().get(&scope.resource.key(), key).cloned()
    } else {
        wait_ingested(state, scope, key, &member_rv, false).await.flatten()
    };
    scale["metadata"]["name"] = Value::String(scope.served_name(key));
    if let Some(entry) = entry {
        scale["metadata"]["resourceVersion"] = Value::String(entry.rv.to_string());
    }
    Ok(respond::json(&scale))
}

/// GET of `scale`.
pub async fn get_scale(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, _) = resolve_name(&snapshot, scope, name)?;
    forward_scale(state, req, scope, &key, Method::GET, Vec::new()).await
}

/// DELETE of an object, with its DeleteOptions (preconditions translated).
pub async fn delete(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, body: &Bytes) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, entry) = resolve_name(&snapshot, scope, name)?;
    let mut forwarded = Vec::new();
    let mut dry_run = is_dry_run(req);
    if !body.is_empty() {
        let mut options = parse_body(req, body).await?;
        dry_run |= options["dryRun"].as_array().is_some_and(|d| !d.is_empty());
        if let Some(rv) = options["preconditions"]["resourceVersion"].as_str() {
            match rv.parse::<u64>() {
                Ok(n) if n == entry.rv => options["preconditions"]["resourceVersion"] = Value::String(entry.member_rv().to_string()),
                _ => return Err(conflict(scope, &scope.served_name(&key))),
            }
        }
        forwarded = serde_json::to_vec(&options).map_err(|e| Status::internal(e.to_string()))?;
    }
    let path = member_path(scope, &key, None, req.query_string());
    let ct = (!forwarded.is_empty()).then_some(respond::JSON);
    acted_on(req, &key.cluster);
    let response = members::send_as(&state.fleet, &key.cluster, members::caller(req).as_ref(), Method::DELETE, &path, ct, forwarded).await?;
    if !response.is_success() {
        return Ok(passthrough(&response));
    }
    let value: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    if dry_run {
        return Ok(if value["kind"] == "Status" { passthrough(&response) } else { reply_with_object(state, true, scope, &key, &response, false).await });
    }
    if value["kind"] == "Status" {
        wait_ingested(state, scope, &key, "", true).await;
        return Ok(passthrough(&response));
    }
    let graceful = value["metadata"]["deletionTimestamp"].is_string() && value["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    if graceful {
        return Ok(reply_with_object(state, is_dry_run(req), scope, &key, &response, false).await);
    }
    // The object is gone: wait for its DELETED event, answer with the last state.
    let gone = wait_ingested(state, scope, &key, "", true).await.is_some();
    let ingested = object::ingest(&scope.resource, &key.cluster, &response.body).map_err(|e| Status::internal(e.to_string()))?;
    let rv = if gone { state.fleet.snapshot().head_rv() } else { entry.rv };
    let mut ok = HttpResponse::Ok();
    Ok(ok.content_type(respond::JSON).body(ingested.body.to_bytes(scope.name_suffix(&key.cluster).as_deref(), rv)))
}

/// POST of a new object: under `/clusters/{c}`, or at the aggregated path
/// when the body's name is qualified.
pub async fn create(state: &ApiState, req: &HttpRequest, scope: &Scope, body: &Bytes) -> Result<HttpResponse, Status> {
    let mut object = parse_body(req, body).await?;
    if !object.is_object() {
        return Err(Status::bad_request("the body must be a JSON object"));
    }
    let requested = object["metadata"]["name"].as_str().unwrap_or("").to_string();
    let (cluster, member_name) = match (&scope.cluster, names::parse(&requested)) {
        (Some(c), _) => (c.clone(), requested.clone()),
        (None, RequestedName::Qualified { name, cluster }) => (cluster.to_string(), name.to_string()),
        (None, RequestedName::Bare(_)) => match placement::choose(state, scope, &object)? {
            Some(cluster) => (cluster, requested.clone()),
            None => return Err(placement::unplaced(scope, &requested)),
        },
    };
    member_owner_references(&mut object, &cluster);
    if !requested.is_empty() {
        object::to_member(&mut object, &member_name, None);
    } else if let Some(m) = object["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.retain(|k, _| !k.starts_with(KUBEFOLD_ANNOTATION_PREFIX));
        }
    }
    let ns = scope.namespace.clone().or_else(|| object["metadata"]["namespace"].as_str().map(str::to_string));
    let mut path = scope.resource.collection_path(if scope.resource.namespaced { ns.as_deref() } else { None });
    if !req.query_string().is_empty() {
        path.push('?');
        path.push_str(req.query_string());
    }
    let bytes = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
    acted_on(req, &cluster);
    let response = members::send_as(&state.fleet, &cluster, members::caller(req).as_ref(), Method::POST, &path, Some(respond::JSON), bytes).await?;
    if !response.is_success() {
        return Ok(passthrough(&response));
    }
    let created: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    let key = ObjectKey {
        namespace: created["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
        name: created["metadata"]["name"].as_str().unwrap_or(&member_name).to_string(),
        cluster,
    };
    Ok(reply_with_object(state, is_dry_run(req), scope, &key, &response, true).await)
}

/// Owner references naming their owner by its qualified name in the
/// object's own cluster (`kubectl create job --from=cronjob/NAME_cluster`
/// copies the served name) name it as the member does.
fn member_owner_references(object: &mut Value, cluster: &str) {
    let Some(references) = object.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) else { return };
    for reference in references {
        if let Some(RequestedName::Qualified { name, cluster: c }) = reference["name"].as_str().map(names::parse) {
            if c == cluster {
                reference["name"] = Value::String(name.to_string());
            }
        }
    }
}

/// POST to a subresource the object's type has at its member
/// (`serviceaccounts/token`, `pods/eviction`): forwarded to the owning
/// member, a qualified `metadata.name` in the body unqualified, the member's
/// answer passed back.
pub async fn create_subresource(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, sub: &str, body: &Bytes) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, _) = resolve_name(&snapshot, scope, name)?;
    let mut object = if body.iter().all(u8::is_ascii_whitespace) { Value::Object(Default::default()) } else { parse_body(req, body).await? };
    if object["metadata"]["name"].as_str().is_some_and(|n| n == name) {
        object["metadata"]["name"] = Value::String(key.name.clone());
    }
    let path = member_path(scope, &key, Some(sub), req.query_string());
    let bytes = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
    let response = members::send_as(&state.fleet, &key.cluster, members::caller(req).as_ref(), Method::POST, &path, Some(respond::JSON), bytes).await?;
    Ok(passthrough(&response))
}

/// DELETE on a collection: forwarded to every member in scope (the cluster
/// search key of the label selector picks members), results merged.
///
/// The request's DeleteOptions body (propagationPolicy, gracePeriodSeconds,
/// ...) goes to every member unchanged: kube-apiserver applies it to each
/// object of the collection.
pub async fn delete_collection(state: &ApiState, req: &HttpRequest, scope: &Scope, body: &Bytes) -> Result<HttpResponse, Status> {
    let options = if body.is_empty() { Vec::new() } else { serde_json::to_vec(&parse_body(req, body).await?).map_err(|e| Status::internal(e.to_string()))? };
    let options_type = (!options.is_empty()).then_some(respond::JSON);
    let query = crate::query::Query::parse(req.query_string())?;
    let mut labels = kubefold_engine::selector::LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| Status::bad_request(e.to_string()))?;
    let clusters = labels.take_key(CLUSTER_SEARCH_KEY);
    let mut member_query: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string()).unwrap_or_default();
    member_query.retain(|(k, _)| k != "labelSelector");
    if !labels.is_empty() {
        member_query.push(("labelSelector".into(), labels.to_string()));
    }
    let qs = serde_urlencoded::to_string(&member_query).unwrap_or_default();
    let mut path = scope.resource.collection_path(scope.namespace.as_deref());
    if !qs.is_empty() {
        path.push('?');
        path.push_str(&qs);
    }
    let targets: Vec<String> = state
        .fleet
        .member_names()
        .into_iter()
        .filter(|c| scope.cluster.as_ref().is_none_or(|s| s == c))
        .filter(|c| clusters.iter().all(|r| r.matches_value(Some(c))))
        .collect();
    let mut items = Vec::new();
    for cluster in targets {
        acted_on(req, &cluster);
        let response = members::send_as(&state.fleet, &cluster, members::caller(req).as_ref(), Method::DELETE, &path, options_type, options.clone()).await?;
        if !response.is_success() {
            return Ok(passthrough(&response));
        }
        let list: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        for item in list["items"].as_array().cloned().unwrap_or_default() {
            let Ok(raw) = serde_json::to_vec(&item) else { continue };
            if let Ok(ingested) = object::ingest(&scope.resource, &cluster, &raw) {
                let bytes = ingested.body.to_bytes(scope.name_suffix(&cluster).as_deref(), state.fleet.snapshot().head_rv());
                items.push(serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null));
            }
        }
    }
    Ok(respond::json(&serde_json::json!({
        "kind": scope.resource.list_kind(),
        "apiVersion": scope.resource.api_version(),
        "metadata": {"resourceVersion": state.fleet.snapshot().head_rv().to_string()},
        "items": items,
    })))
}

/// `pods/{name}/log`, streamed from the member with the request's query
/// (`follow`, `container`, `tailLines`, `sinceSeconds`, `timestamps` ...).
pub async fn log(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str) -> Result<HttpResponse, Status> {
    let snapshot = state.fleet.snapshot();
    let (key, _) = resolve_name(&snapshot, scope, name)?;
    let (client, headers) = members::client_as(&state.fleet, &key.cluster, members::caller(req).as_ref()).await?;
    let path = member_path(scope, &key, Some("log"), req.query_string());
    let response = members::send_raw(&client, &key.cluster, &headers, Method::GET, &path, None, Vec::new()).await?;
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        let bytes = body.collect_bytes().await.map_err(|e| members::unreachable(&key.cluster, &e.to_string()))?;
        let code = actix_web::http::StatusCode::from_u16(parts.status.as_u16()).unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
        return Ok(HttpResponse::build(code).content_type(respond::JSON).body(bytes));
    }
    let stream = http_body_util::BodyExt::into_data_stream(body)
        .map(|chunk| chunk.map_err(|e| actix_web::error::ErrorBadGateway(e.to_string())));
    Ok(HttpResponse::Ok().content_type("text/plain").streaming(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> Scope {
        let resource = kubefold_engine::resources::find(&kubefold_engine::resources::builtin(), "", "v1", "pods").unwrap().clone();
        Scope { resource, cluster: None, namespace: Some("default".into()), qualified: true }
    }

    fn web_0() -> (ObjectKey, IndexEntry) {
        let key = ObjectKey { namespace: "default".into(), name: "web-0".into(), cluster: "member1".into() };
        let entry = IndexEntry::new(42, "1007", "u", [], []);
        (key, entry)
    }

    #[test]
    fn json_patch_resource_versions_and_names_are_translated_for_the_member() {
        let (key, entry) = web_0();
        let mut patch = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "replace", "path": "/metadata/name", "value": "web-0_member1"},
            {"op": "add", "path": "/metadata/labels/a", "value": "42"},
        ]);
        translate_json_patch(&pods(), &key, &entry, &mut patch, "web-0_member1").unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "1007"},
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "1007"},
                {"op": "replace", "path": "/metadata/name", "value": "web-0"},
                {"op": "add", "path": "/metadata/labels/a", "value": "42"},
            ])
        );
    }

    #[test]
    fn json_patch_with_a_stale_resource_version_or_another_name_is_refused() {
        let (key, entry) = web_0();
        let mut stale = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "41"}]);
        let status = translate_json_patch(&pods(), &key, &entry, &mut stale, "web-0_member1").unwrap_err();
        assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
        let mut test = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "1007"}]);
        let status = translate_json_patch(&pods(), &key, &entry, &mut test, "web-0_member1").unwrap_err();
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "a member RV is not the served one");
        let mut other = json!([{"op": "replace", "path": "/metadata/name", "value": "web-0_member2"}]);
        let status = translate_json_patch(&pods(), &key, &entry, &mut other, "web-0_member1").unwrap_err();
        assert_eq!(status.code, 400);
        let mut not_a_list = json!({"op": "add"});
        assert_eq!(translate_json_patch(&pods(), &key, &entry, &mut not_a_list, "web-0_member1").unwrap_err().code, 400);
    }
}
