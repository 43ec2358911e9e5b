//! Tests of row templates and of rows printed from the parts a row keeps.

use super::*;

/// A row built from the parts [`row_keeps`] names equals the row built
/// from the whole object: cells, row conditions and the row's metadata,
/// for every type's fixture (kubernetes/api testdata) and for pods with
/// init containers, sidecars, readiness gates and a deletion.
#[test]
fn rows_from_the_kept_parts_equal_rows_from_the_whole_object() {
    let mut objects: Vec<(ResourceType, Vec<u8>)> =
        crate::fixtures::API_TYPES.iter().map(|(file, group, plural)| (resource(group, plural), crate::fixtures::read(file))).collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z",
                     "deletionTimestamp": "2025-06-01T12:00:29Z", "labels": {"app": "web"}, "annotations": {"a": "b"}},
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}, {"name": "mesh", "image": "envoy", "restartPolicy": "Always"}],
            "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}],
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "nodeName": "node-1", "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"operator": "Exists"}]
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.7", "nominatedNodeName": "node-2",
            "conditions": [{"type": "example.com/ready", "status": "True"}],
            "initContainerStatuses": [
                {"name": "setup", "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "mesh", "ready": true, "started": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:00:10Z"}}}
            ],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}},
                                   "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2025-06-01T12:00:20Z"}}}]
        }
    });
    objects.push((resource("", "pods"), serde_json::to_vec(&pod).unwrap()));
    let now = fixture_now();
    for (r, bytes) in objects {
        let whole: Value = serde_json::from_slice(&bytes).unwrap();
        let kept = parse_for_row(&bytes, row_keeps(&r)).unwrap();
        assert_eq!(cells(&r, &kept, "x", "c", now), cells(&r, &whole, "x", "c", now), "{} cells", r.plural);
        assert_eq!(row_conditions(&r, &kept), row_conditions(&r, &whole), "{} row conditions", r.plural);
        let source = parse_row_source(&bytes, row_keeps(&r)).unwrap();
        assert_eq!(cells(&r, &source.object, "x", "c", now), cells(&r, &whole, "x", "c", now), "{} cells (one pass)", r.plural);
        assert_eq!(row_conditions(&r, &source.object), row_conditions(&r, &whole), "{} row conditions (one pass)", r.plural);
        let metadata: Value = serde_json::from_str(source.metadata.expect("metadata").get()).unwrap();
        assert_eq!(metadata, whole["metadata"], "{} metadata as written", r.plural);
    }
    assert!(parse_row_source(b"{\"metadata\": {", row_keeps(&resource("", "pods"))).is_err());
    assert!(parse_row_source(b"{} x", row_keeps(&resource("", "pods"))).is_err());
    // Malformed JSON is an error, as with a whole parse.
    assert!(parse_for_row(b"{\"metadata\": {", row_keeps(&resource("", "pods"))).is_err());
    assert!(parse_for_row(b"{} x", row_keeps(&resource("", "pods"))).is_err());
}

/// The row an object's template prints, as a JSON object.
fn templated_row(body: &crate::object::ServedBody, suffix: &str, now: DateTime<Utc>) -> Option<Value> {
    let row = body.row.as_ref()?;
    let mut out = b"{".to_vec();
    assert!(write_row_template(&row.template, suffix, now, &mut out), "the template prints");
    out.push(b'}');
    Some(serde_json::from_slice(&out).expect("a template prints JSON"))
}

/// The row printed from the served body at `now`, as before templates.
fn printed_row(resource: &ResourceType, served: &[u8], cluster: &str, now: DateTime<Utc>) -> Value {
    let object: Value = serde_json::from_slice(served).unwrap();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let mut row = json!({"cells": cells(resource, &object, &name, cluster, now)});
    let conditions = row_conditions(resource, &object);
    if !conditions.is_empty() {
        row["conditions"] = Value::from(conditions);
    }
    row
}

fn pod_object(extra_spec: Value, status: Value, deletion: Option<&str>) -> Value {
    let mut object = json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "web-0", "namespace": "default", "uid": "u", "resourceVersion": "7",
                     "creationTimestamp": "2025-06-01T12:00:00Z", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]}, {"name": "proxy", "image": "envoy"}],
                 "nodeName": "node-1"},
        "status": status
    });
    if let Value::Object(extra) = extra_spec {
        for (k, v) in extra {
            object["spec"][k] = v;
        }
    }
    if let Some(t) = deletion {
        object["metadata"]["deletionTimestamp"] = json!(t);
    }
    object
}

#[test]
fn a_row_template_prints_what_the_body_prints() {
    let restarted = json!({"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "gate-a", "status": "True"}],
        "containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 3, "image": "nginx", "state": {"running": {"startedAt": "2025-06-01T12:04:00Z"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:05:00Z"}}},
            {"name": "proxy", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
    let pods = [
        pod_object(json!({}), restarted.clone(), None),
        pod_object(json!({"readinessGates": [{"conditionType": "gate-a"}, {"conditionType": "gate-b"}]}), restarted.clone(), Some("2025-06-01T12:09:00Z")),
        pod_object(json!({}), json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "app", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}), None),
        pod_object(json!({}), json!({"phase": "Failed", "reason": "Evicted"}), None),
        pod_object(json!({"initContainers": [{"name": "init", "image": "busybox"}, {"name": "side", "restartPolicy": "Always"}]}),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 2, "finishedAt": "2025-06-01T12:07:30.5Z"}}},
                {"name": "side", "restartCount": 1, "started": true, "ready": true, "state": {"running": {}}}]}), None),
        // Text that looks like a mark, written with an escaped backslash and with `\u005c`.
        pod_object(json!({}), json!({"phase": "Running", "reason": "x\\u0000Q\\u0000S1.0\\u0000y"}), None),
        pod_object(json!({}), json!({"phase": "Running", "reason": "\u{5c}u0000Q"}), None),
    ];
    let mut objects: Vec<(ResourceType, Vec<u8>)> =
        pods.iter().map(|p| (resource("", "pods"), serde_json::to_vec(p).unwrap())).collect();
    // Raw text for `\u005c` (a backslash written as an escape).
    objects.push((resource("", "pods"), br#"{"metadata":{"name":"p","creationTimestamp":"2025-06-01T12:00:00Z"},"status":{"phase":"A\u005cu0000Q"}}"#.to_vec()));
    for (file, group, plural) in crate::fixtures::API_TYPES {
        let catalog = builtin();
        let resource = catalog.iter().find(|r| r.group == *group && r.plural == *plural && r.version == "v1").unwrap().clone();
        objects.push((resource, crate::fixtures::read(file)));
    }
    let nows = [at("2025-06-01T12:10:00Z"), at("2025-06-03T00:00:00Z"), fixture_now(), at("2000-01-01T00:00:00Z")];
    for (resource, raw) in &objects {
        let ingested = crate::object::ingest(resource, "member1", raw).unwrap();
        assert!(ingested.body.row.is_some(), "{} has a row template", resource.plural);
        for suffix in ["", "_member1"] {
            let served = ingested.body.to_bytes(Some(suffix), 42);
            for now in nows {
                assert_eq!(
                    templated_row(&ingested.body, suffix, now).unwrap(),
                    printed_row(resource, &served, "member1", now),
                    "{} {}",
                    resource.plural,
                    String::from_utf8_lossy(raw)
                );
            }
        }
    }
    // What the first pod's row says, from what Kubernetes prints.
    let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pods[0]).unwrap()).unwrap();
    assert_eq!(
        templated_row(&ingested.body, "_member1", at("2025-06-01T12:10:00Z")).unwrap(),
        json!({"cells": ["web-0_member1", "member1", "2/2", "Running", "3 (5m ago)", "10m", "10.0.0.1", "node-1", "<none>", "<none>"]})
    );
    let finished = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pods[2]).unwrap()).unwrap();
    assert_eq!(
        templated_row(&finished.body, "", at("2025-06-01T12:10:00Z")).unwrap()["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
    );
}

#[test]
fn objects_a_template_cannot_print_have_none() {
    // A NUL character could not be told from a mark.
    let nul = pod_object(json!({}), json!({"phase": "Running", "reason": "a\u{0}Q"}), None);
    let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&nul).unwrap()).unwrap();
    assert!(ingested.body.row.is_none());
    // Read both ways, and with the reason among the row's conditions.
    let condition = pod_object(json!({}), json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "x\u{0}"}]}), None);
    for object in [&nul, &condition] {
        let text = serde_json::to_string(object).unwrap();
        assert!(text.contains("\\u0000"), "{text}");
        let raw: &serde_json::value::RawValue = serde_json::from_str(&text).unwrap();
        assert!(crate::object::ingest_read(&resource("", "pods"), "member1", raw).unwrap().body.row.is_none(), "{text}");
        assert!(crate::object::ingest(&resource("", "pods"), "member1", text.as_bytes()).unwrap().body.row.is_none(), "{text}");
    }
    // A custom resource's printer columns can change while its objects are stored.
    let mut crd = resource("", "pods");
    crd.group = "example.com".into();
    crd.plural = "widgets".into();
    crd.kind = "Widget".into();
    crd.printer_columns = vec![crate::resources::PrinterColumn {
        name: "Size".into(),
        type_: "integer".into(),
        json_path: ".spec.size".into(),
        description: String::new(),
        priority: 0,
        format: String::new(),
    }];
    let widget = br#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"},"spec":{"size":3}}"#;
    assert!(crate::object::ingest(&crd, "member1", widget).unwrap().body.row.is_none());
}

#[test]
fn a_template_of_another_version_or_damaged_prints_nothing() {
    let ingested = crate::object::ingest(&resource("", "pods"), "member1", &serde_json::to_vec(&pod_object(json!({}), json!({}), None)).unwrap()).unwrap();
    let template = ingested.body.row.unwrap().template;
    let now = at("2025-06-01T12:10:00Z");
    let mut out = b"head".to_vec();
    let mut other = template.clone();
    other[0] = ROW_TEMPLATE_VERSION + 1;
    assert!(!write_row_template(&other, "", now, &mut out));
    assert!(!write_row_template(&[], "", now, &mut out));
    let text = String::from_utf8(template.clone()).unwrap();
    let unclosed = text.replacen("\\u0000S", "\\u0000S9", 1).rsplit_once("\\u0000").map(|(a, b)| format!("{a}{b}")).unwrap();
    assert!(!write_row_template(unclosed.as_bytes(), "", now, &mut out));
    let unknown = text.replacen("\\u0000Q", "\\u0000Z", 1);
    assert!(!write_row_template(unknown.as_bytes(), "", now, &mut out));
    assert_eq!(out, b"head", "nothing written");
    assert!(write_row_template(&template, "", now, &mut out));
}
