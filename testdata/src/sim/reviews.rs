//! The create-only APIs kubectl calls besides stored objects, answered as a
//! kube-apiserver with anonymous requests allowed and every request
//! authorized answers them:
//!
//! - `SelfSubjectAccessReview`, `SelfSubjectRulesReview` and
//!   `SubjectAccessReview` (authorization.k8s.io/v1; `kubectl auth can-i`,
//!   `--list`): everything is allowed
//!   (<https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access>);
//! - `TokenReview` (authentication.k8s.io/v1): no token is known;
//! - `SelfSubjectReview` (authentication.k8s.io/v1, and v1beta1 where kubectl
//!   1.27 asks; `kubectl auth whoami`): the caller is `system:anonymous`
//!   (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/#self-subject-review>);
//! - `serviceaccounts/token` (a `TokenRequest`; `kubectl create token`): a
//!   token shaped as the service account token issuer writes it, a JWT with
//!   the documented claims, whose signature nothing checks here
//!   (<https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-request-v1/>);
//! - `pods/eviction` (an `Eviction`; `kubectl drain`): the pod is deleted as a
//!   DELETE with the eviction's options deletes it. PodDisruptionBudgets are
//!   not consulted (the simulator runs no disruption controller)
//!   (<https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/>).
//!
//! With an access policy (`--authz-file`) the reviews are answered from it
//! instead ([`decide`]).

use base64::Engine as _;
use chrono::{DateTime, Utc};
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Value};

use super::access::{Identity, Policy, UserInfo};
use super::ops::{self, DeleteOptions, WriteOptions};
use super::status::{ApiError, Result};
use super::store::Store;

const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";

/// The review types: create-only, nothing stored.
pub fn types() -> Vec<ResourceType> {
    let review = |group: &str, version: &str, plural: &str, kind: &str, namespaced: bool| ResourceType {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: Vec::new(),
        categories: Vec::new(),
        subresources: Vec::new(),
        verbs: vec!["create".into()],
        printer_columns: Vec::new(),
    };
    vec![
        review(AUTHORIZATION, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
        review(AUTHORIZATION, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
        review(AUTHORIZATION, "v1", "subjectaccessreviews", "SubjectAccessReview", false),
        review(AUTHORIZATION, "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", true),
        review(AUTHENTICATION, "v1", "selfsubjectreviews", "SelfSubjectReview", false),
        review(AUTHENTICATION, "v1beta1", "selfsubjectreviews", "SelfSubjectReview", false),
        review(AUTHENTICATION, "v1", "tokenreviews", "TokenReview", false),
    ]
}

/// Whether `resource` is one of [`types`].
pub fn is_review(resource: &ResourceType) -> bool {
    (resource.group == AUTHORIZATION || resource.group == AUTHENTICATION) && resource.verbs == ["create"]
}

/// The answered review: the request's object with its `status` (201).
pub fn answer(resource: &ResourceType, mut review: Value) -> Result<Value> {
    if !review.is_object() {
        return Err(ApiError::BadRequest(format!("the body of a {} must be an object", resource.kind)));
    }
    review["apiVersion"] = json!(resource.api_version());
    review["kind"] = json!(resource.kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = match resource.kind.as_str() {
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        "SelfSubjectReview" => json!({
            "userInfo": {"username": "system:anonymous", "groups": ["system:unauthenticated"]},
        }),
        // Without a policy no token is known.
        "TokenReview" => json!({"authenticated": false, "error": "the simulator authenticates no tokens without --authz-file"}),
        _ => {
            if review["spec"]["resourceAttributes"].is_null() && review["spec"]["nonResourceAttributes"].is_null() {
                return Err(ApiError::BadRequest(format!(
                    "{} \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    resource.kind
                )));
            }
            json!({"allowed": true, "reason": "every request is authorized"})
        }
    };
    Ok(review)
}

/// With an access policy (`--authz-file`), the review's `status` as the
/// policy decides it: who a token is (`TokenReview`), whether a user may
/// do something (`SubjectAccessReview`, `LocalSubjectAccessReview`; the
/// caller for `SelfSubjectAccessReview`), who the caller is
/// (`SelfSubjectReview`) and what the caller may do in a namespace
/// (`SelfSubjectRulesReview`).
pub fn decide(policy: &Policy, caller: Option<&Identity>, resource: &ResourceType, review: &mut Value) {
    let caller = caller.map(Identity::effective).cloned().unwrap_or_else(UserInfo::anonymous);
    review["status"] = match resource.kind.as_str() {
        "TokenReview" => policy.token_review(review),
        "SubjectAccessReview" | "LocalSubjectAccessReview" => policy.access_review(review, None),
        "SelfSubjectAccessReview" => policy.access_review(review, Some(&caller)),
        "SelfSubjectReview" => json!({"userInfo": caller.to_json()}),
        "SelfSubjectRulesReview" => {
            let namespace = review["spec"]["namespace"].as_str().unwrap_or_default();
            let rules: Vec<Value> = policy
                .rules
                .iter()
                .filter(|r| r.applies_to(&caller) && r.namespaces.as_ref().is_none_or(|n| n.iter().any(|n| n == "*" || n == namespace)))
                .map(|r| {
                    let mut rule = json!({"verbs": r.verbs, "apiGroups": r.api_groups.clone().unwrap_or_else(|| vec!["*".into()]), "resources": r.resources});
                    if !r.resource_names.is_empty() {
                        rule["resourceNames"] = json!(r.resource_names);
                    }
                    rule
                })
                .collect();
            json!({
                "resourceRules": rules,
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version", "/openapi", "/openapi/*", "/healthz", "/livez", "/readyz"]}],
                "incomplete": false,
            })
        }
        _ => return,
    };
}

/// `POST .../serviceaccounts/{name}/token`: a `TokenRequest` with its token.
pub fn token(store: &Store, resource: usize, namespace: &str, name: &str, request: &Value, now: DateTime<Utc>) -> Result<Value> {
    let account = ops::get(store, resource, Some(namespace), name)?.value();
    let seconds = request["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError::BadRequest("spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes".into()));
    }
    let audiences = match request["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!(["https://kubernetes.default.svc.cluster.local"]),
    };
    let expires = now + chrono::Duration::seconds(seconds);
    let uid = account["metadata"]["uid"].clone();
    let claims = json!({
        "aud": audiences, "exp": expires.timestamp(), "iat": now.timestamp(), "nbf": now.timestamp(),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    });
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = b64(json!({"alg": "RS256", "kid": "simulator"}).to_string().as_bytes());
    let payload = b64(claims.to_string().as_bytes());
    // Not a signature: the simulator has no signing key and checks no tokens.
    let digest = format!("{header}.{payload}").bytes().fold([0u8; 32], |mut acc, b| {
        acc.rotate_left(1);
        acc[0] ^= b;
        acc
    });
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": request["spec"]["boundObjectRef"]},
        "status": {"token": format!("{header}.{payload}.{}", b64(&digest)),
                   "expirationTimestamp": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string()},
    }))
}

/// `POST .../pods/{name}/eviction`: deletes the pod with the eviction's
/// `deleteOptions`; a `Status` of success (201).
pub fn evict(store: &mut Store, resource: usize, namespace: &str, name: &str, eviction: &Value, opts: &WriteOptions) -> Result<Value> {
    if let Some(n) = eviction["metadata"]["name"].as_str().filter(|n| !n.is_empty() && *n != name) {
        return Err(ApiError::BadRequest(format!("name in URL does not match name in Eviction object: {n}")));
    }
    let options_body = match &eviction["deleteOptions"] {
        Value::Object(_) => serde_json::to_vec(&eviction["deleteOptions"]).unwrap_or_default(),
        _ => Vec::new(),
    };
    let (options, dry_run) = DeleteOptions::parse(&options_body, &[])?;
    let mut opts = opts.clone();
    opts.dry_run |= dry_run;
    ops::get(store, resource, Some(namespace), name)?;
    ops::delete(store, resource, Some(namespace), name, &options, &opts)?;
    Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
}
