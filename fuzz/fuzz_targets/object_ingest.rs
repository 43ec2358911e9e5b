//! `object::ingest` on arbitrary bytes (a member's object): it never panics,
//! and an object it accepts is served as valid JSON that is the member's
//! object with exactly kubefold's changes: `kind` and `apiVersion` filled in
//! when missing, `metadata.name` qualified, `metadata.resourceVersion` the
//! global RV, and the two `kubefold.io/` annotations set; its selectable
//! fields are those of the whole object; `ingest_read` of the same text
//! read as a raw value gives the same result.
//!
//! The resource type is picked by the input's length, so mutations visit
//! every built-in type (their selectable fields differ) while the seeds stay
//! plain JSON files.
#![no_main]

use kubefold_engine::fields;
use kubefold_engine::object::{ingest, ingest_read, CLUSTER_ANNOTATION, MEMBER_RV_ANNOTATION};
use kubefold_engine::resources::builtin;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const CLUSTER: &str = "member-1";

/// What kubefold should serve for `member`, computed the simple way.
fn expected(member: &Value, kind: &str, api_version: &str, name: &str, rv: u64) -> Value {
    let mut object = member.clone();
    let map = object
        .as_object_mut()
        .expect("ingest accepted a non-object");
    if !map.contains_key("kind") || !map.contains_key("apiVersion") {
        map.insert("kind".into(), Value::String(kind.into()));
        map.insert("apiVersion".into(), Value::String(api_version.into()));
    }
    let meta = map["metadata"]
        .as_object_mut()
        .expect("ingest accepted an object without metadata");
    let member_rv = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    meta.insert("name".into(), Value::String(name.into()));
    meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    let annotations = annotations.as_object_mut().unwrap();
    annotations.insert(CLUSTER_ANNOTATION.into(), Value::String(CLUSTER.into()));
    annotations.insert(MEMBER_RV_ANNOTATION.into(), Value::String(member_rv));
    object
}

fuzz_target!(|data: &[u8]| {
    let catalog = builtin();
    let resource = &catalog[data.len() % catalog.len()];
    let result = ingest(resource, CLUSTER, data);
    // Text read as a raw value (what watchers pass) ingests the same way.
    if let Ok(raw) = serde_json::from_slice::<&serde_json::value::RawValue>(data) {
        match (&result, ingest_read(resource, CLUSTER, raw)) {
            (Ok(bytes), Ok(read)) => assert_eq!(bytes, &read, "ingest_read differs from ingest"),
            (bytes, read) => assert_eq!(bytes.is_err(), read.is_err(), "ingest_read accepts what ingest refuses, or refuses what it accepts"),
        }
    }
    let Ok(ingested) = result else {
        return;
    };
    let member: Value = serde_json::from_slice(data).expect("ingest accepted invalid JSON");
    assert_eq!(
        member["metadata"]["name"].as_str(),
        Some(ingested.name.as_str()),
        "ingested name is not metadata.name"
    );
    let body = &ingested.body;
    assert!(
        body.name_end as usize <= body.json.len() && body.rv_at as usize <= body.json.len(),
        "holes outside the body: name_end {} rv_at {} len {}",
        body.name_end,
        body.rv_at,
        body.json.len()
    );
    for (suffix, rv) in [
        (Some(format!("_{CLUSTER}")), 1_234_567u64),
        (None, 0),
        (None, u64::MAX),
    ] {
        let served = body.to_bytes(suffix.as_deref(), rv);
        let served: Value = serde_json::from_slice(&served).unwrap_or_else(|e| {
            panic!(
                "served body is not JSON ({e}): {}",
                String::from_utf8_lossy(&served)
            )
        });
        let name = format!("{}{}", ingested.name, suffix.as_deref().unwrap_or(""));
        let want = expected(&member, &resource.kind, &resource.api_version(), &name, rv);
        assert_eq!(
            served, want,
            "served object differs from the member's object"
        );
    }
    // The selectable fields, read from the parts ingest keeps, are what
    // the whole object gives.
    assert_eq!(
        ingested.fields,
        fields::extract(&resource.group, &resource.plural, &member),
        "selectable fields differ from the whole object's"
    );
});
