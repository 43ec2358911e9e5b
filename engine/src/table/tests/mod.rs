//! Tests of the Table printers: columns, ages, custom resources, JSONPath.

mod apps;
mod core_group;
mod row;

use chrono::{DateTime, Duration, Utc};

use super::format::*;
use super::row::*;
use super::*;
use crate::resources::{builtin, find};

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

#[test]
fn walk_finds_what_json_pointer_finds() {
    let v = json!({"a": {"b": [{"c": 1}, {"c": 2}], "x/y": 3, "t~": 4, "": 5}});
    for pointer in ["", "/a", "/a/b", "/a/b/0", "/a/b/1/c", "/a/b/01", "/a/b/2", "/a/b/-", "/a/b/x", "/a/x~1y", "/a/t~0", "/a/", "/nope", "/a/b/0/c/d", "a"] {
        assert_eq!(v.walk(pointer), v.pointer(pointer), "{pointer:?}");
    }
}
