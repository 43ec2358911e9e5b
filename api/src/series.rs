//! Every metric series kubefold exports, in one catalog: name, type and help
//! text. The series the recorder keeps are described at start and exported
//! from the start at zero, as Prometheus' instrumentation guide asks
//! (<https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics>),
//! so a query or an alert can tell zero from missing. The series that
//! describe the moment (the process, the build, the members' sync state and
//! object counts) are written at scrape time, so a removed member's series
//! go with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kubefold_actors::cluster_series::label;

use kubefold_actors::fleet::{Fleet, SyncState};

/// The type of a series in the exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (reset at restart).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets, with their sum and count.
    Histogram,
}

/// One series family of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it counts, for `# HELP`.
    pub help: &'static str,
}

const fn family(name: &'static str, kind: Kind, labels: &'static [&'static str], help: &'static str) -> Family {
    Family { name, kind, labels, help }
}

/// The series the metrics recorder keeps (updated where they happen).
pub const RECORDED: &[Family] = &[
    family("kubefold_events_ingested_total", Kind::Counter, &["cluster", "resource"], "Member events committed to the event log."),
    family("kubefold_commit_duration_seconds", Kind::Histogram, &[], "Time to commit one batch of events to the store."),
    family("kubefold_commit_batch_events", Kind::Histogram, &[], "Events in one committed batch."),
    family("kubefold_commit_failures_total", Kind::Counter, &["cause"], "Batches the store failed to commit, by cause (`no-space`, `read-only`, `io`, `corrupt`, `other`)."),
    family("kubefold_head_resource_version", Kind::Gauge, &[], "The newest resourceVersion committed."),
    family("kubefold_compacted_resource_version", Kind::Gauge, &[], "The resourceVersion up to which the event log is compacted."),
    family("kubefold_compacted_events_total", Kind::Counter, &[], "Events removed from the event log by compaction."),
    family("kubefold_index_snapshot_bytes", Kind::Gauge, &[], "Size of the last index snapshot written."),
    family("kubefold_index_snapshot_duration_seconds", Kind::Histogram, &[], "Time to write an index snapshot."),
    family("kubefold_store_bytes", Kind::Gauge, &[], "Bytes of the data dir on disk."),
    family("kubefold_store_pinned_reads", Kind::Gauge, &[], "Reads holding log segments against compaction."),
    family("kubefold_store_damaged_records_total", Kind::Counter, &[], "Event log records found damaged while reading them (each is logged, counted once, and repaired while serving)."),
    family("kubefold_watches", Kind::Gauge, &[], "Open watch streams."),
    family("kubefold_watch_slow_closed_total", Kind::Counter, &["reason"], "Watches closed because their client read too slowly (reason: `watch_bound`, the watch's own 1,024 events or 4 MiB, or `client_budget`, its client's budget over all its watches)."),
    family("kubefold_watch_client_closed_total", Kind::Counter, &[], "Watches ended because their client closed the connection."),
    family("kubefold_connections", Kind::Gauge, &[], "Open client connections."),
    family("kubefold_connections_overflow_total", Kind::Counter, &[], "Connections answered once by the overflow lane (health checks, or 503 with Retry-After) because the connection limit was reached."),
    family("kubefold_streams", Kind::Gauge, &["subresource"], "Open streams forwarded to members (exec, attach, portforward, proxy)."),
    family("kubefold_stream_bytes_total", Kind::Counter, &["direction"], "Bytes of forwarded streams, by direction (`to_member`, `from_member`)."),
    family("kubefold_watch_messages_total", Kind::Counter, &[], "Writes to watch clients."),
    family("kubefold_watch_lines_total", Kind::Counter, &[], "Watch events written to clients."),
    family("kubefold_requests_total", Kind::Counter, &["verb", "resource", "code"], "API requests answered, by verb, resource type and HTTP code."),
    family("kubefold_request_duration_seconds", Kind::Histogram, &["verb", "resource"], "Time to answer an API request (watches excluded)."),
    family("kubefold_auth_rejected_total", Kind::Counter, &["reason"], "Requests refused by authentication, authorization or limits."),
    family("kubefold_token_reviews_total", Kind::Counter, &["result"], "Bearer tokens reviewed by the control plane (--authentication-kubeconfig), by result: authenticated, refused, cached, error."),
    family("kubefold_access_reviews_total", Kind::Counter, &["result"], "Requests asked of the control plane (--authorization-kubeconfig), by result: allowed, denied, cached, error."),
    family("kubefold_audit_events_total", Kind::Counter, &["stage"], "Audit events written, by stage."),
    family("kubefold_audit_event_errors_total", Kind::Counter, &[], "Audit events that could not be written to the audit log."),
    family("kubefold_member_errors_total", Kind::Counter, &["cluster"], "Failed requests to a member cluster."),
    family("kubefold_member_relists_total", Kind::Counter, &["cluster"], "Full lists of a member's types (initial and after 410)."),
    family("kubefold_member_bad_objects_total", Kind::Counter, &["cluster"], "Objects from a member that could not be ingested."),
    family("kubefold_member_relists_waiting", Kind::Gauge, &[], "Member lists waiting for their turn (at most relistConcurrency relists and initialListConcurrency initial lists run at once)."),
    family("kubefold_etcd_applied_revision", Kind::Gauge, &[], "On etcd: the log revision this replica applied."),
    family("kubefold_etcd_lag_revisions", Kind::Gauge, &[], "On etcd: revisions of the log's head this replica has not applied yet."),
    family("kubefold_etcd_owned_members", Kind::Gauge, &[], "On etcd: members this replica owns (watches and writes the changes of)."),
    family("kubefold_etcd_fenced_writes_total", Kind::Counter, &[], "On etcd: commits refused because another replica owns the member now."),
    family("kubefold_estimator_endpoints", Kind::Gauge, &["rule"], "Scheduler-estimator endpoints by the rule that resolved them."),
    family("kubefold_estimator_probe_failures_total", Kind::Counter, &["cluster"], "Failed probes of a member's scheduler-estimator endpoint."),
    family("kubefold_estimator_probe_duration_seconds", Kind::Histogram, &[], "Time of one scheduler-estimator probe."),
    family("kubefold_config_reloads_total", Kind::Counter, &["result"], "Configuration reloads (SIGHUP), by result."),
];

/// The series written at scrape time ([`scrape_time`]).
pub const AT_SCRAPE: &[Family] = &[
    family("kubefold_build_info", Kind::Gauge, &["version"], "Always 1; the version of the running kubefold."),
    family("kubefold_objects", Kind::Gauge, &["cluster", "resource"], "Objects in the index."),
    family("kubefold_member_synced", Kind::Gauge, &["cluster", "resource"], "1 when the member's type is synced, 0 while connecting or stale."),
    family("kubefold_member_lag_seconds", Kind::Gauge, &["cluster"], "Time since every type of the member was last synced (0 while synced)."),
    family("process_cpu_seconds_total", Kind::Counter, &[], "User and system CPU time spent."),
    family("process_resident_memory_bytes", Kind::Gauge, &[], "Resident memory size."),
    family("process_virtual_memory_bytes", Kind::Gauge, &[], "Virtual memory size."),
    family("process_open_fds", Kind::Gauge, &[], "Open file descriptors."),
    family("process_max_fds", Kind::Gauge, &[], "The soft limit of open file descriptors."),
    family("process_start_time_seconds", Kind::Gauge, &[], "Start time of the process since the Unix epoch."),
];

/// Reasons of [`RECORDED`]'s `kubefold_auth_rejected_total`, exported at zero.
const REJECT_REASONS: &[&str] = &["Unauthorized", "Forbidden", "TooManyRequests"];

/// Describes every recorded series and exports the unlabelled ones, and
/// those whose labels are known at start, at zero. Call once, after the
/// recorder is installed.
pub fn describe() {
    for family in RECORDED {
        match family.kind {
            Kind::Counter => metrics::describe_counter!(family.name, family.help),
            Kind::Gauge => metrics::describe_gauge!(family.name, family.help),
            Kind::Histogram if family.name.ends_with("_seconds") => metrics::describe_histogram!(family.name, metrics::Unit::Seconds, family.help),
            Kind::Histogram => metrics::describe_histogram!(family.name, metrics::Unit::Count, family.help),
        }
        if family.labels.is_empty() {
            match family.kind {
                Kind::Counter => metrics::counter!(family.name).increment(0),
                Kind::Gauge => metrics::gauge!(family.name).increment(0.0),
                // A histogram is exported once it has an observation.
                Kind::Histogram => {}
            }
        }
    }
    for reason in REJECT_REASONS {
        metrics::counter!("kubefold_auth_rejected_total", "reason" => *reason).increment(0);
    }
    for reason in ["watch_bound", "client_budget"] {
        metrics::counter!("kubefold_watch_slow_closed_total", "reason" => reason).increment(0);
    }
    for cause in kubefold_store::Cause::ALL {
        metrics::counter!("kubefold_commit_failures_total", "cause" => cause.label()).increment(0);
    }
    for result in ["success", "failure"] {
        metrics::counter!("kubefold_config_reloads_total", "result" => result).increment(0);
    }
    for subresource in ["exec", "attach", "portforward", "proxy"] {
        metrics::gauge!("kubefold_streams", "subresource" => subresource).increment(0.0);
    }
    for direction in ["to_member", "from_member"] {
        metrics::counter!("kubefold_stream_bytes_total", "direction" => direction).increment(0);
    }
}

/// Exports at zero the labelled series of the members and types the fleet
/// has now (a member added later gets its zeros at the next scrape).
pub fn zero_member_series(fleet: &Fleet) {
    for (cluster, watchers) in fleet.status() {
        let cluster = label(&cluster);
        for name in ["kubefold_member_errors_total", "kubefold_member_relists_total", "kubefold_member_bad_objects_total", "kubefold_estimator_probe_failures_total"] {
            metrics::counter!(name, "cluster" => cluster.clone()).increment(0);
        }
        for resource in watchers.keys() {
            metrics::counter!("kubefold_events_ingested_total", "cluster" => cluster.clone(), "resource" => resource.clone()).increment(0);
        }
    }
    for resource in fleet.catalog().iter() {
        for verb in ["get", "list", "watch"] {
            metrics::counter!("kubefold_requests_total", "verb" => verb, "resource" => resource.key(), "code" => "200").increment(0);
        }
    }
}

/// The series of [`AT_SCRAPE`] in the text exposition format.
pub fn scrape_time(fleet: &Fleet) -> String {
    let mut out = String::new();
    let header = |out: &mut String, name: &str| {
        if let Some(f) = AT_SCRAPE.iter().find(|f| f.name == name) {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", f.name, f.help, f.name, kind);
        }
    };
    header(&mut out, "kubefold_build_info");
    let _ = writeln!(out, "kubefold_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));

    let members = fleet.member_names();
    let mut status = fleet.status();
    status.retain(|cluster, _| members.contains(cluster));
    let snapshot = fleet.snapshot();
    // Per series label (a member's name, or `_other` for the members past
    // the bound): objects summed, synced only when all are, the largest lag.
    let mut objects: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut synced: BTreeMap<(String, String), bool> = BTreeMap::new();
    let mut lags: BTreeMap<String, std::time::Duration> = BTreeMap::new();
    for (cluster, watchers) in &status {
        let series = label(cluster);
        for (resource, watcher) in watchers {
            *objects.entry((series.clone(), resource.clone())).or_default() += snapshot.count_cluster(resource, cluster);
            let all = synced.entry((series.clone(), resource.clone())).or_insert(true);
            *all &= watcher.state == SyncState::Synced;
        }
        let lag = watchers.values().map(|w| w.lag()).max().unwrap_or_default();
        let largest = lags.entry(series).or_default();
        *largest = (*largest).max(lag);
    }
    header(&mut out, "kubefold_objects");
    for ((cluster, resource), count) in &objects {
        let _ = writeln!(out, "kubefold_objects{{cluster=\"{}\",resource=\"{}\"}} {count}", escape(cluster), escape(resource));
    }
    header(&mut out, "kubefold_member_synced");
    for ((cluster, resource), all) in &synced {
        let _ = writeln!(out, "kubefold_member_synced{{cluster=\"{}\",resource=\"{}\"}} {}", escape(cluster), escape(resource), u8::from(*all));
    }
    header(&mut out, "kubefold_member_lag_seconds");
    for (cluster, lag) in &lags {
        let _ = writeln!(out, "kubefold_member_lag_seconds{{cluster=\"{}\"}} {:.3}", escape(cluster), lag.as_secs_f64());
    }
    if let Some(process) = ProcessFigures::read() {
        for (name, value) in [
            ("process_cpu_seconds_total", process.cpu_seconds),
            ("process_resident_memory_bytes", process.resident_bytes),
            ("process_virtual_memory_bytes", process.virtual_bytes),
            ("process_open_fds", process.open_fds),
            ("process_max_fds", process.max_fds),
            ("process_start_time_seconds", process.start_time_seconds),
        ] {
            header(&mut out, name);
            let _ = writeln!(out, "{name} {value}");
        }
    }
    out
}

/// A label value as the exposition format quotes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The process figures of the Prometheus client libraries' process
/// collector, read from `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ProcessFigures {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    open_fds: f64,
    max_fds: f64,
    start_time_seconds: f64,
}

impl ProcessFigures {
    fn read() -> Option<ProcessFigures> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        ProcessFigures::parse(&stat, &limits, boot_time, ticks, page, open_fds)
    }

    /// From `/proc/self/stat` (proc(5): utime, stime, starttime, vsize, rss
    /// are fields 14, 15, 22, 23, 24, counted after the command name, which
    /// may hold spaces and parentheses) and `/proc/self/limits`.
    fn parse(stat: &str, limits: &str, boot_time: f64, ticks: f64, page: f64, open_fds: f64) -> Option<ProcessFigures> {
        let after_name = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // `after_name` starts at field 3 (state).
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let max_fds = limits.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse::<f64>().ok()?;
        Some(ProcessFigures {
            cpu_seconds: (field(14)? + field(15)?) / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page,
            start_time_seconds: boot_time + field(22)? / ticks,
            open_fds,
            max_fds,
        })
    }
}

/// Seconds since the Unix epoch now (for tests of the start time).
#[cfg(test)]
fn now_seconds() -> f64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_figures_parse_a_stat_line_whose_command_has_spaces_and_parentheses() {
        let stat = "4242 (kube (fold) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                524288               files\n";
        let p = ProcessFigures::parse(stat, limits, 1_700_000_000.0, 100.0, 4096.0, 17.0).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.virtual_bytes, 123_456_789.0);
        assert_eq!(p.resident_bytes, 2048.0 * 4096.0);
        assert_eq!(p.start_time_seconds, 1_700_000_010.0);
        assert_eq!(p.max_fds, 20000.0);
        assert_eq!(p.open_fds, 17.0);
    }

    #[test]
    fn this_process_reads_its_own_figures() {
        let p = ProcessFigures::read().expect("/proc/self is readable");
        assert!(p.resident_bytes > 0.0 && p.open_fds >= 3.0 && p.max_fds >= p.open_fds);
        assert!(p.start_time_seconds > 1.6e9 && p.start_time_seconds <= now_seconds() + 1.0, "{p:?}");
    }

    /// Every `kubefold_*` series named in a metrics macro anywhere in the
    /// workspace's sources is in the catalog with its labels, so none is
    /// exported without help or missed by the zeros.
    #[test]
    fn every_series_the_sources_record_is_in_the_catalog() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        let mut stack: Vec<std::path::PathBuf> = ["src", "api/src", "actors/src", "engine/src", "store/src"].iter().map(|d| root.join(d)).collect();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for macro_name in ["counter!(", "gauge!(", "histogram!("] {
                        for (at, _) in text.match_indices(macro_name) {
                            let rest = text[at + macro_name.len()..].trim_start();
                            if let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
                                if name.starts_with("kubefold_") {
                                    found.push((name.to_string(), macro_name.trim_end_matches("!(").to_string(), path.display().to_string()));
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(found.len() >= 20, "the scan found too few series to be looking in the right place: {found:?}");
        for (name, kind, file) in found {
            let family = RECORDED.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("{name} ({file}) is not in series::RECORDED"));
            let expected = match family.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            assert_eq!(kind, expected, "{name} ({file}) is recorded as a {kind}");
            if family.kind == Kind::Histogram {
                assert!(name.ends_with("_duration_seconds") || !name.ends_with("_seconds"), "{name}: durations are named *_duration_seconds");
            }
        }
    }

    #[test]
    fn label_values_are_escaped_as_the_exposition_format_asks() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("a\nb"), "a\\nb");
    }
}
