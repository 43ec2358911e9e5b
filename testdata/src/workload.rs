//! Realistic Kubernetes objects for the simulator: the demo workload, load
//! pods, and the edits that churn makes, as `serde_json::Value`s.
//!
//! Every function is pure and deterministic for its [`Cluster`] (name, seed,
//! clock): the same inputs give byte-identical objects, so tests can name
//! objects literally. Objects carry `kind`, `apiVersion`, `uid` and
//! `creationTimestamp` but no `resourceVersion`; the simulator's store numbers
//! them when it loads them.
//!
//! The shapes follow what a kind/kubeadm cluster running Kubernetes 1.33
//! returns (`kubectl get -o json`), including the fields admission and the
//! controllers add (service-account token volumes, default tolerations,
//! conditions, container statuses).

use std::ops::Range;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

/// The namespaces every cluster has from the start.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

/// The extra namespaces of the demo workload.
pub const DEMO_NAMESPACES: [&str; 2] = ["shop", "monitoring"];

/// The number of `load-{i}` namespaces load pods are spread over.
pub const LOAD_NAMESPACES: usize = 10;

/// The number of `shard` label values of load pods (`s0` .. `s99`).
pub const LOAD_SHARDS: usize = 100;

/// The number of nodes of the demo workload.
pub const DEMO_NODES: usize = 3;

/// The characters of generated name suffixes and pod-template hashes
/// (`k8s.io/apimachinery/pkg/util/rand`: no vowels, no confusable digits).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// What the generated objects of one cluster depend on.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The cluster name; node names are `{name}-node-{1..3}`.
    pub name: String,
    /// The seed of every random choice (names, uids, IPs).
    pub seed: u64,
    /// The clock the objects' timestamps are relative to.
    pub now: DateTime<Utc>,
    /// The kubelet version reported by nodes, e.g. `v1.33.1`.
    pub kubernetes_version: String,
}

impl Cluster {
    /// A cluster named `name` with `seed`, timestamps relative to `now`, version v1.33.1.
    pub fn new(name: &str, seed: u64, now: DateTime<Utc>) -> Cluster {
        Cluster { name: name.into(), seed, now, kubernetes_version: "v1.33.1".into() }
    }

    /// The name of node `i` (1-based): `{cluster}-node-{i}`.
    pub fn node_name(&self, i: usize) -> String {
        format!("{}-node-{i}", self.name)
    }

    /// The InternalIP of node `i` (1-based).
    pub fn node_ip(&self, i: usize) -> String {
        format!("172.18.0.{}", i + 1)
    }

    /// A random source for `purpose`, derived from seed and cluster name.
    fn rng(&self, purpose: u64) -> Ids {
        Ids::new(mix(mix(self.seed, fnv(&self.name)), purpose))
    }
}

/// The objects of a fresh cluster: the system namespaces, their
/// `kube-root-ca.crt` ConfigMaps, and the `kubernetes` Service with its
/// EndpointSlice. No nodes, no pods.
pub fn empty(cluster: &Cluster) -> Vec<Value> {
    let mut ids = cluster.rng(1);
    let born = cluster.now - Duration::days(3);
    let mut objects = Vec::new();
    for ns in SYSTEM_NAMESPACES {
        objects.push(namespace(&mut ids, ns, born, &[]));
    }
    for ns in SYSTEM_NAMESPACES {
        objects.push(root_ca(&mut ids, ns, born));
    }
    let (service, slice) = kubernetes_service(&mut ids, cluster, born);
    objects.push(service);
    objects.push(slice);
    objects
}

/// Built-in Kubernetes types a member serves that kubefold does not
/// aggregate by default (reached through kubefold's pass-through under
/// `/clusters/{c}`, or selected): secrets, service accounts (with their
/// `token` subresource), resource quotas, RBAC, jobs and cron jobs, priority
/// classes, pod disruption budgets, ingresses and horizontal pod
/// autoscalers (in autoscaling/v2 and v1). Short names and categories are kube-apiserver 1.33's
/// (`kubectl api-resources`).
pub fn member_only_types() -> Vec<kubefold_engine::resources::ResourceType> {
    let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let entry = |group: &str, version: &str, plural: &str, kind: &str, namespaced: bool, short: &[&str], categories: &[&str], subresources: &[&str]| {
        kubefold_engine::resources::ResourceType {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: strings(short),
            categories: strings(categories),
            subresources: strings(subresources),
            verbs: Vec::new(),
            printer_columns: Vec::new(),
        }
    };
    vec![
        entry("", "v1", "secrets", "Secret", true, &[], &[], &[]),
        entry("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], &[], &["token"]),
        entry("", "v1", "resourcequotas", "ResourceQuota", true, &["quota"], &[], &["status"]),
        entry("rbac.authorization.k8s.io", "v1", "roles", "Role", true, &[], &[], &[]),
        entry("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, &[], &[], &[]),
        entry("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, &[], &[], &[]),
        entry("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, &[], &[], &[]),
        entry("batch", "v1", "jobs", "Job", true, &[], &["all"], &["status"]),
        entry("batch", "v1", "cronjobs", "CronJob", true, &["cj"], &["all"], &["status"]),
        entry("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, &["pc"], &[], &[]),
        entry("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], &[], &["status"]),
        entry("networking.k8s.io", "v1", "ingresses", "Ingress", true, &["ing"], &[], &["status"]),
        entry("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, &["hpa"], &["all"], &["status"]),
        // The same objects in autoscaling/v1 (`sim::versions`); v2 first: the preferred version.
        entry("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, &["hpa"], &["all"], &["status"]),
    ]
}

/// The resource types of the custom-resource workload ([`widgets`]): the
/// `CustomResourceDefinition` type itself (`apiextensions.k8s.io/v1`) and
/// `widgets.example.com/v1`, namespaced, with a `status` subresource.
pub fn widget_types() -> Vec<kubefold_engine::resources::ResourceType> {
    let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
    let crds = kubefold_engine::resources::ResourceType {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        plural: "customresourcedefinitions".into(),
        singular: "customresourcedefinition".into(),
        kind: "CustomResourceDefinition".into(),
        namespaced: false,
        short_names: strings(&["crd", "crds"]),
        categories: strings(&["api-extensions"]),
        subresources: strings(&["status"]),
        verbs: Vec::new(),
        printer_columns: Vec::new(),
    };
    let widgets = kubefold_engine::resources::ResourceType {
        group: "example.com".into(),
        version: "v1".into(),
        plural: "widgets".into(),
        singular: "widget".into(),
        kind: "Widget".into(),
        namespaced: true,
        short_names: strings(&["wg"]),
        categories: Vec::new(),
        subresources: strings(&["status"]),
        verbs: Vec::new(),
        printer_columns: Vec::new(),
    };
    vec![crds, widgets]
}

/// The custom-resource workload: the CustomResourceDefinition
/// `widgets.example.com` (version `v1`, printer columns Color, Size, Ready
/// and a wide Owner) and the widgets `blue`, `red` (namespace `default`)
/// and `green` (`shop`), the same names in every cluster, sizes by cluster.
pub fn widgets(cluster: &Cluster) -> Vec<Value> {
    let mut ids = cluster.rng(7);
    let born = cluster.now - Duration::days(2);
    let mut meta = metadata(&mut ids, None, "widgets.example.com", born);
    meta.insert("generation".into(), json!(1));
    let crd = json!({
        "kind": "CustomResourceDefinition",
        "apiVersion": "apiextensions.k8s.io/v1",
        "metadata": meta,
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wg"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "description": "Widget is an example custom resource.",
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "spec": {
                            "description": "WidgetSpec is the desired state of a widget.",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "color": {"description": "The widget's color.", "type": "string"},
                                "size": {"description": "The widget's size, in units.", "type": "integer"},
                            },
                        },
                        "status": {
                            "description": "WidgetStatus is the observed state of a widget.",
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"ready": {"description": "Whether the widget is ready.", "type": "boolean"}},
                        },
                    },
                }},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "description": "The widget's color."},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
                    {"name": "Owner", "type": "string", "jsonPath": ".metadata.labels['example.com/owner']", "priority": 1},
                ],
            }],
            "conversion": {"strategy": "None"},
        },
        "status": {
            "acceptedNames": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wg"]},
            "storedVersions": ["v1"],
            "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "lastTransitionTime": ts(born)}],
        },
    });
    let size = 1 + (cluster.seed % 5) as i64;
    let mut objects = vec![crd];
    for (i, (namespace, name, color)) in [("default", "blue", "blue"), ("default", "red", "red"), ("shop", "green", "green")].into_iter().enumerate() {
        let mut meta = metadata(&mut ids, Some(namespace), name, born - Duration::minutes(i as i64));
        meta.insert("labels".into(), json!({"example.com/owner": "team-a"}));
        meta.insert("generation".into(), json!(1));
        objects.push(json!({
            "kind": "Widget",
            "apiVersion": "example.com/v1",
            "metadata": meta,
            "spec": {"color": color, "size": size + i as i64},
            "status": {"ready": i != 1},
        }));
    }
    objects
}

/// The demo workload: [`empty`] plus namespaces `shop` and `monitoring`,
/// three nodes, control-plane static pods, deployments `frontend`, `checkout`,
/// `cache` (shop), `coredns` (kube-system) and `prometheus` (monitoring) each
/// with a ReplicaSet and its pods, the StatefulSet `web` in `default` with pods
/// `web-0`..`web-2` (the same names in every cluster), Services with their
/// EndpointSlices, ConfigMaps and Events.
pub fn demo(cluster: &Cluster) -> Vec<Value> {
    let mut objects = empty(cluster);
    let mut ids = cluster.rng(2);
    let born = cluster.now - Duration::days(3);
    let apps_born = cluster.now - Duration::days(2);
    for ns in DEMO_NAMESPACES {
        objects.push(namespace(&mut ids, ns, apps_born, &[("team", if ns == "shop" { "shop" } else { "platform" })]));
        objects.push(root_ca(&mut ids, ns, apps_born));
    }
    for i in 1..=DEMO_NODES {
        objects.push(node(&mut ids, cluster, i, born));
    }
    let mut ips = PodIps::default();
    for pod in static_pods(&mut ids, cluster, born) {
        objects.push(pod);
    }
    let mut events = Vec::new();
    for app in demo_apps() {
        let created = apps_born + Duration::minutes(app.offset_minutes);
        let workload = controller(&mut ids, cluster, &app, created, &mut ips);
        events.extend(workload.events);
        objects.extend(workload.objects);
    }
    objects.extend(demo_config_maps(&mut ids, apps_born));
    objects.extend(events);
    objects
}

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

/// A fresh random UUID (version 4 layout) from `rng`.
pub fn uid(rng: &mut impl Rng) -> String {
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// `n` characters of kube's name-suffix alphabet (`generateName`, pod-template hashes).
pub fn suffix(rng: &mut impl Rng, n: usize) -> String {
    (0..n).map(|_| ALPHANUMS[rng.random_range(0..ALPHANUMS.len())] as char).collect()
}

/// RFC 3339 timestamp with seconds, as Kubernetes writes `metav1.Time`.
pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

// ---------------------------------------------------------------------------

/// A seeded random source with the identifier helpers.
struct Ids {
    rng: StdRng,
}

impl Ids {
    fn new(seed: u64) -> Ids {
        Ids { rng: StdRng::seed_from_u64(seed) }
    }

    fn uid(&mut self) -> String {
        uid(&mut self.rng)
    }

    fn suffix(&mut self, n: usize) -> String {
        suffix(&mut self.rng, n)
    }

    fn hex(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from_digit(self.rng.random_range(0..16), 16).unwrap_or('0')).collect()
    }
}

/// SplitMix64 finaliser: mixes two values into a seed.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of a string (stable across runs, unlike `DefaultHasher`).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn ensure_object<'a>(parent: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !parent[key].is_object() {
        parent[key] = json!({});
    }
    match parent[key].as_object_mut() {
        Some(map) => map,
        None => unreachable!("just made an object"),
    }
}

fn labels_value(labels: &[(String, String)]) -> Value {
    Value::Object(labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

fn metadata(ids: &mut Ids, namespace: Option<&str>, name: &str, created: DateTime<Utc>) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.insert("uid".into(), json!(ids.uid()));
    meta.insert("creationTimestamp".into(), json!(ts(created)));
    meta
}

fn namespace(ids: &mut Ids, name: &str, created: DateTime<Utc>, labels: &[(&str, &str)]) -> Value {
    let mut meta = metadata(ids, None, name, created);
    let mut all = Map::new();
    all.insert("kubernetes.io/metadata.name".into(), json!(name));
    for (k, v) in labels {
        all.insert((*k).into(), json!(v));
    }
    meta.insert("labels".into(), Value::Object(all));
    json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

fn root_ca(ids: &mut Ids, namespace: &str, created: DateTime<Utc>) -> Value {
    use base64::Engine as _;
    let der: Vec<u8> = (0..820).map(|_| ids.rng.random()).collect();
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut meta = metadata(ids, Some(namespace), "kube-root-ca.crt", created);
    meta.insert(
        "annotations".into(),
        json!({"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}),
    );
    json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": {"ca.crt": pem}})
}

fn kubernetes_service(ids: &mut Ids, cluster: &Cluster, created: DateTime<Utc>) -> (Value, Value) {
    let mut meta = metadata(ids, Some("default"), "kubernetes", created);
    meta.insert("labels".into(), json!({"component": "apiserver", "provider": "kubernetes"}));
    let service = json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "clusterIP": "10.96.0.1",
            "clusterIPs": ["10.96.0.1"],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    });
    let mut slice_meta = metadata(ids, Some("default"), "kubernetes", created);
    slice_meta.insert("labels".into(), json!({"kubernetes.io/service-name": "kubernetes"}));
    let slice = json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": slice_meta,
        "addressType": "IPv4",
        "endpoints": [{"addresses": [cluster.node_ip(1)], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    });
    (service, slice)
}

fn node(ids: &mut Ids, cluster: &Cluster, i: usize, created: DateTime<Utc>) -> Value {
    let name = cluster.node_name(i);
    let control_plane = i == 1;
    let mut meta = metadata(ids, None, &name, created);
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": "local",
        "topology.kubernetes.io/zone": format!("zone-{}", (b'a' + (i as u8 - 1) % 3) as char),
    });
    if control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!("");
    }
    meta.insert("labels".into(), labels);
    meta.insert(
        "annotations".into(),
        json!({
            "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }),
    );
    let cidr = format!("10.244.{}.0/24", i - 1);
    let mut spec = json!({
        "podCIDR": cidr,
        "podCIDRs": [cidr],
        "providerID": format!("kind://docker/{}/{}", cluster.name, name),
    });
    if control_plane {
        spec["taints"] = json!([{"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane"}]);
    }
    let resources = json!({
        "cpu": "8",
        "ephemeral-storage": "102626232Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "32823812Ki",
        "pods": "110",
    });
    let heartbeat = ts(cluster.now - Duration::seconds(ids.rng.random_range(5..55)));
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": ts(created + Duration::seconds(20)),
            "reason": reason,
            "message": message,
        })
    };
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {
            "addresses": [
                {"address": cluster.node_ip(i), "type": "InternalIP"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": resources,
            "capacity": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "features": {"supplementalGroupsPolicy": true},
            "images": [
                {"names": ["registry.k8s.io/etcd:3.5.21-0"], "sizeBytes": 58938593},
                {"names": ["docker.io/library/nginx:1.27.3"], "sizeBytes": 72080558},
                {"names": ["registry.k8s.io/coredns/coredns:v1.12.0"], "sizeBytes": 20939036},
                {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": ids.uid(),
                "containerRuntimeVersion": "containerd://2.1.1",
                "kernelVersion": "6.8.0-60-generic",
                "kubeProxyVersion": "",
                "kubeletVersion": cluster.kubernetes_version,
                "machineID": ids.hex(32),
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "systemUUID": ids.uid(),
            },
            "runtimeHandlers": [
                {"features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}, "name": "runc"},
                {"features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}, "name": ""},
            ],
        },
    })
}

/// One container of a generated pod.
struct ContainerSpec {
    name: String,
    image: String,
    /// `(containerPort, name, protocol)`.
    ports: Vec<(u16, &'static str, &'static str)>,
    /// `(cpu, memory)` requests.
    requests: (&'static str, &'static str),
    /// `(cpu, memory)` limits.
    limits: Option<(&'static str, &'static str)>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    /// HTTP probe `(path, port)`.
    probe: Option<(&'static str, u16)>,
    /// `(volume, mountPath, readOnly)`.
    mounts: Vec<(String, String, bool)>,
}

/// An owner reference of a generated object.
#[derive(Clone)]
struct Owner {
    api_version: &'static str,
    kind: &'static str,
    name: String,
    uid: String,
}

impl Owner {
    fn reference(&self) -> Value {
        json!([{
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }])
    }
}

struct PodParams {
    namespace: String,
    name: String,
    generate_name: Option<String>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    owner: Option<Owner>,
    node: String,
    host_ip: String,
    pod_ip: String,
    containers: Vec<ContainerSpec>,
    volumes: Vec<Value>,
    service_account: String,
    priority_class: Option<(&'static str, i64)>,
    created: DateTime<Utc>,
    extra_tolerations: Vec<Value>,
    host_network: bool,
}

fn container_value(c: &ContainerSpec, token_volume: Option<&str>) -> Value {
    let mut container = Map::new();
    container.insert("name".into(), json!(c.name));
    container.insert("image".into(), json!(c.image));
    if !c.args.is_empty() {
        container.insert("args".into(), json!(c.args));
    }
    if !c.ports.is_empty() {
        let ports: Vec<Value> = c
            .ports
            .iter()
            .map(|(port, name, protocol)| json!({"containerPort": port, "name": name, "protocol": protocol}))
            .collect();
        container.insert("ports".into(), Value::Array(ports));
    }
    if !c.env.is_empty() {
        let env: Vec<Value> = c.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
        container.insert("env".into(), Value::Array(env));
    }
    let mut resources = json!({"requests": {"cpu": c.requests.0, "memory": c.requests.1}});
    if let Some((cpu, memory)) = c.limits {
        resources["limits"] = json!({"cpu": cpu, "memory": memory});
    }
    container.insert("resources".into(), resources);
    if let Some((path, port)) = c.probe {
        let probe = |initial: u32, failures: u32| {
            json!({
                "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
                "initialDelaySeconds": initial,
                "periodSeconds": 10,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": failures,
            })
        };
        container.insert("livenessProbe".into(), probe(15, 3));
        container.insert("readinessProbe".into(), probe(5, 3));
    }
    let mut mounts: Vec<Value> = c
        .mounts
        .iter()
        .map(|(name, path, ro)| {
            if *ro {
                json!({"name": name, "mountPath": path, "readOnly": true})
            } else {
                json!({"name": name, "mountPath": path})
            }
        })
        .collect();
    if let Some(token) = token_volume {
        mounts.push(json!({"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}));
    }
    if !mounts.is_empty() {
        container.insert("volumeMounts".into(), Value::Array(mounts));
    }
    container.insert("terminationMessagePath".into(), json!("/dev/termination-log"));
    container.insert("terminationMessagePolicy".into(), json!("File"));
    container.insert("imagePullPolicy".into(), json!("IfNotPresent"));
    Value::Object(container)
}

/// The `spec.template.spec` of a controller: what the user wrote plus defaults.
fn template_spec(containers: &[ContainerSpec], volumes: &[Value], service_account: &str) -> Value {
    let containers: Vec<Value> = containers.iter().map(|c| container_value(c, None)).collect();
    let mut spec = json!({
        "containers": containers,
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
    });
    if !volumes.is_empty() {
        spec["volumes"] = json!(volumes);
    }
    if service_account != "default" {
        spec["serviceAccountName"] = json!(service_account);
        spec["serviceAccount"] = json!(service_account);
    }
    spec
}

fn pod(ids: &mut Ids, p: &PodParams) -> Value {
    let mut meta = metadata(ids, Some(&p.namespace), &p.name, p.created);
    if let Some(generate_name) = &p.generate_name {
        meta.insert("generateName".into(), json!(generate_name));
    }
    meta.insert("labels".into(), labels_value(&p.labels));
    if !p.annotations.is_empty() {
        meta.insert("annotations".into(), labels_value(&p.annotations));
    }
    if let Some(owner) = &p.owner {
        meta.insert("ownerReferences".into(), owner.reference());
    }
    meta.insert("generation".into(), json!(1));
    let token = (!p.host_network).then(|| format!("kube-api-access-{}", ids.suffix(5)));
    let containers: Vec<Value> = p.containers.iter().map(|c| container_value(c, token.as_deref())).collect();
    let mut volumes = p.volumes.clone();
    if let Some(token) = &token {
        volumes.push(json!({
            "name": token,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
            },
        }));
    }
    let mut tolerations = p.extra_tolerations.clone();
    tolerations.push(json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
    tolerations.push(json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
    let mut spec = json!({
        "containers": containers,
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true,
        "nodeName": p.node,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": p.service_account,
        "serviceAccountName": p.service_account,
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
        "volumes": volumes,
    });
    if let Some((class, priority)) = p.priority_class {
        spec["priorityClassName"] = json!(class);
        spec["priority"] = json!(priority);
    }
    if p.host_network {
        spec["hostNetwork"] = json!(true);
        spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
    }
    let scheduled = p.created + Duration::seconds(1);
    let started = p.created + Duration::seconds(3);
    let ready = p.created + Duration::seconds(9);
    let condition = |kind: &str, at: DateTime<Utc>| {
        json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": ts(at)})
    };
    let statuses: Vec<Value> = p
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image,
                "imageID": format!("{}@sha256:{}", c.image.split(':').next().unwrap_or_default(), ids.hex(64)),
                "containerID": format!("containerd://{}", ids.hex(64)),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "lastState": {},
                "state": {"running": {"startedAt": ts(started)}},
            })
        })
        .collect();
    let qos = if p.containers.iter().all(|c| c.limits.is_some_and(|l| l == c.requests)) { "Guaranteed" } else { "Burstable" };
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers", started),
                condition("Initialized", scheduled),
                condition("Ready", ready),
                condition("ContainersReady", ready),
                condition("PodScheduled", scheduled),
            ],
            "hostIP": p.host_ip,
            "hostIPs": [{"ip": p.host_ip}],
            "podIP": p.pod_ip,
            "podIPs": [{"ip": p.pod_ip}],
            "startTime": ts(scheduled),
            "containerStatuses": statuses,
            "qosClass": qos,
        },
    })
}

/// A control-plane component: name, image, args, liveness probe `(path, port)`.
type StaticPod = (&'static str, String, Vec<String>, (&'static str, u16));

/// The control-plane static pods of node 1 (mirror pods owned by the Node).
fn static_pods(ids: &mut Ids, cluster: &Cluster, created: DateTime<Utc>) -> Vec<Value> {
    let node = cluster.node_name(1);
    let ip = cluster.node_ip(1);
    let version = &cluster.kubernetes_version;
    let components: [StaticPod; 4] = [
        (
            "etcd",
            "registry.k8s.io/etcd:3.5.21-0".to_string(),
            vec![format!("--advertise-client-urls=https://{ip}:2379"), "--data-dir=/var/lib/etcd".into()],
            ("/livez", 2381),
        ),
        (
            "kube-apiserver",
            format!("registry.k8s.io/kube-apiserver:{version}"),
            vec![format!("--advertise-address={ip}"), "--service-cluster-ip-range=10.96.0.0/16".into()],
            ("/livez", 6443),
        ),
        (
            "kube-controller-manager",
            format!("registry.k8s.io/kube-controller-manager:{version}"),
            vec!["--cluster-cidr=10.244.0.0/16".into(), "--leader-elect=true".into()],
            ("/healthz", 10257),
        ),
        (
            "kube-scheduler",
            format!("registry.k8s.io/kube-scheduler:{version}"),
            vec!["--leader-elect=true".into()],
            ("/healthz", 10259),
        ),
    ];
    let node_uid = ids.uid();
    components
        .into_iter()
        .map(|(component, image, args, probe)| {
            let hash = ids.hex(32);
            let params = PodParams {
                namespace: "kube-system".into(),
                name: format!("{component}-{node}"),
                generate_name: None,
                labels: vec![("component".into(), component.into()), ("tier".into(), "control-plane".into())],
                annotations: vec![
                    ("kubernetes.io/config.hash".into(), hash.clone()),
                    ("kubernetes.io/config.mirror".into(), hash),
                    ("kubernetes.io/config.seen".into(), format!("{}.000000000Z", ts(created).trim_end_matches('Z'))),
                    ("kubernetes.io/config.source".into(), "file".into()),
                ],
                owner: Some(Owner { api_version: "v1", kind: "Node", name: node.clone(), uid: node_uid.clone() }),
                node: node.clone(),
                host_ip: ip.clone(),
                pod_ip: ip.clone(),
                containers: vec![ContainerSpec {
                    name: component.into(),
                    image,
                    ports: vec![],
                    requests: ("100m", "100Mi"),
                    limits: None,
                    env: vec![],
                    args,
                    probe: Some(probe),
                    mounts: vec![("k8s-certs".into(), "/etc/kubernetes/pki".into(), true)],
                }],
                volumes: vec![json!({"name": "k8s-certs", "hostPath": {"path": "/etc/kubernetes/pki", "type": "DirectoryOrCreate"}})],
                service_account: "default".into(),
                priority_class: Some(("system-node-critical", 2_000_001_000)),
                created,
                extra_tolerations: vec![json!({"effect": "NoExecute", "operator": "Exists"})],
                host_network: true,
            };
            pod(ids, &params)
        })
        .collect()
}

/// One demo application: a Deployment or StatefulSet with a Service.
struct App {
    namespace: &'static str,
    name: &'static str,
    stateful: bool,
    replicas: usize,
    image: &'static str,
    /// `(containerPort, name, protocol)`.
    ports: Vec<(u16, &'static str, &'static str)>,
    requests: (&'static str, &'static str),
    limits: Option<(&'static str, &'static str)>,
    env: Vec<(&'static str, &'static str)>,
    probe: Option<(&'static str, u16)>,
    /// Label key of the selector (`app`, or `k8s-app` for coredns).
    label_key: &'static str,
    service: Option<ServiceKind>,
    /// Nodes the pods go to, round-robin (1-based).
    nodes: Vec<usize>,
    service_account: &'static str,
    offset_minutes: i64,
    config_map: Option<(&'static str, &'static str)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ServiceKind {
    ClusterIp(&'static str),
    NodePort(&'static str, u16),
    Headless,
}

fn demo_apps() -> Vec<App> {
    vec![
        App {
            namespace: "shop",
            name: "frontend",
            stateful: false,
            replicas: 3,
            image: "docker.io/library/nginx:1.27.3",
            ports: vec![(80, "http", "TCP")],
            requests: ("100m", "128Mi"),
            limits: Some(("500m", "256Mi")),
            env: vec![("CHECKOUT_URL", "http://checkout.shop.svc:8080"), ("NGINX_WORKER_PROCESSES", "2")],
            probe: Some(("/", 80)),
            label_key: "app",
            service: Some(ServiceKind::NodePort("10.96.120.15", 30080)),
            nodes: vec![2, 3],
            service_account: "default",
            offset_minutes: 0,
            config_map: Some(("frontend-config", "/etc/nginx/conf.d")),
        },
        App {
            namespace: "shop",
            name: "checkout",
            stateful: false,
            replicas: 2,
            image: "ghcr.io/example/checkout:2.4.1",
            ports: vec![(8080, "http", "TCP"), (9090, "metrics", "TCP")],
            requests: ("200m", "256Mi"),
            limits: Some(("1", "512Mi")),
            env: vec![("CACHE_ADDR", "cache.shop.svc:6379"), ("LOG_FORMAT", "json"), ("PAYMENT_TIMEOUT", "5s")],
            probe: Some(("/healthz", 8080)),
            label_key: "app",
            service: Some(ServiceKind::ClusterIp("10.96.87.201")),
            nodes: vec![3, 2],
            service_account: "checkout",
            offset_minutes: 5,
            config_map: None,
        },
        App {
            namespace: "shop",
            name: "cache",
            stateful: false,
            replicas: 1,
            image: "docker.io/library/redis:7.4.1",
            ports: vec![(6379, "redis", "TCP")],
            requests: ("100m", "256Mi"),
            limits: Some(("100m", "256Mi")),
            env: vec![("REDIS_ARGS", "--maxmemory 200mb --maxmemory-policy allkeys-lru")],
            probe: None,
            label_key: "app",
            service: Some(ServiceKind::ClusterIp("10.96.33.74")),
            nodes: vec![2],
            service_account: "default",
            offset_minutes: 6,
            config_map: None,
        },
        App {
            namespace: "kube-system",
            name: "coredns",
            stateful: false,
            replicas: 2,
            image: "registry.k8s.io/coredns/coredns:v1.12.0",
            ports: vec![(53, "dns", "UDP"), (53, "dns-tcp", "TCP"), (9153, "metrics", "TCP")],
            requests: ("100m", "70Mi"),
            limits: Some(("100m", "170Mi")),
            env: vec![],
            probe: Some(("/health", 8080)),
            label_key: "k8s-app",
            service: Some(ServiceKind::ClusterIp("10.96.0.10")),
            nodes: vec![1, 2],
            service_account: "coredns",
            offset_minutes: -1440,
            config_map: Some(("coredns", "/etc/coredns")),
        },
        App {
            namespace: "monitoring",
            name: "prometheus",
            stateful: false,
            replicas: 1,
            image: "quay.io/prometheus/prometheus:v3.1.0",
            ports: vec![(9090, "web", "TCP")],
            requests: ("250m", "512Mi"),
            limits: Some(("1", "2Gi")),
            env: vec![],
            probe: Some(("/-/ready", 9090)),
            label_key: "app",
            service: Some(ServiceKind::ClusterIp("10.96.140.9")),
            nodes: vec![3],
            service_account: "prometheus",
            offset_minutes: 12,
            config_map: Some(("prometheus-config", "/etc/prometheus")),
        },
        App {
            namespace: "default",
            name: "web",
            stateful: true,
            replicas: 3,
            image: "docker.io/library/nginx:1.27.3",
            ports: vec![(80, "web", "TCP")],
            requests: ("50m", "64Mi"),
            limits: None,
            env: vec![],
            probe: Some(("/", 80)),
            label_key: "app",
            service: Some(ServiceKind::Headless),
            nodes: vec![2, 3],
            service_account: "default",
            offset_minutes: 20,
            config_map: None,
        },
    ]
}

/// The objects and events of one demo app.
struct AppObjects {
    objects: Vec<Value>,
    events: Vec<Value>,
}

/// Pod IPs per node: `10.244.{node-1}.{n}`.
#[derive(Default)]
struct PodIps {
    next: [u8; DEMO_NODES + 1],
}

impl PodIps {
    fn take(&mut self, node: usize) -> String {
        let n = &mut self.next[node];
        if *n < 2 {
            *n = 2;
        }
        let ip = format!("10.244.{}.{}", node - 1, n);
        *n = n.wrapping_add(1);
        ip
    }
}

fn controller(ids: &mut Ids, cluster: &Cluster, app: &App, created: DateTime<Utc>, ips: &mut PodIps) -> AppObjects {
    let mut objects = Vec::new();
    let mut events = Vec::new();
    let selector = vec![(app.label_key.to_string(), app.name.to_string())];
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some((cm, path)) = app.config_map {
        volumes.push(json!({"name": "config", "configMap": {"name": cm, "defaultMode": 420}}));
        mounts.push(("config".to_string(), path.to_string(), true));
    }
    let container = || ContainerSpec {
        name: app.name.into(),
        image: app.image.into(),
        ports: app.ports.clone(),
        requests: app.requests,
        limits: app.limits,
        env: app.env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        args: vec![],
        probe: app.probe,
        mounts: mounts.clone(),
    };
    let hash = ids.suffix(10);
    let template = |extra: &[(String, String)]| {
        let mut labels = selector.clone();
        labels.extend(extra.iter().cloned());
        json!({
            "metadata": {"labels": labels_value(&labels), "creationTimestamp": null},
            "spec": template_spec(&[container()], &volumes, app.service_account),
        })
    };
    let owner_kind = if app.stateful { "StatefulSet" } else { "ReplicaSet" };
    let top_uid;
    let pod_owner;
    let mut pod_labels = selector.clone();
    let mut names = Vec::new();
    let mut generate_name = None;
    let replicas = app.replicas;
    if app.stateful {
        let mut meta = metadata(ids, Some(app.namespace), app.name, created);
        meta.insert("generation".into(), json!(1));
        meta.insert("labels".into(), labels_value(&selector));
        top_uid = meta["uid"].as_str().unwrap_or_default().to_string();
        let revision = format!("{}-{}", app.name, hash);
        objects.push(json!({
            "kind": "StatefulSet",
            "apiVersion": "apps/v1",
            "metadata": meta,
            "spec": {
                "replicas": replicas,
                "serviceName": app.name,
                "selector": {"matchLabels": labels_value(&selector)},
                "template": template(&[]),
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "revisionHistoryLimit": 10,
                "minReadySeconds": 0,
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            },
            "status": {
                "availableReplicas": replicas,
                "collisionCount": 0,
                "currentReplicas": replicas,
                "currentRevision": revision,
                "observedGeneration": 1,
                "readyReplicas": replicas,
                "replicas": replicas,
                "updateRevision": revision,
                "updatedReplicas": replicas,
            },
        }));
        pod_owner = Owner { api_version: "apps/v1", kind: owner_kind, name: app.name.into(), uid: top_uid.clone() };
        pod_labels.push(("controller-revision-hash".into(), revision));
        for i in 0..replicas {
            names.push(format!("{}-{i}", app.name));
        }
    } else {
        let mut meta = metadata(ids, Some(app.namespace), app.name, created);
        meta.insert("generation".into(), json!(1));
        meta.insert("labels".into(), labels_value(&selector));
        meta.insert("annotations".into(), json!({"deployment.kubernetes.io/revision": "1"}));
        top_uid = meta["uid"].as_str().unwrap_or_default().to_string();
        let available = ts(created + Duration::seconds(12));
        objects.push(json!({
            "kind": "Deployment",
            "apiVersion": "apps/v1",
            "metadata": meta,
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels_value(&selector)},
                "template": template(&[]),
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "revisionHistoryLimit": 10,
                "progressDeadlineSeconds": 600,
            },
            "status": {
                "availableReplicas": replicas,
                "conditions": [
                    {"type": "Available", "status": "True", "lastUpdateTime": available, "lastTransitionTime": available,
                     "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                    {"type": "Progressing", "status": "True", "lastUpdateTime": available, "lastTransitionTime": ts(created),
                     "reason": "NewReplicaSetAvailable",
                     "message": format!("ReplicaSet \"{}-{hash}\" has successfully progressed.", app.name)},
                ],
                "observedGeneration": 1,
                "readyReplicas": replicas,
                "replicas": replicas,
                "updatedReplicas": replicas,
            },
        }));
        let rs_name = format!("{}-{hash}", app.name);
        let hash_label = [("pod-template-hash".to_string(), hash.clone())];
        let mut rs_selector = selector.clone();
        rs_selector.extend(hash_label.iter().cloned());
        let mut rs_meta = metadata(ids, Some(app.namespace), &rs_name, created);
        rs_meta.insert("generation".into(), json!(1));
        rs_meta.insert("labels".into(), labels_value(&rs_selector));
        rs_meta.insert(
            "annotations".into(),
            json!({
                "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                "deployment.kubernetes.io/max-replicas": (replicas + replicas.div_ceil(4)).to_string(),
                "deployment.kubernetes.io/revision": "1",
            }),
        );
        rs_meta.insert(
            "ownerReferences".into(),
            Owner { api_version: "apps/v1", kind: "Deployment", name: app.name.into(), uid: top_uid.clone() }.reference(),
        );
        let rs_uid = rs_meta["uid"].as_str().unwrap_or_default().to_string();
        objects.push(json!({
            "kind": "ReplicaSet",
            "apiVersion": "apps/v1",
            "metadata": rs_meta,
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels_value(&rs_selector)},
                "template": template(&hash_label),
            },
            "status": {
                "availableReplicas": replicas,
                "fullyLabeledReplicas": replicas,
                "observedGeneration": 1,
                "readyReplicas": replicas,
                "replicas": replicas,
            },
        }));
        events.push(event(
            ids,
            app.namespace,
            ("apps/v1", "Deployment", app.name, &top_uid, None),
            "ScalingReplicaSet",
            &format!("Scaled up replica set {rs_name} from 0 to {replicas}"),
            ("deployment-controller", None),
            created,
        ));
        pod_owner = Owner { api_version: "apps/v1", kind: owner_kind, name: rs_name.clone(), uid: rs_uid };
        pod_labels.extend(hash_label.iter().cloned());
        for _ in 0..replicas {
            names.push(format!("{rs_name}-{}", ids.suffix(5)));
        }
        generate_name = Some(format!("{rs_name}-"));
    }
    let mut endpoints = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let node = app.nodes[i % app.nodes.len()];
        let pod_created = created + Duration::seconds(i as i64 * if app.stateful { 12 } else { 1 });
        let mut labels = pod_labels.clone();
        if app.stateful {
            labels.push(("apps.kubernetes.io/pod-index".into(), i.to_string()));
            labels.push(("statefulset.kubernetes.io/pod-name".into(), name.clone()));
        }
        let mut tolerations = vec![];
        if app.name == "coredns" {
            tolerations.push(json!({"key": "CriticalAddonsOnly", "operator": "Exists"}));
            tolerations.push(json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}));
        }
        let params = PodParams {
            namespace: app.namespace.into(),
            name: name.clone(),
            generate_name: generate_name.clone().or_else(|| app.stateful.then(|| format!("{}-", app.name))),
            labels,
            annotations: vec![],
            owner: Some(pod_owner.clone()),
            node: cluster.node_name(node),
            host_ip: cluster.node_ip(node),
            pod_ip: ips.take(node),
            containers: vec![container()],
            volumes: volumes.clone(),
            service_account: app.service_account.into(),
            priority_class: (app.name == "coredns").then_some(("system-cluster-critical", 2_000_000_000)),
            created: pod_created,
            extra_tolerations: tolerations,
            host_network: false,
        };
        let pod = pod(ids, &params);
        let pod_uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let node_name = cluster.node_name(node);
        if app.stateful {
            events.push(event(
                ids,
                app.namespace,
                ("apps/v1", "StatefulSet", app.name, &top_uid, None),
                "SuccessfulCreate",
                &format!("create Pod {name} in StatefulSet {} successful", app.name),
                ("statefulset-controller", None),
                pod_created,
            ));
        } else {
            events.push(event(
                ids,
                app.namespace,
                ("apps/v1", "ReplicaSet", &pod_owner.name, &pod_owner.uid, None),
                "SuccessfulCreate",
                &format!("Created pod: {name}"),
                ("replicaset-controller", None),
                pod_created,
            ));
        }
        let involved = ("v1", "Pod", name.as_str(), pod_uid.as_str(), None);
        let container_path = format!("spec.containers{{{}}}", app.name);
        let in_container = ("v1", "Pod", name.as_str(), pod_uid.as_str(), Some(container_path.as_str()));
        events.push(event(
            ids,
            app.namespace,
            involved,
            "Scheduled",
            &format!("Successfully assigned {}/{name} to {node_name}", app.namespace),
            ("default-scheduler", None),
            pod_created + Duration::seconds(1),
        ));
        events.push(event(
            ids,
            app.namespace,
            in_container,
            "Pulled",
            &format!("Container image \"{}\" already present on machine", app.image),
            ("kubelet", Some(&node_name)),
            pod_created + Duration::seconds(2),
        ));
        events.push(event(
            ids,
            app.namespace,
            in_container,
            "Created",
            &format!("Created container: {}", app.name),
            ("kubelet", Some(&node_name)),
            pod_created + Duration::seconds(2),
        ));
        events.push(event(
            ids,
            app.namespace,
            in_container,
            "Started",
            &format!("Started container {}", app.name),
            ("kubelet", Some(&node_name)),
            pod_created + Duration::seconds(3),
        ));
        endpoints.push(json!({
            "addresses": [params.pod_ip],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "nodeName": node_name,
            "targetRef": {"kind": "Pod", "name": name, "namespace": app.namespace, "uid": pod_uid},
        }));
        objects.push(pod);
    }
    if let Some(kind) = app.service {
        let (service, slice) = service(ids, app, kind, &selector, endpoints, created);
        objects.push(service);
        objects.push(slice);
    }
    AppObjects { objects, events }
}

fn service(
    ids: &mut Ids,
    app: &App,
    kind: ServiceKind,
    selector: &[(String, String)],
    endpoints: Vec<Value>,
    created: DateTime<Utc>,
) -> (Value, Value) {
    let name = if app.name == "coredns" { "kube-dns" } else { app.name };
    let mut meta = metadata(ids, Some(app.namespace), name, created);
    meta.insert("labels".into(), labels_value(selector));
    let ports: Vec<Value> = app
        .ports
        .iter()
        .map(|(port, port_name, protocol)| {
            let mut p = json!({"name": port_name, "port": port, "protocol": protocol, "targetPort": port});
            if let ServiceKind::NodePort(_, node_port) = kind {
                p["port"] = json!(80);
                p["nodePort"] = json!(node_port);
            }
            p
        })
        .collect();
    let (cluster_ip, type_) = match kind {
        ServiceKind::ClusterIp(ip) => (ip, "ClusterIP"),
        ServiceKind::NodePort(ip, _) => (ip, "NodePort"),
        ServiceKind::Headless => ("None", "ClusterIP"),
    };
    let mut spec = json!({
        "clusterIP": cluster_ip,
        "clusterIPs": [cluster_ip],
        "internalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "ports": ports,
        "selector": labels_value(selector),
        "sessionAffinity": "None",
        "type": type_,
    });
    if let ServiceKind::NodePort(..) = kind {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    let service_uid = meta["uid"].as_str().unwrap_or_default().to_string();
    let service = json!({"kind": "Service", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": {"loadBalancer": {}}});
    let slice_name = format!("{name}-{}", ids.suffix(5));
    let mut slice_meta = metadata(ids, Some(app.namespace), &slice_name, created);
    let mut labels = selector.to_vec();
    labels.push(("endpointslice.kubernetes.io/managed-by".into(), "endpointslice-controller.k8s.io".into()));
    labels.push(("kubernetes.io/service-name".into(), name.into()));
    if kind == ServiceKind::Headless {
        labels.push(("service.kubernetes.io/headless".into(), String::new()));
    }
    slice_meta.insert("generateName".into(), json!(format!("{name}-")));
    slice_meta.insert("labels".into(), labels_value(&labels));
    slice_meta.insert("annotations".into(), json!({"endpoints.kubernetes.io/last-change-trigger-time": ts(created + Duration::seconds(12))}));
    slice_meta.insert(
        "ownerReferences".into(),
        Owner { api_version: "v1", kind: "Service", name: name.into(), uid: service_uid }.reference(),
    );
    slice_meta.insert("generation".into(), json!(1));
    let slice_ports: Vec<Value> = app
        .ports
        .iter()
        .map(|(port, port_name, protocol)| json!({"name": port_name, "port": port, "protocol": protocol}))
        .collect();
    let slice = json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": slice_meta,
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": slice_ports,
    });
    (service, slice)
}

/// A core/v1 Event about `(apiVersion, kind, name, uid, fieldPath)`.
fn event(
    ids: &mut Ids,
    namespace: &str,
    involved: (&str, &str, &str, &str, Option<&str>),
    reason: &str,
    message: &str,
    source: (&str, Option<&str>),
    at: DateTime<Utc>,
) -> Value {
    let (api_version, kind, name, uid, field_path) = involved;
    let nanos = at.timestamp_nanos_opt().unwrap_or_default() as u64 + ids.rng.random_range(0..1_000_000_000u64);
    let mut meta = metadata(ids, Some(namespace), &format!("{name}.{nanos:x}"), at);
    meta.remove("generation");
    let mut involved_object = json!({"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace, "uid": uid});
    if let Some(path) = field_path {
        involved_object["fieldPath"] = json!(path);
    }
    let mut source_value = json!({"component": source.0});
    if let Some(host) = source.1 {
        source_value["host"] = json!(host);
    }
    json!({
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": meta,
        "involvedObject": involved_object,
        "reason": reason,
        "message": message,
        "source": source_value,
        "firstTimestamp": ts(at),
        "lastTimestamp": ts(at),
        "count": 1,
        "type": "Normal",
        "eventTime": null,
        "reportingComponent": source.0,
        "reportingInstance": source.1.unwrap_or_default(),
    })
}

fn demo_config_maps(ids: &mut Ids, created: DateTime<Utc>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut config_map = |ids: &mut Ids, namespace: &str, name: &str, data: Value| {
        let mut meta = metadata(ids, Some(namespace), name, created);
        meta.insert("labels".into(), json!({"app.kubernetes.io/part-of": "demo"}));
        out.push(json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": data}));
    };
    config_map(
        ids,
        "kube-system",
        "coredns",
        json!({"Corefile": ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n"}),
    );
    config_map(
        ids,
        "shop",
        "frontend-config",
        json!({"default.conf": "server {\n    listen 80;\n    location / { root /usr/share/nginx/html; }\n    location /api/ { proxy_pass http://checkout.shop.svc:8080/; }\n}\n"}),
    );
    config_map(ids, "shop", "checkout-settings", json!({"currency": "EUR", "payment.provider": "sandbox", "retries": "3"}));
    config_map(
        ids,
        "monitoring",
        "prometheus-config",
        json!({"prometheus.yml": "global:\n  scrape_interval: 30s\nscrape_configs:\n  - job_name: kubernetes-pods\n    kubernetes_sd_configs:\n      - role: pod\n"}),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Cluster {
        Cluster::new("member1", 7, DateTime::parse_from_rfc3339("2025-06-01T12:00:00Z").unwrap().with_timezone(&Utc))
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .map(|o| match o["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", o["metadata"]["name"].as_str().unwrap()),
                None => o["metadata"]["name"].as_str().unwrap().to_string(),
            })
            .collect()
    }

    #[test]
    fn demo_is_deterministic_for_a_seed_and_differs_between_seeds() {
        let c = cluster();
        assert_eq!(demo(&c), demo(&c));
        let other = Cluster { seed: 8, ..c.clone() };
        assert_ne!(demo(&c), demo(&other));
    }

    #[test]
    fn demo_has_the_documented_objects() {
        let objects = demo(&cluster());
        let mut namespaces = names(&objects, "Namespace");
        namespaces.sort();
        assert_eq!(namespaces, ["default", "kube-node-lease", "kube-public", "kube-system", "monitoring", "shop"]);
        assert_eq!(names(&objects, "Node"), ["member1-node-1", "member1-node-2", "member1-node-3"]);
        let pods = names(&objects, "Pod");
        for web in ["default/web-0", "default/web-1", "default/web-2"] {
            assert!(pods.contains(&web.to_string()), "{web} in {pods:?}");
        }
        let deployments = names(&objects, "Deployment");
        assert_eq!(deployments, ["shop/frontend", "shop/checkout", "shop/cache", "kube-system/coredns", "monitoring/prometheus"]);
        assert_eq!(names(&objects, "StatefulSet"), ["default/web"]);
        let replicasets = names(&objects, "ReplicaSet");
        assert_eq!(replicasets.len(), 5);
        for rs in &replicasets {
            let (_, name) = rs.split_once('/').unwrap();
            let hash = name.rsplit('-').next().unwrap();
            assert_eq!(hash.len(), 10, "{rs}");
        }
        // Pods of a ReplicaSet are {rs}-{5 chars} and owned by it.
        let frontend_pods: Vec<&Value> =
            objects.iter().filter(|o| o["kind"] == "Pod" && o["metadata"]["labels"]["app"] == "frontend").collect();
        assert_eq!(frontend_pods.len(), 3);
        for pod in frontend_pods {
            let name = pod["metadata"]["name"].as_str().unwrap();
            let owner = &pod["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "ReplicaSet");
            assert_eq!(name.len(), owner["name"].as_str().unwrap().len() + 6);
            assert!(name.starts_with(owner["name"].as_str().unwrap()));
        }
        let services = names(&objects, "Service");
        assert!(services.contains(&"shop/frontend".to_string()));
        let node_ports = objects.iter().filter(|o| o["kind"] == "Service" && o["spec"]["type"] == "NodePort").count();
        assert_eq!(node_ports, 1);
        let root_cas = names(&objects, "ConfigMap").into_iter().filter(|n| n.ends_with("/kube-root-ca.crt")).count();
        assert_eq!(root_cas, 6);
        let reasons: Vec<&str> =
            objects.iter().filter(|o| o["kind"] == "Event").map(|o| o["reason"].as_str().unwrap()).collect();
        for reason in ["Scheduled", "Pulled", "Created", "Started", "ScalingReplicaSet", "SuccessfulCreate"] {
            assert!(reasons.contains(&reason), "{reason}");
        }
    }

    #[test]
    fn web_pods_have_the_same_names_in_every_cluster() {
        let a = demo(&cluster());
        let b = demo(&Cluster::new("member2", 7, cluster().now));
        let web = |objects: &[Value]| {
            let mut n: Vec<String> = names(objects, "Pod").into_iter().filter(|n| n.starts_with("default/web-")).collect();
            n.sort();
            n
        };
        assert_eq!(web(&a), ["default/web-0", "default/web-1", "default/web-2"]);
        assert_eq!(web(&a), web(&b));
        assert_eq!(names(&b, "Node")[0], "member2-node-1");
    }

    #[test]
    fn pods_are_two_to_four_kilobytes() {
        let objects = demo(&cluster());
        for pod in objects.iter().filter(|o| o["kind"] == "Pod") {
            let size = serde_json::to_vec(pod).unwrap().len();
            assert!((2048..=4096).contains(&size), "{} is {size} bytes", pod["metadata"]["name"]);
        }
        for i in [0, 1, 99, 12345] {
            let size = serde_json::to_vec(&load_pod(&cluster(), i)).unwrap().len();
            assert!((2048..=4096).contains(&size), "load pod {i} is {size} bytes");
        }
    }

    #[test]
    fn load_pods_spread_over_namespaces_and_shards() {
        let pods = load_pods(&cluster(), 0..3000);
        assert_eq!(pods.len(), 3000);
        assert_eq!(pods[0]["metadata"]["name"], "load-0");
        assert_eq!(pods[123]["metadata"]["namespace"], "load-3");
        assert_eq!(pods[123]["metadata"]["labels"]["shard"], "s23");
        assert_eq!(pods[123]["metadata"]["labels"]["app"], "load");
        let shard7 = pods.iter().filter(|p| p["metadata"]["labels"]["shard"] == "s7").count();
        assert_eq!(shard7, 30);
        // Generated in parallel, equal to sequential generation.
        assert_eq!(pods[2999], load_pod(&cluster(), 2999));
    }

    #[test]
    fn load_pod_json_equals_load_pod() {
        for i in [0, 1, 7, 99, 250, 12345, 99_999] {
            let fast: Value = serde_json::from_str(&load_pod_json(&cluster(), i, Some(42))).unwrap();
            let mut slow = load_pod(&cluster(), i);
            slow["metadata"]["resourceVersion"] = json!("42");
            assert_eq!(fast, slow, "load pod {i}");
            let labels: Vec<(String, String)> = slow["metadata"]["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            assert_eq!(load_pod_labels(i), labels);
            assert_eq!(
                kubefold_engine::fields::extract("", "pods", &load_pod_selectable(&cluster(), i)),
                kubefold_engine::fields::extract("", "pods", &slow)
            );
        }
        assert!(load_pod_json(&cluster(), 3, None).starts_with(r#"{"kind":"Pod","apiVersion":"v1","metadata":"#));
    }

    #[test]
    fn uids_look_like_uuids() {
        let mut rng = StdRng::seed_from_u64(1);
        let u = uid(&mut rng);
        assert_eq!(u.len(), 36);
        assert_eq!(u.as_bytes()[14], b'4');
        assert!(u.split('-').map(str::len).eq([8, 4, 4, 4, 12]));
    }

    #[test]
    fn touch_pod_changes_the_pod() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut pod = load_pod(&cluster(), 5);
        for _ in 0..10 {
            let before = pod.clone();
            let at = cluster().now + Duration::seconds(rng.random_range(1..1000));
            let edit = touch_pod(&mut pod, &mut rng, at);
            assert_ne!(before, pod, "{edit:?} changed nothing");
        }
    }
}
