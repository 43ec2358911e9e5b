//! Authentication, authorization and per-client request limits, as one
//! actix-web middleware ([`Auth`]) in front of every path except `/livez`,
//! `/readyz` and `/healthz`.
//!
//! Authentication follows kube-apiserver: a verified client certificate
//! (`--client-ca-file`: CN is the user, O the groups) wins over a bearer token
//! from `--token-auth-file`; a request with neither is `system:anonymous` in
//! `system:unauthenticated` when anonymous access is on, else 401. An unknown
//! bearer token is always 401. Authenticated users are also in
//! `system:authenticated`.
//!
//! Authorization maps the request to Kubernetes attributes (verb, API group,
//! resource, subresource, namespace, name) plus the member `cluster`, then
//! allows it when one of these grants it:
//! - `kubefold:admins`: everything, `/admin/...`, `/metrics` and
//!   impersonation (`kubectl --as`, [`crate::impersonate`]) included;
//! - `kubefold:editors`: every resource verb on every resource;
//! - `kubefold:viewers`: get, list and watch on every resource except
//!   `secrets` (as Kubernetes' `view` role);
//! - any authenticated user: `GET` of discovery documents (`/api`, `/apis`,
//!   `/openapi/...`; kube-apiserver's `system:discovery`), anyone: `GET /version`;
//! - an extra [`Rule`] of the configuration.
//!
//! With no authenticator configured, authentication is off: every request is
//! served as `system:anonymous` with full access (a warning is logged).
//!
//! Denials are Kubernetes `Status` responses worded as kube-apiserver's.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Extensions, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, AUTHORIZATION};
use actix_web::http::Method;
use actix_web::HttpMessage;
use futures::future::{ready, LocalBoxFuture, Ready};
use kubefold_engine::status::Status;
use rustls::pki_types::CertificateDer;
use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::path::ApiPath;
use crate::request::{RequestInfo, RESOURCE_VERBS};

/// Group whose members may do everything, admin API and metrics included.
pub const ADMINS: &str = "kubefold:admins";
/// Group whose members may use every resource verb on every resource.
pub const EDITORS: &str = "kubefold:editors";
/// Group whose members may get, list and watch every resource but secrets.
pub const VIEWERS: &str = "kubefold:viewers";
/// The user of requests without credentials, when anonymous access is on.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of [`ANONYMOUS_USER`].
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Paths served to anyone, without authentication or limits.
const OPEN_PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];
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

/// Authentication and authorization settings (`auth:` in the config file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthConfig {
    /// Static bearer tokens (`--token-auth-file`), kube-apiserver's CSV format:
    /// `token,user,uid,"group1,group2"` per line; lines starting with `#` and
    /// blank lines are ignored. Read once at start.
    #[serde(default)]
    pub token_auth_file: Option<PathBuf>,
    /// CA bundle for client certificates (`--client-ca-file`). When set, a
    /// client certificate verified against it (by the TLS listener, which must
    /// be configured with the same file) authenticates its CN as the user and
    /// its O values as the groups. Requires TLS.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve requests without credentials as `system:anonymous` (group
    /// `system:unauthenticated`; `--anonymous-auth`). Default: false when an
    /// authenticator is configured, true otherwise (and then with full access:
    /// authentication is off).
    #[serde(default = "default_anonymous")]
    pub anonymous: Option<bool>,
    /// Extra authorization rules, beside the built-in groups
    /// `kubefold:viewers`, `kubefold:editors` and `kubefold:admins`.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Most requests of one client (a user, or the client IP for anonymous
    /// requests) being handled at once; more get 429 TooManyRequests with
    /// `Retry-After: 1`. A request counts until its whole response is sent
    /// (a long list while it streams); a long-running one (a watch, a log,
    /// [`is_long_running`]) only until its response starts, as
    /// kube-apiserver's max-in-flight exempts long-running requests.
    /// 0: no limit.
    #[serde(default = "default_max_requests_in_flight_per_client")]
    pub max_requests_in_flight_per_client: usize,
    /// Most long-running requests ([`is_long_running`]: watches, logs,
    /// exec and other streams) one client (as for
    /// `maxRequestsInFlightPerClient`) may hold open at once, each counted
    /// until its response ends; more get 429 TooManyRequests with
    /// `Retry-After: 1`, as kube-apiserver's max-in-flight filter answers.
    /// Each open watch holds a connection (a descriptor or two) and its
    /// buffer, so one client cannot take them all. 0: no limit.
    #[serde(default = "default_max_long_running_per_client")]
    pub max_long_running_per_client: usize,
    /// Bytes of events all the watches of one client (as for
    /// `maxRequestsInFlightPerClient`) may hold unread together, counting
    /// what each holds of its own: a JSON event line shared by several
    /// watches counts once, for the watch that encoded it. A watch
    /// that would take its client past it waits, as for its own buffer;
    /// when the client stays over it, its watch with the most unread bytes
    /// is closed with a 410 Expired ERROR event (it resumes from the last
    /// resourceVersion it read) and counted in
    /// `kubefold_watch_slow_closed_total{reason="client_budget"}`, as
    /// kube-apiserver closes a watcher that does not keep up. So one user's
    /// watches that never read cannot grow kubefold's memory beyond it.
    /// 0: no bound beyond each watch's own (4 MiB).
    #[serde(default = "default_watch_buffer_bytes_per_client")]
    pub watch_buffer_bytes_per_client: u64,
}

/// The same defaults as an empty `auth:` section.
impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            token_auth_file: None,
            client_ca_file: None,
            anonymous: default_anonymous(),
            rules: Vec::new(),
            max_requests_in_flight_per_client: default_max_requests_in_flight_per_client(),
            max_long_running_per_client: default_max_long_running_per_client(),
            watch_buffer_bytes_per_client: default_watch_buffer_bytes_per_client(),
        }
    }
}

/// Unset: decided by whether an authenticator is configured.
pub fn default_anonymous() -> Option<bool> {
    None
}

/// 100 requests.
pub fn default_max_requests_in_flight_per_client() -> usize {
    100
}

/// 2,000 requests: far more watches than a controller or a dashboard
/// opens, and a tenth of a usual 20,000 open-files limit.
pub fn default_max_long_running_per_client() -> usize {
    2000
}

/// 256 MiB.
pub fn default_watch_buffer_bytes_per_client() -> u64 {
    256 << 20
}

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
    /// Other paths allowed (`/metrics`, `/admin/v1/stats`, `/admin/*`), as
    /// RBAC's nonResourceURLs.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// Every cluster: `["*"]`.
pub fn default_rule_clusters() -> Vec<String> {
    vec!["*".to_string()]
}

/// What can go wrong building [`Auth`] from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token file could not be read.
    #[error("cannot read token file {path}")]
    TokenFileUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of the token file is malformed.
    #[error("token file {path}: {source}")]
    TokenFileInvalid {
        /// The file.
        path: PathBuf,
        /// Which line and why.
        #[source]
        source: TokenFileError,
    },
    /// A rule of the configuration is malformed.
    #[error("auth rule {index}: {reason}")]
    InvalidRule {
        /// Position of the rule in `rules`, from 0.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Anonymous access is off and nothing can authenticate a request.
    #[error("anonymous access is disabled but no authenticator (tokenAuthFile, clientCaFile) is configured: every request would be refused")]
    NoAuthenticator,
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A malformed line of a token file. Never contains the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TokenFileError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The user a request was authenticated as; in the request extensions
/// (`req.extensions().get::<User>()`) of every request past the middleware.
/// On the open health paths only when the caller may see their details:
/// it authenticated, or authentication is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User name (the token file's user, the certificate's CN, or `system:anonymous`).
    pub name: String,
    /// UID from the token file; empty otherwise.
    pub uid: String,
    /// Groups, `system:authenticated` or `system:unauthenticated` included.
    pub groups: Vec<String>,
}

impl User {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> User {
        User { name: ANONYMOUS_USER.to_string(), uid: String::new(), groups: vec![UNAUTHENTICATED_GROUP.to_string()] }
    }

    /// Whether the request carried no credential.
    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS_USER
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    fn authenticated(name: String, uid: String, mut groups: Vec<String>) -> User {
        if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.to_string());
        }
        User { name, uid, groups }
    }
}

/// The client certificate of a TLS connection, verified by the listener
/// (rustls, against `--client-ca-file`) during the handshake. Stored in the
/// connection data by [`on_connect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The leaf certificate, DER.
    pub der: CertificateDer<'static>,
    /// The subject's first CommonName, if any and if valid text.
    pub common_name: Option<String>,
    /// The subject's Organization values.
    pub organizations: Vec<String>,
}

impl PeerCertificate {
    /// Reads the subject of `der`; `None` when it is not an X.509 certificate.
    pub fn from_der(der: CertificateDer<'static>) -> Option<PeerCertificate> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        let subject = cert.subject();
        let common_name = subject.iter_common_name().find_map(|a| a.as_str().ok()).map(str::to_string);
        let organizations = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(str::to_string).collect();
        Some(PeerCertificate { der: der.clone(), common_name, organizations })
    }
}

/// The connection hook of the HTTPS listener: stores the verified client
/// certificate, if any, as a [`PeerCertificate`] in the connection data,
/// where [`Auth`] finds it. Pass it to `HttpServer::on_connect` before binding.
pub fn on_connect(connection: &dyn Any, data: &mut Extensions) {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    let Some(tls) = connection.downcast_ref::<Tls>() else {
        return;
    };
    let (_, session) = tls.get_ref();
    let Some(leaf) = session.peer_certificates().and_then(|chain| chain.first()) else {
        return;
    };
    match PeerCertificate::from_der(leaf.clone().into_owned()) {
        Some(cert) => {
            data.insert(cert);
        }
        None => warn!("Client certificate passed verification but its subject cannot be read; ignoring it."),
    }
}

/// Parses a token file (`token,user,uid,"group1,group2"` per line, kube-apiserver's
/// format): a map from token to user. Blank lines and lines starting with `#`
/// are skipped; a malformed line, an empty token or user, or a token defined twice
/// is an error naming the line (never the token).
pub fn parse_token_file(text: &str) -> Result<HashMap<String, User>, TokenFileError> {
    let mut tokens: HashMap<String, User> = HashMap::new();
    let mut defined_on: HashMap<String, usize> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        let fail = |reason: String| TokenFileError { line: line_number, reason };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields = split_csv_line(line).map_err(|r| fail(r.to_string()))?;
        if fields.len() < 3 {
            return Err(fail(format!(
                "expected at least 3 columns (token,user,uid[,\"group1,group2\"]), found {}",
                fields.len()
            )));
        }
        if fields.len() > 4 {
            return Err(fail(format!(
                "expected at most 4 columns, found {}: quote the groups column (\"group1,group2\")",
                fields.len()
            )));
        }
        let token = &fields[0];
        if token.is_empty() {
            return Err(fail("empty token".to_string()));
        }
        if token.chars().any(char::is_whitespace) {
            return Err(fail("the token contains whitespace".to_string()));
        }
        let name = fields[1].trim();
        if name.is_empty() {
            return Err(fail("empty user name".to_string()));
        }
        if let Some(first) = defined_on.get(token) {
            return Err(fail(format!("the token is already defined on line {first}")));
        }
        let groups = fields
            .get(3)
            .map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        defined_on.insert(token.clone(), line_number);
        tokens.insert(token.clone(), User::authenticated(name.to_string(), fields[2].trim().to_string(), groups));
    }
    Ok(tokens)
}

/// Splits one CSV line into fields: `,` separates, a field may be quoted with
/// `"` (a quote inside written `""`), leading spaces of a field are dropped
/// (Go's csv reader with TrimLeadingSpace, as kube-apiserver reads it).
fn split_csv_line(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(' ' | '\t')) {
            chars.next();
        }
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("unterminated quoted field"),
                }
            }
            fields.push(field);
            match chars.next() {
                None => return Ok(fields),
                Some(',') => continue,
                Some(_) => return Err("unexpected text after a closing quote"),
            }
        }
        loop {
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => {
                    fields.push(field);
                    break;
                }
                Some('"') => return Err("a quote inside an unquoted field (quote the whole field)"),
                Some(c) => field.push(c),
            }
        }
    }
}

/// The bearer token of an `Authorization: Bearer <token>` header
/// (kube-apiserver's rules: scheme case-insensitive, empty token ignored).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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

/// Whether a request is long-running, which kube-apiserver's max-in-flight
/// limit does not count once it started (`BasicLongRunningRequestCheck`
/// with the verbs `watch` and `proxy` and the subresources `attach`,
/// `exec`, `proxy`, `log` and `portforward`): any watch (also of kubefold's
/// admin streams) and those subresources.
pub fn is_long_running(info: &RequestInfo) -> bool {
    const SUBRESOURCES: [&str; 5] = ["attach", "exec", "proxy", "log", "portforward"];
    let subresource = info.subresource.as_deref().filter(|_| info.is_resource_request);
    info.verb == "watch" || info.verb == "proxy" || subresource.is_some_and(|s| SUBRESOURCES.contains(&s)) || info.watch
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
    fn validate(&self) -> Result<(), String> {
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

    fn matches_user(&self, user: &User) -> bool {
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
                resource_matches && cluster_matches
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

/// 401 Unauthorized, as kube-apiserver answers a missing or bad credential.
pub fn unauthorized() -> Status {
    Status::new(401, "Unauthorized", "Unauthorized")
}

/// 429 TooManyRequests with `Retry-After: 1`.
pub fn too_many_requests() -> Status {
    let mut status = Status::new(429, "TooManyRequests", "Too many requests, please try again later.");
    status.details = Some(kubefold_engine::status::StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
    status
}

/// 429 TooManyRequests with `Retry-After: 1`, for a client that holds
/// `maxLongRunningPerClient` watches or streams open already.
pub fn too_many_long_running() -> Status {
    let mut status = Status::new(429, "TooManyRequests", "Too many long-running requests (watches, logs, streams) open from this client, please try again later.");
    status.details = Some(kubefold_engine::status::StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
    status
}

/// Requests in flight per client.
#[derive(Debug)]
struct InFlight {
    max: usize,
    counts: Mutex<HashMap<String, usize>>,
}

/// A slot of [`InFlight`], released on drop.
struct InFlightGuard {
    in_flight: Arc<InFlight>,
    client: String,
}

impl InFlight {
    fn acquire(self: &Arc<Self>, client: String) -> Option<InFlightGuard> {
        if self.max == 0 {
            return Some(InFlightGuard { in_flight: self.clone(), client: String::new() });
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(client.clone()).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(InFlightGuard { in_flight: self.clone(), client })
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.in_flight.max == 0 {
            return;
        }
        let mut counts = self.in_flight.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    /// Token → user; `None` without a token file.
    tokens: Option<HashMap<String, User>>,
    /// Whether verified client certificates authenticate.
    client_certificates: bool,
    /// Whether requests without credentials are served as anonymous.
    anonymous: bool,
    /// No authenticator: everyone may do everything.
    open: bool,
    rules: Vec<Rule>,
    in_flight: Arc<InFlight>,
    /// Long-running requests open per client.
    long_running: Arc<InFlight>,
}

/// The authentication, authorization and request-limit middleware. Cheap to
/// clone (shared state): build it once with [`Auth::from_config`] and
/// `.wrap(auth.clone())` in every worker's `App`.
#[derive(Debug, Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

/// What [`Auth::admit`] found about an admitted request.
struct Admitted {
    user: User,
    attributes: RequestAttributes,
    /// Its slot of the client's requests in flight.
    slot: InFlightGuard,
    /// Its slot of the client's long-running requests, if it is one.
    long_running: Option<InFlightGuard>,
    client: Client,
}

/// The client a request is counted against in the per-client limits: the
/// user (`user:NAME`), or the client IP for anonymous requests
/// (`ip:ADDR`). In the request extensions of every admitted request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client(pub String);

/// Why a request was turned away.
enum Rejection {
    Unauthorized,
    Invalid(Status),
    TooManyRequests,
    TooManyLongRunning,
    Forbidden(Box<(User, RequestAttributes)>),
}

impl Auth {
    /// Builds the middleware: reads the token file and checks the rules.
    pub fn from_config(config: &AuthConfig) -> Result<Auth> {
        let tokens = match &config.token_auth_file {
            Some(path) => Some(read_token_file(path)?),
            None => None,
        };
        let client_certificates = config.client_ca_file.is_some();
        let any_authenticator = tokens.is_some() || client_certificates;
        let anonymous = config.anonymous.unwrap_or(!any_authenticator);
        if !anonymous && !any_authenticator {
            return Err(Error::NoAuthenticator);
        }
        for (index, rule) in config.rules.iter().enumerate() {
            rule.validate().map_err(|reason| Error::InvalidRule { index, reason })?;
        }
        let open = !any_authenticator;
        if open {
            warn!("No authenticator is configured (tokenAuthFile, clientCaFile): every request is served as system:anonymous with full access.");
        } else {
            info!(
                tokens = tokens.as_ref().map_or(0, HashMap::len),
                client_certificates,
                anonymous,
                rules = config.rules.len(),
                "Authentication enabled."
            );
        }
        Ok(Auth {
            inner: Arc::new(Inner {
                tokens,
                client_certificates,
                anonymous,
                open,
                rules: config.rules.clone(),
                in_flight: Arc::new(InFlight {
                    max: config.max_requests_in_flight_per_client,
                    counts: Mutex::new(HashMap::new()),
                }),
                long_running: Arc::new(InFlight {
                    max: config.max_long_running_per_client,
                    counts: Mutex::new(HashMap::new()),
                }),
            }),
        })
    }

    /// Whether authentication is off (no authenticator configured).
    pub fn is_open(&self) -> bool {
        self.inner.open
    }

    /// The decision this middleware takes for `user` doing `attributes`:
    /// everything when authentication is off, else [`authorize`] with the
    /// configured rules. Access reviews are answered by this same call.
    pub fn allows(&self, user: &User, attributes: &RequestAttributes) -> bool {
        self.inner.open || authorize(user, attributes, &self.inner.rules)
    }

    /// Whether an extra rule that applies to `user` is limited to some
    /// clusters: what it allows then depends on the cluster a request
    /// names, which a list of rules without a cluster cannot say.
    pub fn has_cluster_limited_rules(&self, user: &User) -> bool {
        self.inner.rules.iter().any(|r| r.matches_user(user) && !r.clusters.iter().any(|c| c == "*"))
    }

    /// Authenticates from the connection's client certificate or the bearer token.
    fn authenticate(&self, req: &ServiceRequest) -> Result<User, Rejection> {
        let inner = &self.inner;
        if inner.client_certificates {
            if let Some(cert) = req.conn_data::<PeerCertificate>() {
                // As kube-apiserver: a certificate without CN authenticates nobody.
                if let Some(cn) = cert.common_name.as_ref().filter(|cn| !cn.is_empty()) {
                    return Ok(User::authenticated(cn.clone(), String::new(), cert.organizations.clone()));
                }
            }
        }
        if let Some(tokens) = &inner.tokens {
            if let Some(token) = bearer_token(req.headers()) {
                return tokens.get(token).cloned().ok_or(Rejection::Unauthorized);
            }
        }
        if inner.anonymous {
            Ok(User::anonymous())
        } else {
            Err(Rejection::Unauthorized)
        }
    }

    /// Authenticates, counts and authorizes `req` (as the user it
    /// impersonates, if it may: [`crate::impersonate`]).
    fn admit(&self, req: &ServiceRequest) -> Result<Admitted, Rejection> {
        let user = self.authenticate(req)?;
        let client = if user.is_anonymous() {
            format!("ip:{}", req.peer_addr().map_or_else(|| "unknown".to_string(), |a| IpAddr::to_string(&a.ip())))
        } else {
            format!("user:{}", user.name)
        };
        let slot = self.inner.in_flight.acquire(client.clone()).ok_or(Rejection::TooManyRequests)?;
        // The per-client limits count the real caller; authorization sees
        // the user it impersonates.
        let user = match crate::impersonate::Impersonation::from_headers(req.headers()).map_err(Rejection::Invalid)? {
            None => user,
            Some(asked) => {
                if let Some(denied) = asked.checks().into_iter().find(|check| !self.allows(&user, check)) {
                    return Err(Rejection::Forbidden(Box::new((user, denied))));
                }
                debug!(user = %user.name, as_user = %asked.user, as_groups = ?asked.groups, "Request impersonates a user.");
                asked.user()
            }
        };
        let info = RequestInfo::of(&req.extensions(), req.method(), req.path(), req.query_string());
        let attributes = RequestAttributes::of(&info);
        if !self.allows(&user, &attributes) {
            return Err(Rejection::Forbidden(Box::new((user, attributes))));
        }
        let long_running = match is_long_running(&info) {
            true => Some(self.inner.long_running.acquire(client.clone()).ok_or(Rejection::TooManyLongRunning)?),
            false => None,
        };
        Ok(Admitted { user, attributes, slot, long_running, client: Client(client) })
    }
}

fn read_token_file(path: &Path) -> Result<HashMap<String, User>> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| Error::TokenFileUnreadable { path: path.to_path_buf(), source })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path) {
            // Group access is usual (root:kubefold 0640, a Kubernetes fsGroup); world access is not.
            if meta.permissions().mode() & 0o007 != 0 {
                warn!(path = %path.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777), "Token file is accessible to every user; make it mode 0600 or 0640.");
            }
        }
    }
    let tokens = parse_token_file(&text).map_err(|source| Error::TokenFileInvalid { path: path.to_path_buf(), source })?;
    let users: HashSet<&str> = tokens.values().map(|u| u.name.as_str()).collect();
    debug!(path = %path.display(), tokens = tokens.len(), users = users.len(), "Token file read.");
    Ok(tokens)
}

fn is_open_path(path: &str) -> bool {
    OPEN_PATHS.iter().any(|open| {
        path.strip_prefix(open).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// A response body that holds its request's in-flight slot until it is
/// sent (or dropped because its client went away).
pub struct Counted<B> {
    body: B,
    _slot: Option<InFlightGuard>,
    _long_running: Option<InFlightGuard>,
}

impl<B: MessageBody + Unpin> MessageBody for Counted<B> {
    type Error = B::Error;

    fn size(&self) -> actix_web::body::BodySize {
        self.body.size()
    }

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<actix_web::web::Bytes, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_next(cx)
    }

    fn try_into_bytes(self) -> Result<actix_web::web::Bytes, Self> {
        let Counted { body, _slot, _long_running } = self;
        body.try_into_bytes().map_err(|body| Counted { body, _slot, _long_running })
    }
}

impl<S, B> Transform<S, ServiceRequest> for Auth
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Counted<B>>>;
    type Error = actix_web::Error;
    type Transform = AuthMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(AuthMiddleware { service, auth: self.clone() }))
    }
}

/// The per-worker service of [`Auth`].
#[derive(Debug)]
pub struct AuthMiddleware<S> {
    service: S,
    auth: Auth,
}

impl<S, B> Service<ServiceRequest> for AuthMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Counted<B>>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        if is_open_path(req.path()) {
            // Open to anyone; their details (which members are synced) only
            // to an authenticated caller, or to everyone when authentication is off.
            if self.auth.inner.open {
                req.extensions_mut().insert(User::anonymous());
            } else if let Some(user) = self.auth.authenticate(&req).ok().filter(|u| !u.is_anonymous()) {
                req.extensions_mut().insert(user);
            }
            let response = self.service.call(req);
            return Box::pin(async move { Ok(response.await?.map_body(|_, body| Counted { body, _slot: None, _long_running: None }).map_into_left_body()) });
        }
        match self.auth.admit(&req) {
            Ok(Admitted { user, attributes, slot, long_running, client }) => {
                req.extensions_mut().insert(user);
                req.extensions_mut().insert(attributes);
                req.extensions_mut().insert(client);
                let response = self.service.call(req);
                Box::pin(async move {
                    let response = response.await;
                    // A long-running request's in-flight slot is released
                    // when its response starts, any other's with its body;
                    // its long-running slot with its body.
                    let slot = long_running.is_none().then_some(slot);
                    Ok(response?.map_body(|_, body| Counted { body, _slot: slot, _long_running: long_running }).map_into_left_body())
                })
            }
            Err(rejection) => {
                let status = match rejection {
                    Rejection::Invalid(status) => status,
                    Rejection::Unauthorized => {
                        debug!(path = req.path(), peer = ?req.peer_addr(), "Request unauthenticated.");
                        unauthorized()
                    }
                    Rejection::TooManyRequests => {
                        debug!(path = req.path(), peer = ?req.peer_addr(), "Too many requests in flight from one client.");
                        too_many_requests()
                    }
                    Rejection::TooManyLongRunning => {
                        debug!(path = req.path(), peer = ?req.peer_addr(), "Too many long-running requests open from one client.");
                        too_many_long_running()
                    }
                    Rejection::Forbidden(denied) => {
                        let (user, attributes) = *denied;
                        info!(user = %user.name, groups = ?user.groups, verb = %attributes.verb, path = req.path(), "Request forbidden.");
                        forbidden(&user, &attributes)
                    }
                };
                metrics::counter!("kubefold_auth_rejected_total", "reason" => status.reason.clone()).increment(1);
                let response = crate::respond::status(&status);
                Box::pin(ready(Ok(req.into_response(response).map_into_right_body())))
            }
        }
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
    fn token_file_reads_kube_apiserver_format() {
        let text = "# comment\n\nt1,alice,1001,\"kubefold:viewers,team-a\"\n  t2, bob ,1002\nt3,carol,,\"\"\r\nt4,dave,1004,ops\n";
        let tokens = parse_token_file(text).unwrap();
        assert_eq!(tokens.len(), 4);
        assert_eq!(tokens["t1"].name, "alice");
        assert_eq!(tokens["t1"].uid, "1001");
        assert_eq!(tokens["t1"].groups, ["kubefold:viewers", "team-a", AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t2"].name, "bob");
        assert_eq!(tokens["t2"].groups, [AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t3"].uid, "");
        assert_eq!(tokens["t3"].groups, [AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t4"].groups, ["ops", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn token_file_quotes_and_spaces() {
        let tokens = parse_token_file("\"t,1\",\"a \"\"b\"\"\",u, \" g1 , g2 \"").unwrap();
        let u = &tokens["t,1"];
        assert_eq!(u.name, "a \"b\"");
        assert_eq!(u.groups, ["g1", "g2", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn token_file_errors_name_the_line_not_the_token() {
        let cases = [
            ("t1,alice,1\nsecret-token,bob\n", 2, "at least 3 columns"),
            ("# c\nsecret-token,alice,1,g1,g2\n", 2, "quote the groups"),
            (",alice,1\n", 1, "empty token"),
            ("secret-token,,1\n", 1, "empty user"),
            ("secret-token,alice,1\nsecret-token,bob,2\n", 2, "already defined on line 1"),
            ("secret-token,alice,1,\"g1,g2\n", 1, "unterminated"),
            ("secret-token,alice,1,\"g1\"x\n", 1, "after a closing quote"),
            ("secret-token,al\"ice,1\n", 1, "quote inside"),
            ("secret token,alice,1\n", 1, "whitespace"),
        ];
        for (text, line, reason) in cases {
            let err = parse_token_file(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.reason.contains(reason), "{text:?}: {err}");
            assert!(!err.to_string().contains("secret"), "{text:?}: the error shows the token: {err}");
        }
    }

    #[test]
    fn bearer_tokens_follow_kube_apiserver() {
        let mut headers = HeaderMap::new();
        let mut with = |value: &str| {
            headers.insert(AUTHORIZATION, value.parse().unwrap());
            bearer_token(&headers).map(str::to_string)
        };
        assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("bearer abc extra").as_deref(), Some("abc"));
        assert_eq!(with("  Bearer abc  ").as_deref(), Some("abc"));
        assert_eq!(with("Basic YWxpY2U6cHc="), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer"), None);
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
    fn rules_match_users_verbs_resources_and_clusters() {
        let rules: Vec<Rule> = serde_yaml::from_str(
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
        let parse = |y: &str| serde_yaml::from_str::<Rule>(y).map_err(|e| e.to_string()).and_then(|r| r.validate());
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
    fn config_defaults_and_anonymous() {
        let c: AuthConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c, AuthConfig::default());
        assert_eq!(c.max_requests_in_flight_per_client, 100);
        assert_eq!(c.max_long_running_per_client, 2000);
        assert_eq!(c.watch_buffer_bytes_per_client, 256 << 20);
        let c2: AuthConfig = serde_yaml::from_str("{maxLongRunningPerClient: 3, watchBufferBytesPerClient: 1048576}").unwrap();
        assert_eq!((c2.max_long_running_per_client, c2.watch_buffer_bytes_per_client), (3, 1 << 20));
        assert!(Auth::from_config(&c).unwrap().is_open());
        assert!(serde_yaml::from_str::<AuthConfig>("tokenFile: x").is_err());
        let c = AuthConfig { anonymous: Some(false), ..c };
        assert!(matches!(Auth::from_config(&c), Err(Error::NoAuthenticator)));
        let c = AuthConfig { client_ca_file: Some("ca.pem".into()), anonymous: None, ..c };
        let auth = Auth::from_config(&c).unwrap();
        assert!(!auth.is_open() && !auth.inner.anonymous);
    }

    #[test]
    fn watches_logs_and_streams_are_long_running_lists_and_gets_are_not() {
        let long = |method: Method, path: &str, query: &str| is_long_running(&RequestInfo::new(&method, path, query));
        assert!(long(Method::GET, "/api/v1/pods", "watch=1"));
        assert!(long(Method::GET, "/clusters/m1/apis/apps/v1/namespaces/a/deployments", "watch=true&resourceVersion=5"));
        assert!(long(Method::GET, "/api/v1/namespaces/a/pods/p_m1/log", "follow=true"));
        assert!(long(Method::POST, "/api/v1/namespaces/a/pods/p_m1/exec", "command=sh"));
        assert!(long(Method::GET, "/admin/v1/estimators", "watch=true"));
        assert!(!long(Method::GET, "/api/v1/pods", ""));
        assert!(!long(Method::GET, "/api/v1/pods", "watch=false&limit=500"));
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p_m1", ""));
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p_m1/status", ""));
        assert!(!long(Method::PATCH, "/apis/apps/v1/namespaces/a/deployments/d_m1/scale", ""));
        assert!(!long(Method::GET, "/admin/v1/clusters", ""));
    }

    #[test]
    fn in_flight_slots_are_released() {
        let in_flight = Arc::new(InFlight { max: 2, counts: Mutex::new(HashMap::new()) });
        let a = in_flight.acquire("user:a".into()).unwrap();
        let b = in_flight.acquire("user:a".into()).unwrap();
        assert!(in_flight.acquire("user:a".into()).is_none());
        assert!(in_flight.acquire("user:b".into()).is_some());
        drop(a);
        let c = in_flight.acquire("user:a".into()).unwrap();
        drop((b, c));
        assert!(in_flight.counts.lock().unwrap().is_empty());
    }

    #[test]
    fn open_paths() {
        assert!(is_open_path("/livez") && is_open_path("/readyz") && is_open_path("/healthz"));
        assert!(is_open_path("/readyz/ping"));
        assert!(!is_open_path("/readyzz") && !is_open_path("/metrics") && !is_open_path("/api"));
    }
}
