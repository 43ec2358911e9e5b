//! Authorization: whether a user may do what a request asks. The request
//! is described in Kubernetes attributes (verb, API group, resource,
//! subresource, namespace, name) plus the member `cluster`
//! ([`RequestAttributes`], from the request's [`RequestInfo`]), and allowed
//! when one of these grants it:
//! - `kubefold:admins`: everything, `/admin/...`, `/metrics` and
//!   impersonation (`kubectl --as`, [`crate::impersonate`]) included;
//! - `kubefold:editors`: every resource verb on every resource;
//! - `kubefold:viewers`: get, list and watch on every resource except
//!   `secrets` (as Kubernetes' `view` role);
//! - any authenticated user: `GET` of discovery documents (`/api`, `/apis`,
//!   `/openapi/...`; kube-apiserver's `system:discovery`), anyone: `GET /version`;
//! - an extra [`Rule`] of the configuration.
//!
//! Denials are worded as kube-apiserver's ([`forbidden`]).

use actix_web::http::Method;
use kubefold_engine::status::Status;
use serde::Deserialize;

use super::authn::User;
use super::{ADMINS, AUTHENTICATED_GROUP, EDITORS, VIEWERS};
use crate::path::ApiPath;
use crate::request::{RequestInfo, RESOURCE_VERBS};

/// Verbs of requests to other paths (lowercase HTTP methods, as RBAC's nonResourceURLs).
const NON_RESOURCE_VERBS: [&str; 7] = ["get", "post", "put", "patch", "delete", "head", "options"];
/// Verbs of `kubefold:viewers`.
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// API groups of access and identity reviews.
const REVIEW_GROUPS: [&str; 2] = ["authorization.k8s.io", "authentication.k8s.io"];
/// Reviews every authenticated user may create: questions about itself.
const SELF_REVIEWS: [(&str, &str); 3] = [
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
];

/// An extra authorization rule: it allows a request when the user matches
/// (by name or group) and so do the verb, the resource (or path) and the cluster.
/// Every list entry may use `*` as a wildcard for any run of characters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// User names the rule applies to (`system:anonymous` for anonymous requests).
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups the rule applies to (`system:authenticated`, `system:unauthenticated` included).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Kubernetes verbs allowed: get, list, watch, create, update, patch,
    /// delete, deletecollection; `impersonate` with the resources `users`,
    /// `groups`, `serviceaccounts`, `uids`, `userextras/*` (`kubectl --as`,
    /// [`crate::impersonate`]); for `nonResourceURLs` the lowercase HTTP
    /// method (get, post, put, patch, delete); `*` for all.
    pub verbs: Vec<String>,
    /// Resources allowed, as RBAC writes them: `pods`, `pods/log`, `*/scale`,
    /// `*`; `deployments.apps` names the API group too (plain `deployments`
    /// matches every group). `pods` does not cover its subresources.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Member clusters the resources may belong to. A request that names no
    /// single cluster (a fleet-wide list or watch, a bare object name) only
    /// matches `*`.
    #[serde(default = "default_rule_clusters")]
    pub clusters: Vec<String>,
    /// Namespaces the resources may be in (globs, as `team-*`), as a
    /// RoleBinding scopes a Role. A request in no namespace (a list across
    /// namespaces, a cluster-scoped object) only matches `*`; a
    /// `namespaces` object is in its own namespace.
    #[serde(default = "default_rule_namespaces")]
    pub namespaces: Vec<String>,
    /// Other paths allowed (`/metrics`, `/admin/v1/stats`, `/admin/*`), as
    /// RBAC's nonResourceURLs.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// Every cluster: `["*"]`.
pub fn default_rule_clusters() -> Vec<String> {
    vec!["*".to_string()]
}

/// Every namespace, and requests in none: `["*"]`.
pub fn default_rule_namespaces() -> Vec<String> {
    vec!["*".to_string()]
}

/// What a request asks to do, in the terms authorization rules use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAttributes {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`) for resource requests; the lowercase
    /// HTTP method otherwise.
    pub verb: String,
    /// What the request is about.
    pub target: Target,
}

/// The object of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A resource of the Kubernetes API.
    Resource(ResourceAttributes),
    /// A discovery document: `/api`, `/apis`, `/api/v1`, `/apis/{g}[/{v}]`,
    /// `/openapi/...` (with or without a `/clusters/{c}` prefix).
    Discovery {
        /// The path.
        path: String,
    },
    /// `/version`.
    Version,
    /// Any other path: `/admin/...`, `/metrics`, unknown paths.
    NonResource {
        /// The path as requested.
        path: String,
    },
}

/// Resource attributes of a request (kube-apiserver's RequestInfo, plus the cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`, `scale`, `log`), if any.
    pub subresource: Option<String>,
    /// Namespace, if any (a namespace's own name for `namespaces` objects).
    pub namespace: Option<String>,
    /// Object name as requested, if any.
    pub name: Option<String>,
    /// The member cluster: the `/clusters/{c}` scope, else the suffix of a
    /// qualified name; `None` when the request spans the fleet or names an
    /// object by its bare name.
    pub cluster: Option<String>,
}

impl ResourceAttributes {
    /// `pods` or `pods/log`, as RBAC names it.
    pub fn resource_and_subresource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// Maps an HTTP request to authorization attributes (pure: no catalog
/// needed; see [`RequestInfo`]).
pub fn attributes(method: &Method, raw_path: &str, query: &str) -> RequestAttributes {
    RequestAttributes::of(&RequestInfo::new(method, raw_path, query))
}

impl RequestAttributes {
    /// The authorization attributes of a parsed request: a resource
    /// request's verb, resource and member; `/version`; a discovery
    /// document (by its decoded path); any other path as requested.
    pub fn of(info: &RequestInfo) -> RequestAttributes {
        let target = match (&info.api_path, &info.decoded_path) {
            (Some(ApiPath::Resource(_)), _) => Target::Resource(ResourceAttributes {
                group: info.api_group.clone(),
                version: info.api_version.clone(),
                resource: info.resource.clone(),
                subresource: info.subresource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                cluster: info.member().map(str::to_string),
            }),
            (Some(ApiPath::Version), _) => Target::Version,
            (Some(_), Some(path)) => Target::Discovery { path: path.clone() },
            _ => Target::NonResource { path: info.path.clone() },
        };
        RequestAttributes { verb: info.verb.clone(), target }
    }
}

/// Whether `value` matches `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, value: &str) -> bool {
    let (p, v) = (pattern.as_bytes(), value.as_bytes());
    let (mut pi, mut vi) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && p[pi] == b'*' {
            backtrack = Some((pi, vi));
            pi += 1;
        } else if pi < p.len() && p[pi] == v[vi] {
            pi += 1;
            vi += 1;
        } else if let Some((star, from)) = backtrack {
            pi = star + 1;
            vi = from + 1;
            backtrack = Some((star, from + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn any_glob(patterns: &[String], value: &str) -> bool {
    patterns.iter().any(|p| glob(p, value))
}

impl Rule {
    /// Checks what serde cannot: a subject, known verbs, something to allow.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.users.is_empty() && self.groups.is_empty() {
            return Err("name at least one user or group".to_string());
        }
        if self.verbs.is_empty() {
            return Err("name at least one verb".to_string());
        }
        if let Some(v) = self
            .verbs
            .iter()
            .find(|v| *v != "*" && *v != "impersonate" && !RESOURCE_VERBS.contains(&v.as_str()) && !NON_RESOURCE_VERBS.contains(&v.as_str()))
        {
            return Err(format!(
                "unknown verb {v:?}: use {}, impersonate (with users, groups, serviceaccounts, uids, userextras), or for nonResourceURLs {}, or *",
                RESOURCE_VERBS.join(", "),
                NON_RESOURCE_VERBS.join(", ")
            ));
        }
        if self.resources.is_empty() && self.non_resource_urls.is_empty() {
            return Err("name at least one of resources and nonResourceURLs".to_string());
        }
        if let Some(u) = self.non_resource_urls.iter().find(|u| !u.starts_with('/') && *u != "*") {
            return Err(format!("nonResourceURLs entry {u:?} must start with /"));
        }
        Ok(())
    }

    pub(crate) fn matches_user(&self, user: &User) -> bool {
        any_glob(&self.users, &user.name) || user.groups.iter().any(|g| any_glob(&self.groups, g))
    }

    fn allows(&self, user: &User, attributes: &RequestAttributes) -> bool {
        if !self.matches_user(user) || !self.verbs.iter().any(|v| v == "*" || *v == attributes.verb) {
            return false;
        }
        match &attributes.target {
            Target::Resource(r) => {
                let plain = r.resource_and_subresource();
                let resource_matches = any_glob(&self.resources, &plain)
                    || (!r.group.is_empty() && {
                        let with_group = match &r.subresource {
                            Some(sub) => format!("{}.{}/{sub}", r.resource, r.group),
                            None => format!("{}.{}", r.resource, r.group),
                        };
                        any_glob(&self.resources, &with_group)
                    });
                let cluster_matches = match &r.cluster {
                    Some(c) => any_glob(&self.clusters, c),
                    None => self.clusters.iter().any(|c| c == "*"),
                };
                let namespace_matches = match &r.namespace {
                    Some(n) => any_glob(&self.namespaces, n),
                    None => self.namespaces.iter().any(|n| n == "*"),
                };
                resource_matches && cluster_matches && namespace_matches
            }
            Target::Discovery { path } | Target::NonResource { path } => any_glob(&self.non_resource_urls, path),
            Target::Version => any_glob(&self.non_resource_urls, "/version"),
        }
    }
}

/// The authorization decision for `user` doing `attributes`, given the extra `rules`.
pub fn authorize(user: &User, attributes: &RequestAttributes, rules: &[Rule]) -> bool {
    if user.in_group(ADMINS) {
        return true;
    }
    let builtin = match &attributes.target {
        Target::Version => attributes.verb == "get",
        Target::Discovery { .. } => attributes.verb == "get" && user.in_group(AUTHENTICATED_GROUP),
        Target::NonResource { .. } => false,
        // Reviews are questions to kubefold, not objects of a member: any
        // authenticated user may ask about itself (kube-apiserver's
        // `system:basic-user`); asking about others is for admins.
        Target::Resource(r) if REVIEW_GROUPS.contains(&r.group.as_str()) => {
            attributes.verb == "create"
                && user.in_group(AUTHENTICATED_GROUP)
                && SELF_REVIEWS.iter().any(|(g, res)| *g == r.group && *res == r.resource)
                && r.subresource.is_none()
        }
        Target::Resource(r) => {
            let verb = attributes.verb.as_str();
            (user.in_group(EDITORS) && RESOURCE_VERBS.contains(&verb))
                || (user.in_group(VIEWERS) && READ_VERBS.contains(&verb) && r.resource != "secrets")
        }
    };
    builtin || rules.iter().any(|rule| rule.allows(user, attributes))
}

/// Subresources of pods whose WebSocket upgrade (a GET, verb `get`) is
/// also authorized as `create` (see [`upgrade_create_check`]).
pub const CONNECT_SUBRESOURCES: [&str; 3] = ["exec", "attach", "portforward"];

/// The second check of a WebSocket upgrade to `pods/exec`, `pods/attach`
/// or `pods/portforward`: the same request as verb `create`. The request's
/// verb follows its method as in kube-apiserver's RequestInfo (a POST, as
/// SPDY clients send, is `create`; a GET, as WebSocket clients send, is
/// `get`), and kube-apiserver 1.35 authorizes such a GET a second time as
/// `create` (feature gate `AuthorizePodWebsocketUpgradeCreatePermission`,
/// beta and on by default, KEP-4006 "Transition from SPDY to WebSockets"):
/// running a command in a pod needs `create` whichever protocol asks.
/// `None` for every other request.
/// <https://kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/>
pub fn upgrade_create_check(attributes: &RequestAttributes) -> Option<RequestAttributes> {
    match &attributes.target {
        Target::Resource(r)
            if attributes.verb == "get"
                && r.group.is_empty()
                && r.resource == "pods"
                && r.subresource.as_deref().is_some_and(|s| CONNECT_SUBRESOURCES.contains(&s)) =>
        {
            Some(RequestAttributes { verb: "create".to_string(), target: attributes.target.clone() })
        }
        _ => None,
    }
}

/// Go's `%q` for the strings of a forbidden message.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&c.escape_default().to_string()),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// 403 Forbidden worded as kube-apiserver's authorization filter words it.
pub fn forbidden(user: &User, attributes: &RequestAttributes) -> Status {
    let who = quote(&user.name);
    let verb = &attributes.verb;
    match &attributes.target {
        Target::Resource(r) => {
            let scope = match &r.namespace {
                Some(ns) => format!("in the namespace {}", quote(ns)),
                None => "at the cluster scope".to_string(),
            };
            let reason = format!(
                "User {who} cannot {verb} resource {} in API group {} {scope}",
                quote(&r.resource_and_subresource()),
                quote(&r.group)
            );
            let qualified = if r.group.is_empty() { r.resource.clone() } else { format!("{}.{}", r.resource, r.group) };
            let name = r.name.as_deref().unwrap_or("");
            let message = if name.is_empty() {
                format!("{qualified} is forbidden: {reason}")
            } else {
                format!("{qualified} {} is forbidden: {reason}", quote(name))
            };
            Status::new(403, "Forbidden", message).with_details(&r.group, &r.resource, name)
        }
        Target::Discovery { path } | Target::NonResource { path } => {
            Status::new(403, "Forbidden", format!("forbidden: User {who} cannot {verb} path {}", quote(path)))
                .with_details("", "", "")
        }
        Target::Version => Status::new(403, "Forbidden", format!("forbidden: User {who} cannot {verb} path \"/version\""))
            .with_details("", "", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User::authenticated(name.to_string(), String::new(), groups.iter().map(|g| g.to_string()).collect())
    }

    fn attrs(method: Method, path: &str, query: &str) -> RequestAttributes {
        attributes(&method, path, query)
    }

    fn resource(a: &RequestAttributes) -> &ResourceAttributes {
        match &a.target {
            Target::Resource(r) => r,
            other => panic!("not a resource request: {other:?}"),
        }
    }

    #[test]
    fn verbs_follow_kube_apiserver() {
        let cases = [
            (Method::GET, "/api/v1/pods", "", "list"),
            (Method::GET, "/api/v1/pods", "watch=true", "watch"),
            (Method::GET, "/api/v1/namespaces/default/pods", "labelSelector=a&watch=1", "watch"),
            (Method::GET, "/api/v1/pods", "watch=false", "list"),
            (Method::GET, "/api/v1/namespaces/default/pods/web-0_member1", "", "get"),
            (Method::POST, "/clusters/member1/api/v1/namespaces/default/pods", "", "create"),
            (Method::PUT, "/api/v1/namespaces/default/pods/web-0_member1", "", "update"),
            (Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web_member2/scale", "", "patch"),
            (Method::DELETE, "/api/v1/namespaces/default/pods/web-0_member1", "", "delete"),
            (Method::DELETE, "/api/v1/namespaces/default/pods", "", "deletecollection"),
        ];
        for (method, path, query, verb) in cases {
            assert_eq!(attrs(method, path, query).verb, verb, "{path}?{query}");
        }
    }

    #[test]
    fn resources_namespaces_and_clusters() {
        let a = attrs(Method::PATCH, "/api/v1/namespaces/default/pods/web-0_member1", "");
        let r = resource(&a);
        assert_eq!((r.group.as_str(), r.resource.as_str()), ("", "pods"));
        assert_eq!((r.namespace.as_deref(), r.name.as_deref()), (Some("default"), Some("web-0_member1")));
        assert_eq!(r.cluster.as_deref(), Some("member1"));

        let a = attrs(Method::GET, "/clusters/member2/apis/apps/v1/namespaces/shop/deployments/web/scale", "");
        let r = resource(&a);
        assert_eq!(r.cluster.as_deref(), Some("member2"));
        assert_eq!(r.resource_and_subresource(), "deployments/scale");

        let a = attrs(Method::GET, "/api/v1/namespaces/default/pods/web-0", "");
        assert_eq!(resource(&a).cluster, None);
        let a = attrs(Method::GET, "/api/v1/pods", "");
        assert_eq!(resource(&a).cluster, None);

        // A namespace's own subresources, and the namespace as its own scope.
        let a = attrs(Method::PUT, "/api/v1/namespaces/kube-system/finalize", "");
        let r = resource(&a);
        assert_eq!((r.resource.as_str(), r.subresource.as_deref()), ("namespaces", Some("finalize")));
        assert_eq!(r.namespace.as_deref(), Some("kube-system"));
        let a = attrs(Method::GET, "/api/v1/namespaces/default", "");
        assert_eq!(resource(&a).namespace.as_deref(), Some("default"));

        // Percent-encoding is decoded as the router decodes it.
        let a = attrs(Method::GET, "/api/v1/namespaces/default/pods/web-0%5Fmember3", "");
        assert_eq!(resource(&a).cluster.as_deref(), Some("member3"));
    }

    #[test]
    fn other_paths() {
        assert_eq!(attrs(Method::GET, "/version", "").target, Target::Version);
        for p in ["/api", "/apis", "/api/v1", "/apis/apps/v1", "/apis/apps", "/openapi/v2", "/openapi/v3/apis/apps/v1", "/clusters/m1/api"] {
            assert!(matches!(attrs(Method::GET, p, "").target, Target::Discovery { .. }), "{p}");
        }
        let a = attrs(Method::POST, "/admin/v1/clusters", "");
        assert_eq!(a.verb, "post");
        assert_eq!(a.target, Target::NonResource { path: "/admin/v1/clusters".into() });
        assert!(matches!(attrs(Method::GET, "/api/v1/namespaces/a%2Fb/pods", "").target, Target::NonResource { .. }));
    }

    #[test]
    fn builtin_groups() {
        let viewer = user("alice", &[VIEWERS]);
        let editor = user("carol", &[EDITORS]);
        let admin = user("bob", &[ADMINS]);
        let nobody = user("eve", &[]);
        let anonymous = User::anonymous();
        let patch = attrs(Method::PATCH, "/api/v1/namespaces/default/pods/web-0_member1", "");
        let get = attrs(Method::GET, "/api/v1/namespaces/default/pods/web-0_member1", "");
        let watch = attrs(Method::GET, "/api/v1/pods", "watch=1");
        let secrets = attrs(Method::GET, "/api/v1/namespaces/default/secrets", "");
        let admin_api = attrs(Method::GET, "/admin/v1/clusters", "");
        let metrics = attrs(Method::GET, "/metrics", "");
        let discovery = attrs(Method::GET, "/apis/apps/v1", "");
        let version = attrs(Method::GET, "/version", "");
        let ok = |u: &User, a: &RequestAttributes| authorize(u, a, &[]);
        assert!(ok(&viewer, &get) && ok(&viewer, &watch) && !ok(&viewer, &patch));
        assert!(!ok(&viewer, &secrets) && ok(&editor, &secrets));
        assert!(ok(&editor, &patch) && ok(&editor, &get));
        assert!(!ok(&editor, &admin_api) && !ok(&editor, &metrics) && !ok(&viewer, &metrics));
        assert!(ok(&admin, &patch) && ok(&admin, &admin_api) && ok(&admin, &metrics));
        assert!(ok(&nobody, &discovery) && ok(&nobody, &version) && !ok(&nobody, &get));
        assert!(!ok(&anonymous, &discovery) && ok(&anonymous, &version) && !ok(&anonymous, &get));
        assert!(!ok(&viewer, &attrs(Method::POST, "/api", "")));
    }

    #[test]
    fn rules_limited_to_namespaces_allow_only_there() {
        let rules: Vec<Rule> = serde_saphyr::from_str(
            r#"
- users: [erin]
  verbs: [get, list, watch, create, delete]
  resources: [pods, configmaps, namespaces]
  namespaces: [team-a, "shared-*"]
"#,
        )
        .unwrap();
        rules[0].validate().unwrap();
        let erin = user("erin", &[]);
        let ok = |m: Method, p: &str| authorize(&erin, &attrs(m, p, ""), &rules);
        assert!(ok(Method::GET, "/api/v1/namespaces/team-a/pods"));
        assert!(ok(Method::POST, "/clusters/member1/api/v1/namespaces/shared-eu/configmaps"));
        assert!(ok(Method::DELETE, "/api/v1/namespaces/team-a/pods/web-0_member1"));
        assert!(ok(Method::GET, "/api/v1/namespaces/team-a"), "a namespace is in itself");
        assert!(!ok(Method::GET, "/api/v1/namespaces/team-b/pods"));
        assert!(!ok(Method::GET, "/api/v1/pods"), "a list across namespaces is in none");
        assert!(!ok(Method::GET, "/api/v1/namespaces"));
        assert!(!ok(Method::GET, "/api/v1/namespaces/team-b"));
    }

    #[test]
    fn rules_match_users_verbs_resources_and_clusters() {
        let rules: Vec<Rule> = serde_saphyr::from_str(
            r#"
- users: [dave]
  verbs: [get, list, watch]
  resources: [pods, "*/scale"]
  clusters: [member1, "prod-*"]
- groups: [monitoring]
  verbs: [get]
  nonResourceURLs: [/metrics]
- groups: [system:authenticated]
  verbs: [patch]
  resources: [deployments.apps]
"#,
        )
        .unwrap();
        for rule in &rules {
            rule.validate().unwrap();
        }
        let dave = user("dave", &[]);
        let ok = |u: &User, m: Method, p: &str| authorize(u, &attrs(m, p, ""), &rules);
        assert!(ok(&dave, Method::GET, "/clusters/member1/api/v1/pods"));
        assert!(ok(&dave, Method::GET, "/clusters/prod-eu/api/v1/pods"));
        assert!(!ok(&dave, Method::GET, "/clusters/member2/api/v1/pods"));
        assert!(ok(&dave, Method::GET, "/api/v1/namespaces/default/pods/web-0_member1"));
        assert!(!ok(&dave, Method::GET, "/api/v1/namespaces/default/pods/web-0_member2"));
        // Fleet-wide and bare-name requests do not name one cluster.
        assert!(!ok(&dave, Method::GET, "/api/v1/pods"));
        assert!(!ok(&dave, Method::GET, "/api/v1/namespaces/default/pods/web-0"));
        assert!(!ok(&dave, Method::GET, "/api/v1/namespaces/default/pods/web-0_member1/log"));
        assert!(ok(&dave, Method::GET, "/apis/apps/v1/namespaces/shop/deployments/web_member1/scale"));
        assert!(!ok(&dave, Method::DELETE, "/api/v1/namespaces/default/pods/web-0_member1"));
        assert!(!ok(&dave, Method::GET, "/metrics"));
        assert!(ok(&user("prom", &["monitoring"]), Method::GET, "/metrics"));
        assert!(!ok(&user("prom", &["monitoring"]), Method::GET, "/admin/v1/stats"));
        let erin = user("erin", &[]);
        assert!(ok(&erin, Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web_member2"));
        assert!(!ok(&erin, Method::PATCH, "/apis/example.io/v1/namespaces/shop/deployments/web_member2"));
        assert!(!ok(&User::anonymous(), Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web_member2"));
    }

    #[test]
    fn bad_rules_are_refused() {
        let parse = |y: &str| serde_saphyr::from_str::<Rule>(y).map_err(|e| e.to_string()).and_then(|r| r.validate());
        assert!(parse("{verbs: [get], resources: [pods]}").unwrap_err().contains("user or group"));
        assert!(parse("{users: [a], verbs: [read], resources: [pods]}").unwrap_err().contains("unknown verb"));
        assert!(parse("{users: [a], verbs: [get]}").unwrap_err().contains("resources"));
        assert!(parse("{users: [a], verbs: [get], nonResourceURLs: [metrics]}").unwrap_err().contains("start with /"));
        assert!(parse("{users: [a], verbs: [get], resource: [pods]}").is_err());
        assert!(parse("{users: [a], verbs: ['*'], resources: ['*']}").is_ok());
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("*", "pods/log"));
        assert!(glob("prod-*", "prod-eu"));
        assert!(!glob("prod-*", "staging"));
        assert!(glob("*/scale", "deployments/scale"));
        assert!(!glob("*/scale", "deployments"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("/admin/*", "/admin/v1/clusters"));
        assert!(glob("pods", "pods") && !glob("pods", "pods/log"));
    }

    #[test]
    fn forbidden_reads_like_kube_apiserver() {
        let alice = user("alice", &[VIEWERS]);
        let s = forbidden(&alice, &attrs(Method::PATCH, "/api/v1/namespaces/default/pods/web-0_member1", "")).to_json();
        assert_eq!(
            s,
            serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "pods \"web-0_member1\" is forbidden: User \"alice\" cannot patch resource \"pods\" in API group \"\" in the namespace \"default\"",
                "reason": "Forbidden", "details": {"name": "web-0_member1", "kind": "pods"}, "code": 403
            })
        );
        let s = forbidden(&alice, &attrs(Method::GET, "/apis/apps/v1/deployments", "")).to_json();
        assert_eq!(s["message"], "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope");
        assert_eq!(s["details"], serde_json::json!({"group": "apps", "kind": "deployments"}));
        let s = forbidden(&alice, &attrs(Method::PUT, "/apis/apps/v1/namespaces/shop/deployments/web_m1/scale", "")).to_json();
        assert_eq!(s["message"], "deployments.apps \"web_m1\" is forbidden: User \"alice\" cannot update resource \"deployments/scale\" in API group \"apps\" in the namespace \"shop\"");
        let s = forbidden(&alice, &attrs(Method::GET, "/metrics", "")).to_json();
        assert_eq!(s["message"], "forbidden: User \"alice\" cannot get path \"/metrics\"");
        assert_eq!(s["details"], serde_json::json!({}));
    }

    #[test]
    fn websocket_exec_attach_and_portforward_also_need_create() {
        for sub in ["exec", "attach", "portforward"] {
            let path = format!("/api/v1/namespaces/default/pods/web-0_member1/{sub}");
            // A WebSocket upgrade is a GET: verb get, then create.
            let get = attrs(Method::GET, &path, "command=ls");
            assert_eq!(get.verb, "get");
            let create = upgrade_create_check(&get).unwrap_or_else(|| panic!("{sub}"));
            assert_eq!((create.verb.as_str(), &create.target), ("create", &get.target));
            // SPDY's POST is create already.
            let post = attrs(Method::POST, &path, "command=ls");
            assert_eq!(post.verb, "create");
            assert!(upgrade_create_check(&post).is_none());
        }
        for (method, path) in [
            (Method::GET, "/api/v1/namespaces/default/pods/web-0_member1/log"),
            (Method::GET, "/api/v1/namespaces/default/pods/web-0_member1/proxy/"),
            (Method::GET, "/api/v1/namespaces/default/pods/web-0_member1"),
            (Method::GET, "/apis/x.io/v1/namespaces/default/pods/p/exec"),
        ] {
            assert!(upgrade_create_check(&attrs(method, path, "")).is_none(), "{path}");
        }
        // A viewer (get, list, watch) may no longer exec over WebSocket.
        let viewer = user("alice", &[VIEWERS]);
        let get = attrs(Method::GET, "/api/v1/namespaces/default/pods/web-0_member1/exec", "");
        assert!(authorize(&viewer, &get, &[]));
        assert!(!authorize(&viewer, &upgrade_create_check(&get).unwrap(), &[]));
    }
}
