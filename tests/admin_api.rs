//! The admin REST API end to end, against kubefold over two demo simulators:
//! every `/admin/v1` operation, errors included, with every JSON answer
//! validated against the schemas of `ops/admin-openapi.yaml`; a registered
//! cluster moved to another simulator by PUT; a backup streamed over HTTP
//! that `kubefold restore` turns into a data dir serving the same head
//! resourceVersion; and `kubefold admin ...` over TLS.
//!
//! The schemas are checked by a small validator of the OpenAPI 3.0 subset the
//! document uses (`$ref`, `type`, `nullable`, `required`, `properties`,
//! `additionalProperties`, `items`, `enum`, `oneOf`, `minimum`, `maxLength`).
//! The `jsonschema` crate validates JSON Schema drafts, not OpenAPI 3.0's
//! dialect (`nullable` is not JSON Schema), so it would need the document
//! rewritten first. `pattern` and `format` are documentation here; a test
//! fails if the document starts using a keyword the validator ignores.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use kubefold_testdata::SimHandle;
use serde_json::{json, Value};

/// Token of a user in `kubefold:admins`.
const ADMIN: &str = "admin-token-5c1d9e";
/// Token of a user in `kubefold:viewers`.
const VIEWER: &str = "viewer-token-77ab02";
/// A member's bearer token: registered, never shown.
const MEMBER_SECRET: &str = "member-token-s3cr3t-4411";

// ---------------------------------------------------------------------------
// The contract: ops/admin-openapi.yaml and a validator of its schemas.
// ---------------------------------------------------------------------------

/// The OpenAPI document, and the operations answered so far.
struct Contract {
    doc: Value,
    answered: Mutex<BTreeSet<(String, String, u16)>>,
}

/// Keywords the validator enforces, and those that only document.
const CHECKED_KEYWORDS: [&str; 11] =
    ["$ref", "type", "nullable", "required", "properties", "additionalProperties", "items", "enum", "oneOf", "minimum", "maxLength"];
const DOCUMENTING_KEYWORDS: [&str; 3] = ["description", "format", "pattern"];

impl Contract {
    fn load() -> Contract {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/admin-openapi.yaml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let doc: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Contract { doc, answered: Mutex::new(BTreeSet::new()) }
    }

    /// Follows `$ref`s (`#/components/...`) until a value without one.
    fn resolve<'a>(&'a self, mut value: &'a Value) -> &'a Value {
        resolve(&self.doc, &mut value);
        value
    }

    fn operation(&self, path: &str, method: &str) -> &Value {
        let operation = &self.doc["paths"][path][method];
        assert!(operation.is_object(), "ops/admin-openapi.yaml documents no {} {path}", method.to_uppercase());
        operation
    }

    /// The schema of the answer `code` with `media` to `method path`.
    fn response_schema(&self, path: &str, method: &str, code: u16, media: &str) -> &Value {
        let response = self.resolve(&self.operation(path, method)["responses"][code.to_string()]);
        assert!(response.is_object(), "ops/admin-openapi.yaml documents no {code} answer to {} {path}", method.to_uppercase());
        let schema = &response["content"][media]["schema"];
        assert!(schema.is_object(), "ops/admin-openapi.yaml documents no {media} body for {code} of {} {path}", method.to_uppercase());
        schema
    }

    /// Asserts that `body`, the answer `code` to `method path`, matches its schema.
    fn check(&self, path: &str, method: &str, code: u16, media: &str, body: &Value) {
        let errors = validate(&self.doc, self.response_schema(path, method, code, media), body);
        assert!(errors.is_empty(), "{} {path} -> {code}: the answer breaks ops/admin-openapi.yaml:\n  {}\n{body:#}", method.to_uppercase(), errors.join("\n  "));
        self.answered.lock().unwrap().insert((path.to_string(), method.to_string(), code));
    }

    /// Asserts that a request body matches the operation's request schema.
    fn check_request(&self, path: &str, method: &str, body: &Value) {
        let schema = &self.operation(path, method)["requestBody"]["content"]["application/json"]["schema"];
        let errors = validate(&self.doc, schema, body);
        assert!(errors.is_empty(), "{} {path}: the request breaks ops/admin-openapi.yaml: {errors:?}", method.to_uppercase());
    }

    /// Asserts that every documented operation was answered at least once.
    fn assert_every_operation_answered(&self) {
        let answered = self.answered.lock().unwrap();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys().filter(|m| *m != "parameters") {
                assert!(
                    answered.iter().any(|(p, m, _)| p == path && m == method),
                    "{} {path} was never exercised",
                    method.to_uppercase()
                );
            }
        }
    }
}

fn resolve<'a>(doc: &'a Value, value: &mut &'a Value) {
    for _ in 0..16 {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else { return };
        let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("only local $refs are supported: {reference}"));
        *value = doc.pointer(pointer).unwrap_or_else(|| panic!("$ref {reference} does not resolve"));
    }
    panic!("a $ref cycle");
}

/// The ways `value` breaks `schema`; empty when it matches.
fn validate(doc: &Value, schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate_at(doc, schema, value, "$", &mut errors);
    errors
}

fn validate_at(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let mut schema = schema;
    resolve(doc, &mut schema);
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) {
            errors.push(format!("{at}: null is not allowed"));
        }
        return;
    }
    if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = variants.iter().filter(|v| validate(doc, v, value).is_empty()).count();
        if matching != 1 {
            errors.push(format!("{at}: matches {matching} of its {} oneOf schemas, not exactly one", variants.len()));
        }
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let matches = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => panic!("unsupported type {other:?}"),
        };
        if !matches {
            errors.push(format!("{at}: expected {expected}, got {value}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let (Some(minimum), Some(number)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if number < minimum {
            errors.push(format!("{at}: {number} is below the minimum {minimum}"));
        }
    }
    if let (Some(max), Some(text)) = (schema.get("maxLength").and_then(Value::as_u64), value.as_str()) {
        if text.chars().count() as u64 > max {
            errors.push(format!("{at}: longer than {max} characters"));
        }
    }
    if let Some(object) = value.as_object() {
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !object.contains_key(name) {
                errors.push(format!("{at}: required property {name:?} is missing"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, child) in object {
            let child_at = format!("{at}.{key}");
            match (properties.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(property), _) => validate_at(doc, property, child, &child_at, errors),
                (None, Some(Value::Bool(false))) => errors.push(format!("{at}: unexpected property {key:?}")),
                (None, Some(additional @ Value::Object(_))) => validate_at(doc, additional, child, &child_at, errors),
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate_at(doc, items, item, &format!("{at}[{i}]"), errors);
        }
    }
}

/// Every keyword of `schema` (and the schemas inside it) the validator knows.
fn unknown_keywords(schema: &Value, at: &str, out: &mut Vec<String>) {
    let Some(object) = schema.as_object() else { return };
    for (key, child) in object {
        let child_at = format!("{at}/{key}");
        match key.as_str() {
            "properties" => {
                for (name, property) in child.as_object().into_iter().flatten() {
                    unknown_keywords(property, &format!("{child_at}/{name}"), out);
                }
            }
            "items" | "additionalProperties" => unknown_keywords(child, &child_at, out),
            "oneOf" => {
                for (i, variant) in child.as_array().into_iter().flatten().enumerate() {
                    unknown_keywords(variant, &format!("{child_at}/{i}"), out);
                }
            }
            k if CHECKED_KEYWORDS.contains(&k) || DOCUMENTING_KEYWORDS.contains(&k) => {}
            other => out.push(format!("{at}: {other}")),
        }
    }
}

/// Every `$ref` anywhere in `value`.
fn references<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(o) => {
            if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                out.push(r);
            }
            o.values().for_each(|v| references(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

#[test]
fn the_contract_is_well_formed_and_its_validator_can_fail() {
    let contract = Contract::load();
    let doc = &contract.doc;
    assert_eq!(doc["openapi"].as_str().map(|v| &v[..4]), Some("3.0."));
    assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    assert_eq!(doc["security"], json!([{"bearerAuth": []}]));

    let mut refs = Vec::new();
    references(doc, &mut refs);
    for r in &refs {
        assert!(r.strip_prefix('#').and_then(|p| doc.pointer(p)).is_some(), "$ref {r} does not resolve");
    }
    let mut unknown = Vec::new();
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        unknown_keywords(schema, &format!("#/components/schemas/{name}"), &mut unknown);
    }
    assert!(unknown.is_empty(), "keywords the test's validator does not check: {unknown:?}");

    // Every documented operation: a success body, every error a Status
    // (bar 413, answered by actix-web before the handler runs).
    let expected: BTreeSet<(&str, &str)> = [
        ("/admin/v1/clusters", "get"),
        ("/admin/v1/clusters", "post"),
        ("/admin/v1/clusters/{name}", "get"),
        ("/admin/v1/clusters/{name}", "put"),
        ("/admin/v1/clusters/{name}", "delete"),
        ("/admin/v1/resources", "get"),
        ("/admin/v1/resources", "put"),
        ("/admin/v1/stats", "get"),
        ("/admin/v1/replicas", "get"),
        ("/admin/v1/compact", "post"),
        ("/admin/v1/backup", "post"),
        ("/admin/v1/estimators", "get"),
        ("/admin/v1/estimators/{cluster}", "get"),
    ]
    .into();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap().iter().filter(|(m, _)| *m != "parameters") {
            documented.insert((path.as_str(), method.as_str()));
            for (code, response) in operation["responses"].as_object().unwrap() {
                let response = contract.resolve(response);
                let code: u16 = code.parse().unwrap();
                if code >= 400 && code != 413 {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Status",
                        "{code} of {method} {path} is not a Status"
                    );
                }
            }
            for code in ["401", "403"] {
                assert!(operation["responses"][code].is_object(), "{method} {path} does not document {code}");
            }
        }
    }
    assert_eq!(documented, expected);

    // The validator refuses what the schemas forbid.
    let spec = |v: Value| validate(doc, &json!({"$ref": "#/components/schemas/ClusterSpec"}), &v);
    assert!(spec(json!({"name": "m1", "url": "http://x", "insecureSkipTlsVerify": true})).is_empty());
    assert_eq!(spec(json!({"url": "http://x"})), ["$: required property \"name\" is missing"]);
    assert_eq!(spec(json!({"name": "m1", "bogus": 1})), ["$: unexpected property \"bogus\""]);
    assert_eq!(spec(json!({"name": 5})), ["$.name: expected string, got 5"]);
    assert_eq!(spec(json!({"name": "m1", "url": null})), ["$.url: null is not allowed"]);
    assert_eq!(spec(json!({"name": "m".repeat(64)})), ["$.name: longer than 63 characters"]);
    let status = |v: Value| validate(doc, &json!({"$ref": "#/components/schemas/Status"}), &v);
    let not_found = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "clusters.admin.kubefold.io \"x\" not found", "reason": "NotFound", "code": 404,
        "details": {"name": "x", "group": "admin.kubefold.io", "kind": "clusters"}});
    assert!(status(not_found.clone()).is_empty());
    let mut wrong = not_found.clone();
    wrong["status"] = json!("Success");
    assert_eq!(status(wrong).len(), 1);
    let watcher = |v: Value| validate(doc, &json!({"$ref": "#/components/schemas/WatcherStatus"}), &v);
    let synced = json!({"state": "synced", "objects": 3, "checkpoint": null, "lastError": null, "relists": 1, "reconnects": 1, "events": 0, "lagSeconds": 0.0});
    assert!(watcher(synced.clone()).is_empty());
    let mut negative = synced.clone();
    negative["objects"] = json!(-1);
    assert_eq!(watcher(negative), ["$.objects: -1 is below the minimum 0"]);
    let mut shouting = synced;
    shouting["state"] = json!("Synced");
    assert_eq!(watcher(shouting).len(), 1, "states are camelCase");
    let event = |v: Value| validate(doc, &json!({"$ref": "#/components/schemas/EstimatorWatchEvent"}), &v);
    assert!(event(json!({"type": "ERROR", "object": not_found})).is_empty());
    assert!(event(json!({"type": "ADDED", "object": {"cluster": "m1", "addresses": [], "rule": "static", "probe": null}})).is_empty());
    assert_eq!(event(json!({"type": "ADDED", "object": {"cluster": "m1"}})).len(), 1, "neither a row nor a Status");
}

// ---------------------------------------------------------------------------
// Talking to kubefold.
// ---------------------------------------------------------------------------

/// The admin API of one kubefold, as one user, checked against the contract.
struct Admin<'a> {
    url: String,
    http: reqwest::blocking::Client,
    token: Option<&'a str>,
    contract: &'a Contract,
}

impl<'a> Admin<'a> {
    fn new(kf: &Kubefold, token: Option<&'a str>, contract: &'a Contract) -> Admin<'a> {
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Admin { url: kf.url.clone(), http, token, contract }
    }

    /// Sends `method path` (documented as `template`) with an optional body;
    /// a JSON answer is checked against the contract and returned.
    fn call(&self, method: &str, template: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let mut request = self.http.request(method.parse().unwrap(), format!("{}{path}", self.url));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.header("Content-Type", "application/json").body(body.to_string());
        }
        let response = request.send().unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let code = response.status().as_u16();
        let media = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let text = response.text().unwrap();
        assert_eq!(media, "application/json", "{method} {path} -> {code}: {text}");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path} -> {code}: {e}: {text}"));
        self.contract.check(template, &method.to_lowercase(), code, "application/json", &value);
        (code, value)
    }

    fn get(&self, template: &str, path: &str) -> (u16, Value) {
        self.call("GET", template, path, None)
    }

    /// GET that must answer 200.
    fn get_ok(&self, template: &str, path: &str) -> Value {
        let (code, value) = self.get(template, path);
        assert_eq!(code, 200, "GET {path}: {value}");
        value
    }

    /// Sends a JSON body, first checked against the operation's request schema.
    fn send_json(&self, method: &str, template: &str, path: &str, body: &Value) -> (u16, Value) {
        self.contract.check_request(template, &method.to_lowercase(), body);
        self.call(method, template, path, Some(&body.to_string()))
    }

    fn cluster(&self, name: &str) -> Value {
        self.get_ok("/admin/v1/clusters/{name}", &format!("/admin/v1/clusters/{name}"))
    }

    fn stats(&self) -> Value {
        self.get_ok("/admin/v1/stats", "/admin/v1/stats")
    }

    /// A Kubernetes API GET with this user's token (not part of the contract).
    fn kube_get(&self, path: &str) -> Value {
        let mut request = self.http.get(format!("{}{path}", self.url));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().unwrap();
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.json().unwrap()
    }

    /// `namespace/name -> member resourceVersion` of a resource of one
    /// member, as kubefold serves it (the `_cluster` suffix taken off).
    fn member_objects(&self, collection: &str, cluster: &str) -> BTreeMap<String, String> {
        let list = self.kube_get(&format!("{collection}?labelSelector=kubefold.io%2Fcluster%3D{cluster}"));
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap();
                let name = name.strip_suffix(&format!("_{cluster}")).unwrap_or_else(|| panic!("{name} is not qualified by {cluster}"));
                let rv = o["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap();
                (format!("{}/{name}", o["metadata"]["namespace"].as_str().unwrap_or("")), rv.to_string())
            })
            .collect()
    }
}

/// `namespace/name -> resourceVersion` of a resource as a simulator serves it.
fn sim_objects(sim: &SimHandle, collection: &str) -> BTreeMap<String, String> {
    let (code, body) = http_get(&format!("{}{collection}", sim.url()));
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let key = format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap_or(""), o["metadata"]["name"].as_str().unwrap());
            (key, o["metadata"]["resourceVersion"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Objects per resource type (`v1/pods`) of one member in kubefold, and in a simulator.
fn type_counts(admin: &Admin, cluster: &str, sim: &SimHandle) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let resources = admin.get_ok("/admin/v1/resources", "/admin/v1/resources");
    let (mut mine, mut theirs) = (BTreeMap::new(), BTreeMap::new());
    for r in resources["items"].as_array().unwrap() {
        let api_version = r["apiVersion"].as_str().unwrap();
        let key = format!("{api_version}/{}", r["resource"].as_str().unwrap());
        let prefix = if api_version.contains('/') { "/apis" } else { "/api" };
        mine.insert(key.clone(), r["clusters"][cluster].as_u64().unwrap_or(0));
        theirs.insert(key.clone(), sim_objects(sim, &format!("{prefix}/{key}")).len() as u64);
    }
    (mine, theirs)
}

/// Waits until kubefold's copy of `cluster` is the simulator's: the same
/// pods and nodes at the simulator's resourceVersions, and as many objects
/// of every other type.
fn wait_reflects(admin: &Admin, cluster: &str, sim: &SimHandle) {
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let pods_match = admin.member_objects("/api/v1/pods", cluster) == sim_objects(sim, "/api/v1/pods");
        let nodes = admin.member_objects("/api/v1/nodes", cluster);
        let (mine, theirs) = type_counts(admin, cluster, sim);
        if pods_match && nodes == sim_objects(sim, "/api/v1/nodes") && mine == theirs {
            return;
        }
        last = format!("nodes {:?}, objects {mine:?}, the simulator's {theirs:?}", nodes.keys().collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{cluster} does not reflect {}: {last}", sim.url());
}

/// Runs `kubefold restore --in FILE --data-dir DIR`; returns its stdout and
/// the data dir it filled. Restore writes the store, drops it and opens it
/// again at once: that must not fail on sled's lock.
fn restore(file: &Path, dir: &Path) -> (String, PathBuf) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["restore", "--in", file.to_str().unwrap(), "--data-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "restore failed: {stdout}{stderr}");
    (stdout, dir.to_path_buf())
}

/// A token file with an admin and a viewer.
fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, format!("{ADMIN},admin,1001,\"kubefold:admins\"\n{VIEWER},viewer,1002,\"kubefold:viewers\"\n")).unwrap();
    path
}

// ---------------------------------------------------------------------------
// The API.
// ---------------------------------------------------------------------------

#[test]
fn every_admin_operation_answers_as_the_contract_says() {
    let contract = Contract::load();
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    // A static estimator endpoint that accepts connections (the kernel
    // completes the handshake from the listen backlog).
    let estimator = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = tmp.path().join("kubefold.yaml");
    std::fs::write(
        &config,
        format!(
            "estimator:\n  probeIntervalSeconds: 1\n  probeDnsNames: false\n  static:\n    member1: \"{}\"\n",
            estimator.local_addr().unwrap()
        ),
    )
    .unwrap();
    let tokens = token_file(tmp.path());
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &["--config", config.to_str().unwrap(), "--token-auth-file", tokens.to_str().unwrap()],
    );
    kf.wait_ready();
    let admin = Admin::new(&kf, Some(ADMIN), &contract);
    let (sim1, sim2) = (&members[0].1, &members[1].1);

    // Authentication and authorization.
    let (code, status) = Admin::new(&kf, None, &contract).get("/admin/v1/stats", "/admin/v1/stats");
    assert_eq!((code, status["reason"].as_str()), (401, Some("Unauthorized")));
    let (code, status) = Admin::new(&kf, Some(VIEWER), &contract).get("/admin/v1/clusters", "/admin/v1/clusters");
    assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")));
    assert_eq!(status["message"], "forbidden: User \"viewer\" cannot get path \"/admin/v1/clusters\"");
    let (code, _) = Admin::new(&kf, Some(VIEWER), &contract).call("POST", "/admin/v1/backup", "/admin/v1/backup", None);
    assert_eq!(code, 403, "viewers take no backups");
    // Without etcd there are no replicas to list (tests/etcd.rs lists them).
    let (code, status) = admin.get("/admin/v1/replicas", "/admin/v1/replicas");
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")), "{status}");

    // The configured members.
    let list = admin.get_ok("/admin/v1/clusters", "/admin/v1/clusters");
    let items = list["items"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> =
        items.iter().map(|c| (c["spec"]["name"].as_str().unwrap(), c["source"].as_str().unwrap(), c["status"]["phase"].as_str().unwrap())).collect();
    assert_eq!(summary, [("member1", "config", "Synced"), ("member2", "config", "Synced")]);
    let member1 = admin.cluster("member1");
    assert_eq!(member1["spec"], json!({"name": "member1", "url": sim1.url()}));
    let pods = &member1["status"]["resources"]["v1/pods"];
    assert_eq!(pods["objects"].as_u64(), Some(sim_objects(sim1, "/api/v1/pods").len() as u64));
    assert!(pods["checkpoint"].is_string(), "a synced watcher has a checkpoint: {pods}");
    assert_eq!(member1["status"]["resources"].as_object().unwrap().len(), 10, "one watcher per resource type");

    let (code, status) = admin.get("/admin/v1/clusters/{name}", "/admin/v1/clusters/nope");
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(status["message"], "clusters.admin.kubefold.io \"nope\" not found");
    assert_eq!(status["details"], json!({"name": "nope", "group": "admin.kubefold.io", "kind": "clusters"}));

    // Registration, and what it refuses.
    let spec = json!({"name": "extra", "url": sim1.url(), "token": MEMBER_SECRET});
    let (code, created) = admin.send_json("POST", "/admin/v1/clusters", "/admin/v1/clusters", &spec);
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"], json!({"name": "extra", "url": sim1.url(), "token": "<redacted>"}));
    assert_eq!(created["source"], "api");
    for (body, code, reason, message) in [
        (json!({"name": "extra", "url": sim2.url()}).to_string(), 409, "AlreadyExists", "cluster \"extra\" already exists"),
        (json!({"name": "member1", "url": sim2.url()}).to_string(), 409, "AlreadyExists", "cluster \"member1\" already exists"),
        (
            json!({"name": "Bad_Name", "url": sim2.url()}).to_string(),
            422,
            "Invalid",
            "cluster name \"Bad_Name\" must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)",
        ),
        (
            json!({"name": "both", "url": sim2.url(), "kubeconfig": "/etc/k"}).to_string(),
            422,
            "Invalid",
            "cluster \"both\": set exactly one of url, kubeconfig and kubeconfigData",
        ),
        (json!({"name": "neither"}).to_string(), 422, "Invalid", "cluster \"neither\": set exactly one of url, kubeconfig and kubeconfigData"),
        ("{\"name\":".to_string(), 400, "BadRequest", "invalid cluster: EOF while parsing a value at line 1 column 8"),
        ("not json".to_string(), 400, "BadRequest", "invalid cluster: expected ident at line 1 column 2"),
        (json!({"url": sim2.url()}).to_string(), 400, "BadRequest", "invalid cluster: missing field `name`"),
        (r#"{"name":"typo","url":"http://x","tokn":"t"}"#.to_string(), 400, "BadRequest", "invalid cluster: unknown field `tokn`"),
        (r#"{"name":"typed","url":7}"#.to_string(), 400, "BadRequest", "invalid cluster: invalid type: integer `7`, expected a string"),
    ] {
        let (got, status) = admin.call("POST", "/admin/v1/clusters", "/admin/v1/clusters", Some(&body));
        assert_eq!((got, status["reason"].as_str()), (code, Some(reason)), "POST {body}: {status}");
        assert!(status["message"].as_str().unwrap().starts_with(message), "POST {body}: {status}");
    }
    let listed: Vec<String> = admin.get_ok("/admin/v1/clusters", "/admin/v1/clusters")["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["spec"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["extra", "member1", "member2"], "refused registrations leave no trace");

    // The registered cluster is watched at once.
    wait_reflects(&admin, "extra", sim1);
    wait_for(Duration::from_secs(30), "extra synced", || admin.cluster("extra")["status"]["phase"] == "Synced");

    // PUT moves it to the other simulator: its watchers reconnect there and
    // its objects become the new member's.
    for (path, body, code, reason) in [
        ("/admin/v1/clusters/extra", json!({"name": "other", "url": sim2.url()}), 400, "BadRequest"),
        ("/admin/v1/clusters/member1", json!({"name": "member1", "url": sim2.url()}), 409, "Conflict"),
        ("/admin/v1/clusters/nope", json!({"name": "nope", "url": sim2.url()}), 404, "NotFound"),
        ("/admin/v1/clusters/extra", json!({"name": "extra", "url": sim2.url(), "kubeconfig": "/k"}), 422, "Invalid"),
    ] {
        let (got, status) = admin.call("PUT", "/admin/v1/clusters/{name}", path, Some(&body.to_string()));
        assert_eq!((got, status["reason"].as_str()), (code, Some(reason)), "PUT {path} {body}: {status}");
    }
    let (code, _) = admin.call("PUT", "/admin/v1/clusters/{name}", "/admin/v1/clusters/extra", Some("{"));
    assert_eq!(code, 400);
    assert_eq!(admin.cluster("extra")["spec"]["url"], sim1.url(), "refused updates change nothing");
    let moved = json!({"name": "extra", "url": sim2.url()});
    let (code, updated) = admin.send_json("PUT", "/admin/v1/clusters/{name}", "/admin/v1/clusters/extra", &moved);
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"], moved, "the token went with the old spec");
    wait_reflects(&admin, "extra", sim2);
    assert_ne!(sim_objects(sim1, "/api/v1/nodes"), sim_objects(sim2, "/api/v1/nodes"), "the simulators differ");
    assert_eq!(admin.cluster("extra")["status"]["phase"], "Synced");
    let extra = admin.cluster("extra");
    assert_eq!(extra["status"]["resources"]["v1/nodes"]["objects"], 3);
    assert_eq!(extra["status"]["lastError"], Value::Null);

    // Resources and stats agree with each other and with the simulators.
    let resources = admin.get_ok("/admin/v1/resources", "/admin/v1/resources");
    let pods = resources["items"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap();
    assert_eq!((pods["apiVersion"].as_str(), pods["kind"].as_str(), pods["namespaced"].as_bool()), (Some("v1"), Some("Pod"), Some(true)));
    let (pods1, pods2) = (sim_objects(sim1, "/api/v1/pods").len() as u64, sim_objects(sim2, "/api/v1/pods").len() as u64);
    assert_eq!(pods["clusters"], json!({"extra": pods2, "member1": pods1, "member2": pods2}));
    assert_eq!(pods["objects"].as_u64(), Some(pods1 + 2 * pods2));
    let total: u64 = resources["items"].as_array().unwrap().iter().map(|r| r["objects"].as_u64().unwrap()).sum();
    let stats = admin.stats();
    assert_eq!(stats["objects"].as_u64(), Some(total));
    assert_eq!(stats["clusters"], 3);
    assert_eq!(stats["compactedResourceVersion"], 0);
    let head = stats["headResourceVersion"].as_u64().unwrap();
    assert!(head >= total, "every object took at least one event: head {head}, objects {total}");
    assert!(stats["dataDirBytes"].as_u64().unwrap() > 0);
    assert_eq!(stats["watches"], 0);

    // The resource selection: invalid ones are refused and change nothing;
    // a valid one is put in force (here the default again: nothing deleted).
    assert_eq!(resources["source"], "default");
    let default_selection = resources["selection"].clone();
    for (body, code, reason) in [
        ("{\"rules\": 3}".to_string(), 400, "BadRequest"),
        (json!({"rules": [{"resourceSelectors": [{"apiVersion": "v1", "kind": "Node", "namespace": "default"}]}]}).to_string(), 422, "Invalid"),
        (json!({"rules": [{"targetCluster": {"clusterNames": ["Bad_Name"]}, "resourceSelectors": []}]}).to_string(), 422, "Invalid"),
    ] {
        let (got, status) = admin.call("PUT", "/admin/v1/resources", "/admin/v1/resources", Some(&body));
        assert_eq!((got, status["reason"].as_str()), (code, Some(reason)), "PUT {body}: {status}");
    }
    assert_eq!(admin.get_ok("/admin/v1/resources", "/admin/v1/resources"), resources, "refused selections change nothing");
    let (code, set) = admin.send_json("PUT", "/admin/v1/resources", "/admin/v1/resources", &default_selection);
    assert_eq!(code, 200, "{set}");
    assert_eq!((set["source"].as_str(), set["deletedObjects"].as_u64()), (Some("api"), Some(0)));
    assert_eq!(set["items"].as_array().unwrap().len(), 10);

    // An open watch shows in the stats, by user agent.
    let watch = reqwest::blocking::Client::new()
        .get(format!("{}/api/v1/pods?watch=1&timeoutSeconds=30", kf.url))
        .bearer_auth(ADMIN)
        .header("User-Agent", "admin-api-test/1.0 (linux)")
        .send()
        .unwrap();
    wait_for(Duration::from_secs(10), "the watch counted", || admin.stats()["watches"] == 1);
    assert_eq!(admin.stats()["watchClientsByUserAgent"], json!({"admin-api-test/1.0": 1}));
    drop(watch);

    // Compaction, then a backup.
    let (code, compacted) = admin.call("POST", "/admin/v1/compact", "/admin/v1/compact", None);
    assert_eq!(code, 200, "{compacted}");
    assert!(compacted["floor"].as_u64().unwrap() <= head);
    assert_eq!(admin.stats()["compactedResourceVersion"], compacted["floor"]);
    let response = admin.http.post(format!("{}/admin/v1/backup", kf.url)).bearer_auth(ADMIN).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    contract.response_schema("/admin/v1/backup", "post", 200, "application/octet-stream");
    contract.answered.lock().unwrap().insert(("/admin/v1/backup".into(), "post".into(), 200));
    assert!(!response.bytes().unwrap().is_empty());

    // Estimators: a static endpoint that answers, DNS names not probed.
    let row = |rows: &Value, cluster: &str| rows.as_array().unwrap().iter().find(|r| r["cluster"] == cluster).cloned();
    wait_for(Duration::from_secs(30), "member1's estimator probed", || {
        admin.get_ok("/admin/v1/estimators/{cluster}", "/admin/v1/estimators/member1")["probe"]["reachable"] == true
    });
    let rows = admin.get_ok("/admin/v1/estimators", "/admin/v1/estimators");
    let clusters: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["cluster"].as_str().unwrap()).collect();
    assert_eq!(clusters, ["extra", "member1", "member2"]);
    let member1 = row(&rows, "member1").unwrap();
    assert_eq!((member1["rule"].as_str(), &member1["addresses"]), (Some("static"), &json!([estimator.local_addr().unwrap().to_string()])));
    assert_eq!(row(&rows, "member2").unwrap()["rule"], "dnsFallback");
    let (code, status) = admin.get("/admin/v1/estimators/{cluster}", "/admin/v1/estimators/nope");
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    let (code, status) = admin.get("/admin/v1/estimators", "/admin/v1/estimators?watch=maybe");
    assert_eq!((code, status["message"].as_str()), (400, Some("invalid boolean value \"maybe\"")));
    let (code, _) = admin.get("/admin/v1/estimators", "/admin/v1/estimators?timeoutSeconds=soon");
    assert_eq!(code, 400);

    // The estimator watch: the table as ADDED, then a registration and a removal.
    let response = admin.http.get(format!("{}/admin/v1/estimators?watch=true&timeoutSeconds=60", kf.url)).bearer_auth(ADMIN).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(response).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_event = |wanted: (&str, &str)| -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_else(|_| panic!("no {wanted:?} event"));
            let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            contract.check("/admin/v1/estimators", "get", 200, "application/json;stream=watch", &event);
            if (event["type"].as_str(), event["object"]["cluster"].as_str()) == (Some(wanted.0), Some(wanted.1)) {
                return event;
            }
        }
    };
    for cluster in ["extra", "member1", "member2"] {
        next_event(("ADDED", cluster));
    }
    let (code, _) = admin.send_json("POST", "/admin/v1/clusters", "/admin/v1/clusters", &json!({"name": "late", "url": dead_port_url()}));
    assert_eq!(code, 201);
    assert_eq!(next_event(("ADDED", "late"))["object"]["rule"], "dnsFallback");
    let late = admin.cluster("late");
    assert_ne!(late["status"]["phase"], "Synced", "nothing answers there: {late}");

    // Removal: the objects become DELETED events, the name is free again.
    let (code, removed) = admin.call("DELETE", "/admin/v1/clusters/{name}", "/admin/v1/clusters/late", None);
    assert_eq!((code, &removed), (200, &json!({"name": "late", "deletedObjects": 0})));
    next_event(("DELETED", "late"));
    let expected: u64 = type_counts(&admin, "extra", sim2).1.values().sum();
    let (code, removed) = admin.call("DELETE", "/admin/v1/clusters/{name}", "/admin/v1/clusters/extra", None);
    assert_eq!(code, 200, "{removed}");
    assert_eq!(removed["deletedObjects"].as_u64(), Some(expected));
    assert!(admin.member_objects("/api/v1/pods", "extra").is_empty());
    let (code, status) = admin.call("DELETE", "/admin/v1/clusters/{name}", "/admin/v1/clusters/extra", None);
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    let (code, _) = admin.get("/admin/v1/clusters/{name}", "/admin/v1/clusters/extra");
    assert_eq!(code, 404);
    assert_eq!(admin.stats()["clusters"], 2);

    contract.assert_every_operation_answered();
    assert!(!kf.logs().contains(MEMBER_SECRET), "a member token was logged");
}

#[test]
fn an_updated_cluster_follows_its_new_member_after_a_restart() {
    // After a restart the watchers start from the checkpoints in the store:
    // a PUT to another member must not resume there from the old member's
    // resourceVersions (which may be ahead of the new member's: its watch
    // then succeeds, delivers nothing, and the old member's objects stay).
    let contract = Contract::load();
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    let tokens = token_file(tmp.path());
    let flags = ["--token-auth-file", tokens.to_str().unwrap()];
    let kf = Kubefold::serve(&dir, &cluster_flags(&members[..1]), &flags);
    kf.wait_ready();
    let admin = Admin::new(&kf, Some(ADMIN), &contract);
    let (code, _) = admin.send_json("POST", "/admin/v1/clusters", "/admin/v1/clusters", &json!({"name": "extra", "url": members[0].1.url()}));
    assert_eq!(code, 201);
    wait_reflects(&admin, "extra", &members[0].1);
    drop(admin);
    kf.stop();

    let kf = Kubefold::serve(&dir, &cluster_flags(&members[..1]), &flags);
    kf.wait_ready();
    let admin = Admin::new(&kf, Some(ADMIN), &contract);
    assert_eq!(admin.cluster("extra")["source"], "api", "the registration persisted");
    let (code, _) = admin.send_json("PUT", "/admin/v1/clusters/{name}", "/admin/v1/clusters/extra", &json!({"name": "extra", "url": members[1].1.url()}));
    assert_eq!(code, 200);
    wait_reflects(&admin, "extra", &members[1].1);
}

#[test]
fn a_streamed_backup_restores_to_a_data_dir_serving_the_same_objects_above_every_rv_served() {
    let contract = Contract::load();
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    let tokens = token_file(tmp.path());
    let flags = ["--token-auth-file", tokens.to_str().unwrap()];
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &flags);
    kf.wait_ready();
    let admin = Admin::new(&kf, Some(ADMIN), &contract);
    let extra = demo_members(1, 0.0);
    let spec = json!({"name": "extra", "url": extra[0].1.url(), "token": MEMBER_SECRET});
    assert_eq!(admin.send_json("POST", "/admin/v1/clusters", "/admin/v1/clusters", &spec).0, 201);
    wait_reflects(&admin, "extra", &extra[0].1);

    let before = admin.stats();
    let file = tmp.path().join("backup.bin");
    let mut response = admin.http.post(format!("{}/admin/v1/backup", kf.url)).bearer_auth(ADMIN).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("content-length").is_none(), "the backup streams");
    let written = response.copy_to(&mut std::fs::File::create(&file).unwrap()).unwrap();
    assert!(written > 0);
    let after = admin.stats();
    assert_eq!(before["headResourceVersion"], after["headResourceVersion"], "nothing changed while the backup was taken");
    let head = after["headResourceVersion"].as_u64().unwrap();

    // The backup's header: the resourceVersion a restore continues above.
    let header = String::from_utf8_lossy(&std::fs::read(&file).unwrap()[..100]).into_owned();
    let min_rv: u64 = header.lines().nth(2).and_then(|l| l.strip_prefix("min-resource-version ")?.parse().ok()).unwrap_or_else(|| panic!("{header:?}"));
    assert!(min_rv > head, "{header:?}");
    let (stdout, restored) = restore(&file, &tmp.path().join("restored"));
    assert!(stdout.contains(&format!("head resourceVersion {head}, continuing above resourceVersion {min_rv}")), "{stdout}");

    // A kubefold on the restored dir serves the same objects and
    // registrations, above every resourceVersion the original served,
    // before and after it lists the members again.
    let copy = Kubefold::serve(&restored, &cluster_flags(&members), &flags);
    let copy_admin = Admin::new(&copy, Some(ADMIN), &contract);
    let first = copy_admin.stats();
    assert_eq!(first["headResourceVersion"].as_u64(), Some(min_rv));
    assert_eq!(first["objects"], after["objects"]);
    copy.wait_ready();
    let pods = |a: &Admin| a.kube_get("/api/v1/pods");
    let (original_pods, copied_pods) = (pods(&admin), pods(&copy_admin));
    assert_eq!(original_pods["metadata"]["resourceVersion"], head.to_string());
    assert_eq!(copied_pods["metadata"]["resourceVersion"], min_rv.to_string());
    assert_eq!(copied_pods["items"], original_pods["items"]);
    let registered = copy_admin.cluster("extra");
    assert_eq!(registered["source"], "api");
    assert_eq!(registered["spec"]["token"], serde_json::Value::Null, "a backup leaves member credentials out unless asked");
    assert_eq!(copy_admin.stats()["headResourceVersion"].as_u64(), Some(min_rv), "listing the unchanged members again makes no events");
}

// ---------------------------------------------------------------------------
// `kubefold admin ...`
// ---------------------------------------------------------------------------

/// Runs `kubefold admin` with `global` flags and `args`; (success, stdout, stderr).
fn kubefold_admin(global: &[&str], args: &[&str]) -> (bool, String, String) {
    let out = Command::new("timeout")
        .arg("120")
        .arg(env!("CARGO_BIN_EXE_kubefold"))
        .arg("admin")
        .args(global)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The rules of the default resource selection.
fn kubefold_default_rules() -> Value {
    serde_json::to_value(kubefold_engine::selection::ResourceSelection::default()).unwrap()["rules"].clone()
}

/// A table as rows of cells (split on runs of 2+ spaces, as kubectl's
/// columns are three spaces apart and no cell here holds two spaces).
fn parse_table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect())
        .collect()
}

#[test]
fn kubefold_admin_wraps_every_operation_over_tls() {
    let members = demo_members(2, 0.0);
    let (tmp, dir) = data_dir();
    let pki = TestPki::write(tmp.path());
    let tokens = token_file(tmp.path());
    let kf = Kubefold::serve(
        &dir,
        &cluster_flags(&members),
        &[
            "--tls-cert-file", pki.cert_file.to_str().unwrap(),
            "--tls-private-key-file", pki.key_file.to_str().unwrap(),
            "--token-auth-file", tokens.to_str().unwrap(),
        ],
    );
    assert!(kf.url.starts_with("https://"), "{}", kf.url);
    let http = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&pki.ca_file).unwrap()).unwrap())
        .build()
        .unwrap();
    let api = |path: &str| -> Value {
        let response = http.get(format!("{}{path}", kf.url)).bearer_auth(ADMIN).send().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        response.json().unwrap()
    };
    wait_for(Duration::from_secs(60), "ready", || http.get(format!("{}/readyz", kf.url)).send().is_ok_and(|r| r.status() == 200));
    let admin_token = tmp.path().join("admin.token");
    std::fs::write(&admin_token, format!("{ADMIN}\n")).unwrap();
    let global = ["--server", &kf.url, "--token-file", admin_token.to_str().unwrap(), "--ca-file", pki.ca_file.to_str().unwrap()];
    let admin = |args: &[&str]| -> String {
        let (ok, stdout, stderr) = kubefold_admin(&global, args);
        assert!(ok, "kubefold admin {args:?} failed: {stderr}");
        assert!(!stdout.contains(MEMBER_SECRET) && !stderr.contains(MEMBER_SECRET));
        stdout
    };
    let admin_fails = |args: &[&str]| -> String {
        let (ok, stdout, stderr) = kubefold_admin(&global, args);
        assert!(!ok, "kubefold admin {args:?} succeeded: {stdout}");
        stderr
    };

    // clusters list: one row per member, objects summed over resource types.
    let table = parse_table(&admin(&["clusters", "list"]));
    assert_eq!(table[0], ["NAME", "SOURCE", "PHASE", "OBJECTS", "RELISTS", "RECONNECTS", "LAST-ERROR"]);
    let status = api("/admin/v1/clusters/member1")["status"].clone();
    let objects: u64 = status["resources"].as_object().unwrap().values().map(|r| r["objects"].as_u64().unwrap()).sum();
    assert_eq!(
        table[1],
        ["member1", "config", "Synced", &objects.to_string(), &status["relists"].to_string(), &status["reconnects"].to_string(), "<none>"]
    );
    assert_eq!(table[2][..3], ["member2", "config", "Synced"]);
    assert_eq!(table.len(), 3);

    // clusters add / get / remove, and what the server refuses.
    let extra = demo_members(1, 0.0);
    let url = extra[0].1.url();
    let stdout = admin(&["clusters", "add", "extra", "--url", &url, "--token", MEMBER_SECRET, "--label", "env=test"]);
    assert_eq!(stdout, "cluster \"extra\" registered (phase Connecting)\n");
    let stderr = admin_fails(&["clusters", "add", "extra", "--url", &url]);
    assert!(stderr.contains("POST /admin/v1/clusters: 409 AlreadyExists: cluster \"extra\" already exists"), "{stderr}");
    let stderr = admin_fails(&["clusters", "add", "Bad_Name", "--url", &url]);
    assert!(stderr.contains("422 Invalid: cluster name \"Bad_Name\" must be a DNS-1123 label"), "{stderr}");
    let stderr = admin_fails(&["clusters", "add", "nowhere"]);
    assert!(stderr.contains("--url") && stderr.contains("--kubeconfig"), "the CLI asks for a target: {stderr}");
    let stderr = admin_fails(&["clusters", "get", "nope"]);
    assert!(stderr.contains("GET /admin/v1/clusters/nope: 404 NotFound: clusters.admin.kubefold.io \"nope\" not found"), "{stderr}");
    // Every watcher listed (the phase alone can read Synced before some of
    // a newly registered cluster's watchers have reported).
    wait_for(Duration::from_secs(60), "extra synced", || {
        let status = api("/admin/v1/clusters/extra")["status"].clone();
        status["phase"] == "Synced" && status["resources"].as_object().unwrap().values().filter(|w| w["state"] == "synced").count() == 10
    });
    let yaml: serde_json::Value = serde_saphyr::from_str(&admin(&["clusters", "get", "extra"])).unwrap();
    assert_eq!(yaml["spec"]["name"].as_str(), Some("extra"));
    assert_eq!(yaml["spec"]["url"].as_str(), Some(url.as_str()));
    assert_eq!(yaml["spec"]["token"].as_str(), Some("<redacted>"));
    assert_eq!(yaml["spec"]["labels"]["env"].as_str(), Some("test"));
    assert_eq!(yaml["source"].as_str(), Some("api"));
    assert_eq!(yaml["status"]["phase"].as_str(), Some("Synced"));
    let pods = api("/admin/v1/clusters/extra")["status"]["resources"]["v1/pods"]["objects"].as_u64().unwrap();
    assert_eq!(yaml["status"]["resources"]["v1/pods"]["objects"].as_u64(), Some(pods));
    let listed: Vec<Vec<String>> = parse_table(&admin(&["clusters", "list"]));
    assert_eq!(listed[1][..3], ["extra", "api", "Synced"]);

    // resources, stats, estimators.
    let table = parse_table(&admin(&["resources"]));
    assert_eq!(table[0], ["APIVERSION", "KIND", "RESOURCE", "NAMESPACED", "OBJECTS", "CLUSTERS"]);
    let row = table.iter().find(|r| r[2] == "pods").unwrap();
    let served = api("/admin/v1/resources")["items"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap().clone();
    let clusters: Vec<String> = served["clusters"].as_object().unwrap().iter().map(|(c, n)| format!("{c}={n}")).collect();
    assert_eq!(row, &["v1", "Pod", "pods", "true", &served["objects"].to_string(), &clusters.join(",")]);
    assert_eq!(table.iter().find(|r| r[2] == "deployments").unwrap()[..4], ["apps/v1", "Deployment", "deployments", "true"]);
    assert_eq!(table.len(), 11);

    // resources get / set: the selection, replaced from a file (here only
    // pods, of the clusters labelled env=test, plus nodes everywhere).
    let shown: serde_json::Value = serde_saphyr::from_str(&admin(&["resources", "get"])).unwrap();
    assert_eq!(shown["source"].as_str(), Some("default"));
    assert_eq!(shown["selection"]["rules"][0]["resourceSelectors"].as_array().map(Vec::len), Some(10));
    let selection_file = tmp.path().join("selection.yaml");
    std::fs::write(
        &selection_file,
        "- targetCluster: {labelSelector: {matchLabels: {env: test}}}\n  resourceSelectors: [{apiVersion: v1, kind: Pod}]\n- resourceSelectors: [{apiVersion: v1, kind: Node}]\n",
    )
    .unwrap();
    let member_pods: u64 = ["member1", "member2"]
        .iter()
        .map(|c| api(&format!("/admin/v1/clusters/{c}"))["status"]["resources"]["v1/pods"]["objects"].as_u64().unwrap())
        .sum();
    let others: u64 = api("/admin/v1/resources")["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resource"] != "pods" && r["resource"] != "nodes")
        .map(|r| r["objects"].as_u64().unwrap())
        .sum();
    let stdout = admin(&["resources", "set", "-f", selection_file.to_str().unwrap()]);
    assert_eq!(stdout, format!("resource selection set: 2 types served, 0 waiting for discovery, {} objects deleted\n", member_pods + others));
    let table = parse_table(&admin(&["resources"]));
    assert_eq!(table.iter().skip(1).map(|r| r[2].as_str()).collect::<Vec<_>>(), ["pods", "nodes"]);
    let shown: serde_json::Value = serde_saphyr::from_str(&admin(&["resources", "get"])).unwrap();
    assert_eq!(shown["source"].as_str(), Some("api"));
    std::fs::write(&selection_file, "rules: [{resourceSelectors: [{apiVersion: v1, kind: Pod, namespace: Bad_NS}]}]\n").unwrap();
    let stderr = admin_fails(&["resources", "set", "-f", selection_file.to_str().unwrap()]);
    assert!(stderr.contains("PUT /admin/v1/resources: 422 Invalid: resource selection is invalid: rules[0].resourceSelectors[0].namespace"), "{stderr}");
    let defaults = serde_saphyr::to_string(&serde_json::json!({"rules": kubefold_default_rules()})).unwrap();
    std::fs::write(&selection_file, defaults).unwrap();
    admin(&["resources", "set", "-f", selection_file.to_str().unwrap()]);
    wait_for(Duration::from_secs(60), "the default selection synced again", || {
        let status = api("/admin/v1/clusters/member1")["status"].clone();
        status["phase"] == "Synced" && status["resources"].as_object().unwrap().len() == 10
    });

    // The other members may still be syncing: compare a table read while
    // the figures stood still (the same before and after it).
    let (table, stats) = (0..50)
        .find_map(|_| {
            let figures = |stats: &serde_json::Value| ["headResourceVersion", "objects", "events"].map(|k| stats[k].clone());
            let before = api("/admin/v1/stats");
            let table = parse_table(&admin(&["stats"]));
            let after = api("/admin/v1/stats");
            if figures(&before) == figures(&after) {
                return Some((table, after));
            }
            std::thread::sleep(Duration::from_millis(200));
            None
        })
        .expect("the stats stood still for the length of one `kubefold admin stats`");
    assert_eq!(table[0], ["HEAD-RV", "COMPACTED-RV", "OBJECTS", "EVENTS", "DATA-DIR", "WATCHES", "CLUSTERS"]);
    assert_eq!(table[1][..4], [stats["headResourceVersion"].to_string(), "0".into(), stats["objects"].to_string(), stats["events"].to_string()]);
    assert!(table[1][4].ends_with("iB"), "a human size: {:?}", table[1]);
    assert_eq!(table[1][5..], ["0", "3"]);

    let table = parse_table(&admin(&["estimators"]));
    assert_eq!(table[0], ["CLUSTER", "RULE", "ADDRESSES", "REACHABLE", "LATENCY", "PROBED", "ERROR"]);
    let rows: Vec<(&str, &str)> = table[1..].iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    assert_eq!(rows, [("extra", "dnsFallback"), ("member1", "dnsFallback"), ("member2", "dnsFallback")]);
    assert!(table[1][2].starts_with("karmada-scheduler-estimator-extra.karmada-system.svc"), "{:?}", table[1]);

    // compact, backup (with its progress line), restore.
    let stdout = admin(&["compact"]);
    let floor = api("/admin/v1/stats")["compactedResourceVersion"].as_u64().unwrap();
    assert!(stdout.starts_with(&format!("event log compacted up to resourceVersion {floor}: ")), "{stdout}");
    let file = tmp.path().join("admin-backup.bin");
    let (ok, stdout, stderr) = kubefold_admin(&global, &["backup", "--out", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "", "progress and summary go to stderr");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(stderr.starts_with("\rwaiting for the backup to start..."), "{stderr:?}");
    let summary = stderr.rsplit('\r').next().unwrap();
    assert!(summary.starts_with(&format!("backup written to {}: ", file.display())), "{stderr:?}");
    assert!(summary.contains(&format!("({size} bytes) in ")) && summary.trim_end().ends_with("/s"), "{summary:?}");
    assert!(stderr.ends_with('\n'));
    assert!(!tmp.path().join("admin-backup.bin.partial").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "a backup holds member credentials");
    }
    let head = api("/admin/v1/stats")["headResourceVersion"].as_u64().unwrap();
    let (stdout, _) = restore(&file, &tmp.path().join("restored"));
    assert!(stdout.contains(&format!("head resourceVersion {head}")), "{stdout}");

    let stdout = admin(&["clusters", "remove", "extra"]);
    let deleted: u64 = stdout
        .strip_prefix("cluster \"extra\" removed: ")
        .and_then(|s| s.strip_suffix(" objects deleted\n"))
        .unwrap_or_else(|| panic!("{stdout}"))
        .parse()
        .unwrap();
    assert!(deleted >= pods, "{deleted} objects deleted, {pods} pods alone");
    let stderr = admin_fails(&["clusters", "remove", "extra"]);
    assert!(stderr.contains("DELETE /admin/v1/clusters/extra: 404 NotFound"), "{stderr}");

    // Credentials and TLS.
    let no_token = ["--server", &kf.url, "--ca-file", pki.ca_file.to_str().unwrap()];
    let (ok, _, stderr) = kubefold_admin(&no_token, &["stats"]);
    assert!(!ok && stderr.contains("GET /admin/v1/stats: 401 Unauthorized: Unauthorized"), "{stderr}");
    let viewer = ["--server", &kf.url, "--token", VIEWER, "--ca-file", pki.ca_file.to_str().unwrap()];
    let (ok, _, stderr) = kubefold_admin(&viewer, &["clusters", "list"]);
    assert!(!ok && stderr.contains("403 Forbidden: forbidden: User \"viewer\" cannot get path \"/admin/v1/clusters\""), "{stderr}");
    let (ok, _, stderr) = kubefold_admin(&["--server", &kf.url, "--token", ADMIN], &["stats"]);
    assert!(!ok && stderr.contains("cannot reach kubefold") && stderr.to_lowercase().contains("certificate"), "an unknown CA: {stderr}");
    let (ok, stdout, stderr) = kubefold_admin(&["--server", &kf.url, "--token", ADMIN, "--insecure-skip-tls-verify"], &["stats"]);
    assert!(ok && stdout.starts_with("HEAD-RV"), "{stderr}");
    let (ok, _, stderr) = kubefold_admin(&["--server", &dead_port_url(), "--token", ADMIN], &["stats"]);
    assert!(!ok && stderr.contains("GET /admin/v1/stats: cannot reach kubefold at http://127.0.0.1:"), "{stderr}");
    let (ok, _, stderr) = kubefold_admin(&["--server", "127.0.0.1:8080"], &["stats"]);
    assert!(!ok && stderr.contains("must be an http:// or https:// URL"), "{stderr}");
    assert!(!kf.logs().contains(MEMBER_SECRET), "a member token was logged");
}
