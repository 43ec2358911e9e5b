//! Tests of the apps group's printers (deployments, replica sets, stateful sets).

use super::*;

#[test]
fn prints_workloads() {
    let now = at("2025-06-03T15:00:00Z");
    let deployment = json!({
        "metadata": {"name": "nginx", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "log", "image": "busybox:1.36"}]}}
        },
        "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
    });
    assert_eq!(
        cells(
            &resource("apps", "deployments"),
            &deployment,
            "nginx_member1",
            "member1",
            now
        ),
        vec![
            json!("nginx_member1"),
            json!("member1"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("2d3h"),
            json!("nginx,log"),
            json!("nginx:1.27,busybox:1.36"),
            json!("app=nginx"),
        ]
    );
    let replicaset = json!({
        "metadata": {"name": "nginx-5d4f8", "creationTimestamp": "2025-06-03T14:59:00Z"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "nginx", "pod-template-hash": "5d4f8"}},
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
        },
        "status": {"replicas": 3, "readyReplicas": 1}
    });
    assert_eq!(
        cells(
            &resource("apps", "replicasets"),
            &replicaset,
            "nginx-5d4f8",
            "member2",
            now
        ),
        vec![
            json!("nginx-5d4f8"),
            json!("member2"),
            json!(3),
            json!(3),
            json!(1),
            json!("60s"),
            json!("nginx"),
            json!("nginx:1.27"),
            json!("app=nginx,pod-template-hash=5d4f8"),
        ]
    );
    // A just-created statefulset: status not yet written, replicas defaulted.
    let statefulset = json!({
        "metadata": {"name": "web", "creationTimestamp": "2025-06-03T15:00:00Z"},
        "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}
    });
    assert_eq!(
        cells(
            &resource("apps", "statefulsets"),
            &statefulset,
            "web",
            "member3",
            now
        ),
        vec![
            json!("web"),
            json!("member3"),
            json!("0/1"),
            json!("0s"),
            json!("nginx"),
            json!("nginx:1.27")
        ]
    );
}

#[test]
fn prints_fixture_workloads() {
    // kubernetes/api testdata/HEAD fixtures: the selectors use operator
    // "operatorValue", which Kubernetes cannot convert.
    let selector = json!({
        "matchLabels": {"matchLabelsKey": "matchLabelsValue"},
        "matchExpressions": [{"key": "keyValue", "operator": "operatorValue", "values": ["valuesValue"]}]
    });
    let template =
        json!({"spec": {"containers": [{"name": "nameValue", "image": "imageValue"}]}});
    let deployment = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "spec": {"replicas": 1, "selector": selector, "template": template},
        "status": {"replicas": 2, "updatedReplicas": 3, "readyReplicas": 7, "availableReplicas": 4}
    });
    assert_eq!(
        cells(
            &resource("apps", "deployments"),
            &deployment,
            "nameValue",
            "m",
            fixture_now()
        )[2..],
        [
            json!("7/1"),
            json!(3),
            json!(4),
            json!("2y1d"),
            json!("nameValue"),
            json!("imageValue"),
            json!("<invalid>")
        ]
    );
    let replicaset = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "spec": {"replicas": 1, "selector": selector, "template": template},
        "status": {"replicas": 1, "readyReplicas": 4}
    });
    assert_eq!(
        cells(
            &resource("apps", "replicasets"),
            &replicaset,
            "nameValue",
            "m",
            fixture_now()
        )[2..],
        [
            json!(1),
            json!(1),
            json!(4),
            json!("2y1d"),
            json!("nameValue"),
            json!("imageValue"),
            json!("<error>")
        ]
    );
    let statefulset = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "spec": {"replicas": 1, "template": template},
        "status": {"readyReplicas": 3}
    });
    assert_eq!(
        cells(
            &resource("apps", "statefulsets"),
            &statefulset,
            "nameValue",
            "m",
            fixture_now()
        )[2..],
        [
            json!("3/1"),
            json!("2y1d"),
            json!("nameValue"),
            json!("imageValue")
        ]
    );
}
