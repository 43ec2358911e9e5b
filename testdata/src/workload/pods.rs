//! Pods as admission and the kubelet leave them: containers with their
//! token volume, templates, owners, statuses, and the static pods of the
//! control plane.

use super::*;

/// One container of a generated pod.
pub(super) struct ContainerSpec {
    pub(super) name: String,
    pub(super) image: String,
    /// `(containerPort, name, protocol)`.
    pub(super) ports: Vec<(u16, &'static str, &'static str)>,
    /// `(cpu, memory)` requests.
    pub(super) requests: (&'static str, &'static str),
    /// `(cpu, memory)` limits.
    pub(super) limits: Option<(&'static str, &'static str)>,
    pub(super) env: Vec<(String, String)>,
    pub(super) args: Vec<String>,
    /// HTTP probe `(path, port)`.
    pub(super) probe: Option<(&'static str, u16)>,
    /// `(volume, mountPath, readOnly)`.
    pub(super) mounts: Vec<(String, String, bool)>,
}

/// An owner reference of a generated object.
#[derive(Clone)]
pub(super) struct Owner {
    pub(super) api_version: &'static str,
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) uid: String,
}

impl Owner {
    pub(super) fn reference(&self) -> Value {
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

pub(super) struct PodParams {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) generate_name: Option<String>,
    pub(super) labels: Vec<(String, String)>,
    pub(super) annotations: Vec<(String, String)>,
    pub(super) owner: Option<Owner>,
    pub(super) node: String,
    pub(super) host_ip: String,
    pub(super) pod_ip: String,
    pub(super) containers: Vec<ContainerSpec>,
    pub(super) volumes: Vec<Value>,
    pub(super) service_account: String,
    pub(super) priority_class: Option<(&'static str, i64)>,
    pub(super) created: DateTime<Utc>,
    pub(super) extra_tolerations: Vec<Value>,
    pub(super) host_network: bool,
}

pub(super) fn container_value(c: &ContainerSpec, token_volume: Option<&str>) -> Value {
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
pub(super) fn template_spec(containers: &[ContainerSpec], volumes: &[Value], service_account: &str) -> Value {
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

pub(super) fn pod(ids: &mut Ids, p: &PodParams) -> Value {
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
pub(super) type StaticPod = (&'static str, String, Vec<String>, (&'static str, u16));

/// The control-plane static pods of node 1 (mirror pods owned by the Node).
pub(super) fn static_pods(ids: &mut Ids, cluster: &Cluster, created: DateTime<Utc>) -> Vec<Value> {
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
