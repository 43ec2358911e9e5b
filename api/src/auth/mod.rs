//! Authentication, authorization and per-client request limits, as one
//! actix-web middleware ([`Auth`]) in front of every path except `/livez`,
//! `/readyz` and `/healthz`, reading each request's
//! [`crate::request::RequestInfo`].
//!
//! - [`authn`]: who a request is: client certificates, bearer tokens,
//!   anonymous access.
//! - [`authz`]: what a user may do: the built-in groups and the extra
//!   [`Rule`]s; denials worded as kube-apiserver's.
//! - [`limits`]: requests and long-running requests per client.
//! - [`connection`]: the listener's connection hook keeping the verified
//!   client certificate.
//! - [`delegated`]: bearer tokens reviewed by a control plane
//!   (`--authentication-kubeconfig`, TokenReview) and requests its rules
//!   decide (`--authorization-kubeconfig`, SubjectAccessReview), cached.
//! - [`requestheader`]: users named by a front proxy's headers
//!   (`--requestheader-*`).
//! - [`middleware`]: the middleware itself ([`Auth`]).
//!
//! With no authenticator configured, authentication is off: every request is
//! served as `system:anonymous` with full access (a warning is logged).
//! Impersonation (`kubectl --as`) is [`crate::impersonate`].

pub mod authn;
pub mod authz;
pub mod connection;
pub mod delegated;
pub mod requestheader;
pub mod limits;
pub mod middleware;

use std::path::PathBuf;

use serde::Deserialize;

pub use authn::{parse_token_file, unauthorized, TokenFileError, User};
pub use authz::{attributes, authorize, default_rule_clusters, forbidden, RequestAttributes, ResourceAttributes, Rule, Target};
pub use connection::{on_connect, PeerCertificate};
pub use limits::{is_long_running, too_many_long_running, too_many_requests, Counted};
pub use middleware::{Auth, AuthMiddleware, Client};

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
    /// Kubeconfig of an API server (kube-apiserver, karmada-apiserver) that
    /// reviews bearer tokens no other authenticator knows
    /// (`--authentication-kubeconfig`): a `TokenReview` says who the token
    /// is, as for an aggregated API server. Its identity needs `create` on
    /// `tokenreviews`.
    #[serde(default)]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// Seconds a token review's answer is reused, authenticated or refused
    /// (`--authentication-token-webhook-cache-ttl`). Default 10.
    #[serde(default = "default_authentication_cache_ttl_seconds")]
    pub authentication_cache_ttl_seconds: u64,
    /// CA bundle of front proxies' client certificates
    /// (`--requestheader-client-ca-file`): on a connection with a client
    /// certificate it signs (and a CN of `requestheaderAllowedNames`), the
    /// user is taken from the request headers ([`requestheader`]). Requires
    /// TLS, which must be configured with the same file.
    #[serde(default)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// CNs of front proxies' certificates (`--requestheader-allowed-names`);
    /// empty: any certificate the CA signs.
    #[serde(default)]
    pub requestheader_allowed_names: Vec<String>,
    /// Headers naming the user, first non-empty wins
    /// (`--requestheader-username-headers`). Default `X-Remote-User`.
    #[serde(default = "default_requestheader_username_headers")]
    pub requestheader_username_headers: Vec<String>,
    /// Headers naming the groups (`--requestheader-group-headers`).
    /// Default `X-Remote-Group`.
    #[serde(default = "default_requestheader_group_headers")]
    pub requestheader_group_headers: Vec<String>,
    /// Prefixes of the headers of extra attributes
    /// (`--requestheader-extra-headers-prefix`). Default `X-Remote-Extra-`.
    #[serde(default = "default_requestheader_extra_headers_prefix")]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// Kubeconfig of an API server that decides what kubefold's own rules
    /// do not allow (`--authorization-kubeconfig`): a
    /// `SubjectAccessReview` per request, with the member cluster as the
    /// extra attribute `kubefold.io/cluster`, as for an aggregated API
    /// server. Its identity needs `create` on `subjectaccessreviews`.
    #[serde(default)]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// Seconds an allowed access review is reused
    /// (`--authorization-webhook-cache-authorized-ttl`). Default 10.
    #[serde(default = "default_authentication_cache_ttl_seconds")]
    pub authorization_authorized_ttl_seconds: u64,
    /// Seconds a refused access review is reused
    /// (`--authorization-webhook-cache-unauthorized-ttl`). Default 10.
    #[serde(default = "default_authentication_cache_ttl_seconds")]
    pub authorization_unauthorized_ttl_seconds: u64,
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
            authentication_kubeconfig: None,
            authentication_cache_ttl_seconds: default_authentication_cache_ttl_seconds(),
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: default_requestheader_username_headers(),
            requestheader_group_headers: default_requestheader_group_headers(),
            requestheader_extra_headers_prefix: default_requestheader_extra_headers_prefix(),
            authorization_kubeconfig: None,
            authorization_authorized_ttl_seconds: default_authentication_cache_ttl_seconds(),
            authorization_unauthorized_ttl_seconds: default_authentication_cache_ttl_seconds(),
            anonymous: default_anonymous(),
            rules: Vec::new(),
            max_requests_in_flight_per_client: default_max_requests_in_flight_per_client(),
            max_long_running_per_client: default_max_long_running_per_client(),
            watch_buffer_bytes_per_client: default_watch_buffer_bytes_per_client(),
        }
    }
}

/// 10 seconds ([`delegated::DEFAULT_CACHE_TTL`]).
pub fn default_authentication_cache_ttl_seconds() -> u64 {
    delegated::DEFAULT_CACHE_TTL.as_secs()
}

/// `X-Remote-User`.
pub fn default_requestheader_username_headers() -> Vec<String> {
    vec!["X-Remote-User".into()]
}

/// `X-Remote-Group`.
pub fn default_requestheader_group_headers() -> Vec<String> {
    vec!["X-Remote-Group".into()]
}

/// `X-Remote-Extra-`.
pub fn default_requestheader_extra_headers_prefix() -> Vec<String> {
    vec!["X-Remote-Extra-".into()]
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
    #[error("anonymous access is disabled but no authenticator (tokenAuthFile, clientCaFile, authenticationKubeconfig, requestheaderClientCaFile) is configured: every request would be refused")]
    NoAuthenticator,
    /// The request-header CA bundle cannot be used.
    #[error("requestheader client CA file {path}: {reason}")]
    RequestHeaderCa {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The kubeconfig of delegated authentication cannot be read.
    #[error("authentication kubeconfig {path}: {reason}")]
    DelegationKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
