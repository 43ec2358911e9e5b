//! `kubefold admin ...`: operator commands over the admin REST API
//! (`/admin/v1`, described in `ops/admin-openapi.yaml`) of a running kubefold.
//!
//! - `clusters list | get NAME | add NAME ... | remove NAME`: member clusters;
//! - `resources`, `stats`, `estimators`: tables of what kubefold serves;
//! - `resources get | set -f FILE`: the resource selection (which types are
//!   aggregated from which clusters and namespaces), shown or replaced;
//! - `compact`: compacts the event log now;
//! - `backup --out FILE`: streams a consistent backup to a file, with a
//!   progress line on stderr.
//!
//! Requests carry `--token` (or the first line of `--token-file`) as a bearer
//! token; `--ca-file` adds the CA of kubefold's serving certificate. Errors
//! are the server's Kubernetes `Status` (code, reason, message), prefixed with
//! the request that failed. Answers are read into small views that hold only
//! what is printed; `clusters get` prints the whole answer as YAML.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::{ArgGroup, Args, Subcommand};
use kubefold_actors::cluster::ClusterSpec;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// How long a request other than `backup` and `compact` may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a compaction may take (it scans the whole event log).
const COMPACT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long removing a member may take: over etcd the server waits up to
/// 60 s for the member's owner to delete its objects.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long connecting to kubefold may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time between two redraws of the backup progress line.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);
/// What an empty table cell shows, as kubectl shows it.
const NONE: &str = "<none>";

/// Flags of `kubefold admin`: where kubefold is, how to authenticate, and the command.
#[derive(Args)]
pub struct AdminArgs {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: AdminCommand,
}

/// Where kubefold is and how to authenticate (`kubefold admin` and `kubefold status`).
#[derive(Args)]
pub struct Connection {
    /// kubefold's API URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// Bearer token of a user in `kubefold:admins`.
    #[arg(long, conflicts_with = "token_file")]
    token: Option<String>,
    /// File whose first line is the bearer token (keeps it out of the process list).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// PEM bundle of the CA that signs kubefold's serving certificate (trusted beside the system roots).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Do not verify kubefold's serving certificate (testing only).
    #[arg(long)]
    insecure_skip_tls_verify: bool,
}

/// The commands of `kubefold admin`.
#[derive(Subcommand)]
enum AdminCommand {
    /// List, show, register and remove member clusters.
    Clusters {
        #[command(subcommand)]
        command: ClustersCommand,
    },
    /// Table of the aggregated resource types and their objects per member;
    /// `get` and `set -f FILE` show and replace the resource selection.
    Resources {
        #[command(subcommand)]
        command: Option<ResourcesCommand>,
    },
    /// Table of resource versions, counts, store size and open watches.
    Stats,
    /// Compact the event log now, as far as retention allows.
    Compact,
    /// Stream a consistent backup of the store into a file (`kubefold restore` reads it).
    Backup {
        /// The backup file to write (replaced when it exists; mode 0600).
        #[arg(long)]
        out: PathBuf,
        /// Keep the tokens and inline kubeconfigs of registered members
        /// (left out by default).
        #[arg(long)]
        include_credentials: bool,
    },
    /// Table of the members' scheduler-estimator endpoints and their last probe.
    Estimators,
    /// On etcd: table of the replicas, their leases, applied revision, lag
    /// and the members each owns.
    Replicas,
}

/// `kubefold admin resources ...`.
#[derive(Subcommand)]
enum ResourcesCommand {
    /// The resource selection in force and where it comes from, as YAML.
    Get,
    /// Replace the resource selection (persists across restarts): watchers
    /// start and stop at once, objects no longer selected are deleted.
    Set {
        /// YAML or JSON file (`-` for stdin): `{rules: [...]}`, or the list
        /// of rules alone as in the configuration's `resources` key.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
}

/// `kubefold admin clusters ...`.
#[derive(Subcommand)]
enum ClustersCommand {
    /// Table of every member: NAME SOURCE PHASE OBJECTS RELISTS RECONNECTS LAST-ERROR.
    List,
    /// One member with its per-resource status, as YAML.
    Get {
        /// The cluster's name.
        name: String,
    },
    /// Register a member and start watching it at once (persists across restarts).
    Add(AddArgs),
    /// Stop watching a member; its objects become DELETED events.
    Remove {
        /// The cluster's name.
        name: String,
    },
}

/// `kubefold admin clusters add`: the member's connection settings. Paths
/// are read by kubefold on its own host; relative ones are made absolute
/// against the current directory.
#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["url", "kubeconfig"])))]
struct AddArgs {
    /// Cluster name (a DNS-1123 label); the suffix of its objects' qualified names.
    name: String,
    /// API server URL of the member.
    #[arg(long)]
    url: Option<String>,
    /// Kubeconfig file of the member: kubefold reads it on its host, where
    /// it must be in one of the directories of `admin.kubeconfigDirs`.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Send the kubeconfig's contents (`kubeconfigData`) rather than its
    /// path: for a file kubefold cannot or may not read. Its credentials are
    /// then kept in kubefold's data dir, as a token is.
    #[arg(long, requires = "kubeconfig")]
    inline: bool,
    /// Context of the kubeconfig (default: its current context).
    #[arg(long, requires = "kubeconfig")]
    context: Option<String>,
    /// Bearer token for the member (with --url).
    #[arg(long, requires = "url", conflicts_with = "token_file")]
    token: Option<String>,
    /// File whose first line is the member's bearer token (with --url).
    #[arg(long, requires = "url")]
    token_file: Option<PathBuf>,
    /// PEM CA of the member's serving certificate (with --url).
    #[arg(long, requires = "url")]
    ca_file: Option<PathBuf>,
    /// Do not verify the member's serving certificate (with --url; testing only).
    #[arg(long, requires = "url")]
    insecure_skip_tls_verify: bool,
    /// Speak HTTP/2 to a plain-HTTP member without asking (prior knowledge;
    /// members over TLS negotiate HTTP/2 themselves).
    #[arg(long)]
    h2c: bool,
    /// A label of the cluster, KEY=VALUE (repeatable), for the label
    /// selectors of the resource selection.
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected KEY=VALUE"))?;
    Ok((key.to_string(), value.to_string()))
}

/// Runs one `kubefold admin` command, printing its result on stdout.
pub fn run(args: AdminArgs) -> anyhow::Result<()> {
    let api = AdminApi::new(&args.connection)?;
    let mut stdout = std::io::stdout().lock();
    match args.command {
        AdminCommand::Clusters { command } => match command {
            ClustersCommand::List => {
                let list: ClusterList = api.get(&["clusters"])?;
                write!(stdout, "{}", clusters_table(&list))?;
            }
            ClustersCommand::Get { name } => {
                let cluster: serde_json::Value = api.get(&["clusters", &name])?;
                write!(stdout, "{}", serde_saphyr::to_string(&cluster)?)?;
            }
            ClustersCommand::Add(add) => {
                let spec = add.spec()?;
                let request = api.request(Method::POST, &["clusters"], Some(REQUEST_TIMEOUT)).json(&spec);
                let cluster: ClusterView = read_json(api.send(request)?)?;
                writeln!(stdout, "cluster \"{}\" registered (phase {})", cluster.spec.name, cluster.status.phase)?;
            }
            ClustersCommand::Remove { name } => {
                let request = api.request(Method::DELETE, &["clusters", &name], Some(REMOVE_TIMEOUT));
                let removal: ClusterRemoval = read_json(api.send(request)?)?;
                writeln!(stdout, "cluster \"{}\" removed: {} objects deleted", removal.name, removal.deleted_objects)?;
            }
        },
        AdminCommand::Resources { command: None } => {
            let list: ResourceList = api.get(&["resources"])?;
            write!(stdout, "{}", resources_table(&list))?;
        }
        AdminCommand::Resources { command: Some(ResourcesCommand::Get) } => {
            let list: serde_json::Value = api.get(&["resources"])?;
            let shown = serde_saphyr::to_string(&serde_json::json!({"source": list["source"], "selection": list["selection"], "pending": list["pending"]}))?;
            write!(stdout, "{shown}")?;
        }
        AdminCommand::Resources { command: Some(ResourcesCommand::Set { file }) } => {
            let selection = read_selection(&file)?;
            let request = api.request(Method::PUT, &["resources"], Some(REQUEST_TIMEOUT)).json(&selection);
            let list: ResourceList = read_json(api.send(request)?)?;
            writeln!(
                stdout,
                "resource selection set: {} types served, {} waiting for discovery, {} objects deleted",
                list.items.len(),
                list.pending.len(),
                list.deleted_objects.unwrap_or(0)
            )?;
        }
        AdminCommand::Stats => {
            let stats: Stats = api.get(&["stats"])?;
            write!(stdout, "{}", stats_table(&stats))?;
        }
        AdminCommand::Compact => {
            let request = api.request(Method::POST, &["compact"], Some(COMPACT_TIMEOUT));
            let result: CompactResult = read_json(api.send(request)?)?;
            writeln!(
                stdout,
                "event log compacted up to resourceVersion {}: {} events removed, {} kept",
                result.floor, result.removed, result.kept
            )?;
        }
        AdminCommand::Backup { out, include_credentials } => backup(&api, &out, include_credentials)?,
        AdminCommand::Estimators => {
            let rows: Vec<EstimatorRow> = api.get(&["estimators"])?;
            write!(stdout, "{}", estimators_table(&rows))?;
        }
        AdminCommand::Replicas => {
            let replicas: Replicas = api.get(&["replicas"])?;
            write!(stdout, "{}", replicas_table(&replicas))?;
        }
    }
    stdout.flush()?;
    Ok(())
}

impl AddArgs {
    /// The registration body.
    fn spec(&self) -> anyhow::Result<ClusterSpec> {
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => Some(read_token_file(file)?),
            (None, None) => None,
        };
        let (kubeconfig, kubeconfig_data) = match (&self.kubeconfig, self.inline) {
            (Some(path), true) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                (None, Some(text))
            }
            (path, _) => (path.as_deref().map(absolute).transpose()?, None),
        };
        Ok(ClusterSpec {
            name: self.name.clone(),
            url: self.url.clone(),
            kubeconfig,
            kubeconfig_data,
            context: self.context.clone(),
            token,
            ca_file: self.ca_file.as_deref().map(absolute).transpose()?,
            insecure_skip_tls_verify: self.insecure_skip_tls_verify,
            labels: self.labels.iter().cloned().collect(),
            impersonator_token: None,
            impersonator_token_file: None,
            impersonate: None,
            h2c: self.h2c,
        })
    }
}

/// Reads a selection file (YAML or JSON, `-` for stdin) into the body of
/// `PUT /admin/v1/resources`; the server validates it.
fn read_selection(file: &Path) -> anyhow::Result<serde_json::Value> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let value: serde_json::Value = serde_saphyr::from_str(&text).with_context(|| format!("{}: not YAML or JSON", file.display()))?;
    Ok(match value {
        rules @ serde_json::Value::Array(_) => serde_json::json!({"rules": rules}),
        other => other,
    })
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot make {} absolute", path.display()))
}

/// The first line of a token file, trimmed.
fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        bail!("token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// The admin API of one kubefold, with the caller's credentials.
pub(crate) struct AdminApi {
    http: Client,
    server: Url,
    token: Option<String>,
}

impl AdminApi {
    pub(crate) fn new(args: &Connection) -> anyhow::Result<AdminApi> {
        let server = Url::parse(&args.server)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && !url.cannot_be_a_base())
            .with_context(|| format!("--server {:?} must be an http:// or https:// URL", args.server))?;
        let token = match (&args.token, &args.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => Some(read_token_file(file)?),
            (None, None) => None,
        };
        // No total timeout on the client: a backup streams as long as it takes.
        let mut builder = Client::builder()
            .use_rustls_tls()
            .user_agent(concat!("kubefold-admin/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(None::<Duration>)
            .danger_accept_invalid_certs(args.insecure_skip_tls_verify);
        if let Some(path) = &args.ca_file {
            let pem = std::fs::read(path).with_context(|| format!("cannot read --ca-file {}", path.display()))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-file {} is not a PEM certificate bundle", path.display()))?;
            if certificates.is_empty() {
                bail!("--ca-file {} holds no certificate", path.display());
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().context("cannot build the HTTP client")?;
        Ok(AdminApi { http, server, token })
    }

    /// The URL of `/admin/v1/{segments...}`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.server.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["admin", "v1"]).extend(segments);
        }
        url
    }

    /// A request to `/admin/v1/{segments...}` with the bearer token.
    fn request(&self, method: Method, segments: &[&str], timeout: Option<Duration>) -> RequestBuilder {
        let mut request = self.http.request(method, self.url(segments));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        request
    }

    /// Sends a request; an answer other than 2xx becomes an error saying
    /// which request failed and the server's `Status`.
    fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let request = request.build().context("cannot build the request")?;
        let what = format!("{} {}", request.method(), request.url().path());
        let response = self.http.execute(request).with_context(|| format!("{what}: cannot reach kubefold at {}", self.server))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(anyhow!("{what}: {}", describe_failure(response)))
    }

    /// GETs `/admin/v1/{segments...}` and reads the JSON answer.
    pub(crate) fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> anyhow::Result<T> {
        read_json(self.send(self.request(Method::GET, segments, Some(REQUEST_TIMEOUT)))?)
    }
}

/// Reads a JSON answer into `T`.
fn read_json<T: DeserializeOwned>(response: Response) -> anyhow::Result<T> {
    let what = response.url().path().to_string();
    response.json().with_context(|| format!("{what}: the answer is not what this kubefold admin expects"))
}

/// A Kubernetes `Status` as the server sends it.
#[derive(Deserialize)]
struct ApiStatus {
    code: u16,
    reason: String,
    message: String,
}

/// The error of a failed answer: its `Status` (code, reason, message), or
/// the HTTP status and the start of a body that is not one.
fn describe_failure(response: Response) -> String {
    let code = response.status();
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return match response.json::<ApiStatus>() {
            Ok(status) => format!("{} {}: {}", status.code, status.reason, status.message),
            Err(e) => format!("{code} (the error body is not a Status: {e})"),
        };
    }
    let text = response.text().unwrap_or_default();
    let text: String = text.trim().chars().take(200).collect();
    if text.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {text}")
    }
}

/// `GET /admin/v1/clusters`.
#[derive(Deserialize)]
pub(crate) struct ClusterList {
    pub(crate) items: Vec<ClusterView>,
}

/// One member as `GET /admin/v1/clusters[/NAME]` shows it (the printed fields).
#[derive(Deserialize)]
pub(crate) struct ClusterView {
    pub(crate) spec: ClusterName,
    pub(crate) source: String,
    pub(crate) status: ClusterStatus,
}

/// The name of a cluster spec.
#[derive(Deserialize)]
pub(crate) struct ClusterName {
    pub(crate) name: String,
}

/// A member's status, summed over its watchers.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterStatus {
    pub(crate) phase: String,
    pub(crate) last_error: Option<String>,
    pub(crate) reconnects: u64,
    pub(crate) relists: u64,
    /// Time since every type of the member was last synced.
    #[serde(default)]
    pub(crate) lag_seconds: f64,
    pub(crate) resources: BTreeMap<String, WatcherObjects>,
}

/// The object count of one watcher.
#[derive(Deserialize)]
pub(crate) struct WatcherObjects {
    pub(crate) objects: u64,
    /// connecting, synced or stale.
    #[serde(default)]
    pub(crate) state: String,
}

/// `DELETE /admin/v1/clusters/NAME`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterRemoval {
    name: String,
    deleted_objects: u64,
}

/// `GET /admin/v1/resources` (and the answer to `PUT`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceList {
    items: Vec<AggregatedResource>,
    #[serde(default)]
    pending: Vec<serde_json::Value>,
    #[serde(default)]
    deleted_objects: Option<u64>,
}

/// One aggregated resource type.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregatedResource {
    api_version: String,
    kind: String,
    resource: String,
    namespaced: bool,
    objects: u64,
    clusters: BTreeMap<String, u64>,
}

/// `GET /admin/v1/stats`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stats {
    pub(crate) head_resource_version: u64,
    pub(crate) compacted_resource_version: u64,
    pub(crate) objects: u64,
    pub(crate) events: u64,
    pub(crate) data_dir_bytes: u64,
    pub(crate) watches: u64,
    pub(crate) watch_clients_by_user_agent: BTreeMap<String, u64>,
    pub(crate) clusters: u64,
}

/// `POST /admin/v1/compact`.
#[derive(Deserialize)]
struct CompactResult {
    floor: u64,
    removed: u64,
    kept: u64,
}

/// `GET /admin/v1/replicas`.
#[derive(Deserialize)]
struct Replicas {
    items: Vec<ReplicaRow>,
}

/// One replica of `GET /admin/v1/replicas`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaRow {
    id: String,
    address: String,
    lease: String,
    lease_remaining_seconds: u64,
    applied_revision: u64,
    lag_revisions: u64,
    owned: Vec<String>,
}

/// One row of `GET /admin/v1/estimators`.
#[derive(Deserialize)]
pub(crate) struct EstimatorRow {
    cluster: String,
    addresses: Vec<String>,
    rule: String,
    #[serde(default)]
    error: Option<String>,
    probe: Option<EstimatorProbe>,
}

/// The last probe of an estimator endpoint.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EstimatorProbe {
    reachable: bool,
    #[serde(default)]
    latency_ms: Option<f64>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    failure: Option<String>,
    time: String,
}

/// Columns padded to their widest cell, three spaces apart, as kubectl
/// prints tables; the last column is not padded. Line breaks inside a cell
/// become spaces.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let clean = |cell: &str| cell.split(['\n', '\r']).map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ");
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| clean(c)).collect()).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count() + 3));
            }
        }
        out.push('\n');
    }
    out
}

fn clusters_table(list: &ClusterList) -> String {
    let rows: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|c| {
            let objects: u64 = c.status.resources.values().map(|w| w.objects).sum();
            vec![
                c.spec.name.clone(),
                c.source.clone(),
                c.status.phase.clone(),
                objects.to_string(),
                c.status.relists.to_string(),
                c.status.reconnects.to_string(),
                c.status.last_error.clone().unwrap_or_else(|| NONE.to_string()),
            ]
        })
        .collect();
    table(&["NAME", "SOURCE", "PHASE", "OBJECTS", "RELISTS", "RECONNECTS", "LAST-ERROR"], &rows)
}

fn resources_table(list: &ResourceList) -> String {
    let rows: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|r| {
            let clusters = r.clusters.iter().map(|(c, n)| format!("{c}={n}")).collect::<Vec<_>>().join(",");
            vec![
                r.api_version.clone(),
                r.kind.clone(),
                r.resource.clone(),
                r.namespaced.to_string(),
                r.objects.to_string(),
                if clusters.is_empty() { NONE.to_string() } else { clusters },
            ]
        })
        .collect();
    table(&["APIVERSION", "KIND", "RESOURCE", "NAMESPACED", "OBJECTS", "CLUSTERS"], &rows)
}

pub(crate) fn stats_table(stats: &Stats) -> String {
    let mut out = table(
        &["HEAD-RV", "COMPACTED-RV", "OBJECTS", "EVENTS", "DATA-DIR", "WATCHES", "CLUSTERS"],
        &[vec![
            stats.head_resource_version.to_string(),
            stats.compacted_resource_version.to_string(),
            stats.objects.to_string(),
            stats.events.to_string(),
            human_bytes(stats.data_dir_bytes),
            stats.watches.to_string(),
            stats.clusters.to_string(),
        ]],
    );
    if !stats.watch_clients_by_user_agent.is_empty() {
        let rows: Vec<Vec<String>> =
            stats.watch_clients_by_user_agent.iter().map(|(agent, n)| vec![agent.clone(), n.to_string()]).collect();
        out.push('\n');
        out.push_str(&table(&["USER-AGENT", "WATCHES"], &rows));
    }
    out
}

fn replicas_table(replicas: &Replicas) -> String {
    let rows: Vec<Vec<String>> = replicas
        .items
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                r.address.clone(),
                format!("{} ({}s)", r.lease, r.lease_remaining_seconds),
                r.applied_revision.to_string(),
                r.lag_revisions.to_string(),
                r.owned.len().to_string(),
                r.owned.join(","),
            ]
        })
        .collect();
    table(&["ID", "ADDRESS", "LEASE", "APPLIED-REVISION", "LAG", "OWNS", "MEMBERS"], &rows)
}

pub(crate) fn estimators_table(rows: &[EstimatorRow]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let (reachable, latency, probed, probe_error) = match &row.probe {
                None => ("<unknown>".to_string(), "-".to_string(), "<never>".to_string(), None),
                Some(p) => (
                    match (p.reachable, p.failure.as_deref()) {
                        (true, _) => "yes".to_string(),
                        (false, Some("skipped")) => "skipped".to_string(),
                        (false, _) => "no".to_string(),
                    },
                    p.latency_ms.map_or_else(|| "-".to_string(), |ms| format!("{ms:.1}ms")),
                    p.time.clone(),
                    p.error.clone(),
                ),
            };
            vec![
                row.cluster.clone(),
                row.rule.clone(),
                if row.addresses.is_empty() { NONE.to_string() } else { row.addresses.join(",") },
                reachable,
                latency,
                probed,
                row.error.clone().or(probe_error).unwrap_or_else(|| NONE.to_string()),
            ]
        })
        .collect();
    table(&["CLUSTER", "RULE", "ADDRESSES", "REACHABLE", "LATENCY", "PROBED", "ERROR"], &rows)
}

/// `1536` -> `1.5 KiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Bytes per second over `elapsed` (0 before any time passed).
fn human_rate(bytes: u64, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 { (bytes as f64 / seconds) as u64 } else { 0 };
    format!("{}/s", human_bytes(rate))
}

/// The progress line of a backup being received.
fn progress_line(bytes: u64, elapsed: Duration) -> String {
    format!("receiving backup: {} ({})", human_bytes(bytes), human_rate(bytes, elapsed))
}

/// The closing line of a finished backup.
fn summary_line(out: &Path, bytes: u64, elapsed: Duration) -> String {
    format!(
        "backup written to {}: {} ({bytes} bytes) in {:.1}s, {}",
        out.display(),
        human_bytes(bytes),
        elapsed.as_secs_f64(),
        human_rate(bytes, elapsed)
    )
}

/// A line of stderr redrawn in place with `\r`.
struct ProgressLine {
    width: usize,
    last_draw: Option<Instant>,
}

impl ProgressLine {
    /// Redraws `text` unless the last redraw is more recent than [`PROGRESS_INTERVAL`].
    fn update(&mut self, text: &str) {
        if self.last_draw.is_some_and(|t| t.elapsed() < PROGRESS_INTERVAL) {
            return;
        }
        self.last_draw = Some(Instant::now());
        self.draw(text, false);
    }

    /// Draws `text` over the previous one, padded to cover it, and ends the line when `last`.
    fn draw(&mut self, text: &str, last: bool) {
        let len = text.chars().count();
        let pad = self.width.saturating_sub(len);
        self.width = self.width.max(len);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{text}{:pad$}{}", "", if last { "\n" } else { "" });
        let _ = stderr.flush();
    }
}

/// `POST /admin/v1/backup` into `out`: written to `OUT.partial` (mode 0600)
/// while it streams, renamed to `out` once complete and synced, removed on failure.
fn backup(api: &AdminApi, out: &Path, include_credentials: bool) -> anyhow::Result<()> {
    let file_name = out.file_name().with_context(|| format!("--out {} names no file", out.display()))?;
    let partial = out.with_file_name(format!("{}.partial", file_name.to_string_lossy()));
    let mut progress = ProgressLine { width: 0, last_draw: None };
    progress.draw("waiting for the backup to start...", false);
    let start = Instant::now();
    let result = (|| -> anyhow::Result<u64> {
        let request = api.request(Method::POST, &["backup"], None).query(&[("includeCredentials", include_credentials)]);
        let mut response = api.send(request)?;
        let mut file = create_private(&partial)?;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut bytes = 0u64;
        loop {
            let n = match response.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(anyhow!(e).context(format!("the backup stream broke after {bytes} bytes"))),
            };
            file.write_all(&buffer[..n]).with_context(|| format!("cannot write {}", partial.display()))?;
            bytes += n as u64;
            progress.update(&progress_line(bytes, start.elapsed()));
        }
        file.sync_all().with_context(|| format!("cannot sync {}", partial.display()))?;
        std::fs::rename(&partial, out).with_context(|| format!("cannot rename {} to {}", partial.display(), out.display()))?;
        Ok(bytes)
    })();
    match result {
        Ok(bytes) => {
            progress.draw(&summary_line(out, bytes, start.elapsed()), true);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            progress.draw("backup failed", true);
            Err(e)
        }
    }
}

/// Creates (or truncates) a file only its owner may read: a backup holds
/// every object of the fleet, and may hold member credentials.
fn create_private(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_flatten_line_breaks() {
        let text = table(
            &["NAME", "PHASE", "LAST-ERROR"],
            &[
                vec!["member1".into(), "Synced".into(), NONE.into()],
                vec!["m2".into(), "Stale".into(), "watch stream broke:\nconnection reset".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME      PHASE    LAST-ERROR\n\
             member1   Synced   <none>\n\
             m2        Stale    watch stream broke: connection reset\n"
        );
    }

    #[test]
    fn the_clusters_table_sums_objects_over_resource_types() {
        let list: ClusterList = serde_saphyr::from_str(
            r#"{"items": [{"spec": {"name": "member1", "url": "http://x"}, "source": "config",
                "status": {"phase": "Stale", "synced": false, "stale": true, "lastError": "connection refused",
                  "reconnects": 4, "relists": 2, "events": 9,
                  "resources": {"v1/pods": {"state": "stale", "objects": 16, "checkpoint": "7", "lastError": null,
                                            "relists": 1, "reconnects": 2, "events": 9},
                                "v1/nodes": {"state": "synced", "objects": 3, "checkpoint": null, "lastError": null,
                                             "relists": 1, "reconnects": 2, "events": 0}}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            clusters_table(&list),
            "NAME      SOURCE   PHASE   OBJECTS   RELISTS   RECONNECTS   LAST-ERROR\n\
             member1   config   Stale   19        2         4            connection refused\n"
        );
    }

    #[test]
    fn estimator_rows_say_whether_the_probe_reached_the_estimator() {
        let rows: Vec<EstimatorRow> = serde_saphyr::from_str(
            r#"[{"cluster": "member1", "addresses": ["127.0.0.1:4000"], "rule": "static",
                 "probe": {"reachable": true, "address": "127.0.0.1:4000", "latencyMs": 0.46, "time": "2026-01-01T00:00:00Z"}},
                {"cluster": "member2", "addresses": [], "rule": "clusterIP", "error": "service has no port 10352", "probe": null},
                {"cluster": "member3", "addresses": ["e.svc:10352"], "rule": "dnsFallback",
                 "probe": {"reachable": false, "failure": "skipped", "error": "not probed", "time": "2026-01-01T00:00:01Z"}}]"#,
        )
        .unwrap();
        let text = estimators_table(&rows);
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split("   ").map(str::trim).filter(|s| !s.is_empty()).collect()).collect();
        assert_eq!(lines[0], ["CLUSTER", "RULE", "ADDRESSES", "REACHABLE", "LATENCY", "PROBED", "ERROR"]);
        assert_eq!(lines[1], ["member1", "static", "127.0.0.1:4000", "yes", "0.5ms", "2026-01-01T00:00:00Z", "<none>"]);
        assert_eq!(lines[2], ["member2", "clusterIP", "<none>", "<unknown>", "-", "<never>", "service has no port 10352"]);
        assert_eq!(lines[3], ["member3", "dnsFallback", "e.svc:10352", "skipped", "-", "2026-01-01T00:00:01Z", "not probed"]);
    }

    #[test]
    fn stats_show_watch_clients_only_when_there_are_some() {
        let mut stats = Stats {
            head_resource_version: 387,
            compacted_resource_version: 12,
            objects: 376,
            events: 387,
            data_dir_bytes: 2_798_647,
            watches: 0,
            watch_clients_by_user_agent: BTreeMap::new(),
            clusters: 3,
        };
        assert_eq!(
            stats_table(&stats),
            "HEAD-RV   COMPACTED-RV   OBJECTS   EVENTS   DATA-DIR   WATCHES   CLUSTERS\n\
             387       12             376       387      2.7 MiB    0         3\n"
        );
        stats.watches = 2;
        stats.watch_clients_by_user_agent.insert("kubectl/v1.33.1".into(), 2);
        assert!(stats_table(&stats).ends_with("\nUSER-AGENT        WATCHES\nkubectl/v1.33.1   2\n"), "{}", stats_table(&stats));
    }

    #[test]
    fn sizes_and_rates_read_like_a_person_writes_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(human_rate(10 * 1024 * 1024, Duration::from_secs(2)), "5.0 MiB/s");
        assert_eq!(human_rate(100, Duration::ZERO), "0 B/s");
        assert_eq!(progress_line(2048, Duration::from_secs(1)), "receiving backup: 2.0 KiB (2.0 KiB/s)");
        assert_eq!(
            summary_line(Path::new("/tmp/b.bin"), 964_512, Duration::from_millis(500)),
            "backup written to /tmp/b.bin: 941.9 KiB (964512 bytes) in 0.5s, 1.8 MiB/s"
        );
    }

    #[test]
    fn admin_urls_keep_the_server_path_and_encode_names() {
        let api = |server: &str| AdminApi { http: Client::new(), server: Url::parse(server).unwrap(), token: None };
        assert_eq!(api("http://127.0.0.1:8080").url(&["clusters"]).as_str(), "http://127.0.0.1:8080/admin/v1/clusters");
        assert_eq!(
            api("https://gw.example/kubefold/").url(&["clusters", "a/b?c"]).as_str(),
            "https://gw.example/kubefold/admin/v1/clusters/a%2Fb%3Fc"
        );
    }

    #[test]
    fn token_files_give_their_first_line() {
        let dir = std::env::temp_dir().join(format!("kubefold-admin-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "  s3cret \nsecond line\n").unwrap();
        assert_eq!(read_token_file(&file).unwrap(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(read_token_file(&file).unwrap_err().to_string().contains("is empty"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
