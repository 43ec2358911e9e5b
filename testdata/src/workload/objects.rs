//! The building blocks of every object: seeded identifiers, metadata, and
//! the cluster's own objects (namespaces, their root CA, the `kubernetes`
//! Service, nodes).

use super::*;

/// A seeded random source with the identifier helpers.
pub(super) struct Ids {
    pub(super) rng: StdRng,
}

impl Ids {
    pub(super) fn new(seed: u64) -> Ids {
        Ids { rng: StdRng::seed_from_u64(seed) }
    }

    pub(super) fn uid(&mut self) -> String {
        uid(&mut self.rng)
    }

    pub(super) fn suffix(&mut self, n: usize) -> String {
        suffix(&mut self.rng, n)
    }

    pub(super) fn hex(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from_digit(self.rng.random_range(0..16), 16).unwrap_or('0')).collect()
    }
}

/// SplitMix64 finaliser: mixes two values into a seed.
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of a string (stable across runs, unlike `DefaultHasher`).
pub(super) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

pub(super) fn ensure_object<'a>(parent: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !parent[key].is_object() {
        parent[key] = json!({});
    }
    match parent[key].as_object_mut() {
        Some(map) => map,
        None => unreachable!("just made an object"),
    }
}

pub(super) fn labels_value(labels: &[(String, String)]) -> Value {
    Value::Object(labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

pub(super) fn metadata(ids: &mut Ids, namespace: Option<&str>, name: &str, created: DateTime<Utc>) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.insert("uid".into(), json!(ids.uid()));
    meta.insert("creationTimestamp".into(), json!(ts(created)));
    meta
}

pub(super) fn namespace(ids: &mut Ids, name: &str, created: DateTime<Utc>, labels: &[(&str, &str)]) -> Value {
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

pub(super) fn root_ca(ids: &mut Ids, namespace: &str, created: DateTime<Utc>) -> Value {
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

pub(super) fn kubernetes_service(ids: &mut Ids, cluster: &Cluster, created: DateTime<Utc>) -> (Value, Value) {
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

pub(super) fn node(ids: &mut Ids, cluster: &Cluster, i: usize, created: DateTime<Utc>) -> Value {
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
