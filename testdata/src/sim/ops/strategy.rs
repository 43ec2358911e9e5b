//! The types' strategies on a write (`PrepareForCreate`, `PrepareForUpdate`,
//! `Validate`): type meta and namespace checks, validation, immutable
//! fields, pod defaults and admission, cluster IPs.

use super::*;

/// Checks `apiVersion` and `kind` of a body against the URL's type and fills them in.
pub(super) fn check_type_meta(resource: &ResourceType, body: &mut Value) -> Result<()> {
    if !body.is_object() {
        return Err(ApiError::BadRequest(format!(
            "Object '{}' is not a valid {}: the body must be a JSON object",
            resource.kind, resource.kind
        )));
    }
    let expected = resource.api_version();
    if let Some(api_version) = body["apiVersion"].as_str().filter(|s| !s.is_empty()) {
        if api_version != expected {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({expected})"
            )));
        }
    }
    if let Some(kind) = body["kind"].as_str().filter(|s| !s.is_empty()) {
        if kind != resource.kind {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                resource.kind
            )));
        }
    }
    body["apiVersion"] = json!(expected);
    body["kind"] = json!(resource.kind);
    Ok(())
}

/// Sets or checks `metadata.namespace` against the URL's namespace.
pub(super) fn set_namespace(resource: &ResourceType, body: &mut Value, namespace: Option<&str>) -> Result<()> {
    let meta = meta_mut(body);
    if !resource.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let Some(namespace) = namespace else {
        return Err(ApiError::BadRequest("the namespace of the object is required".into()));
    };
    match meta.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(ns) if ns != namespace => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        )),
        _ => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
    }
}

/// NamespaceLifecycle admission: the namespace must exist and not be terminating.
pub(super) fn check_namespace(store: &Store, resource: &ResourceType, namespace: &str, name: &str) -> Result<()> {
    let Some(namespaces) = store.resource_index("", "v1", "namespaces") else { return Ok(()) };
    match store.get(namespaces, namespace) {
        None => Err(ApiError::NotFound {
            resource: Resource { group: String::new(), plural: "namespaces".into() },
            name: namespace.into(),
        }),
        Some(ns) if ns.field("status.phase").as_deref() == Some("Terminating") => Err(ApiError::Forbidden {
            resource: Resource::of(resource),
            name: name.into(),
            message: format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                Resource::of(resource).qualified()
            ),
        }),
        Some(_) => Ok(()),
    }
}

/// Validation of a new object or an update (`old`).
pub(super) fn validate(resource: &ResourceType, object: &Value, old: Option<&Value>) -> Result<()> {
    let name = meta_str(object, "name").unwrap_or_default();
    let mut causes =
        validation::metadata_causes(validation::name_rule(&resource.group, &resource.plural), object);
    causes.extend(validation::type_causes(&resource.group, &resource.plural, object));
    if let Some(old) = old {
        causes.extend(immutability_causes(resource, old, object));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// The pod fields an update may change (`ValidatePodUpdate`).
pub(super) const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

pub(super) fn immutability_causes(resource: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if is(resource, "", "pods") {
        let mask = |spec: &Value, tolerations: &Value| {
            let mut spec = spec.clone();
            for list in ["containers", "initContainers"] {
                if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                    for c in containers {
                        c["image"] = Value::Null;
                    }
                }
            }
            if let Some(map) = spec.as_object_mut() {
                // Checked by their own subresource (`ephemeral::validate`).
                map.remove("ephemeralContainers");
                map.remove("activeDeadlineSeconds");
                map.remove("terminationGracePeriodSeconds");
                map.insert("tolerations".into(), tolerations.clone());
            }
            spec
        };
        let old_tolerations = old["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
        let new_tolerations = new["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
        let only_added = old_tolerations.iter().all(|t| new_tolerations.contains(t));
        let shown = if only_added { old["spec"]["tolerations"].clone() } else { new["spec"]["tolerations"].clone() };
        if mask(&old["spec"], &old["spec"]["tolerations"]) != mask(&new["spec"], &shown) {
            causes.push(Cause::forbidden("spec", POD_UPDATE_FORBIDDEN));
        }
    }
    if resource.group == "apps" && old["spec"]["selector"] != new["spec"]["selector"] {
        causes.push(Cause::invalid("spec.selector", &new["spec"]["selector"].to_string(), "field is immutable"));
    }
    if is(resource, "apps", "statefulsets") {
        for field in ["serviceName", "volumeClaimTemplates", "podManagementPolicy"] {
            if old["spec"][field] != new["spec"][field] {
                causes.push(Cause::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
                break;
            }
        }
    }
    causes
}

/// QoS class of a pod spec (`qos.GetPodQOS`, simplified to cpu and memory).
pub(super) fn qos_class(spec: &Value) -> &'static str {
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = &c["resources"]["requests"];
        let limits = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            let request = requests[r].as_str().or(limits[r].as_str());
            any |= request.is_some() || limits[r].is_string();
            if limits[r].as_str().is_none() || request != limits[r].as_str() {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

pub(super) fn default_field(object: &mut Value, field: &str, value: Value) {
    if let Some(map) = object.as_object_mut() {
        map.entry(field.to_string()).or_insert(value);
    }
}

/// Container defaults of the v1 API (`SetDefaults_Container`).
pub(super) fn default_containers(spec: &mut Value) {
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                let image = c["image"].as_str().unwrap_or_default();
                let last = image.rsplit('/').next().unwrap_or_default();
                let latest = !last.contains(':') && !image.contains('@') || image.ends_with(":latest");
                default_field(c, "imagePullPolicy", json!(if latest { "Always" } else { "IfNotPresent" }));
                default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
                default_field(c, "terminationMessagePolicy", json!("File"));
                default_field(c, "resources", json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        default_field(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

/// Pod spec defaults (`SetDefaults_PodSpec`) and what admission adds
/// (service account token volume, default tolerations).
pub(super) fn default_pod_spec(store: &mut Store, spec: &mut Value, admission: bool) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_containers(spec);
    if !admission {
        return;
    }
    default_field(spec, "enableServiceLinks", json!(true));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default_field(spec, "priority", json!(0));
    let account = spec["serviceAccountName"].as_str().filter(|s| !s.is_empty()).unwrap_or("default").to_string();
    spec["serviceAccountName"] = json!(account);
    spec["serviceAccount"] = json!(account);
    if spec["tolerations"].as_array().is_none() {
        spec["tolerations"] = json!([]);
    }
    if let Some(tolerations) = spec.get_mut("tolerations").and_then(Value::as_array_mut) {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            if !tolerations.iter().any(|t| t["key"] == key) {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let automount = spec["automountServiceAccountToken"].as_bool().unwrap_or(true);
    let has_token = spec["volumes"].as_array().is_some_and(|v| {
        v.iter().any(|v| v["name"].as_str().is_some_and(|n| n.starts_with("kube-api-access-")))
    });
    if automount && !has_token {
        let volume = format!("kube-api-access-{}", workload::suffix(&mut store.rng, 5));
        if spec["volumes"].as_array().is_none() {
            spec["volumes"] = json!([]);
        }
        if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
            volumes.push(json!({
                "name": volume,
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
        for list in ["initContainers", "containers"] {
            if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in containers {
                    if c["volumeMounts"].as_array().is_none() {
                        c["volumeMounts"] = json!([]);
                    }
                    if let Some(mounts) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                        mounts.push(json!({"name": volume, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}));
                    }
                }
            }
        }
    }
}

/// Allocates a free ClusterIP in 10.96.0.0/16.
pub(super) fn allocate_cluster_ip(store: &mut Store) -> String {
    use rand::Rng;
    let services = store.resource_index("", "v1", "services");
    loop {
        let ip = format!("10.96.{}.{}", store.rng.random_range(1..255), store.rng.random_range(1..255));
        let taken = services.is_some_and(|s| store.range(s, "").any(|(_, o)| o.field("spec.clusterIP").as_deref() == Some(ip.as_str())));
        if !taken {
            return ip;
        }
    }
}

/// The type-specific part of `PrepareForCreate`, defaults and admission.
pub(super) fn prepare_for_create(store: &mut Store, resource: &ResourceType, object: &mut Value) {
    let name = meta_str(object, "name").unwrap_or_default().to_string();
    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "pods") => {
            default_pod_spec(store, &mut object["spec"], true);
            let qos = qos_class(&object["spec"]);
            object["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        ("", "namespaces") => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
            let meta = meta_mut(object);
            if !meta.get("labels").is_some_and(Value::is_object) {
                meta.insert("labels".into(), json!({}));
            }
            meta["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        ("", "services") => {
            let spec = &mut object["spec"];
            default_field(spec, "type", json!("ClusterIP"));
            default_field(spec, "sessionAffinity", json!("None"));
            let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
            if kind != "ExternalName" {
                default_field(spec, "internalTrafficPolicy", json!("Cluster"));
                default_field(spec, "ipFamilies", json!(["IPv4"]));
                default_field(spec, "ipFamilyPolicy", json!("SingleStack"));
            }
            if kind == "NodePort" || kind == "LoadBalancer" {
                default_field(spec, "externalTrafficPolicy", json!("Cluster"));
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut() {
                    default_field(p, "protocol", json!("TCP"));
                    let port = p["port"].clone();
                    default_field(p, "targetPort", port);
                }
            }
            let needs_ip = kind != "ExternalName" && spec["clusterIP"].as_str().is_none_or(str::is_empty);
            if needs_ip {
                let ip = allocate_cluster_ip(store);
                object["spec"]["clusterIP"] = json!(ip);
                object["spec"]["clusterIPs"] = json!([ip]);
            } else if let Some(ip) = object["spec"]["clusterIP"].as_str().map(str::to_string) {
                default_field(&mut object["spec"], "clusterIPs", json!([ip]));
            }
            if kind == "NodePort" || kind == "LoadBalancer" {
                use rand::Rng;
                let mut ports = object["spec"]["ports"].as_array().cloned().unwrap_or_default();
                for p in &mut ports {
                    if p["nodePort"].as_i64().unwrap_or(0) == 0 {
                        p["nodePort"] = json!(store.rng.random_range(30000..32768));
                    }
                }
                object["spec"]["ports"] = json!(ports);
            }
            object["status"] = json!({"loadBalancer": {}});
        }
        ("apps", "deployments") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "strategy", json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "progressDeadlineSeconds", json!(600));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({});
        }
        ("apps", "replicasets") => {
            default_field(&mut object["spec"], "replicas", json!(1));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({"replicas": 0});
        }
        ("apps", "statefulsets") => {
            let spec = &mut object["spec"];
            default_field(spec, "replicas", json!(1));
            default_field(spec, "podManagementPolicy", json!("OrderedReady"));
            default_field(spec, "updateStrategy", json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
            default_field(spec, "revisionHistoryLimit", json!(10));
            default_field(spec, "persistentVolumeClaimRetentionPolicy", json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
            default_pod_spec(store, &mut object["spec"]["template"]["spec"], false);
            object["status"] = json!({"replicas": 0, "availableReplicas": 0});
        }
        _ => {}
    }
}
