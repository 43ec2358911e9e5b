//! Inputs the fuzz targets in `fuzz/` found, minimized, each checked against
//! the property its target asserts. A test of a bug not fixed yet is marked
//! `#[ignore = "open bug: …"]` (run them with `-- --include-ignored`); the
//! mark goes with the fix.
//!
//! `object_ingest` found that `ingest` spliced the name and resourceVersion
//! at the first occurrence of its marker text, wherever the member's object
//! carried that text. `ingest` refused such objects for a while; it now
//! writes the served body itself and knows where its holes are, so such
//! objects are served as written.

use kubefold_engine::object::{ingest, CLUSTER_ANNOTATION, MEMBER_RV_ANNOTATION};
use kubefold_engine::resources::{self, ResourceType};
use serde_json::{json, Value};

fn pods() -> ResourceType {
    resources::find(&resources::builtin(), "", "v1", "pods")
        .unwrap()
        .clone()
}

/// The `object_ingest` property: `raw` is either refused, or served as the
/// member's object with only kubefold's changes (qualified name, global RV,
/// the two annotations); it never panics.
fn assert_served_faithfully(raw: &[u8]) {
    let Ok(ingested) = ingest(&pods(), "member1", raw) else {
        return;
    };
    let served = ingested.body.to_bytes(Some("_member1"), 42);
    let served: Value = serde_json::from_slice(&served).expect("served body is JSON");
    let mut want: Value = serde_json::from_slice(raw).unwrap();
    let object = want.as_object_mut().unwrap();
    if !object.contains_key("kind") || !object.contains_key("apiVersion") {
        object.insert("kind".into(), json!("Pod"));
        object.insert("apiVersion".into(), json!("v1"));
    }
    let meta = object["metadata"].as_object_mut().unwrap();
    let member_rv = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    meta.insert("name".into(), json!(format!("{}_member1", ingested.name)));
    meta.insert("resourceVersion".into(), json!("42"));
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[CLUSTER_ANNOTATION] = json!("member1");
    annotations[MEMBER_RV_ANNOTATION] = json!(member_rv);
    assert_eq!(served, want, "input {}", String::from_utf8_lossy(raw));
}

/// Found by `object_ingest`: ingest marks the resourceVersion hole with the
/// text `\u0001kubefold-rv\u0001` and cut its first occurrence, so the same
/// text earlier in a member's object (here a key) received the global RV and
/// the object was served with `resourceVersion: "\u0001kubefold-rv\u0001"`.
#[test]
fn rv_sentinel_text_in_a_member_object_is_not_the_rv_hole() {
    assert_served_faithfully(br#"{"\u0001kubefold-rv\u0001":0,"metadata":{"name":"a"}}"#);
    // The same text in a value: a label read by a person, for instance.
    assert_served_faithfully(
        br#"{"kind":"Pod","apiVersion":"v1","spec":{"x":"\u0001kubefold-rv\u0001"},"metadata":{"name":"a"}}"#,
    );
}

/// Found by `object_ingest`, the name variant of the bug above: the
/// `_<cluster>` suffix went into the member's text and the served name
/// kept the sentinel, `a\u0001kubefold-name\u0001`.
#[test]
fn name_sentinel_text_in_a_member_object_is_not_the_name_hole() {
    assert_served_faithfully(br#"{"\u0001kubefold-name\u0001":0,"metadata":{"name":"a"}}"#);
    // In the name itself.
    assert_served_faithfully(br#"{"metadata":{"name":"\u0001kubefold-name\u0001"}}"#);
}

/// Found by `object_ingest`, the worst effect of the bug above: a string
/// holding a backslash and then the sentinel text serialises as
/// `\\u0001kubefold-rv\u0001`; the cut left the first backslash, the RV
/// digits followed it, and the served string `"…\1234567"` was an invalid
/// JSON escape: every list of the type failed to decode, for every client.
#[test]
fn a_backslash_before_sentinel_text_does_not_make_invalid_json() {
    assert_served_faithfully(
        br#"{"spec":{"x":"\\u0001kubefold-rv\u0001"},"metadata":{"name":"a"}}"#,
    );
    assert_served_faithfully(
        br#"{"spec":{"x":"\\u0001kubefold-name\u0001"},"metadata":{"name":"a"}}"#,
    );
}

/// Derived from the findings above: text that becomes the RV sentinel only
/// once the name sentinel inside it is cut, placed first in the object, made
/// `ingest_value` compute `name_end = n - 23` with `n` = 18: an overflow
/// panic with debug assertions, and in release a `name_end` of 4294967291
/// that made `ServedBody::write` panic slicing out of range. A member could
/// crash the watcher that ingests its objects.
#[test]
fn sentinel_text_split_by_the_name_hole_does_not_panic() {
    let raw = br#"{"\u0001kubefold-r\u0001kubefold-name\u0001v\u0001":1,"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#;
    let outcome = std::panic::catch_unwind(|| assert_served_faithfully(raw));
    assert!(outcome.is_ok(), "ingest or serving panicked");
}

/// The text of the number the served JSON writes for `key` (its first
/// occurrence).
fn served_number<'a>(served: &'a str, key: &str) -> &'a str {
    let start = served.find(&format!("\"{key}\":")).expect("key is served") + key.len() + 3;
    let rest = &served[start..];
    &rest[..rest.find([',', '}']).unwrap_or(rest.len())]
}

/// Found by `object_ingest`: serde_json without its `float_roundtrip`
/// feature parses some numbers to a double that is not the nearest one, so a
/// member's `300…0` (3e47) is served as `2.9999999999999997e+47` and
/// `2.2250738585072011e-308` as `2.2250738585072014e-308`, where
/// kube-apiserver (Go's correctly rounded `strconv`) serves the nearest
/// double. A client that writes the object back changes the member's value.
#[test]
fn numbers_are_served_as_the_nearest_double() {
    for member in [
        "300000000000000000000000000000000000000000000000",
        "2.2250738585072011e-308",
    ] {
        let raw = format!(r#"{{"metadata":{{"name":"a"}},"spec":{{"x":{member}}}}}"#);
        let ingested = ingest(&pods(), "member1", raw.as_bytes()).unwrap();
        let served = String::from_utf8(ingested.body.to_bytes(None, 1)).unwrap();
        let served_text = served_number(&served, "x");
        let nearest: f64 = member.parse().unwrap();
        let served_value: f64 = served_text.parse().unwrap();
        assert_eq!(
            served_value.to_bits(),
            nearest.to_bits(),
            "member {member} served as {served_text}, nearest double {nearest:e}"
        );
    }
}

/// Found by `object_ingest`: ingest read the object's values as raw text,
/// which serde_json checks without decoding them, so a lone UTF-16
/// surrogate (`\ud813` then `d`) and a number out of range (`1e999`) were
/// accepted and served although the text is not valid JSON for a decoder.
#[test]
fn what_only_decoding_finds_invalid_is_refused() {
    let raw = b"{\"metadata\":{\"resourceVersion\":\"5\",\"name\":\"a\",\"annotations\":null},\"spec\":{\"zzz\":1,\"aaa\":[1.5,-2,1e10,true,null,\"\\u00e9\\ud813d\\ude00\"]}}\n";
    assert!(serde_json::from_slice::<Value>(raw).is_err(), "the input is invalid JSON");
    assert!(ingest(&pods(), "member1", raw).is_err());
    for raw in [&br#"{"metadata":{"name":"a"},"spec":{"n":1e999}}"#[..], br#"{"metadata":{"name":"a"},"spec":{"n":-1E+400}}"#] {
        assert!(serde_json::from_slice::<Value>(raw).is_err(), "the input is invalid JSON");
        assert!(ingest(&pods(), "member1", raw).is_err());
    }
    // A valid pair is accepted and served as the same text.
    let pair = br#"{"metadata":{"name":"a"},"spec":{"s":"\ud83d\ude00 \u00e9"}}"#;
    let ingested = ingest(&pods(), "member1", pair).unwrap();
    let served: Value = serde_json::from_slice(&ingested.body.to_bytes(None, 1)).unwrap();
    assert_eq!(served["spec"]["s"], "\u{1f600} \u{e9}");
    assert_served_faithfully(pair);
    assert_served_faithfully(raw);
}
