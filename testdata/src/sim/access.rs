//! Authentication, impersonation and authorization of the simulator's
//! requests (`kubefold sim --authz-file FILE`), decided as kube-apiserver
//! decides them with a token file and RBAC:
//!
//! - a bearer token of the file's `users` is that user (in
//!   `system:authenticated` besides its groups); an unknown token is 401; a
//!   request without one is `system:anonymous` in `system:unauthenticated`
//!   (refused with 401 when `anonymous: false`);
//! - `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//!   `Impersonate-Extra-*` are honoured when the authenticated user may
//!   `impersonate` each (`users`, `groups`, `serviceaccounts` in the core
//!   group, `uids` and `userextras/KEY` in `authentication.k8s.io`), 403
//!   otherwise; the request then goes on as the impersonated user;
//! - every resource request is allowed by a rule (users or groups, verbs,
//!   apiGroups, resources as `plural` or `plural/subresource`, namespaces,
//!   resourceNames) or refused with kube-apiserver's 403 `Status`.
//!   Discovery, `/version`, OpenAPI and the health paths are open to every
//!   caller (the `system:discovery` and `system:public-info-viewer` roles),
//!   and the self reviews (`SelfSubjectAccessReview`,
//!   `SelfSubjectRulesReview`, `SelfSubjectReview`) to every authenticated
//!   user (`system:basic-user`).
//!
//! The same decisions answer `TokenReview` and `SubjectAccessReview`
//! ([`Policy::token_review`], [`Policy::access_review`]).
//!
//! ```yaml
//! users:
//!   - {name: kubefold, token: kubefold-token}
//!   - {name: alice, token: alice-token, uid: "1001", groups: [team-a]}
//! rules:
//!   - {users: [kubefold], verbs: [get, list, watch], resources: ["*"]}
//!   - {groups: [team-a], verbs: ["*"], resources: [configmaps], namespaces: [default]}
//!   - {users: [impersonator], verbs: [impersonate], resources: [users, groups, uids, userextras/*]}
//! ```

use std::path::Path;

use actix_web::http::header::HeaderMap;
use actix_web::http::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use super::path::{self, Route};
use super::status::{ApiError, Resource};

/// The user every request without credentials is.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of [`ANONYMOUS`].
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";

/// The `--authz-file`: users with their tokens, and the rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The users that tokens authenticate.
    #[serde(default)]
    pub users: Vec<TokenUser>,
    /// What users and groups may do; nothing else is allowed.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Serve requests without a token as `system:anonymous` (default
    /// true, as kube-apiserver's `--anonymous-auth`); false: 401.
    #[serde(default = "default_anonymous")]
    pub anonymous: bool,
}

fn default_anonymous() -> bool {
    true
}

/// A user of the policy and the bearer token that authenticates it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenUser {
    /// The user name.
    pub name: String,
    /// The bearer token.
    pub token: String,
    /// The UID.
    #[serde(default)]
    pub uid: String,
    /// Groups (`system:authenticated` is added).
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One grant: who (`users` or `groups`; `"*"` anyone), what (`verbs`,
/// `apiGroups`, `resources`, `resourceNames`; `"*"` any) and where
/// (`namespaces`; unset: every namespace and the cluster scope).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// User names.
    #[serde(default)]
    pub users: Vec<String>,
    /// Group names.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`, `impersonate`).
    pub verbs: Vec<String>,
    /// API groups (`""` the core group); unset: every group.
    #[serde(default)]
    pub api_groups: Option<Vec<String>>,
    /// Resources, `plural` or `plural/subresource` (`pods/exec`,
    /// `userextras/scopes`); `*` every resource and subresource,
    /// `plural/*` every subresource of one.
    pub resources: Vec<String>,
    /// Object names; unset: any.
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Namespaces; unset: every namespace and the cluster scope.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

/// Who a request is: its user, uid, groups and extra attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The UID.
    pub uid: String,
    /// The groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: Vec<(String, Vec<String>)>,
}

impl UserInfo {
    /// `system:anonymous`.
    pub fn anonymous() -> UserInfo {
        UserInfo { username: ANONYMOUS.into(), uid: String::new(), groups: vec![UNAUTHENTICATED.into()], extra: Vec::new() }
    }

    /// The `UserInfo` JSON of audit events and reviews.
    pub fn to_json(&self) -> Value {
        let mut info = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = self.extra.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>().into();
        }
        info
    }
}

/// Who made a request and as whom it is served; in the request
/// extensions of every request the simulator serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The authenticated user.
    pub user: UserInfo,
    /// The user impersonated, when the request impersonates one.
    pub impersonated: Option<UserInfo>,
}

impl Identity {
    /// The user the request is served as.
    pub fn effective(&self) -> &UserInfo {
        self.impersonated.as_ref().unwrap_or(&self.user)
    }
}

/// What a request does, in RBAC's terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The verb.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// The API version.
    pub version: String,
    /// The resource (plural); empty for a non-resource request.
    pub resource: String,
    /// The subresource.
    pub subresource: Option<String>,
    /// The namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: Option<String>,
}

impl Attributes {
    /// The attributes of a request, `None` for a non-resource request.
    pub fn of(method: &Method, path: &str, query: &str) -> Option<Attributes> {
        let Route::Resource(resource) = path::parse(path) else { return None };
        let watch = resource.watch_prefix
            || query.split('&').any(|pair| matches!(pair.split_once('='), Some(("watch", "true" | "1"))));
        let streaming = matches!(resource.subresource.as_deref(), Some("exec" | "attach" | "portforward"));
        let verb = match *method {
            _ if streaming => "create",
            Method::GET | Method::HEAD if watch => "watch",
            Method::GET | Method::HEAD if resource.name.is_some() => "get",
            Method::GET | Method::HEAD => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if resource.name.is_some() => "delete",
            Method::DELETE => "deletecollection",
            _ => "",
        };
        Some(Attributes {
            verb: verb.into(),
            group: resource.group,
            version: resource.version,
            resource: resource.plural,
            subresource: resource.subresource,
            namespace: resource.namespace,
            name: resource.name,
        })
    }

    /// `configmaps "x" is forbidden: User "alice" cannot create resource
    /// "configmaps" in API group "" in the namespace "default"`, as
    /// kube-apiserver's RBAC authorizer words a denial.
    pub fn forbidden(&self, user: &UserInfo) -> ApiError {
        let what = if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) };
        let object = match &self.name {
            Some(name) => format!("{what} \"{name}\""),
            None => what,
        };
        let resource = match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        };
        let scope = match &self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        ApiError::Forbidden {
            resource: Resource { group: self.group.clone(), plural: self.resource.clone() },
            name: self.name.clone().unwrap_or_default(),
            message: format!(
                "{object} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
                user.username, self.verb, self.group
            ),
        }
    }
}

/// Why a request is refused before it is served.
#[derive(Debug)]
pub enum Refusal {
    /// 401: an unknown token, or no token without anonymous access.
    Unauthorized,
    /// 400: impersonation headers that do not make sense.
    BadRequest(String),
    /// 403, with who was refused.
    Forbidden(Identity, ApiError),
}

fn any(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    /// Whether the rule is about `user` (by name or group).
    pub fn applies_to(&self, user: &UserInfo) -> bool {
        any(&self.users, &user.username) || user.groups.iter().any(|g| any(&self.groups, g))
    }

    fn allows(&self, attributes: &Attributes) -> bool {
        let resource_matches = self.resources.iter().any(|r| match (r.split_once('/'), &attributes.subresource) {
            _ if r == "*" => true,
            (None, None) => r == &attributes.resource,
            (Some((plural, sub)), Some(asked)) => plural == attributes.resource && (sub == "*" || sub == asked),
            _ => false,
        });
        any(&self.verbs, &attributes.verb)
            && self.api_groups.as_ref().is_none_or(|groups| any(groups, &attributes.group))
            && resource_matches
            && (self.resource_names.is_empty() || attributes.name.as_ref().is_some_and(|n| self.resource_names.contains(n)))
            && match (&self.namespaces, &attributes.namespace) {
                (None, _) => true,
                (Some(allowed), Some(ns)) => any(allowed, ns),
                (Some(_), None) => false,
            }
    }
}

impl Policy {
    /// Reads a policy file (YAML or JSON).
    pub fn read(path: &Path) -> std::io::Result<Policy> {
        let text = std::fs::read_to_string(path)?;
        serde_saphyr::from_str(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
    }

    /// The user a bearer token authenticates, `None` for an unknown one.
    pub fn authenticate(&self, token: &str) -> Option<UserInfo> {
        let user = self.users.iter().find(|u| u.token == token)?;
        let mut groups = user.groups.clone();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        Some(UserInfo { username: user.name.clone(), uid: user.uid.clone(), groups, extra: Vec::new() })
    }

    /// Whether `user` may do `attributes`.
    pub fn allows(&self, user: &UserInfo, attributes: &Attributes) -> bool {
        let self_review = attributes.verb == "create"
            && matches!(attributes.resource.as_str(), "selfsubjectaccessreviews" | "selfsubjectrulesreviews" | "selfsubjectreviews");
        (self_review && user.groups.iter().any(|g| g == AUTHENTICATED)) || self.rules.iter().any(|r| r.applies_to(user) && r.allows(attributes))
    }

    /// Authenticates a request, takes its impersonation and authorizes it.
    pub fn admit(&self, headers: &HeaderMap, method: &Method, path: &str, query: &str) -> Result<Identity, Refusal> {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let user = match token {
            Some(token) => self.authenticate(token).ok_or(Refusal::Unauthorized)?,
            None if self.anonymous => UserInfo::anonymous(),
            None => return Err(Refusal::Unauthorized),
        };
        let mut identity = Identity { user, impersonated: None };
        if let Some(asked) = impersonation(headers).map_err(Refusal::BadRequest)? {
            for check in impersonation_checks(&asked) {
                if !self.allows(&identity.user, &check) {
                    let error = check.forbidden(&identity.user);
                    return Err(Refusal::Forbidden(identity, error));
                }
            }
            identity.impersonated = Some(asked);
        }
        if let Some(attributes) = Attributes::of(method, path, query) {
            if !self.allows(identity.effective(), &attributes) {
                let error = attributes.forbidden(identity.effective());
                return Err(Refusal::Forbidden(identity, error));
            }
        }
        Ok(identity)
    }

    /// The `status` of a `TokenReview` of `spec.token`.
    pub fn token_review(&self, review: &Value) -> Value {
        match review["spec"]["token"].as_str().and_then(|t| self.authenticate(t)) {
            Some(user) => json!({"authenticated": true, "user": user.to_json(), "audiences": review["spec"]["audiences"]}),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        }
    }

    /// The `status` of a `SubjectAccessReview` (or a self review, about
    /// `caller`): whether its user may do what it names.
    pub fn access_review(&self, review: &Value, caller: Option<&UserInfo>) -> Value {
        let spec = &review["spec"];
        let user = match caller {
            Some(caller) => caller.clone(),
            None => {
                let strings = |v: &Value| v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
                UserInfo {
                    username: spec["user"].as_str().unwrap_or_default().to_string(),
                    uid: spec["uid"].as_str().unwrap_or_default().to_string(),
                    groups: strings(&spec["groups"]),
                    extra: Vec::new(),
                }
            }
        };
        let attributes = &spec["resourceAttributes"];
        if attributes.is_null() {
            // Non-resource URLs: the open paths.
            let path = spec["nonResourceAttributes"]["path"].as_str().unwrap_or_default();
            let open = ["/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz"].iter().any(|p| path == *p || path.starts_with(&format!("{p}/")));
            return json!({"allowed": open, "reason": if open { "the discovery and health paths are open" } else { "no rule allows it" }});
        }
        let text = |key: &str| attributes[key].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let asked = Attributes {
            verb: text("verb").unwrap_or_default(),
            group: text("group").unwrap_or_default(),
            version: text("version").unwrap_or_default(),
            resource: text("resource").unwrap_or_default(),
            subresource: text("subresource"),
            namespace: text("namespace"),
            name: text("name"),
        };
        if self.allows(&user, &asked) {
            json!({"allowed": true, "reason": "allowed by a rule of the simulator's policy"})
        } else {
            json!({"allowed": false, "reason": "no rule of the simulator's policy allows it"})
        }
    }
}

/// The user a request's `Impersonate-*` headers ask for; `Ok(None)`
/// without them; an error for groups, a UID or extras without a user.
pub fn impersonation(headers: &HeaderMap) -> Result<Option<UserInfo>, String> {
    let text = |v: &actix_web::http::header::HeaderValue| v.to_str().map(str::to_string).map_err(|_| "an impersonation header is not text".to_string());
    let mut user = None;
    let mut uid = None;
    let mut groups = Vec::new();
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in headers {
        let name = name.as_str();
        if name == "impersonate-user" {
            user = Some(text(value)?);
        } else if name == "impersonate-group" {
            groups.push(text(value)?);
        } else if name == "impersonate-uid" {
            uid = Some(text(value)?);
        } else if let Some(key) = name.strip_prefix("impersonate-extra-") {
            let key = percent_decode(key).ok_or("an Impersonate-Extra- header has a bad escape")?.to_lowercase();
            let value = text(value)?;
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(value),
                None => extra.push((key, vec![value])),
            }
        }
    }
    extra.sort();
    match user {
        Some(username) if !username.is_empty() => {
            let implied = if username == ANONYMOUS { UNAUTHENTICATED } else { AUTHENTICATED };
            if !groups.iter().any(|g| g == implied) {
                groups.push(implied.into());
            }
            Ok(Some(UserInfo { username, uid: uid.unwrap_or_default(), groups, extra }))
        }
        None if groups.is_empty() && uid.is_none() && extra.is_empty() => Ok(None),
        _ => Err("requested impersonation of groups, a UID or extra attributes without impersonating a user".into()),
    }
}

/// The `impersonate` checks of an impersonated user, one per thing asked.
fn impersonation_checks(asked: &UserInfo) -> Vec<Attributes> {
    let check = |group: &str, resource: &str, subresource: Option<&str>, namespace: Option<&str>, name: &str| Attributes {
        verb: "impersonate".into(),
        group: group.into(),
        version: String::new(),
        resource: resource.into(),
        subresource: subresource.map(str::to_string),
        namespace: namespace.map(str::to_string),
        name: Some(name.into()),
    };
    let mut checks = vec![match asked.username.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
        Some((namespace, name)) => check("", "serviceaccounts", None, Some(namespace), name),
        None => check("", "users", None, None, &asked.username),
    }];
    for group in asked.groups.iter().filter(|g| *g != AUTHENTICATED && *g != UNAUTHENTICATED) {
        checks.push(check("", "groups", None, None, group));
    }
    if !asked.uid.is_empty() {
        checks.push(check("authentication.k8s.io", "uids", None, None, &asked.uid));
    }
    for (key, values) in &asked.extra {
        for value in values {
            checks.push(check("authentication.k8s.io", "userextras", Some(key), None, value));
        }
    }
    checks
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    const POLICY: &str = "
users:
  - {name: kubefold, token: kf}
  - {name: impersonator, token: imp}
  - {name: alice, token: al, uid: '1001', groups: [team-a]}
rules:
  - {users: [kubefold], verbs: [get, list, watch], resources: ['*']}
  - {users: [impersonator], verbs: [impersonate], resources: [users, groups, uids, 'userextras/*']}
  - {groups: [team-a], verbs: [create, update, patch, delete], apiGroups: [''], resources: [configmaps], namespaces: [default]}
";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn message(refusal: Refusal) -> String {
        match refusal {
            Refusal::Forbidden(_, error) => error.to_string(),
            other => panic!("not forbidden: {other:?}"),
        }
    }

    #[test]
    fn requests_are_decided_as_rbac_decides_them() {
        let policy: Policy = serde_saphyr::from_str(POLICY).unwrap();
        let cm = "/api/v1/namespaces/default/configmaps";
        let admitted = policy.admit(&headers(&[("Authorization", "Bearer al")]), &Method::POST, cm, "").unwrap();
        assert_eq!(admitted.user.username, "alice");
        assert_eq!(admitted.user.groups, ["team-a", AUTHENTICATED]);
        // Another namespace, another verb, another resource: refused.
        let refused = policy.admit(&headers(&[("Authorization", "Bearer al")]), &Method::POST, "/api/v1/namespaces/prod/configmaps", "").unwrap_err();
        assert_eq!(message(refused), "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"prod\"");
        assert!(policy.admit(&headers(&[("Authorization", "Bearer al")]), &Method::GET, cm, "").is_err());
        assert!(policy.admit(&headers(&[("Authorization", "Bearer kf")]), &Method::GET, cm, "watch=true").is_ok());
        let refused = policy.admit(&headers(&[("Authorization", "Bearer kf")]), &Method::DELETE, &format!("{cm}/x"), "").unwrap_err();
        assert_eq!(message(refused), "configmaps \"x\" is forbidden: User \"kubefold\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\"");
        // Unknown tokens are 401; no token is anonymous, who may discover only.
        assert!(matches!(policy.admit(&headers(&[("Authorization", "Bearer nope")]), &Method::GET, cm, ""), Err(Refusal::Unauthorized)));
        assert!(policy.admit(&HeaderMap::new(), &Method::GET, "/apis", "").is_ok());
        assert!(policy.admit(&HeaderMap::new(), &Method::GET, cm, "").is_err());
        // Exec is a create of pods/exec.
        let exec = Attributes::of(&Method::GET, "/api/v1/namespaces/default/pods/web-0/exec", "command=ls").unwrap();
        assert_eq!((exec.verb.as_str(), exec.subresource.as_deref()), ("create", Some("exec")));
    }

    #[test]
    fn impersonation_needs_the_right_and_serves_the_impersonated_user() {
        let policy: Policy = serde_saphyr::from_str(POLICY).unwrap();
        let cm = "/api/v1/namespaces/default/configmaps";
        let asked = [("Authorization", "Bearer imp"), ("Impersonate-User", "alice"), ("Impersonate-Group", "team-a"), ("Impersonate-Extra-Scopes", "edit")];
        let identity = policy.admit(&headers(&asked), &Method::POST, cm, "").unwrap();
        assert_eq!(identity.user.username, "impersonator");
        let served = identity.impersonated.unwrap();
        assert_eq!((served.username.as_str(), served.groups.as_slice()), ("alice", ["team-a".to_string(), AUTHENTICATED.to_string()].as_slice()));
        assert_eq!(served.extra, [("scopes".to_string(), vec!["edit".to_string()])]);
        // The impersonated user's rights decide.
        let refused = policy.admit(&headers(&asked), &Method::POST, "/api/v1/namespaces/prod/configmaps", "").unwrap_err();
        assert!(message(refused).contains("User \"alice\" cannot create"));
        // Only a user with the right may impersonate.
        let refused = policy.admit(&headers(&[("Authorization", "Bearer al"), ("Impersonate-User", "kubefold")]), &Method::GET, cm, "").unwrap_err();
        assert_eq!(message(refused), "users \"kubefold\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
        assert!(matches!(policy.admit(&headers(&[("Impersonate-Group", "g")]), &Method::GET, cm, ""), Err(Refusal::BadRequest(_))));
    }

    #[test]
    fn reviews_are_answered_from_the_policy() {
        let policy: Policy = serde_saphyr::from_str(POLICY).unwrap();
        let review = policy.token_review(&json!({"spec": {"token": "al"}}));
        assert_eq!(review["authenticated"], true);
        assert_eq!(review["user"]["username"], "alice");
        assert_eq!(review["user"]["uid"], "1001");
        assert_eq!(policy.token_review(&json!({"spec": {"token": "x"}}))["authenticated"], false);
        let sar = |user: &str, groups: Value, ns: &str| {
            policy.access_review(&json!({"spec": {"user": user, "groups": groups, "resourceAttributes": {"verb": "create", "resource": "configmaps", "namespace": ns}}}), None)["allowed"].clone()
        };
        assert_eq!(sar("alice", json!(["team-a"]), "default"), true);
        assert_eq!(sar("alice", json!(["team-a"]), "prod"), false);
        assert_eq!(sar("bob", json!([]), "default"), false);
    }
}
