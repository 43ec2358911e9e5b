//! OpenAPI documents (`/openapi/v2`, `/openapi/v3`) built from a catalog of
//! types: the paths and operations of every type, with the query parameters
//! kubectl looks for (`fieldValidation`), without schemas. Enough for
//! kubectl's default `--validate=strict` to validate on the server instead
//! of client-side, so that `edit`, `create` and `apply` work. kubefold serves
//! them until a member's documents are fetched; the simulator and kubefold
//! add schemas to the same paths (see [`schemas`]).
//! <https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-interface-definition>

pub mod schemas;

use serde_json::{json, Map, Value};

use crate::resources::ResourceType;

/// The `info` of a document: the server's title and version.
#[derive(Debug, Clone, Copy)]
pub struct Info<'a> {
    /// `info.title`.
    pub title: &'a str,
    /// `info.version` (the Kubernetes gitVersion served).
    pub version: &'a str,
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_index(catalog: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for r in catalog {
        let gv = if r.group.is_empty() { format!("api/{}", r.version) } else { format!("apis/{}/{}", r.group, r.version) };
        paths.insert(gv.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", openapi_hash(catalog))}));
    }
    json!({"paths": paths})
}

/// A hash of the served types, stable across builds and releases (clients
/// cache the documents by it): the first 8 bytes of SHA-256 of their keys.
fn openapi_hash(catalog: &[ResourceType]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for r in catalog {
        context.update(r.key().as_bytes());
        context.update(b"\n");
    }
    context.finish().as_ref()[..8].iter().map(|b| format!("{b:02X}")).collect()
}

fn operation(r: &ResourceType, verb: &str, id: &str) -> Value {
    json!({
        "operationId": id,
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true},
             "description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields."},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
    })
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: paths with their operations, enough for
/// kubectl to validate on the server (`fieldValidation`) instead of
/// client-side, so that `edit`, `create` and `apply` work with the default
/// `--validate=strict`. `None` when nothing is served there.
pub fn openapi_v3(catalog: &[ResourceType], group: &str, version: &str, info: Info<'_>) -> Option<Value> {
    let paths = paths(catalog, group, version);
    if paths.is_empty() {
        return None;
    }
    Some(document(info, paths, Map::new()))
}

/// An OpenAPI 3.0 document of `paths` and `schemas` (`components.schemas`).
pub fn document(info: Info<'_>, paths: Map<String, Value>, schemas: Map<String, Value>) -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": info.title, "version": info.version},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// A Swagger 2.0 document of `paths` and `definitions`.
pub fn swagger(info: Info<'_>, paths: Map<String, Value>, definitions: Map<String, Value>) -> Value {
    json!({"swagger": "2.0", "info": {"title": info.title, "version": info.version}, "paths": paths, "definitions": definitions})
}

/// The paths of the types of `group/version` in `catalog`, each operation
/// with `x-kubernetes-action`, `x-kubernetes-group-version-kind` and the
/// write parameters (`fieldValidation`, `fieldManager`, `dryRun`).
pub fn paths(catalog: &[ResourceType], group: &str, version: &str) -> Map<String, Value> {
    let mut paths = serde_json::Map::new();
    for r in catalog.iter().filter(|r| r.group == group && r.version == version) {
        let base = r.group_version_path();
        let (collection, object) = if r.namespaced {
            (format!("{base}/namespaces/{{namespace}}/{}", r.plural), format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural))
        } else {
            (format!("{base}/{}", r.plural), format!("{base}/{}/{{name}}", r.plural))
        };
        let k = &r.kind;
        paths.insert(collection, json!({
            "get": operation(r, "list", &format!("list{k}")),
            "post": operation(r, "post", &format!("create{k}")),
            "delete": operation(r, "deletecollection", &format!("deleteCollection{k}")),
        }));
        paths.insert(object.clone(), json!({
            "get": operation(r, "get", &format!("read{k}")),
            "put": operation(r, "put", &format!("replace{k}")),
            "patch": operation(r, "patch", &format!("patch{k}")),
            "delete": operation(r, "delete", &format!("delete{k}")),
        }));
        for sub in r.subresources.iter().filter(|s| *s != "log") {
            paths.insert(format!("{object}/{sub}"), json!({
                "get": operation(r, "get", &format!("read{k}{sub}")),
                "put": operation(r, "put", &format!("replace{k}{sub}")),
                "patch": operation(r, "patch", &format!("patch{k}{sub}")),
            }));
        }
    }
    paths
}

/// `/openapi/v2` in protobuf (gnostic `openapi_v2.Document`): `swagger`
/// (field 1), `info` (field 2: `title` 1, `version` 2) and empty `paths`
/// (field 8). Encoded by hand: three length-delimited fields.
pub fn openapi_v2_protobuf(info: Info<'_>) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push((number << 3) | 2);
        let mut len = bytes.len();
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(bytes);
    }
    let mut info_bytes = Vec::new();
    field(&mut info_bytes, 1, info.title.as_bytes());
    field(&mut info_bytes, 2, info.version.as_bytes());
    let mut doc = Vec::new();
    field(&mut doc, 1, b"2.0");
    field(&mut doc, 2, &info_bytes);
    field(&mut doc, 8, &[]);
    doc
}

/// `/openapi/v2`: the same paths in Swagger 2.0 form.
pub fn openapi_v2(catalog: &[ResourceType], info: Info<'_>) -> Value {
    swagger(info, all_paths(catalog), Map::new())
}

/// The paths of every type of `catalog`.
pub fn all_paths(catalog: &[ResourceType]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut versions: Vec<(String, String)> = catalog.iter().map(|r| (r.group.clone(), r.version.clone())).collect();
    versions.dedup();
    for (g, v) in versions {
        out.extend(paths(catalog, &g, &v));
    }
    out
}

