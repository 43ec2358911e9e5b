//! Load pods (`kubefold sim --pods`) and the edits churn makes to pods and events.

use super::*;

/// The namespaces `load-0` .. `load-9` that load pods live in, with their
/// `kube-root-ca.crt` ConfigMaps.
pub fn load_namespaces(cluster: &Cluster) -> Vec<Value> {
    let mut ids = cluster.rng(3);
    let born = cluster.now - Duration::days(1);
    let mut objects = Vec::new();
    for i in 0..LOAD_NAMESPACES {
        objects.push(namespace(&mut ids, &format!("load-{i}"), born, &[("purpose", "load")]));
    }
    for i in 0..LOAD_NAMESPACES {
        objects.push(root_ca(&mut ids, &format!("load-{i}"), born));
    }
    objects
}

/// The namespace of load pod `index`: `load-{index % 10}`.
pub fn load_namespace(index: usize) -> String {
    format!("load-{}", index % LOAD_NAMESPACES)
}

/// The name of load pod `index`: `load-{index}`.
pub fn load_pod_name(index: usize) -> String {
    format!("load-{index}")
}

/// Load pod `index`: a running pod `load-{index}` in namespace
/// `load-{index % 10}` with labels `app=load` and `shard=s{index % 100}`,
/// on node `{cluster}-node-{index % 3 + 1}`; 2 to 4 KB of JSON.
pub fn load_pod(cluster: &Cluster, index: usize) -> Value {
    let mut ids = cluster.rng(mix(4, index as u64));
    let node = index % DEMO_NODES + 1;
    let created = cluster.now - Duration::hours(20) + Duration::seconds((index % 3600) as i64);
    let version = index % 7;
    let container = ContainerSpec {
        name: "app".into(),
        image: format!("registry.example.com/load/app:1.{version}.0"),
        ports: vec![(8080, "http", "TCP"), (9090, "metrics", "TCP")],
        requests: ("50m", "64Mi"),
        limits: Some(("500m", "256Mi")),
        env: vec![
            ("SHARD".into(), format!("s{}", index % LOAD_SHARDS)),
            ("LOG_LEVEL".into(), "info".into()),
            ("POD_INDEX".into(), index.to_string()),
        ],
        args: vec!["--listen=:8080".into(), "--metrics=:9090".into()],
        probe: Some(("/healthz", 8080)),
        mounts: vec![("config".into(), "/etc/app".into(), true)],
    };
    let params = PodParams {
        namespace: load_namespace(index),
        name: load_pod_name(index),
        generate_name: None,
        labels: vec![
            ("app".into(), "load".into()),
            ("shard".into(), format!("s{}", index % LOAD_SHARDS)),
            ("version".into(), format!("v1.{version}")),
        ],
        annotations: vec![("prometheus.io/scrape".into(), "true".into()), ("prometheus.io/port".into(), "9090".into())],
        owner: None,
        node: cluster.node_name(node),
        host_ip: cluster.node_ip(node),
        pod_ip: format!("10.{}.{}.{}", 100 + node, (index / DEMO_NODES / 250) % 256, (index / DEMO_NODES) % 250 + 2),
        containers: vec![container],
        volumes: vec![json!({"name": "config", "configMap": {"name": "kube-root-ca.crt", "defaultMode": 420}})],
        service_account: "default".into(),
        priority_class: None,
        created,
        extra_tolerations: vec![],
        host_network: false,
    };
    pod(&mut ids, &params)
}

/// Load pod `index` ([`load_pod`]) written directly as JSON, about ten
/// times faster than building the `Value` (used for bulk loads of 100,000
/// pods). The text starts with `{"kind":"Pod","apiVersion":"v1",` and, when
/// `resource_version` is given, carries it in `metadata`. Decoded, it equals
/// [`load_pod`] (plus the resource version).
pub fn load_pod_json(cluster: &Cluster, index: usize, resource_version: Option<u64>) -> String {
    let mut ids = cluster.rng(mix(4, index as u64));
    let node = index % DEMO_NODES + 1;
    let node_name = cluster.node_name(node);
    let host_ip = cluster.node_ip(node);
    let pod_ip = format!("10.{}.{}.{}", 100 + node, (index / DEMO_NODES / 250) % 256, (index / DEMO_NODES) % 250 + 2);
    let created = cluster.now - Duration::hours(20) + Duration::seconds((index % 3600) as i64);
    let (scheduled, started, ready) =
        (ts(created + Duration::seconds(1)), ts(created + Duration::seconds(3)), ts(created + Duration::seconds(9)));
    let version = index % 7;
    let shard = index % LOAD_SHARDS;
    let image = format!("registry.example.com/load/app:1.{version}.0");
    // The same random draws, in the same order, as `pod` makes them.
    let uid = ids.uid();
    let token = format!("kube-api-access-{}", ids.suffix(5));
    let image_id = format!("registry.example.com/load/app@sha256:{}", ids.hex(64));
    let container_id = format!("containerd://{}", ids.hex(64));
    let rv = resource_version.map(|rv| format!(",\"resourceVersion\":\"{rv}\"")).unwrap_or_default();
    let probe = |initial: u32| {
        format!(
            "{{\"httpGet\":{{\"path\":\"/healthz\",\"port\":8080,\"scheme\":\"HTTP\"}},\"initialDelaySeconds\":{initial},\"periodSeconds\":10,\"timeoutSeconds\":1,\"successThreshold\":1,\"failureThreshold\":3}}"
        )
    };
    let condition = |kind: &str, at: &str| {
        format!("{{\"type\":\"{kind}\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"{at}\"}}")
    };
    format!(
        concat!(
            "{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",",
            "\"metadata\":{{\"name\":\"load-{index}\",\"namespace\":\"load-{ns}\",\"uid\":\"{uid}\",\"creationTimestamp\":\"{created}\",",
            "\"labels\":{{\"app\":\"load\",\"shard\":\"s{shard}\",\"version\":\"v1.{version}\"}},",
            "\"annotations\":{{\"prometheus.io/scrape\":\"true\",\"prometheus.io/port\":\"9090\"}},\"generation\":1{rv}}},",
            "\"spec\":{{\"containers\":[{{\"name\":\"app\",\"image\":\"{image}\",\"args\":[\"--listen=:8080\",\"--metrics=:9090\"],",
            "\"ports\":[{{\"containerPort\":8080,\"name\":\"http\",\"protocol\":\"TCP\"}},{{\"containerPort\":9090,\"name\":\"metrics\",\"protocol\":\"TCP\"}}],",
            "\"env\":[{{\"name\":\"SHARD\",\"value\":\"s{shard}\"}},{{\"name\":\"LOG_LEVEL\",\"value\":\"info\"}},{{\"name\":\"POD_INDEX\",\"value\":\"{index}\"}}],",
            "\"resources\":{{\"requests\":{{\"cpu\":\"50m\",\"memory\":\"64Mi\"}},\"limits\":{{\"cpu\":\"500m\",\"memory\":\"256Mi\"}}}},",
            "\"livenessProbe\":{liveness},\"readinessProbe\":{readiness},",
            "\"volumeMounts\":[{{\"name\":\"config\",\"mountPath\":\"/etc/app\",\"readOnly\":true}},{{\"name\":\"{token}\",\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\",\"readOnly\":true}}],",
            "\"terminationMessagePath\":\"/dev/termination-log\",\"terminationMessagePolicy\":\"File\",\"imagePullPolicy\":\"IfNotPresent\"}}],",
            "\"dnsPolicy\":\"ClusterFirst\",\"enableServiceLinks\":true,\"nodeName\":\"{node}\",\"preemptionPolicy\":\"PreemptLowerPriority\",\"priority\":0,",
            "\"restartPolicy\":\"Always\",\"schedulerName\":\"default-scheduler\",\"securityContext\":{{}},\"serviceAccount\":\"default\",\"serviceAccountName\":\"default\",",
            "\"terminationGracePeriodSeconds\":30,\"tolerations\":[",
            "{{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\",\"effect\":\"NoExecute\",\"tolerationSeconds\":300}},",
            "{{\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"effect\":\"NoExecute\",\"tolerationSeconds\":300}}],",
            "\"volumes\":[{{\"name\":\"config\",\"configMap\":{{\"name\":\"kube-root-ca.crt\",\"defaultMode\":420}}}},",
            "{{\"name\":\"{token}\",\"projected\":{{\"defaultMode\":420,\"sources\":[",
            "{{\"serviceAccountToken\":{{\"expirationSeconds\":3607,\"path\":\"token\"}}}},",
            "{{\"configMap\":{{\"name\":\"kube-root-ca.crt\",\"items\":[{{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}}]}}}},",
            "{{\"downwardAPI\":{{\"items\":[{{\"path\":\"namespace\",\"fieldRef\":{{\"apiVersion\":\"v1\",\"fieldPath\":\"metadata.namespace\"}}}}]}}}}]}}}}]}},",
            "\"status\":{{\"phase\":\"Running\",\"conditions\":[{c1},{c2},{c3},{c4},{c5}],",
            "\"hostIP\":\"{host_ip}\",\"hostIPs\":[{{\"ip\":\"{host_ip}\"}}],\"podIP\":\"{pod_ip}\",\"podIPs\":[{{\"ip\":\"{pod_ip}\"}}],",
            "\"startTime\":\"{scheduled}\",\"containerStatuses\":[{{\"name\":\"app\",\"image\":\"{image}\",\"imageID\":\"{image_id}\",",
            "\"containerID\":\"{container_id}\",\"ready\":true,\"started\":true,\"restartCount\":0,\"lastState\":{{}},",
            "\"state\":{{\"running\":{{\"startedAt\":\"{started}\"}}}}}}],\"qosClass\":\"Burstable\"}}}}"
        ),
        index = index,
        ns = index % LOAD_NAMESPACES,
        uid = uid,
        created = ts(created),
        shard = shard,
        version = version,
        rv = rv,
        image = image,
        liveness = probe(15),
        readiness = probe(5),
        token = token,
        node = node_name,
        c1 = condition("PodReadyToStartContainers", &started),
        c2 = condition("Initialized", &scheduled),
        c3 = condition("Ready", &ready),
        c4 = condition("ContainersReady", &ready),
        c5 = condition("PodScheduled", &scheduled),
        host_ip = host_ip,
        pod_ip = pod_ip,
        scheduled = scheduled,
        image_id = image_id,
        container_id = container_id,
        started = started,
    )
}

/// What the simulator's store indexes of load pod `index`, without
/// decoding it: its uid comes from the JSON, these from the index.
pub fn load_pod_selectable(cluster: &Cluster, index: usize) -> Value {
    let node = index % DEMO_NODES + 1;
    json!({
        "metadata": {"name": load_pod_name(index), "namespace": load_namespace(index)},
        "spec": {"nodeName": cluster.node_name(node), "restartPolicy": "Always", "schedulerName": "default-scheduler",
                 "serviceAccountName": "default"},
        "status": {"phase": "Running",
                   "podIP": format!("10.{}.{}.{}", 100 + node, (index / DEMO_NODES / 250) % 256, (index / DEMO_NODES) % 250 + 2)},
    })
}

/// The uid of load pod `index` (the first random draw of [`load_pod_json`]).
pub fn load_pod_uid(cluster: &Cluster, index: usize) -> String {
    cluster.rng(mix(4, index as u64)).uid()
}

/// The labels of load pod `index`.
pub fn load_pod_labels(index: usize) -> Vec<(String, String)> {
    vec![
        ("app".into(), "load".into()),
        ("shard".into(), format!("s{}", index % LOAD_SHARDS)),
        ("version".into(), format!("v1.{}", index % 7)),
    ]
}

/// Load pods `range`, generated on all cores (each pod depends only on its
/// index, so the result does not depend on the number of threads).
pub fn load_pods(cluster: &Cluster, range: Range<usize>) -> Vec<Value> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    let len = range.len();
    if threads <= 1 || len < 2_000 {
        return range.map(|i| load_pod(cluster, i)).collect();
    }
    let chunk = len.div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = range.start + t * chunk;
                let end = (start + chunk).min(range.end);
                scope.spawn(move || (start..end).map(|i| load_pod(cluster, i)).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

/// A pod that churn creates, number `serial`: a load pod `load-{serial}` when
/// the cluster has load pods, otherwise `churn-{serial}` in `default`
/// (labels `app=churn`).
pub fn churn_pod(cluster: &Cluster, serial: usize, load: bool) -> Value {
    let now = cluster.now;
    let mut pod = load_pod(&Cluster { now: now + Duration::hours(20), ..cluster.clone() }, serial);
    // A fresh pod: created now, started a second later.
    pod["metadata"]["creationTimestamp"] = json!(ts(now));
    if !load {
        pod["metadata"]["name"] = json!(format!("churn-{serial}"));
        pod["metadata"]["namespace"] = json!("default");
        pod["metadata"]["labels"] = json!({"app": "churn"});
    }
    pod
}

/// What one churn edit of a pod changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEdit {
    /// A container restarted: `restartCount` and `lastState` changed.
    Restart,
    /// The heartbeat annotation changed.
    Annotation,
    /// The `rollout` label changed.
    Label,
}

/// Applies one random realistic edit to a running pod, as a kubelet, a
/// controller or an operator would make it, at time `now`.
pub fn touch_pod(pod: &mut Value, rng: &mut impl Rng, now: DateTime<Utc>) -> PodEdit {
    let edit = match rng.random_range(0..10) {
        0..=3 => PodEdit::Restart,
        4..=7 => PodEdit::Annotation,
        _ => PodEdit::Label,
    };
    match edit {
        PodEdit::Restart => {
            if let Some(statuses) = pod.pointer_mut("/status/containerStatuses").and_then(Value::as_array_mut) {
                for status in statuses.iter_mut().take(1) {
                    let count = status["restartCount"].as_i64().unwrap_or(0) + 1;
                    let started = status.pointer("/state/running/startedAt").cloned().unwrap_or(json!(ts(now)));
                    status["restartCount"] = json!(count);
                    status["lastState"] = json!({"terminated": {
                        "containerID": status["containerID"].clone(),
                        "exitCode": 137,
                        "reason": "OOMKilled",
                        "startedAt": started,
                        "finishedAt": ts(now),
                    }});
                    status["state"] = json!({"running": {"startedAt": ts(now)}});
                }
            }
        }
        PodEdit::Annotation => {
            let annotations = ensure_object(&mut pod["metadata"], "annotations");
            annotations.insert("sim.kubefold.io/heartbeat".into(), json!(ts(now)));
        }
        PodEdit::Label => {
            let labels = ensure_object(&mut pod["metadata"], "labels");
            let next = labels
                .get("rollout")
                .and_then(Value::as_str)
                .and_then(|r| r.trim_start_matches('r').parse::<u32>().ok())
                .map_or(0, |r| (r + 1) % 5);
            labels.insert("rollout".into(), json!(format!("r{next}")));
        }
    }
    edit
}

/// Bumps a repeated Event: `count` + 1 and `lastTimestamp` = `now`.
pub fn bump_event(event: &mut Value, now: DateTime<Utc>) {
    let count = event["count"].as_i64().unwrap_or(1) + 1;
    event["count"] = json!(count);
    event["lastTimestamp"] = json!(ts(now));
}
