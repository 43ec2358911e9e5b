//! The demo's applications: controllers with their replica sets and pods,
//! services with their endpoint slices, events, config maps.

use super::*;

/// One demo application: a Deployment or StatefulSet with a Service.
pub(super) struct App {
    pub(super) namespace: &'static str,
    pub(super) name: &'static str,
    pub(super) stateful: bool,
    pub(super) replicas: usize,
    pub(super) image: &'static str,
    /// `(containerPort, name, protocol)`.
    pub(super) ports: Vec<(u16, &'static str, &'static str)>,
    pub(super) requests: (&'static str, &'static str),
    pub(super) limits: Option<(&'static str, &'static str)>,
    pub(super) env: Vec<(&'static str, &'static str)>,
    pub(super) probe: Option<(&'static str, u16)>,
    /// Label key of the selector (`app`, or `k8s-app` for coredns).
    pub(super) label_key: &'static str,
    pub(super) service: Option<ServiceKind>,
    /// Nodes the pods go to, round-robin (1-based).
    pub(super) nodes: Vec<usize>,
    pub(super) service_account: &'static str,
    pub(super) offset_minutes: i64,
    pub(super) config_map: Option<(&'static str, &'static str)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ServiceKind {
    ClusterIp(&'static str),
    NodePort(&'static str, u16),
    Headless,
}

pub(super) fn demo_apps() -> Vec<App> {
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
pub(super) struct AppObjects {
    pub(super) objects: Vec<Value>,
    pub(super) events: Vec<Value>,
}

/// Pod IPs per node: `10.244.{node-1}.{n}`.
#[derive(Default)]
pub(super) struct PodIps {
    pub(super) next: [u8; DEMO_NODES + 1],
}

impl PodIps {
    pub(super) fn take(&mut self, node: usize) -> String {
        let n = &mut self.next[node];
        if *n < 2 {
            *n = 2;
        }
        let ip = format!("10.244.{}.{}", node - 1, n);
        *n = n.wrapping_add(1);
        ip
    }
}

pub(super) fn controller(ids: &mut Ids, cluster: &Cluster, app: &App, created: DateTime<Utc>, ips: &mut PodIps) -> AppObjects {
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

pub(super) fn service(
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
pub(super) fn event(
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

pub(super) fn demo_config_maps(ids: &mut Ids, created: DateTime<Utc>) -> Vec<Value> {
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
