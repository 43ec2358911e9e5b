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
//!
//! - this module: the [`Cluster`], the empty cluster, the demo workload, the
//!   widgets custom resource;
//! - `load`: load pods and the edits of churn;
//! - `objects`: identifiers, metadata, namespaces, nodes, the `kubernetes` Service;
//! - `pods`: pods, pod templates and static pods;
//! - `apps`: the demo's controllers, services, events and config maps.
//! - `karmada`: the Karmada control plane (`Cluster` and `ResourceRegistry` CRDs).

use std::ops::Range;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

mod apps;
mod karmada;
mod load;
mod objects;
mod pods;

pub use karmada::{karmada, karmada_types};

use self::apps::*;
pub use self::load::*;
use self::objects::*;
use self::pods::*;

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
                crate::sim::fields::extract("", "pods", &load_pod_selectable(&cluster(), i)),
                crate::sim::fields::extract("", "pods", &slow)
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
