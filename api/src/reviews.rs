//! Access and identity reviews, answered by kubefold's own authorizer
//! ([`crate::auth::Auth::allows`], the call that decides every request):
//!
//! - `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`
//!   (`kubectl auth can-i VERB RESOURCE`): may the caller do it;
//! - `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`
//!   (`kubectl auth can-i --list`): what the caller may do, found by asking
//!   the authorizer about every served type and verb;
//! - `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`
//!   (`kubectl auth whoami`): who the caller is;
//! - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: may another
//!   user do it (kubefold's admins only, as the authorizer rules).
//!
//! Under `/clusters/{c}` a question is about that member: rules limited to
//! some clusters answer for it. Bodies are JSON, YAML or protobuf (kubectl
//! 1.32 and later send protobuf), decoded with the Kubernetes API's own
//! protobuf types (`k8s-pb`); answers are JSON.

use actix_web::http::Method;
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use kubefold_engine::names::{self, RequestedName};
use kubefold_engine::resources::ResourceType;
use kubefold_engine::status::Status;
use prost::Message as _;
use serde_json::{json, Value};

use crate::auth::{self, Auth, RequestAttributes, ResourceAttributes, Target, User};
use crate::path::ResourcePath;
use crate::respond;
use crate::ApiState;

/// `authorization.k8s.io`.
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
/// `authentication.k8s.io`.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
/// The magic prefix of Kubernetes protobuf bodies.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";
/// The Kubernetes verbs of resource requests, asked about one by one for a
/// rules review.
const VERBS: [&str; 8] = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
/// Built-in Kubernetes types that are not aggregated but are reached under
/// `/clusters/{c}` (passed through to the member), asked about for a rules
/// review beside the served ones: (group, plural).
const PASSED_THROUGH_TYPES: [(&str, &str); 12] = [
    ("", "secrets"),
    ("", "serviceaccounts"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("", "resourcequotas"),
    ("", "limitranges"),
    ("", "endpoints"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("networking.k8s.io", "ingresses"),
    ("rbac.authorization.k8s.io", "roles"),
];
/// Paths other than resources asked about for a rules review.
const NON_RESOURCE_PATHS: [&str; 8] =
    ["/version", "/api", "/apis", "/openapi/v2", "/openapi/v3", "/metrics", "/admin/v1/clusters", "/admin/v1/resources"];

/// The review types, as discovery lists them (verb `create` only):
/// `authorization.k8s.io/v1` and `authentication.k8s.io/v1`, and
/// SelfSubjectReview also in `v1beta1` and `v1alpha1`.
pub fn review_types() -> Vec<ResourceType> {
    let review = |group: &str, version: &str, plural: &str, kind: &str| ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        plural: plural.to_string(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.to_string(),
        namespaced: false,
        short_names: Vec::new(),
        categories: Vec::new(),
        subresources: Vec::new(),
        verbs: vec!["create".to_string()],
        printer_columns: Vec::new(),
    };
    vec![
        review(AUTHENTICATION_GROUP, "v1", "selfsubjectreviews", "SelfSubjectReview"),
        // kubectl 1.27 asks `auth whoami` in these versions only.
        review(AUTHENTICATION_GROUP, "v1beta1", "selfsubjectreviews", "SelfSubjectReview"),
        review(AUTHENTICATION_GROUP, "v1alpha1", "selfsubjectreviews", "SelfSubjectReview"),
        review(AUTHORIZATION_GROUP, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        review(AUTHORIZATION_GROUP, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        review(AUTHORIZATION_GROUP, "v1", "subjectaccessreviews", "SubjectAccessReview"),
    ]
}

/// Whether `path` names one of the review types.
pub fn is_review(path: &ResourcePath) -> bool {
    path.namespace.is_none() && review_types().iter().any(|r| r.group == path.group && r.version == path.version && r.plural == path.resource)
}

/// Answers a review request (`is_review(path)` holds).
pub async fn serve(req: &HttpRequest, state: &ApiState, path: &ResourcePath, body: &[u8]) -> Result<HttpResponse, Status> {
    if req.method() != Method::POST || path.name.is_some() {
        return Err(Status::method_not_allowed(format!(
            "{} is not supported on {}: reviews are created (POST) and not stored",
            req.method(),
            path.resource
        )));
    }
    let auth = req
        .app_data::<actix_web::web::Data<Auth>>()
        .ok_or_else(|| Status::internal("the authorizer is not available to answer reviews"))?;
    let user = req.extensions().get::<User>().cloned().unwrap_or_else(User::anonymous);
    let kind = review_types().into_iter().find(|r| r.group == path.group && r.plural == path.resource).map(|r| r.kind).unwrap_or_default();
    let review = decode(req, body, &path.group, &kind)?;
    let cluster = path.cluster.as_deref();
    let answer = match path.resource.as_str() {
        "selfsubjectreviews" => self_subject_review(&user, &path.version),
        "selfsubjectaccessreviews" => access_review(auth, &user, &review, cluster, &kind).await?,
        "subjectaccessreviews" => {
            let subject = subject_of(&review)?;
            access_review(auth, &subject, &review, cluster, &kind).await?
        }
        _ => rules_review(auth, state, &user, &review, cluster),
    };
    Ok(HttpResponse::Created().content_type(respond::JSON).body(answer.to_string()))
}

/// The review as JSON: a JSON or YAML body as it is, a protobuf one
/// decoded into its Kubernetes type and rewritten as JSON.
fn decode(req: &HttpRequest, body: &[u8], group: &str, kind: &str) -> Result<Value, Status> {
    let content_type = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or("").trim();
    let invalid = |e: String| Status::bad_request(format!("cannot decode the {kind}: {e}"));
    let value: Value = match media {
        "application/vnd.kubernetes.protobuf" => protobuf_to_json(body, group, kind).map_err(invalid)?,
        "application/yaml" => serde_saphyr::from_slice(body).map_err(|e| invalid(e.to_string()))?,
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?,
        other => {
            return Err(Status::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format ({other}) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"),
            ))
        }
    };
    if !value.is_object() {
        return Err(invalid("the body is not an object".to_string()));
    }
    if let Some(k) = value.get("kind").and_then(Value::as_str).filter(|k| *k != kind) {
        return Err(Status::bad_request(format!("the body is a {k}, not a {kind}")));
    }
    Ok(value)
}

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown` holding the
/// object) into the JSON fields the reviews read.
fn protobuf_to_json(body: &[u8], group: &str, kind: &str) -> Result<Value, String> {
    use k8s_pb::api::authentication::v1 as authn;
    use k8s_pb::api::authorization::v1 as authz;
    let envelope = body.strip_prefix(PROTOBUF_MAGIC).ok_or("a protobuf body starts with the bytes k8s\\0")?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope).map_err(|e| e.to_string())?;
    if let Some(encoding) = unknown.content_encoding.as_deref().filter(|e| !e.is_empty()) {
        return Err(format!("content encoding {encoding:?} is not supported"));
    }
    let raw = unknown.raw.unwrap_or_default();
    let resource = |a: &authz::ResourceAttributes| {
        json!({
            "namespace": a.namespace, "verb": a.verb, "group": a.group, "version": a.version,
            "resource": a.resource, "subresource": a.subresource, "name": a.name,
        })
    };
    let non_resource = |a: &authz::NonResourceAttributes| json!({"path": a.path, "verb": a.verb});
    let spec = match (group, kind) {
        (AUTHENTICATION_GROUP, "SelfSubjectReview") => {
            authn::SelfSubjectReview::decode(raw.as_slice()).map_err(|e| e.to_string())?;
            json!({})
        }
        (AUTHORIZATION_GROUP, "SelfSubjectAccessReview") => {
            let review = authz::SelfSubjectAccessReview::decode(raw.as_slice()).map_err(|e| e.to_string())?;
            let spec = review.spec.unwrap_or_default();
            json!({
                "resourceAttributes": spec.resource_attributes.as_ref().map(resource),
                "nonResourceAttributes": spec.non_resource_attributes.as_ref().map(non_resource),
            })
        }
        (AUTHORIZATION_GROUP, "SubjectAccessReview") => {
            let review = authz::SubjectAccessReview::decode(raw.as_slice()).map_err(|e| e.to_string())?;
            let spec = review.spec.unwrap_or_default();
            json!({
                "resourceAttributes": spec.resource_attributes.as_ref().map(resource),
                "nonResourceAttributes": spec.non_resource_attributes.as_ref().map(non_resource),
                "user": spec.user, "groups": spec.groups, "uid": spec.uid,
            })
        }
        (AUTHORIZATION_GROUP, "SelfSubjectRulesReview") => {
            let review = authz::SelfSubjectRulesReview::decode(raw.as_slice()).map_err(|e| e.to_string())?;
            json!({"namespace": review.spec.unwrap_or_default().namespace})
        }
        _ => return Err(format!("{kind} is not a review kubefold answers")),
    };
    let mut value = json!({"kind": kind, "spec": spec});
    drop_nulls(&mut value);
    Ok(value)
}

/// Removes the fields a protobuf message left unset (JSON `null`), as
/// Kubernetes' JSON omits them.
fn drop_nulls(value: &mut Value) {
    if let Value::Object(fields) = value {
        fields.retain(|_, v| !v.is_null());
        fields.values_mut().for_each(drop_nulls);
    }
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}

/// The user a SubjectAccessReview asks about.
fn subject_of(review: &Value) -> Result<User, Status> {
    let spec = &review["spec"];
    let name = text(spec, "user");
    let groups: Vec<String> = spec["groups"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
    if name.is_empty() && groups.is_empty() {
        return Err(Status::new(422, "Invalid", "SubjectAccessReview.authorization.k8s.io is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"));
    }
    Ok(User { name: name.to_string(), uid: text(spec, "uid").to_string(), groups })
}

/// The request attributes an access review asks about; the cluster is the
/// review's `/clusters/{c}` scope, else the suffix of a qualified name.
fn attributes_of(review: &Value, cluster: Option<&str>, kind: &str) -> Result<RequestAttributes, Status> {
    let spec = &review["spec"];
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    match (resource, non_resource) {
        (Some(r), None) => {
            let name = Some(text(r, "name")).filter(|n| !n.is_empty()).map(str::to_string);
            let cluster = cluster.map(str::to_string).or_else(|| match name.as_deref().map(names::parse) {
                Some(RequestedName::Qualified { cluster, .. }) => Some(cluster.to_string()),
                _ => None,
            });
            let resource = text(r, "resource").to_string();
            let mut namespace = Some(text(r, "namespace")).filter(|n| !n.is_empty()).map(str::to_string);
            if resource == "namespaces" && namespace.is_none() {
                namespace = name.clone();
            }
            Ok(RequestAttributes {
                verb: text(r, "verb").to_string(),
                target: Target::Resource(ResourceAttributes {
                    group: text(r, "group").to_string(),
                    version: text(r, "version").to_string(),
                    resource,
                    subresource: Some(text(r, "subresource")).filter(|s| !s.is_empty()).map(str::to_string),
                    namespace,
                    name,
                    cluster,
                }),
            })
        }
        (None, Some(n)) => {
            let path = text(n, "path").to_string();
            // Classified as the authorizer classifies a request to that path.
            let target = match auth::attributes(&Method::GET, &path, "").target {
                Target::Resource(_) => Target::NonResource { path },
                other => other,
            };
            Ok(RequestAttributes { verb: text(n, "verb").to_string(), target })
        }
        _ => Err(Status::new(
            422,
            "Invalid",
            format!("{kind}.authorization.k8s.io is invalid: spec: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
        )),
    }
}

/// A SelfSubjectAccessReview or SubjectAccessReview about `user`.
/// Answered as a request is authorized: kubefold's own rules, then, for
/// what they refuse, the control plane's access review when authorization
/// is delegated (`--authorization-kubeconfig`), so that `kubectl auth
/// can-i` says what a request would meet.
async fn access_review(auth: &Auth, user: &User, review: &Value, cluster: Option<&str>, kind: &str) -> Result<Value, Status> {
    let attributes = attributes_of(review, cluster, kind)?;
    let mut allowed = auth.allows(user, &attributes);
    let mut evaluation_error = None;
    let reason = if auth.is_open() {
        "no authenticator is configured: kubefold allows every request".to_string()
    } else if allowed {
        format!("kubefold allows user {:?} in groups {:?}", user.name, user.groups)
    } else {
        match auth.delegated_allows(user, &attributes).await {
            Some(Ok(true)) => {
                allowed = true;
                "allowed by the control plane's SubjectAccessReview".to_string()
            }
            Some(Ok(false)) | None => String::new(),
            Some(Err(error)) => {
                evaluation_error = Some(format!("the control plane's SubjectAccessReview failed: {error}"));
                String::new()
            }
        }
    };
    let mut status = json!({"allowed": allowed});
    if !reason.is_empty() {
        status["reason"] = Value::String(reason);
    }
    if let Some(error) = evaluation_error {
        status["evaluationError"] = Value::String(error);
    }
    let mut answer = review.clone();
    answer["apiVersion"] = json!(format!("{AUTHORIZATION_GROUP}/v1"));
    answer["kind"] = json!(kind);
    answer["metadata"] = json!({"creationTimestamp": null});
    answer["status"] = status;
    Ok(answer)
}

/// A SelfSubjectReview: the caller as kubefold authenticated it.
fn self_subject_review(user: &User, version: &str) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    json!({
        "apiVersion": format!("{AUTHENTICATION_GROUP}/{version}"),
        "kind": "SelfSubjectReview",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": info},
    })
}

/// A SelfSubjectRulesReview: every served type (and the common built-in
/// ones passed through under `/clusters/{c}`, and the reviews) and verb
/// the authorizer allows the caller, grouped by API group and verbs, and
/// the other paths it may use.
fn rules_review(auth: &Auth, state: &ApiState, user: &User, review: &Value, cluster: Option<&str>) -> Value {
    let namespace = Some(text(&review["spec"], "namespace")).filter(|n| !n.is_empty()).map(str::to_string);
    let resource_attributes = |verb: &str, group: &str, resource: &str, subresource: Option<&str>| RequestAttributes {
        verb: verb.to_string(),
        target: Target::Resource(ResourceAttributes {
            group: group.to_string(),
            version: String::new(),
            resource: resource.to_string(),
            subresource: subresource.map(str::to_string),
            namespace: namespace.clone(),
            name: None,
            cluster: cluster.map(str::to_string),
        }),
    };
    let everything = auth.allows(user, &resource_attributes("*", "*", "*", None))
        && auth.allows(user, &RequestAttributes { verb: "*".to_string(), target: Target::NonResource { path: "*".to_string() } });
    let (resource_rules, non_resource_rules, incomplete) = if everything {
        (
            vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
            vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
            false,
        )
    } else {
        let mut candidates: Vec<(String, String)> = Vec::new();
        let mut add = |group: &str, resource: String| {
            if !candidates.iter().any(|(g, r)| g == group && *r == resource) {
                candidates.push((group.to_string(), resource));
            }
        };
        for r in state.fleet.catalog().iter() {
            add(&r.group, r.plural.clone());
            for sub in &r.subresources {
                add(&r.group, format!("{}/{sub}", r.plural));
            }
        }
        for (group, plural) in PASSED_THROUGH_TYPES {
            add(group, plural.to_string());
        }
        for r in review_types() {
            add(&r.group, r.plural.clone());
        }
        // (group, verbs) -> resources
        let mut grouped: Vec<((String, Vec<&str>), Vec<String>)> = Vec::new();
        for (group, resource) in candidates {
            let (plural, subresource) = match resource.split_once('/') {
                Some((p, s)) => (p, Some(s)),
                None => (resource.as_str(), None),
            };
            let verbs: Vec<&str> = VERBS.into_iter().filter(|v| auth.allows(user, &resource_attributes(v, &group, plural, subresource))).collect();
            if verbs.is_empty() {
                continue;
            }
            match grouped.iter_mut().find(|((g, vs), _)| *g == group && *vs == verbs) {
                Some((_, resources)) => resources.push(resource),
                None => grouped.push(((group, verbs), vec![resource])),
            }
        }
        let resource_rules = grouped
            .into_iter()
            .map(|((group, verbs), resources)| json!({"verbs": verbs, "apiGroups": [group], "resources": resources}))
            .collect();
        let mut non_resource: Vec<(Vec<&str>, Vec<&str>)> = Vec::new();
        for path in NON_RESOURCE_PATHS {
            let target = auth::attributes(&Method::GET, path, "").target;
            let verbs: Vec<&str> = ["get", "post", "put", "patch", "delete"]
                .into_iter()
                .filter(|v| auth.allows(user, &RequestAttributes { verb: v.to_string(), target: target.clone() }))
                .collect();
            if verbs.is_empty() {
                continue;
            }
            match non_resource.iter_mut().find(|(vs, _)| *vs == verbs) {
                Some((_, paths)) => paths.push(path),
                None => non_resource.push((verbs, vec![path])),
            }
        }
        let non_resource_rules = non_resource.into_iter().map(|(verbs, paths)| json!({"verbs": verbs, "nonResourceURLs": paths})).collect();
        // Types a member serves beyond these, and rules limited to clusters
        // when the question names none, may allow more.
        (resource_rules, non_resource_rules, true)
    };
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": incomplete});
    if incomplete {
        let mut why = "kubefold lists the types it serves, common built-in types and the reviews; a member may serve more types, reachable under /clusters/<cluster>".to_string();
        if cluster.is_none() && auth.has_cluster_limited_rules(user) {
            why.push_str("; some rules of this user are limited to member clusters: ask under /clusters/<cluster> for what they allow there");
        }
        if auth.delegates_authorization() {
            why.push_str("; authorization is also delegated to a control plane, which may allow more: ask with a SelfSubjectAccessReview (kubectl auth can-i VERB RESOURCE)");
        }
        status["evaluationError"] = json!(why);
    }
    json!({
        "apiVersion": format!("{AUTHORIZATION_GROUP}/v1"),
        "kind": "SelfSubjectRulesReview",
        "metadata": {"creationTimestamp": null},
        "spec": review.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_access_reviews_decode_to_their_attributes() {
        use k8s_pb::api::authorization::v1 as authz;
        let review = authz::SelfSubjectAccessReview {
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    namespace: Some("x".into()),
                    verb: Some("create".into()),
                    group: Some("apps".into()),
                    resource: Some("deployments".into()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            ..Default::default()
        };
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("authorization.k8s.io/v1".into()),
                kind: Some("SelfSubjectAccessReview".into()),
            }),
            raw: Some(review.encode_to_vec()),
            content_encoding: None,
            content_type: None,
        };
        let mut body = PROTOBUF_MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        let value = protobuf_to_json(&body, AUTHORIZATION_GROUP, "SelfSubjectAccessReview").unwrap();
        assert_eq!(
            value["spec"],
            json!({"resourceAttributes": {"namespace": "x", "verb": "create", "group": "apps", "resource": "deployments"}}),
            "unset fields are left out"
        );
        let attributes = attributes_of(&value, None, "SelfSubjectAccessReview").unwrap();
        assert_eq!(attributes.verb, "create");
        let Target::Resource(r) = attributes.target else { panic!("{attributes:?}") };
        assert_eq!((r.group.as_str(), r.resource.as_str(), r.namespace.as_deref()), ("apps", "deployments", Some("x")));
        assert!(protobuf_to_json(b"not protobuf", AUTHORIZATION_GROUP, "SelfSubjectAccessReview").is_err());
    }

    #[test]
    fn authenticated_users_ask_about_themselves_and_admins_about_others() {
        let review = |group: &str, resource: &str| auth::attributes(&Method::POST, &format!("/apis/{group}/v1/{resource}"), "");
        let user = |groups: &[&str]| User {
            name: "u".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).chain([auth::AUTHENTICATED_GROUP.to_string()]).collect(),
        };
        let (viewer, editor, admin, nobody) = (user(&[auth::VIEWERS]), user(&[auth::EDITORS]), user(&[auth::ADMINS]), user(&[]));
        for (group, resource) in [(AUTHORIZATION_GROUP, "selfsubjectaccessreviews"), (AUTHORIZATION_GROUP, "selfsubjectrulesreviews"), (AUTHENTICATION_GROUP, "selfsubjectreviews")] {
            for u in [&viewer, &editor, &admin, &nobody] {
                assert!(auth::authorize(u, &review(group, resource), &[]), "{resource} for {:?}", u.groups);
            }
            assert!(!auth::authorize(&User::anonymous(), &review(group, resource), &[]), "{resource} for anonymous");
        }
        let others = review(AUTHORIZATION_GROUP, "subjectaccessreviews");
        assert!(auth::authorize(&admin, &others, &[]));
        for u in [&viewer, &editor, &nobody] {
            assert!(!auth::authorize(u, &others, &[]), "subjectaccessreviews for {:?}", u.groups);
        }
        let get = auth::attributes(&Method::GET, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "");
        assert!(!auth::authorize(&viewer, &get, &[]), "reviews are created, not read");
    }

    #[test]
    fn the_cluster_of_a_question_is_its_scope_or_its_qualified_name() {
        let review = json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default", "name": "web-0_member2"}}});
        let cluster = |scope| match attributes_of(&review, scope, "SelfSubjectAccessReview").unwrap().target {
            Target::Resource(r) => r.cluster,
            other => panic!("{other:?}"),
        };
        assert_eq!(cluster(None).as_deref(), Some("member2"));
        assert_eq!(cluster(Some("member1")).as_deref(), Some("member1"));
        let neither = json!({"spec": {}});
        assert_eq!(attributes_of(&neither, None, "SelfSubjectAccessReview").unwrap_err().code, 422);
        let metrics = json!({"spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
        assert_eq!(attributes_of(&metrics, None, "x").unwrap().target, Target::NonResource { path: "/metrics".into() });
    }
}
