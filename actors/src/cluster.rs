//! Member cluster connection settings, and kube clients built from them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Errors of connecting to a member.
#[derive(Debug, Error)]
pub enum Error {
    /// The server URL does not parse.
    #[error("cluster {cluster}: invalid server url {url:?}: {reason}")]
    InvalidUrl {
        /// The cluster.
        cluster: String,
        /// The URL given.
        url: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The kubeconfig could not be read or used.
    #[error("cluster {cluster}: kubeconfig {path}: {reason}")]
    KubeconfigFailed {
        /// The cluster.
        cluster: String,
        /// The kubeconfig file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The impersonator token file could not be read.
    #[error("cluster {cluster}: impersonator token file {path}: {reason}")]
    ImpersonatorTokenUnreadable {
        /// The cluster.
        cluster: String,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// kube could not build a client.
    #[error("cluster {cluster}: cannot build client: {source}")]
    ClientFailed {
        /// The cluster.
        cluster: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to reach one member cluster.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Cluster name (a DNS-1123 label); the suffix of qualified names.
    pub name: String,
    /// API server URL, for members reached without credentials (simulators,
    /// `kubectl proxy`). Exclusive with `kubeconfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Path of a kubeconfig file. Exclusive with `url` and `kubeconfigData`.
    /// A member registered through the admin API may name a file only in
    /// the directories of `admin.kubeconfigDirs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig given inline (its YAML text): for members registered
    /// through the admin API without a file on kubefold's host. Exclusive
    /// with `url` and `kubeconfig`; its relative file paths, if any, are
    /// relative to kubefold's working directory. A credential: never shown,
    /// never logged, left out of backups unless asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_data: Option<String>,
    /// Context of the kubeconfig to use; its current context when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Bearer token for `url` (never logged; redacted by the admin API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// PEM file of the CA that signs the member's serving certificate (for `url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Skip verification of the member's serving certificate (for `url`; testing only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    /// Labels of the cluster, matched by the `targetCluster.labelSelector`
    /// of resource selection rules (e.g. `env: prod`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Bearer token of an identity allowed to impersonate users on the
    /// member (Karmada's `impersonatorSecretRef`): forwarded edits and
    /// streams of an authenticated caller go to the member with this token
    /// and `Impersonate-User`, `-Group`, `-Uid`, `-Extra-*` of the caller,
    /// so that the member's RBAC decides and its audit log names the
    /// caller. Never logged; redacted by the admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonator_token: Option<String>,
    /// File holding that token (read again at each use, so a rotated
    /// token takes effect). Exclusive with `impersonatorToken`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonator_token_file: Option<PathBuf>,
    /// Whether forwarded edits and streams act as the caller (through
    /// impersonation) rather than as kubefold. Default: when an
    /// impersonator token is set. `true` without one impersonates with the
    /// member's own credentials, which must then hold the `impersonate`
    /// right; `false` keeps kubefold's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonate: Option<bool>,
    /// Speak HTTP/2 to a member served over plain HTTP (`url: http://...`)
    /// from the first byte, without asking (prior knowledge, RFC 9113
    /// §3.3), for members known to serve it (kubefold's simulator does).
    /// All of the member's watches and requests then share one connection.
    /// Members served over TLS negotiate HTTP/2 through ALPN whatever this
    /// says, as client-go does with kube-apiserver.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub h2c: bool,
}

/// What the admin API shows in place of a credential.
pub const REDACTED: &str = "<redacted>";

/// The store's metadata key of the clusters registered through the admin API
/// (a JSON array of [`ClusterSpec`]).
pub const REGISTRY_META_KEY: &str = "clusters";

/// The registry (the value of [`REGISTRY_META_KEY`]) without credentials,
/// for a backup that leaves them out; `None` when it does not parse (it is
/// then left out whole rather than copied with its credentials).
pub fn registry_without_credentials(registry: &[u8]) -> Option<Vec<u8>> {
    let specs: Vec<ClusterSpec> = serde_json::from_slice(registry).ok()?;
    let stripped: Vec<ClusterSpec> = specs.iter().map(ClusterSpec::without_credentials).collect();
    serde_json::to_vec(&stripped).ok()
}

/// Writes a backup of `store` to `out` (see [`kubefold_store::Store::backup`]):
/// with the registered members' credentials only when `include_credentials`.
/// Returns the number of records.
pub fn backup(store: &kubefold_store::Store, out: &mut impl std::io::Write, include_credentials: bool) -> kubefold_store::Result<u64> {
    if include_credentials {
        return store.backup(out);
    }
    store.backup_with(out, |name, value| {
        (name == REGISTRY_META_KEY).then(|| registry_without_credentials(value).unwrap_or_else(|| b"[]".to_vec()))
    })
}

/// Why a kubeconfig could not be used, without a word of its contents: a
/// YAML or schema error gives only its line and column (the parser's own
/// message quotes the lines around it, and a value of the wrong type, which
/// may be a token or a key), other errors are kube's, which quote nothing
/// from the file.
pub fn kubeconfig_reason(error: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as K;
    match error {
        K::Parse(e) => match e.location() {
            Some(at) => format!("not a valid kubeconfig (line {}, column {})", at.line(), at.column()),
            None => "not a valid kubeconfig".to_string(),
        },
        K::ReadConfig(io, _) => format!("cannot read it: {io}"),
        other => other.to_string(),
    }
}

/// Shows whether a secret is set, never its value.
pub struct Redacted<'a>(pub &'a Option<String>);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "<redacted>" } else { "none" })
    }
}

impl std::fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig)
            .field("kubeconfig_data", &Redacted(&self.kubeconfig_data))
            .field("context", &self.context)
            .field("token", &Redacted(&self.token))
            .field("ca_file", &self.ca_file)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("labels", &self.labels)
            .field("impersonator_token", &Redacted(&self.impersonator_token))
            .field("impersonator_token_file", &self.impersonator_token_file)
            .field("impersonate", &self.impersonate)
            .field("h2c", &self.h2c)
            .finish()
    }
}

/// The first request through a shared client of a TLS member, made once
/// and waited for by every user of the client ([`ClusterSpec::shared_client`]).
type FirstRequest = std::rc::Rc<tokio::sync::OnceCell<()>>;

thread_local! {
    /// [`ClusterSpec::shared_client`]'s clients of this thread, by member,
    /// each with the first request made through it (see there).
    static SHARED_CLIENTS: std::cell::RefCell<std::collections::HashMap<String, (ClusterSpec, kube::Client, FirstRequest)>> = Default::default();
    /// [`ClusterSpec::shared_impersonating_client`]'s clients of this
    /// thread, by member, with the settings and token they were built with.
    static IMPERSONATING_CLIENTS: std::cell::RefCell<std::collections::HashMap<String, ImpersonatingClient>> = Default::default();
}

/// A member's settings, its impersonator token then, and the client built from them.
type ImpersonatingClient = ((ClusterSpec, Option<String>), kube::Client);

impl ClusterSpec {
    /// A member reached at `url` without credentials.
    pub fn from_url(name: &str, url: &str) -> ClusterSpec {
        ClusterSpec {
            name: name.to_string(),
            url: Some(url.to_string()),
            kubeconfig: None,
            kubeconfig_data: None,
            context: None,
            token: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
            labels: BTreeMap::new(),
            impersonator_token: None,
            impersonator_token_file: None,
            impersonate: None,
            h2c: false,
        }
    }

    /// The spec as the admin API shows it: each credential (`token`,
    /// `kubeconfigData`) replaced by [`REDACTED`].
    pub fn redacted(&self) -> ClusterSpec {
        let mut spec = self.clone();
        for secret in [&mut spec.token, &mut spec.kubeconfig_data, &mut spec.impersonator_token] {
            if secret.is_some() {
                *secret = Some(REDACTED.to_string());
            }
        }
        spec
    }

    /// Takes each credential given as [`REDACTED`] (a spec read from the
    /// admin API and sent back) from `stored`, the spec it replaces; an
    /// error names the field when `stored` has no such credential.
    pub fn restore_redacted(&mut self, stored: Option<&ClusterSpec>) -> std::result::Result<(), String> {
        let pairs = [
            ("token", &mut self.token, stored.and_then(|s| s.token.clone())),
            ("kubeconfigData", &mut self.kubeconfig_data, stored.and_then(|s| s.kubeconfig_data.clone())),
            ("impersonatorToken", &mut self.impersonator_token, stored.and_then(|s| s.impersonator_token.clone())),
        ];
        for (field, secret, kept) in pairs {
            if secret.as_deref() == Some(REDACTED) {
                match kept {
                    Some(value) => *secret = Some(value),
                    None => return Err(format!("{field} is {REDACTED:?} but no {field} is stored for cluster {:?}: give the value", self.name)),
                }
            }
        }
        Ok(())
    }

    /// The spec without its credentials (`token`, `kubeconfigData`,
    /// `impersonatorToken`): what a backup holds unless credentials are
    /// asked for.
    pub fn without_credentials(&self) -> ClusterSpec {
        ClusterSpec { token: None, kubeconfig_data: None, impersonator_token: None, ..self.clone() }
    }

    /// Checks that exactly one way to reach the member is set (`url`,
    /// `kubeconfig`, `kubeconfigData`), and at most one impersonator token.
    pub fn check_target(&self) -> std::result::Result<(), String> {
        let set = [self.url.is_some(), self.kubeconfig.is_some(), self.kubeconfig_data.is_some()].iter().filter(|s| **s).count();
        if set != 1 {
            return Err(format!("cluster {:?}: set exactly one of url, kubeconfig and kubeconfigData", self.name));
        }
        if self.impersonator_token.is_some() && self.impersonator_token_file.is_some() {
            return Err(format!("cluster {:?}: set at most one of impersonatorToken and impersonatorTokenFile", self.name));
        }
        Ok(())
    }

    /// Whether forwarded edits and streams of an authenticated caller act
    /// as that caller ([`ClusterSpec::impersonate`]).
    pub fn impersonates(&self) -> bool {
        self.impersonate.unwrap_or(self.impersonator_token.is_some() || self.impersonator_token_file.is_some())
    }

    /// The impersonator token: `impersonatorToken`, or the contents of
    /// `impersonatorTokenFile` (trimmed); `None` without either.
    pub fn impersonator_token(&self) -> Result<Option<String>> {
        if let Some(token) = &self.impersonator_token {
            return Ok(Some(token.clone()));
        }
        let Some(path) = &self.impersonator_token_file else { return Ok(None) };
        let text = std::fs::read_to_string(path).map_err(|e| Error::ImpersonatorTokenUnreadable { cluster: self.name.clone(), path: path.clone(), reason: e.to_string() })?;
        Ok(Some(text.trim().to_string()))
    }

    /// The kube client settings of requests that impersonate a caller: the
    /// member's ([`ClusterSpec::config`]) with the impersonator token as
    /// the only credential, or the member's own credentials without one.
    pub async fn impersonating_config(&self) -> Result<kube::Config> {
        let mut config = self.config().await?;
        if let Some(token) = self.impersonator_token()? {
            config.auth_info = kube::config::AuthInfo { token: Some(secrecy::SecretString::from(token)), ..Default::default() };
        }
        Ok(config)
    }

    /// The client of [`ClusterSpec::impersonating_config`] for this
    /// thread, shared as [`ClusterSpec::shared_client`] is and built again
    /// when the settings or the impersonator token change.
    pub async fn shared_impersonating_client(&self) -> Result<kube::Client> {
        let token = self.impersonator_token()?;
        let key = (self.clone(), token);
        if let Some(client) = IMPERSONATING_CLIENTS.with(|c| c.borrow().get(&self.name).filter(|(k, _)| *k == key).map(|(_, client)| client.clone())) {
            return Ok(client);
        }
        let config = self.impersonating_config().await?;
        let client = build_client(config, self.h2c).map_err(|source| Error::ClientFailed { cluster: self.name.clone(), source })?;
        IMPERSONATING_CLIENTS.with(|c| c.borrow_mut().insert(self.name.clone(), (key, client.clone())));
        Ok(client)
    }

    /// Parses the `--cluster NAME=URL` / `--cluster NAME=PATH[#CONTEXT]` flag.
    pub fn parse_flag(flag: &str) -> std::result::Result<ClusterSpec, String> {
        let (name, target) = flag
            .split_once('=')
            .ok_or_else(|| format!("--cluster {flag:?}: expected NAME=URL or NAME=KUBECONFIG[#CONTEXT]"))?;
        if !kubefold_engine::names::is_valid_cluster_name(name) {
            return Err(format!(
                "--cluster {flag:?}: cluster name {name:?} must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)"
            ));
        }
        if target.starts_with("http://") || target.starts_with("https://") {
            return Ok(ClusterSpec::from_url(name, target));
        }
        let (path, context) = match target.split_once('#') {
            Some((p, c)) => (p, Some(c.to_string())),
            None => (target, None),
        };
        Ok(ClusterSpec { url: None, kubeconfig: Some(PathBuf::from(path)), context, ..ClusterSpec::from_url(name, "") })
    }

    /// This member's client for the calling thread, built at its first use
    /// there (and again when the member's settings change) and then shared
    /// by everything on the thread that talks to the member: the watchers of
    /// each of its types, forwarded requests. One connection pool and one
    /// trust store per member and thread instead of one per watcher: for an
    /// HTTPS member without a CA of its own, kube loads the system's CA
    /// bundle into every client it builds, about 3 ms and 117 KiB each (1,000
    /// clients built in a row), which was 10 of them per member with the
    /// built-in types. A client belongs to the runtime that built it (its
    /// request buffer's task runs there), and each kubefold thread that
    /// talks to members has a runtime of its own, hence one per thread.
    ///
    /// Over TLS the client learns that a member speaks HTTP/2 only once its
    /// first connection's handshake chose it (ALPN); requests made before
    /// that each open a connection of their own, and a watch started on one
    /// keeps it: the ten watches of a member starting together held seven
    /// connections where one carries them all. So the first user of a TLS
    /// member's client asks for its version, and every user waits for that
    /// answer (or its failure) before its own request. (A plain member over
    /// `h2c` is known to speak HTTP/2 from the start, and one over HTTP/1.1
    /// needs a connection per request in flight anyway.)
    pub async fn shared_client(&self) -> Result<kube::Client> {
        let found = SHARED_CLIENTS.with(|c| c.borrow().get(&self.name).filter(|(spec, ..)| spec == self).map(|(_, client, first)| (client.clone(), first.clone())));
        let (client, first) = match found {
            Some(found) => found,
            None => {
                let client = self.client().await?;
                #[cfg(test)]
                tests::BUILT_HERE.with(|built| built.set(built.get() + 1));
                let first = FirstRequest::default();
                SHARED_CLIENTS.with(|c| c.borrow_mut().insert(self.name.clone(), (self.clone(), client.clone(), first.clone())));
                (client, first)
            }
        };
        if !self.is_plain() {
            first.get_or_init(|| async {
                // Its failure is the member's own requests' to report.
                let _ = client.apiserver_version().await;
            })
            .await;
        }
        Ok(client)
    }

    /// Whether the member is spoken to over plain HTTP (no TLS).
    fn is_plain(&self) -> bool {
        self.url.as_deref().is_some_and(|url| url.starts_with("http://"))
    }

    /// Builds a kube client for this member. Must run inside a tokio runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        let config = self.config().await?;
        build_client(config, self.h2c).map_err(|source| Error::ClientFailed { cluster: self.name.clone(), source })
    }

    /// The kube client settings for this member.
    pub async fn config(&self) -> Result<kube::Config> {
        let config = match (&self.url, &self.kubeconfig) {
            (Some(url), _) => {
                let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| Error::InvalidUrl {
                    cluster: self.name.clone(),
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
                let plain_http = uri.scheme_str() == Some("http");
                let mut config = kube::Config::new(uri);
                // Watches are long; reads between lines are bounded by the watch timeout.
                config.read_timeout = Some(std::time::Duration::from_secs(330));
                config.connect_timeout = Some(std::time::Duration::from_secs(10));
                if let Some(token) = &self.token {
                    config.auth_info.token = Some(secrecy::SecretString::from(token.clone()));
                }
                if let Some(ca) = &self.ca_file {
                    config.root_cert_file = Some(ca.clone());
                }
                config.accept_invalid_certs = self.insecure_skip_tls_verify;
                // A member served over plain HTTP needs no trust store. Without
                // roots of its own, kube loads the system's for every client
                // (every watcher makes one): parsing the CA bundle was about a
                // third of kubefold's CPU while starting over 10 members.
                if plain_http {
                    config.root_cert = Some(Vec::new());
                }
                config
            }
            (None, Some(path)) => {
                let failed = |reason: String| Error::KubeconfigFailed {
                    cluster: self.name.clone(),
                    path: path.clone(),
                    reason,
                };
                let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| failed(kubeconfig_reason(&e)))?;
                let options = kube::config::KubeConfigOptions { context: self.context.clone(), ..Default::default() };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| failed(kubeconfig_reason(&e)))?
            }
            (None, None) => {
                let Some(text) = &self.kubeconfig_data else {
                    return Err(Error::InvalidUrl {
                        cluster: self.name.clone(),
                        url: String::new(),
                        reason: "none of url, kubeconfig and kubeconfigData is set".into(),
                    });
                };
                let failed = |reason: String| Error::KubeconfigFailed {
                    cluster: self.name.clone(),
                    path: PathBuf::from("(kubeconfigData)"),
                    reason,
                };
                let kubeconfig = kube::config::Kubeconfig::from_yaml(text).map_err(|e| failed(kubeconfig_reason(&e)))?;
                let options = kube::config::KubeConfigOptions { context: self.context.clone(), ..Default::default() };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| failed(kubeconfig_reason(&e)))?
            }
        };
        // kube retries 429, 503 and 504 itself, up to minutes, hiding a
        // failing member behind a request that seems to hang; the watcher
        // retries with its own backoff (and the member's Retry-After) and
        // shows each failure in the member's status.
        let mut config = config;
        config.default_retry = false;
        Ok(config)
    }
}

/// The most a member connection's read buffer grows to (hyper's default is
/// about 416 KiB). hyper grows a connection's buffer while a response comes
/// in faster than it is taken, and keeps it for as long as the connection
/// lives: the watch that carried a member's initial list of thousands of
/// objects (`sendInitialEvents`) held its 416 KiB while it stayed open.
/// A heap profile of kubefold synced over 200 members of 2,000 pods each
/// found 83.6 MB of the live heap in those buffers, 418 KB a member. Reads
/// of 64 KiB still take a list's bytes in few calls.
pub const MAX_READ_BUFFER: usize = 64 * 1024;

/// How long an HTTP/2 connection to a member may stay silent before
/// kubefold pings it, and how long the ping's answer may take before the
/// connection, and every watch on it, counts as lost: client-go's
/// `ReadIdleTimeout` and `PingTimeout` for its HTTP/2 connections to
/// kube-apiserver (`k8s.io/apimachinery/pkg/util/net`, 30 s and 15 s).
const HTTP2_PING_AFTER: std::time::Duration = std::time::Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// What one HTTP/2 stream from a member may have in flight: what a watch
/// or list may hold unread in kubefold before the member waits. Smaller
/// than client-go's 4 MiB: during a sync, a watcher thread decoding
/// hundreds of members' lists at once holds up to this much of each.
const HTTP2_STREAM_WINDOW: u32 = 1 << 20;
/// What one HTTP/2 connection may have in flight: more than all its
/// streams together, so that only a stream's own window ever stops it
/// (client-go: 1 GiB). The largest window HTTP/2 allows is 2^31 - 1.
const HTTP2_CONNECTION_WINDOW: u32 = 1 << 30;

/// Builds a member's kube client as [`kube::Client::try_from`] does (the
/// same connector, timeouts, base URI, retries, credentials and headers,
/// without kube's debug spans), but with reads buffered up to
/// [`MAX_READ_BUFFER`], and speaking HTTP/2 where the member does, as
/// client-go does: over TLS kubefold offers `h2` before `http/1.1` (ALPN)
/// and kube-apiserver picks `h2`; over plain HTTP it speaks HTTP/2 from the
/// first byte when `h2c` is set (prior knowledge: RFC 9113 §3.3), and
/// HTTP/1.1 otherwise. Over HTTP/2 all of a member's watches, lists and
/// forwarded requests share one connection (per kubefold thread) instead
/// of holding one each: 1,000 members with 10 types each kept 10,000
/// connections open over HTTP/1.1, with their buffers and tasks (a heap
/// profile: about 30 KB each). Upgrades (exec, attach, port-forward) do
/// not come here: they dial HTTP/1.1 connections of their own
/// (`kubefold_api::stream_proxy`). Settings only kube's own builder
/// handles (a proxy; exec credentials, whose client certificate expires)
/// get kube's client.
fn build_client(config: kube::Config, h2c: bool) -> std::result::Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    use tokio_rustls::rustls;
    use tower::ServiceBuilder;

    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let plain = config.cluster_url.scheme_str() == Some("http");
    // A plain member needs no TLS settings; kube makes them for every
    // client, each with a session cache of its own (about 45 KB a member).
    let tls = if plain { unused_tls_config() } else { config.rustls_client_config()? };
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e)))?;
        builder = builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = builder.enable_http1().enable_http2().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .http1_max_buf_size(MAX_READ_BUFFER)
            .http2_only(plain && h2c)
            // Each stream may have 1 MiB in flight and the connection as
            // much as all its streams together, as client-go's transport
            // has it (4 MiB a stream, 1 GiB the connection): a watch whose
            // reader is busy holds back only its own stream, never its
            // member's other watches (with a connection window no larger
            // than a stream's, one unread stream stops them all: hyper
            // issue 2899).
            .http2_initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .http2_initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .http2_keep_alive_interval(HTTP2_PING_AFTER)
            .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
            .timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
}

/// The TLS settings of plain members' connectors, which never use them:
/// one, shared.
fn unused_tls_config() -> tokio_rustls::rustls::ClientConfig {
    use tokio_rustls::rustls;
    static CONFIG: std::sync::OnceLock<rustls::ClientConfig> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Clients [`ClusterSpec::shared_client`] built on this thread.
        pub(super) static BUILT_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[tokio::test]
    async fn a_threads_watchers_share_one_client_per_member_until_its_settings_change() {
        let built = || BUILT_HERE.with(|b| b.get());
        let m1 = ClusterSpec::from_url("m1", "https://10.0.0.1:6443");
        for _ in 0..10 {
            m1.shared_client().await.unwrap();
        }
        assert_eq!(built(), 1, "one client for ten users of m1");
        ClusterSpec::from_url("m2", "https://10.0.0.2:6443").shared_client().await.unwrap();
        assert_eq!(built(), 2, "m2 has its own");
        let mut changed = m1.clone();
        changed.token = Some("rotated".into());
        changed.shared_client().await.unwrap();
        changed.shared_client().await.unwrap();
        assert_eq!(built(), 3, "m1's new settings get a new client, once");
        // Another thread (another runtime) builds its own.
        let other = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                changed.shared_client().await.unwrap();
                changed.shared_client().await.unwrap();
            });
            BUILT_HERE.with(|b| b.get())
        });
        assert_eq!(other.join().unwrap(), 1);
        assert_eq!(built(), 3);
    }

    #[test]
    fn a_member_impersonates_callers_when_it_has_an_impersonator_token_unless_told_otherwise() {
        let mut s = ClusterSpec::from_url("m1", "https://x");
        assert!(!s.impersonates());
        s.impersonator_token = Some("imp-s3cr3t".into());
        assert!(s.impersonates());
        assert!(!format!("{s:?}").contains("imp-s3cr3t"));
        assert!(!serde_json::to_string(&s.redacted()).unwrap().contains("imp-s3cr3t"));
        assert_eq!(s.without_credentials().impersonator_token, None);
        let mut sent_back = s.redacted();
        sent_back.restore_redacted(Some(&s)).unwrap();
        assert_eq!(sent_back.impersonator_token.as_deref(), Some("imp-s3cr3t"));
        s.impersonate = Some(false);
        assert!(!s.impersonates(), "switched off per cluster");
        let own = ClusterSpec { impersonate: Some(true), ..ClusterSpec::from_url("m2", "https://y") };
        assert!(own.impersonates(), "with the member's own credentials");
        let both = ClusterSpec { impersonator_token_file: Some("/t".into()), ..s.clone() };
        assert!(both.check_target().unwrap_err().contains("impersonatorTokenFile"));
        let parsed: ClusterSpec = serde_json::from_str(r#"{"name": "m3", "url": "https://z", "impersonatorTokenFile": "/run/imp", "impersonate": true}"#).unwrap();
        assert_eq!(parsed.impersonator_token_file.as_deref(), Some(std::path::Path::new("/run/imp")));
        assert_eq!(parsed.impersonate, Some(true));
    }

    #[tokio::test]
    async fn the_impersonator_token_replaces_the_members_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").unwrap();
        let mut s = ClusterSpec::from_url("m1", "http://127.0.0.1:1");
        s.token = Some("kubefold".into());
        s.impersonator_token_file = Some(file.clone());
        let config = s.impersonating_config().await.unwrap();
        use secrecy::ExposeSecret;
        assert_eq!(config.auth_info.token.as_ref().map(|t| t.expose_secret().to_string()).as_deref(), Some("from-file"));
        std::fs::write(&file, "rotated").unwrap();
        assert_eq!(s.impersonator_token().unwrap().as_deref(), Some("rotated"), "read again at each use");
        std::fs::remove_file(&file).unwrap();
        assert!(matches!(s.impersonator_token(), Err(Error::ImpersonatorTokenUnreadable { .. })));
        // Without an impersonator token, the member's own credentials.
        let own = ClusterSpec { impersonator_token_file: None, impersonate: Some(true), ..s };
        let config = own.impersonating_config().await.unwrap();
        assert_eq!(config.auth_info.token.as_ref().map(|t| t.expose_secret().to_string()).as_deref(), Some("kubefold"));
    }

    #[test]
    fn tokens_never_show() {
        let mut s = ClusterSpec::from_url("m1", "https://x");
        s.token = Some("s3cr3t".into());
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert!(!serde_json::to_string(&s.redacted()).unwrap().contains("s3cr3t"));
    }

    #[tokio::test]
    async fn kubeconfig_errors_name_the_line_not_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let secret = "kc-token-0f9e8d7c6b5a";
        // A malformed kubeconfig with the token on the line before the error.
        let text = format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {secret}\n    client-key-data: [unclosed\n"
        );
        let path = dir.path().join("broken.kubeconfig");
        std::fs::write(&path, &text).unwrap();
        let mut spec = ClusterSpec { url: None, kubeconfig: Some(path.clone()), ..ClusterSpec::from_url("m1", "") };
        let error = spec.client().await.err().expect("the kubeconfig is refused").to_string();
        assert!(!error.contains(secret), "{error}");
        assert!(error.contains("line") && error.contains("column") && error.contains(&path.display().to_string()), "{error}");
        // A value of the wrong type (a token where a boolean belongs), and a
        // file that is no kubeconfig at all.
        std::fs::write(&path, format!("clusters:\n- name: c\n  cluster:\n    insecure-skip-tls-verify: {secret}\n")).unwrap();
        let error = spec.client().await.err().expect("the kubeconfig is refused").to_string();
        assert!(!error.contains(secret) && error.contains("line 4"), "{error}");
        std::fs::write(&path, format!("root:x:0:0:{secret}:/root:/bin/bash\n")).unwrap();
        let error = spec.client().await.err().expect("the kubeconfig is refused").to_string();
        assert!(!error.contains(secret) && error.contains("not a valid kubeconfig"), "{error}");
        // Inline, the same.
        spec.kubeconfig = None;
        spec.kubeconfig_data = Some(text);
        let error = spec.client().await.err().expect("the kubeconfig is refused").to_string();
        assert!(!error.contains(secret) && error.contains("line 7"), "{error}");
        assert!(!format!("{spec:?}").contains(secret));
    }

    #[test]
    fn redacted_credentials_are_restored_and_left_out_of_backups() {
        let mut stored = ClusterSpec::from_url("m1", "https://x");
        stored.token = Some("s3cr3t".into());
        let mut sent = stored.redacted();
        assert_eq!(sent.token.as_deref(), Some(REDACTED));
        sent.restore_redacted(Some(&stored)).unwrap();
        assert_eq!(sent, stored);
        let mut new = ClusterSpec::from_url("m2", "https://y");
        new.token = Some(REDACTED.into());
        assert!(new.restore_redacted(None).unwrap_err().contains("token"));
        let inline = ClusterSpec { url: None, kubeconfig_data: Some("apiVersion: v1".into()), ..ClusterSpec::from_url("m3", "") };
        assert!(!serde_json::to_string(&inline.redacted()).unwrap().contains("apiVersion"));
        let registry = serde_json::to_vec(&vec![stored.clone(), inline]).unwrap();
        let stripped = String::from_utf8(registry_without_credentials(&registry).unwrap()).unwrap();
        assert!(!stripped.contains("s3cr3t") && !stripped.contains("apiVersion") && stripped.contains("m3"), "{stripped}");
        assert_eq!(registry_without_credentials(b"not json"), None);
        assert!(stored.check_target().is_ok());
        assert!(ClusterSpec { kubeconfig_data: Some("x".into()), ..stored }.check_target().is_err());
    }

    #[test]
    fn cluster_flags_parse() {
        let s = ClusterSpec::parse_flag("member1=http://127.0.0.1:1234").unwrap();
        assert_eq!(s.url.as_deref(), Some("http://127.0.0.1:1234"));
        let s = ClusterSpec::parse_flag("m2=/etc/kube/config#prod").unwrap();
        assert_eq!(s.kubeconfig, Some(PathBuf::from("/etc/kube/config")));
        assert_eq!(s.context.as_deref(), Some("prod"));
        assert!(ClusterSpec::parse_flag("Bad_Name=http://x").is_err());
        assert!(ClusterSpec::parse_flag("novalue").is_err());
    }

    #[tokio::test]
    async fn plain_http_members_load_no_trust_store() {
        let config = ClusterSpec::from_url("m1", "http://127.0.0.1:1234").config().await.unwrap();
        assert_eq!(config.root_cert, Some(Vec::new()));
        assert!(!config.default_retry);
        // Over HTTPS without a CA of its own a member is verified with the system's roots.
        let config = ClusterSpec::from_url("m1", "https://127.0.0.1:1234").config().await.unwrap();
        assert_eq!(config.root_cert, None);
        ClusterSpec::from_url("m1", "http://127.0.0.1:1234").client().await.unwrap();
    }
}
