//! The `kubefold` binary: parse the command line, wire, run.
//!
//! - `kubefold serve`: aggregate real member clusters.
//! - `kubefold demo`: three simulated members and kubefold over them.
//! - `kubefold sim`: one simulated member cluster API server.
//! - `kubefold status`: the fleet at a glance (members, store, estimators).
//! - `kubefold admin`: the admin API from the command line.
//! - `kubefold backup`, `kubefold restore`: a stopped kubefold's data dir to a
//!   backup file and back, with their progress on stderr (`offline`).
//!
//! Modules:
//! - `serve`: wiring of `kubefold serve` (store, index, aggregator,
//!   watchers, HTTP server) and its orderly stop.
//! - `config`: the configuration file and its defaults.
//! - `demo`: `kubefold demo`.
//! - `status`: `kubefold status`.
//! - `admin_cli`: `kubefold admin ...` over the admin REST API.
//! - `offline`: `kubefold backup` and `kubefold restore`.
//! - `resolve`: `kubefold resolve`, estimator endpoints resolved once.
//! - `karmada`: members and the resource selection from a Karmada control
//!   plane.
//! - `etcd`: etcd as the log shared by several replicas (`etcd` feature);
//!   `etcd_load`: the benchmarks' raw etcd reference load.

mod admin_cli;
mod config;
mod demo;
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_load;
mod karmada;
mod offline;
mod resolve;
mod serve;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;

/// mimalloc instead of glibc's malloc: recovering the index of 1M objects
/// allocates about 37M small strings and vectors, and glibc spent most of
/// that time in malloc, free and consolidation (BENCHMARKS.md, warm restart).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process (what mimalloc's
/// `MIMALLOC_ALLOW_THP=0` does). mimalloc asks for huge pages on its arenas,
/// and with THP a first touch of a 2 MiB region faults in a huge page that
/// the kernel must find (compacting memory on a fragmented machine) and zero:
/// page clearing was half of kubefold's CPU samples in a profiled sync. Side
/// by side on the same data dir, a warm restart at 1M objects took 3.4 to
/// 13.3 s with THP and 3.8 to 5.2 s without (BENCHMARKS.md, "Changes since
/// the previous full run"). Best effort: a kernel without the prctl leaves it as it is.
fn disable_transparent_huge_pages() {
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// Raises this process's soft limit of open files to its hard limit, as
/// every Go program does at start since Go 1.19 (so kube-apiserver too:
/// "they change the soft limit to match the hard limit",
/// <https://go.dev/doc/go1.19>): a client's connection takes two
/// descriptors here (its socket, and a second one a watch polls, see
/// `kubefold_api::watch::ConnectionSocket`), and the common soft limit of
/// 1,024 would refuse a few hundred watchers. Best effort.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

/// Files this process creates are its user's alone (umask 077: files 0600,
/// directories 0700): the data dir's files (sled's, the record log's
/// segments, the index snapshot) and backups hold every object of the
/// fleet and may hold member credentials. kubefold creates its own files
/// 0600 in any case; this covers sled's.
fn private_files() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kubefold_actors::cluster::ClusterSpec;
use kubefold_engine::names::NameStyle;

use crate::config::Config;

/// One Kubernetes-compatible API in front of many member clusters.
#[derive(Parser)]
#[command(name = "kubefold", version, about)]
struct Cli {
    /// Log format: text or json (kube-apiserver's flag name; `--log-format` is the old name).
    #[arg(long = "logging-format", alias = "log-format", global = true, value_enum, default_value_t = LoggingFormat::Text)]
    logging_format: LoggingFormat,
    /// Log verbosity, as kube-apiserver's `-v`: 0 to 2 info, 3 and 4 debug, 5 and more trace
    /// (`RUST_LOG`, when set, takes precedence).
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0)]
    verbosity: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the aggregated API over the configured member clusters.
    Serve(ServeArgs),
    /// Start three simulated member clusters and serve them (the embedded default).
    Demo(demo::DemoArgs),
    /// Run one simulated member cluster API server.
    Sim(kubefold_testdata::SimArgs),
    /// Manage a running kubefold through its admin API: clusters, resources, stats, compaction, backup.
    Admin(admin_cli::AdminArgs),
    /// The fleet at a glance: members with phase, synced types, objects and lag; the store's
    /// resourceVersions; estimator endpoints (`--watch` redraws).
    Status(status::StatusArgs),
    /// Resolve and probe the scheduler-estimator endpoints once and print them.
    Resolve(resolve::ResolveArgs),
    /// Write a consistent copy of a data dir (kubefold must not be running on it).
    Backup {
        /// The data dir.
        #[arg(long, default_value = "kubefold-data")]
        data_dir: PathBuf,
        /// The backup file to write (mode 0600).
        #[arg(long)]
        out: PathBuf,
        /// Keep the tokens and inline kubeconfigs of members registered
        /// through the admin API (left out by default; a restore then needs
        /// them from the config file or a new registration).
        #[arg(long)]
        include_credentials: bool,
    },
    /// Create a data dir from a backup file.
    Restore {
        /// The backup file.
        #[arg(long = "in")]
        input: PathBuf,
        /// The new (empty) data dir.
        #[arg(long)]
        data_dir: PathBuf,
        /// Continue above N at least (the restored kubefold never serves a
        /// resourceVersion at or below it): for a restore of an older
        /// backup, the `min-resource-version` of a newer backup's header or
        /// the `rv-ceiling` file of the lost data dir. The backup's own
        /// header is always used.
        #[arg(long, value_name = "N", default_value_t = 0)]
        min_resource_version: u64,
    },
    /// The raw etcd reference of `ops/bench/run --etcd`: a replica's
    /// transactions written again to another etcd by a plain client.
    #[cfg(feature = "etcd")]
    #[command(hide = true)]
    EtcdRawLoad(etcd_load::RawLoadArgs),
}

/// Flags of `kubefold serve`; they override the config file.
#[derive(clap::Args)]
struct ServeArgs {
    /// YAML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The IP address to listen on, as kube-apiserver names it (the address of --listen otherwise).
    #[arg(long, conflicts_with = "listen")]
    bind_address: Option<std::net::IpAddr>,
    /// The port to listen on, as kube-apiserver names it (HTTPS when a serving certificate is given; 0 picks a free port).
    #[arg(long, conflicts_with = "listen")]
    secure_port: Option<u16>,
    /// Directory of the store.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A member: NAME=URL or NAME=KUBECONFIG[#CONTEXT]; repeatable.
    #[arg(long = "cluster")]
    clusters: Vec<String>,
    /// A file of members, one NAME=URL or NAME=KUBECONFIG[#CONTEXT] a line
    /// (what `kubefold sim --clusters N --urls-file FILE` writes); blank
    /// lines and lines starting with `#` are skipped.
    #[arg(long)]
    clusters_file: Option<PathBuf>,
    /// qualified or original.
    #[arg(long)]
    name_style: Option<NameStyle>,
    /// Seconds between watch bookmarks.
    #[arg(long)]
    bookmark_interval_seconds: Option<u64>,
    /// Milliseconds a watch gathers newly committed events before writing them (0: write each commit at once).
    #[arg(long)]
    watch_flush_interval_ms: Option<u64>,
    /// Seconds an edit waits for its change to be ingested (read-your-writes).
    #[arg(long)]
    write_wait_seconds: Option<u64>,
    /// etcd as the log shared by several replicas: client URLs, comma-separated (needs a build with `--features etcd`).
    #[arg(long, value_name = "URL[,URL]", value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// The prefix of every key kubefold writes in etcd.
    #[arg(long, value_name = "PREFIX")]
    etcd_prefix: Option<String>,
    /// CA certificate (PEM) of the etcd servers.
    #[arg(long, value_name = "FILE")]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate (PEM) for etcd, with --etcd-keyfile.
    #[arg(long, value_name = "FILE", requires = "etcd_keyfile")]
    etcd_certfile: Option<PathBuf>,
    /// Client key (PEM) for etcd.
    #[arg(long, value_name = "FILE", requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// Seconds of this replica's lease in etcd: its members are taken over by the other replicas this long after it dies or is cut off (default 15).
    #[arg(long, value_name = "SECONDS")]
    etcd_lease_ttl: Option<u64>,
    /// This replica's id among those sharing the etcd prefix (default: the host name and the listener's port).
    #[arg(long, value_name = "ID")]
    etcd_replica_id: Option<String>,
    /// Serve resourceVersions above N only: for a data dir started empty on purpose (a new disk, a restore of an older backup) while clients may hold resourceVersions up to N.
    #[arg(long, value_name = "N")]
    min_resource_version: Option<u64>,
    /// Seconds between reads of the members' OpenAPI documents.
    #[arg(long)]
    openapi_refresh_seconds: Option<u64>,
    /// Seconds a client may take no byte of a response before its connection is closed (0: never).
    #[arg(long)]
    client_stall_timeout_seconds: Option<u64>,
    /// Token file (kube-apiserver's CSV: token,user,uid,"group1,group2").
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// CA of client certificates (mTLS: CN is the user, O the groups); needs TLS.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Kubeconfig of the API server that reviews bearer tokens kubefold does
    /// not know (TokenReview), as an aggregated API server authenticates.
    #[arg(long)]
    authentication_kubeconfig: Option<PathBuf>,
    /// How long a token review's answer is reused (e.g. `10s`, `2m`).
    #[arg(long, value_parser = parse_seconds)]
    authentication_token_webhook_cache_ttl: Option<u64>,
    /// Kubeconfig of the API server that decides (SubjectAccessReview) what
    /// kubefold's own rules do not allow, as for an aggregated API server.
    #[arg(long)]
    authorization_kubeconfig: Option<PathBuf>,
    /// How long an allowed access review is reused (e.g. `10s`).
    #[arg(long, value_parser = parse_seconds)]
    authorization_webhook_cache_authorized_ttl: Option<u64>,
    /// How long a refused access review is reused (e.g. `10s`).
    #[arg(long, value_parser = parse_seconds)]
    authorization_webhook_cache_unauthorized_ttl: Option<u64>,
    /// CA of front proxies' client certificates: their requests name the
    /// user in headers (X-Remote-User, X-Remote-Group, X-Remote-Extra-*); needs TLS.
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,
    /// CNs of front proxies' certificates (comma-separated; default: any the CA signs).
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Option<Vec<String>>,
    /// Headers naming the user (comma-separated; default X-Remote-User).
    #[arg(long, value_delimiter = ',')]
    requestheader_username_headers: Option<Vec<String>>,
    /// Headers naming the groups (comma-separated; default X-Remote-Group).
    #[arg(long, value_delimiter = ',')]
    requestheader_group_headers: Option<Vec<String>>,
    /// Prefixes of the headers of extra attributes (comma-separated; default X-Remote-Extra-).
    #[arg(long, value_delimiter = ',')]
    requestheader_extra_headers_prefix: Option<Vec<String>>,
    /// Serving certificate (PEM); with --tls-private-key-file.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM); with --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback address.
    #[arg(long)]
    allow_plain_http: bool,
    /// Allow anonymous requests (default: only when no authenticator is configured).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    anonymous_auth: Option<bool>,
    /// Kubeconfig of a Karmada control plane whose Cluster and
    /// ResourceRegistry objects give members and the resource selection.
    #[arg(long)]
    karmada_kubeconfig: Option<PathBuf>,
    /// Context of `--karmada-kubeconfig`; its current context when unset.
    #[arg(long)]
    karmada_context: Option<String>,
    /// Audit log file (audit.k8s.io/v1 events, one JSON line each).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Audit policy file (audit.k8s.io/v1 Policy; default: every request at Metadata).
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Megabytes of the audit log before it is rotated (0: never).
    #[arg(long = "audit-log-maxsize")]
    audit_log_maxsize: Option<u64>,
    /// Rotated audit log files kept (0: all).
    #[arg(long = "audit-log-maxbackup")]
    audit_log_maxbackup: Option<usize>,
}

/// How log lines are written (`--logging-format`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LoggingFormat {
    /// One line of text per event; coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// The default filter at a kube-apiserver-style verbosity.
fn default_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0..=2 => "info,sled=warn,kube_client=warn,actix_server=warn",
        3..=4 => "debug,sled=info,kube_client=info,actix_server=info,hyper=info,rustls=info",
        _ => "trace",
    }
}

fn init_logs(format: LoggingFormat, verbosity: u8) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter(verbosity)));
    // A log file or the journal gets no escape sequences.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LoggingFormat::Json => builder.json().init(),
        LoggingFormat::Text => builder.init(),
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn serve_config(args: ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(l) = args.listen {
        config.listen = l;
    }
    if args.bind_address.is_some() || args.secure_port.is_some() {
        let ip = args.bind_address.unwrap_or(config.listen.ip());
        config.listen = SocketAddr::new(ip, args.secure_port.unwrap_or(config.listen.port()));
    }
    if let Some(d) = args.data_dir {
        config.data_dir = d;
    }
    if let Some(s) = args.name_style {
        config.name_style = s;
    }
    if let Some(b) = args.bookmark_interval_seconds {
        config.bookmark_interval_seconds = b;
    }
    if let Some(w) = args.watch_flush_interval_ms {
        config.watch_flush_interval_ms = w;
    }
    if let Some(r) = args.openapi_refresh_seconds {
        config.openapi_refresh_seconds = r;
    }
    if let Some(n) = args.min_resource_version {
        config.min_resource_version = n;
    }
    if !args.etcd_servers.is_empty() {
        config.etcd = Some(config::EtcdConfig { servers: args.etcd_servers, prefix: config::default_etcd_prefix(), ca_file: None, cert_file: None, key_file: None, lease_ttl_seconds: config::default_etcd_lease_ttl(), replica_id: None });
    }
    if let Some(etcd) = config.etcd.as_mut() {
        etcd.prefix = args.etcd_prefix.unwrap_or(std::mem::take(&mut etcd.prefix));
        etcd.ca_file = args.etcd_cafile.or(etcd.ca_file.take());
        etcd.cert_file = args.etcd_certfile.or(etcd.cert_file.take());
        etcd.key_file = args.etcd_keyfile.or(etcd.key_file.take());
        etcd.lease_ttl_seconds = args.etcd_lease_ttl.unwrap_or(etcd.lease_ttl_seconds);
        etcd.replica_id = args.etcd_replica_id.or(etcd.replica_id.take());
        if etcd.lease_ttl_seconds < 2 {
            anyhow::bail!("--etcd-lease-ttl (etcd.leaseTTLSeconds) is at least 2 seconds, as etcd's shortest lease");
        }
    } else if args.etcd_prefix.is_some() || args.etcd_cafile.is_some() || args.etcd_certfile.is_some() || args.etcd_lease_ttl.is_some() || args.etcd_replica_id.is_some() {
        anyhow::bail!("--etcd-prefix, --etcd-cafile, --etcd-certfile, --etcd-keyfile, --etcd-lease-ttl and --etcd-replica-id need --etcd-servers (or `etcd.servers` in the config file)");
    }
    if config.etcd.is_some() {
        etcd::supported()?;
    }
    if let Some(w) = args.write_wait_seconds {
        config.write_wait_seconds = w;
    }
    if let Some(s) = args.client_stall_timeout_seconds {
        config.client_stall_timeout_seconds = s;
    }
    if let (Some(cert), Some(key)) = (args.tls_cert_file, args.tls_private_key_file) {
        config.tls = Some(kubefold_api::tls::TlsConfig::new(cert, key));
    }
    if let Some(ca) = args.client_ca_file {
        config.auth.client_ca_file = Some(ca.clone());
        if let Some(tls) = config.tls.as_mut() {
            tls.client_ca_file = Some(ca);
        }
    }
    if let Some(tokens) = args.token_auth_file {
        config.auth.token_auth_file = Some(tokens);
    }
    if let Some(kubeconfig) = args.authentication_kubeconfig {
        config.auth.authentication_kubeconfig = Some(kubeconfig);
    }
    if let Some(ttl) = args.authentication_token_webhook_cache_ttl {
        config.auth.authentication_cache_ttl_seconds = ttl;
    }
    if let Some(ca) = args.requestheader_client_ca_file {
        config.auth.requestheader_client_ca_file = Some(ca);
    }
    if let Some(names) = args.requestheader_allowed_names {
        config.auth.requestheader_allowed_names = names;
    }
    if let Some(headers) = args.requestheader_username_headers {
        config.auth.requestheader_username_headers = headers;
    }
    if let Some(headers) = args.requestheader_group_headers {
        config.auth.requestheader_group_headers = headers;
    }
    if let Some(prefixes) = args.requestheader_extra_headers_prefix {
        config.auth.requestheader_extra_headers_prefix = prefixes;
    }
    // The listener accepts the front proxies' certificates too.
    if let Some(tls) = config.tls.as_mut() {
        if tls.requestheader_client_ca_file.is_none() {
            tls.requestheader_client_ca_file = config.auth.requestheader_client_ca_file.clone();
        }
    }
    if let Some(kubeconfig) = args.authorization_kubeconfig {
        config.auth.authorization_kubeconfig = Some(kubeconfig);
    }
    if let Some(ttl) = args.authorization_webhook_cache_authorized_ttl {
        config.auth.authorization_authorized_ttl_seconds = ttl;
    }
    if let Some(ttl) = args.authorization_webhook_cache_unauthorized_ttl {
        config.auth.authorization_unauthorized_ttl_seconds = ttl;
    }
    config.allow_plain_http |= args.allow_plain_http;
    if let Some(anonymous) = args.anonymous_auth {
        config.auth.anonymous = Some(anonymous);
    }
    if let Some(kubeconfig) = args.karmada_kubeconfig {
        config.karmada = Some(karmada::KarmadaConfig { kubeconfig, context: args.karmada_context });
    } else if let (Some(karmada), Some(context)) = (config.karmada.as_mut(), args.karmada_context) {
        karmada.context = Some(context);
    }
    if let Some(path) = args.audit_log_path {
        config.audit.log_path = Some(path);
    }
    if let Some(policy) = args.audit_policy_file {
        config.audit.policy_file = Some(policy);
    }
    if let Some(size) = args.audit_log_maxsize {
        config.audit.log_max_size = size;
    }
    if let Some(backups) = args.audit_log_maxbackup {
        config.audit.log_max_backup = backups;
    }
    for flag in &args.clusters {
        config.clusters.push(ClusterSpec::parse_flag(flag).map_err(anyhow::Error::msg)?);
    }
    if let Some(path) = &args.clusters_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("--clusters-file {}", path.display()))?;
        config.clusters.extend(cluster_lines(&text).with_context(|| format!("--clusters-file {}", path.display()))?);
    }
    config.validate()?;
    Ok(config)
}

/// The members of a `--clusters-file`: one `--cluster` value a line.
fn cluster_lines(text: &str) -> anyhow::Result<Vec<ClusterSpec>> {
    let mut clusters = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let spec = ClusterSpec::parse_flag(line).map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1))?;
        clusters.push(spec);
    }
    Ok(clusters)
}

/// Runs the command; an error ends the process with one line on stderr
/// (`kubefold: ...`, its causes joined by `: `) and exit status 1, never a
/// stack backtrace: these are the operator's errors (a bad flag, a data
/// dir in use or damaged), not kubefold's bugs.
fn main() {
    if let Err(e) = run() {
        eprintln!("kubefold: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// An error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

fn run() -> anyhow::Result<()> {
    disable_transparent_huge_pages();
    raise_open_files_limit();
    let cli = Cli::parse();
    init_logs(cli.logging_format, cli.verbosity);
    match cli.command {
        Command::Serve(args) => {
            private_files();
            let config_file = args.config.clone();
            let config = serve_config(args)?;
            let scheme = if config.tls.is_some() { "https" } else { "http" };
            serve::run(config, config_file, shutdown_signal(), move |addr| println!("kubefold listening on {scheme}://{addr}"))
        }
        Command::Demo(args) => {
            private_files();
            demo::run(args)
        }
        Command::Sim(args) => kubefold_testdata::run_cli(args).map_err(Into::into),
        Command::Resolve(args) => resolve::run(args),
        Command::Status(args) => status::run(args).map_err(|e| {
            eprintln!("kubefold status: {e:#}");
            std::process::exit(1)
        }),
        Command::Admin(args) => admin_cli::run(args).map_err(|e| {
            eprintln!("kubefold admin: {e:#}");
            std::process::exit(1)
        }),
        Command::Backup { data_dir, out, include_credentials } => {
            private_files();
            offline::backup(&data_dir, &out, include_credentials)
        }
        Command::Restore { input, data_dir, min_resource_version } => {
            private_files();
            offline::restore(&input, &data_dir, min_resource_version)
        }
        #[cfg(feature = "etcd")]
        Command::EtcdRawLoad(args) => etcd_load::run(args),
    }
}

/// Seconds of a duration flag: `10s`, `2m`, `1h`, or a number of seconds.
fn parse_seconds(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration (10s, 2m, 1h)"))?;
    match unit {
        "s" => Ok(n),
        "m" => Ok(n * 60),
        "h" => Ok(n * 3600),
        _ => Err(format!("{text:?} is not a duration (10s, 2m, 1h)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clusters_file_gives_one_member_a_line_and_names_a_bad_line() {
        let text = "# written by kubefold sim --clusters 2\nmember1=http://127.0.0.1:4001\n\n  member2=http://127.0.0.1:4002  \n";
        let clusters = cluster_lines(text).unwrap();
        let names: Vec<(&str, Option<&str>)> = clusters.iter().map(|c| (c.name.as_str(), c.url.as_deref())).collect();
        assert_eq!(names, [("member1", Some("http://127.0.0.1:4001")), ("member2", Some("http://127.0.0.1:4002"))]);
        let error = cluster_lines("member1=http://127.0.0.1:4001\nBad_Name=http://x\n").unwrap_err();
        assert!(format!("{error:#}").starts_with("line 2: "), "{error:#}");
    }
}
