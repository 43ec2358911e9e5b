//! Bad input gets the Kubernetes Status kube-apiserver would return, with
//! its code and reason, and changes nothing.

mod common;

use common::*;
use serde_json::Value;

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
}

fn case(what: &'static str, method: &'static str, path: impl Into<String>, code: u16, reason: &'static str) -> Case {
    Case { what, method, path: path.into(), content_type: None, body: Vec::new(), code, reason }
}

fn with_body(mut c: Case, content_type: &'static str, body: impl Into<Vec<u8>>) -> Case {
    c.content_type = Some(content_type);
    c.body = body.into();
    c
}

#[test]
fn bad_input_gets_the_status_kube_apiserver_returns_and_changes_nothing() {
    let members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let pod = "/api/v1/namespaces/default/pods/web-0_member1";
    let before = kf.get_json("/api/v1/pods");
    let head = before["metadata"]["resourceVersion"].clone();
    let huge = vec![b' '; 4 * 1024 * 1024];
    let cases = vec![
        with_body(case("malformed JSON body", "PUT", pod, 400, "BadRequest"), "application/json", "{\"metadata\": "),
        with_body(case("malformed YAML body", "PUT", pod, 400, "BadRequest"), "application/yaml", "metadata: [unclosed"),
        with_body(case("JSON that is not an object", "PUT", pod, 400, "BadRequest"), "application/json", "[1,2]"),
        with_body(case("unknown patch type", "PATCH", pod, 415, "UnsupportedMediaType"), "text/plain", "x"),
        with_body(case("malformed merge patch", "PATCH", pod, 400, "BadRequest"), "application/merge-patch+json", "{"),
        with_body(case("malformed JSON patch", "PATCH", pod, 400, "BadRequest"), "application/json-patch+json", "[{"),
        with_body(case("body over the limit", "PUT", pod, 413, "RequestEntityTooLarge"), "application/json", huge),
        case("unknown resource", "GET", "/api/v1/frobs", 404, "NotFound"),
        case("unknown version", "GET", "/apis/apps/v9/deployments", 404, "NotFound"),
        case("unknown group", "GET", "/apis/nope.example.com/v1/things", 404, "NotFound"),
        case("name that cannot exist", "GET", "/api/v1/namespaces/default/pods/Bad_Name!", 404, "NotFound"),
        case("unknown subresource", "GET", format!("{pod}/frobnicate"), 404, "NotFound"),
        case("invalid label selector", "GET", "/api/v1/pods?labelSelector=a%20in%20(b", 400, "BadRequest"),
        case("invalid label value", "GET", "/api/v1/pods?labelSelector=a%3D%24%24", 400, "BadRequest"),
        case("invalid field selector", "GET", "/api/v1/pods?fieldSelector=spec.nodeName", 400, "BadRequest"),
        case("unsupported field", "GET", "/api/v1/pods?fieldSelector=spec.priority%3D1", 400, "BadRequest"),
        case("garbage continue token", "GET", "/api/v1/pods?limit=1&continue=%%%", 400, "BadRequest"),
        case("tampered continue token", "GET", "/api/v1/pods?limit=1&continue=eyJydiI6MSwibnMiOiIiLCJuYW1lIjoiIiwiY2x1c3RlciI6IiIsIm1hYyI6IjAwIn0", 400, "BadRequest"),
        case("non-numeric resourceVersion", "GET", "/api/v1/pods?resourceVersion=abc", 400, "BadRequest"),
        case("huge resourceVersion", "GET", "/api/v1/pods?resourceVersion=99999999999999999999999", 400, "BadRequest"),
        case("negative resourceVersion", "GET", "/api/v1/pods?resourceVersion=-1", 400, "BadRequest"),
        case("invalid timeoutSeconds", "GET", "/api/v1/pods?watch=1&timeoutSeconds=soon", 400, "BadRequest"),
        case("invalid limit", "GET", "/api/v1/pods?limit=many", 400, "BadRequest"),
        case("invalid watch flag", "GET", "/api/v1/pods?watch=perhaps", 400, "BadRequest"),
        case("encoded slash", "GET", "/api/v1/namespaces/default/pods/a%2Fb", 400, "BadRequest"),
        case("namespace on a cluster-scoped type", "GET", "/api/v1/namespaces/default/nodes", 404, "NotFound"),
        case("ambiguous bare name", "DELETE", "/api/v1/namespaces/default/pods/web-0", 409, "Conflict"),
        with_body(case("create without a cluster", "POST", "/api/v1/namespaces/default/configmaps", 400, "BadRequest"), "application/json", r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#),
        with_body(case("invalid delete options", "DELETE", pod, 400, "BadRequest"), "application/json", "{nope"),
        case("method not allowed on discovery", "POST", "/api/v1", 405, "MethodNotAllowed"),
        case("invalid resourceVersionMatch", "GET", "/api/v1/pods?resourceVersion=1&resourceVersionMatch=Maybe", 422, "Invalid"),
    ];
    let client = reqwest::blocking::Client::new();
    for c in &cases {
        let mut req = client.request(c.method.parse().unwrap(), format!("{}{}", kf.url, c.path));
        if let Some(ct) = c.content_type {
            req = req.header("Content-Type", ct).body(c.body.clone());
        }
        let resp = req.send().unwrap_or_else(|e| panic!("{}: {e}", c.what));
        let code = resp.status().as_u16();
        let text = resp.text().unwrap();
        assert_eq!(code, c.code, "{}: {text}", c.what);
        let status: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{}: not a Status: {text}", c.what));
        assert_eq!(status["kind"], "Status", "{}", c.what);
        assert_eq!(status["status"], "Failure", "{}", c.what);
        assert_eq!(status["code"], c.code, "{}", c.what);
        assert_eq!(status["reason"], c.reason, "{}: {text}", c.what);
        assert!(!status["message"].as_str().unwrap_or("").is_empty(), "{}: a message", c.what);
    }
    // Dot-dot segments (sent raw: HTTP clients normalise them away).
    for path in ["/api/v1/namespaces/../pods", "/api/v1/namespaces/%2E%2E/pods", "/api/v1/./pods"] {
        let (code, body) = raw_get(&kf.url, path);
        assert_eq!(code, 404, "{path}: {body}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["reason"], "NotFound", "{path}");
    }
    // A JSON patch that does not apply is refused by the member and passed back.
    let resp = client
        .patch(format!("{}{pod}", kf.url))
        .header("Content-Type", "application/json-patch+json")
        .body(r#"[{"op":"test","path":"/metadata/labels/app","value":"not-this"}]"#)
        .send()
        .unwrap();
    // kube-apiserver answers a JSON patch that fails to apply 422 Invalid
    // (apiserver/pkg/endpoints/handlers/patch.go: NewGenericServerResponse
    // with StatusUnprocessableEntity).
    let code = resp.status().as_u16();
    let status: Value = resp.json().unwrap();
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Invalid", "{status}");
    // Nothing changed.
    let after = kf.get_json("/api/v1/pods");
    assert_eq!(after["metadata"]["resourceVersion"], head, "no event was produced");
    assert_eq!(after["items"], before["items"]);
    // And kubefold still serves.
    assert_eq!(kf.get("/readyz").0, 200);
}

/// A GET written on the socket as given, without client-side path normalisation.
fn raw_get(base: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    // Un-chunk if needed: the body is one JSON object.
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => body[a..=b].to_string(),
        _ => body,
    };
    (code, body)
}
