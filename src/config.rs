//! kubefold's configuration file (YAML) and its defaults. Every field is
//! operator documentation; `ops/kubefold.example.yaml` shows them all.

use std::net::SocketAddr;
use std::path::PathBuf;

use kubefold_actors::cluster::ClusterSpec;
use kubefold_engine::names::NameStyle;
use kubefold_engine::selection::{ResourceSelection, SelectionRule};
use kubefold_store::Durability;
use serde::Deserialize;

/// etcd as the shared log (kube-apiserver's `--etcd-*` flags).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`--etcd-servers URL[,URL]`).
    pub servers: Vec<String>,
    /// The prefix of every key kubefold writes (`--etcd-prefix`).
    #[serde(default = "default_etcd_prefix")]
    pub prefix: String,
    /// CA of the etcd servers' certificates (`--etcd-cafile`).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (`--etcd-certfile`), with `keyFile`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Client key (`--etcd-keyfile`).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Seconds of the replica's lease (`--etcd-lease-ttl`, 15 by default):
    /// how long its members wait for another owner after it dies.
    #[serde(default = "default_etcd_lease_ttl", rename = "leaseTTLSeconds")]
    pub lease_ttl_seconds: u64,
    /// The replica's id among those of the prefix (`--etcd-replica-id`;
    /// by default the host name and the listener's port).
    #[serde(default)]
    pub replica_id: Option<String>,
}

/// 15 s, as kube-controller-manager's leader election.
pub fn default_etcd_lease_ttl() -> u64 {
    15
}

/// `/kubefold`, as kube-apiserver's `/registry`.
pub fn default_etcd_prefix() -> String {
    "/kubefold".to_string()
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Address of the API listener.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Directory of the sled store (event log, index, checkpoints).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// How object names are served: `qualified` (`web-0_member1`) or `original`.
    #[serde(default)]
    pub name_style: NameStyle,
    /// Member clusters to aggregate.
    #[serde(default)]
    pub clusters: Vec<ClusterSpec>,
    /// Which resource types are aggregated, from which clusters and
    /// namespaces: rules of `targetCluster` (`clusterNames`, `labelSelector`
    /// on the clusters' `labels`) and `resourceSelectors` (`apiVersion`,
    /// `kind`, optional `namespace`), as Karmada's ResourceRegistry. Unset:
    /// every built-in type from every cluster. A selection set with
    /// `PUT /admin/v1/resources` is kept in the data dir and wins over this.
    #[serde(default)]
    pub resources: Option<Vec<SelectionRule>>,
    /// When a committed event is durable: `sync` (flushed before it is
    /// published to any client) or `periodic` (within `flushEveryMs`).
    #[serde(default = "default_durability")]
    pub durability: Durability,
    /// sled's background flush period, in milliseconds.
    #[serde(default = "default_flush_every_ms")]
    pub flush_every_ms: u64,
    /// The lowest resourceVersion to serve after: a data dir whose head is
    /// below it (one started empty on purpose, or restored from an older
    /// backup) continues above it, and older resourceVersions answer 410
    /// (0: no minimum).
    #[serde(default)]
    pub min_resource_version: u64,
    /// What the store does about damage found at start.
    #[serde(default)]
    pub store: StoreConfig,
    /// etcd as the log shared by several kubefold replicas (needs a build
    /// with the `etcd` feature): each replica keeps its data dir as its
    /// copy of the log.
    #[serde(default)]
    pub etcd: Option<EtcdConfig>,
    /// Retention of the event log (by count and by age) and compaction period.
    #[serde(default)]
    pub retention: kubefold_actors::aggregator::Retention,
    /// Client authentication (tokens, client certificates) and authorization rules.
    #[serde(default)]
    pub auth: kubefold_api::auth::AuthConfig,
    /// The audit log: file, kube-apiserver's audit policy, rotation.
    #[serde(default)]
    pub audit: kubefold_api::audit::AuditConfig,
    /// The admin API: which directories the kubeconfig files of members
    /// registered through it may be in (`kubeconfigDirs`).
    #[serde(default)]
    pub admin: kubefold_api::admin::AdminConfig,
    /// TLS of the API listener (certificate reloaded when it changes on disk).
    #[serde(default)]
    pub tls: Option<kubefold_api::tls::TlsConfig>,
    /// Serve plain HTTP on a non-loopback address (without it, kubefold
    /// refuses to start there without TLS; loopback is always allowed).
    #[serde(default)]
    pub allow_plain_http: bool,
    /// Scheduler-estimator endpoints: where the control plane's estimator
    /// Services are read from and how endpoints are probed.
    #[serde(default)]
    pub estimator: kubefold_actors::resolver::EstimatorConfig,
    /// A Karmada control plane whose `Cluster` objects are members beside
    /// `clusters` and whose `ResourceRegistry` objects are the resource
    /// selection.
    #[serde(default)]
    pub karmada: Option<crate::karmada::KarmadaConfig>,
    /// Seconds between watch bookmarks for clients that allow them; each
    /// such watch also gets one 2 s before its timeout.
    #[serde(default = "default_bookmark_interval_seconds")]
    pub bookmark_interval_seconds: u64,
    /// A watch takes newly committed events from the fan-out at most once
    /// per this many milliseconds and sends them to its client in one
    /// write; an event after a quieter spell goes at once. 0: every commit
    /// is taken and written at once.
    #[serde(default = "default_watch_flush_interval_ms")]
    pub watch_flush_interval_ms: u64,
    /// Lower bound of the randomised default watch timeout, in seconds
    /// (kube-apiserver's `--min-request-timeout`).
    #[serde(default = "default_min_request_timeout_seconds")]
    pub min_request_timeout_seconds: u64,
    /// How long an edit (update, patch, create, delete) waits, in seconds,
    /// until kubefold has ingested the member's change, so that a read right
    /// after it shows the change (read-your-writes). When the wait runs out
    /// the edit still succeeds, with a `Warning` header saying so.
    #[serde(default = "default_write_wait_seconds")]
    pub write_wait_seconds: u64,
    /// Seconds a client may take no byte of a response (its receive window
    /// closed) or leave sent bytes unacknowledged before kubefold closes its
    /// connection, releasing what the response held (a list's snapshot,
    /// buffers); 0: never.
    #[serde(default = "default_client_stall_timeout_seconds")]
    pub client_stall_timeout_seconds: u64,
    /// Send lists of more than 128 KiB gzip-compressed (level 1) to clients
    /// that accept it, as kube-apiserver does (client-go asks for it unless
    /// its `DisableCompression` is set, kubectl unless
    /// `--disable-compression`). Off: lists are always sent as they are
    /// (cheaper for kubefold's CPU when clients are near).
    #[serde(default = "default_compress_lists")]
    pub compress_lists: bool,
    /// Threads that run the cluster watchers (five nice steps below the process: requests first).
    #[serde(default = "default_watcher_threads")]
    pub watcher_threads: usize,
    /// Member relists (a member came back, a watch expired) that run at
    /// once; the others wait their turn (`kubefold_member_relists_waiting`).
    #[serde(default = "default_relist_concurrency")]
    pub relist_concurrency: usize,
    /// Initial lists (a member type the store holds nothing of: the first
    /// start, a member added) that run at once; nothing of them is served
    /// yet, and more at once sync a large fleet faster.
    #[serde(default = "default_initial_list_concurrency")]
    pub initial_list_concurrency: usize,
    /// Members whose metric series carry their own `cluster` label; the
    /// members after them share `cluster="_other"`.
    #[serde(default = "default_metrics_cluster_series")]
    pub metrics_cluster_series: usize,
    /// HTTP worker threads.
    #[serde(default = "default_http_workers")]
    pub http_workers: usize,
    /// Where a new object goes when its request names no member (no
    /// `/clusters/{c}` in the URL, no qualified `name_cluster`, no
    /// `kubefold.io/cluster` annotation): rules of `namespaces` (a list;
    /// empty: any), `labelSelector` (as `kubectl -l` writes it; unset: any)
    /// and `cluster`, the first that matches wins. Default: none (such a
    /// create is refused with 400 naming the ways to choose).
    #[serde(default)]
    pub placement: Vec<kubefold_api::placement::PlacementRule>,
    /// Open files (descriptors) kubefold keeps for its own use (the store,
    /// member connections, backups) beyond what client connections may
    /// take, out of its open-files limit (RLIMIT_NOFILE, whose soft limit
    /// it raises to the hard one at start). Connections take what is left
    /// at two descriptors each; the last sixteenth of them answer health
    /// checks and 503 with Retry-After to anything else, one request per
    /// connection; beyond, accept waits until connections close. Unset: a
    /// tenth of the limit, at least 64.
    #[serde(default = "default_file_descriptor_reserve")]
    pub file_descriptor_reserve: Option<usize>,
    /// Seconds between reads of the members' OpenAPI documents (a member
    /// that reconnects, or a change of the served types, is read at once).
    #[serde(default = "default_openapi_refresh_seconds")]
    pub openapi_refresh_seconds: u64,
    /// Seconds a forwarded stream (exec, attach, port-forward, proxy) may
    /// pass no byte either way before it is closed.
    #[serde(default = "default_stream_idle_timeout_seconds")]
    pub stream_idle_timeout_seconds: u64,
}

/// `127.0.0.1:8080`.
pub fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// `./kubefold-data`.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("kubefold-data")
}

/// `sync`.
pub fn default_durability() -> Durability {
    Durability::Sync
}

/// 500 ms (sled's default).
/// The `store` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// What to do when the data dir is found damaged at start.
    #[serde(default)]
    pub on_corruption: OnCorruption,
}

/// What to do when the data dir is found damaged at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCorruption {
    /// Move the damaged files aside (named in the log), start an empty
    /// store above the highest resourceVersion ever served, and list the
    /// members again.
    #[default]
    Repair,
    /// Refuse to start, naming the damage.
    Refuse,
}

pub fn default_flush_every_ms() -> u64 {
    500
}

/// 60 s, about kube-apiserver's bookmark frequency.
pub fn default_bookmark_interval_seconds() -> u64 {
    60
}

/// 20 ms: with 200 events a second across the fleet, a thousand watches
/// of every pod then write about four events at a time, for about a third
/// less CPU in kubefold and in their clients (BENCHMARKS.md), while a
/// watch's latency stays far under the 100 ms it is held to.
pub fn default_watch_flush_interval_ms() -> u64 {
    20
}

/// 1800 s, kube-apiserver's default `--min-request-timeout`.
pub fn default_min_request_timeout_seconds() -> u64 {
    1800
}

/// 10 s: a healthy member's watch delivers a change well within it.
pub fn default_write_wait_seconds() -> u64 {
    10
}

/// 60 s, kube-apiserver's default `--request-timeout` (which ends any
/// list still running then, however fast its client reads).
pub fn default_client_stall_timeout_seconds() -> u64 {
    60
}

/// On, as kube-apiserver's APIResponseCompression.
pub fn default_compress_lists() -> bool {
    true
}

/// 2 threads.
pub fn default_watcher_threads() -> usize {
    2
}

/// 32 lists.
pub fn default_relist_concurrency() -> usize {
    kubefold_actors::relists::DEFAULT_CONCURRENT_RELISTS
}

/// 128 lists.
pub fn default_initial_list_concurrency() -> usize {
    kubefold_actors::relists::DEFAULT_CONCURRENT_INITIAL_LISTS
}

/// 100 members.
pub fn default_metrics_cluster_series() -> usize {
    kubefold_actors::cluster_series::DEFAULT_CLUSTER_SERIES
}

/// 2 threads.
pub fn default_http_workers() -> usize {
    2
}

/// Unset: a tenth of the open-files limit, at least 64.
pub fn default_file_descriptor_reserve() -> Option<usize> {
    None
}

/// 60 s.
pub fn default_openapi_refresh_seconds() -> u64 {
    60
}

/// 4 h, kubelet's `streamingConnectionIdleTimeout`.
pub fn default_stream_idle_timeout_seconds() -> u64 {
    4 * 3600
}

impl Default for Config {
    fn default() -> Self {
        serde_saphyr::from_str("{}").unwrap_or_else(|_| unreachable!("every field has a default"))
    }
}

/// A YAML error of the config file as its line, column and kind, without
/// a word of the file: serde's messages quote the value that did not fit
/// (`invalid type: string "..."`) and the key that is unknown, and a
/// malformed file may have a token there.
pub fn yaml_error(error: &serde_saphyr::Error) -> String {
    let message = error.to_string();
    let kind = KINDS.iter().find(|k| message.contains(*k)).copied();
    let missing = message.split_once("missing field `").and_then(|(_, rest)| rest.split_once('`')).map(|(field, _)| field);
    let what = match (missing, kind) {
        // A missing field's name is one of the config's, not of the file.
        (Some(field), _) if field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => format!("missing field `{field}`"),
        (_, Some(kind)) => kind.to_string(),
        (_, None) => "not valid YAML".to_string(),
    };
    let hint = "see ops/kubefold.example.yaml for the fields";
    match error.location() {
        Some(at) => format!("{what} at line {}, column {} ({hint})", at.line(), at.column()),
        None => format!("{what} ({hint})"),
    }
}

/// Kinds of serde and YAML errors named by [`yaml_error`].
const KINDS: [&str; 11] = [
    "unknown field",
    "invalid type",
    "invalid boolean",
    "invalid number",
    "invalid integer",
    "invalid float",
    "invalid value",
    "invalid length",
    "unknown variant",
    "duplicate field",
    "duplicate entry",
];

impl Config {
    /// Reads a YAML config file. Errors name the file, line and column,
    /// never its contents.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        let config: Config = serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("config {}: {}", path.display(), yaml_error(&e)))?;
        config.validate()?;
        Ok(config)
    }

    /// The resource selection of the file (the default when unset).
    pub fn resource_selection(&self) -> ResourceSelection {
        match &self.resources {
            Some(rules) => ResourceSelection { rules: rules.clone() },
            None => ResourceSelection::default(),
        }
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.estimator.validate()?;
        self.resource_selection().validate().map_err(|e| anyhow::anyhow!("resources: {e}"))?;
        kubefold_api::placement::validate(&self.placement).map_err(|e| anyhow::anyhow!("{e}"))?;
        if self.tls.is_none() && !self.listen.ip().is_loopback() && !self.allow_plain_http {
            anyhow::bail!(
                "refusing to serve plain HTTP on {}: configure tls (--tls-cert-file, --tls-private-key-file) or set allowPlainHttp (--allow-plain-http)",
                self.listen
            );
        }
        if self.auth.client_ca_file.is_some() && self.tls.is_none() {
            anyhow::bail!("auth.clientCaFile needs tls (--tls-cert-file and --tls-private-key-file): client certificates come with TLS");
        }
        if self.auth.requestheader_client_ca_file.is_some() && self.tls.is_none() {
            anyhow::bail!("auth.requestheaderClientCaFile needs tls (--tls-cert-file and --tls-private-key-file): a front proxy is known by its client certificate");
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &self.clusters {
            if !kubefold_engine::names::is_valid_cluster_name(&c.name) {
                anyhow::bail!("cluster name {:?} must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)", c.name);
            }
            if !seen.insert(&c.name) {
                anyhow::bail!("cluster {:?} is configured twice", c.name);
            }
            c.check_target().map_err(|e| anyhow::anyhow!(e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_etcd_section_takes_a_lease_ttl_and_a_replica_id() {
        let config: Config = serde_saphyr::from_str("etcd:\n  servers: [http://127.0.0.1:2379]\n  leaseTTLSeconds: 3\n  replicaId: kubefold-a\n").unwrap();
        let etcd = config.etcd.unwrap();
        assert_eq!((etcd.lease_ttl_seconds, etcd.replica_id.as_deref(), etcd.prefix.as_str()), (3, Some("kubefold-a"), "/kubefold"));
        let config: Config = serde_saphyr::from_str("etcd:\n  servers: [http://127.0.0.1:2379]\n").unwrap();
        assert_eq!(config.etcd.unwrap().lease_ttl_seconds, 15, "15 s by default");
    }

    #[test]
    fn example_config_parses_and_defaults_hold() {
        let text = include_str!("../ops/kubefold.example.yaml");
        let config: Config = serde_saphyr::from_str(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.clusters.len(), 2);
        assert_eq!(config.admin.kubeconfig_dirs(&config.clusters), [PathBuf::from("/etc/kubefold")]);
        let defaults = Config::default();
        assert_eq!(defaults.admin.kubeconfig_dirs(&config.clusters), [PathBuf::from("/etc/kubefold")], "the configured members' directories");
        assert!(defaults.admin.kubeconfig_dirs(&defaults.clusters).is_empty(), "none without kubeconfig files");
        assert_eq!(defaults.listen, default_listen());
        assert_eq!(defaults.durability, Durability::Sync);
        assert_eq!(defaults.name_style, NameStyle::Qualified);
        assert_eq!(config.bookmark_interval_seconds, defaults.bookmark_interval_seconds);
        assert_eq!(config.watch_flush_interval_ms, defaults.watch_flush_interval_ms);
        assert_eq!(defaults.watch_flush_interval_ms, 20);
        assert_eq!(config.write_wait_seconds, defaults.write_wait_seconds);
        assert_eq!(defaults.write_wait_seconds, 10);
        assert_eq!(config.client_stall_timeout_seconds, defaults.client_stall_timeout_seconds);
        assert_eq!(defaults.client_stall_timeout_seconds, 60);
        assert_eq!(config.compress_lists, defaults.compress_lists);
        assert!(defaults.compress_lists);
        assert_eq!(defaults.resource_selection(), ResourceSelection::default());
        let selection = config.resource_selection();
        assert_eq!(selection.rules.len(), 2, "the example shows a rule for every cluster and one by label");
        let builtin: Vec<_> = kubefold_engine::resources::builtin().iter().map(|r| r.type_ref()).collect();
        let member1 = selection.plan("member1", &config.clusters[0].labels);
        assert!(builtin.iter().all(|t| member1.contains_key(t)), "the example keeps every built-in type");
        assert_eq!(config.clusters[1].labels.get("env").map(String::as_str), Some("prod"));
        let member2 = selection.plan("member2", &config.clusters[1].labels);
        assert_eq!(member2.len(), builtin.len() + 1, "member2 (env: prod) adds the widgets");
        assert!(defaults.placement.is_empty());
        assert_eq!(config.placement.len(), 2, "the example shows a rule by namespace and one by labels");
        assert_eq!(config.placement[0].namespaces, ["shop"]);
        assert_eq!(config.placement[1].label_selector.as_deref(), Some("tier in (db)"));
    }

    #[test]
    fn invalid_resource_selections_are_refused() {
        let c: Config = serde_saphyr::from_str("resources: [{resourceSelectors: [{apiVersion: v1, kind: Pod, namespace: Bad_NS}]}]").unwrap();
        let error = c.validate().unwrap_err().to_string();
        assert!(error.contains("rules[0].resourceSelectors[0].namespace"), "{error}");
        assert!(serde_saphyr::from_str::<Config>("resources: [{resourceSelector: []}]").is_err());
    }

    #[test]
    fn invalid_placement_rules_are_refused() {
        let c: Config = serde_saphyr::from_str("placement: [{labelSelector: 'a in ((', cluster: member1}]").unwrap();
        let error = c.validate().unwrap_err().to_string();
        assert!(error.contains("placement[0]") && error.contains("labelSelector"), "{error}");
        assert!(serde_saphyr::from_str::<Config>("placement: [{namespace: shop, cluster: member1}]").is_err());
    }

    #[test]
    fn plain_http_needs_loopback_or_consent() {
        let c: Config = serde_saphyr::from_str("listen: 0.0.0.0:8080").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("plain HTTP"));
        let c: Config = serde_saphyr::from_str("listen: 0.0.0.0:8080\nallowPlainHttp: true").unwrap();
        c.validate().unwrap();
        Config::default().validate().unwrap();
    }

    #[test]
    fn config_errors_name_the_line_never_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubefold.yaml");
        let secret = "cfg-s3cr3t-token-4d5e";
        for (text, line, kind) in [
            (format!("clusters:\n- name: a\n  url: http://x\n  token: {secret}\n  insecureSkipTlsVerify: {secret}\n"), 5, "invalid boolean"),
            (format!("clusters:\n- name: a\n  {secret}: x\n"), 3, "unknown field"),
            (format!("auth:\n  tokenAuthFile: \"{secret}\n"), 2, "not valid YAML"),
            (format!("clusters:\n- url: {secret}\n"), 2, "missing field `name`"),
            (format!("durability: {secret}\n"), 1, "unknown variant"),
        ] {
            std::fs::write(&path, &text).unwrap();
            let error = format!("{:#}", Config::load(&path).unwrap_err());
            assert!(!error.contains(secret), "{error}");
            assert!(error.contains(&format!("line {line},")) && error.contains(kind), "{text:?}: {error}");
            assert!(error.contains(&path.display().to_string()), "{error}");
        }
    }

    #[test]
    fn unknown_fields_and_bad_clusters_are_refused() {
        assert!(serde_saphyr::from_str::<Config>("listn: 1.2.3.4:5").is_err());
        let c: Config = serde_saphyr::from_str("clusters: [{name: Bad_Name, url: 'http://x'}]").unwrap();
        assert!(c.validate().is_err());
        let c: Config = serde_saphyr::from_str("clusters: [{name: a}]").unwrap();
        assert!(c.validate().is_err());
    }

    /// The fields a config struct accepts, read from serde's answer to an
    /// unknown field (every config struct denies unknown fields, so serde
    /// names the ones it expects); `None` when `yaml` is not refused that
    /// way (the value under the key is not a struct).
    fn fields_named_by_serde(yaml: &str) -> Option<Vec<String>> {
        let error = serde_saphyr::from_str::<Config>(yaml).err()?.to_string();
        let listed = error.split("unknown field `kubefold_probe`, expected ").nth(1)?;
        let listed = listed.lines().next().unwrap_or(listed);
        let listed = listed.strip_prefix("one of ").unwrap_or(listed);
        Some(listed.split(", ").flat_map(|f| f.split(" or ")).map(|f| f.trim_matches('`').to_string()).collect())
    }

    /// Every option of the configuration file as a dotted path
    /// (`auth.rules.verbs`), found by asking serde at each level.
    fn every_option() -> Vec<String> {
        /// `prefix`: the keys down to here, each with whether it holds a list.
        fn walk(prefix: &[(String, bool)], out: &mut Vec<String>) {
            // The probe as YAML nested under `prefix`; the last key's value a map or a list.
            let nest = |last_is_list: bool| {
                let mut yaml = "{kubefold_probe: 1}".to_string();
                for (depth, (key, is_list)) in prefix.iter().enumerate().rev() {
                    let list = if depth == prefix.len() - 1 { last_is_list } else { *is_list };
                    yaml = if list { format!("{{{key}: [{yaml}]}}") } else { format!("{{{key}: {yaml}}}") };
                }
                yaml
            };
            let (fields, is_list) = match fields_named_by_serde(&nest(false)) {
                Some(fields) => (fields, false),
                None if prefix.is_empty() => return,
                None => match fields_named_by_serde(&nest(true)) {
                    Some(fields) => (fields, true),
                    None => return,
                },
            };
            let mut here = prefix.to_vec();
            if let Some(last) = here.last_mut() {
                last.1 = is_list;
            }
            for field in fields {
                let mut path = here.clone();
                path.push((field, false));
                out.push(path.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join("."));
                walk(&path, out);
            }
        }
        let mut out = Vec::new();
        walk(&[], &mut out);
        out
    }

    /// The configuration reference (docs/configuration.md) names every
    /// option the configuration file accepts, and nothing it does not.
    #[test]
    fn the_configuration_reference_documents_every_option() {
        let options = every_option();
        assert!(options.len() > 30 && options.iter().any(|o| o == "auth.rules") && options.iter().any(|o| o == "retention.maxEvents"), "the walk finds the options: {options:?}");
        let reference = include_str!("../docs/configuration.md");
        let documented: std::collections::BTreeSet<&str> =
            reference.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
        let missing: Vec<&String> = options.iter().filter(|o| !documented.contains(o.as_str())).collect();
        assert!(missing.is_empty(), "options missing from docs/configuration.md: {missing:?}");
        let unknown: Vec<&&str> = documented.iter().filter(|d| !options.iter().any(|o| o == *d)).collect();
        assert!(unknown.is_empty(), "docs/configuration.md documents options that do not exist: {unknown:?}");
    }
}
