//! Tests of the core group's printers (pods, nodes, services, namespaces,
//! config maps, endpoint slices, events).

use super::*;

#[test]
fn prints_fixture_pod() {
    // The status-relevant fields of kubernetes/api testdata/HEAD/core.v1.Pod.json.
    let container_status = json!({
        "name": "nameValue",
        "state": {
            "waiting": {"reason": "reasonValue", "message": "messageValue"},
            "running": {"startedAt": "2001-01-01T01:01:01Z"},
            "terminated": {"exitCode": 1, "signal": 2, "reason": "reasonValue", "finishedAt": "2006-01-01T01:01:01Z"}
        },
        "lastState": {"terminated": {"exitCode": 1, "signal": 2, "reason": "reasonValue", "finishedAt": "2006-01-01T01:01:01Z"}},
        "ready": true, "restartCount": 5, "started": true
    });
    let pod = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z", "deletionTimestamp": "2009-01-01T01:01:01Z"},
        "spec": {
            "initContainers": [{"name": "nameValue", "image": "imageValue", "restartPolicy": "restartPolicyValue"}],
            "containers": [{"name": "nameValue", "image": "imageValue"}],
            "nodeName": "nodeNameValue",
            "readinessGates": [{"conditionType": "conditionTypeValue"}]
        },
        "status": {
            "phase": "phaseValue", "reason": "reasonValue",
            "conditions": [{"type": "typeValue", "status": "statusValue"}],
            "podIPs": [{"ip": "ipValue"}], "nominatedNodeName": "nominatedNodeNameValue",
            "initContainerStatuses": [container_status.clone()],
            "containerStatuses": [container_status]
        }
    });
    assert_eq!(
        cells(
            &resource("", "pods"),
            &pod,
            "nameValue_member1",
            "member1",
            fixture_now()
        ),
        vec![
            json!("nameValue_member1"),
            json!("member1"),
            json!("0/1"),
            json!("Terminating"),
            json!("5 (4y1d ago)"),
            json!("2y1d"),
            json!("ipValue"),
            json!("nodeNameValue"),
            json!("nominatedNodeNameValue"),
            json!("0/1"),
        ]
    );
}

fn pod(status: Value) -> Value {
    json!({
        "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2025-06-01T12:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}, {"name": "proxy", "image": "envoy:1.30"}]},
        "status": status
    })
}

#[test]
fn prints_pod_status_like_kubectl() {
    let now = at("2025-06-01T14:30:00Z");
    let running = |name: &str| json!({"name": name, "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2025-06-01T12:00:05Z"}}});
    let cases: Vec<(Value, [&str; 3])> = vec![
        (
            pod(
                json!({"phase": "Running", "podIPs": [{"ip": "10.244.1.7"}], "containerStatuses": [running("app"), running("proxy")]}),
            ),
            ["2/2", "Running", "0"],
        ),
        (
            pod(json!({"phase": "Running", "containerStatuses": [
                running("app"),
                {"name": "proxy", "ready": false, "restartCount": 7,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-06-01T14:25:00Z"}}}
            ]})),
            ["1/2", "CrashLoopBackOff", "7 (5m ago)"],
        ),
        (
            pod(json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "proxy", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]})),
            ["0/2", "Completed", "0"],
        ),
        (
            // One container completed while the other still runs: NotReady without the Ready condition.
            pod(json!({"phase": "Running", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("proxy")
            ]})),
            ["1/2", "NotReady", "0"],
        ),
        (
            pod(json!({"phase": "Failed", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}},
                {"name": "proxy", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
            ]})),
            ["0/2", "Signal:9", "0"],
        ),
        (pod(json!({"phase": "Pending"})), ["0/2", "Pending", "0"]),
        (
            pod(
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
            ),
            ["0/2", "SchedulingGated", "0"],
        ),
        (
            pod(
                json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
            ),
            ["0/2", "Evicted", "0"],
        ),
        (
            pod(json!({"phase": "Running", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                {"name": "proxy", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
            ]})),
            ["0/2", "ImagePullBackOff", "0"],
        ),
    ];
    for (object, [ready, status, restarts]) in cases {
        let row = cells(&resource("", "pods"), &object, "web-0", "member1", now);
        assert_eq!(
            row[2..5],
            [json!(ready), json!(status), json!(restarts)],
            "{object}"
        );
        assert_eq!(row[5], json!("150m"));
    }
}

#[test]
fn prints_init_containers_and_deletion() {
    let now = at("2025-06-01T12:00:30Z");
    let with_init = |init_statuses: Value, extra: Value| {
        let mut object = json!({
            "metadata": {"name": "db-0", "creationTimestamp": "2025-06-01T12:00:00Z"},
            "spec": {
                "initContainers": [{"name": "migrate"}, {"name": "mesh", "restartPolicy": "Always"}],
                "containers": [{"name": "db"}]
            },
            "status": {"phase": "Pending", "initContainerStatuses": init_statuses}
        });
        if let (Some(target), Some(extra)) = (object.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                target.insert(k.clone(), v.clone());
            }
        }
        object
    };
    let cases = [
        (
            with_init(
                json!([{"name": "migrate", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]),
                json!({}),
            ),
            ["0/2", "Init:0/2", "0"],
        ),
        (
            with_init(
                json!([{"name": "migrate", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T12:00:20Z"}}}]),
                json!({}),
            ),
            ["0/2", "Init:CrashLoopBackOff", "3 (10s ago)"],
        ),
        (
            with_init(
                json!([{"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]),
                json!({}),
            ),
            ["0/2", "Init:ExitCode:2", "0"],
        ),
        (
            // The sidecar started and is ready; the pod is now running its main container.
            with_init(
                json!([
                    {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "mesh", "restartCount": 1, "ready": true, "started": true, "state": {"running": {}}}
                ]),
                json!({"metadata": {"name": "db-0", "creationTimestamp": "2025-06-01T12:00:00Z", "deletionTimestamp": "2025-06-01T12:00:29Z"}}),
            ),
            ["1/2", "Terminating", "1"],
        ),
    ];
    for (object, [ready, status, restarts]) in cases {
        let row = cells(&resource("", "pods"), &object, "db-0", "member2", now);
        assert_eq!(
            row[2..5],
            [json!(ready), json!(status), json!(restarts)],
            "{object}"
        );
    }
    let lost = json!({"metadata": {"deletionTimestamp": "2025-06-01T12:00:00Z"}, "status": {"phase": "Running", "reason": "NodeLost"}});
    assert_eq!(
        cells(&resource("", "pods"), &lost, "x", "c", now)[3],
        json!("Unknown")
    );
    let done = json!({"metadata": {"deletionTimestamp": "2025-06-01T12:00:00Z"}, "status": {"phase": "Succeeded"}});
    assert_eq!(
        cells(&resource("", "pods"), &done, "x", "c", now)[3],
        json!("Succeeded")
    );
}

#[test]
fn prints_pod_wide_columns() {
    let object = json!({
        "metadata": {"name": "web-0"},
        "spec": {"containers": [{"name": "app"}], "nodeName": "node-a",
                 "readinessGates": [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
                   "conditions": [{"type": "example.com/lb", "status": "True"}, {"type": "example.com/dns", "status": "False"}]}
    });
    let row = cells(
        &resource("", "pods"),
        &object,
        "web-0_member1",
        "member1",
        fixture_now(),
    );
    assert_eq!(row[5], json!("<unknown>"));
    assert_eq!(
        row[6..],
        [
            json!("10.0.0.9"),
            json!("node-a"),
            json!("<none>"),
            json!("1/2")
        ]
    );
}

#[test]
fn prints_row_conditions_of_finished_pods() {
    let pods = resource("", "pods");
    assert_eq!(
        row_conditions(&pods, &json!({"status": {"phase": "Succeeded"}})),
        vec![
            json!({"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."})
        ]
    );
    assert_eq!(
        row_conditions(&pods, &json!({"status": {"phase": "Failed"}}))[0]["reason"],
        json!("Failed")
    );
    assert!(row_conditions(&pods, &json!({"status": {"phase": "Running"}})).is_empty());
    assert!(row_conditions(
        &resource("", "nodes"),
        &json!({"status": {"phase": "Succeeded"}})
    )
    .is_empty());
}

#[test]
fn prints_nodes() {
    let now = at("2025-06-10T00:00:00Z");
    let node = json!({
        "metadata": {
            "name": "cp-1", "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "", "kubernetes.io/role": "master", "kubernetes.io/os": "linux"}
        },
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Ubuntu 24.04.2 LTS", "kernelVersion": "6.8.0-60-generic", "containerRuntimeVersion": "containerd://2.0.5"}
        }
    });
    assert_eq!(
        cells(
            &resource("", "nodes"),
            &node,
            "cp-1_member1",
            "member1",
            now
        ),
        vec![
            json!("cp-1_member1"),
            json!("member1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane,etcd,master"),
            json!("160d"),
            json!("v1.33.1"),
            json!("192.168.1.10"),
            json!("<none>"),
            json!("Ubuntu 24.04.2 LTS"),
            json!("6.8.0-60-generic"),
            json!("containerd://2.0.5"),
        ]
    );
    // kubernetes/api testdata/HEAD/core.v1.Node.json.
    let fixture = json!({
        "metadata": {"name": "nameValue", "labels": {"labelsKey": "labelsValue"}, "creationTimestamp": "2008-01-01T01:01:01Z"},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "typeValue", "status": "statusValue"}],
            "addresses": [{"type": "typeValue", "address": "addressValue"}],
            "nodeInfo": {"kernelVersion": "kernelVersionValue", "osImage": "osImageValue", "containerRuntimeVersion": "containerRuntimeVersionValue", "kubeletVersion": "kubeletVersionValue"}
        }
    });
    assert_eq!(
        cells(
            &resource("", "nodes"),
            &fixture,
            "nameValue",
            "m",
            fixture_now()
        )[2..],
        [
            json!("Unknown,SchedulingDisabled"),
            json!("<none>"),
            json!("2y1d"),
            json!("kubeletVersionValue"),
            json!("<none>"),
            json!("<none>"),
            json!("osImageValue"),
            json!("kernelVersionValue"),
            json!("containerRuntimeVersionValue"),
        ]
    );
    let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    assert_eq!(
        cells(&resource("", "nodes"), &not_ready, "n", "m", now)[2..4],
        [json!("NotReady"), json!("<none>")]
    );
}

#[test]
fn prints_services() {
    let now = at("2025-06-01T12:10:00Z");
    let created = "2025-06-01T12:00:00Z";
    let services = resource("", "services");
    let row = |spec: Value, status: Value| {
        let object = json!({"metadata": {"name": "web", "creationTimestamp": created}, "spec": spec, "status": status});
        cells(&services, &object, "web", "member1", now)[2..].to_vec()
    };
    assert_eq!(
        row(
            json!({"type": "ClusterIP", "clusterIP": "10.96.12.7", "clusterIPs": ["10.96.12.7"],
                   "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}, {"port": 53, "protocol": "UDP"}],
                   "selector": {"app": "web", "tier": "frontend"}}),
            json!({})
        ),
        [
            json!("ClusterIP"),
            json!("10.96.12.7"),
            json!("<none>"),
            json!("80/TCP,53/UDP"),
            json!("10m"),
            json!("app=web,tier=frontend")
        ]
    );
    assert_eq!(
        row(
            json!({"type": "NodePort", "clusterIP": "10.96.0.20", "externalIPs": ["203.0.113.5"],
                   "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}]}),
            json!({})
        ),
        [
            json!("NodePort"),
            json!("10.96.0.20"),
            json!("203.0.113.5"),
            json!("443:30443/TCP"),
            json!("10m"),
            json!("<none>")
        ]
    );
    assert_eq!(
        row(
            json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.30"], "ports": [{"port": 80, "nodePort": 31000, "protocol": "TCP"}]}),
            json!({})
        )[2],
        json!("<pending>")
    );
    assert_eq!(
        row(
            json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.30"], "externalIPs": ["198.51.100.1"]}),
            json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]}})
        )[2],
        json!("203.0.113.9,lb.example.com,198.51.100.1")
    );
    assert_eq!(
        row(
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            json!({})
        )[..4],
        [
            json!("ExternalName"),
            json!("<none>"),
            json!("db.example.com"),
            json!("<none>")
        ]
    );
    assert_eq!(
        row(
            json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}),
            json!({})
        )[1],
        json!("None")
    );
    // kubernetes/api testdata/HEAD/core.v1.Service.json.
    assert_eq!(
        row(
            json!({"type": "typeValue", "clusterIP": "clusterIPValue", "clusterIPs": ["clusterIPsValue"], "externalIPs": ["externalIPsValue"],
                   "ports": [{"name": "nameValue", "protocol": "protocolValue", "port": 3, "targetPort": "targetPortValue", "nodePort": 5}],
                   "selector": {"selectorKey": "selectorValue"}, "externalName": "externalNameValue"}),
            json!({"loadBalancer": {"ingress": [{"ip": "ipValue", "hostname": "hostnameValue"}]}})
        ),
        [
            json!("typeValue"),
            json!("clusterIPsValue"),
            json!("<unknown>"),
            json!("3:5/protocolValue"),
            json!("10m"),
            json!("selectorKey=selectorValue")
        ]
    );
}

#[test]
fn prints_namespaces_configmaps_endpointslices_and_other_types() {
    let now = fixture_now();
    let namespace = json!({"metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"}, "status": {"phase": "phaseValue"}});
    assert_eq!(
        cells(
            &resource("", "namespaces"),
            &namespace,
            "nameValue",
            "member1",
            now
        ),
        vec![
            json!("nameValue"),
            json!("member1"),
            json!("phaseValue"),
            json!("2y1d")
        ]
    );
    let configmap = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "data": {"dataKey": "dataValue"}, "binaryData": {"binaryDataKey": "Aw=="}
    });
    assert_eq!(
        cells(
            &resource("", "configmaps"),
            &configmap,
            "nameValue_member1",
            "member1",
            now
        ),
        vec![
            json!("nameValue_member1"),
            json!("member1"),
            json!(2),
            json!("2y1d")
        ]
    );
    let slice = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "addressType": "addressTypeValue",
        "endpoints": [{"addresses": ["addressesValue"], "conditions": {"ready": true}}],
        "ports": [{"name": "nameValue", "protocol": "protocolValue", "port": 3}]
    });
    let slices = resource("discovery.k8s.io", "endpointslices");
    assert_eq!(
        cells(&slices, &slice, "nameValue", "member1", now),
        vec![
            json!("nameValue"),
            json!("member1"),
            json!("addressTypeValue"),
            json!("3"),
            json!("addressesValue"),
            json!("2y1d")
        ]
    );
    let big = json!({
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}, {"addresses": ["10.0.0.5"]}],
        "ports": [{"name": "http", "port": 80}, {"name": "metrics"}, {}]
    });
    assert_eq!(
        cells(&slices, &big, "web-abc", "member1", now)[2..5],
        [
            json!("IPv4"),
            json!("80,metrics,*"),
            json!("10.0.0.1,10.0.0.2,10.0.0.3 + 2 more...")
        ]
    );
    assert_eq!(
        cells(&slices, &json!({"addressType": "IPv6"}), "s", "m", now)[3..5],
        [json!("<unset>"), json!("<unset>")]
    );
    let mut widgets = resource("", "configmaps");
    widgets.group = "example.com".into();
    widgets.plural = "widgets".into();
    let widget =
        json!({"metadata": {"name": "w", "creationTimestamp": "2009-12-31T01:01:01Z"}});
    assert_eq!(
        cells(&widgets, &widget, "w_member2", "member2", now),
        vec![json!("w_member2"), json!("member2"), json!("24h")]
    );
}

#[test]
fn prints_events() {
    let events = resource("", "events");
    // kubernetes/api testdata/HEAD/core.v1.Event.json: the series sets LAST SEEN and COUNT.
    let fixture = json!({
        "metadata": {"name": "nameValue", "creationTimestamp": "2008-01-01T01:01:01Z"},
        "involvedObject": {"kind": "kindValue", "namespace": "namespaceValue", "name": "nameValue", "fieldPath": "fieldPathValue"},
        "reason": "reasonValue", "message": "messageValue",
        "source": {"component": "componentValue", "host": "hostValue"},
        "firstTimestamp": "2006-01-01T01:01:01Z", "lastTimestamp": "2007-01-01T01:01:01Z", "count": 8, "type": "typeValue",
        "eventTime": "2010-01-01T01:01:01.000010Z",
        "series": {"count": 1, "lastObservedTime": "2002-01-01T01:01:01.000002Z"},
        "reportingComponent": "reportingComponentValue", "reportingInstance": "reportingInstanceValue"
    });
    assert_eq!(
        cells(
            &events,
            &fixture,
            "nameValue_member1",
            "member1",
            fixture_now()
        ),
        vec![
            json!("8y"),
            json!("typeValue"),
            json!("reasonValue"),
            json!("kindvalue/nameValue"),
            json!("member1"),
            json!("fieldPathValue"),
            json!("componentValue, hostValue"),
            json!("messageValue"),
            json!("4y1d"),
            json!(1),
            json!("nameValue_member1"),
        ]
    );
    let now = at("2025-06-01T12:10:00Z");
    let backoff = json!({
        "metadata": {"name": "web-0.17e5a3c1d2", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
        "reason": "BackOff", "message": "Back-off restarting failed container app in pod web-0_default(1234)\n",
        "source": {"component": "kubelet", "host": "node-a"},
        "firstTimestamp": "2025-06-01T12:00:00Z", "lastTimestamp": "2025-06-01T12:09:30Z", "count": 12, "type": "Warning"
    });
    assert_eq!(
        cells(
            &events,
            &backoff,
            "web-0.17e5a3c1d2_member1",
            "member1",
            now
        ),
        vec![
            json!("30s"),
            json!("Warning"),
            json!("BackOff"),
            json!("pod/web-0"),
            json!("member1"),
            json!("spec.containers{app}"),
            json!("kubelet, node-a"),
            json!("Back-off restarting failed container app in pod web-0_default(1234)"),
            json!("10m"),
            json!(12),
            json!("web-0.17e5a3c1d2_member1"),
        ]
    );
    // An events.k8s.io event: eventTime only, no count, reporting controller as source.
    let new_style = json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Node"},
        "reason": "Starting", "type": "Normal", "eventTime": "2025-06-01T12:04:59.500000Z",
        "reportingComponent": "kube-proxy", "reportingInstance": ""
    });
    let row = cells(&events, &new_style, "e1", "member2", now);
    assert_eq!(
        row[..4],
        [
            json!("5m"),
            json!("Normal"),
            json!("Starting"),
            json!("node")
        ]
    );
    assert_eq!(row[6], json!("kube-proxy"));
    assert_eq!(row[8..10], [json!("5m"), json!(1)]);
}
