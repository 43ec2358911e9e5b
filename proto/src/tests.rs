//! The oracle: Kubernetes' own fixtures, written by its JSON and protobuf
//! serializers (`testdata/fixtures/kubernetes-api-testdata`).

use serde_json::{json, Value};

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/fixtures/kubernetes-api-testdata");

const NAMES: [&str; 10] = [
    "apps.v1.Deployment",
    "apps.v1.ReplicaSet",
    "apps.v1.StatefulSet",
    "core.v1.ConfigMap",
    "core.v1.Event",
    "core.v1.Namespace",
    "core.v1.Node",
    "core.v1.Pod",
    "core.v1.Service",
    "discovery.k8s.io.v1.EndpointSlice",
];

fn fixture(name: &str) -> (Vec<u8>, Value) {
    let pb = std::fs::read(format!("{FIXTURES}/{name}.pb")).expect("fixture .pb");
    let json = serde_json::from_slice(&std::fs::read(format!("{FIXTURES}/{name}.json")).expect("fixture .json")).expect("fixture JSON");
    (pb, json)
}

/// Fields the fixtures carry that the Kubernetes 1.35 `.proto` files do not
/// have yet (the fixtures come from a later commit of kubernetes/api), as
/// the last two steps of their JSON path. Decoding leaves them out, as
/// kube-apiserver 1.35 leaves out protobuf fields it does not know; every
/// other field must decode to exactly the fixture's JSON.
const NEWER_THAN_1_35: &[&str] = &[
    "clusterTrustBundle.user",
    "configMap.defaultUser",
    "downwardAPI.defaultUser",
    "emptyDir.mode",
    "grpc.mode",
    "httpGet.protocol",
    "items.user",
    "podCertificate.user",
    "projected.defaultUser",
    "resources.message",
    "secret.defaultUser",
    "serviceAccountToken.user",
    "spec.evictionResponders",
    "spec.podPreemptionPolicy",
    "spec.schedulingGroup",
    "status.healthStatus",
    "status.nodeAllocatableResourceClaimStatuses",
    "status.volumeHealth",
    "volumeMounts.bindMountOptions",
    "volumeMounts.volumeStatus",
];

/// A JSON path's last two steps, array indexes left out: `volumeMounts.bindMountOptions`.
fn tail(path: &str) -> String {
    let steps: Vec<&str> = path.split('.').map(|s| s.split('[').next().unwrap_or(s)).filter(|s| !s.is_empty()).collect();
    steps[steps.len().saturating_sub(2)..].join(".")
}

/// The fixture's JSON without the fields of [`NEWER_THAN_1_35`] that its
/// protobuf decodes without; every other difference fails the test.
fn known_to_1_35(name: &str, decoded: &Value, json: &Value) -> (Value, Vec<String>) {
    let mut diff = Vec::new();
    differences("", decoded, json, &mut diff);
    let mut expected = json.clone();
    let mut left_out = Vec::new();
    for d in diff {
        let (path, what) = d.split_once(": ").unwrap_or((&d, ""));
        assert!(what.starts_with("only in the second"), "{name}: {d}");
        assert!(NEWER_THAN_1_35.contains(&tail(path).as_str()), "{name}: {path} is missing from the decoded object and is not a field newer than 1.35");
        remove_path(&mut expected, path);
        left_out.push(tail(path));
    }
    (expected, left_out)
}

/// Removes the value at a path as [`differences`] writes it (`.a.b[2].c`).
fn remove_path(value: &mut Value, path: &str) {
    let mut steps: Vec<(String, Option<usize>)> = Vec::new();
    for step in path.split('.').filter(|s| !s.is_empty()) {
        let mut parts = step.split('[');
        let key = parts.next().unwrap_or_default().to_string();
        steps.push((key, None));
        for index in parts {
            steps.push((String::new(), index.trim_end_matches(']').parse().ok()));
        }
    }
    let (last, parents) = steps.split_last().expect("a path");
    let mut at = value;
    for (key, index) in parents {
        at = match index {
            Some(i) => &mut at[*i],
            None => &mut at[key.as_str()],
        };
    }
    if let Some(object) = at.as_object_mut() {
        object.remove(&last.0);
    }
}

/// A fixture's JSON without the fields newer than 1.35.
fn fixture_known_to_1_35(name: &str) -> Value {
    let (pb, json) = fixture(name);
    known_to_1_35(name, &decode(&pb).unwrap(), &json).0
}

#[test]
fn every_fixture_pb_decodes_to_its_json() {
    let mut left_out = std::collections::BTreeSet::new();
    for name in NAMES {
        let (pb, json) = fixture(name);
        let decoded = decode(&pb).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (expected, newer) = known_to_1_35(name, &decoded, &json);
        assert_eq!(decoded, expected, "{name}");
        left_out.extend(newer);
    }
    // The list holds no field the fixtures do not need.
    let listed: std::collections::BTreeSet<String> = NEWER_THAN_1_35.iter().map(|s| s.to_string()).collect();
    assert_eq!(left_out, listed, "NEWER_THAN_1_35 names exactly the fields the fixtures have beyond 1.35");
}

#[test]
fn every_fixture_json_encodes_to_protobuf_that_decodes_back() {
    for name in NAMES {
        let (pb, json) = fixture(name);
        let (expected, _) = known_to_1_35(name, &decode(&pb).unwrap(), &json);
        let encoded = encode(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(encoded.starts_with(&MAGIC));
        assert_eq!(decode(&encoded).unwrap(), expected, "{name}: round trip through protobuf changed the object");
    }
}

#[test]
fn re_encoded_fixtures_are_the_bytes_kubernetes_wrote() {
    // Fields in number order, map keys sorted, every field of the fixture
    // set: the same bytes as Go's generated marshaller, for every fixture
    // with no field newer than 1.35.
    let mut compared = 0;
    for name in NAMES {
        let (pb, json) = fixture(name);
        let (_, newer) = known_to_1_35(name, &decode(&pb).unwrap(), &json);
        if !newer.is_empty() {
            continue;
        }
        let encoded = encode(&json).unwrap();
        assert!(encoded == pb, "{name}: {} bytes re-encoded, {} written by Kubernetes", encoded.len(), pb.len());
        compared += 1;
    }
    assert!(compared >= 5, "{compared} fixtures compared byte for byte");
}

/// The paths where two values differ (test diagnostics).
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => differences(&format!("{path}.{k}"), v, w, out),
                    None => out.push(format!("{path}.{k}: only in the first: {}", short(v))),
                }
            }
            for (k, w) in y {
                if !x.contains_key(k) {
                    out.push(format!("{path}.{k}: only in the second: {}", short(w)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {} != {}", short(a), short(b))),
        _ => {}
    }
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    text.chars().take(120).collect()
}

#[test]
fn maps_are_written_by_key_and_truncated_bodies_are_errors() {
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {"b": "2", "a": "1"}});
    let mut body = encode(&object).unwrap();
    let decoded = decode(&body).unwrap();
    assert_eq!(decoded, object);
    // Map entries come out sorted by key, as Go writes them.
    let a = body.windows(3).position(|w| w == b"\x0a\x01a").unwrap();
    let b = body.windows(3).position(|w| w == b"\x0a\x01b").unwrap();
    assert!(a < b);
    body.truncate(body.len() - 3);
    assert!(matches!(decode(&body), Err(Error::Malformed(_))), "a truncated body is an error, not a panic");
}

#[test]
fn meta_fields_written_empty_are_unset_and_a_zero_time_is_null() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "generateName": "", "uid": "", "resourceVersion": "", "generation": 0, "creationTimestamp": null},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}], "livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 0}}], "terminationGracePeriodSeconds": 0},
    });
    let decoded = decode(&encode(&pod).unwrap()).unwrap();
    assert_eq!(decoded["metadata"], json!({"name": "p"}));
    // Outside ObjectMeta a zero is kept: a pointer's zero means something.
    assert_eq!(decoded["spec"]["terminationGracePeriodSeconds"], json!(0));
    assert_eq!(decoded["spec"]["containers"][0]["livenessProbe"], json!({"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 0}));
    assert_eq!(decoded["spec"]["containers"][0]["ports"], json!([{"containerPort": 80}]));
}

#[test]
fn special_types_follow_kubernetes_json() {
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h", "creationTimestamp": "2024-05-06T07:08:09Z"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "250m"}}}]}});
    assert_eq!(decode(&encode(&hpa).unwrap()).unwrap(), hpa);
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "eventTime": "2024-05-06T07:08:09.123456Z", "reportingController": "c", "reportingInstance": "i", "action": "a", "reason": "r", "type": "Normal"});
    assert_eq!(decode(&encode(&event).unwrap()).unwrap(), event);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}}, "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1, 2]}}]}}});
    assert_eq!(decode(&encode(&job).unwrap()).unwrap(), job);
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": {"user": "u", "extra": {"scopes": ["a", "b"]}, "resourceAttributes": {"verb": "get"}}});
    assert_eq!(decode(&encode(&review).unwrap()).unwrap(), review);
    let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}});
    let error = encode(&bad).unwrap_err().to_string();
    assert!(error.contains("metadata.name"), "{error}");
}

#[test]
fn custom_resources_have_no_protobuf() {
    assert!(has_message("v1", "Pod"));
    assert!(has_message("apps/v1", "Deployment"));
    assert!(has_message("v1", "Status"));
    assert!(has_message("discovery.k8s.io/v1", "EndpointSlice"));
    assert!(has_message("rbac.authorization.k8s.io/v1", "ClusterRole"));
    assert!(!has_message("example.com/v1", "Widget"));
    assert!(!has_message("apps.example.com/v1", "Deployment"));
    assert!(!has_message("policy.networking.k8s.io/v1alpha1", "PodDisruptionBudget"));
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    assert!(matches!(encode(&widget), Err(Error::UnknownKind { .. })));
    assert!(matches!(decode(b"{\"kind\":\"Pod\"}"), Err(Error::NoMagic)));
}

#[test]
fn watch_frames_are_length_prefixed_watch_events_holding_an_envelope() {
    let pod = fixture_known_to_1_35("core.v1.Pod");
    let mut stream = watch_frame("ADDED", &pod).unwrap();
    stream.extend(watch_frame("DELETED", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})).unwrap());
    let len = u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
    let (first, rest) = split_frame(&stream).unwrap();
    assert_eq!(first.len(), len);
    let (kind, object) = decode_watch_event(first).unwrap();
    assert_eq!((kind.as_str(), object), ("ADDED", pod));
    assert!(split_frame(&rest[..rest.len() - 1]).is_none(), "an incomplete frame waits for more bytes");
    let (second, rest) = split_frame(rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(decode_watch_event(second).unwrap().0, "DELETED");
}

#[test]
fn accept_and_content_type_headers() {
    assert!(prefers_protobuf("application/vnd.kubernetes.protobuf,application/json"));
    assert!(prefers_protobuf("application/vnd.kubernetes.protobuf;stream=watch"));
    assert!(!prefers_protobuf("application/json, application/vnd.kubernetes.protobuf"));
    assert!(!prefers_protobuf("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"));
    assert!(!prefers_protobuf(""));
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf("Application/Vnd.Kubernetes.Protobuf; charset=binary"));
    assert!(!is_protobuf("application/json"));
}

#[test]
fn lists_encode_item_by_item_from_their_json_text() {
    let pod = fixture_known_to_1_35("core.v1.Pod");
    let mut item = pod.clone();
    item.as_object_mut().unwrap().remove("kind");
    item.as_object_mut().unwrap().remove("apiVersion");
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42", "continue": "abc", "remainingItemCount": 3}, "items": [item.clone(), item.clone()]});
    let encoded = encode_json_list(list.to_string().as_bytes()).unwrap();
    assert_eq!(encoded, encode(&list).unwrap(), "the same bytes as encoding the whole value");
    assert_eq!(decode(&encoded).unwrap(), list);
    // Items before kind: still encoded.
    let reordered = format!("{{\"items\":[{}],\"metadata\":{{\"resourceVersion\":\"1\"}},\"apiVersion\":\"v1\",\"kind\":\"PodList\"}}", item);
    assert_eq!(decode(&encode_json_list(reordered.as_bytes()).unwrap()).unwrap()["items"][0], item);
    let empty = json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": []});
    assert_eq!(decode(&encode_json_list(empty.to_string().as_bytes()).unwrap()).unwrap(), json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}));
    assert!(encode_json_list(b"{\"kind\":\"WidgetList\",\"apiVersion\":\"example.com/v1\",\"items\":[]}").is_err());
    assert!(encode_json_list(b"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"items\":[{\"metadata\":5}]}").unwrap_err().to_string().contains("items.0.metadata"));
}

#[test]
fn meta_kinds_exist_in_every_built_in_group_version() {
    let options = json!({"apiVersion": "apps/v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground", "gracePeriodSeconds": 0, "preconditions": {"uid": "u"}});
    assert_eq!(decode(&encode(&options).unwrap()).unwrap(), options);
    assert!(has_message("v1", "Status"));
    assert!(!has_message("example.com/v1", "DeleteOptions"));
}


/// [`ListEncoder`] over the text in chunks of every size from 1 byte: the
/// same bytes as [`encode_json_list`] of the whole text, pretty-printed or
/// not, with items before or after the list's kind or none, escapes and brackets
/// inside strings; a text cut short is an error.
#[test]
fn lists_arriving_in_chunks_encode_to_the_same_bytes() {
    fn chunked(text: &[u8], size: usize) -> Result<Vec<u8>> {
        let mut encoder = ListEncoder::default();
        for chunk in text.chunks(size) {
            encoder.push(chunk)?;
        }
        Ok(encoder.finish()?.concat())
    }
    let mut cm = json!({"metadata": {"name": "a", "namespace": "default", "annotations": {"x": "{\"items\":[1,2]} \\\" ]"}}, "data": {"k": "v, ] }"}});
    let mut second = cm.clone();
    second["metadata"]["name"] = json!("b");
    let list = json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": [cm.clone(), second]});
    cm["metadata"]["name"] = json!("c");
    let reordered = format!("{{\"items\": [ {cm} ], \"metadata\": {{\"resourceVersion\": \"1\"}}, \"apiVersion\": \"v1\", \"kind\": \"ConfigMapList\"}}");
    let texts = [list.to_string(), serde_json::to_string_pretty(&list).unwrap(), reordered,
                 r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{}}"#.to_string(),
                 r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]}"#.to_string()];
    for text in &texts {
        let whole = encode_json_list(text.as_bytes()).unwrap();
        for size in [1, 2, 3, 7, 64, 4096, text.len()] {
            assert_eq!(chunked(text.as_bytes(), size).unwrap(), whole, "chunks of {size}: {text}");
        }
    }
    assert_eq!(decode(&encode_json_list(texts[0].as_bytes()).unwrap()).unwrap(), list);
    let text = list.to_string();
    assert!(chunked(&text.as_bytes()[..text.len() - 2], 5).is_err(), "cut short");
    assert!(chunked(br#"{"kind":"PodList","apiVersion":"v1","items":[{"metadata":5}]}"#, 3).unwrap_err().to_string().contains("items.0.metadata"));
    assert!(chunked(br#"{"kind":"WidgetList","apiVersion":"example.com/v1","items":[{}]}"#, 3).is_err());
}
