//! The simulator's OpenAPI documents, shaped as kube-apiserver serves them
//! (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-interface-definition>):
//! `/openapi/v3` (the index, one `serverRelativeURL` with the document's
//! hash per group-version), `/openapi/v3/api/v1` and
//! `/openapi/v3/apis/{group}/{version}` (OpenAPI 3.0: the paths of the
//! served types and, in `components.schemas`, every type of the
//! group-version and every type they refer to), and `/openapi/v2` (Swagger
//! 2.0, `definitions`).
//!
//! The schemas of the built-in types are generated from the Kubernetes types
//! (k8s-openapi's `schemars` implementations: upstream names such as
//! `io.k8s.api.core.v1.Pod` and upstream descriptions); a custom resource
//! gets its CustomResourceDefinition's `openAPIV3Schema`, read from the
//! store at each request, so a changed CRD shows at once (with a new hash).
//!
//! The same schemas give strict field validation (`fieldValidation=Strict`):
//! a create, update or patch naming a field the schema does not know is
//! refused with kube-apiserver's "strict decoding error".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::{apps::v1 as apps, autoscaling::v1 as autoscaling, core::v1 as core, discovery::v1 as discovery};
use k8s_openapi::api::{authentication::v1 as authentication, authorization::v1 as authorization, autoscaling::v2 as autoscaling_v2};
use k8s_openapi::api::{batch::v1 as batch, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kubefold_engine::openapi::schemas::{self, V3_REF_PREFIX};
use kubefold_engine::openapi::{self as engine_openapi, Info};
use kubefold_engine::resources::ResourceType;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use super::status::ApiError;
use super::Shared;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

/// The schemas of the built-in types, generated once: every schema by name,
/// and the schema name of each kind the simulator knows.
struct Builtin {
    schemas: Map<String, Value>,
    kinds: HashMap<(&'static str, &'static str, &'static str), String>,
}

macro_rules! builtin_kinds {
    ($generator:expr, $( ($group:literal, $version:literal, $kind:literal, $ty:ty) ),* $(,)?) => {{
        let mut kinds = HashMap::new();
        $(
            $generator.subschema_for::<$ty>();
            kinds.insert(($group, $version, $kind), <$ty as JsonSchema>::schema_name().into_owned());
        )*
        kinds
    }};
}

fn builtin() -> &'static Builtin {
    static BUILTIN: OnceLock<Builtin> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let settings = SchemaSettings::openapi3().with(|s| s.meta_schema = None);
        let mut generator = SchemaGenerator::new(settings);
        let kinds = builtin_kinds!(generator,
            ("", "v1", "Pod", core::Pod),
            ("", "v1", "Node", core::Node),
            ("", "v1", "Namespace", core::Namespace),
            ("", "v1", "Service", core::Service),
            ("", "v1", "ConfigMap", core::ConfigMap),
            ("", "v1", "Secret", core::Secret),
            ("", "v1", "Event", core::Event),
            ("", "v1", "Endpoints", core::Endpoints),
            ("", "v1", "ServiceAccount", core::ServiceAccount),
            ("", "v1", "PersistentVolumeClaim", core::PersistentVolumeClaim),
            ("apps", "v1", "Deployment", apps::Deployment),
            ("apps", "v1", "ReplicaSet", apps::ReplicaSet),
            ("apps", "v1", "StatefulSet", apps::StatefulSet),
            ("apps", "v1", "DaemonSet", apps::DaemonSet),
            ("discovery.k8s.io", "v1", "EndpointSlice", discovery::EndpointSlice),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", apiextensions::CustomResourceDefinition),
            ("autoscaling", "v1", "Scale", autoscaling::Scale),
            ("", "v1", "ResourceQuota", core::ResourceQuota),
            ("rbac.authorization.k8s.io", "v1", "Role", rbac::Role),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding", rbac::RoleBinding),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole", rbac::ClusterRole),
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", rbac::ClusterRoleBinding),
            ("batch", "v1", "Job", batch::Job),
            ("batch", "v1", "CronJob", batch::CronJob),
            ("scheduling.k8s.io", "v1", "PriorityClass", scheduling::PriorityClass),
            ("policy", "v1", "PodDisruptionBudget", policy::PodDisruptionBudget),
            ("networking.k8s.io", "v1", "Ingress", networking::Ingress),
            ("autoscaling", "v2", "HorizontalPodAutoscaler", autoscaling_v2::HorizontalPodAutoscaler),
            ("autoscaling", "v1", "HorizontalPodAutoscaler", autoscaling::HorizontalPodAutoscaler),
            ("authorization.k8s.io", "v1", "SelfSubjectAccessReview", authorization::SelfSubjectAccessReview),
            ("authorization.k8s.io", "v1", "SelfSubjectRulesReview", authorization::SelfSubjectRulesReview),
            ("authorization.k8s.io", "v1", "SubjectAccessReview", authorization::SubjectAccessReview),
            ("authorization.k8s.io", "v1", "LocalSubjectAccessReview", authorization::LocalSubjectAccessReview),
            ("authentication.k8s.io", "v1", "SelfSubjectReview", authentication::SelfSubjectReview),
        );
        generator.subschema_for::<meta::Status>();
        generator.subschema_for::<meta::DeleteOptions>();
        generator.subschema_for::<meta::ListMeta>();
        let mut schemas = generator.take_definitions(true);
        for ((group, version, kind), name) in &kinds {
            if let Some(schema) = schemas.get_mut(name) {
                schemas::add_gvk(schema, group, version, kind);
                // k8s-openapi requires `metadata` to deserialize; the API does not.
                if let Some(Value::Array(required)) = schema.get_mut("required") {
                    required.retain(|r| r != "metadata");
                    if required.is_empty() {
                        schema.as_object_mut().map(|s| s.remove("required"));
                    }
                }
            }
            if *kind != "Scale" {
                let list = list_schema(&schemas, name, group, version, kind);
                schemas.insert(format!("{name}List"), list);
            }
        }
        schemas.sort_keys();
        Builtin { schemas, kinds }
    })
}

/// The schema of `{kind}List` (k8s-openapi has one generic list type, with
/// no schema): `items` of `item`, `metadata` a ListMeta.
fn list_schema(schemas: &Map<String, Value>, item: &str, group: &str, version: &str, kind: &str) -> Value {
    let property = |name: &str| schemas.get(item).map(|s| s["properties"][name].clone()).filter(|p| !p.is_null());
    let string = json!({"type": "string"});
    let mut list = json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": property("apiVersion").unwrap_or_else(|| string.clone()),
            "items": {"description": format!("List of {kind} objects."), "type": "array", "items": {"$ref": format!("{V3_REF_PREFIX}{item}")}},
            "kind": property("kind").unwrap_or(string),
            "metadata": {
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "allOf": [{"$ref": format!("{V3_REF_PREFIX}{LIST_META}")}],
            },
        },
    });
    schemas::add_gvk(&mut list, group, version, &format!("{kind}List"));
    list
}

/// The schema name kube-apiserver gives a custom resource: its group
/// reversed, its version and kind (`com.example.v1.Widget`).
fn custom_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The schemas of the custom resources of `catalog` of `group/version`, from
/// their CustomResourceDefinitions in the store: the kind and its list.
fn custom_schemas(shared: &Shared, catalog: &[ResourceType], group: &str, version: &str) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    let custom: Vec<&ResourceType> = catalog
        .iter()
        .filter(|r| r.group == group && r.version == version && !builtin().kinds.contains_key(&(r.group.as_str(), r.version.as_str(), r.kind.as_str())))
        .collect();
    if custom.is_empty() {
        return Ok(out);
    }
    let store = shared.read()?;
    let crds = store.resource_index("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    for r in custom {
        let crd = crds.and_then(|index| {
            store.range(index, "").map(|(_, o)| o.value()).find(|crd| crd["spec"]["group"] == r.group.as_str() && crd["spec"]["names"]["kind"] == r.kind.as_str())
        });
        let declared = crd.as_ref().and_then(|crd| {
            crd["spec"]["versions"].as_array()?.iter().find(|v| v["name"] == r.version.as_str()).map(|v| v["schema"]["openAPIV3Schema"].clone())
        });
        let mut schema = match declared {
            Some(Value::Object(schema)) => Value::Object(schema),
            _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        };
        let builtin = &builtin().schemas;
        let pod = &builtin["io.k8s.api.core.v1.Pod"]["properties"];
        if let Some(properties) = schema.as_object_mut().map(|s| s.entry("properties").or_insert_with(|| json!({}))) {
            if let Some(properties) = properties.as_object_mut() {
                properties.entry("apiVersion").or_insert_with(|| pod["apiVersion"].clone());
                properties.entry("kind").or_insert_with(|| pod["kind"].clone());
                // As kube-apiserver publishes a CRD: metadata is ObjectMeta.
                properties.insert("metadata".into(), json!({
                    "description": pod["metadata"]["description"].clone(),
                    "allOf": [{"$ref": format!("{V3_REF_PREFIX}{OBJECT_META}")}],
                }));
            }
        }
        let name = custom_name(&r.group, &r.version, &r.kind);
        schemas::add_gvk(&mut schema, &r.group, &r.version, &r.kind);
        out.insert(name.clone(), schema);
        let list = list_schema(&out, &name, &r.group, &r.version, &r.kind);
        out.insert(format!("{name}List"), list);
    }
    Ok(out)
}

/// The schema name of `r`'s kind, if the simulator has one.
fn kind_schema(r: &ResourceType) -> String {
    match builtin().kinds.get(&(r.group.as_str(), r.version.as_str(), r.kind.as_str())) {
        Some(name) => name.clone(),
        None => custom_name(&r.group, &r.version, &r.kind),
    }
}

/// The schemas of the `group/version` document: every type served there,
/// its list, what the operations use (Status, DeleteOptions, Scale) and
/// everything those refer to.
fn group_version_schemas(shared: &Shared, catalog: &[ResourceType], group: &str, version: &str) -> Result<Map<String, Value>, ApiError> {
    let custom = custom_schemas(shared, catalog, group, version)?;
    let mut roots = vec![STATUS.to_string(), DELETE_OPTIONS.to_string()];
    for r in catalog.iter().filter(|r| r.group == group && r.version == version) {
        let name = kind_schema(r);
        roots.push(format!("{name}List"));
        roots.push(name);
        if r.subresources.iter().any(|s| s == "scale") {
            roots.push(SCALE.to_string());
        }
    }
    let builtin = &builtin().schemas;
    Ok(schemas::closure_with(|name| custom.get(name).or_else(|| builtin.get(name)), roots))
}

fn info(shared: &Shared) -> Info<'_> {
    Info { title: "Kubernetes", version: &shared.config.git_version }
}

/// A group-version document and the hash its URL carries in `/openapi/v3`.
#[derive(Clone)]
struct Document {
    doc: Arc<Value>,
    hash: Arc<str>,
}

/// Documents of group-versions of built-in types only, by the server's
/// version and the keys of the types served there (what they depend on).
/// kube-apiserver builds its documents and their hashes once per change of
/// what it serves, not per request; so does the simulator (a thousand
/// members each asked for `/openapi/v3` made and hashed every document a
/// thousand times).
type Cache = Mutex<HashMap<(String, Vec<String>), Document>>;

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`; `None`
/// when nothing is served there.
pub fn v3(shared: &Shared, group: &str, version: &str) -> Result<Option<Arc<Value>>, ApiError> {
    Ok(document(shared, group, version)?.map(|d| d.doc))
}

/// The document of `group/version` with its hash, from the cache when it
/// holds only built-in types.
fn document(shared: &Shared, group: &str, version: &str) -> Result<Option<Document>, ApiError> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let catalog = &shared.catalog();
    let all_builtin = catalog
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .all(|r| builtin().kinds.contains_key(&(r.group.as_str(), r.version.as_str(), r.kind.as_str())));
    let served: Vec<String> = catalog.iter().filter(|r| r.group == group && r.version == version).map(|r| format!("{}/{:?}", r.key(), r.subresources)).collect();
    let key = (shared.config.git_version.clone(), served);
    if all_builtin {
        // Only documents with paths are kept: a hit is served.
        if let Some(found) = CACHE.get_or_init(Default::default).lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(Some(found));
        }
    }
    let paths = engine_openapi::paths(catalog, group, version);
    if paths.is_empty() {
        return Ok(None);
    }
    let doc = Arc::new(engine_openapi::document(info(shared), paths, group_version_schemas(shared, catalog, group, version)?));
    let found = Document { hash: schemas::hash(&doc).into(), doc };
    if all_builtin {
        if let Ok(mut cache) = CACHE.get_or_init(Default::default).lock() {
            cache.insert(key, found.clone());
        }
    }
    Ok(Some(found))
}

/// `/openapi/v3`: each group-version document with the hash of its content.
pub fn v3_index(shared: &Shared) -> Result<Value, ApiError> {
    let mut entries = Vec::new();
    for (group, version) in kubefold_engine::resources::served_group_versions(&shared.catalog()) {
        if let Some(found) = document(shared, &group, &version)? {
            entries.push((schemas::group_version_key(&group, &version), found.hash));
        }
    }
    Ok(schemas::index(entries.iter().map(|(k, h)| (k.as_str(), &**h))))
}

/// `/openapi/v2`: every path and every schema of the v3 documents, as
/// Swagger 2.0 `definitions`.
pub fn v2(shared: &Shared) -> Result<Value, ApiError> {
    let mut definitions = Map::new();
    for (group, version) in kubefold_engine::resources::served_group_versions(&shared.catalog()) {
        if let Some(doc) = v3(shared, &group, &version)? {
            if let Some(found) = doc["components"]["schemas"].as_object() {
                for (name, schema) in found {
                    definitions.entry(name.clone()).or_insert_with(|| schemas::to_v2(schema));
                }
            }
        }
    }
    definitions.sort_keys();
    Ok(engine_openapi::swagger(info(shared), engine_openapi::all_paths(&shared.catalog()), definitions))
}

/// Strict field validation: with `fieldValidation=Strict`, refuses `object`
/// (a create or update body, or a patch) when it names a field the schema
/// of `r` does not know, as kube-apiserver does (400, "strict decoding
/// error: unknown field \"spec.foo\""). Patch directives (`$patch`,
/// `$setElementOrder/...`) are not fields.
pub fn check_fields(shared: &Shared, r: &ResourceType, query: &[(String, String)], object: &Value) -> Result<(), ApiError> {
    if !query.iter().any(|(k, v)| k == "fieldValidation" && v == "Strict") {
        return Ok(());
    }
    let Some(doc) = v3(shared, &r.group, &r.version)? else { return Ok(()) };
    let found = &doc["components"]["schemas"];
    let Some(schema) = found.get(kind_schema(r)) else { return Ok(()) };
    let mut unknown = Vec::new();
    unknown_fields(found, schema, object, "", &mut unknown, 0);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    Err(ApiError::BadRequest(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = r.kind,
        version = r.version,
    )))
}

/// The schema `schema` stands for: its reference or its single `allOf`
/// followed.
fn resolve<'a>(all: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..16 {
        if let Some(name) = schema["$ref"].as_str().and_then(|r| r.strip_prefix(V3_REF_PREFIX)) {
            schema = &all[name];
        } else if let Some([only]) = schema["allOf"].as_array().map(Vec::as_slice) {
            schema = only;
        } else {
            break;
        }
    }
    schema
}

fn unknown_fields(all: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>, depth: usize) {
    let schema = resolve(all, schema);
    if depth > 64 || schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let join = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, v) in fields {
                    match properties.get(key) {
                        Some(p) => unknown_fields(all, p, v, &join(key), out, depth + 1),
                        None if key.starts_with('$') => {}
                        None => out.push(join(key)),
                    }
                }
            } else if let Some(values @ Value::Object(_)) = schema.get("additionalProperties") {
                for (key, v) in fields {
                    unknown_fields(all, values, v, &join(key), out, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    unknown_fields(all, item, v, &format!("{path}[{i}]"), out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_schemas_carry_upstream_names_descriptions_and_kinds() {
        let b = builtin();
        let pod = &b.schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(schemas::gvks(pod), vec![("".into(), "v1".into(), "Pod".into())]);
        assert!(pod["description"].as_str().unwrap().starts_with("Pod is a collection of containers"));
        assert_eq!(pod["properties"]["spec"]["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1.PodSpec");
        let list = &b.schemas["io.k8s.api.apps.v1.DeploymentList"];
        assert_eq!(schemas::gvks(list), vec![("apps".into(), "v1".into(), "DeploymentList".into())]);
        assert!(b.schemas.contains_key(OBJECT_META));
    }

    #[test]
    fn unknown_fields_are_found_with_their_paths() {
        let b = builtin();
        let all = Value::Object(b.schemas.clone());
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "y"}, "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePort": 80}], "$setElementOrder/containers": []},
        });
        let mut out = Vec::new();
        unknown_fields(&all, &all["io.k8s.api.core.v1.Pod"], &pod, "", &mut out, 0);
        assert_eq!(out, vec!["metadata.bogus", "spec.containers[0].imagePort"]);
    }

    /// Every object the simulator starts with passes strict validation, so
    /// `kubectl replace` or `apply` of what a client read is never refused.
    #[test]
    fn the_workloads_know_only_schema_fields() {
        let b = builtin();
        let all = Value::Object(b.schemas.clone());
        let cluster = crate::workload::Cluster { name: "member1".into(), seed: 1, now: chrono::Utc::now(), kubernetes_version: "v1.33.1".into() };
        let mut objects = crate::workload::demo(&cluster);
        objects.extend(crate::workload::load_namespaces(&cluster));
        objects.extend(crate::workload::widgets(&cluster));
        let mut checked = 0;
        for object in &objects {
            let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
                Some((g, v)) => (g, v),
                None => ("", object["apiVersion"].as_str().unwrap()),
            };
            let Some(name) = b.kinds.get(&(group, version, object["kind"].as_str().unwrap())) else { continue };
            let mut out = Vec::new();
            unknown_fields(&all, &all[name.as_str()], object, "", &mut out, 0);
            assert!(out.is_empty(), "{} {}: unknown fields {out:?}", object["kind"], object["metadata"]["name"]);
            checked += 1;
        }
        assert!(checked > 20, "{checked} objects checked");
    }
}
